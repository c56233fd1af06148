"""`ldpfleet fleet` against a recurring campaign on a real broker (loadgen/recurring.py, spec
§3.4): two rounds of 3,000 simulated devices with 10-second rounds. A stand-in aggregator (this
test: the service's ingest of round reports is built elsewhere) reads every report as the
aggregator does -- core.schedule.split_round, then the mechanism's checks -- acknowledges it,
and drops the first copy of some round-2 reports so that the fleet's re-sends are exercised.
Each device sends one nonce per round (re-sends carry the same bytes) and another in the next
round; the per-round estimates from the received reports sit within 5 sd of the `--truth`
file's counts."""
import json
import threading
import time

import numpy as np
import paho.mqtt.client as paho

from ldpfleet import cli
from ldpfleet.core import config as cc
from ldpfleet.core import protocol
from ldpfleet.core import schedule as sch
from ldpfleet.core.signing import write_signing_key
from ldpfleet.loadgen.campaign import CampaignView, phase_mechanism
from ldpfleet.mqtt import client as mqtt

N = 3000
DOMAIN = 10


class StandInAggregator:
    """Subscribes to the campaign's reports, parses and acks them (12-byte acks), dropping
    the first copy of the reports of every 10th device in round `drop_round`."""

    def __init__(self, port, campaign, mech, drop_round):
        self.mech, self.campaign, self.drop_round = mech, campaign, drop_round
        self.copies = {}  # (device, round) -> [report bytes, ...]
        self.bad = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe("ldp/%s/r/#" % campaign, 1)
        self.client.on_subscribe = lambda *a: self.ready.set()
        self.client.on_message = self.on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.ready.wait(10)

    def on_message(self, client, _userdata, msg):
        device = msg.topic.split("/r/", 1)[1]
        report = bytes(msg.payload)
        plain, r = sch.split_round(report)
        try:
            self.mech.check(plain)
        except Exception as exc:  # noqa: BLE001 -- recorded, the test asserts none
            self.bad.append((device, r, repr(exc)))
            return
        with self.lock:
            seen = self.copies.setdefault((device, r), [])
            seen.append(report)
            first = len(seen) == 1
        if first and r == self.drop_round and int(device.rsplit("-", 1)[1]) % 10 == 0:
            return  # lost: the device must re-send
        client.publish("ldp/%s/a/%s" % (self.campaign, device), protocol.ack_for(report, 0), 0)

    def stop(self):
        self.client.disconnect()
        self.client.loop_stop()


def test_fleet_runs_rounds_of_a_recurring_campaign(mosquitto, tmp_path, capsys):
    key_file = str(tmp_path / "rec.key")
    key = write_signing_key(key_file)
    now = int(time.time())
    doc = cc.make_config(
        "rec", [{"phase": 1, "mechanism": "loloha", "eps_milli": 2000,
                 "params": {"eps1_milli": 1000, "g": 2}}], {"type": "int", "size": DOMAIN},
        salt=9, not_before=now - 60, not_after=now + 3600,
        delivery={"ack": True, "retry_s": 1, "retry_max_s": 2},
        recurring={"start": now - 6, "every_s": 10, "rounds": 5})
    mqtt.publish(mqtt.as_settings(mosquitto.url), "ldp/rec/config", cc.sign(doc, key), retain=True)
    mech = phase_mechanism(CampaignView(doc, 1))
    first_round = sch.round_at(doc, int(time.time()))
    agg = StandInAggregator(mosquitto.port, "rec", mech, drop_round=first_round + 1)
    truth_file = tmp_path / "truth.json"
    t0 = time.monotonic()
    try:
        code = cli.main(["fleet", "--broker", mosquitto.url, "--campaign", "rec",
                         "--trusted-keys", key_file + ".pub", "--devices", str(N),
                         "--change-rate", "0.2", "--rounds-to-run", "2", "--truth",
                         str(truth_file), "--json"])
        out = json.loads(capsys.readouterr().out)
        time.sleep(0.3)
    finally:
        agg.stop()
    assert code == 0 and time.monotonic() - t0 < 20
    assert not agg.bad, agg.bad[:3]
    ran = [r["round"] for r in out["rounds"]]
    assert ran[1] == ran[0] + 1 and ran[0] >= first_round, ran
    for r in out["rounds"]:
        assert r["published"] == r["acknowledged"] == N and r["unacknowledged"] == 0, r
        assert r["ack_status"] == {"accepted": N, "duplicate": 0, "rejected": 0}
    assert out["rounds"][0]["redrawn"] == N  # the first round draws every value
    assert abs(out["rounds"][1]["redrawn"] - 0.2 * N) < 5 * np.sqrt(N * 0.2 * 0.8)
    assert out["rounds"][1]["resent"] >= N // 10  # the dropped first copies were re-sent
    truth = json.loads(truth_file.read_text())
    assert sorted(truth) == [str(r) for r in ran]
    nonces = {}
    for r in ran:
        keys = [k for k in agg.copies if k[1] == r]
        assert len(keys) == N  # every device once per round
        for (device, _), copies in agg.copies.items():
            if _ == r:
                assert len(set(copies)) == 1  # re-sends: the same bytes, the same nonce
                nonces.setdefault(device, []).append(copies[0][8:12])
        # the round's estimate against the truth the fleet wrote
        sketch = mech.new_sketch()
        sketch.update(np.array([np.frombuffer(sch.split_round(agg.copies[k][0])[0], np.uint8)
                                for k in keys]))
        counts = np.array([truth[str(r)].get(str(i), 0) for i in range(DOMAIN)])
        assert counts.sum() == N
        est = sketch.estimate(np.arange(DOMAIN, dtype=np.uint32))
        sd = np.sqrt(mech.item_variances(N, counts / N)) * N
        assert np.all(np.abs(est - counts) < 5 * sd), (est, counts, sd)
    assert all(len(v) == 2 and v[0] != v[1] for v in nonces.values())
