"""The load generator behaves like the devices it simulates (loadgen/schedule.py): each
simulated device publishes first after its own U[0, spread_s) and re-sends on its own timer
(retry_s x U[0.5, 1.5), doubling up to retry_max_s), so neither the first publishes nor the
re-sends are one fleet-wide burst; and the simulated fleet of a campaign is fixed (seed = the
campaign id), so running `fleet` again re-sends the same devices' reports instead of adding
devices."""
import json
import threading
import time

import numpy as np
import paho.mqtt.client as paho

from ldpfleet import cli
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.loadgen.schedule import DeviceSchedule
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.core.signing import read_signing_key, write_signing_key
from support.service import ServeProcess


def test_first_publishes_spread_and_each_device_keeps_its_own_timer():
    rng = np.random.default_rng(1)
    active = np.arange(0, 2000, 2)  # every other fleet index reports in this phase
    s = DeviceSchedule(2000, active, {"ack": True, "retry_s": 10, "retry_max_s": 25,
                                      "spread_s": 60}, rng, start=100.0)
    first = s.due[active]
    assert np.all((first >= 100.0) & (first < 160.0)) and np.isinf(s.due[1::2]).all()
    assert abs(first.mean() - 130.0) < 2.0 and first.std() > 15.0  # U[0, 60): sd 17.3
    assert s.take(99.0).size == 0
    due = s.take(120.0, limit=10 ** 6)
    assert set(due.tolist()) == set(active[first <= 120.0].tolist())
    s.published(due, 120.0)
    resend = s.due[due]
    assert np.all((resend >= 125.0) & (resend < 135.0)) and len(np.unique(resend)) == len(due)
    assert s.unsent == len(active) - len(due) and s.resent == 0
    acked = np.zeros(2000, bool)
    acked[due[:5]] = True
    again = s.take(200.0, acked, limit=10 ** 6)
    assert not set(due[:5].tolist()) & set(again.tolist())
    s.published(again, 200.0)
    assert s.resent == len(due) - 5
    twice = due[5:10]
    assert np.all(s.wait[twice] == 25.0)  # 10, then 20, capped at retry_max_s 25
    assert s.take(10 ** 9, limit=7).size == 7  # a chunk at a time


def test_without_acks_each_device_publishes_once():
    s = DeviceSchedule(100, np.arange(100), {"ack": False, "retry_s": 30, "retry_max_s": 60},
                       np.random.default_rng(2), start=0.0)
    assert (s.due[:100] == 0.0).all()  # no spread: all due at once
    due = s.take(0.0, limit=1000)
    s.published(due, 0.0)
    assert s.take(10 ** 9).size == 0 and s.unsent == 0


def _campaign(tmp_path, url, name, delivery):
    key_file = str(tmp_path / "fleet.key")
    write_signing_key(key_file)
    state = "sqlite:///" + str(tmp_path / "state.db")
    with Store(state) as store:
        create_campaign(store, BrokerSettings.from_url(url), key_file, name, "olh", "2", "64",
                        issue=Issuance(delivery=delivery))
    return key_file, state


def test_unacknowledged_devices_re_send_on_their_own_timers(mosquitto, tmp_path):
    """No aggregator: nobody acknowledges. 2,000 devices publish at once (no spread); their
    first re-sends arrive spread over retry_s x [0.5, 1.5) = [4, 12) s after, not in one burst
    (the old load generator re-sent every unacknowledged report at the same moment). The window
    is wide so that a loaded machine's stalls stay small beside it."""
    n = 2000
    key_file, _state = _campaign(tmp_path, mosquitto.url, "timers",
                                 {"ack": True, "retry_s": 8, "retry_max_s": 8})
    arrivals = {}
    ready = threading.Event()
    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe("ldp/timers/r/#", 1)
    sub.on_subscribe = lambda *a: ready.set()
    sub.on_message = lambda c, u, m: arrivals.setdefault(m.topic, []).append(time.monotonic())
    sub.connect("127.0.0.1", mosquitto.port)
    sub.loop_start()
    try:
        assert ready.wait(10)
        result = run_fleet(mosquitto.url, "timers", read_signing_key(key_file),
                           FleetOptions(devices=n, seed=4, ack_wait=13))
        time.sleep(1.0)
    finally:
        sub.disconnect()
        sub.loop_stop()
    assert result.acks["unacknowledged"] == n and result.acks["resent"] >= n
    firsts = np.array([t[0] for t in arrivals.values()])
    assert len(arrivals) == n and all(len(t) > 1 for t in arrivals.values())
    assert firsts.max() - firsts.min() < 2.0  # the first publishes were one burst (spread 0)
    # first re-sends, from the burst: U[4, 12) s (plus the burst's length and the subscriber's lag)
    resends = np.array([t[1] for t in arrivals.values()]) - firsts.min()
    assert resends.min() > 3.5 and resends.max() < 15.0, (resends.min(), resends.max())
    counts, _ = np.histogram(resends, bins=np.arange(4.0, 12.01, 1.0))
    assert counts.max() < 0.25 * n, counts  # uniform over [4, 12): ~1/8 in each second


def test_running_fleet_again_re_sends_the_same_devices(mosquitto, tmp_path, capsys, monkeypatch):
    """`ldpfleet fleet` twice without --seed, as a newcomer would: the second run's simulated and
    MicroPython devices are the first run's (same ids, the same bytes or their memoised
    reports), so every report of the second run is a duplicate and the fleet does not grow."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    key_file, state = _campaign(tmp_path, mosquitto.url, "again",
                                {"ack": True, "retry_s": 5, "retry_max_s": 10})
    serve = ServeProcess(mosquitto.url, state, extra_args=["--no-broker-check"]).start()
    argv = ["fleet", "--broker", mosquitto.url, "--campaign", "again", "--trusted-keys",
            key_file + ".pub", "--devices", "300", "--micropython", "1", "--json"]
    try:
        assert cli.main(argv) == 0
        first = json.loads(capsys.readouterr().out)
        serve.wait_counts("again", lambda c: c.get("accepted", 0) >= 301, timeout=60)
        assert cli.main(argv) == 0
        second = json.loads(capsys.readouterr().out)
        counts = serve.wait_counts("again", lambda c: c.get("duplicate", 0) >= 301, timeout=60)
    finally:
        serve.stop()
    with Store(state) as store:
        cid = store.require_campaign("again").campaign_id
        devices = store.devices_per_campaign()["again"]
        counts = store.counters("again")
    assert first["seed"] == second["seed"] == cid
    assert first["acks"]["simulated"]["ack_status"]["accepted"] == 300
    assert second["acks"]["simulated"]["ack_status"]["duplicate"] == 300
    assert counts["accepted"] == 301 and devices == 301, counts
    assert counts.get("second_report", 0) == 0, counts
