"""A broker's malformed packets are a lost connection, never a crash: LeanClient raises
`MalformedPacket` (a ConnectionError) for truncated CONNACK/SUBACK/PUBLISH/PUBACK layouts and MQTT
5 property blocks, and only OSErrors for random packets of 0-16 bytes (fixed seed), at each
stage (answer to CONNECT, to SUBSCRIBE, while polling). `serve` behind a fake broker that
answers every other connection with one of them stays up, logs one line per loss, reconnects,
and, through the real Mosquitto in between, accepts every report exactly once."""
import random
import socket
import struct
import threading
import time

import numpy as np
import pytest

from ldpfleet.broker.embedded import free_port
from ldpfleet.mqtt.lean import LeanClient
from ldpfleet.mqtt.packets import MalformedPacket, varint
from ldpfleet.mqtt.client import BrokerSettings
from support.service import ServeProcess, direct_sketch, new_campaign, publisher, report_messages


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


CONNACK = {4: packet(0x20, b"\x01\x00"), 5: packet(0x20, b"\x01\x00\x00")}
"""Session present, accepted (MQTT 5: no properties)."""

# The audit's shapes: 4-7 byte packets whose fields run past their end.
MALFORMED = {
    "connack": [
        (4, bytes.fromhex("2001 00")),            # CONNACK without its return code
        (5, bytes.fromhex("2003 0000 05")),       # property block longer than the packet
        (5, bytes.fromhex("2003 0000 80")),       # property length: an unfinished varint
        (5, bytes.fromhex("2004 0000 0121")),     # Server Keep Alive (u16) without its value
        (5, bytes.fromhex("2004 0000 010b")),     # Subscription Identifier without its varint
        (5, bytes.fromhex("2005 0000 021f00")),   # Reason String: half a length
        (5, bytes.fromhex("2004 0000 01ff")),     # unknown property
    ],
    "suback": [
        (4, bytes.fromhex("9002 0001")),          # SUBACK without return codes
        (5, bytes.fromhex("9003 0001 05")),       # property block longer than the packet
        (5, bytes.fromhex("9004 0001 0127")),     # Maximum Packet Size (u32) without its value
        (5, bytes.fromhex("9005 0001 022600")),   # User Property: half a length
        (5, bytes.fromhex("9003 0001 00")),       # properties, no return code
    ],
    "poll": [
        (4, bytes.fromhex("3003 0005 61")),       # PUBLISH topic longer than the packet
        (4, bytes.fromhex("3203 0001 61")),       # QoS 1 PUBLISH without a packet id
        (5, bytes.fromhex("3004 0001 6105")),     # MQTT 5 PUBLISH properties past the end
        (4, bytes.fromhex("4001 00")),            # PUBACK of one byte
        (4, bytes.fromhex("d001 00")),            # PINGRESP with a body
        (4, bytes.fromhex("6002 0001")),          # PUBREL: a QoS 2 packet
        (4, bytes.fromhex("3400 ")),              # QoS 2 PUBLISH
        (4, bytes.fromhex("00 00")),              # reserved type 0
        (4, bytes.fromhex("30ffffffff7f")),       # remaining length of 5 bytes
    ],
}
STAGES = ("connack", "suback", "poll")


def read_packet(conn) -> bytes:
    """One MQTT packet from a socket (the fake broker's side), b"" at end of stream."""
    head = conn.recv(1)
    if not head:
        return b""
    length, mult = 0, 1
    while True:
        b = conn.recv(1)
        if not b:
            return b""
        head += b
        length += (b[0] & 0x7F) * mult
        mult <<= 7
        if not b[0] & 0x80:
            break
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            return b""
        body += chunk
    return head + body


