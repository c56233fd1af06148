"""Ingest benchmark: reports/s through a private Mosquitto into the aggregator's sketches,
beside the broker's own ceiling for a bare paho subscriber measured in the same run.

Method (both sides the same, so the ratio isolates the aggregator's own cost):
1. a persistent MQTT session subscribes to `ldp/+/r/+` at QoS 1 and goes away;
2. the fleet generator publishes N reports (the broker queues them for the absent session;
   its queue is sized for N: Mosquitto drops what does not fit, QoS 1 included);
3. the subscriber comes back and drains the backlog, so the publisher does not compete for
   the 2 cores; the rate is the messages after the first one counted, over the time from the
   first to the last (start-up costs excluded on both sides).
The bare subscriber is paho-mqtt with the aggregator's protocol version and QoS, counting
messages in `on_message` and nothing else; its clock runs from the first message to the last.
Because paho's per-message cost can exceed the aggregator's own (which batches acks), the
broker's true ceiling is also measured with a minimal MQTT 3.1.1 socket subscriber (QoS 1,
PUBACKs written once per received chunk), and for a campaign with end-to-end acknowledgements
(the default; `--no-ack` for one without) once more publishing one QoS 0 ack per report as
serve does (`raw_socket_acks_rate`: the broker's ceiling for that work). `*_broker_cpu_share`
is Mosquitto's CPU time over a raw drain's wall time: near 1, the broker was the ceiling.
The aggregator is `ldpfleet serve` (subprocess): validation, dedupe, the mechanism's C decode,
commit, then PUBACKs; its committed counters are polled every 20 ms, and its clock runs from the
first poll that shows a committed batch to the one that shows all N accepted (`_rate`); the
`_sustained_rate` is the steady state, between the polls that first show 10 % and 90 % of N
accepted (the ramp-up of the first reads and the last commit left out; the raw subscriber has
neither). It runs on SQLite,
on PostgreSQL (a throw-away database on the machine's server; `--no-postgres` skips it), and as
2 workers of one group (`serve --group`, MQTT 5 shared subscription) on PostgreSQL. Each rate is
also given as a ratio to the raw-socket rate of the same run; `loadgen_rate` is the fleet
generator's publishing rate over all the runs.

Behind a broker's packaged limits (`live_*`): a pre-queued backlog cannot measure a broker that
keeps only 1,000 messages for an absent session (Mosquitto's `max_queued_messages`), so `serve`
(SQLite, its default MQTT version and options) stays connected while the fleet generator
publishes `--live-reports` reports as fast as it can, on two fresh brokers in turn:
`live_packaged` runs a Mosquitto whose config holds only `listener` and `allow_anonymous`
(packaged defaults: `max_inflight_messages 20`, `max_queued_messages 1000`), `live_sized` runs
`broker-config`'s (sized queues, `max_inflight_messages 10000`, logins, ACL; serve, the admin and
the fleet each log in). Each rate is serve's committed reports per second between the polls
that first and last saw its accepted counter grow; `live_packaged_ratio_sized` is the packaged
rate over the sized one (1 = the packaged limits cost nothing), `*_dropped` what the broker
dropped (reports never accepted; nothing re-sends here). `live_packaged_mqtt4_*` is the same on
the packaged broker with `serve --mqtt 4` (MQTT 3.1.1: the broker's 20-message window holds).
A live rate cannot exceed the fleet generator's (`*_loadgen_rate`), so `held_*` also measures
serve's own drain without a publisher beside it: serve is stopped (SIGSTOP, still connected)
while the fleet publishes `--held-reports` reports, which the broker holds for the connected
session, then continued (SIGCONT). Behind packaged limits Mosquitto 2.0.11 did not keep
65,535 in flight for a session that stopped reading: it held about 55,000 messages of 18 bytes,
17,000 of 200 and 5,000 of 1,000 bytes (checked by hand) and dropped the rest, so
--held-reports stays below that. The clock runs from SIGCONT to the poll that shows all
accepted; `held_packaged_ratio_sized` is the figure to read.

Prints one JSON object. Not a test: no assertion on timing.
"""
import argparse
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "aggregator"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from ldpfleet.loadgen import FleetOptions, run_fleet  # noqa: E402
from ldpfleet.broker.embedded import EmbeddedBroker, MosquittoProcess, free_port  # noqa: E402
from ldpfleet.broker.secured import SecuredBroker, write_secured_config  # noqa: E402
from ldpfleet.loadgen.serve_process import ServeProcess  # noqa: E402
from ldpfleet.service import BrokerSettings, Store, create_campaign  # noqa: E402
from ldpfleet.mqtt import client as brokermod  # noqa: E402
from ldpfleet.core.config import DEFAULT_DELIVERY  # noqa: E402
from ldpfleet.service.campaigns.manage import Issuance  # noqa: E402
from ldpfleet.core.signing import write_signing_key  # noqa: E402


