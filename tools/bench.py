#!/usr/bin/env python3
"""Speed benchmark: ldpfleet's C kernels against PyPI pure-ldp 1.2.0; prints JSON on stdout.

    python tools/bench.py [--quick] [--mechanisms olh,hcms] [--n 100000] [--d 1024] [--eps 1,2]
                          [--no-pureldp] [--pureldp-budget S] [--out FILE]

Per mechanism (grr, olh, flh, oue, cms, hcms, sh: those whose module exists) and workload
(n users, d items, epsilon; Zipf(1.1) values, default parameters):
* client: reports/s of `perturb_batch` (C batch perturbation, random words from a seeded numpy
  Generator included), timed on `client_sample_n` users (the rate does not depend on n; the
  sample is sized to about `--client-seconds`), fastest of up to 3 runs while they take < 1 s
  together (`client_repeats`);
* aggregation: `update` over all n reports (a pool of distinct reports, produced by the client
  run, is folded in again until n reports went in: costs do not depend on report contents)
  plus `estimate` over the whole domain, the fastest of up to 3 runs while they take < 1 s
  together (`aggregate_repeats`); `setup` is building the mechanism and sketch;
* decoding hash evaluations/s: OLH n*d per update, FLH k'*d per estimate, SH (#non-zero
  projection positions)*d per estimate.

pure-ldp runs in its own venv (tools/.venv-pureldp, created on first use: pure-ldp needs numpy<2
and xxhash<4, see tools/bench_pureldp_worker.py) through tools/bench_pureldp_worker.py, with the same
n, d, epsilon and parameters (OLH g; FLH g and k'; CMS/HCMS k and m). Its runs longer than
`--pureldp-budget` seconds are timed on a part and scaled linearly (`extrapolated: true`).
Its HR (Hadamard response) has no ldpfleet counterpart and is reported alone.

speed_ratio = pure-ldp time / ldpfleet time: `aggregate` (update + estimate), `aggregate_setup`
(the same plus setup) and `client` (per report). No assertions here; tests only check the shape.

`--longitudinal` instead times the memoised protocols (spec §3.2: l-osue, l-sue, l-grr,
ololoha, biloloha; ε∞ from --eps, ε1 = ε∞/2; k items from --d; default n 2e4 and 1e5, k 100,
ε∞ 2) against PyPI multi-freq-ldpy 0.2.5's longitudinal clients and aggregators, in their own
venv (tools/.venv-mfldpy, created on first use) through tools/bench_mfldpy_worker.py: ours
`aggregate_seconds` is `update` + `estimate` of one round's n reports (the whole domain);
`validate_seconds` is the header/body checks alone (`check`: one C call, ldp_long_fold) and
`fold_estimate_seconds` the rest (L-OSUE, L-SUE and L-GRR check and fold in one pass of one C
call, so for them this split is the check's share, not a separate pass); `client` is one
round's reports from enrolled states. Ours are the fastest of up to 25 runs while they take
< 0.5 s together (`aggregate_repeats`); multi-freq-ldpy's aggregator is timed once (its runs
take milliseconds to seconds). Rows under "longitudinal", speed ratios as above
(`aggregate`, `fold_estimate`, `client`); --no-mfldpy skips the package.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))

from ldpfleet.eval import datasets
from ldpfleet.core import protocol  # noqa: E402
from ldpfleet.core.mechanisms import make_mechanism  # noqa: E402

VENV = ROOT / "tools" / ".venv-pureldp"
MFLDPY_VENV = ROOT / "tools" / ".venv-mfldpy"
MFLDPY_WORKER = ROOT / "tools" / "bench_mfldpy_worker.py"
MFLDPY_PACKAGES = ["multi-freq-ldpy==0.2.5", "xxhash<4"]
LONGITUDINAL = ["l-osue", "l-sue", "l-grr", "ololoha", "biloloha"]
LONG_FULL = {"n": [20_000, 100_000], "d": [100], "eps": [2.0]}
LONG_QUICK = {"n": [20_000], "d": [100], "eps": [2.0]}
WORKER = ROOT / "tools" / "bench_pureldp_worker.py"
PURELDP_PACKAGES = ["pure-ldp==1.2.0", "numpy<2", "xxhash<4", "scipy", "scikit-learn", "statsmodels"]

MECHANISMS = ["grr", "olh", "flh", "oue", "cms", "hcms", "sh"]
PURELDP_SHARED = {"grr", "olh", "flh", "oue", "cms", "hcms"}
PURELDP_ONLY = ["hr"]
FULL = {"n": [100_000, 1_000_000], "d": [1024, 42178], "eps": [1.0, 2.0, 4.0]}
QUICK = {"n": [100_000], "d": [1024], "eps": [2.0]}
POOL_BYTES = 1 << 26
REPEATS = 3
REPEAT_SECONDS = 1.0
"""Timings shorter than this are repeated (up to REPEATS runs) and the fastest kept."""
LONG_REPEATS, LONG_REPEAT_SECONDS = 25, 0.5
"""The same for ours under --longitudinal, whose runs take tens of microseconds: a scheduler
tick on a shared machine is longer than one run, so more runs are needed to see one without."""
DIST = "zipf:1.1"

TARGETS = {
    "olh": {"aggregate_speed_ratio": 100, "hash_evals_per_second": 3e8},
    "sh": {"hash_evals_per_second": 3e8},
    "hcms": {"aggregate_speed_ratio": 20}, "cms": {"aggregate_speed_ratio": 20},
    "oue": {"aggregate_speed_ratio": 5}, "grr": {"aggregate_speed_ratio": 5},
    "flh": {"aggregate_speed_ratio": 5},
    "all": {"client_reports_per_second": 1e7},
}


def log(msg):
    print("bench: %s" % msg, file=sys.stderr, flush=True)


def _list(cast):
    def parse(text):
        try:
            return [cast(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError("bad list %r" % text) from None
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="n=1e5, d=1024, eps=2 only (smoke test)")
    p.add_argument("--mechanisms", type=_list(str), help="subset of %s (and hr for pure-ldp)"
                   % ",".join(MECHANISMS))
    p.add_argument("--n", type=_list(int), help="user counts (default 1e5,1e6)")
    p.add_argument("--d", type=_list(int), help="domain sizes (default 1024,42178)")
    p.add_argument("--eps", type=_list(float), help="epsilons (default 1,2,4)")
    p.add_argument("--no-pureldp", action="store_true", help="ldpfleet only (no venv needed)")
    p.add_argument("--pureldp-budget", type=float, default=None, metavar="S",
                   help="seconds per pure-ldp run before it is sampled and extrapolated "
                        "(default 10, --quick 1)")
    p.add_argument("--client-seconds", type=float, default=None, metavar="S",
                   help="target length of the ldpfleet client timing (default 1, --quick 0.2)")
    p.add_argument("--longitudinal", action="store_true",
                   help="the memoised protocols against multi-freq-ldpy (see the module doc)")
    p.add_argument("--no-mfldpy", action="store_true", help="--longitudinal without multi-freq-ldpy")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    if args.longitudinal:
        base = LONG_QUICK if args.quick else LONG_FULL
    else:
        base = QUICK if args.quick else FULL
    args.n = args.n or base["n"]
    args.d = args.d or base["d"]
    args.eps = args.eps or base["eps"]
    if args.pureldp_budget is None:
        args.pureldp_budget = 1.0 if args.quick else 10.0
    if args.client_seconds is None:
        args.client_seconds = 0.2 if args.quick else 1.0
    known = MECHANISMS + PURELDP_ONLY
    wanted = args.mechanisms or known
    bad = [m for m in wanted if m not in known]
    if bad:
        p.error("unknown mechanism(s) %s (known: %s)" % (",".join(bad), ",".join(known)))
    if any(n < 1 for n in args.n) or any(d < 2 for d in args.d) or any(e <= 0 for e in args.eps):
        p.error("need n >= 1, d >= 2, eps > 0")
    args.mechanisms = wanted
    return args


def available(name):
    try:
        make_mechanism(name, 1000, 16)
        return True
    except ImportError:
        return False


# --- ldpfleet -------------------------------------------------------------------------------

def _inputs(mech, n, d, rng):
    if getattr(mech, "set_valued", False):
        return datasets.draw_sets(n, 1, d, DIST, rng)
    return datasets.draw_values(n, d, DIST, rng)


def _perturb(mech, values, rng, keep_rows):
    """Reports for `values` in bounded chunks; (seconds, first `keep_rows` reports)."""
    chunk = max(1, POOL_BYTES // mech.report_size)
    seconds, kept = 0.0, []
    have = 0
    for start in range(0, len(values), chunk):
        part = np.ascontiguousarray(values[start:start + chunk])
        t0 = time.perf_counter()
        reports = mech.perturb_batch(part, rng)
        seconds += time.perf_counter() - t0
        if have < keep_rows:
            kept.append(reports[:keep_rows - have])
            have += kept[-1].shape[0]
    return seconds, np.concatenate(kept)


def bench_ours(name, n, d, eps, rng, client_seconds):
    eps_milli = protocol.eps_to_milli(eps)
    t0 = time.perf_counter()
    mech = make_mechanism(name, eps_milli, d)
    sketch = mech.new_sketch()
    setup = time.perf_counter() - t0
    pool_rows = max(1, min(n, POOL_BYTES // mech.report_size))

    pilot_n = min(n, 4096)
    pilot_s, pool = _perturb(mech, _inputs(mech, pilot_n, d, rng), rng, pool_rows)
    rate = pilot_n / max(pilot_s, 1e-9)
    sample_n = min(n, max(pilot_n, int(rate * client_seconds)))
    values = _inputs(mech, sample_n, d, rng)
    client_s, spent, client_runs = None, 0.0, 0
    while client_runs < REPEATS and (client_runs == 0 or spent < REPEAT_SECONDS):
        secs, pool = _perturb(mech, values, rng, pool_rows)
        client_runs += 1
        spent += secs
        client_s = secs if client_s is None else min(client_s, secs)

    update_s, estimate_s, repeats, sketch = _aggregate(mech, pool, n, d)
    out = {
        "setup_seconds": setup,
        "client_sample_n": sample_n,
        "client_seconds": client_s,
        "client_reports_per_second": sample_n / client_s if client_s > 0 else None,
        "update_seconds": update_s,
        "estimate_seconds": estimate_s,
        "aggregate_seconds": update_s + estimate_s,
        "pool_reports": int(pool.shape[0]),
        "client_repeats": client_runs,
        "aggregate_repeats": repeats,
    }
    evals = _decode_hash_evals(name, mech, sketch, n, d)
    if evals:
        secs = update_s if name == "olh" else estimate_s
        out["hash_evals"] = evals
        out["hash_evals_per_second"] = evals / secs if secs > 0 else None
    return mech, out


def _aggregate(mech, pool, n, d, repeats=REPEATS, seconds=REPEAT_SECONDS):
    """(update s, estimate s, runs, last sketch): n reports from `pool` into a fresh sketch, then the whole
    domain estimated; repeated (fresh sketch each time) while the runs so far took less than
    REPEAT_SECONDS, at most REPEATS times, keeping the fastest run: short
    runs on a shared 2-core machine are dominated by scheduling noise."""
    best, spent, runs = None, 0.0, 0
    while runs < repeats and (runs == 0 or spent < seconds):
        sketch = mech.new_sketch()
        t0 = time.perf_counter()
        left = n
        while left > 0:
            take = min(left, pool.shape[0])
            sketch.update(pool[:take])
            left -= take
        t1 = time.perf_counter()
        sketch.estimate(np.arange(d, dtype=np.uint32))
        t2 = time.perf_counter()
        runs += 1
        spent += t2 - t0
        if best is None or (t2 - t0) < sum(best):
            best = (t1 - t0, t2 - t1)
    return best[0], best[1], runs, sketch


def _decode_hash_evals(name, mech, sketch, n, d):
    if name == "olh":
        return n * d
    if name == "flh":
        return mech.kp * d
    if name == "sh":
        return int(np.count_nonzero(sketch.z)) * d
    return None


# --- pure-ldp -------------------------------------------------------------------------------

def venv_python():
    """tools/.venv-pureldp's python, creating the venv on first use."""
    py = VENV / "bin" / "python"
    if py.exists() and _imports_pureldp(py):
        return py
    log("creating %s (pure-ldp 1.2.0; first run only)" % VENV)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *PURELDP_PACKAGES], check=True, stdout=sys.stderr)
    if not _imports_pureldp(py):
        raise RuntimeError("pure-ldp does not import in %s" % VENV)
    return py


