"""Does a device's set-valued work depend on its set? Time per value on both clients; prints JSON.

For every case of tests/support/set_timing.py (set-valued campaign phases: sampling SH, sampling
RAPPOR, shc, PSGRR/PSOLH over the domain, over candidates and svim's fallback, SH over a string
domain) and every value (sets of size 0..64, out of the domain, repeats, long, wrong types,
every overlap with a phase-2 candidate list), the trigger's work from the device's value to
the report bytes, run many times per value, values interleaved:
  micropython   the unix-port interpreter on .mpy files (x64), wall clock; plus the heap one
                trigger allocates (gc.mem_alloc() delta)
  c             a driver linked with the C client's objects, thread CPU time
Per case: `us` µs per trigger at set sizes 0, 1, 32, 64 (the 10th percentile of each value's
samples), `size_rank_correlation` (Spearman, size vs time over sizes 0..64),
`large_over_small` (median time of sizes 48..64 over that of 0..16), `worst` value and its time
over the sweep's median, `alloc_bytes` (MicroPython: the distinct heap allocations per trigger
over all values). tests/integration/test_set_timing.py asserts on the same figures.

--device-dir times another checkout's client code (a device/ directory with ldp/ and c_client/,
and c_kernels/ beside it), e.g. the code before a change:
  git archive main device c_kernels | tar -x -C /tmp/main
  python tools/bench_set_timing.py --device-dir /tmp/main/device

Run: python tools/bench_set_timing.py [--cases sh-phase1,srappor-phase2] [--clients micropython,c]
     [--reps 30] [--device-dir DIR]
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))
sys.path.insert(0, str(ROOT / "tests"))

from support import set_timing  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", help="comma-separated case names (default: all): %s"
                    % ", ".join(c["name"] for c in set_timing.cases()))
    ap.add_argument("--clients", default="micropython,c")
    ap.add_argument("--reps", type=int, default=30, help="samples per value")
    ap.add_argument("--device-dir", help="the device/ directory whose clients are timed")
    args = ap.parse_args(argv)
    names = args.cases.split(",") if args.cases else None
    known = {c["name"] for c in set_timing.cases()}
    if names and not set(names) <= known:
        ap.error("unknown case(s): %s" % ", ".join(sorted(set(names) - known)))
    clients = tuple(args.clients.split(","))
    if not set(clients) <= {"micropython", "c"}:
        ap.error("--clients takes micropython and/or c")
    result = set_timing.measure(names, args.reps, args.device_dir, clients)
    for per_case in result.values():
        for summary in per_case.values():
            summary.pop("low_ns", None)
            summary.pop("alloc_by_value", None)
    print(json.dumps({"device_dir": str(Path(args.device_dir).resolve()) if args.device_dir
                      else str(ROOT / "device"), "reps": args.reps, "results": result}, indent=1))


if __name__ == "__main__":
    main()
