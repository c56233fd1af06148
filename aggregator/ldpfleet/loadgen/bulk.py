"""The load generator's publisher for simulated devices: QoS 1 reports in bulk.

`BulkPublisher` publishes whole chunks of reports (one `perturb_batch` each) as PUBLISH packets
built in one C call (`ldp_mqtt_build_publishes`) over one `leanmqtt.LeanClient` connection, with
at most `max_inflight` awaiting a PUBACK and an optional rate. When the connection or the
broker drops, it reconnects, subscribes again and re-sends every publish not yet acknowledged
(the aggregator counts a re-sent report it already has as a duplicate). The session is clean: a
broker keeps nothing for a publisher's QoS 1 sends after their PUBACK, and a fleet run leaves no
session behind. PUBLISH packets that arrive on the connection (the spec §6 acknowledgements the
fleet subscribes to) go to the subscriber's callback as (topic, payload) pairs.

It has the interface of `ldpfleet.mqtt.client.QosPublisher` that the fleet uses (`publish`,
`subscribe`, `wait_acked`, `close`, `acked`, `failed`) plus `publish_rows`.
"""
import time
import uuid

import numpy as np

from ..core.errors import ConfigError
from ..core.kernels import ffi, lib, ptr
from ..mqtt.lean import LeanClient

RECONNECT_FOR_S = 60.0


