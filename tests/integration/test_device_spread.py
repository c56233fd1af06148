"""The first-publish spread (spec §5.4 `delivery.spread_s`, §6) on both real clients: a device
that accepts a config waits its own U[0, spread_s) seconds from the OS RNG before it publishes
(logged `wait phase=1 ms=<ms>`; devices draw different waits), and after a broker restart its
re-publish of the memoised report waits a fresh draw. The wait's independence from the value
is tests/test_device_equivalence.py's `olh-spread` case."""
import re
import threading
import time

import paho.mqtt.client as paho
import pytest

from ldpfleet.core import config as campaign_config
from test_delivery import start_device, wait_log
from support.brokers import PrivateMosquitto
from support.devices import SIGNING_KEY, ReportCollector, config_doc, stop_processes

WAIT = re.compile(r" wait phase=1 ms=(\d+)$", re.M)


class ArrivalClock:
    """When each report topic's messages reached a subscriber (time.monotonic())."""

    def __init__(self, port, campaign):
        self.times = {}
        self.lock = threading.Lock()
        ready = threading.Event()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe("ldp/%s/r/+" % campaign, 1)
        self.client.on_subscribe = lambda *a: ready.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert ready.wait(10)

    def _on_message(self, _c, _u, msg):
        with self.lock:
            self.times.setdefault(msg.topic, []).append(time.monotonic())

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.parametrize("kind", ["mp", "c"])
def test_first_publish_waits_its_own_draw(kind, mosquitto, tmp_path):
    """Three devices, spread_s 8: each publishes no earlier than its logged wait after it
    started (the wait starts once the config is accepted, later still), and the waits differ."""
    name = "spread-" + kind
    doc = config_doc(name, delivery={"ack": False, "retry_s": 30, "retry_max_s": 3600,
                                     "spread_s": 8})
    collector = ReportCollector(mosquitto.port)
    clock = ArrivalClock(mosquitto.port, name)
    procs = []
    try:
        collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
        started = {}
        for i in range(3):
            device = "sp%s%d" % (kind, i)
            started[device] = time.monotonic()
            procs.append((device,) + start_device(kind, tmp_path, mosquitto.port, name, device))
        waits = {}
        for device, proc, log in procs:
            assert proc.wait(40) == 0, log.read_text()
            out = log.read_text()
            found = WAIT.findall(out)
            assert len(found) == 1 and out.count("published phase=1") == 1, out
            waits[device] = int(found[0])
            assert 0 <= waits[device] < 8000
        collector.barrier()
        for device, wait_ms in waits.items():
            arrived = clock.times["ldp/%s/r/%s" % (name, device)]
            assert len(arrived) == 1
            assert arrived[0] - started[device] >= wait_ms / 1000.0, (device, wait_ms)
        assert len(set(waits.values())) == 3, waits  # each device its own draw
    finally:
        stop_processes([p for _d, p, _l in procs])
        clock.close()
        collector.close()


@pytest.mark.parametrize("kind", ["mp", "c"])
def test_re_publish_after_a_broker_restart_draws_again(kind, tmp_path):
    """An acknowledged campaign without an aggregator: the device publishes after its wait; the
    broker restarts (every device reconnects at once); the retained config triggers the memo's
    re-publish, which waits a fresh draw (a second `wait` line, no second spend)."""
    name, device = "respread-" + kind, "rs-" + kind
    doc = config_doc(name, delivery={"ack": True, "retry_s": 60, "retry_max_s": 60,
                                     "spread_s": 3})
    with PrivateMosquitto() as mosq:
        collector = ReportCollector(mosq.port)
        try:
            collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
        finally:
            collector.close()
        proc, log = start_device(kind, tmp_path, mosq.port, name, device)
        try:
            wait_log(log, "published phase=1", timeout=30)
            mosq.restart()  # persistence keeps the retained config
            out = wait_log(log, "published phase=1", count=2, timeout=40)
            assert len(WAIT.findall(out)) == 2, out
            second = out[out.index("connected", out.index("published phase=1")):]
            assert "memo phase=1" in second and WAIT.search(second), out
            assert out.count("spent") == 1
        finally:
            stop_processes([proc])
