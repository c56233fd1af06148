"""Broker addresses and paho-mqtt 2.x clients for the service (protocol_spec/v2 §4).

`BrokerSettings.from_url("mqtt://host:1883")` (or `mqtts://` for TLS, `user:pass@` allowed)
holds where and how to connect; `make_client()` builds a configured but unconnected
`paho.mqtt.client.Client`; `publish(settings, topic, payload, retain=True)` sends one
message at QoS 1 and waits for the broker's PUBACK (used for configs, phase-2 messages and
status).
"""
import time
import urllib.parse
from dataclasses import dataclass

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from ..errors import ConfigError

PROTOCOLS = {5: mqtt.MQTTv5, 4: mqtt.MQTTv311, 311: mqtt.MQTTv311}
DEFAULT_PORTS = {"mqtt": 1883, "tcp": 1883, "mqtts": 8883, "ssl": 8883}


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
                   tls=tls or parts.scheme in ("mqtts", "ssl") or cafile is not None,
                   cafile=cafile)

    @property
    def url(self) -> str:
        return "%s://%s:%d" % ("mqtts" if self.tls else "mqtt", self.host, self.port)

    def make_client(self, client_id: str = "", persistent: bool = False, manual_ack: bool = False,
                    protocol=mqtt.MQTTv5) -> mqtt.Client:
        """An unconnected paho client (callback API v2). `persistent` needs a fixed client id;
        MQTT 3.1.1 gets clean_session=False here, MQTT 5 clean_start=False in `connect()`."""
        if persistent and not client_id:
            raise ConfigError("client_id", "a persistent session needs a fixed client id")
        kw = {} if protocol == mqtt.MQTTv5 else {"clean_session": not persistent}
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                             manual_ack=manual_ack, reconnect_on_failure=False, **kw)
        if self.username is not None:
            client.username_pw_set(self.username, self.password)
        if self.tls:
            client.tls_set(ca_certs=self.cafile)
        return client


def connect(client: mqtt.Client, settings: BrokerSettings, persistent: bool = False,
            session_expiry: int = 0, keepalive: int = 30):
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
        kw = {"clean_start": not persistent, "properties": props}
    return client.connect(settings.host, settings.port, keepalive=keepalive, **kw)


def publish(settings: BrokerSettings, topic: str, payload, retain: bool = True, qos: int = 1,
            timeout: float = 15.0):
    """Publish one message and wait until the broker has it (PUBACK for QoS 1)."""
    client = settings.make_client()
    state = {"connected": None}

    def on_connect(_c, _u, _flags, reason, _props):
        state["connected"] = reason

    client.on_connect = on_connect
    try:
        connect(client, settings)
    except OSError as exc:
        raise ConnectionError("cannot reach broker %s: %s" % (settings.url, exc)) from None
    client.loop_start()
    try:
        deadline = time.monotonic() + timeout
        while state["connected"] is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if state["connected"] is None or state["connected"].is_failure:
            raise ConnectionError("broker %s refused or did not answer CONNECT: %s"
                                  % (settings.url, state["connected"]))
        info = client.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(max(0.1, deadline - time.monotonic()))
        if not info.is_published():
            raise ConnectionError("broker %s did not acknowledge %s" % (settings.url, topic))
    finally:
        client.disconnect()
        client.loop_stop()
