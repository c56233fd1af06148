"""Does a device's work depend on its value? Timing across items on the MicroPython unix port.

For a string domain of `--items` items (default 20,000), the real device code (device/ldp, run
by the `micropython` interpreter) is given the same signed config once per sampled value (items
spread over the whole domain, from the first to the last, plus out-of-domain values that report
⊥), and the wall time of each trigger is measured:
  fresh_us     `Device.on_config` with no memo: verify, check, build the domain index, find the
               value's index (fixed-step search), perturb, commit the ledger generation
  memo_us      the same trigger again: the ledger memo is found BEFORE the value is touched
  lookup_us    the value -> (index, key) step alone (`DomainIndex.single`), the step that was
               linear in the item's position before protocol v2 (`list.index`)
For each: min / median / max over the sampled values and the spread (max - min) relative to
the median; and the same statistics for the first and last item of the domain separately.
Prints JSON. Timing noise of a shared machine shows up as spread in all three columns alike;
a value-dependent step would show as a rank correlation between the item's position and its
time (reported as `position_correlation`, Spearman).

Run: python tools/bench_device_timing.py [--items 20000] [--samples 60]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))

from ldpfleet.core import config as campaign_config  # noqa: E402
from ldpfleet.provision import device_runner  # noqa: E402
from ldpfleet.core.signing import SigningKey  # noqa: E402

KEY = SigningKey.from_seed(bytes(range(32)))

SCRIPT = r'''
import json, sys, time
from ldp.device import Device
from ldp.domain import DomainIndex, DeviceValue
job = json.load(open(sys.argv[1]))
payload = job["payload"].encode()
identity = {"device_id": "bench", "trusted_keys": job["keys"], "eps_cap_milli": 8000,
            "lifetime_budget_milli": 10 ** 9}
dom = DomainIndex(job["domain"])
out = []
for i, (value, state) in enumerate(zip(job["values"], job["states"])):
    dev = Device(state, identity, job["campaign"], value, log=lambda *a: None)
    t0 = time.ticks_us(); dev.on_config(payload); t1 = time.ticks_us()
    dev.outbox = []
    t2 = time.ticks_us(); dev.on_config(payload); t3 = time.ticks_us()
    v = DeviceValue(value)
    t4 = time.ticks_us(); dom.single(v); t5 = time.ticks_us()
    out.append([time.ticks_diff(t1, t0), time.ticks_diff(t3, t2), time.ticks_diff(t5, t4)])
json.dump(out, open(sys.argv[2], "w"))
'''


def stats(xs):
    s = sorted(xs)
    med = s[len(s) // 2]
    return {"min": s[0], "median": med, "max": s[-1], "spread_over_median": (s[-1] - s[0]) / med}


def spearman(xs, ys):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0] * len(v)
        for rank, i in enumerate(order):
            r[i] = rank
        return r
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry))
    return 1 - 6 * d2 / (n * (n * n - 1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=60, help="in-domain values sampled")
    args = ap.parse_args(argv)
    items = ["item-%05d" % i for i in range(args.items)]
    positions = sorted({round(i * (args.items - 1) / (args.samples - 1)) for i in range(args.samples)})
    values = [items[p] for p in positions] + ["not-an-item", "", 12345, None]
    # run the values in a shuffled order, so that a drift of the machine over the run cannot
    # pass for (or hide) a dependence on the item's position
    import random
    order = list(range(len(values)))
    random.Random(1).shuffle(order)
    doc = campaign_config.make_config("timing", [{"phase": 1, "mechanism": "olh", "eps_milli": 2000,
                                                  "params": {"g": 8}}],
                                      {"type": "str", "items": items}, 7)
    with tempfile.TemporaryDirectory() as work:
        states = []
        for i in range(len(values)):
            state = Path(work) / ("s%d" % i)
            state.mkdir()
            device_runner.provision_ledger(state)
            states.append(str(state))
        job = Path(work) / "job.json"
        job.write_text(json.dumps({"payload": campaign_config.sign(doc, KEY).decode(), "keys": [KEY.public.to_doc()],
                                   "campaign": "timing", "domain": doc["domain"],
                                   "values": [values[i] for i in order],
                                   "states": [states[i] for i in order]}))
        lib = device_runner.compile_mpy(Path(work) / "lib")
        script = Path(work) / "timing.py"
        script.write_text(SCRIPT)
        out = Path(work) / "out.json"
        subprocess.run([device_runner.micropython_binary(), "-X", "heapsize=64M", str(script), str(job), str(out)],
                       env=device_runner.micropython_env(lib), check=True, timeout=3600)
        shuffled = json.loads(out.read_text())
    rows = [None] * len(values)
    for slot, i in enumerate(order):
        rows[i] = shuffled[slot]
    inside = rows[:len(positions)]
    result = {"items": args.items, "sampled_in_domain": len(positions), "out_of_domain": len(values) - len(positions),
              "interpreter": "micropython unix port, .mpy (x64)"}
    for col, name in enumerate(("fresh_us", "memo_us", "lookup_us")):
        xs = [r[col] for r in rows]
        result[name] = dict(stats(xs), first_item=inside[0][col], last_item=inside[-1][col],
                            out_of_domain=[r[col] for r in rows[len(positions):]],
                            position_correlation=spearman(positions, [r[col] for r in inside]))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
