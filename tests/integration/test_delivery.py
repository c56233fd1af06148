"""End-to-end delivery (spec §6): behind a broker with Mosquitto's DEFAULT queue limits
a burst loses nothing, because the aggregator acknowledges each report after its commit and
every kind of device (simulated, MicroPython, C) re-sends until acknowledged; the broker's own
drop counter shows the loss the acknowledgements repaired. Devices accept only an ack that names
their own report, stop at the campaign's deadline, and `broker-check` tells a stock broker from
broker-config's."""
import csv
import getpass
import json
import os
import threading
import time

import paho.mqtt.client as paho
import pytest

from ldpfleet.broker.embedded import MosquittoProcess, free_port
from ldpfleet.broker import secured as broker
from ldpfleet import cli
from ldpfleet.provision import device_runner
from ldpfleet.core import protocol
from ldpfleet.core import config as campaign_config
from ldpfleet.broker.check import check_broker
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance, campaign_status
from ldpfleet.core.signing import read_signing_key, write_signing_key
from support.brokers import PrivateMosquitto
from support.c_client import build_client, start_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc, stop_processes
from support.service import ServeProcess, scrape_metrics_until

FAST = {"ack": True, "retry_s": 1, "retry_max_s": 2}
SYS_DROPPED = "$SYS/broker/publish/messages/dropped"


def broker_dropped(port: int, timeout: float = 15.0) -> int:
    """The broker's own $SYS drop counter (retained, refreshed every sys_interval)."""
    got = threading.Event()
    value = []
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    c.on_connect = lambda cl, u, f, rc, p: cl.subscribe(SYS_DROPPED)

    def on_message(_c, _u, msg):
        value.append(int(msg.payload))
        got.set()

    c.on_message = on_message
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        assert got.wait(timeout), "no %s from the broker" % SYS_DROPPED
        return value[-1]
    finally:
        c.disconnect()
        c.loop_stop()


def start_device(kind, tmp_path, port, campaign, device_id, value=3):
    state = device_runner.prepare_device(tmp_path / device_id, device_id, SIGNING_KEY)
    log = tmp_path / (device_id + ".log")
    if kind == "mp":
        proc = device_runner.start_device(state, "127.0.0.1", port, campaign, log_path=log,
                                          value=value, once=True, timeout=40, keepalive=5)
    else:
        proc = start_client(build_client(), state, port, campaign, value, log, once=True,
                            timeout=40, keepalive=5)
    return proc, log


def wait_log(log, text, count=1, timeout=30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = log.read_text() if log.exists() else ""
        if out.count(text) >= count or time.monotonic() > deadline:
            assert out.count(text) >= count, "no %r x%d in:\n%s" % (text, count, out[-3000:])
            return out
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["mp", "c"])
def test_device_re_sends_until_its_own_ack(kind, mosquitto, tmp_path):
    """Re-sends are the identical memoised bytes; an ack with another campaign id on the
    device's own topic, one on another device's topic, and one on another campaign's topic
    change nothing; the matching ack stops the re-sends and ends a --once run."""
    name, device = "acks-" + kind, "dev-" + kind
    doc = config_doc(name, delivery=FAST)
    collector = ReportCollector(mosquitto.port)
    topic = "ldp/%s/r/%s" % (name, device)

    def mine(reports):
        return [(t, p) for t, p in reports if t == topic]

    proc = None
    try:
        collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
        proc, log = start_device(kind, tmp_path, mosquitto.port, name, device)
        reports = mine(collector.wait_for(lambda r: len(mine(r)) >= 2, 20))
        assert len(reports) >= 2 and {t for t, _ in reports} == {topic}
        assert len({p for _, p in reports}) == 1, "a re-send differs from the memoised report"
        report = reports[0][1]
        wait_log(log, "resent phase=1")

        wrong_id = bytearray(protocol.ack_for(report, protocol.ACK_ACCEPTED))
        wrong_id[4] ^= 1
        collector.publish("ldp/%s/a/%s" % (name, device), bytes(wrong_id), retain=False)
        good = protocol.ack_for(report, protocol.ACK_ACCEPTED)
        collector.publish("ldp/%s/a/other-dev" % name, good, retain=False)
        collector.publish("ldp/other-campaign/a/%s" % device, good, retain=False)
        wait_log(log, "ack-ignored")
        before = len(mine(collector.reports()))
        collector.wait_for(lambda r: len(mine(r)) > before, 10)
        assert len(mine(collector.reports())) > before, "the device stopped re-sending on a foreign ack"
        assert proc.poll() is None

        collector.publish("ldp/%s/a/%s" % (name, device), good, retain=False)
        assert proc.wait(15) == 0
        out = wait_log(log, "acked phase=1 status=0")
        assert out.count("ack-ignored") == 1  # only the one on its own topic reached it
        assert out.count("spent") == 1
        settled = len(mine(collector.barrier()))
        time.sleep(2.5)  # past retry_max_s: nothing more comes
        assert len(mine(collector.barrier())) == settled
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()


