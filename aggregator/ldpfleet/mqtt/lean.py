"""A lean MQTT client for the aggregator's ingest: whole socket reads of PUBLISH packets parsed
in one C call (`ldp_mqtt_scan`), and one socket write acknowledging a whole batch.

paho-mqtt costs tens of microseconds of Python per message (callbacks, per-message objects,
one PUBACK write each), which caps ingest near 15k messages/s; a raw-socket reader drains
Mosquitto an order of magnitude faster. This module is that reader, kept small:

- `LeanClient(settings, client_id, protocol=4|5, persistent=True, ...)`: `connect()`,
  `subscribe([(filter, qos)])`, `poll(timeout) -> PublishBatch`, `puback(ids)` (one write),
  `publish`, `publish_many`, `disconnect`. No threads: keepalive PINGREQs are sent from
  `poll` (and `subscribe`), so the owner must call `poll` at least every keepalive/2 seconds.
- `PublishBatch`: numpy arrays (qos, packet_id, retain, topic/payload offsets and lengths)
  into `data`, the bytes of one read.
The load generator's bulk QoS 1 publisher on this client is `ldpfleet.loadgen.bulk`; the
packets themselves (encoding, decoding, `PublishBatch`) are `ldpfleet.mqtt.packets`.

Subscriptions are QoS 0 or 1 (no QoS 2 exchange); the broker is not asked for topic aliases,
so every PUBLISH carries its topic. MQTT 3.1.1 (protocol 4) and MQTT 5 (protocol 5).
Whatever bytes the broker sends, the client raises nothing but OSErrors: a packet that breaks
MQTT's framing or its own layout (a field or property past its end, a SUBACK without codes, a
type a broker never sends) is `MalformedPacket`, a ConnectionError: the connection is closed
and its owner reconnects as after any loss (un-acknowledged messages come again).
"""
import select
import socket
import ssl
import struct
import time

import numpy as np

from ..core.errors import ConfigError, ReportFormatError
from ..core.kernels import ffi, lib, ptr
from .packets import (DISCONNECT, PINGREQ, REASONS_V5, ConnectionRefused, MalformedPacket,
                      PublishBatch, Truncated, check_control_bodies, connect_packet,
                      parse_connack, publish_head, publish_packet, publish_packets, refusal_text,
                      subscribe_packet, suback_codes)

QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class LeanClient:
    """One MQTT connection for bulk QoS 1 ingest (see the module docstring).

    `settings` is an `ldpfleet.mqtt.client.BrokerSettings`. `persistent`: the broker keeps the session
    (subscriptions, un-acknowledged and queued messages) across our reconnects; in MQTT 5 that
    needs a non-zero `session_expiry` (seconds; 0xFFFFFFFF = never), so persistent + protocol 5
    + session_expiry 0 is refused. `max_packet` (MQTT 5): the broker sends us nothing larger.
    `receive_maximum` (MQTT 5): how many QoS 1 messages the broker may send us before our
    PUBACKs (its in-flight window for us; None: not announced, the broker's own limit holds,
    Mosquitto's packaged default 20). `read_budget`: bytes read per `poll` at most (while the
    socket has data ready)."""

    def __init__(self, settings, client_id: str, protocol: int = 4, persistent: bool = True,
                 session_expiry: int = 0, keepalive: int = 30, max_packet: int = None,
                 read_budget: int = 4 << 20, recv_size: int = 1 << 20, max_receive: int = None,
                 receive_maximum: int = None):
        protocol = 4 if protocol == 311 else protocol
        if protocol not in (4, 5):
            raise ConfigError("protocol", "must be 4 (MQTT 3.1.1) or 5, got %r" % protocol)
        if persistent and not client_id:
            raise ConfigError("client_id", "a persistent session needs a fixed client id")
        if persistent and protocol == 5 and not session_expiry:
            raise ConfigError("session_expiry", "a persistent MQTT 5 session needs "
                              "session_expiry > 0 (with 0 the broker discards it, and "
                              "everything queued for us, at disconnect)")
        if not 0 <= keepalive <= 65535:
            raise ConfigError("keepalive", "must be in [0, 65535] seconds")
        if receive_maximum is not None and not 1 <= receive_maximum <= 65535:
            raise ConfigError("receive_maximum", "must be in [1, 65535]")
        self.settings = settings
        self.client_id = client_id
        self.protocol = protocol
        self.persistent = persistent
        self.session_expiry = session_expiry
        self.keepalive = keepalive
        self.max_packet = max_packet
        self.receive_maximum = receive_maximum
        self.read_budget = read_budget
        self.recv_size = recv_size
        self.max_receive = max_receive or max_packet
        self.quickack = False  # a publisher waiting for PUBACKs sets it (`_quickack`)
        self._skip = 0
        self.session_present = None
        self.connack_properties = {}
        self.sock = None
        self._inflight = np.zeros(65536, bool)  # ids of our QoS 1 publishes awaiting PUBACK
        self.inflight = 0
        self.publish_failures = 0  # MQTT 5 PUBACKs with a failure reason code
        self.pings = 0  # PINGREQs sent
        self._next_id = 1
        self._consumed = ffi.new("size_t *")
        self._scratch_cap = 0
        self._reset()

    def _reset(self):
        self._tail = b""
        self._skip = 0
        self._pending = []  # PublishBatches read while waiting for CONNACK/SUBACK
        self._subacks = {}
        self._connack = None
        self._eof = False
        self._ping_sent = None
        self._last_send = time.monotonic()

    # --- connection ---------------------------------------------------------------------

    def socket(self):
        return self.sock

    def _connect_packet(self) -> bytes:
        props = {}
        if self.protocol == 5:
            if self.persistent:
                props[0x11] = self.session_expiry
            if self.max_packet:
                props[0x27] = self.max_packet
            if self.receive_maximum:
                props[0x21] = self.receive_maximum
        return connect_packet(self.settings, self.client_id, self.protocol,
                              0 if self.persistent else 0x02, self.keepalive, props)

    def connect(self, timeout: float = 10.0) -> bool:
        """Open the TCP (TLS when settings.tls) connection, send CONNECT and wait for the
        CONNACK; returns session_present. ConnectionRefused (a ConnectionRefusedError with
        `.code`) when the broker refuses, OSError when it is unreachable, TimeoutError when
        it stays silent."""
        self.close()
        s = self.settings
        deadline = time.monotonic() + timeout
        sock = socket.create_connection((s.host, s.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if s.tls:
                context = ssl.create_default_context(cafile=s.cafile)
                sock = context.wrap_socket(sock, server_hostname=s.host)
            sock.settimeout(max(timeout, 30.0))  # bounds a blocked sendall
            self.sock = sock
            self._reset()
            self._send(self._connect_packet())
            while self._connack is None:
                remaining = deadline - time.monotonic()
                if self._eof:
                    raise ConnectionError("broker %s closed the connection before CONNACK" % s.url)
                if remaining <= 0:
                    raise TimeoutError("no CONNACK from %s within %.0f s" % (s.url, timeout))
                batch = self._read(remaining)
                if batch is not None and len(batch):  # queued messages right after CONNACK
                    self._pending.append(batch)
        except BaseException:
            self.close()
            raise
        flags, code, props = self._connack
        if code:
            self.close()
            text = refusal_text(self.protocol, code)
            reason = props.get(0x1F)
            raise ConnectionRefused(code, "broker %s refused the connection: %s (code %d)%s"
                                    % (s.url, text, code,
                                       ": " + reason.decode(errors="replace") if reason else ""))
        self.connack_properties = props
        if 0x13 in props:  # MQTT 5 Server Keep Alive overrides ours
            self.keepalive = props[0x13]
        self.session_present = bool(flags & 1)
        return self.session_present

    def subscribe(self, subscriptions, timeout: float = 10.0) -> list:
        """Subscribe to [(filter, qos)] (qos 0 or 1); returns the SUBACK's codes (the granted
        QoS, or >= 0x80 for a refusal). PUBLISH packets arriving meanwhile are kept for poll."""
        pid = self._take_ids(1, mark=False)[0]
        self._send(subscribe_packet(pid, subscriptions, self.protocol))
        deadline = time.monotonic() + timeout
        while pid not in self._subacks:
            if self._eof:
                raise ConnectionError("broker %s closed the connection" % self.settings.url)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no SUBACK from %s within %.0f s" % (self.settings.url, timeout))
            self._keepalive()
            batch = self._read(min(remaining, self._until_ping()))
            if batch is not None and len(batch):
                self._pending.append(batch)
        return self._subacks.pop(pid)

    def ping(self, timeout: float = 10.0) -> float:
        """PINGREQ and wait for its PINGRESP (PUBLISH packets meanwhile are kept for poll);
        returns the round trip in seconds. The broker handles one connection's packets in
        order, so everything sent before (PUBACKs) has then been processed."""
        t0 = time.monotonic()
        self._send(PINGREQ)
        self._ping_sent = t0
        while self._ping_sent is not None:
            if self._eof:
                raise ConnectionError("broker %s closed the connection" % self.settings.url)
            remaining = t0 + timeout - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no PINGRESP from %s within %.0f s"
                                   % (self.settings.url, timeout))
            batch = self._read(remaining)
            if batch is not None and len(batch):
                self._pending.append(batch)
        return time.monotonic() - t0

    def disconnect(self, timeout: float = 2.0):
        """Send DISCONNECT (a persistent session stays on the broker), wait up to `timeout`
        for the broker to close its end, then close. The wait matters: a reconnect that
        reaches the broker before it has read our earlier PUBACKs takes the session over and
        those PUBACKs are lost (the messages come again). Unacknowledged messages read while
        waiting are dropped here and redelivered by the broker."""
        if self.sock is not None:
            try:
                self.sock.sendall(DISCONNECT)
                deadline = time.monotonic() + timeout
                while self._recv_ready(max(0.0, deadline - time.monotonic())):
                    if not self.sock.recv(1 << 16):
                        break
                    if time.monotonic() >= deadline:
                        break
            except (OSError, ValueError):
                pass
        self.close()

    def close(self):
        """Close the socket without DISCONNECT."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.disconnect()

    # --- receiving ------------------------------------------------------------------------

    def poll(self, timeout: float, until_acked: bool = False) -> PublishBatch:
        """Wait up to `timeout` s for PUBLISH packets and return those of one read (possibly
        an empty batch); with `until_acked` also return once a read settled PUBACKs (a
        publisher waiting for room in its window). Handles PINGRESP/PUBACK/SUBACK, sends
        PINGREQ when due; raises ConnectionError on the broker's DISCONNECT, end of stream or
        a malformed packet (`MalformedPacket`)."""
        if self._pending:
            return self._pending.pop(0)
        deadline = time.monotonic() + timeout
        inflight = self.inflight
        while True:
            if self._eof:
                raise ConnectionError("broker %s closed the connection" % self.settings.url)
            self._keepalive()
            now = time.monotonic()
            batch = self._read(max(0.0, min(deadline - now, self._until_ping())))
            if batch is not None and (len(batch) or until_acked and self.inflight < inflight):
                return batch
            if time.monotonic() >= deadline:
                return batch if batch is not None else PublishBatch.empty()

    def _until_ping(self) -> float:
        if not self.keepalive:
            return float("inf")
        if self._ping_sent is not None:
            due = self._ping_sent + self.keepalive
        else:
            due = self._last_send + self.keepalive / 2.0
        return max(0.0, due - time.monotonic())

    def _keepalive(self):
        """PINGREQ after keepalive/2 s without sending; ConnectionError when its PINGRESP is
        a whole keepalive period late."""
        if not self.keepalive or self.sock is None:
            return
        now = time.monotonic()
        if self._ping_sent is not None:
            if now - self._ping_sent > self.keepalive:
                self.close()
                raise ConnectionError("no PINGRESP from %s within %d s"
                                      % (self.settings.url, self.keepalive))
        elif now - self._last_send >= self.keepalive / 2.0:
            self._send(PINGREQ)
            self._ping_sent = now
            self.pings += 1

    def _quickack(self):
        """Acknowledge at TCP level at once (Linux TCP_QUICKACK, which the kernel resets): a
        broker without TCP_NODELAY (Mosquitto's default) holds each small packet it writes
        (PUBACKs, acks) under Nagle's algorithm until our delayed ACK, up to 40 ms each time.
        Only for a publisher (`quickack`): a subscriber reading a stream gains nothing and the
        extra ACKs cost the broker."""
        if self.quickack and QUICKACK is not None:
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
            except OSError:
                pass

    def _recv_ready(self, timeout: float) -> bool:
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        return bool(select.select([sock], [], [], timeout)[0])

    def _grow_scratch(self, n: int):
        cap = max(n, 2 * self._scratch_cap, 4096)
        self._fb = np.empty(cap, np.uint8)
        self._u32 = np.empty((6, cap), np.uint32)  # body, end, topic off/len, payload off/len
        self._pid = np.empty(cap, np.uint16)
        self._ptrs = [ptr(self._fb)] + [ptr(self._u32[k]) for k in range(6)] + [ptr(self._pid)]
        self._scratch_cap = cap

    def _read(self, timeout: float):
        """Wait up to `timeout` for data, read up to `read_budget` bytes, scan them in one C
        call, handle the control packets; the PUBLISH packets as a batch, None if no data."""
        if self.sock is None:
            raise ConnectionError("not connected")
        if not self._recv_ready(timeout):
            return None
        chunks = [self._tail] if self._tail else []
        total = 0
        while True:
            try:
                chunk = self.sock.recv(self.recv_size)
            except (BlockingIOError, ssl.SSLWantReadError, socket.timeout):
                break
            if not chunk:
                self._eof = True
                break
            chunks.append(chunk)
            total += len(chunk)
            self._quickack()
            if total >= self.read_budget or not self._recv_ready(0):
                break
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self._skip and data:  # the rest of an oversized PUBLISH, never kept
            dropped = min(self._skip, len(data))
            data, self._skip = data[dropped:], self._skip - dropped
        if not data:
            return PublishBatch.empty()
        n_max = len(data) // 2 + 1  # every packet is at least 2 bytes
        if n_max > self._scratch_cap:
            self._grow_scratch(n_max)
        consumed = self._consumed
        n = lib.ldp_mqtt_scan(ffi.from_buffer(data), len(data), self.protocol, n_max,
                              *self._ptrs, consumed)
        if n < 0:
            self.close()
            raise MalformedPacket(self.settings.url, data[consumed[0]] >> 4, "at byte %d: %s" % (
                consumed[0], ffi.string(lib.ldp_mqtt_strerror(n)).decode()))
        self._tail = data[consumed[0]:]
        if self.max_receive and len(self._tail) > self.max_receive:
            self._skip_oversized()
        fb = self._fb[:n]
        body, end, topic_off, topic_len, payload_off, payload_len = self._u32[:, :n]
        pid = self._pid[:n]
        types = fb >> 4
        is_pub = types == 3
        if is_pub.all():
            which = slice(None)
        else:
            self._control(data, types, body, end, pid, is_pub)
            which = np.flatnonzero(is_pub)
        arr = np.frombuffer(data, np.uint8)
        first = fb[which].copy()
        if ((first >> 1) & 3 == 2).any():
            self.close()
            raise MalformedPacket(self.settings.url, 3, "a QoS 2 PUBLISH (LeanClient "
                                  "subscribes at QoS <= 1)")
        return PublishBatch(arr, first, pid[which].copy(), topic_off[which].copy(),
                            topic_len[which].copy(), payload_off[which].copy(),
                            payload_len[which].copy())

    def _skip_oversized(self):
        """The tail is the start of a packet longer than `max_receive` (memory stays bounded
        by it whatever a publisher sends, also in MQTT 3.1.1, which cannot announce a limit):
        keep its topic and packet id as an `oversized` message for the owner to count and
        acknowledge, and skip its remaining bytes as they arrive."""
        tail = self._tail
        first, i, length = publish_head(tail)  # the scan stopped past its remaining length
        if first >> 4 != 3:
            self.close()
            raise MalformedPacket(self.settings.url, first >> 4, "%d bytes, more than "
                                  "max_receive" % (i + length))
        tlen = struct.unpack_from("!H", tail, i)[0]
        qos = (first >> 1) & 3
        if len(tail) < i + 4 + tlen:  # its topic and packet id are not all here yet
            return
        pid = struct.unpack_from("!H", tail, i + 2 + tlen)[0] if qos else 0
        topic = bytes(tail[i + 2:i + 2 + tlen])
        self._skip = i + length - len(tail)
        self._tail = b""
        big = PublishBatch(np.frombuffer(topic, np.uint8), np.array([first & 0xF7], np.uint8),
                           np.array([pid], np.uint16), np.zeros(1, np.uint32),
                           np.array([tlen], np.uint32), np.zeros(1, np.uint32),
                           np.zeros(1, np.uint32))
        big.oversized[:] = True
        self._pending.append(big)

    def _control(self, data, types, body, end, pid, is_pub):
        """Handle the control packets of one read. Any packet that breaks its layout (too
        short, a field past its end, an unknown property, a type the broker never sends us)
        closes the connection: MalformedPacket, a ConnectionError like any lost connection."""
        try:
            self._control_packets(data, types, body, end, pid, is_pub)
        except (Truncated, ValueError, IndexError, struct.error) as exc:
            self.close()
            kinds = sorted(set(types[~is_pub].tolist()))
            raise MalformedPacket(self.settings.url, kinds[0] if len(kinds) == 1 else 0,
                                  str(exc) or type(exc).__name__) from None

    def _control_packets(self, data, types, body, end, pid, is_pub):
        check_control_bodies(types[~is_pub], body[~is_pub], end[~is_pub])
        acks = types == 4
        if acks.any():  # PUBACKs of our QoS 1 publishes, in bulk
            ids = pid[acks]
            if self.protocol == 5:
                self.publish_failures += sum(1 for b, e in zip(body[acks], end[acks])
                                             if e > b + 2 and data[b + 2] >= 0x80)
            self.inflight -= int(np.count_nonzero(self._inflight[ids]))
            self._inflight[ids] = False
        for k in np.flatnonzero(~is_pub & ~acks):
            kind, b, e = int(types[k]), int(body[k]), int(end[k])
            if kind == 13:  # PINGRESP
                self._ping_sent = None
            elif kind == 2:  # CONNACK
                self._connack = parse_connack(data, b, e, self.protocol)
            elif kind == 9:  # SUBACK
                self._subacks[int(pid[k])] = suback_codes(data, b, e, self.protocol)
            elif kind == 11:  # UNSUBACK
                pass
            elif kind == 14:  # DISCONNECT (MQTT 5)
                code = data[b] if e > b else 0
                self.close()
                raise ConnectionError("broker %s disconnected us: %s (reason 0x%02x)"
                                      % (self.settings.url, REASONS_V5.get(code, "normal"), code))
            else:
                raise ReportFormatError("packet_type", "a packet of type %d, which a broker "
                                        "never sends a client" % kind)

    # --- sending --------------------------------------------------------------------------

    def _send(self, data):
        if self.sock is None:
            raise ConnectionError("not connected")
        self.sock.sendall(data)
        self._last_send = time.monotonic()

    def _take_ids(self, k: int, mark: bool = True) -> np.ndarray:
        """k free packet ids (1..65535, not awaiting a PUBACK); `mark`: now awaiting one."""
        ids = ((self._next_id - 1 + np.arange(k)) % 65535 + 1).astype(np.uint16)
        if self._inflight[ids].any():
            free = np.flatnonzero(~self._inflight[1:]).astype(np.uint16) + 1
            if len(free) < k:
                raise RuntimeError("more than 65535 QoS 1 publishes awaiting PUBACK")
            start = np.searchsorted(free, self._next_id)
            ids = np.roll(free, -start)[:k]
        if mark:
            self._inflight[ids] = True
            self.inflight += k
        self._next_id = int(ids[-1]) % 65535 + 1
        return ids

    def puback(self, ids):
        """Acknowledge QoS 1 messages with one socket write (ids 0, i.e. QoS 0, skipped)."""
        ids = np.ascontiguousarray(ids, dtype=np.uint16)
        ids = ids[ids != 0]
        if not len(ids):
            return
        out = bytearray(4 * len(ids))
        lib.ldp_mqtt_pubacks(ptr(ids), len(ids), ffi.from_buffer(out))
        self._send(out)

    def publish(self, topic, payload, qos: int = 0, retain: bool = False) -> int:
        """Send one PUBLISH; returns its packet id (0 for QoS 0). A QoS 1 id counts in
        `inflight` until `poll` sees its PUBACK."""
        if qos not in (0, 1):
            raise ValueError("LeanClient publishes at QoS 0 or 1, not %r" % qos)
        pid = int(self._take_ids(1)[0]) if qos else 0
        self._send(publish_packet(topic, payload, qos, pid, retain, self.protocol))
        return pid

    def send_packets(self, packets: bytes):
        """Write packets built elsewhere (e.g. the acknowledgements' QoS 0 PUBLISHes,
        `service.batch.AckBatch.packets`) with one socket write."""
        if packets:
            self._send(packets)

    def publish_many(self, messages):
        """QoS 0 PUBLISH of every (topic, payload) pair with one socket write."""
        packets = publish_packets(messages, self.protocol)
        if packets:
            self._send(packets)
