"""Benchmark and measure the numeric mechanisms (duchi, pm, hm, sw; spec §3.3); prints JSON.

  aggregation   per mechanism: the C fold alone over a (n, report size) array of reports as
                they arrive (one call, one thread: reports/s per core), and the sketch's whole
                `update` (header and body validation + fold)
  perturbation  the C batch kernel's reports/s (words passed in)
  ems           Square Wave's EMS to a histogram and the bootstrap quartiles (100 replicates),
                seconds, at 256 and 1024 bins (n = 10^5, eps 1)
  accuracy      (--accuracy) the figures the statistical tests bound: per-report variance /
                paper formula (10^7 draws, eps 0.5..4, t = 0 and 1), the mean's MSE / analytic
                and 95 % interval coverage at n = 10^6, eps 1 (--seeds replicates), ten metrics
                with hm's sampling against splitting eps, sw + EMS Wasserstein-1 on Beta(2, 5)
                (n = 10^5, eps 1, 256 bins, 20 seeds) and the coverage of its quartiles'
                bootstrap intervals

Run: python tools/bench_numeric.py [--reports N] [--accuracy] [--seeds R] [--quick] [--out F]
Speed is reported, never asserted; the machine's load average is in the output.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))

from ldpfleet.core import kernels  # noqa: E402
from ldpfleet.core.mechanisms import make_mechanism, numeric  # noqa: E402
from ldpfleet.core.mechanisms.base import body_ptr, report_array  # noqa: E402

GRID = 1001
CASES = {"duchi": ({}, 1000), "pm": ({}, 1000), "hm": ({"metrics": 1}, 1000),
         "hm10": ({"metrics": 10}, 1000), "sw": ({"bins": 256}, 1000)}


def mechanism(case):
    params, eps = CASES[case]
    name = "hm" if case.startswith("hm") else case
    points = 65536 if name == "sw" else GRID
    return make_mechanism(name, eps, points, campaign_id=77, **params)


def grid_points(mech, n, rng):
    shape = (n, mech.metrics) if mech.name == "hm" else (n,)
    return rng.integers(0, mech.domain_size, size=shape).astype(np.uint32)


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_case(case, n, repeats):
    mech = mechanism(case)
    rng = np.random.default_rng(1)
    x = grid_points(mech, n, rng)
    words = kernels.random_words(rng, n, mech.random_words)
    reports = report_array(mech, n, 0)

    def perturb():
        mech._perturb(np.ascontiguousarray(x), n, words, body_ptr(reports, 0), reports.shape[1])

    perturb_s = best(perturb, repeats)
    sketch = mech.new_sketch()
    fold_s = best(lambda: sketch._fold_at(body_ptr(reports, 0), n, reports.shape[1]), repeats)
    update_s = best(lambda: mech.new_sketch().update(reports), max(1, repeats // 2))
    return {"reports": n, "report_bytes": mech.report_size, "random_words": mech.random_words,
            "params": mech.config_params(), "eps_milli": mech.eps_milli, "grid": mech.domain_size,
            "perturb_reports_per_second": n / perturb_s,
            "fold_reports_per_second": n / fold_s,
            "update_reports_per_second": n / update_s}


def bench_ems():
    out = {}
    for bins in (256, 1024):
        mech = make_mechanism("sw", 1000, 65536, bins=bins)
        rng = np.random.default_rng(3)
        x = np.floor(rng.beta(2, 5, size=10 ** 5) * 65535 + 0.5).astype(np.int64)
        sketch = mech.simulate(x, rng)
        t0 = time.perf_counter()
        sketch.histogram()
        t1 = time.perf_counter()
        sketch.quantiles([0.25, 0.5, 0.75], replicates=100)
        t2 = time.perf_counter()
        out[str(bins)] = {"window": mech.window, "cells": mech.cells, "histogram_seconds": t1 - t0,
                          "bootstrap_quartiles_seconds": t2 - t1}
    return out


def variance_ratios(draws):
    out = {}
    for name in ("duchi", "pm", "hm"):
        for eps_milli in (500, 1000, 2000, 4000):
            mech = make_mechanism(name, eps_milli, GRID)
            rng = np.random.default_rng(eps_milli)
            for x in (500, 1000):
                t = float(numeric.unit_value(x, GRID))
                est = mech.simulate(np.full(draws, x), rng).mean()
                formula = {"duchi": numeric.duchi_variance, "pm": numeric.pm_variance,
                           "hm": numeric.hm_variance}[name](eps_milli / 1000, t)
                out["%s eps=%g t=%g" % (name, eps_milli / 1000, t)] = est.se ** 2 * draws / float(formula)
    return out


def mse_and_coverage(n, seeds):
    rng0 = np.random.default_rng(7)
    x = np.clip(np.round(rng0.beta(2, 3, size=n) * (GRID - 1)), 0, GRID - 1).astype(np.int64)
    t = numeric.unit_value(x, GRID)
    truth = float(t.mean())
    out = {}
    for name in ("duchi", "pm", "hm"):
        mech = make_mechanism(name, 1000, GRID)
        formula = {"duchi": numeric.duchi_variance, "pm": numeric.pm_variance,
                   "hm": numeric.hm_variance}[name]
        analytic = float(np.mean(formula(1.0, t))) / n
        rng = np.random.default_rng(2024)
        errors, covered = [], 0
        for _ in range(seeds):
            est = mech.simulate(x, rng).mean()
            errors.append(est.t - truth)
            covered += est.low <= truth <= est.high
        mse = float(np.mean(np.square(errors)))
        out[name] = {"n": n, "replicates": seeds, "mse_over_analytic": mse / analytic,
                     "mse_ratio_sd": float(np.sqrt(2.0 / seeds)), "coverage_95": covered / seeds}
    return out


def ten_metrics(n, reps):
    d = 10
    rng = np.random.default_rng(10)
    x = rng.integers(0, GRID, size=(n, d))
    truth = numeric.unit_value(x, GRID).mean(axis=0)
    hm = make_mechanism("hm", 1000, GRID, metrics=d)
    split = make_mechanism("duchi", 100, GRID)
    e_hm, e_split = np.zeros((reps, d)), np.zeros((reps, d))
    for r in range(reps):
        e_hm[r] = [e.t for e in hm.simulate(x, rng).means()] - truth
        e_split[r] = [split.simulate(x[:, a], rng).mean().t - truth[a] for a in range(d)]
    ratio = (e_hm ** 2).mean(axis=0) / (e_split ** 2).mean(axis=0)
    return {"n": n, "replicates": reps, "mse_sampling_over_split_per_metric": ratio.tolist(),
            "max": float(ratio.max())}


def sw_accuracy(seeds, quantile_seeds):
    from ldpfleet.core.post import ems
    mech = make_mechanism("sw", 1000, 65536, bins=256)
    w1, cover, total = [], np.zeros(3), 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        x = np.floor(rng.beta(2, 5, size=10 ** 5) * 65535 + 0.5).astype(np.int64)
        sketch = mech.simulate(x, rng)
        w1.append(ems.wasserstein1(sketch.histogram(), np.bincount(mech.bin_of(x), minlength=256)))
        if seed < quantile_seeds:
            edges = mech.bin_edges()
            truth = np.bincount(mech.bin_of(x), minlength=256)
            for i, (q, _, low, high) in enumerate(sketch.quantiles([0.25, 0.5, 0.75])):
                want = ems.quantile(truth / truth.sum(), edges, q)
                cover[i] += low <= want <= high
            total += 1
    return {"n": 10 ** 5, "eps": 1, "bins": 256, "window": mech.window, "seeds": seeds,
            "wasserstein1_mean": float(np.mean(w1)), "wasserstein1_sd": float(np.std(w1)),
            "quartile_interval_coverage": dict(zip(("0.25", "0.5", "0.75"),
                                                   (cover / max(total, 1)).tolist())),
            "quartile_seeds": total}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=10 ** 7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--accuracy", action="store_true", help="also measure the statistical figures")
    ap.add_argument("--seeds", type=int, default=200, help="replicates of the n = 10^6 mean")
    ap.add_argument("--quick", action="store_true", help="10^6 reports; small accuracy runs")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    n = 10 ** 6 if args.quick else args.reports
    out = {"load_average": os.getloadavg(), "cpu_count": os.cpu_count(), "reports": n,
           "aggregation": {case: bench_case(case, n, args.repeats) for case in CASES},
           "ems": bench_ems()}
    if args.accuracy:
        quick = args.quick
        out["accuracy"] = {
            "variance_over_formula": variance_ratios(10 ** 6 if quick else 10 ** 7),
            "mean": mse_and_coverage(10 ** 5 if quick else 10 ** 6, 20 if quick else args.seeds),
            "ten_metrics_eps1": ten_metrics(10 ** 4, 30 if quick else 300),
            "sw_beta25": sw_accuracy(5 if quick else 20, 5 if quick else 20)}
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
