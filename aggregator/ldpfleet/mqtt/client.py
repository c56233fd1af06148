"""The one MQTT helper module: broker addresses and paho-mqtt 2.x clients for the service,
the load generator and the tests (protocol_spec/v2 §4).

- `BrokerSettings.from_url("mqtt://host:1883")` (or `mqtts://` for TLS, `user:pass@` allowed)
  holds where and how to connect; `.make_client()` builds a configured, unconnected client.
- `connect(client, settings, persistent=...)` sends CONNECT (the caller runs the loop);
  `start(client, settings)` connects, starts the network thread and waits for the CONNACK.
- `publish(settings, topic, payload, retain=True)` sends one message at QoS 1 and waits for
  the PUBACK (configs, phase-2 messages, status).
- `QosPublisher`: many QoS 1 publishes over one connection with a bounded number
  un-acknowledged (paho hangs past 65,535 outstanding: its 16-bit message ids wrap) and an
  optional rate; the load generator's and the tests' publisher.
"""
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from ..core.errors import ConfigError

PROTOCOLS = {5: mqtt.MQTTv5, 4: mqtt.MQTTv311, 311: mqtt.MQTTv311}
DEFAULT_PORTS = {"mqtt": 1883, "tcp": 1883, "mqtts": 8883, "ssl": 8883}


def uses_tls(url: str, tls: bool = False, cafile: str = None) -> bool:
    """Whether a connection to `url` speaks TLS: `--tls`, an mqtts:// (ssl://) URL, or a CA
    file (`--cafile`) imply it."""
    scheme = str(url).split("://", 1)[0].lower() if "://" in str(url or "") else "mqtt"
    return bool(tls) or scheme in ("mqtts", "ssl") or cafile is not None


@dataclass
class BrokerSettings:
    """Where the broker is and how to authenticate; `tls` also when the URL says mqtts://."""

    host: str
    port: int = 1883
    username: str = None
    password: str = None
    tls: bool = False
    cafile: str = None

    @classmethod
    def from_url(cls, url: str, username: str = None, password: str = None, tls: bool = False,
                 cafile: str = None) -> "BrokerSettings":
        parts = urllib.parse.urlsplit(url if "://" in url else "mqtt://" + url)
        if parts.scheme not in DEFAULT_PORTS:
            raise ConfigError("broker", "unsupported scheme %r (mqtt:// or mqtts://)" % parts.scheme)
        if not parts.hostname:
            raise ConfigError("broker", "no host in %r" % url)
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError("broker", str(exc)) from None
        if port == 0:
            raise ConfigError("broker", "port 0 in %r" % url)
        port = port or DEFAULT_PORTS[parts.scheme]
        return cls(host=parts.hostname, port=port,
                   username=username if username is not None else parts.username,
                   password=password if password is not None else parts.password,
                   tls=uses_tls(url, tls, cafile), cafile=cafile)

    @property
    def url(self) -> str:
        return "%s://%s:%d" % ("mqtts" if self.tls else "mqtt", self.host, self.port)

    def make_client(self, client_id: str = "", persistent: bool = False, manual_ack: bool = False,
                    protocol=mqtt.MQTTv5, reconnect: bool = False) -> mqtt.Client:
        """An unconnected paho client (callback API v2). `persistent` needs a fixed client id;
        MQTT 3.1.1 gets clean_session=False here, MQTT 5 clean_start=False in `connect()`.
        `reconnect`: paho's network thread reconnects on its own (and re-sends QoS 1)."""
        if persistent and not client_id:
            raise ConfigError("client_id", "a persistent session needs a fixed client id")
        kw = {} if protocol == mqtt.MQTTv5 else {"clean_session": not persistent}
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                             manual_ack=manual_ack, reconnect_on_failure=reconnect, **kw)
        if self.username is not None:
            client.username_pw_set(self.username, self.password)
        if self.tls:
            client.tls_set(ca_certs=self.cafile)
        return client


def connect(client: mqtt.Client, settings: BrokerSettings, persistent: bool = False,
            session_expiry: int = 0, keepalive: int = 30, max_packet: int = None):
    """Open the TCP/TLS connection and send CONNECT (the caller runs the loop).

    A persistent MQTT 5 session needs clean_start=False AND a non-zero Session Expiry
    Interval: with the default 0 the broker discards the session at disconnect and every
    message published while we are away (field notes, MQTT section)."""
    kw = {}
    if client.protocol == mqtt.MQTTv5:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        props = Properties(PacketTypes.CONNECT)
        if persistent:
            props.SessionExpiryInterval = int(session_expiry)
        if max_packet:  # the broker sends us nothing larger (MQTT 5 §3.1.2.11.4)
            props.MaximumPacketSize = int(max_packet)
        kw = {"clean_start": not persistent, "properties": props}
    return client.connect(settings.host, settings.port, keepalive=keepalive, **kw)


