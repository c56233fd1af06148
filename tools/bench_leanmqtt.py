"""Drain rate of a pre-queued QoS 1 backlog: ldpfleet.mqtt.lean.LeanClient vs a paho subscriber.

For each client, on one private EmbeddedBroker: subscribe with a persistent session, leave,
publish N 40-byte QoS 1 messages (ldpfleet.loadgen.bulk.BulkPublisher), reconnect and time the first to the last
message received (LeanClient: poll + one puback write per poll; paho: counting in on_message,
paho acknowledging each message itself). Prints JSON.

    python tools/bench_leanmqtt.py [-n 200000] [--protocol 4|5] [--payload 40]
"""
import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aggregator"))

from ldpfleet.broker.embedded import EmbeddedBroker  # noqa: E402
from ldpfleet.mqtt.lean import LeanClient  # noqa: E402
from ldpfleet.loadgen.bulk import BulkPublisher  # noqa: E402
from ldpfleet.mqtt.client import PROTOCOLS, BrokerSettings, connect  # noqa: E402

FILTER = "ldp/+/r/+"
EXPIRY = 3600


def backlog(settings, n, payload, protocol):
    topics = ["ldp/bench/r/dev%d" % (i % 10000) for i in range(n)]
    payloads = np.random.default_rng(0).integers(0, 256, (n, payload), dtype=np.uint8)
    pub = BulkPublisher(settings, max_inflight=5000, protocol=protocol)
    try:
        t0 = time.perf_counter()
        pub.publish_rows(topics, payloads)
        pub.wait_acked()
        seconds = time.perf_counter() - t0
        return {"messages": n, "seconds": seconds, "rate": n / seconds}
    finally:
        pub.close()


def lean_phase(settings, n, payload, protocol, timeout):
    def client():
        return LeanClient(settings, "bench-lean", protocol=protocol, session_expiry=EXPIRY)
    sub = client()
    sub.connect()
    sub.subscribe([(FILTER, 1)])
    sub.disconnect()
    published = backlog(settings, n, payload, protocol)
    sub = client()
    if not sub.connect():
        raise RuntimeError("lean: no session on reconnect")
    count, polls, first, last = 0, 0, None, None
    deadline = time.monotonic() + timeout
    while count < n and time.monotonic() < deadline:
        batch = sub.poll(1.0)
        if not len(batch):
            continue
        if first is None:
            first = time.perf_counter()
        count += len(batch)
        polls += 1
        sub.puback(batch.packet_id)
        last = time.perf_counter()
    sub.disconnect()
    return published, result(count, n, first, last, polls=polls)


def paho_phase(settings, n, payload, protocol, timeout):
    def client():
        return settings.make_client("bench-paho", persistent=True, protocol=PROTOCOLS[protocol])

    state = {"count": 0, "first": None, "last": None}
    done, subscribed, connected = threading.Event(), threading.Event(), threading.Event()

    def on_connect(_c, _u, flags, rc, _p):
        state["session_present"] = flags.session_present
        connected.set()

    def on_message(_c, _u, _msg):
        now = time.perf_counter()
        if state["first"] is None:
            state["first"] = now
        state["count"] += 1
        state["last"] = now
        if state["count"] >= n:
            done.set()

    sub = client()
    sub.on_connect = on_connect
    sub.on_subscribe = lambda *a: subscribed.set()
    connect(sub, settings, persistent=True, session_expiry=EXPIRY)
    sub.loop_start()
    connected.wait(10)
    sub.subscribe(FILTER, qos=1)
    if not subscribed.wait(10):
        raise RuntimeError("paho: no SUBACK")
    sub.disconnect()
    sub.loop_stop()
    published = backlog(settings, n, payload, protocol)
    connected.clear()
    sub = client()
    sub.on_connect = on_connect
    sub.on_message = on_message
    connect(sub, settings, persistent=True, session_expiry=EXPIRY)
    sub.loop_start()
    done.wait(timeout)
    sub.disconnect()
    sub.loop_stop()
    return published, result(state["count"], n, state["first"], state["last"])


def result(count, n, first, last, **extra):
    seconds = (last - first) if first is not None and last is not None else None
    rate = (count - 1) / seconds if seconds else None
    return dict(received=count, complete=count >= n, seconds=seconds, msgs_per_s=rate, **extra)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--payload", type=int, default=40)
    ap.add_argument("--protocol", type=int, choices=(4, 5), default=4)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--skip-paho", action="store_true")
    args = ap.parse_args(argv)
    out = {"n": args.n, "payload_bytes": args.payload, "protocol": args.protocol}
    with EmbeddedBroker(max_queued_messages=args.n + 1000) as broker:
        settings = BrokerSettings.from_url(broker.url)
        pub, out["lean"] = lean_phase(settings, args.n, args.payload, args.protocol, args.timeout)
        out["publish_lean"] = {"msgs_per_s": pub["rate"], "seconds": pub["seconds"]}
        if not args.skip_paho:
            pub, out["paho"] = paho_phase(settings, args.n, args.payload, args.protocol,
                                          args.timeout)
            out["publish_paho_phase"] = {"msgs_per_s": pub["rate"], "seconds": pub["seconds"]}
            if out["lean"]["msgs_per_s"] and out["paho"]["msgs_per_s"]:
                out["speedup"] = out["lean"]["msgs_per_s"] / out["paho"]["msgs_per_s"]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