def _imports_pureldp(py):
    return subprocess.run([str(py), "-c", "import pure_ldp.frequency_oracles"],
                          capture_output=True).returncode == 0


def run_pureldp(py, jobs):
    """All jobs of one mechanism in one worker process; list of result dicts."""
    proc = subprocess.run([str(py), str(WORKER)], input=json.dumps(jobs), capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError("pure-ldp worker failed: %s" % proc.stderr.strip()[-2000:])
    return json.loads(proc.stdout)


def _pure_params(name, ours_params):
    if name in ("olh", "flh", "cms", "hcms"):
        return dict(ours_params)
    return {}


# --- summary --------------------------------------------------------------------------------

def speed_ratio(ours, pure):
    if not pure or "error" in pure:
        return None

    def ratio(a, b):
        return a / b if a and b else None

    return {
        "aggregate": ratio(pure["aggregate_seconds"], ours["aggregate_seconds"]),
        "aggregate_setup": ratio(pure["aggregate_seconds"] + pure["setup_seconds"],
                                 ours["aggregate_seconds"] + ours["setup_seconds"]),
        "client": ratio(ours["client_reports_per_second"], pure["client_reports_per_second"]),
    }


def summarize(rows):
    out = {}
    for name in MECHANISMS + PURELDP_ONLY:
        mine = [r for r in rows if r["mechanism"] == name]
        if not mine:
            continue
        entry = {"workloads": len(mine)}
        for key in ("aggregate", "client"):
            vals = [r["speed_ratio"][key] for r in mine if r.get("speed_ratio") and r["speed_ratio"][key]]
            if vals:
                entry["speed_ratio_%s_min" % key] = min(vals)
                entry["speed_ratio_%s_max" % key] = max(vals)
        client = [r["ours"]["client_reports_per_second"] for r in mine if r.get("ours")]
        if client:
            entry["client_reports_per_second_min"] = min(client)
            entry["client_reports_per_second_max"] = max(client)
        evals = [r["ours"]["hash_evals_per_second"] for r in mine
                 if r.get("ours") and r["ours"].get("hash_evals_per_second")]
        if evals:
            entry["hash_evals_per_second_min"] = min(evals)
        pure_evals = [r["pureldp"]["hash_evals_per_second"] for r in mine
                      if r.get("pureldp") and r["pureldp"].get("hash_evals_per_second")]
        if pure_evals:
            entry["pureldp_hash_evals_per_second_max"] = max(pure_evals)
        entry["extrapolated_pureldp_runs"] = sum(
            1 for r in mine if r.get("pureldp") and r["pureldp"].get("extrapolated"))
        if name in TARGETS:
            entry["targets"] = TARGETS[name]
        out[name] = entry
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.longitudinal:
        return main_longitudinal(args)
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    ours_names = [m for m in args.mechanisms if m in MECHANISMS and available(m)]
    missing = [m for m in args.mechanisms if m in MECHANISMS and m not in ours_names]
    rows = []
    for name in ours_names:
        for n in args.n:
            for d in args.d:
                for eps in args.eps:
                    log("ldpfleet %s n=%d d=%d eps=%g" % (name, n, d, eps))
                    mech, ours = bench_ours(name, n, d, eps, rng, args.client_seconds)
                    rows.append({"mechanism": name, "n": n, "d": d, "epsilon": eps,
                                 "params": mech.config_params(), "report_bytes": mech.report_size,
                                 "ours": ours, "pureldp": None, "speed_ratio": None})
    pure_error = None
    if not args.no_pureldp:
        try:
            pure_error = _bench_pureldp(args, rows)
        except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
            pure_error = str(exc)
            log("pure-ldp skipped: %s" % exc)
    result = {
        "tool": "tools/bench.py",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "config": {"mechanisms": args.mechanisms, "n": args.n, "d": args.d, "eps": args.eps,
                   "dist": DIST, "quick": args.quick, "pureldp": not args.no_pureldp,
                   "pureldp_budget_seconds": args.pureldp_budget,
                   "client_seconds": args.client_seconds, "seed": args.seed},
        "missing_mechanisms": missing,
        "results": rows,
        "summary": summarize(rows),
        "pureldp_error": pure_error,
        "wall_seconds": time.perf_counter() - started,
    }
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if pure_error else 0


def _bench_pureldp(args, rows):
    py = venv_python()
    by_key = {(r["mechanism"], r["n"], r["d"], r["epsilon"]): r for r in rows}
    names = [m for m in args.mechanisms if m in PURELDP_SHARED | set(PURELDP_ONLY)]
    for name in names:
        jobs = []
        for n in args.n:
            for d in args.d:
                for eps in args.eps:
                    row = by_key.get((name, n, d, eps))
                    if name in PURELDP_SHARED and row is None:
                        continue  # no ldpfleet counterpart measured
                    params = _pure_params(name, row["params"]) if row else {}
                    jobs.append({"mechanism": name, "n": n, "d": d, "eps": eps, "params": params,
                                 "budget": args.pureldp_budget, "seed": args.seed})
        if not jobs:
            continue
        log("pure-ldp %s: %d workloads" % (name, len(jobs)))
        for res in run_pureldp(py, jobs):
            key = (name, res["n"], res["d"], res["eps"])
            row = by_key.get(key)
            if row is None:
                row = {"mechanism": name, "n": res["n"], "d": res["d"], "epsilon": res["eps"],
                       "params": res.get("params", {}), "report_bytes": None, "ours": None,
                       "pureldp": None, "speed_ratio": None}
                rows.append(row)
                by_key[key] = row
            row["pureldp"] = res
            if row["ours"]:
                row["speed_ratio"] = speed_ratio(row["ours"], res)
    return None


# --- longitudinal: the memoised protocols against multi-freq-ldpy -------------------------

def bench_longitudinal_ours(protocol_name, n, k, eps_inf, rng, client_seconds):
    from ldpfleet.eval.longitudinal_sim import protocol_mechanism
    eps_milli = protocol.eps_to_milli(eps_inf)
    mech = protocol_mechanism(protocol_name, eps_milli, eps_milli // 2, k)
    pool_n = max(1, min(n, POOL_BYTES // mech.report_size))
    values = datasets.draw_values(pool_n, k, DIST, rng)
    states = mech.enrol_batch(pool_n, rng)
    t0 = time.perf_counter()
    pool = mech.report_batch(values, states, rng)
    client_s = time.perf_counter() - t0
    update_s, estimate_s, repeats, _ = _aggregate(mech, pool, n, k, LONG_REPEATS, LONG_REPEAT_SECONDS)
    validate_s = None
    for _ in range(LONG_REPEATS):  # the header and body checks alone, over the same n reports
        t0 = time.perf_counter()
        left = n
        while left > 0:
            take = min(left, pool.shape[0])
            mech.check(pool[:take])
            left -= take
        spent = time.perf_counter() - t0
        validate_s = spent if validate_s is None else min(validate_s, spent)
    agg = update_s + estimate_s
    return mech, {"client_seconds_per_report": client_s / pool_n,
                  "client_reports_per_second": pool_n / client_s if client_s > 0 else None,
                  "update_seconds": update_s, "estimate_seconds": estimate_s,
                  "aggregate_seconds": agg, "validate_seconds": validate_s,
                  "fold_estimate_seconds": max(agg - validate_s, 1e-9),
                  "aggregate_repeats": repeats, "pool_reports": int(pool.shape[0])}


def mfldpy_python():
    """tools/.venv-mfldpy's python, creating the venv on first use."""
    py = MFLDPY_VENV / "bin" / "python"
    if py.exists() and _imports(py, "multi_freq_ldpy.long_freq_est.L_LH"):
        return py
    log("creating %s (multi-freq-ldpy 0.2.5; first run only)" % MFLDPY_VENV)
    subprocess.run([sys.executable, "-m", "venv", str(MFLDPY_VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *MFLDPY_PACKAGES], check=True, stdout=sys.stderr)
    if not _imports(py, "multi_freq_ldpy.long_freq_est.L_LH"):
        raise RuntimeError("multi-freq-ldpy does not import in %s" % MFLDPY_VENV)
    return py


def _imports(py, module):
    return subprocess.run([str(py), "-c", "import %s" % module], capture_output=True).returncode == 0


def main_longitudinal(args):
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    rows = []
    for name in LONGITUDINAL:
        for n in args.n:
            for k in args.d:
                for eps in args.eps:
                    log("ldpfleet %s n=%d k=%d eps_inf=%g" % (name, n, k, eps))
                    mech, ours = bench_longitudinal_ours(name, n, k, eps, rng, args.client_seconds)
                    rows.append({"protocol": name, "mechanism": mech.name, "n": n, "k": k,
                                 "eps_inf": eps, "eps1": mech.eps1_milli / 1000.0,
                                 "params": mech.config_params(), "report_bytes": mech.report_size,
                                 "ours": ours, "mfldpy": None, "speed_ratio": None})
    error = None
    if not args.no_mfldpy:
        try:
            py = mfldpy_python()
            jobs = [{"protocol": r["protocol"], "n": r["n"], "k": r["k"], "eps_perm": r["eps_inf"],
                     "eps_1": r["eps1"], "budget": args.pureldp_budget, "seed": args.seed} for r in rows]
            log("multi-freq-ldpy: %d workloads" % len(jobs))
            proc = subprocess.run([str(py), str(MFLDPY_WORKER)], input=json.dumps(jobs),
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError("multi-freq-ldpy worker failed: %s" % proc.stderr.strip()[-2000:])
            for row, res in zip(rows, json.loads(proc.stdout)):
                row["mfldpy"] = res
                if "error" not in res:
                    ours = row["ours"]
                    row["speed_ratio"] = {
                        "aggregate": res["aggregate_seconds"] / ours["aggregate_seconds"],
                        "fold_estimate": res["aggregate_seconds"] / ours["fold_estimate_seconds"],
                        "client": ours["client_reports_per_second"] / res["client_reports_per_second"]}
        except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
            error = str(exc)
            log("multi-freq-ldpy skipped: %s" % exc)
    result = {
        "tool": "tools/bench.py --longitudinal",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "config": {"protocols": LONGITUDINAL, "n": args.n, "k": args.d, "eps_inf": args.eps,
                   "eps1": "eps_inf / 2", "dist": DIST, "quick": args.quick,
                   "mfldpy": not args.no_mfldpy, "budget_seconds": args.pureldp_budget,
                   "seed": args.seed},
        "longitudinal": rows,
        "mfldpy_error": error,
        "wall_seconds": time.perf_counter() - started,
    }
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
