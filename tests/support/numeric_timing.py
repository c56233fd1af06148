"""A numeric reading's work on the MicroPython device, per reading (spec §1.1, §7.1).

`readings()` lists the readings to compare, by class: floats (in range, 0.0, -0.0, negative,
clipped at either end, 1e300, ±inf, NaN), ints (small, negative, beyond the float range), and
"missing" (None, a string, a bool, a list, an empty list) beside a float; `pairs()` the hm
values (lists of two readings, shorter or longer lists, NaN and inf inside them, not a list).
Readings travel as MicroPython expressions (`eval`), so NaN, ±inf and 10**400 reach the
device code as they would from a sensor.

`run_micropython` runs one interpreter process on the device code of `device_dir` (default the
repository's device/; another checkout's code to compare) and returns, per reading:
  grid_alloc    heap bytes of one `numeric_domain.grid_point` call (gc.mem_alloc() delta after
                gc.collect(), one warm-up call first);
  grid_rounds   `grid_point` timed per reading, readings interleaved in an order reshuffled
                every round (ticks_us over a batch; set_timing.relative_times reads them);
  triggers      per campaign of `campaigns()`: the heap bytes of the trigger's value work
                (`Device._input` -> `mech.report`) and the report bytes it makes from the
                xorshift32 word stream STREAM_SEED (nonce NONCE), for the aggregator's
                reference and the C client to reproduce.
"""
import json
import subprocess
from pathlib import Path

from ldpfleet.provision import device_runner

from .devices import SIGNING_KEY, config_doc
from .mp_stream import STREAM_SOURCE

ROOT = Path(__file__).resolve().parents[2]
STREAM_SEED = 12345
NONCE = 7
TEMP = {"type": "range", "lo": -400, "hi": 850, "resolution": 5, "decimals": 1}  # 251 points
PAIR = {"type": "ranges", "points": 101,
        "metrics": [{"lo": 0, "hi": 100, "name": "load"}, {"lo": -40, "hi": 85, "name": "temp"}]}
GRID_ARGS = (-400, 850, 1, 251)  # TEMP's (lo, hi, decimals, N)


def readings():
    """{class: [(label, MicroPython expression)]}: readings of one class must cost the same."""
    return {
        "float": [("3.7", "3.7"), ("21.5", "21.5"), ("0.0", "0.0"), ("-0.0", "-0.0"),
                  ("-12.5", "-12.5"), ("-1000.0", "-1000.0"), ("85.0", "85.0"),
                  ("1e300", "1e300"), ("-1e300", "-1e300"), ("inf", "float('inf')"),
                  ("-inf", "float('-inf')"), ("nan", "float('nan')")],
        "int": [("7", "7"), ("0", "0"), ("-40", "-40"), ("1000", "1000"), ("10**17", "10**17"),
                ("2**62", "2**62"), ("10**400", "10**400"), ("-10**400", "-10**400")],
        "missing": [("float 3.7", "3.7"), ("None", "None"), ("'x'", "'x'"), ("True", "True"),
                    ("[3.7]", "[3.7]"), ("[]", "[]"), ("{}", "{}")],
    }


def pairs():
    """[(label, expression)]: hm values over PAIR (two metrics)."""
    return [("[10.0, 21.5]", "[10.0, 21.5]"), ("[0, -40]", "[0, -40]"),
            ("[1e9, -1e9]", "[1e9, -1e9]"), ("[nan, inf]", "[float('nan'), float('inf')]"),
            ("[-inf, nan]", "[float('-inf'), float('nan')]"), ("[10**400, 3]", "[10**400, 3]"),
            ("5.0", "5.0"), ("None", "None"), ("['x', 3.7]", "['x', 3.7]"), ("[]", "[]"),
            ("[None, None]", "[None, None]"), ("[1.0, 2.0, 3.0]", "[1.0, 2.0, 3.0]")]


def campaigns():
    """{name: (config, [(label, expression)])}: the numeric mechanisms' triggers."""
    flat = [r for cls in readings().values() for r in cls]
    return {
        "duchi": (config_doc("nt-duchi", mechanism="duchi", eps_milli=1000, params={},
                             domain=TEMP), flat),
        "pm": (config_doc("nt-pm", mechanism="pm", eps_milli=1000, params={}, domain=TEMP), flat),
        "sw": (config_doc("nt-sw", mechanism="sw", eps_milli=1000,
                          params={"bins": 64, "window": 33}, domain=TEMP), flat),
        "hm": (config_doc("nt-hm", mechanism="hm", eps_milli=6000, params={"metrics": 2},
                          domain=PAIR), pairs()),
    }