@pytest.mark.parametrize("kind", ["mp", "c"])
def test_device_stops_re_sending_at_the_deadline(kind, mosquitto, tmp_path):
    """No aggregator, no acks: the device re-sends until the campaign's not_after, logs
    `undelivered` and ends its --once run (spending once)."""
    name, device = "deadline-" + kind, "late-" + kind
    doc = config_doc(name, delivery=FAST, not_after=int(time.time()) + 6)
    collector = ReportCollector(mosquitto.port)
    topic = "ldp/%s/r/%s" % (name, device)
    proc = None
    try:
        collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
        proc, log = start_device(kind, tmp_path, mosquitto.port, name, device)
        assert proc.wait(30) == 0
        out = wait_log(log, "undelivered phase=1")
        assert out.count("spent") == 1 and out.count("resent phase=1") >= 2
        reports = [(t, p) for t, p in collector.barrier() if t == topic]
        assert len(reports) >= 3 and len({p for _, p in reports}) == 1
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()


def test_burst_behind_a_stock_broker_is_accepted_exactly_once(tmp_path):
    """The delivery acceptance run: Mosquitto with its default limits (max_queued_messages 1000),
    10,000 simulated, 5 MicroPython and 2 C devices in one burst, `serve` killed -9 once the
    burst is under way and restarted: every report is accepted exactly once, and the broker's
    drop counter rose (without acknowledgements those reports would be lost)."""
    simulated, mp, c = 10000, 5, 2
    with PrivateMosquitto(stock=True, extra_conf="sys_interval 1\n") as mosq:
        key_file = str(tmp_path / "fleet.key")
        write_signing_key(key_file)
        state = "sqlite:///" + str(tmp_path / "state.db")
        with Store(state) as store:
            create_campaign(store, BrokerSettings.from_url(mosq.url), key_file, "burst", "olh",
                            "2", "64", issue=Issuance(delivery=FAST))
        metrics_port = free_port()
        serve = ServeProcess(mosq.url, state, batch_size=500, batch_ms=100,
                             metrics_port=metrics_port, extra_args=["--no-broker-check"]).start()
        outcome = {}

        def fleet():
            try:
                outcome["result"] = run_fleet(mosq.url, "burst", read_signing_key(key_file), FleetOptions(
                    devices=simulated, micropython=mp, c_clients=c, seed=12, ack_wait=120,
                    c_client=str(build_client())))
            except BaseException as exc:  # reported by the main thread
                outcome["error"] = exc

        runner = threading.Thread(target=fleet)
        try:
            dropped_before = broker_dropped(mosq.port)
            runner.start()
            serve.wait_counts("burst", lambda k: k.get("received", 0) > 0, timeout=60)
            serve.kill()  # mid-burst: the broker queues 1000 for the absent session, drops the rest
            time.sleep(3)
            serve.start()
            runner.join(300)
            assert not runner.is_alive(), "the fleet did not finish"
            assert "error" not in outcome, outcome.get("error")
            result = outcome["result"]
            total = simulated + mp + c
            assert result.sent == total
            assert result.acks["unacknowledged"] == 0 and result.acks["acknowledged"] == total
            assert result.acks["simulated"]["resent"] > 0
            counts = serve.wait_counts("burst", lambda k: k.get("accepted", 0) >= total, timeout=60)
            time.sleep(1.5)  # late duplicates still get counted as such, never accepted
            with Store(state) as store:
                counts = store.counters("burst")
                seen = (store.seen_count("burst"),
                        store.devices_per_campaign().get("burst", 0))
            assert counts["accepted"] == total, counts
            assert counts.get("second_report", 0) == 0, counts
            assert seen == (total, total)
            assert broker_dropped(mosq.port) > dropped_before, "the broker dropped nothing: no test"
            time.sleep(2.5)  # serve reads the counter every sys_interval (1 s here)
            with Store(state) as store:
                status = campaign_status(store, "burst")
            seen = status["broker_drops"]["seen_by_serve"]
            assert seen > 0, status["broker_drops"]
            text = scrape_metrics_until(metrics_port, ["ldpfleet_broker_drops_seen %.1f" % seen])
            assert "ldpfleet_acks_published_total" in text
            assert "max_queued_messages" in serve.log()  # the ERROR names what to change
        finally:
            serve.stop()
            runner.join(60)


