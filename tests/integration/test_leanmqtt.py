"""The lean ingest MQTT client (ldpfleet.mqtt.lean) and its C scanner (c_kernels/ldp_mqtt.c)."""
import os
import random
import socket
import struct
import time

import numpy as np
import pytest

from support.brokers import PrivateMosquitto

from ldpfleet.broker.secured import password_hash
from ldpfleet.core.kernels import ffi, lib, ptr
from ldpfleet.mqtt.lean import LeanClient
from ldpfleet.mqtt.packets import ConnectionRefused, PublishBatch, varint
from ldpfleet.loadgen.bulk import BulkPublisher
from ldpfleet.mqtt.client import BrokerSettings, QosPublisher
from ldpfleet.service.ingest.loop import parse_report_topic
from support.topics import report_topics


# --- packet builders (independent of the code under test) -----------------------------------

def publish(topic: bytes, payload: bytes, qos=0, pid=0, version=4, props=b"", retain=False):
    body = struct.pack("!H", len(topic)) + topic + (struct.pack("!H", pid) if qos else b"")
    if version == 5:
        body += varint(len(props)) + props
    body += payload
    return bytes([0x30 | qos << 1 | retain]) + varint(len(body)) + body


def control(kind: int, body: bytes = b"", flags: int = 0):
    return bytes([kind << 4 | flags]) + varint(len(body)) + body


def scan(data: bytes, version=4, max_packets=None):
    """(count or error, consumed, rows) with rows = [(first_byte, body, end, topic, payload, pid)]."""
    cap = len(data) // 2 + 1
    max_packets = cap if max_packets is None else max_packets
    fb = np.zeros(cap, np.uint8)
    u32 = [np.zeros(cap, np.uint32) for _ in range(6)]
    pid = np.zeros(cap, np.uint16)
    consumed = ffi.new("size_t *")
    buf = ffi.new("uint8_t[]", data) if data else ffi.NULL  # exactly len(data) bytes
    n = lib.ldp_mqtt_scan(buf, len(data), version, max_packets, ptr(fb), *[ptr(a) for a in u32],
                          ptr(pid), consumed)
    rows = []
    for k in range(max(n, 0)):
        body, end, toff, tlen, poff, plen = (int(a[k]) for a in u32)
        rows.append((int(fb[k]), body, end, data[toff:toff + tlen], data[poff:poff + plen],
                     int(pid[k])))
    return n, consumed[0], rows


def stream(version):
    """A mixed stream and what scanning it must give."""
    props = b"\x02\x00\x00\x00\x3c" + b"\x26" + struct.pack("!H", 1) + b"k" + struct.pack("!H", 2) + b"vv"
    parts = [
        (publish(b"ldp/c/r/d1", b"x" * 40, 1, 7, version), (b"ldp/c/r/d1", b"x" * 40, 7)),
        (publish(b"a", b"", 0, 0, version), (b"a", b"", 0)),
        (control(13), (b"", b"", 0)),
        (control(4, b"\x12\x34"), (b"", b"", 0x1234)),
        (publish(b"t/" + b"z" * 300, bytes(range(256)) * 80, 1, 65535, version,
                 props if version == 5 else b"", retain=True),
         (b"t/" + b"z" * 300, bytes(range(256)) * 80, 65535)),
        (control(9, b"\x00\x05" + (b"\x00" if version == 5 else b"") + b"\x01\x80"),
         (b"", b"", 5)),
        (publish(b"", b"p", 0, 0, version), (b"", b"p", 0)),
    ]
    return parts


# --- scanner ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [4, 5])
def test_scan_every_split_point(version):
    parts = stream(version)
    data = b"".join(p for p, _ in parts)
    ends = np.cumsum([len(p) for p, _ in parts]).tolist()
    n, consumed, rows = scan(data, version)
    assert n == len(parts) and consumed == len(data)
    for (packet, (topic, payload, pid)), row, end in zip(parts, rows, ends):
        assert row[0] == packet[0] and row[2] == end
        assert row[3:] == (topic, payload, pid)
    for cut in range(len(data) + 1):
        n, consumed, rows = scan(data[:cut], version)
        complete = sum(1 for e in ends if e <= cut)
        assert n == complete, cut
        assert consumed == (ends[complete - 1] if complete else 0)
        # the rest arrives: the kept tail plus the remainder scans to the remaining packets
        n2, consumed2, rows2 = scan(data[consumed:], version)
        assert n + n2 == len(parts) and consumed + consumed2 == len(data)
        assert [r[3:] for r in rows + rows2] == [e for _, e in parts]


