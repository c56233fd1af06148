"""The device's MQTT loop (spec §4, §6): connect with backoff, subscribe to the key, config,
phase-2 and ack topics, hand every message to the device (`ldp/device.py`, the decisions),
publish what it queues at QoS 1, keep alive; a dead connection is detected by timeout and
retried with exponential backoff and jitter, so broker restarts and network outages are
survived. The C client's `session.c` is the same loop over libmosquitto.

Nothing here reads the device's value: what is published, and when, is the device's decision;
the waits here depend only on the options and the OS RNG.
"""
import os
import time
from micropython import const

from .device import EXIT_DONE

EXIT_TIMEOUT = const(3)
ETIMEDOUT = const(110)


def default_client(client_id, host, port, keepalive, timeout, user=None, password=None, ssl=None):
    """This package's MQTT client (see device/README.md for umqtt.simple)."""
    from .mqtt import MQTTClient
    return MQTTClient(client_id, host, port, user=user, password=password, keepalive=keepalive,
                      timeout=timeout, ssl=ssl)


class Session:
    """Runs one `Device` against the broker at host:port until it is done (`device.once`) or
    `run_for` seconds have passed. `keepalive` and `timeout` (s) are the MQTT client's,
    `backoff_max` (s) bounds the reconnect backoff; `user`/`password` the broker login; `ssl` an
    `ssl.SSLContext` for a TLS broker (`ldp.mqtt.tls_context`), None for plain TCP;
    `client_factory` builds the client (default_client's arguments)."""

    def __init__(self, device, host, port=1883, keepalive=30, timeout=5.0, backoff_max=30.0,
                 run_for=None, client_factory=default_client, user=None, password=None, ssl=None):
        self.device = device
        self.host, self.port = host, port
        self.user, self.password = user, password
        self.ssl = ssl
        self.keepalive = keepalive
        self.timeout = timeout
        self.backoff_max = backoff_max
        self.run_for = run_for
        self.client_factory = client_factory
        self.client = None

    def _on_message(self, topic, msg):
        self.device.on_message(topic.decode(), msg)

    def _connect(self):
        dev = self.device
        self.client = self.client_factory(dev.device_id, self.host, self.port, self.keepalive,
                                          self.timeout, self.user, self.password, self.ssl)
        self.client.set_callback(self._on_message)
        self.client.connect(clean_session=True)
        dev.log("connected", "%s:%d" % (self.host, self.port))
        self.client.subscribe(dev.topic_keys, qos=1)  # first: its retained rotation comes first
        self.client.subscribe(dev.topic_config, qos=1)
        self.client.subscribe(dev.topic_phase2, qos=1)
        self.client.subscribe(dev.topic_ack, qos=0)

    def _serve(self, stop):
        """Until done or `stop` (ticks_ms): wait for packets, process, publish, keep alive.
        A broker silent for 1.5 keepalive periods (no PINGRESP) counts as a dead link."""
        client = self.client
        dev = self.device
        half = self.keepalive * 500
        wait = min(half, 250)
        last_ping = time.ticks_ms()
        while not dev.done():
            if self._expired(stop):
                return
            if hasattr(client, "poll_msg"):
                client.poll_msg(wait)
            else:  # umqtt.simple
                client.check_msg()
                time.sleep_ms(wait)
            dev.process_inbox()
            dev.flush(client)
            dev.resend_due(client)
            now = time.ticks_ms()
            if time.ticks_diff(now, last_ping) >= half:
                client.ping()
                last_ping = now
            if hasattr(client, "last_rx") and time.ticks_diff(now, client.last_rx) > 3 * half:
                raise OSError(ETIMEDOUT, "broker silent for %d ms" % (3 * half))

    def _expired(self, stop):
        return stop is not None and time.ticks_diff(stop, time.ticks_ms()) <= 0

    def run(self):
        """Run until done (once mode) or `run_for` seconds; returns the exit code."""
        dev = self.device
        stop = None
        if self.run_for is not None:
            stop = time.ticks_add(time.ticks_ms(), int(self.run_for * 1000))
        backoff = 0.25
        while True:
            try:
                self._connect()
                backoff = 0.25
                self._serve(stop)
            except Exception as exc:  # OSError, MQTTException: drop the link, retry
                dev.log("connection-lost", repr(exc))
            self._close()
            if dev.done():
                return EXIT_DONE if dev.exit_code is None else dev.exit_code
            if self._expired(stop):
                return EXIT_TIMEOUT if dev.once else EXIT_DONE
            delay = int(1000 * backoff * (0.5 + os.urandom(1)[0] / 510))
            if stop is not None:
                delay = max(0, min(delay, time.ticks_diff(stop, time.ticks_ms())))
            dev.log("backoff", "%d ms" % delay)
            time.sleep_ms(delay)
            backoff = min(backoff * 2, self.backoff_max)

    def _close(self):
        if self.client is not None:
            try:
                self.client.disconnect()
            except Exception:
                pass
            self.client = None
