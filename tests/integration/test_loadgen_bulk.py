"""The load generator's bulk publisher (loadgen.bulk) through a broker crash: Mosquitto is
killed (SIGKILL) and restarted while 30,000 simulated devices publish at full speed into an
acknowledged campaign; the publisher reconnects and re-sends what the broker had not
acknowledged, the devices' end-to-end acks re-send what the crash lost after its PUBACK, and
`serve` accepts every report exactly once."""
import signal
import threading
import time

from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.core.signing import read_signing_key, write_signing_key
from support.brokers import PrivateMosquitto
from support.service import ServeProcess

FAST = {"ack": True, "retry_s": 1, "retry_max_s": 2}


def test_fast_fleet_survives_a_broker_kill(tmp_path):
    n = 30000
    with PrivateMosquitto() as mosq:
        key_file = str(tmp_path / "fleet.key")
        write_signing_key(key_file)
        state = "sqlite:///" + str(tmp_path / "state.db")
        with Store(state) as store:
            create_campaign(store, BrokerSettings.from_url(mosq.url), key_file, "crash", "olh",
                            "2", "64", issue=Issuance(delivery=FAST))
        serve = ServeProcess(mosq.url, state, batch_size=2000, batch_ms=50,
                             extra_args=["--no-broker-check"]).start()
        outcome = {}

        def fleet():
            try:
                outcome["result"] = run_fleet(mosq.url, "crash", read_signing_key(key_file),
                                              FleetOptions(devices=n, seed=5, ack_wait=120))
            except BaseException as exc:  # reported by the main thread
                outcome["error"] = exc

        runner = threading.Thread(target=fleet)
        try:
            runner.start()
            serve.wait_counts("crash", lambda k: k.get("received", 0) > 0, timeout=60)
            mosq.stop(sig=signal.SIGKILL)  # mid-stream: in-flight publishes and queued reports go
            time.sleep(1)
            mosq.start()
            runner.join(240)
            assert not runner.is_alive(), "the fleet did not finish"
            assert "error" not in outcome, outcome.get("error")
            result = outcome["result"]
            assert result.reconnects >= 1, "the publisher never saw the crash: no test"
            assert result.sent == n
            assert result.acks["unacknowledged"] == 0 and result.acks["acknowledged"] == n
            counts = serve.wait_counts("crash", lambda k: k.get("accepted", 0) >= n, timeout=60)
            time.sleep(1.0)  # late re-sends are duplicates, never accepted twice
            with Store(state) as store:
                counts = store.counters("crash")
            assert counts["accepted"] == n, counts
            assert counts.get("second_report", 0) == 0, counts
        finally:
            runner.join(5)
            serve.stop()