def test_scan_max_packets_and_empty():
    data = publish(b"a", b"1") * 5
    n, consumed, _ = scan(data, 4, max_packets=3)
    assert n == 3 and consumed == 3 * len(publish(b"a", b"1"))
    assert scan(b"", 4)[:2] == (0, 0)


def test_scan_v5_properties_are_skipped_not_payload():
    props = b"\x01\x01" + b"\x23\x00\x05"  # payload format indicator, topic alias
    n, _, rows = scan(publish(b"t", b"PAYLOAD", 1, 3, 5, props), 5)
    assert n == 1 and rows[0][3:] == (b"t", b"PAYLOAD", 3)
    # the same bytes read as 3.1.1 keep the property block in the payload
    n, _, rows = scan(publish(b"t", b"PAYLOAD", 1, 3, 5, props), 4)
    assert rows[0][4] == varint(len(props)) + props + b"PAYLOAD"


@pytest.mark.parametrize("data,version,code", [
    (b"\x30\xff\xff\xff\xff\x01", 4, lib.LDP_MQTT_E_VARINT),
    (b"\x30\xff\xff\xff\xff", 4, lib.LDP_MQTT_E_VARINT),  # detected before the body arrives
    (b"\x00\x00", 4, lib.LDP_MQTT_E_TYPE),
    (b"\x36\x05\x00\x01a\x00\x01", 4, lib.LDP_MQTT_E_QOS),
    (b"\x30\x03\x00\x05a", 4, lib.LDP_MQTT_E_TOPIC),
    (b"\x30\x01\x00", 4, lib.LDP_MQTT_E_TOPIC),
    (b"\x32\x04\x00\x01a\x00", 4, lib.LDP_MQTT_E_PACKET_ID),
    (b"\x32\x05\x00\x01a\x00\x00", 4, lib.LDP_MQTT_E_PACKET_ID),
    (b"\x30\x05\x00\x01a\x05x", 5, lib.LDP_MQTT_E_PROPS),
    (b"\x30\x03\x00\x01a", 5, lib.LDP_MQTT_E_PROPS),
    (b"\x30\x07\x00\x01a\xff\xff\xff\xff", 5, lib.LDP_MQTT_E_PROPS),
    (b"\xd0\x00", 3, lib.LDP_MQTT_E_VERSION),
])
def test_scan_rejects_malformed(data, version, code):
    good = control(13)
    n, consumed, _ = scan(good + data, version)
    assert n == code
    assert consumed == (0 if code == lib.LDP_MQTT_E_VERSION else len(good))
    assert ffi.string(lib.ldp_mqtt_strerror(n))


