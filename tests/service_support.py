"""Helpers of the service tests: a campaign in a temp state file, a bounded QoS 1 publisher."""
import os
import threading
import time
import urllib.request

import numpy as np
import paho.mqtt.client as mqtt

from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns import write_fleet_key


def new_campaign(tmp_path, broker_url, name, mechanism, epsilon, domain, params=None,
                 state_name="state.db"):
    """Create (sign + publish + store) a campaign; returns (state URL, Campaign)."""
    key_file = os.path.join(str(tmp_path), "fleet-%s.key" % name)
    if not os.path.exists(key_file):
        write_fleet_key(key_file)
    state = "sqlite:///" + os.path.join(str(tmp_path), state_name)
    with Store(state) as store:
        camp = create_campaign(store, BrokerSettings.from_url(broker_url), key_file, name,
                               mechanism, epsilon, domain, params=params)
    return state, camp


def device_topics(campaign: str, n: int, prefix: str = "dev", start: int = 0):
    return ["ldp/%s/r/%s%d" % (campaign, prefix, i) for i in range(start, start + n)]


class BoundedPublisher:
    """paho QoS 1 publisher that keeps at most `max_inflight` publishes un-acknowledged
    (paho hangs past 65,535 outstanding, field notes) and reconnects on its own."""

    def __init__(self, broker_url: str, client_id: str = "test-publisher", max_inflight: int = 2000):
        settings = BrokerSettings.from_url(broker_url)
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=mqtt.MQTTv311, clean_session=False)
        self.client.max_inflight_messages_set(min(max_inflight, 1000))
        self.client.reconnect_delay_set(1, 2)
        self.slots = threading.Semaphore(max_inflight)
        self.acked = 0
        self.sent = 0
        self._lock = threading.Lock()
        self.client.on_publish = self._on_publish
        self.client.connect(settings.host, settings.port, keepalive=30)
        self.client.loop_start()

    def _on_publish(self, _client, _userdata, _mid, _reason, _props):
        with self._lock:
            self.acked += 1
        self.slots.release()

    def publish(self, topic: str, payload: bytes):
        self.slots.acquire()
        self.client.publish(topic, payload, qos=1)
        self.sent += 1

    def publish_all(self, messages, on_progress=None):
        for i, (topic, payload) in enumerate(messages):
            self.publish(topic, payload)
            if on_progress is not None:
                on_progress(i + 1)

    def wait_acked(self, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while self.acked < self.sent:
            if time.monotonic() > deadline:
                raise TimeoutError("%d of %d publishes acknowledged" % (self.acked, self.sent))
            time.sleep(0.02)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def report_messages(campaign: str, reports: np.ndarray, prefix: str = "dev", start: int = 0):
    """(topic, payload) of one report per device `prefix<i>`."""
    return list(zip(device_topics(campaign, reports.shape[0], prefix, start),
                    (row.tobytes() for row in reports)))


def direct_sketch(mech, reports: np.ndarray):
    """The in-process reference: a fresh sketch fed the reports in one update."""
    sketch = mech.new_sketch()
    sketch.update(np.ascontiguousarray(reports))
    return sketch


def scrape_metrics_until(port: int, lines, timeout: float = 30.0) -> str:
    """The exporter's text once it contains every one of `lines`. The serve process commits a
    batch to the store first and updates its Prometheus counters after acknowledging it, so a
    reader that saw the store's counters must still wait for the exporter to catch up."""
    deadline = time.monotonic() + timeout
    while True:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
        missing = [line for line in lines if line not in text]
        if not missing:
            return text
        if time.monotonic() > deadline:
            raise TimeoutError("metrics never showed %r; last scrape:\n%s" % (missing, text))
        time.sleep(0.05)