class BareSubscriber:
    """A paho subscriber on a persistent session that only counts messages."""

    def __init__(self, settings, protocol: int, client_id: str = "bench-bare"):
        self.settings = settings
        self.protocol = brokermod.PROTOCOLS[protocol]
        self.client_id = client_id
        self.count = 0
        self.target = None
        self.done = threading.Event()
        self.ready = threading.Event()
        self.first_at = None
        self.connected_at = None

    def _client(self):
        client = self.settings.make_client(self.client_id, persistent=True, protocol=self.protocol)
        client.on_message = self._on_message
        client.on_connect = self._on_connect
        client.on_subscribe = lambda *a: self.ready.set()
        return client

    def _on_connect(self, client, userdata, flags, reason, props):
        self.connected_at = time.perf_counter()
        client.subscribe("ldp/+/r/+", qos=1)

    def _on_message(self, client, userdata, msg):
        self.count += 1
        if self.count == 1:
            self.first_at = time.perf_counter()
        if self.target is not None and self.count >= self.target:
            self.last_at = time.perf_counter()
            self.done.set()

    def subscribe_and_leave(self):
        client = self._client()
        brokermod.connect(client, self.settings, persistent=True, session_expiry=3600)
        client.loop_start()
        if not self.ready.wait(10):
            raise RuntimeError("bare subscriber got no SUBACK")
        client.disconnect()
        client.loop_stop()

    def drain(self, n: int, timeout: float) -> float:
        """Reconnect and receive the n queued messages; returns messages/s after the first."""
        self.count, self.target = 0, n
        self.done.clear()
        client = self._client()
        brokermod.connect(client, self.settings, persistent=True, session_expiry=3600)
        client.loop_start()
        try:
            if not self.done.wait(timeout):
                raise TimeoutError("bare subscriber got %d of %d" % (self.count, n))
            return (n - 1) / (self.last_at - self.first_at)
        finally:
            client.unsubscribe("ldp/+/r/+")  # so the next run's reports are not queued for us
            client.disconnect()
            client.loop_stop()


class GmqttSubscriber:
    """The asyncio candidate: gmqtt (maintained, MQTT 5) with acknowledgement after processing
    (`optimistic_acknowledgement=False`: the PUBACK goes out when the async on_message returns),
    counting messages and nothing else."""

    def __init__(self, settings, protocol: int, client_id: str = "bench-gmqtt"):
        self.settings, self.protocol, self.client_id = settings, protocol, client_id

    def _client(self, on_message):
        import gmqtt
        from gmqtt.mqtt.constants import MQTTv311, MQTTv50
        client = gmqtt.Client(self.client_id, clean_session=False, optimistic_acknowledgement=False,
                              session_expiry_interval=3600)
        client.on_message = on_message
        return client, (MQTTv50 if self.protocol == 5 else MQTTv311)

    def subscribe_and_leave(self):
        import asyncio

        async def run():
            async def on_message(*_a):
                return 0
            client, version = self._client(on_message)
            await client.connect(self.settings.host, self.settings.port, version=version)
            client.subscribe("ldp/+/r/+", qos=1)
            await asyncio.sleep(0.5)
            await client.disconnect()
        asyncio.run(run())

    def drain(self, n: int, timeout: float) -> float:
        import asyncio
        state = {"count": 0, "first": None, "last": None}

        async def run():
            done = asyncio.Event()

            async def on_message(*_a):
                state["count"] += 1
                if state["count"] == 1:
                    state["first"] = time.perf_counter()
                if state["count"] >= n:
                    state["last"] = time.perf_counter()
                    done.set()
                return 0
            client, version = self._client(on_message)
            await client.connect(self.settings.host, self.settings.port, version=version)
            await asyncio.wait_for(done.wait(), timeout)
            await asyncio.sleep(0.2)  # the last PUBACKs
            await client.disconnect()
        asyncio.run(run())
        return (n - 1) / (state["last"] - state["first"])