def test_scan_random_garbage_stays_in_bounds():
    rng = random.Random(7)
    base = b"".join(p for p, _ in stream(5))
    for _ in range(3000):
        data = bytearray(base[:rng.randrange(len(base) + 1)])
        for _ in range(rng.randrange(1, 6)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
        for version in (4, 5):
            n, consumed, rows = scan(data, version)
            assert consumed <= len(data)
            for fb, body, end, topic, payload, pid in rows:
                assert body <= end <= consumed


def test_pubacks_and_bulk_publishes_round_trip():
    ids = np.array([1, 258, 65535], np.uint16)
    out = bytearray(12)
    lib.ldp_mqtt_pubacks(ptr(ids), 3, ffi.from_buffer(out))
    assert bytes(out) == b"\x40\x02\x00\x01" b"\x40\x02\x01\x02" b"\x40\x02\xff\xff"
    topics = [b"ldp/c/r/a", b"x" * 200]
    buf = np.frombuffer(b"".join(topics), np.uint8)
    off = np.array([0, 9], np.uint32)
    tlen = np.array([9, 200], np.uint32)
    payloads = np.arange(2 * 150, dtype=np.uint32).astype(np.uint8).reshape(2, 150)
    for version in (4, 5):
        for qos in (0, 1):
            out = np.zeros(1000, np.uint8)
            ids = np.array([9, 10], np.uint16)
            w = lib.ldp_mqtt_build_publishes(ptr(buf), ptr(off), ptr(tlen), ptr(payloads), 150, 2,
                                             qos, version, ptr(ids), ptr(out), 1000)
            expect = b"".join(publish(t, p.tobytes(), qos, i, version)
                              for t, p, i in zip(topics, payloads, ids.tolist()))
            assert out[:w].tobytes() == expect
            assert lib.ldp_mqtt_build_publishes(ptr(buf), ptr(off), ptr(tlen), ptr(payloads), 150,
                                                2, qos, version, ptr(ids), ptr(out),
                                                len(expect) - 1) == lib.LDP_MQTT_E_BIG
    zero = np.array([0, 1], np.uint16)
    assert lib.ldp_mqtt_build_publishes(ptr(buf), ptr(off), ptr(tlen), ptr(payloads), 150, 2, 1, 4,
                                        ptr(zero), ptr(out), 1000) == lib.LDP_MQTT_E_PACKET_ID


# --- report topics ---------------------------------------------------------------------------

def adversarial_topics(count=30000, seed=3):
    rng = random.Random(seed)
    pieces = ["ldp", "r", "", "a", "Z9", "_", "-", "dev-1", "\n", "a\n", "\na", "é", ".", " ",
              "+", "#", "x" * 63, "x" * 64, "x" * 65, "y" * 64 + "\n", "y" * 64 + "\n\n", "\x00",
              "LDP", "ldp ", "rr", "\t", "\r", "a\r\n"]
    topics = [b"ldp/c/r/d", b"ldp/c/r/l/7", b"ldp//r/d", b"ldp/c/r/", b"ldp/c/r/d/", b"ldp/c/r/a/b/c",
              b"ldp/c\n/r/d\n", b"ldp/c/r/d\n/i\n", b"ldp/c/r\n/d", b"ldp\n/c/r/d", b"\xff/c/r/d",
              b"ldp/c/r/\xc3\xa9", b"ldp/c/r/d\xff", b""]
    while len(topics) < count:
        levels = ["ldp" if rng.random() < .7 else rng.choice(pieces), rng.choice(pieces),
                  "r" if rng.random() < .7 else rng.choice(pieces)]
        levels += [rng.choice(pieces) for _ in range(rng.choice([0, 1, 1, 2, 2, 3]))]
        if rng.random() < .3:
            levels = [lv + "".join(rng.choice("aZ09_-\n/é") for _ in range(rng.randrange(3)))
                      for lv in levels]
        raw = "/".join(levels).encode("utf-8")
        if rng.random() < .03:
            raw += bytes([rng.randrange(128, 256)])
        topics.append(raw)
    return topics


def test_report_topics_agree_with_parse_report_topic():
    topics = adversarial_topics()
    data = b"".join(topics)
    lens = np.array([len(t) for t in topics], np.uint32)
    offs = (np.cumsum(lens) - lens).astype(np.uint32)
    batch = PublishBatch(np.frombuffer(data, np.uint8), np.full(len(topics), 0x30, np.uint8),
                         np.zeros(len(topics), np.uint16), offs, lens,
                         np.zeros(len(topics), np.uint32), np.zeros(len(topics), np.uint32))
    spans = report_topics(batch)
    valid = 0
    for i, raw in enumerate(topics):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        expect = parse_report_topic(text)
        assert bool(spans.ok[i]) == (expect is not None), raw
        if expect is not None:
            valid += 1
            camp = data[spans.camp_off[i]:spans.camp_off[i] + spans.camp_len[i]].decode()
            dev = data[spans.dev_off[i]:spans.dev_off[i] + spans.dev_len[i]].decode()
            assert (camp, dev) == expect, raw
    assert 500 < valid < len(topics) - 1000  # both outcomes well exercised


# --- against a broker --------------------------------------------------------------------------

def settings(broker, **kw):
    return BrokerSettings.from_url(broker.url, **kw)


def lean(broker, protocol, client_id="lean-agg", **kw):
    kw.setdefault("session_expiry", 3600 if protocol == 5 else 0)
    return LeanClient(settings(broker), client_id, protocol=protocol, **kw)


def publish_qos1(broker, messages):
    pub = QosPublisher(broker.url, max_inflight=64)
    try:
        pub.publish_all(messages)
        pub.wait_acked(30)
    finally:
        pub.close()


def receive(client, count, timeout=10.0):
    """Batches until `count` messages arrived; [(topic, payload, packet_id, dup)]."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        batch = client.poll(0.2)
        got += [(batch.topic(i), batch.payload(i), int(batch.packet_id[i]), int(batch.dup[i]))
                for i in range(len(batch))]
    return got


@pytest.mark.parametrize("protocol", [4, 5])
def test_persistent_session_redelivers_only_unacknowledged(mosquitto, protocol):
    client = lean(mosquitto, protocol)
    assert client.connect() is False
    assert client.subscribe([("ldp/+/r/+", 1), ("ldp/+/r/+/+", 1)]) == [1, 1]
    client.disconnect()

    messages = [("ldp/camp/r/dev%d" % i, b"report-%03d" % i) for i in range(50)]
    publish_qos1(mosquitto, messages)

    assert client.connect() is True
    got = receive(client, 50)
    assert sorted((t, p) for t, p, _, _ in got) == sorted(messages)
    assert all(pid for _, _, pid, _ in got)
    acked = {p for _, p, _, _ in got[:20]}
    client.puback(np.array([pid for _, _, pid, _ in got[:20]], np.uint16))
    client.ping()  # the broker has processed the PUBACKs
    client.close()  # no DISCONNECT: as if the aggregator died before committing the rest

    assert client.connect() is True
    again = receive(client, 30)
    assert len(again) == 30 and {p for _, p, _, _ in again} == {p for _, p in messages} - acked
    assert all(dup for _, _, _, dup in again)
    assert len(receive(client, 1, timeout=0.5)) == 0
    client.puback(np.array([pid for _, _, pid, _ in again], np.uint16))
    client.disconnect()

    assert client.connect() is True
    late = receive(client, 1, timeout=0.7)
    assert late == [], (late, again)
    client.disconnect()


def test_unacknowledged_messages_survive_a_broker_restart(mosquitto):
    client = lean(mosquitto, 4)
    client.connect()
    client.subscribe([("ldp/+/r/+", 1)])
    client.disconnect()
    messages = [("ldp/camp/r/d%d" % i, b"m%d" % i) for i in range(30)]
    publish_qos1(mosquitto, messages)
    mosquitto.restart()
    assert client.connect() is True
    assert sorted((t, p) for t, p, _, _ in receive(client, 30)) == sorted(messages)
    client.disconnect()


def test_clean_session_keeps_nothing(mosquitto):
    client = lean(mosquitto, 4, persistent=False)
    assert client.connect() is False
    client.subscribe([("ldp/+/r/+", 1)])
    client.disconnect()
    publish_qos1(mosquitto, [("ldp/c/r/d", b"x")])
    assert client.connect() is False
    assert receive(client, 1, timeout=0.5) == []
    client.disconnect()


def test_mqtt5_persistent_session_needs_an_expiry(mosquitto):
    with pytest.raises(ValueError, match="session_expiry"):
        LeanClient(settings(mosquitto), "x", protocol=5, session_expiry=0)


@pytest.mark.parametrize("protocol", [4, 5])
def test_publish_and_publish_many_loop_back(mosquitto, protocol):
    client = lean(mosquitto, protocol, persistent=False, client_id="loop")
    client.connect()
    client.subscribe([("loop/#", 1)])
    client.publish_many([(b"loop/a", b"1"), ("loop/b", b"22")])
    pid = client.publish("loop/c", b"333", qos=1)
    assert pid and client.inflight == 1
    got = receive(client, 3)
    assert sorted((t, p) for t, p, _, _ in got) == [("loop/a", b"1"), ("loop/b", b"22"),
                                                     ("loop/c", b"333")]
    deadline = time.monotonic() + 5
    while client.inflight and time.monotonic() < deadline:
        client.poll(0.1)
    assert client.inflight == 0
    client.puback([p for _, _, p, _ in got])
    client.disconnect()


@pytest.mark.parametrize("protocol", [4, 5])
def test_bulk_publisher_qos1(mosquitto, protocol):
    sub = lean(mosquitto, protocol, client_id="bulk-sub")
    sub.connect()
    sub.subscribe([("ldp/+/r/+/+", 1)])
    n = 5000
    payloads = np.random.default_rng(1).integers(0, 256, (n, 40), dtype=np.uint8)
    topics = ["ldp/c/r/gen/%d" % i for i in range(n)]
    pub = BulkPublisher(settings(mosquitto), max_inflight=300, protocol=protocol)
    pub.publish_rows(topics, payloads)
    pub.wait_acked()
    pub.close()
    assert pub.published == n and pub.acked == n and pub.client.inflight == 0
    seen = {}
    deadline = time.monotonic() + 20
    while len(seen) < n and time.monotonic() < deadline:
        batch = sub.poll(0.2)
        if len(batch):
            spans = report_topics(batch)
            assert spans.ok.all()
            matrix = batch.payload_matrix(40)
            for i in range(len(batch)):
                seen[batch.topic(i)] = matrix[i].tobytes()
            sub.puback(batch.packet_id)
    sub.disconnect()
    assert len(seen) == n
    assert all(seen["ldp/c/r/gen/%d" % i] == payloads[i].tobytes() for i in range(n))


IDLE_DROP = 8.0
"""Seconds within which Mosquitto drops a silent keepalive=1 client (1.5 s in the spec; 2.0.x
checks keepalives coarsely, about 5 s)."""


def test_broker_drops_a_silent_client(mosquitto):
    """The control for the next test: without PINGREQs the connection does not survive."""
    client = lean(mosquitto, 4, keepalive=1, persistent=False, client_id="silent")
    client.connect()
    client.sock.settimeout(IDLE_DROP + 5)
    t0 = time.monotonic()
    assert client.sock.recv(16) == b""
    assert time.monotonic() - t0 < IDLE_DROP
    client.close()


@pytest.mark.parametrize("protocol", [4, 5])
def test_keepalive_pings_keep_an_idle_connection(mosquitto, protocol):
    client = lean(mosquitto, protocol, keepalive=1, persistent=False, client_id="idle")
    client.connect()
    client.subscribe([("idle/#", 0)])
    deadline = time.monotonic() + IDLE_DROP  # many keepalive periods, all idle
    while time.monotonic() < deadline:
        assert len(client.poll(0.3)) == 0
    assert client.pings >= IDLE_DROP / 1.0 - 2  # one per keepalive/2 of silence at least
    client.publish("idle/x", b"still here")
    assert [(t, p) for t, p, _, _ in receive(client, 1, timeout=2)] == [("idle/x", b"still here")]
    client.disconnect()


@pytest.fixture
def auth_broker(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("agg:%s\n" % password_hash("right"))
    os.chmod(passwd, 0o600)
    with PrivateMosquitto(extra_conf="allow_anonymous false\npassword_file %s\n" % passwd) as b:
        yield b


@pytest.mark.parametrize("protocol", [4, 5])
def test_bad_password_is_refused(auth_broker, protocol):
    bad = LeanClient(settings(auth_broker, username="agg", password="wrong"), "c1",
                     protocol=protocol, persistent=False)
    with pytest.raises(ConnectionRefusedError) as info:
        bad.connect()
    assert info.value.code in ((4, 5) if protocol == 4 else (0x86, 0x87))
    assert isinstance(info.value, ConnectionRefused) and "refused" in str(info.value)
    anonymous = LeanClient(settings(auth_broker), "c2", protocol=protocol, persistent=False)
    with pytest.raises(ConnectionRefusedError):
        anonymous.connect()
    good = LeanClient(settings(auth_broker, username="agg", password="right"), "c3",
                      protocol=protocol, persistent=False)
    assert good.connect() is False
    good.disconnect()


def test_unreachable_broker_is_an_oserror():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        client = LeanClient(BrokerSettings("127.0.0.1", port), "x", persistent=False)
        with pytest.raises(OSError):
            client.connect(timeout=2)


def test_broker_going_away_is_a_connection_error(mosquitto):
    client = lean(mosquitto, 5)
    client.connect()
    mosquitto.stop()
    with pytest.raises(ConnectionError):
        for _ in range(50):
            client.poll(0.1)


def test_a_name_never_ends_in_a_newline():
    """`$` in NAME_RE matched before a final newline, so `ldp/c\\n/r/d` was a report topic of
    campaign "c\\n"; both the Python rule and the C splitter refuse it now."""
    from ldpfleet.service.ingest.batch import ReportBatch
    from ldpfleet.service.ingest.loop import parse_report_topic
    topics = ["ldp/c\n/r/d", "ldp/c/r/d\n", "ldp/c/r/l/i\n", "ldp/c/r/d"]
    assert [parse_report_topic(t) is not None for t in topics] == [False, False, False, True]
    batch = ReportBatch.from_pairs([(t, b"x") for t in topics])
    assert batch.split_topics()[0].tolist() == [False, False, False, True]
