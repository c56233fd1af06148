"""Helpers for the device tests: a paho subscriber with an ordering barrier, a retained
publisher and campaign configs (real broker, real interpreter; no mocks); running a MicroPython
device to completion (`run_device`, with the test-only crash points of
tests/support/micropython/crash_main.py), reading its ledger back (`read_ledger`, both clients
share the layout) and the heap/speed script of one mechanism (`report_cycle_script`)."""
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt

from ldpfleet.core import config as campaign_config
from ldpfleet.core import signing
from ldpfleet.core.signing import SigningKey
from ldpfleet.provision import device_runner

SIGNING_KEY = SigningKey.from_seed(bytes(range(32)))
"""The tests' aggregator key (Ed25519, spec §5.1); devices trust only its public half."""
OTHER_KEY = SigningKey.from_seed(bytes(range(1, 33)))
"""A valid Ed25519 key that no test device trusts."""
SENTINEL_TOPIC = "ldp/sentinel/r/barrier"
CRASH_MAIN = Path(__file__).resolve().parent / "micropython" / "crash_main.py"
"""main.py with crash points (`--crash-point STEP`): test runs only, never shipped."""


def _client(port, client_id=None, clean_session=True):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or "t-" + uuid.uuid4().hex[:10],
                    protocol=mqtt.MQTTv311, clean_session=clean_session)
    c.reconnect_delay_set(0.1, 0.5)
    c.connect("127.0.0.1", port)
    return c


class ReportCollector:
    """Every message on ldp/+/r/+ in arrival order. `barrier()` publishes a sentinel and waits
    for it: Mosquitto routes in order, so any report the broker acknowledged before the call has
    arrived by then."""

    def __init__(self, port, topic="ldp/+/r/+"):
        self.messages = []
        self.cond = threading.Condition()
        self.subscribed = threading.Event()
        self.client = _client(port, clean_session=False)
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda c, u, mid, rc, p: self.subscribed.set()
        self.client.loop_start()
        if not self.subscribed.wait(10):
            raise RuntimeError("subscriber did not get its SUBACK")

    def _on_message(self, client, userdata, msg):
        with self.cond:
            self.messages.append((msg.topic, bytes(msg.payload)))
            self.cond.notify_all()

    def reports(self):
        with self.cond:
            return [(t, p) for t, p in self.messages if t != SENTINEL_TOPIC]

    def wait_for(self, predicate, timeout=30.0):
        """Wait until predicate(reports) is true; returns the reports either way."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                reports = [(t, p) for t, p in self.messages if t != SENTINEL_TOPIC]
                left = deadline - time.monotonic()
                if predicate(reports) or left <= 0:
                    return reports
                self.cond.wait(min(left, 0.2))

    def publish(self, topic, payload: bytes, retain=True):
        """Publish at QoS 1 from the collector's own connection and wait for the PUBACK."""
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)

    def barrier(self, port=None, timeout=10.0):
        token = uuid.uuid4().bytes
        self.publish(SENTINEL_TOPIC, token, retain=False)
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(t == SENTINEL_TOPIC and p == token for t, p in self.messages):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("sentinel did not come back")
                self.cond.wait(min(left, 0.2))
        return self.reports()

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def publish(port, topic, payload: bytes, retain=True):
    c = _client(port)
    c.loop_start()
    try:
        c.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)
    finally:
        c.disconnect()
        c.loop_stop()


def config_doc(campaign, mechanism="olh", eps_milli=2000, params=None, domain=None, phases=None,
               salt=0x5EED, **kw):
    """A valid config body (aggregator's make_config, so it passes the aggregator's rules).
    Tests pin the campaign id to a hash of the name (the aggregator draws it at random) so
    that the same campaign built twice is the same campaign."""
    from ldpfleet.core import protocol
    kw.setdefault("campaign_id", protocol.murmur3_32(campaign.encode(), 0))
    if phases is None:
        phases = [{"phase": 1, "mechanism": mechanism, "eps_milli": eps_milli,
                   "params": {"g": 8} if params is None and mechanism == "olh" else (params or {})}]
    return campaign_config.make_config(campaign, phases, domain or {"type": "int", "size": 64},
                                       salt, **kw)


