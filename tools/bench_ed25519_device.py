#!/usr/bin/env python3
"""Ed25519 verification on the device (device/ldp/ed25519.py) under the MicroPython unix port;
prints one JSON object on stdout.

    python tools/bench_ed25519_device.py [--runs 20] [--micropython PATH] [--no-heap-search]

The signed message is what the fleet signs: b"ldpfleet-v2\\x00" + SHA-256(body), 44 bytes
(a fixed key and body, so runs are comparable). Reported:
* verify_ms: min/median/max of `--runs` verifies (after one warm-up), timed inside micropython
  with time.ticks_us; sha512_ms the same for SHA-512 of R || A || M alone (108 bytes, 1 block);
* heap: gc.mem_alloc() before and after one verify with the GC disabled (total bytes allocated
  by one verify: an upper bound of its live heap), and min_heapsize_k, the smallest `micropython -X heapsize=Nk` in which importing ldp.ed25519
  and one verify still succeed (binary search over whole KiB, stepping down from 64k);
* cpython_cryptography_verify_ms: the same verify by `cryptography` (OpenSSL) in this CPython,
  and ratio = device median / cryptography median.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "device"

TIMING = r'''
import binascii
import gc
import sys
import time

from ldp.ed25519 import verify
from ldp.sha512 import sha512

u = binascii.unhexlify
pub, msg, sig = u(sys.argv[1]), u(sys.argv[2]), u(sys.argv[3])
runs = int(sys.argv[4])
assert verify(pub, msg, sig)
assert not verify(pub, msg + b"x", sig)


def timed(fn, *args):
    out = []
    for _ in range(runs):
        t = time.ticks_us()
        fn(*args)
        out.append(time.ticks_diff(time.ticks_us(), t))
    return out


v = timed(verify, pub, msg, sig)
h = timed(sha512, sig[:32] + pub + msg)
gc.collect()
gc.disable()
before = gc.mem_alloc()
ok = verify(pub, msg, sig)
after = gc.mem_alloc()
gc.enable()
gc.collect()
print(repr({"verify_us": v, "sha512_us": h, "ok": ok, "alloc_before": before,
            "alloc_after": after}))
'''

ONE = r'''
import binascii
import sys
from ldp.ed25519 import verify
u = binascii.unhexlify
print("OK" if verify(u(sys.argv[1]), u(sys.argv[2]), u(sys.argv[3])) else "FALSE")
'''


def micropython_binary(given=None):
    if given:
        return given
    local = Path(sys.executable).parent / "micropython"
    return shutil.which("micropython") or (str(local) if local.exists() else "micropython")


def env():
    e = dict(os.environ)
    e["MICROPYPATH"] = ".frozen:%s" % DEVICE
    return e


def case():
    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"ldpfleet bench key").digest())
    msg = b"ldpfleet-v2\x00" + hashlib.sha256(b"bench body " * 40).digest()
    assert len(msg) == 44
    return key.public_key().public_bytes_raw(), msg, key.sign(msg), key.public_key()


def stats_ms(us):
    return {"min": min(us) / 1000, "median": statistics.median(us) / 1000, "max": max(us) / 1000}


def min_heap_k(mpy, script, args):
    """Smallest whole-KiB -X heapsize in which ONE prints OK (None if 64k is not enough)."""
    def works(k):
        p = subprocess.run([mpy, "-X", "heapsize=%dk" % k, script] + args, env=env(),
                           capture_output=True, text=True, timeout=60)
        return p.returncode == 0 and p.stdout.strip() == "OK"
    hi = 64
    if not works(hi):
        return None
    lo = hi
    while lo > 1 and works(lo // 2):  # step down by halves, then bisect
        lo //= 2
    hi, lo = lo, max(lo // 2, 0)
    while hi - lo > 1:
        mid = (hi + lo) // 2
        if works(mid):
            hi = mid
        else:
            lo = mid
    return hi


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--micropython", default=None)
    ap.add_argument("--no-heap-search", action="store_true")
    args = ap.parse_args(argv)
    mpy = micropython_binary(args.micropython)
    pub, msg, sig, pubkey = case()
    hexargs = [pub.hex(), msg.hex(), sig.hex()]
    with tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.py"
        timing.write_text(TIMING)
        one = Path(tmp) / "one.py"
        one.write_text(ONE)
        proc = subprocess.run([mpy, str(timing)] + hexargs + [str(args.runs)], env=env(),
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            sys.exit("micropython failed:\n" + proc.stdout + proc.stderr)
        dev = eval(proc.stdout.strip().splitlines()[-1], {})  # a dict literal we printed
        heap = None if args.no_heap_search else min_heap_k(mpy, str(one), hexargs)
    cpy = []
    for _ in range(max(args.runs, 200)):
        t = time.perf_counter_ns()
        pubkey.verify(sig, msg)
        cpy.append((time.perf_counter_ns() - t) / 1000)
    version = subprocess.run([mpy, "-c", "import sys; print(sys.version)"],
                             capture_output=True, text=True).stdout.strip()
    verify_ms = stats_ms(dev["verify_us"])
    cpy_ms = stats_ms(cpy)
    out = {
        "micropython": version,
        "message_bytes": len(msg),
        "runs": args.runs,
        "verify_ms": verify_ms,
        "sha512_108_bytes_ms": stats_ms(dev["sha512_us"]),
        "verify_ok": dev["ok"],
        "heap": {"alloc_one_verify_bytes": dev["alloc_after"] - dev["alloc_before"],
                 "min_heapsize_k": heap},
        "cpython_cryptography_verify_ms": cpy_ms,
        "ratio_device_over_cryptography": verify_ms["median"] / cpy_ms["median"],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
