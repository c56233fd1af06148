"""The MQTT 3.1.1 / MQTT 5 packets of `LeanClient` (mqtt/lean.py): encoding CONNECT, SUBSCRIBE
and PUBLISH, decoding the control packets a broker sends (CONNACK, SUBACK, PUBACK, PINGRESP,
DISCONNECT), MQTT 5 properties and reason codes (OASIS MQTT Version 5.0, §2-§3), and
`PublishBatch`, the PUBLISH packets of one socket read as numpy spans (the C scanner
`ldp_mqtt_scan` finds them).

Whatever bytes a broker sends, decoding raises `Truncated` (a field past its packet's end) or
ReportFormatError (an unknown property or packet type): the client turns both into
`MalformedPacket`, a ConnectionError, and reconnects as after any loss.
"""
import struct

import numpy as np

from ..core.errors import ReportFormatError

PINGREQ = b"\xc0\x00"
DISCONNECT = b"\xe0\x00"  # MQTT 5: remaining length 0 = reason 0x00 Normal disconnection

CONNACK_V4 = {1: "unacceptable protocol version", 2: "client identifier rejected",
              3: "server unavailable", 4: "bad user name or password", 5: "not authorized"}
REASONS_V5 = {
    0x80: "unspecified error", 0x81: "malformed packet", 0x82: "protocol error",
    0x83: "implementation specific error", 0x84: "unsupported protocol version",
    0x85: "client identifier not valid", 0x86: "bad user name or password",
    0x87: "not authorized", 0x88: "server unavailable", 0x89: "server busy", 0x8A: "banned",
    0x8B: "server shutting down", 0x8C: "bad authentication method",
    0x8D: "keep alive timeout", 0x8E: "session taken over", 0x8F: "topic filter invalid",
    0x90: "topic name invalid", 0x93: "receive maximum exceeded", 0x94: "topic alias invalid",
    0x95: "packet too large", 0x97: "quota exceeded", 0x98: "administrative action",
    0x99: "payload format invalid", 0x9A: "retain not supported", 0x9B: "QoS not supported",
    0x9C: "use another server", 0x9D: "server moved", 0x9F: "connection rate exceeded"}

# MQTT 5 property id -> encoding (§2.2.2.2)
PROPERTY_TYPES = {**{i: "B" for i in (0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A)},
          **{i: "H" for i in (0x13, 0x21, 0x22, 0x23)},
          **{i: "I" for i in (0x02, 0x11, 0x18, 0x27)},
          0x0B: "varint",
          **{i: "str" for i in (0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F, 0x09, 0x16)},
          0x26: "pair"}


class MalformedPacket(ConnectionError):
    """A packet from the broker that breaks MQTT's framing or a control packet's layout. The
    connection is closed and treated as lost (the owner reconnects; nothing un-acknowledged is
    lost: the broker redelivers it). `kind`: the packet type (0 when unknown)."""

    def __init__(self, url: str, kind: int, detail: str):
        super().__init__("malformed MQTT packet (type %d) from %s: %s" % (kind, url, detail))
        self.kind = kind


class Truncated(Exception):
    """A field reaches past the end of its packet (turned into MalformedPacket)."""


