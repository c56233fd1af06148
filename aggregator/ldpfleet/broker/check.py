"""`ldpfleet broker-check`: would this broker drop reports for a slow or absent aggregator?

Brokers acknowledge a QoS 1 publish to the device and may drop it later, when the subscriber's
queue is full (Mosquitto: `max_queued_messages`, default 1000, and `max_queued_bytes`; GitHub
eclipse/mosquitto#3687). The check measures it the way the aggregator would suffer it: a persistent
subscriber (clean session off, QoS 1) stops acknowledging, `messages` QoS 1 messages are
published, the subscriber comes back and counts what the broker kept for it. Every message
kept: pass. Fewer: the broker would have dropped that share of a burst of that size while
`serve` was down or behind. The session is removed afterwards.

It runs with one login and one client id: with broker-config's broker (client ids bound to
logins) use the admin login, never serve's while serve runs. `serve` runs it at start in the
background (a warning only) when it logs in without a username.
"""
import threading
import time
import uuid
from dataclasses import dataclass

from ..core.errors import ConfigError
from ..mqtt import client as mqtt
from .secured import CHECK_TOPIC_ROOT

DEFAULT_MESSAGES = 2000
"""Twice Mosquitto's default `max_queued_messages`: a stock broker fails, a sized one passes.
Give the largest burst you expect (devices x phases) to check a real limit."""
SETTINGS = ("max_queued_messages (default 1000) and max_queued_bytes (default 0 = no limit) "
            "in mosquitto.conf; EMQX: mqtt.max_mqueue_len; HiveMQ: "
            "<max-queued-messages> of the persistence config")


@dataclass
class CheckResult:
    broker: str
    messages: int
    kept: int
    seconds: float

    @property
    def passed(self) -> bool:
        return self.kept >= self.messages

    def to_json(self) -> dict:
        return {"broker": self.broker, "messages": self.messages, "kept": self.kept,
                "dropped": self.messages - self.kept, "passed": self.passed,
                "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        if self.passed:
            return ("broker %s kept all %d QoS 1 messages for an absent persistent subscriber: "
                    "a burst of that size is not dropped" % (self.broker, self.messages))
        return ("broker %s kept only %d of %d QoS 1 messages for an absent persistent subscriber: "
                "it DROPS reports once the aggregator's queue is full (devices with acknowledgements "
                "re-send them; without, they are lost). Raise %s, or use the configuration "
                "`ldpfleet broker-config` writes." % (self.broker, self.kept, self.messages, SETTINGS))


class _Counter:
    def __init__(self):
        self.count = 0
        self.last = time.monotonic()
        self.subscribed = threading.Event()
        self.refused = []

    def on_message(self, _client, _userdata, _msg):
        self.count += 1
        self.last = time.monotonic()

    def on_subscribe(self, _client, _userdata, _mid, reasons, _props):
        self.refused.extend(r for r in reasons if r.is_failure)
        self.subscribed.set()


def _subscriber(settings, client_id, counter, clean: bool):
    client = settings.make_client(client_id, persistent=not clean, protocol=mqtt.mqtt.MQTTv311)
    client.on_message = counter.on_message
    client.on_subscribe = counter.on_subscribe
    mqtt.start(client, settings, keepalive=30)
    return client


def check_broker(broker, messages: int = DEFAULT_MESSAGES, payload_bytes: int = 64,
                 timeout: float = 60.0) -> CheckResult:
    """Run the check (module docstring); ConnectionError when the broker refuses us.

    One login, one client id (so it also runs where the broker binds client ids to logins,
    broker-config's `use_username_as_clientid`): a persistent session subscribes to a fresh
    check topic and, on the same connection, publishes `messages` QoS 1 messages to it without
    ever acknowledging their delivery (manual acks), as a stalled aggregator would: the broker
    holds its in-flight window and queues the rest up to its limits. The session then comes
    back and counts what it is given."""
    settings = mqtt.as_settings(broker)
    if messages < 1:
        raise ConfigError("messages", "must be >= 1, got %d" % messages)
    started = time.monotonic()
    tag = uuid.uuid4().hex[:12]
    client_id, topic = "ldpfleet-check-%s" % tag, "%s/%s" % (CHECK_TOPIC_ROOT, tag)
    stalled = _Counter()
    published = threading.Semaphore(0)
    client = settings.make_client(client_id, persistent=True, manual_ack=True,
                                  protocol=mqtt.mqtt.MQTTv311)
    client.on_message = stalled.on_message  # counted, never acknowledged
    client.on_subscribe = stalled.on_subscribe
    client.on_publish = lambda *_: published.release()
    client.max_queued_messages_set(0)
    mqtt.start(client, settings, keepalive=30)
    try:
        client.subscribe(topic, qos=1)
        if not stalled.subscribed.wait(10) or stalled.refused:
            raise ConnectionError("broker-check: subscription to %s refused (%s): the login needs "
                                  "read/write on %s/#" % (topic, stalled.refused or "no SUBACK",
                                                          CHECK_TOPIC_ROOT))
        payload = bytes(payload_bytes)
        for _ in range(messages):
            client.publish(topic, payload, qos=1)
        deadline = time.monotonic() + timeout
        for _ in range(messages):
            if not published.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise ConnectionError("broker-check: the broker did not acknowledge all %d "
                                      "publishes within %.0f s" % (messages, timeout))
        time.sleep(0.5)  # the broker routes the last ones to the (stalled) session
    finally:
        client.disconnect()
        client.loop_stop()
    counter = _Counter()
    back = _subscriber(settings, client_id, counter, clean=False)
    try:
        deadline = time.monotonic() + timeout
        while counter.count < messages and time.monotonic() < deadline:
            if time.monotonic() - counter.last > 2.0:
                break  # nothing more is coming
            time.sleep(0.05)
    finally:
        back.disconnect()
        back.loop_stop()
        _remove_session(settings, client_id)
    return CheckResult(settings.url, messages, min(counter.count, messages),
                       time.monotonic() - started)


def _remove_session(settings, client_id: str):
    """Connect once with a clean session: the broker discards the check's persistent one."""
    try:
        client = _subscriber(settings, client_id, _Counter(), clean=True)
        client.disconnect()
        client.loop_stop()
    except (OSError, ConnectionError):
        pass