def publish(settings: BrokerSettings, topic: str, payload, retain: bool = True, qos: int = 1,
            timeout: float = 15.0):
    """Publish one message and wait until the broker has it (PUBACK for QoS 1)."""
    client = settings.make_client()
    deadline = time.monotonic() + timeout
    start(client, settings, timeout=timeout)
    try:
        info = client.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(max(0.1, deadline - time.monotonic()))
        if not info.is_published():
            raise ConnectionError("broker %s did not acknowledge %s" % (settings.url, topic))
    finally:
        client.disconnect()
        client.loop_stop()


def as_settings(broker) -> BrokerSettings:
    """`broker` as BrokerSettings: an mqtt:// or mqtts:// URL, or settings already."""
    return broker if isinstance(broker, BrokerSettings) else BrokerSettings.from_url(broker)


def start(client: mqtt.Client, settings: BrokerSettings, timeout: float = 10.0, **connect_kw):
    """Connect, start the network thread and wait for the CONNACK; ConnectionError on
    refusal or silence (the loop is stopped again)."""
    done = threading.Event()
    outcome = {}

    def on_connect(_c, _userdata, _flags, reason_code, _properties):
        outcome["rc"] = reason_code
        done.set()

    client.on_connect = on_connect
    try:
        connect(client, settings, **connect_kw)
    except OSError as exc:
        raise ConnectionError("cannot reach broker %s: %s" % (settings.url, exc)) from None
    client.loop_start()
    if not done.wait(timeout):
        client.loop_stop()
        raise ConnectionError("no CONNACK from %s within %.0f s" % (settings.url, timeout))
    if outcome["rc"].is_failure:
        client.loop_stop()
        raise ConnectionError("broker %s refused the connection: %s" % (settings.url, outcome["rc"]))
    client.on_connect = None


class QosPublisher:
    """One MQTT 3.1.1 connection publishing QoS 1 with at most `max_inflight` messages
    un-acknowledged (a semaphore released by PUBACK) and an optional `rate` (per second).

    `persistent`: a session the broker keeps across our reconnects (a fixed `client_id`), so
    a broker restart loses nothing in flight; paho reconnects and re-sends on its own."""

    def __init__(self, broker, client_id: str = None, max_inflight: int = 128, rate: float = None,
                 persistent: bool = False):
        if not 1 <= max_inflight <= 65000:
            raise ConfigError("max_inflight", "must be in [1, 65000], got %d" % max_inflight)
        settings = as_settings(broker)
        self.client = settings.make_client(client_id or "ldpfleet-pub-%s" % uuid.uuid4().hex[:12],
                                           persistent=persistent, protocol=mqtt.MQTTv311,
                                           reconnect=True)
        self.client.max_inflight_messages_set(max_inflight)
        self.client.max_queued_messages_set(0)
        self.client.reconnect_delay_set(1, 2)
        self.window = threading.BoundedSemaphore(max_inflight)
        self.max_inflight = max_inflight
        self.rate = rate
        self.acked = 0
        self.published = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._t0 = None
        self.client.on_publish = self._on_publish
        start(self.client, settings, keepalive=30)

    def _on_publish(self, _client, _userdata, _mid, reason_code, _properties):
        with self._lock:
            if reason_code.is_failure:
                self.failed += 1
            else:
                self.acked += 1
        self.window.release()

    def subscribe(self, topic: str, on_message, timeout: float = 10.0):
        """Deliver messages of `topic` (QoS 0) to `on_message(client, userdata, msg)` (paho's
        network thread); returns once the broker granted the subscription."""
        granted = threading.Event()
        refused = []

        def on_subscribe(_client, _userdata, _mid, reasons, _props):
            refused.extend(r for r in reasons if r.is_failure)
            granted.set()

        self.client.on_subscribe = on_subscribe
        self.client.on_message = on_message
        self.client.subscribe(topic, qos=0)
        if not granted.wait(timeout) or refused:
            raise ConnectionError("subscription to %s not granted: %s"
                                  % (topic, refused or "no SUBACK within %.0f s" % timeout))

    def publish(self, topic: str, payload: bytes):
        if self.rate:
            if self._t0 is None:
                self._t0 = time.monotonic()
            delay = self._t0 + self.published / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.window.acquire()
        info = self.client.publish(topic, payload, qos=1)
        if info.rc not in (0, 4):  # 4 = MQTT_ERR_NO_CONN: paho re-sends after it reconnects
            self.window.release()
            raise ConnectionError("publish to %s failed: rc=%s" % (topic, info.rc))
        self.published += 1

    def publish_all(self, messages, on_progress=None):
        """Publish (topic, payload) pairs; `on_progress(count so far)` after each."""
        for i, (topic, payload) in enumerate(messages):
            self.publish(topic, payload)
            if on_progress is not None:
                on_progress(i + 1)

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until every publish is acknowledged; False on timeout."""
        deadline = time.monotonic() + timeout
        taken = 0
        while taken < self.max_inflight:
            if not self.window.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
            taken += 1
        for _ in range(taken):
            self.window.release()
        return taken == self.max_inflight

    def wait_acked(self, timeout: float = 60.0):
        """`drain`, raising TimeoutError with the counts when it times out."""
        if not self.drain(timeout):
            raise TimeoutError("the broker did not acknowledge %d of %d publishes within %.0f s"
                               % (self.published - self.acked - self.failed, self.published,
                                  timeout))

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()