def test_broker_check_flags_a_stock_broker_and_passes_broker_config(tmp_path):
    with PrivateMosquitto(stock=True, extra_conf="sys_interval 1\n") as stock:
        result = check_broker(stock.url, messages=2000)
        assert not result.passed and 900 <= result.kept < 2000, result.to_json()
        assert "max_queued_messages" in result.summary()
        assert cli.main(["broker-check", "--broker", stock.url]) == 4
        state = "sqlite:///" + str(tmp_path / "s.db")
        serve = ServeProcess(stock.url, state).start()
        try:  # serve's own preflight: a warning, and it keeps serving
            deadline = time.monotonic() + 30
            while "broker-check: " not in serve.log() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "WARNING broker-check: " in serve.log() and "DROPS" in serve.log()
            assert serve.alive()
            # the check's own dropped messages are not reported as reports the broker dropped
            dropped_by_check = broker_dropped(stock.port)
            assert dropped_by_check >= 2000 - result.kept
            time.sleep(2.5)  # serve reads the counter every sys_interval (1 s here)
            assert "the broker dropped" not in serve.log(), serve.log()
        finally:
            serve.stop()
        with Store(state) as store:
            assert store.counters(None).get("received", 0) == 0
            from ldpfleet.service.ingest.broker_watch import drops_in_state
            assert drops_in_state(store)["seen_by_serve"] == 0

    devices = tmp_path / "devices.txt"
    devices.write_text("dev-a\n")
    port = free_port()
    out = tmp_path / "broker"
    assert cli.main(["broker-config", "--out", str(out), "--aggregator-user", "agg",
                     "--devices-file", str(devices), "--port", str(port), "--bind", "127.0.0.1",
                     "--insecure-plaintext",
                     "--run-as", getpass.getuser(), "--log-file", str(tmp_path / "m.log")]) == 0
    with open(out / "credentials.csv") as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    proc = MosquittoProcess(str(out / "mosquitto.conf"), port,
                            log_path=str(tmp_path / "m.log")).start()
    try:
        url = "mqtt://127.0.0.1:%d" % port
        # one login, one client id: it runs under use_username_as_clientid, as the admin
        result = check_broker(BrokerSettings.from_url(url, username="agg-admin",
                                                      password=creds["agg-admin"]))
        assert result.passed, result.to_json()
        pw = tmp_path / "admin.pw"
        pw.write_text(creds["agg-admin"] + "\n")
        os.chmod(pw, 0o600)
        assert cli.main(["broker-check", "--broker", url, "--username", "agg-admin",
                         "--password-file", str(pw)]) == 0
    finally:
        proc.stop()


def test_campaign_create_writes_the_delivery_it_is_given(mosquitto, tmp_path):
    key = tmp_path / "k"
    write_signing_key(str(key))
    state = "sqlite:///" + str(tmp_path / "s.db")
    base = ["campaign", "create", "--broker", mosquitto.url, "--state", state, "--signing-key",
            str(key), "--mechanism", "grr", "--epsilon", "1", "--domain", "8"]
    assert cli.main(base + ["--name", "d1"]) == 0
    assert cli.main(base + ["--name", "d2", "--retry-s", "5", "--retry-max-s", "60"]) == 0
    assert cli.main(base + ["--name", "d3", "--no-ack"]) == 0
    assert cli.main(base + ["--name", "d4", "--retry-s", "9", "--retry-max-s", "3"]) == 2
    # the first-publish spread (spec §6): fleet size over drain rate, or given
    assert cli.main(base + ["--name", "s1", "--fleet-size", "10000"]) == 0
    assert cli.main(base + ["--name", "s2", "--fleet-size", "10000", "--drain-rate", "250"]) == 0
    assert cli.main(base + ["--name", "s3", "--spread-s", "7"]) == 0
    assert cli.main(base + ["--name", "s4", "--spread-s", "86401"]) == 2
    assert cli.main(base + ["--name", "s5", "--spread-s", "7", "--fleet-size", "10"]) == 2
    with Store(state) as store:
        names = ("d1", "d2", "d3", "s1", "s2", "s3")
        got = {n: store.require_campaign(n).config["delivery"] for n in names}
        assert {"d4", "s4", "s5"}.isdisjoint(c.name for c in store.campaigns())
    assert got["d1"] == campaign_config.DEFAULT_DELIVERY  # fleet size unknown: no spread
    assert got["d2"] == {"ack": True, "retry_s": 5, "retry_max_s": 60}
    assert got["d3"]["ack"] is False
    assert [got[n]["spread_s"] for n in ("s1", "s2", "s3")] == [10, 40, 7]


def test_campaign_create_says_what_spread_it_chose(mosquitto, tmp_path, capsys):
    """Without --fleet-size the spread comes from the most devices one campaign of this state
    has had; the choice and its reason are printed (and in --json)."""
    from support.service import fold_batch, report_messages
    key = tmp_path / "k"
    write_signing_key(str(key))
    state = "sqlite:///" + str(tmp_path / "s.db")
    base = ["campaign", "create", "--broker", mosquitto.url, "--state", state, "--signing-key",
            str(key), "--mechanism", "grr", "--epsilon", "1", "--domain", "8"]
    assert cli.main(base + ["--name", "first"]) == 0
    assert "delivery.spread_s 0: no spread: fleet size unknown" in capsys.readouterr().out
    with Store(state) as store:
        mech = store.require_campaign("first").mechanism(1)
    import numpy as np
    rng = np.random.default_rng(3)
    fold_batch(state, report_messages("first", mech.perturb_batch(rng.integers(0, 8, 2500), rng)))
    assert cli.main(base + ["--name", "second", "--drain-rate", "1000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["delivery"]["spread_s"] == 2
    assert out["spread"] == ("delivery.spread_s 2: 2500 devices (the most devices one campaign "
                             "of this state has had) at 1000 reports/s (--drain-rate)")