class ConnectionRefused(ConnectionRefusedError):
    """The broker's CONNACK refused us: `code` is the 3.1.1 return code or MQTT 5 reason code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string_field(b: bytes) -> bytes:
    return struct.pack("!H", len(b)) + b


def as_bytes(s) -> bytes:
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def need(pos: int, size: int, limit: int):
    if pos + size > limit:
        raise Truncated("%d byte(s) at %d, past the packet's end %d" % (size, pos, limit))


def read_varint(data, pos: int, limit: int = None):
    limit = len(data) if limit is None else limit
    value = 0
    for i in range(4):
        need(pos + i, 1, limit)
        b = data[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos + i + 1
    raise Truncated("a variable byte integer of more than 4 bytes")


def parse_properties(data, pos: int, limit: int = None) -> tuple:
    """({id: value}, position after) of the MQTT 5 property block at data[pos], which must
    end by `limit` (default: the end of data); Truncated when it does not, ReportFormatError
    for an unknown property (the caller turns both into MalformedPacket)."""
    limit = len(data) if limit is None else limit
    length, pos = read_varint(data, pos, limit)
    end, props = pos + length, {}
    need(pos, length, limit)
    while pos < end:
        pid = data[pos]
        kind = PROPERTY_TYPES.get(pid)
        pos += 1
        if kind in ("B", "H", "I"):
            size = struct.calcsize(kind)
            need(pos, size, end)
            (value,) = struct.unpack_from("!" + kind, data, pos)
            pos += size
        elif kind == "varint":
            value, pos = read_varint(data, pos, end)
        elif kind in ("str", "pair"):
            value, pos = read_string(data, pos, end)
            if kind == "pair":
                second, pos = read_string(data, pos, end)
                value = (value, second)
        else:
            raise ReportFormatError("property", "unknown MQTT 5 property 0x%02x" % pid)
        props[pid] = value
    return props, end


def read_string(data, pos: int, limit: int):
    need(pos, 2, limit)
    (n,) = struct.unpack_from("!H", data, pos)
    need(pos + 2, n, limit)
    return bytes(data[pos + 2:pos + 2 + n]), pos + 2 + n


class PublishBatch:
    """The PUBLISH packets of one read. `data` (uint8, read-only) holds them; per message:
    `qos`, `retain`, `dup` (uint8), `packet_id` (uint16, 0 for QoS 0) and the spans
    `topic_off`, `topic_len`, `payload_off`, `payload_len` (uint32, offsets into `data`)."""

    __slots__ = ("data", "qos", "retain", "dup", "packet_id", "topic_off", "topic_len",
                 "payload_off", "payload_len", "oversized")

    def __init__(self, data, first_byte, packet_id, topic_off, topic_len, payload_off,
                 payload_len):
        self.data = data
        self.qos = (first_byte >> 1) & 3
        self.retain = first_byte & 1
        self.dup = (first_byte >> 3) & 1
        self.packet_id = packet_id
        self.topic_off, self.topic_len = topic_off, topic_len
        self.payload_off, self.payload_len = payload_off, payload_len
        self.oversized = np.zeros(len(packet_id), bool)
        """PUBLISH packets longer than the client's `max_receive`: their payload was skipped as
        it streamed in (payload_len 0); the owner acknowledges them like the others."""

    @classmethod
    def empty(cls) -> "PublishBatch":
        u32 = np.zeros(0, np.uint32)
        return cls(np.zeros(0, np.uint8), np.zeros(0, np.uint8), np.zeros(0, np.uint16),
                   u32, u32, u32, u32)

    def __len__(self) -> int:
        return len(self.packet_id)

    def topic_bytes(self, i: int) -> bytes:
        off = int(self.topic_off[i])
        return self.data[off:off + int(self.topic_len[i])].tobytes()

    def topic(self, i: int):
        """Topic of message i as str, None when it is not valid UTF-8."""
        try:
            return self.topic_bytes(i).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def payload(self, i: int) -> bytes:
        off = int(self.payload_off[i])
        return self.data[off:off + int(self.payload_len[i])].tobytes()

    def payload_matrix(self, width: int) -> np.ndarray:
        """(len, width) uint8 payloads; every payload must be `width` bytes (select first)."""
        if len(self) and not (self.payload_len == width).all():
            raise ValueError("payloads are not all %d bytes" % width)
        return self.data[self.payload_off[:, None].astype(np.intp) + np.arange(width)]

    def select(self, which) -> "PublishBatch":
        """The messages at a boolean mask or index array (sharing `data`)."""
        out = PublishBatch.__new__(PublishBatch)
        out.data = self.data
        for name in PublishBatch.__slots__[1:]:
            setattr(out, name, getattr(self, name)[which])
        return out


# --- packets the client sends -------------------------------------------------------------

def encode_properties(props: dict) -> bytes:
    """An MQTT 5 property block of byte, two- and four-byte integer properties ({id: value})."""
    out = b""
    for pid, value in props.items():
        out += bytes([pid]) + struct.pack("!" + PROPERTY_TYPES[pid], value)
    return varint(len(out)) + out


def connect_packet(settings, client_id: str, protocol: int, flags: int, keepalive: int,
                   props: dict = None) -> bytes:
    """CONNECT with the login of `settings` (BrokerSettings); `flags` 0x02 asks for a clean
    session; `props` (MQTT 5 only) as for encode_properties."""
    payload = string_field(client_id.encode("utf-8"))
    if settings.username is not None:
        flags |= 0x80
        payload += string_field(settings.username.encode("utf-8"))
        if settings.password is not None:
            flags |= 0x40
            payload += string_field(settings.password.encode("utf-8"))
    head = string_field(b"MQTT") + bytes([protocol, flags]) + struct.pack("!H", keepalive)
    if protocol == 5:
        head += encode_properties(props or {})
    body = head + payload
    return b"\x10" + varint(len(body)) + body


def subscribe_packet(pid: int, subscriptions, protocol: int) -> bytes:
    """SUBSCRIBE to [(filter, qos)], qos 0 or 1."""
    body = struct.pack("!H", pid) + (b"\x00" if protocol == 5 else b"")
    for topic_filter, qos in subscriptions:
        if qos not in (0, 1):
            raise ValueError("LeanClient subscribes at QoS 0 or 1, not %r" % qos)
        body += string_field(as_bytes(topic_filter)) + bytes([qos])
    return b"\x82" + varint(len(body)) + body


def publish_packet(topic, payload, qos: int, pid: int, retain: bool, protocol: int) -> bytes:
    """One PUBLISH (QoS 0 or 1; `pid` ignored for QoS 0)."""
    body = (string_field(as_bytes(topic)) + (struct.pack("!H", pid) if qos else b"")
            + (b"\x00" if protocol == 5 else b"") + bytes(payload))
    return bytes([0x30 | qos << 1 | bool(retain)]) + varint(len(body)) + body


def publish_packets(messages, protocol: int) -> bytes:
    """QoS 0 PUBLISH packets of every (topic, payload) pair, concatenated."""
    props = b"\x00" if protocol == 5 else b""
    parts = []
    for topic, payload in messages:
        body = string_field(as_bytes(topic)) + props + bytes(payload)
        parts += [b"\x30", varint(len(body)), body]
    return b"".join(parts)


# --- control packets a broker sends -------------------------------------------------------

CONTROL_BODY = {2: (2, None), 4: (2, None), 9: (3, None), 11: (2, None), 13: (0, 0), 14: (0, None)}
"""(smallest, largest) remaining length of the control packets a broker may send a client."""


def check_control_bodies(types, body, end):
    """Truncated for a control packet whose body is shorter or longer than its type allows."""
    for t, b, e in zip(types.tolist(), body.tolist(), end.tolist()):
        low, high = CONTROL_BODY.get(t, (0, None))
        if e - b < low or (high is not None and e - b > high):
            raise Truncated("packet type %d with a body of %d byte(s)" % (t, e - b))


def parse_connack(data, b: int, e: int, protocol: int) -> tuple:
    """(flags, return or reason code, MQTT 5 properties) of the CONNACK body data[b:e]."""
    props = parse_properties(data, b + 2, e)[0] if protocol == 5 and e > b + 2 else {}
    return data[b], data[b + 1], props


def refusal_text(protocol: int, code: int) -> str:
    """What a CONNACK's non-zero code means."""
    return (CONNACK_V4 if protocol == 4 else REASONS_V5).get(code, "refused")


def suback_codes(data, b: int, e: int, protocol: int) -> list:
    """The return codes of the SUBACK body data[b:e] (granted QoS, or >= 0x80 refused)."""
    codes_at = b + 2
    if protocol == 5:
        codes_at = parse_properties(data, codes_at, e)[1]
    if codes_at >= e:
        raise Truncated("a SUBACK without return codes")
    return list(data[codes_at:e])


def publish_head(tail) -> tuple:
    """(first byte, fixed-header length, remaining length) of the packet starting `tail`,
    whose remaining-length varint is complete."""
    length, mult, i = 0, 1, 1
    while True:
        length += (tail[i] & 0x7F) * mult
        mult <<= 7
        i += 1
        if not tail[i - 1] & 0x80:
            return tail[0], i, length