def suback_for(subscribe: bytes, version: int) -> bytes:
    """A SUBACK granting QoS 1 to every filter of a SUBSCRIBE packet."""
    pos = 1
    while subscribe[pos] & 0x80:
        pos += 1
    pos += 1
    pid, pos = subscribe[pos:pos + 2], pos + 2
    if version == 5:
        pos += 1  # empty property block (LeanClient sends one)
    filters = 0
    while pos < len(subscribe):
        (n,) = struct.unpack_from("!H", subscribe, pos)
        pos += 2 + n + 1
        filters += 1
    return packet(0x90, pid + (b"\x00" if version == 5 else b"") + b"\x01" * filters)


class FaultyBroker:
    """A loopback MQTT endpoint: connection k follows plan[k] — ("fault", stage, version, bytes):
    answer well up to `stage`, then send the bytes and close — or ("proxy", seconds): relay to
    the real broker for that long; after the plan, relay for good."""

    def __init__(self, upstream_port: int, plan):
        self.upstream = upstream_port
        self.plan = list(plan)
        self.port = free_port()
        self.connections = 0
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "mqtt://127.0.0.1:%d" % self.port

    def _accept(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except socket.timeout:
                continue
            k, self.connections = self.connections, self.connections + 1
            step = self.plan[k] if k < len(self.plan) else ("proxy", None)
            target = self._fault if step[0] == "fault" else self._proxy
            threading.Thread(target=target, args=(conn, *step[1:]), daemon=True).start()

    def _fault(self, conn, stage, version, data):
        try:
            conn.settimeout(10)
            if read_packet(conn) and stage != "connack":
                conn.sendall(CONNACK[version])
                sub = read_packet(conn)
                if stage == "poll" and sub:
                    conn.sendall(suback_for(sub, version))
                    time.sleep(0.05)  # the SUBACK is read alone: the bytes come in a poll
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(2)
            while conn.recv(4096):  # until the client closes its end
                pass
        except OSError:
            pass
        finally:
            conn.close()

    def _proxy(self, conn, seconds):
        up = socket.create_connection(("127.0.0.1", self.upstream))
        done = threading.Event()

        def pipe(a, b):
            try:
                while not done.is_set():
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            done.set()

        threads = [threading.Thread(target=pipe, args=p, daemon=True)
                   for p in ((conn, up), (up, conn))]
        for t in threads:
            t.start()
        done.wait(seconds)
        done.set()
        for s in (conn, up):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.stopped.set()
        self.thread.join(5)
        self.server.close()


STAGE_KINDS = {"connack": (2, 2, 2, 9, 13), "suback": (9, 9, 9, 2, 4),
               "poll": (3, 3, 4, 9, 11, 13, 14, 5, 0, 15)}
"""Packet types drawn at each stage: mostly the one the client then parses."""


def random_packets(seed=2024, count=120, kinds=STAGE_KINDS["poll"]):
    """Random packets of 0-16 bytes of the given types, most of them one whole packet (its
    remaining length = the bytes that follow), so a field that runs past the packet's end
    also runs past what the client read."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        size = rng.randint(0, 16)
        data = bytearray(rng.getrandbits(8) for _ in range(size))
        if size:
            data[0] = rng.choice(kinds) << 4 | (data[0] & 0x0F)
        if size > 1 and rng.random() < 0.8:
            data[1] = size - 2 if rng.random() < 0.8 else rng.randint(0, size - 2)
        out.append(bytes(data))
    return out


def exercise(broker: FaultyBroker, stage: str, version: int):
    """Run LeanClient against the next connection up to `stage` and on; returns the exception
    that ended it (None: the bytes were valid and the connection just closed cleanly)."""
    client = LeanClient(BrokerSettings.from_url(broker.url), "fuzz", protocol=version,
                        persistent=True, session_expiry=60, keepalive=0)
    try:
        client.connect(timeout=5)
        client.subscribe([("ldp/+/r/#", 1)], timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            client.poll(0.5)
        return None
    except Exception as exc:  # noqa: BLE001 (what is raised is what the test checks)
        return exc
    finally:
        client.close()


@pytest.mark.parametrize("stage", STAGES)
def test_malformed_packets_are_a_lost_connection(stage):
    shapes = MALFORMED[stage]
    broker = FaultyBroker(0, [("fault", stage, v, data) for v, data in shapes])
    try:
        for version, data in shapes:
            exc = exercise(broker, stage, version)
            assert isinstance(exc, MalformedPacket), (data.hex(), version, repr(exc))
            assert isinstance(exc, ConnectionError) and broker.url in str(exc)
    finally:
        broker.close()


@pytest.mark.parametrize("version", (4, 5))
def test_random_packets_raise_only_connection_errors(version):
    plan = [("fault", stage, version, data) for stage in STAGES
            for data in random_packets(seed=2024 + version, kinds=STAGE_KINDS[stage])]
    broker = FaultyBroker(0, plan)
    malformed = 0
    try:
        for _fault, stage, _version, data in plan:
            exc = exercise(broker, stage, version)
            # the stream ends after the bytes: a ConnectionError (or a refusal, or malformed)
            assert isinstance(exc, ConnectionError), (stage, data.hex(), repr(exc))
            malformed += isinstance(exc, MalformedPacket)
    finally:
        broker.close()
    assert malformed > len(plan) // 4  # the generator does reach the parsers


def test_serve_survives_malformed_packets_and_loses_nothing(mosquitto, tmp_path):
    """serve (MQTT 5, the property-parsing path) behind the fake broker: a proxied connection,
    then each malformed shape (and random ones) alternating with a proxied second; reports
    published to the real broker meanwhile are all accepted once."""
    version = 5  # every shape is malformed in MQTT 5 too
    faults = [("fault", stage, version, data) for stage in STAGES for _v, data in MALFORMED[stage]]
    faults += [("fault", "poll", version, data) for data in random_packets(seed=7, count=6)]
    plan = [("proxy", 3.0)]
    for fault in faults:
        plan += [fault, ("proxy", 0.7)]
    state, camp = new_campaign(tmp_path, mosquitto.url, "fz", "olh", 2.0, "0-63")
    reports = camp.mechanism(1).perturb_batch(np.random.default_rng(5).integers(0, 64, 1500),
                                              np.random.default_rng(6))
    msgs = report_messages("fz", reports)
    broker = FaultyBroker(mosquitto.port, plan)
    serve = ServeProcess(broker.url, state, client_id="agg-fuzz",
                         extra_args=["--mqtt", "5", "--no-broker-check"])
    try:
        serve.start()
        pub = publisher(mosquitto.url)
        for chunk in range(0, len(msgs), 100):  # spread over the faulty connections
            pub.publish_all(msgs[chunk:chunk + 100])
            time.sleep(0.4)
            assert serve.proc.poll() is None, serve.log()
        pub.wait_acked()
        pub.close()
        counters = serve.wait_counts("fz", lambda c: c.get("accepted", 0) >= len(msgs)
                                     and broker.connections > len(plan), timeout=180)
        assert serve.proc.poll() is None, serve.log()
    finally:
        code = serve.stop()
        broker.close()
    with open(serve.log_path) as f:
        log = f.read()
    assert code == 0, serve.log()
    assert counters["accepted"] == len(msgs) and counters.get("second_report", 0) == 0
    assert "Traceback" not in log
    # a loss while polling logs its line (failed connects are logged at a bounded rate), and
    # a malformed packet is not taken for another client taking the session over
    assert log.count("disconnected from broker: malformed MQTT packet") >= len(MALFORMED["poll"])
    assert log.count("cannot connect to %s: malformed MQTT packet" % broker.url) >= 5
    from ldpfleet.service import Store
    with Store(state) as store:
        n, blob = store.sketch_blob("fz", 1)
    assert n == len(msgs)
    assert blob == direct_sketch(camp.mechanism(1), reports).serialize()
