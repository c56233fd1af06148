"""MAC'd acknowledgements (spec §6): what the tags cost.

Aggregator side: one committed batch of N acknowledgements tagged by `AckBatch.tagged` (one C
call: a device key derived from the root per ack, then its HMAC tag; load-generator ids
"L/<id>" take one derivation more) and packed as QoS 0 PUBLISH packets, against the plain
12-byte packets of the same batch and against the Python reference (`ackkeys.mac_ack`).
Device side: `ldp.ack.ack_accepts` on the MicroPython unix port (HMAC-SHA256 over hashlib),
per received ack, with and without a key.

  python tools/bench_acks.py [--acks 10000] [--repeat 5] [--device-acks 2000]

Prints one JSON object (seconds: the least CPU time of --repeat runs; the device's µs are the
unix port's wall clock). Not a test: no timing assertion.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))

from ldpfleet.core import ackkeys, protocol
from ldpfleet.provision import device_runner  # noqa: E402
from ldpfleet.service.ingest.batch import AckBatch  # noqa: E402

DEVICE_SCRIPT = r'''
import time
from ldp.ack import ack_accepts, ack_pads
report = bytes.fromhex(%(report)r)
for label, pads, ack in (("keyed", ack_pads(%(key)r), bytes.fromhex(%(mac)r)),
                         ("plain", None, bytes.fromhex(%(plain)r))):
    t0 = time.ticks_us()
    for i in range(%(n)d):
        ok = ack_accepts(ack, report, pads)
    dt = time.ticks_diff(time.ticks_us(), t0)
    print(label, ok, dt)
'''


def batch_of(n, login_share):
    """An AckBatch of n acks over one campaign, a share of them to load-generator ids."""
    rng = np.random.default_rng(1)
    prefix = "ldp/bench/a/"
    devices = ["gen/sim-%d" % i if i < n * login_share else "dev-%06d" % i for i in range(n)]
    width = len(prefix) + max(len(d) for d in devices)
    rows = np.zeros((n, width), np.uint8)
    for i, d in enumerate(devices):
        t = (prefix + d).encode()
        rows[i, :len(t)] = np.frombuffer(t, np.uint8)
    off = np.arange(n, dtype=np.uint32) * np.uint32(width)
    lens = np.array([len(prefix) + len(d) for d in devices], np.uint32)
    acks = rng.integers(0, 256, size=(n, protocol.ACK_SIZE), dtype=np.uint8)
    return AckBatch(rows.ravel(), off, lens, acks, off + np.uint32(len(prefix))), devices


def best(fn, repeat):
    """The least CPU time (process_time) of `repeat` runs: on a shared machine wall time mostly
    measures the neighbours."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def device_side(n):
    root = bytes(range(32))
    key = ackkeys.device_key(root, "dev-1")
    report = protocol.pack_header("olh", 1, 7, 9) + bytes(6)
    plain = protocol.ack_for(report, 0)
    script = DEVICE_SCRIPT % {"report": report.hex(), "key": key.hex(), "plain": plain.hex(),
                              "mac": ackkeys.mac_ack(key, plain).hex(), "n": n}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_acks_device.py"
        path.write_text(script)
        proc = subprocess.run([device_runner.micropython_binary(), str(path)],
                              env=device_runner.micropython_env(), capture_output=True, text=True,
                              timeout=300)
    out = {}
    for line in proc.stdout.split("\n"):
        parts = line.split()
        if len(parts) == 3:
            assert parts[1] == "True", proc.stdout
            out[parts[0] + "_us_per_ack"] = round(int(parts[2]) / n, 2)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acks", type=int, default=10000, help="acknowledgements in one batch")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--login-share", type=float, default=0.5,
                    help="share of the acks to load-generator ids L/<id> (one derivation more)")
    ap.add_argument("--device-acks", type=int, default=2000,
                    help="acks checked on the MicroPython device (0: skip)")
    args = ap.parse_args(argv)
    root = bytes(range(32))
    batch, devices = batch_of(args.acks, args.login_share)
    tag_s = best(lambda: batch.tagged(root), args.repeat)
    tagged = batch.tagged(root)
    plain_pack_s = best(lambda: batch.packets(4), args.repeat)
    mac_pack_s = best(lambda: tagged.packets(4), args.repeat)
    sample = min(args.acks, 2000)
    payloads = batch.payloads[:sample]
    ref_s = best(lambda: [ackkeys.mac_ack(ackkeys.device_key(root, d), p.tobytes())
                          for d, p in zip(devices[:sample], payloads)], 1) * args.acks / sample
    result = {"acks": args.acks, "login_share": args.login_share,
              "c_tag_seconds": round(tag_s, 6),
              "c_tags_per_second": round(args.acks / tag_s),
              "c_us_per_ack": round(tag_s / args.acks * 1e6, 3),
              "pack_plain_seconds": round(plain_pack_s, 6),
              "pack_mac_seconds": round(mac_pack_s, 6),
              "python_reference_seconds_estimated": round(ref_s, 4),
              "c_speedup_over_python": round(ref_s / tag_s, 1),
              "packet_bytes_plain": len(batch.packets(4)),
              "packet_bytes_mac": len(tagged.packets(4))}
    if args.device_acks:
        result["micropython"] = device_side(args.device_acks)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