class BulkPublisher:
    """QoS 1 publishes in bulk with a bounded window, re-sent after a reconnect (module doc)."""

    def __init__(self, settings, client_id: str = None, max_inflight: int = 5000,
                 rate: float = None, protocol: int = 4):
        if not 1 <= max_inflight <= 65000:
            raise ConfigError("max_inflight", "must be in [1, 65000], got %d" % max_inflight)
        self.client = LeanClient(settings, client_id or "ldpfleet-pub-%s" % uuid.uuid4().hex[:12],
                                 protocol=protocol, persistent=False)
        self.client.quickack = True  # PUBACKs at once from a broker without TCP_NODELAY
        self.max_inflight = max_inflight
        self.rate = rate
        self.published = 0
        self.failed = 0
        self.reconnects = 0
        self._unacked = {}  # packet id -> (topic bytes, payload bytes), for re-sending
        self._subscriptions = []
        self._on_message = None
        self._t0 = None
        self.client.connect()

    @property
    def acked(self) -> int:
        return self.published - len(self._unacked)

    # --- receiving (PUBACKs, and what the fleet subscribed to) --------------------------------
    def subscribe(self, topic: str, on_message, timeout: float = 10.0):
        """Deliver the PUBLISH packets of `topic` (QoS 0) as `on_message(topic, payload)`."""
        self._on_message = on_message
        self._subscriptions = [(topic, 0)]
        codes = self.client.subscribe(self._subscriptions, timeout)
        if any(c >= 0x80 for c in codes):
            raise ConnectionError("subscription to %s not granted: %s" % (topic, codes))

    def pump(self, timeout: float):
        """Read for up to `timeout` s (the subscriber's messages arrive only while the owner
        calls this, `publish_rows` or `wait_acked`: there is no background thread)."""
        self._guarded(self._pump, timeout)

    def _pump(self, timeout: float):
        """One read: PUBACKs settle the window, other PUBLISHes go to the subscriber."""
        before = self.client.inflight
        got = self.client.poll(timeout, until_acked=True)
        if self.client.inflight < before or len(self._unacked) > self.client.inflight:
            self._settle()
        if len(got) and self._on_message is not None:
            for i in range(len(got)):
                topic = got.topic(i)
                if topic is not None:
                    self._on_message(topic, got.payload(i))

    def _settle(self):
        """Forget the publishes the broker acknowledged (LeanClient clears their ids)."""
        pending = self.client._inflight
        for pid in [p for p in self._unacked if not pending[p]]:
            del self._unacked[pid]

    # --- sending ---------------------------------------------------------------------------
    def _room(self, want: int) -> int:
        """How many to send now: waits until half the window (or `want`) is free, so chunks
        stay large (one C call and one write each)."""
        need = min(want, max(1, self.max_inflight // 2))
        deadline = time.monotonic() + 60.0
        while True:
            room = self.max_inflight - self.client.inflight
            if room >= need:
                return min(room, want)
            if time.monotonic() > deadline:
                raise TimeoutError("%d publishes not acknowledged within 60 s" % self.client.inflight)
            self._guarded(self._pump, 0.05)

    def _pace(self, count: int):
        if not self.rate:
            return
        if self._t0 is None:
            self._t0 = time.monotonic()
        delay = self._t0 + (self.published + count) / self.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def publish_rows(self, topics, reports: np.ndarray):
        """Publish reports[i] to topics[i] (str) at QoS 1, in chunks that fit the window."""
        reports = np.ascontiguousarray(reports, np.uint8)
        encoded = [t.encode() for t in topics]
        size = reports.shape[1]
        done = 0
        while done < len(encoded):
            k = self._room(len(encoded) - done)
            if self.rate:
                k = min(k, max(1, int(self.rate // 20)))
            self._pace(k)
            self._guarded(self._send_chunk, encoded[done:done + k], reports[done:done + k], size)
            done += k
            self._guarded(self._pump, 0.0)

    def publish(self, topic: str, payload: bytes):
        """One report (the fleet's re-sends)."""
        self.publish_rows([topic], np.frombuffer(bytes(payload), np.uint8).reshape(1, -1))

    def _send_chunk(self, encoded, rows, size):
        k = len(encoded)
        lengths = np.fromiter(map(len, encoded), np.uint32, k)
        offsets = (np.cumsum(lengths, dtype=np.uint64) - lengths).astype(np.uint32)
        topics = np.frombuffer(b"".join(encoded), np.uint8)
        ids = self.client._take_ids(k)
        cap = int(lengths.sum()) + k * (size + 12)
        out = np.empty(cap, np.uint8)
        written = lib.ldp_mqtt_build_publishes(ptr(topics), ptr(offsets), ptr(lengths),
                                               ptr(rows), size, k, 1, self.client.protocol,
                                               ptr(ids), ptr(out), cap)
        if written < 0:
            raise ValueError(ffi.string(lib.ldp_mqtt_strerror(written)).decode())
        blob = rows.tobytes()
        for j, pid in enumerate(ids.tolist()):
            self._unacked[pid] = (encoded[j], blob[j * size:(j + 1) * size])
        self.published += k
        self.client.send_packets(memoryview(out)[:written])

    # --- a dropped connection ----------------------------------------------------------------
    def _guarded(self, action, *args):
        try:
            return action(*args)
        except (ConnectionError, OSError):
            self._reconnect()

    def _reconnect(self):
        """Connect again, subscribe again, and re-send every publish not yet acknowledged."""
        deadline = time.monotonic() + RECONNECT_FOR_S
        while True:
            try:
                self.client.connect()
                if self._subscriptions:
                    self.client.subscribe(self._subscriptions)
                break
            except (ConnectionError, OSError) as exc:
                if time.monotonic() > deadline:
                    raise ConnectionError("broker unreachable for %.0f s: %s"
                                          % (RECONNECT_FOR_S, exc)) from None
                time.sleep(0.5)
        self.reconnects += 1
        again = list(self._unacked.values())
        self._unacked.clear()
        self.client._inflight[:] = False
        self.client.inflight = 0
        self.published -= len(again)
        for start in range(0, len(again), 1000):
            part = again[start:start + 1000]
            rows = np.frombuffer(b"".join(p for _t, p in part), np.uint8).reshape(len(part), -1)
            self._send_chunk([t for t, _p in part], rows, rows.shape[1])

    def wait_acked(self, timeout: float = 60.0):
        """Until every publish is acknowledged; TimeoutError with the counts otherwise."""
        deadline = time.monotonic() + timeout
        while self._unacked:
            if time.monotonic() > deadline:
                raise TimeoutError("the broker did not acknowledge %d of %d publishes within "
                                   "%.0f s" % (len(self._unacked), self.published, timeout))
            self._guarded(self._pump, 0.05)

    def drain(self, timeout: float = 60.0) -> bool:
        try:
            self.wait_acked(timeout)
            return True
        except TimeoutError:
            return False

    def close(self):
        self.client.disconnect()