def stream_words(seed=STREAM_SEED):
    """The xorshift32 words of the script's Stream (and of the C client's test seed)."""
    s = seed | 1
    while True:
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        yield s


SCRIPT = r'''
import gc, json, sys, time
from ldp import config as cfg
from ldp.device import Device
from ldp.numeric_domain import grid_point

job = json.load(open(sys.argv[1]))
identity = {"device_id": "nt", "trusted_keys": job["keys"], "eps_cap_milli": 8000,
            "lifetime_budget_milli": 10 ** 9}
quiet = lambda *a: None


''' + STREAM_SOURCE + r'''

def alloc(op):
    op()
    gc.collect()
    a0 = gc.mem_alloc()
    op()
    return gc.mem_alloc() - a0


lo, hi, dec, n = job["grid_args"]
labels = [label for label, _ in job["readings"]]
values = [eval(expr) for _, expr in job["readings"]]
ops = []
for v in values:
    ops.append(lambda v=v: grid_point(v, lo, hi, dec, n))
out = {"grid_alloc": dict(zip(labels, [alloc(op) for op in ops])), "triggers": {}}

batch = job["batch"]
seed = 12345
order = list(range(len(ops)))
rounds = []
for r in range(job["reps"]):
    for j in range(len(order) - 1, 0, -1):  # a new shuffle every round (xorshift32)
        seed ^= (seed << 13) & 0xFFFFFFFF
        seed ^= seed >> 17
        seed ^= (seed << 5) & 0xFFFFFFFF
        k = seed % (j + 1)
        order[j], order[k] = order[k], order[j]
    gc.collect()
    seq = []
    for j in order:
        op = ops[j]
        t0 = time.ticks_us()
        for _ in range(batch):
            op()
        seq.append([j, time.ticks_diff(time.ticks_us(), t0) * 1000 // batch])
    rounds.append(seq)
out["grid_rounds"] = rounds

for name, doc, cases in job["campaigns"]:
    doc = cfg.check_config(doc)
    res = {}
    for label, expr in cases:
        dev = Device(job["state"], identity, doc["campaign"], eval(expr), log=quiet)
        mech = dev._mechanism(doc, 1, {})
        def op(dev=dev, mech=mech):
            return mech.report(dev._input(doc, mech), job["nonce"], Stream(job["seed"]))
        res[label] = {"alloc": alloc(op), "report": "".join("%02x" % b for b in op())}
    out["triggers"][name] = res
json.dump(out, open(sys.argv[2], "w"))
'''


def run_micropython(work, device_dir=None, reps=20, batch=200):
    """{"grid_alloc": {label: bytes}, "grid_rounds": [[[index, ns], ...], ...] (index into
    `flat_readings()`), "triggers": {campaign: {label: {"alloc", "report" (hex)}}}}."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    lib = device_runner.compile_mpy(work / "lib", src_dir=device_dir or ROOT / "device")
    state = work / "state"
    state.mkdir(exist_ok=True)
    device_runner.provision_ledger(state)
    job = {"keys": [SIGNING_KEY.public.to_doc()], "state": str(state), "grid_args": GRID_ARGS,
           "readings": flat_readings(), "reps": reps, "batch": batch, "seed": STREAM_SEED,
           "nonce": NONCE,
           "campaigns": [[name, doc, cases] for name, (doc, cases) in campaigns().items()]}
    (work / "job.json").write_text(json.dumps(job))
    (work / "numeric_timing.py").write_text(SCRIPT)
    proc = subprocess.run([device_runner.micropython_binary(), "-X", "heapsize=8M",
                           str(work / "numeric_timing.py"), str(work / "job.json"),
                           str(work / "out.json")],
                          env=device_runner.micropython_env(lib), capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError("MicroPython numeric timing run failed:\n" + proc.stdout + proc.stderr)
    return json.loads((work / "out.json").read_text())


def flat_readings():
    """Every reading of `readings()` once, in class order (labels are unique)."""
    seen, out = set(), []
    for cls in readings().values():
        for label, expr in cls:
            if label not in seen:
                seen.add(label)
                out.append([label, expr])
    return out