def envelope(body: str, key: SigningKey = SIGNING_KEY) -> bytes:
    """A signed envelope around an arbitrary body string (for malformed-but-signed cases)."""
    import json
    sig = key.sign(signing.signed_message(body.encode("utf-8")))
    return json.dumps({"body": body, "kid": key.kid, "sig": sig.hex()},
                      separators=(",", ":")).encode()


def hmac_envelope(body: str, key: bytes = bytes(range(32))) -> bytes:
    """A protocol-v1 HMAC envelope (`{"body", "sig"}`), which every v2 party refuses."""
    import hashlib
    import hmac
    import json
    sig = hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()
    return json.dumps({"body": body, "sig": sig}, separators=(",", ":")).encode()


def stop_processes(procs):
    """SIGTERM every device process still running, then SIGKILL any that outlive 10 s."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except Exception:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)


def write_key_files(path, key: SigningKey = SIGNING_KEY):
    """`path` (PKCS#8 PEM) and `path`.pub of a fixed test key, as `campaign keygen` writes them."""
    import json
    from pathlib import Path
    Path(path).write_bytes(key.pem())
    Path(str(path) + ".pub").write_text(json.dumps(key.public.to_doc()) + "\n")
    return key


def run_device(state_dir, host, port, campaign=None, wait: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run one MicroPython device with --once until it exits (the device's own --timeout
    defaults to `wait` - 5 s). `extra_args` with `--crash-point STEP` runs it through
    CRASH_MAIN, which stops it (exit 75) at that step."""
    kw.setdefault("timeout", max(1.0, wait - 5))
    argv, env = device_runner.micropython_device_cmd(state_dir, host, port, campaign, once=True, **kw)
    if "--crash-point" in argv:
        main = next(i for i, arg in enumerate(argv) if Path(arg).name == "main.py")
        argv[main] = str(CRASH_MAIN)
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=wait)


def read_ledger(state_dir):
    """The document of the device's newest valid ledger generation, or None while it has
    spent nothing and memoised nothing (generation 0, or no ledger at all)."""
    found = device_runner.ledger_generations(state_dir)
    if not found:
        return None
    gen, doc = max(found, key=lambda g: g[0])
    if gen == 0 and not doc["spent_milli"] and not doc["reports"] and not doc.get("closed"):
        return None
    return doc


REPORT_CYCLE = """import gc, time
gc.collect()
base = gc.mem_alloc()
from ldp.%(name)s import MECHANISM
mech = MECHANISM(%(eps)d, %(d)d, 0x1234, 77, 1, %(params)r)
value = %(value)r
if isinstance(value, list) and "%(name)s" != "hm":  # a set, in the device's 64 slots (hm: grid points)
    from ldp.sets import KeySet
    value = KeySet.of(value, 64)
mech.report(value, 0)
gc.collect()
resident = gc.mem_alloc()
mech.report(value, 1)
cycle = gc.mem_alloc() - resident
t0 = time.ticks_us()
for i in range(%(reports)d):
    mech.report(value, i)
dt = time.ticks_diff(time.ticks_us(), t0)
print(base, resident - base, cycle, dt)
"""


def report_cycle_script(name, eps_milli, domain_size, params, value, reports) -> str:
    """Source of a minimal MicroPython script (literals only, so the driver adds little to the
    heap it measures) that imports one mechanism, builds it, makes `reports` reports with
    os.urandom words (a list `value` is a set in 64 slots) and prints `base resident cycle
    total_us`: heap before the import, heap held by the imported modules and the mechanism, heap
    allocated by one report, and the wall-clock µs of the loop."""
    return REPORT_CYCLE % {"name": name, "eps": eps_milli, "d": domain_size, "params": params,
                           "value": value, "reports": reports}