class RawSubscriber:
    """A minimal MQTT 3.1.1 QoS 1 subscriber on a raw socket: counts PUBLISH packets and
    acknowledges each received chunk's packets with one write (persistent session)."""

    def __init__(self, host, port, client_id="bench-raw"):
        self.host, self.port, self.client_id = host, port, client_id

    def _connect(self, clean: bool = False):
        cid = self.client_id.encode()
        body = (struct.pack("!H", 4) + b"MQTT" + bytes([4, 0x02 if clean else 0x00, 0, 60])
                + struct.pack("!H", len(cid)) + cid)
        sock = socket.create_connection((self.host, self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(bytes([0x10]) + _varint(len(body)) + body)
        if sock.recv(4)[:1] != b"\x20":
            raise RuntimeError("raw subscriber: no CONNACK")
        return sock

    def subscribe_and_leave(self):
        sock = self._connect()
        topic = b"ldp/+/r/+"
        body = struct.pack("!H", 1) + struct.pack("!H", len(topic)) + topic + bytes([1])
        sock.sendall(bytes([0x82]) + _varint(len(body)) + body)
        if sock.recv(5)[:1] != b"\x90":
            raise RuntimeError("raw subscriber: no SUBACK")
        sock.sendall(b"\xe0\x00")
        sock.close()

    def forget(self):
        """End the persistent session (a clean-session connect discards it)."""
        sock = self._connect(clean=True)
        sock.sendall(b"\xe0\x00")
        sock.close()

    def drain(self, n: int, timeout: float, acks: bool = False) -> float:
        """Receive n queued PUBLISH packets; returns messages/s after the first. `acks`: also
        publish one QoS 0 message per report to `ldp/<campaign>/a/<device>` with a 12-byte
        payload, in the same write as the PUBACKs: the broker's work for a subscriber that
        sends spec §6 acknowledgements, as serve does for a campaign that asks for them.
        `cpu_share` is then this subscriber's CPU time over its wall time: well below 1, it
        waited for the broker (the broker is the ceiling, not this loop)."""
        sock = self._connect()
        sock.settimeout(timeout)
        buf = bytearray()
        count, first_at = 0, None
        ack_payload = bytes(12)
        while count < n:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("raw subscriber: connection closed after %d" % count)
            buf += chunk
            out = bytearray()
            pos = 0
            while True:
                parsed = _packet(buf, pos)
                if parsed is None:
                    break
                kind, start, end = parsed
                if kind >> 4 == 3:
                    if first_at is None:
                        first_at, cpu_at = time.perf_counter(), time.process_time()
                    count += 1
                    (tlen,) = struct.unpack_from("!H", buf, start)
                    if (kind >> 1) & 3:
                        out += b"\x40\x02" + bytes(buf[start + 2 + tlen:start + 4 + tlen])
                    if acks:
                        topic = bytes(buf[start + 2:start + 2 + tlen]).replace(b"/r/", b"/a/", 1)
                        out += (b"\x30" + _varint(tlen + 14) + struct.pack("!H", tlen) + topic
                                + ack_payload)
                pos = end
            del buf[:pos]
            if out:
                sock.sendall(out)
        last_at, cpu_end = time.perf_counter(), time.process_time()
        sock.sendall(b"\xe0\x00")
        sock.close()
        self.cpu_share = (cpu_end - cpu_at) / (last_at - first_at)
        return (n - 1) / (last_at - first_at)


def broker_cpu_share(broker, drain, *args, **kw):
    """(drain's result, the broker process's CPU seconds over drain's wall time): near 1, the
    single-threaded Mosquitto was the ceiling of that drain (Linux /proc; None elsewhere)."""
    def cpu():
        try:
            with open("/proc/%d/stat" % broker.proc.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, AttributeError, ValueError):
            return None
    c0, t0 = cpu(), time.perf_counter()
    result = drain(*args, **kw)
    c1, t1 = cpu(), time.perf_counter()
    return result, (round((c1 - c0) / (t1 - t0), 3) if c0 is not None and c1 is not None else None)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packet(buf, pos):
    """(first byte, body start, end) of the complete packet at `pos`, or None."""
    if pos + 2 > len(buf):
        return None
    length, mult, i = 0, 1, pos + 1
    while True:
        if i >= len(buf):
            return None
        length += (buf[i] & 0x7F) * mult
        mult <<= 7
        i += 1
        if not buf[i - 1] & 0x80:
            break
    if i + length > len(buf):
        return None
    return buf[pos], i, i + length


def publish(url, campaign, key, n, seed):
    result = run_fleet(url, campaign, key, FleetOptions(devices=n, seed=seed, id_prefix="b%d" % seed,
                                                   ack_wait=0))  # serve is not running yet
    if result.sent != n:
        raise RuntimeError("fleet sent %d of %d" % (result.sent, n))
    return result


def aggregator_drain(serves, state, campaign, n, timeout):
    """Start the `serve` processes (in threads: start() blocks until each is ready) and poll
    their committed counters every 20 ms; returns (reports/s between the first committed batch
    and the last, counters, reports accepted at the first poll that showed any, sustained
    reports/s between the polls that first showed 10 % and 90 % of n accepted)."""
    starters = [threading.Thread(target=serve.start) for serve in serves]
    for starter in starters:
        starter.start()
    deadline = time.perf_counter() + timeout
    first = first_at = None
    polls = []
    try:
        with Store(state) as store:
            while True:
                counters = store.counters(campaign)
                now = time.perf_counter()
                accepted = counters.get("accepted", 0)
                polls.append((now, accepted))
                if first is None and accepted:
                    first, first_at = accepted, now
                if accepted >= n:
                    break
                if now > deadline:
                    raise TimeoutError("aggregator accepted %d of %d" % (accepted, n))
                time.sleep(0.02)
    finally:
        for starter in starters:
            starter.join()
        for serve in serves:
            serve.stop()
    if first >= n:
        raise RuntimeError("the first committed poll already held all %d reports; use more" % n)
    lo = next(p for p in polls if p[1] >= 0.1 * n)
    hi = next(p for p in polls if p[1] >= 0.9 * n)
    sustained = (hi[1] - lo[1]) / (hi[0] - lo[0]) if hi[0] > lo[0] else float("nan")
    return (n - first) / (now - first_at), counters, first, sustained


def serve_run(broker, state, key_file, key, campaign, args, tmp, workers=0):
    """One aggregator measurement: make the campaign, let serve (or `workers` serves of one
    group) subscribe and leave, pre-queue N reports, drain them. Returns (rate, counters,
    accepted before the clock, the publisher's result)."""
    settings = BrokerSettings.from_url(broker.url)
    with Store(state) as store:
        if store.campaign(campaign) is None:
            delivery = dict(DEFAULT_DELIVERY, ack=not args.no_ack)
            create_campaign(store, settings, key_file, campaign, args.mechanism, args.epsilon,
                            str(args.domain), issue=Issuance(delivery=delivery))
    extra = ["--mqtt", str(args.mqtt), "--status-interval", "0", "--no-broker-check"]

    def make(i):
        name = "%s-%d" % (campaign, i)
        group = ["--group", campaign] if workers else []
        return ServeProcess(broker.url, state, client_id=name, batch_size=args.batch_size,
                            log_path=os.path.join(tmp, name + ".log"), extra_args=extra + group)
    count = max(1, workers)
    for serve in [make(i).start() for i in range(count)]:
        serve.stop()
    pub = publish(broker.url, campaign, key, args.reports, seed=len(campaign) + 10 * count)
    rate, counters, first, sustained = aggregator_drain(
        [make(i) for i in range(count)], state, campaign, args.reports, args.timeout)
    for i in range(count):  # so later runs' reports are not queued for these sessions
        forget_session(settings, "%s-%d" % (campaign, i))
    return rate, counters, first, pub, sustained


def live_broker(kind: str, tmp: str):
    """A fresh Mosquitto for a live run: (process, serve's, the admin's and the fleet's
    BrokerSettings, serve's extra arguments). `packaged`: a config of `listener` and
    `allow_anonymous` only; `sized`: broker-config's, logins and ACL included."""
    import csv
    import getpass
    port = free_port()
    where = os.path.join(tmp, "live-" + kind)
    os.makedirs(where, exist_ok=True)
    url = "mqtt://127.0.0.1:%d" % port
    log_path = os.path.join(where, "mosquitto.log")
    if kind == "packaged":
        conf = os.path.join(where, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
        plain = BrokerSettings.from_url(url)
        return MosquittoProcess(conf, port).start(), plain, plain, plain, []
    devices = os.path.join(where, "devices.txt")
    with open(devices, "w") as f:
        f.write("dev-0\n")
    paths = write_secured_config(where, SecuredBroker(
        "agg", ["dev-0"], loadgen_user="loadgen", port=port, bind="127.0.0.1",
        insecure_plaintext=True, log_file=log_path, run_as=getpass.getuser()))
    with open(paths["credentials.csv"]) as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    pw = os.path.join(where, "agg.pw")
    with open(pw, "w") as f:
        f.write(creds["agg"] + "\n")
    proc = MosquittoProcess(paths["mosquitto.conf"], port, log_path=log_path).start()
    login = lambda user: BrokerSettings.from_url(url, username=user, password=creds[user])  # noqa: E731
    return (proc, login("agg"), login("agg-admin"), login("loadgen"),
            ["--username", "agg", "--password-file", pw])


def live_run(kind: str, args, tmp: str, key_file: str, key, mqtt_version: int = None,
             held: bool = False):
    """serve on a fresh `kind` broker, connected while the fleet publishes --live-reports
    reports, or, `held`, stopped while the fleet publishes --held-reports and then continued
    (module docstring): {rate, accepted, dropped, loadgen_rate}."""
    import signal
    proc, _serve_login, admin, fleet_login, login_args = live_broker(kind, tmp)
    name = "%s-%s%s" % ("held" if held else "live", kind, mqtt_version or "")
    state = "sqlite:///%s" % os.path.join(tmp, name + ".db")
    n = args.held_reports if held else args.live_reports
    try:
        with Store(state) as store:
            create_campaign(store, admin, key_file, "live", args.mechanism, args.epsilon,
                            str(args.domain), issue=Issuance(
                                delivery=dict(DEFAULT_DELIVERY, ack=not args.no_ack)))
        extra = ["--status-interval", "0", "--no-broker-check"] + login_args
        if mqtt_version:
            extra += ["--mqtt", str(mqtt_version)]
        serve = ServeProcess(proc.url, state, client_id=name,
                             log_path=os.path.join(tmp, name + ".log"), extra_args=extra).start()
        published = {}

        def fleet():
            try:
                published["result"] = run_fleet(fleet_login, "live", key, FleetOptions(
                    devices=n, seed=77, id_prefix="l", ack_wait=0))
            except Exception as exc:  # noqa: BLE001 (reported below)
                published["error"] = exc
        thread = threading.Thread(target=fleet)
        polls = []
        try:
            with Store(state) as store:
                if held:
                    os.kill(serve.pid, signal.SIGSTOP)
                thread.start()
                if held:
                    thread.join()
                    time.sleep(0.5)  # the broker routes the last ones to serve's session
                    os.kill(serve.pid, signal.SIGCONT)
                    polls.append((time.perf_counter(), 0))  # the drain's clock starts here
                deadline = time.perf_counter() + args.timeout
                while True:
                    accepted = store.counters("live").get("accepted", 0)
                    now = time.perf_counter()
                    if not polls or accepted > polls[-1][1]:
                        polls.append((now, accepted))
                    if accepted >= n or now > deadline:
                        break
                    if not thread.is_alive() and now - polls[-1][0] > 3.0:
                        break  # the fleet is done and nothing more comes: the rest was dropped
                    time.sleep(0.02)
        finally:
            if held:
                os.kill(serve.pid, signal.SIGCONT)
            thread.join()
            serve.stop()
    finally:
        proc.stop()
    if "error" in published:
        raise published["error"]
    grown = polls if held else [p for p in polls if p[1] > 0]
    (t0, a0), (t1, a1) = grown[0], grown[-1]
    pub = published["result"]
    return {"rate": round((a1 - a0) / (t1 - t0), 1) if t1 > t0 else None, "accepted": a1,
            "dropped": n - a1, "loadgen_rate": round(pub.sent / pub.seconds, 1)}


def forget_session(settings, client_id):
    """End a persistent session: a clean connect with the same client id discards it."""
    client = settings.make_client(client_id, persistent=False, protocol=brokermod.PROTOCOLS[4])
    brokermod.start(client, settings)
    client.disconnect()
    client.loop_stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=200_000)
    ap.add_argument("--mechanism", default="olh")
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--domain", type=int, default=256)
    ap.add_argument("--mqtt", type=int, choices=(4, 5), default=5,
                    help="MQTT version of both subscribers (serve's --mqtt)")
    ap.add_argument("--batch-size", type=int, default=10000, help="serve --batch-size (its default)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--no-postgres", dest="postgres", action="store_false",
                    help="skip the PostgreSQL runs (serve on PostgreSQL, 2 workers of a group); "
                         "they use a throw-away database on the machine's PostgreSQL "
                         "(LDPFLEET_TEST_POSTGRES_ADMIN, default postgres@127.0.0.1)")
    ap.add_argument("--live-reports", type=int, default=200_000,
                    help="reports of each live run (serve connected while the fleet publishes, "
                         "behind packaged and broker-config's limits; 0 skips them)")
    ap.add_argument("--held-reports", type=int, default=40_000,
                    help="reports of each held run (published while serve is stopped but "
                         "connected, then drained; about 50,000 OLH reports fit behind packaged "
                         "limits, see the docstring)")
    ap.add_argument("--only-live", action="store_true",
                    help="only the live runs (packaged limits against broker-config's)")
    ap.add_argument("--no-ack", action="store_true",
                    help="a campaign without end-to-end acknowledgements (spec §6): serve then "
                         "publishes no ack per report; compare the two runs for the acks' cost")
    args = ap.parse_args(argv)
    live = {}
    if args.live_reports:
        with tempfile.TemporaryDirectory(prefix="ldpfleet-bench-live-") as tmp:
            key_file = os.path.join(tmp, "fleet.key")
            key = write_signing_key(key_file)
            live["live_sized"] = live_run("sized", args, tmp, key_file, key)
            live["live_packaged"] = live_run("packaged", args, tmp, key_file, key)
            live["live_packaged_mqtt4"] = live_run("packaged", args, tmp, key_file, key, 4)
            if args.held_reports:
                live["held_sized"] = live_run("sized", args, tmp, key_file, key, held=True)
                live["held_packaged"] = live_run("packaged", args, tmp, key_file, key, held=True)
        out = {"live_reports": args.live_reports, "mechanism": args.mechanism,
               "live_method": "serve connected while the fleet publishes (see docstring)"}
        for name, figures in live.items():
            out.update({"%s_%s" % (name, k): v for k, v in figures.items()})
        for name, sized in (("live_packaged", "live_sized"), ("live_packaged_mqtt4", "live_sized"),
                            ("held_packaged", "held_sized")):
            if live.get(name, {}).get("rate") and live[sized]["rate"]:
                out[name + "_ratio_sized"] = round(live[name]["rate"] / live[sized]["rate"], 3)
        if args.only_live:
            print(json.dumps(out, sort_keys=True))
            return 0
        live = out

    with tempfile.TemporaryDirectory(prefix="ldpfleet-bench-") as tmp, \
            EmbeddedBroker(max_queued_messages=max(1_000_000, 2 * args.reports)) as broker:
        settings = BrokerSettings.from_url(broker.url)
        state = "sqlite:///%s" % os.path.join(tmp, "agg.db")
        key_file = os.path.join(tmp, "fleet.key")
        key = write_signing_key(key_file)
        with Store(state) as store:
            delivery = dict(DEFAULT_DELIVERY, ack=not args.no_ack)
            create_campaign(store, settings, key_file, "bench", args.mechanism, args.epsilon,
                            str(args.domain), issue=Issuance(delivery=delivery))

        raw = RawSubscriber(broker.host, broker.port)
        raw.subscribe_and_leave()
        pub_raw = publish(broker.url, "bench", key, args.reports, seed=3)
        raw_rate, raw_broker = broker_cpu_share(broker, raw.drain, args.reports, args.timeout)
        raw_cpu = raw.cpu_share
        raw.forget()  # so the later runs' reports are not queued for it
        raw_acks_rate, pub_raw_acks = None, None
        if not args.no_ack:  # the same broker work as serve's: one ack published per report
            raw.subscribe_and_leave()
            pub_raw_acks = publish(broker.url, "bench", key, args.reports, seed=6)
            raw_acks_rate, raw_acks_broker = broker_cpu_share(broker, raw.drain, args.reports,
                                                              args.timeout, acks=True)
            raw_acks_cpu = raw.cpu_share
            raw.forget()

        bare = BareSubscriber(settings, args.mqtt)
        bare.subscribe_and_leave()
        pub_bare = publish(broker.url, "bench", key, args.reports, seed=1)
        bare_rate = bare.drain(args.reports, args.timeout)
        forget_session(settings, bare.client_id)
        import importlib.util
        if importlib.util.find_spec("gmqtt") is None:  # an optional candidate: pip install gmqtt
            gmqtt_rate, pub_gmqtt = None, None
        else:
            candidate = GmqttSubscriber(settings, args.mqtt)
            candidate.subscribe_and_leave()
            pub_gmqtt = publish(broker.url, "bench", key, args.reports, seed=4)
            gmqtt_rate = candidate.drain(args.reports, args.timeout)
            forget_session(settings, candidate.client_id)

        runs = {"serve_sqlite": serve_run(broker, state, key_file, key, "bench", args, tmp)}
        if args.postgres:
            from support.postgres import ThrowawayDatabase, server_or_skip  # tests/support
            server_or_skip()
            # a PostgreSQL state names its dedupe key file (every worker the same one)
            os.environ["LDPFLEET_DEDUPE_KEY"] = os.path.join(tmp, "pg.dedupe-key")
            with ThrowawayDatabase() as url:
                runs["serve_postgresql"] = serve_run(broker, url, key_file, key, "benchpg", args, tmp)
                runs["workers2_postgresql"] = serve_run(broker, url, key_file, key, "benchw2",
                                                        args, tmp, workers=2)

    pubs = [pub_raw, pub_bare] + [run[3] for run in runs.values()] + (
        [pub_gmqtt] if pub_gmqtt else []) + ([pub_raw_acks] if pub_raw_acks else [])
    publish_rate = sum(p.sent for p in pubs) / sum(p.seconds for p in pubs)
    out = {
        "reports": args.reports, "mechanism": args.mechanism, "epsilon": args.epsilon,
        "domain": args.domain, "mqtt": args.mqtt, "qos": 1, "acks": not args.no_ack,
        "batch_size": args.batch_size,
        "raw_socket_rate": round(raw_rate, 1),
        "raw_socket_cpu_share": round(raw_cpu, 3),
        "raw_socket_broker_cpu_share": raw_broker,
        "bare_subscriber_rate": round(bare_rate, 1),
        "bare_subscriber_ratio_raw": round(bare_rate / raw_rate, 3),
        "gmqtt_subscriber_rate": round(gmqtt_rate, 1) if gmqtt_rate else None,
        "gmqtt_subscriber_ratio_raw": round(gmqtt_rate / raw_rate, 3) if gmqtt_rate else None,
        "loadgen_rate": round(publish_rate, 1),
        "loadgen_ratio_raw": round(publish_rate / raw_rate, 3),
        "method": "pre-queued backlog drained by a returning persistent session (see docstring)",
    }
    if raw_acks_rate:
        out.update(raw_socket_acks_rate=round(raw_acks_rate, 1),
                   raw_socket_acks_cpu_share=round(raw_acks_cpu, 3),
                   raw_socket_acks_broker_cpu_share=raw_acks_broker)
    out.update(live)
    for name, (rate, counters, first, _pub, sustained) in runs.items():
        out[name + "_rate"] = round(rate, 1)
        out[name + "_ratio_raw"] = round(rate / raw_rate, 3)
        if raw_acks_rate:
            out[name + "_ratio_raw_acks"] = round(rate / raw_acks_rate, 3)
            out[name + "_sustained_ratio_raw_acks"] = round(sustained / raw_acks_rate, 3)
        out[name + "_sustained_rate"] = round(sustained, 1)
        out[name + "_sustained_ratio_raw"] = round(sustained / raw_rate, 3)
        out[name + "_accepted"] = counters.get("accepted", 0)
        out[name + "_rejected"] = sum(v for k, v in counters.items()
                                      if k not in ("received", "accepted"))
        out[name + "_accepted_before_clock"] = first
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
