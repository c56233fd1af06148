#!/usr/bin/env python3
"""Reproduce the shapes of the post-processing papers' figures with exact aggregate simulation.

    python tools/reproduce.py {fig1,fig2,fig5,calibrate,all} --out DIR [--users N] [--quick]

Families (OUE through ldpfleet.eval.fastsim, post-processing through ldpfleet.core.post):

* fig1  full-domain MSE vs eps in [0.2, 2], Zipf s=1.5, d=1024, n=1e6 (consistency paper
        [NH] §4.2, Fig. 1);
* fig2  set-value MSE vs set size rho = 10..90% at eps=1 ([NH] §4.3, Fig. 2);
* fig5  top-k MSE vs k = 2..32 at eps=1 ([NH] §4.4, Fig. 5);
* calibrate  OUE / OUE-Zero (Base-Cut, beta=0.05) / OUE-Calibrate (power prior) estimation
        error vs eps = 1..5, and heavy-hitter Precision/Recall/F-Score vs threshold at eps=4,
        on a Kosarak-shaped power-law dataset (Calibrate paper [CAL] §IV, Fig. 5 and 7).

Each family writes FAMILY.csv, FAMILY.png and FAMILY.md into DIR. The Markdown summary checks
the paper's statements against the measured numbers (criteria are printed beside each check).
"""
import argparse
import csv
import math
import os
import sys
import time

import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

try:
    from ldpfleet.eval import fastsim, accuracy as metrics
    from ldpfleet.core import post
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "aggregator"))
    from ldpfleet.eval import fastsim, accuracy as metrics
    from ldpfleet.core import post

ZIPF_DOMAIN = 1024
ZIPF_EXPONENT = 1.5
ZIPF_USERS = 1_000_000
KOSARAK_DOMAIN = 41_270
KOSARAK_USERS = 8_019_015
KOSARAK_TOP_SHARE = 0.075
"""Kosarak's most clicked page has ~601k of the 8.02M clicks ([CAL] §IV-A)."""

LEFT_METHODS = ["base", "base-pos", "post-pos", "norm", "norm-mul", "norm-sub"]
RIGHT_METHODS = ["norm-sub", "mle-apx", "base-cut", "norm-cut", "norm-hyb", "power", "power-ns", "calibrate-gauss"]
ALL_METHODS = list(post.METHODS)
NORM_BASED = ["norm", "norm-mul", "norm-sub", "mle-apx", "norm-cut", "norm-hyb", "power-ns"]
NON_NORM_BASED = ["base", "base-pos", "post-pos", "base-cut", "power", "calibrate-gauss"]

FIG1_EPS = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
FIG2_RHO = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
FIG5_K = list(range(2, 33, 2))
CALIBRATE_EPS = [1.0, 2.0, 3.0, 4.0, 5.0]
HEAVY_HITTER_EPS = 4.0
HEAVY_HITTER_THRESHOLD_FACTORS = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
OUE_ZERO_BETA = 0.05
"""[CAL] Eq. 22: OUE-Zero's significance threshold uses beta = 0.05."""

SET_QUERIES = 200
FULL_REPEATS = {"fig1": 30, "fig2": 30, "fig5": 100, "calibrate": 20}
QUICK_REPEATS = {"fig1": 2, "fig2": 2, "fig5": 3, "calibrate": 2}
CSV_FIELDS = ["family", "panel", "x_name", "x", "method", "metric", "mean", "std", "repeats"]


# --- datasets -------------------------------------------------------------------------------

def zipf_counts(users, rng, domain=ZIPF_DOMAIN, exponent=ZIPF_EXPONENT):
    """[NH] §4.1: ``users`` reports drawn from Zipf(s) over ``domain`` values."""
    weights = np.arange(1, domain + 1, dtype=np.float64) ** -exponent
    return rng.multinomial(users, weights / weights.sum())


def kosarak_like_counts(users, domain=KOSARAK_DOMAIN, top_share=KOSARAK_TOP_SHARE):
    """A deterministic power-law dataset shaped like Kosarak ([CAL] Fig. 3a): item counts are
    the (i - 1/2)/d quantiles of a continuous power law k^-a on [1, top_share * users],
    floored, with a solved so that the counts add up to ~``users``."""
    top = top_share * users
    levels = (np.arange(domain) + 0.5) / domain

    def counts_for(exponent):
        shape = 1.0 - exponent
        return np.floor((1.0 - levels * (1.0 - top ** shape)) ** (1.0 / shape))

    low, high = 1.0001, 4.0
    for _ in range(80):
        middle = 0.5 * (low + high)
        if counts_for(middle).sum() > users:
            low = middle
        else:
            high = middle
    return np.maximum(counts_for(0.5 * (low + high)), 1).astype(np.int64)


# --- running methods ------------------------------------------------------------------------

def method_options(method, eps):
    if method == "mle-apx":
        p, q = fastsim.oue_pq(eps)
        return {"p": p, "q": q}
    return {}


def run_methods(est, var, n, eps, methods):
    return {m: post.postprocess(m, est, var, n, **method_options(m, eps)) for m in methods}


def item_answers(method, outputs):
    """Single-item query answers: Post-Pos clips each answer ([NH] §3.1)."""
    return post.query_transform(method)(outputs[method])


class Accumulator:
    """Collects repeated measurements keyed by (panel, x, method, metric)."""

    def __init__(self):
        self.values = {}

    def add(self, key, value):
        self.values.setdefault(key, []).append(float(value))

    def mean(self, panel, x, method, metric):
        return float(np.mean(self.values[(panel, x, method, metric)]))

    def rows(self, family, x_name):
        by_panel_method_metric_x = lambda item: (item[0][0], item[0][2], item[0][3], item[0][1])
        for (panel, x, method, metric), vals in sorted(self.values.items(), key=by_panel_method_metric_x):
            yield {"family": family, "panel": panel, "x_name": x_name, "x": x, "method": method,
                   "metric": metric, "mean": float(np.mean(vals)),
                   "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0, "repeats": len(vals)}


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def plot_two_panels(path, acc, panel, xs, metric, x_label, y_label, title, left=LEFT_METHODS, right=RIGHT_METHODS):
    """[NH] §4.1 plotting convention: six baseline/normalisation methods on the left, Norm-Sub
    with the remaining methods on the right."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, methods in zip(axes, (left, right)):
        for method in methods:
            ys = [acc.mean(panel, x, method, metric) for x in xs]
            ax.plot(xs, ys, marker="o", markersize=3, label=method)
        ax.set_yscale("log")
        ax.set_xlabel(x_label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(y_label)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class Checks:
    """Paper statements checked against measured numbers, rendered as Markdown."""

    def __init__(self):
        self.lines = []
        self.results = []

    def add(self, paper, measured, criterion, holds):
        self.results.append(bool(holds))
        verdict = "reproduced" if holds else "NOT reproduced"
        self.lines.append("- **%s** - paper: %s. Measured: %s. (criterion: %s)" % (verdict, paper, measured, criterion))

    def markdown(self):
        return "\n".join(self.lines) + "\n\nShape checks reproduced: %d of %d.\n" % (
            sum(self.results), len(self.results))


def fmt_ratios(values):
    values = np.asarray(values, dtype=np.float64)
    return "min %.3g, geometric mean %.3g, max %.3g" % (values.min(), math.exp(np.mean(np.log(values))), values.max())


def geomean(values):
    return float(math.exp(np.mean(np.log(np.asarray(values, dtype=np.float64)))))


def markdown_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def write_summary(path, title, setup, table, checks, seconds):
    with open(path, "w") as handle:
        handle.write("# %s\n\n%s\n\nRun time: %.1f s.\n\n%s\n\n## Comparison with the paper\n\n%s"
                     % (title, setup, seconds, table, checks.markdown()))


# --- fig1 -----------------------------------------------------------------------------------

def run_fig1(out_dir, users, repeats, seed):
    """[NH] §4.2 Fig. 1: full-domain MSE vs eps."""
    started = time.time()
    rng = np.random.default_rng(seed)
    counts = zipf_counts(users, rng)
    n = int(counts.sum())
    truth = counts / n
    acc = Accumulator()
    for eps in FIG1_EPS:
        for _ in range(repeats):
            est, var = fastsim.fast_oue(counts, eps, rng)
            outputs = run_methods(est, var, n, eps, ALL_METHODS)
            for method in ALL_METHODS:
                acc.add(("full", eps, method, "mse"), metrics.mse(truth, item_answers(method, outputs)))
    write_csv(os.path.join(out_dir, "fig1.csv"), acc.rows("fig1", "eps"))
    plot_two_panels(os.path.join(out_dir, "fig1.png"), acc, "full", FIG1_EPS, "mse", "epsilon", "full-domain MSE",
                    "Fig. 1 (Zipf s=1.5, d=%d, n=%d, OUE, %d repeats)" % (ZIPF_DOMAIN, n, repeats))
    m = lambda method, eps: acc.mean("full", eps, method, "mse")
    checks = Checks()
    ratio = [m("base", e) / m("norm-sub", e) for e in FIG1_EPS]
    checks.add("Norm-Sub reduces the MSE of Base by about a factor of 10 (§4.2)",
               "Base/Norm-Sub " + fmt_ratios(ratio),
               "geometric mean within half an order of magnitude of 10, i.e. in [3.2, 32]",
               10 ** 0.5 <= geomean(ratio) <= 10 ** 1.5)
    ratio = [m("base-pos", e) / m("base", e) for e in FIG1_EPS]
    checks.add("Base-Pos (= Post-Pos here) has around half the MSE of Base",
               "Base-Pos/Base " + fmt_ratios(ratio), "every ratio in [0.35, 0.65]",
               all(0.35 <= r <= 0.65 for r in ratio))
    ratio = [m("norm", e) / m("base", e) for e in FIG1_EPS]
    checks.add("Base performs very close to Norm", "Norm/Base " + fmt_ratios(ratio), "every ratio within 5% of 1",
               all(abs(r - 1) <= 0.05 for r in ratio))
    ratio = [m("mle-apx", e) / m("norm-sub", e) for e in FIG1_EPS]
    checks.add("Norm-Sub and MLE-Apx perform almost exactly the same", "MLE-Apx/Norm-Sub " + fmt_ratios(ratio),
               "every ratio within 5% of 1", all(abs(r - 1) <= 0.05 for r in ratio))
    decay = {method: m(method, FIG1_EPS[0]) / m(method, FIG1_EPS[-1]) for method in ("base", "norm-mul")}
    checks.add("Norm-Mul's MSE decreases much slower with eps than the other methods'",
               "MSE(eps=%.1f)/MSE(eps=%.1f): Base %.3g, Norm-Mul %.3g"
               % (FIG1_EPS[0], FIG1_EPS[-1], decay["base"], decay["norm-mul"]),
               "Norm-Mul's decay factor below Base's", decay["norm-mul"] < decay["base"])
    similar = ["mle-apx", "power", "norm-hyb", "base-cut"]
    worst = max(max(m(method, e) / m("norm-sub", e), m("norm-sub", e) / m(method, e))
                for method in similar for e in FIG1_EPS)
    checks.add("Norm-Sub, MLE-Apx, Power, Norm-Hyb and Base-Cut perform very similarly",
               "largest factor between any of them and Norm-Sub over all eps: %.3g" % worst,
               "within a factor 2", worst <= 2.0)
    ratio = [m("norm-cut", e) / m("base-cut", e) for e in FIG1_EPS]
    checks.add("Norm-Cut's threshold is lower than Base-Cut's T, so it does worse on full-domain MSE",
               "Norm-Cut/Base-Cut " + fmt_ratios(ratio), "every ratio > 1", all(r > 1 for r in ratio))
    best = {e: min(RIGHT_METHODS, key=lambda method: m(method, e)) for e in FIG1_EPS}
    wins = sum(1 for e in FIG1_EPS if best[e] in ("power-ns", "power"))
    checks.add("arXiv version §V-C: PowerNS performs the best (on the Zipf dataset)",
               "best right-panel method per eps: " + ", ".join("%.1f: %s" % (e, best[e]) for e in FIG1_EPS),
               "Power or PowerNS best at a majority of eps", wins > len(FIG1_EPS) / 2)
    shown = [FIG1_EPS[0], 1.0, FIG1_EPS[-1]]
    table = markdown_table(["method"] + ["MSE eps=%.1f" % e for e in shown],
                           [[method] + ["%.3e" % m(method, e) for e in shown] for method in ALL_METHODS])
    write_summary(os.path.join(out_dir, "fig1.md"), "Fig. 1: full-domain MSE vs epsilon",
                  "Zipf s=%.1f, d=%d, n=%d users, OUE (exact aggregate simulation), %d repeats per eps, seed %d."
                  % (ZIPF_EXPONENT, ZIPF_DOMAIN, n, repeats, seed), table, checks, time.time() - started)
    return checks


# --- fig2 -----------------------------------------------------------------------------------

def run_fig2(out_dir, users, repeats, seed, eps=1.0):
    """[NH] §4.3 Fig. 2: set-value MSE vs rho at eps = 1."""
    started = time.time()
    rng = np.random.default_rng(seed)
    counts = zipf_counts(users, rng)
    n = int(counts.sum())
    truth = counts / n
    acc = Accumulator()
    for rep in range(repeats):
        est, var = fastsim.fast_oue(counts, eps, rng)
        outputs = run_methods(est, var, n, eps, ALL_METHODS)
        for rho in FIG2_RHO:
            query_seed = (seed, rep, int(round(rho * 100)))
            for method in ALL_METHODS:
                value = metrics.set_query_mse(truth, outputs[method], rho, np.random.default_rng(query_seed),
                                              SET_QUERIES, post.query_transform(method))
                acc.add(("set", rho, method, "mse"), value)
    write_csv(os.path.join(out_dir, "fig2.csv"), acc.rows("fig2", "rho"))
    percent = [100 * r for r in FIG2_RHO]
    acc_percent = Accumulator()
    for (panel, rho, method, metric), vals in acc.values.items():
        acc_percent.values[(panel, 100 * rho, method, metric)] = vals
    plot_two_panels(os.path.join(out_dir, "fig2.png"), acc_percent, "set", percent, "mse", "set size rho (% of d)",
                    "set-value MSE", "Fig. 2 (Zipf s=1.5, d=%d, n=%d, OUE eps=%.0f, %d repeats x %d sets)"
                    % (ZIPF_DOMAIN, n, eps, repeats, SET_QUERIES))
    m = lambda method, rho: acc.mean("set", rho, method, "mse")
    checks = Checks()
    top = FIG2_RHO[-1]
    best_norm = min(NORM_BASED, key=lambda method: m(method, top))
    best_other = min(NON_NORM_BASED, key=lambda method: m(method, top))
    orders_hyb = math.log10(m(best_other, top) / m("norm-hyb", top))
    orders_best = math.log10(m(best_other, top) / m(best_norm, top))
    checks.add("at rho=90%, Norm-Hyb is 1.5 to 4 orders of magnitude better than any non-norm-based method",
               "Norm-Hyb is %.2f orders below the best non-norm-based method (%s); the best norm-based (%s) %.2f orders"
               % (orders_hyb, best_other, best_norm, orders_best),
               "Norm-Hyb at least 1.5 orders better", orders_hyb >= 1.5)
    others = [method for method in ALL_METHODS if method != "base-pos"]
    orders = [math.log10(m("base-pos", rho) / float(np.median([m(o, rho) for o in others]))) for rho in FIG2_RHO]
    checks.add("Base-Pos's MSE is 1 to 2 orders of magnitude higher than the other methods'",
               "log10(Base-Pos / median of the others) over rho: min %.2f, max %.2f" % (min(orders), max(orders)),
               "at least 1 order at every rho", min(orders) >= 1.0)
    asymmetry = max(abs(math.log10(m(method, rho) / m(method, round(1 - rho, 1))))
                    for method in ("norm-sub", "mle-apx", "norm-hyb", "norm") for rho in FIG2_RHO)
    checks.add("norm-based methods' MSE is symmetric around rho=50%",
               "largest |log10 MSE(rho)/MSE(1-rho)| for Norm, Norm-Sub, MLE-Apx, Norm-Hyb: %.3f" % asymmetry,
               "below 0.2 (a factor 1.6)", asymmetry < 0.2)
    ratio = [m("post-pos", rho) / m("base", rho) for rho in FIG2_RHO]
    checks.add("Post-Pos is slightly better than Base", "Post-Pos/Base " + fmt_ratios(ratio), "every ratio in [0.8, 1]",
               all(0.8 <= r <= 1.0 for r in ratio))
    orders = {method: math.log10(m(method, FIG2_RHO[-1]) / m(method, FIG2_RHO[0])) for method in ("power", "base")}
    checks.add("from rho=10 to 90, Power's MSE grows 1 to 2 orders of magnitude, Base's less than 1",
               "log10 MSE(90%%)/MSE(10%%): Power %.2f, Base %.2f" % (orders["power"], orders["base"]),
               "Power in [1, 2] and Base < 1", 1.0 <= orders["power"] <= 2.0 and orders["base"] < 1.0)
    shown = [0.1, 0.5, 0.9]
    table = markdown_table(["method"] + ["MSE rho=%d%%" % round(100 * r) for r in shown],
                           [[method] + ["%.3e" % m(method, r) for r in shown] for method in ALL_METHODS])
    write_summary(os.path.join(out_dir, "fig2.md"), "Fig. 2: set-value MSE vs set size",
                  "Zipf s=%.1f, d=%d, n=%d users, OUE eps=%.1f, %d repeats, %d random sets per rho and repeat, seed %d."
                  % (ZIPF_EXPONENT, ZIPF_DOMAIN, n, eps, repeats, SET_QUERIES, seed),
                  table, checks, time.time() - started)
    return checks


# --- fig5 -----------------------------------------------------------------------------------

def run_fig5(out_dir, users, repeats, seed, eps=1.0):
    """[NH] §4.4 Fig. 5: MSE over the true top-k values vs k at eps = 1."""
    started = time.time()
    rng = np.random.default_rng(seed)
    counts = zipf_counts(users, rng)
    n = int(counts.sum())
    truth = counts / n
    acc = Accumulator()
    for _ in range(repeats):
        est, var = fastsim.fast_oue(counts, eps, rng)
        outputs = run_methods(est, var, n, eps, ALL_METHODS)
        for method in ALL_METHODS:
            answers = item_answers(method, outputs)
            for k in FIG5_K:
                acc.add(("topk", k, method, "mse"), metrics.topk_mse(truth, answers, k))
    write_csv(os.path.join(out_dir, "fig5.csv"), acc.rows("fig5", "k"))
    plot_two_panels(os.path.join(out_dir, "fig5.png"), acc, "topk", FIG5_K, "mse", "k (top values)", "top-k MSE",
                    "Fig. 5 (Zipf s=1.5, d=%d, n=%d, OUE eps=%.0f, %d repeats)" % (ZIPF_DOMAIN, n, eps, repeats),
                    right=["base"] + RIGHT_METHODS)
    m = lambda method, k: acc.mean("topk", k, method, "mse")
    first, last = FIG5_K[0], FIG5_K[-1]
    checks = Checks()
    flat = {method: m(method, last) / m(method, first) for method in ("base", "base-pos", "post-pos", "norm")}
    checks.add("Base, Base-Pos, Post-Pos and Norm perform consistently for different k",
               "MSE(k=%d)/MSE(k=%d): " % (last, first) + ", ".join("%s %.2f" % kv for kv in flat.items()),
               "every ratio in [0.5, 2]", all(0.5 <= r <= 2 for r in flat.values()))
    ratio = [m("norm-mul", k) / m("base", k) for k in FIG5_K]
    checks.add("Norm-Mul performs at least 10x worse than the other methods", "Norm-Mul/Base " + fmt_ratios(ratio),
               "every ratio >= 10", min(ratio) >= 10)
    between = all(m("base", k) < m("norm-sub", k) < m("norm-mul", k) for k in FIG5_K)
    ratio = [m("norm-sub", k) / m("base", k) for k in FIG5_K]
    checks.add("Norm-Sub and MLE-Apx are worse than Base but better than Norm-Mul",
               "Norm-Sub/Base " + fmt_ratios(ratio), "Base < Norm-Sub < Norm-Mul at every k", between)
    growth = {method: (m(method, last) / m("base", last)) / (m(method, first) / m("base", first))
              for method in ("base-cut", "norm-cut", "norm-hyb", "power")}
    checks.add("Base-Cut, Norm-Cut, Norm-Hyb and Power have MSE that grows with k (while Base's is flat)",
               "growth of MSE/MSE(Base) from k=%d to k=%d: " % (first, last)
               + ", ".join("%s %.3g" % kv for kv in growth.items()),
               "every growth factor > 1.2", all(r > 1.2 for r in growth.values()))
    checks.add("Norm-Cut is better than Base-Cut (its threshold is lower)",
               "at k=%d Norm-Cut %.3e vs Base-Cut %.3e" % (last, m("norm-cut", last), m("base-cut", last)),
               "Norm-Cut < Base-Cut at the largest k", m("norm-cut", last) < m("base-cut", last))
    reliable = next((k for k in FIG5_K if m("base-cut", k) > 2 * m("base", k)), None)
    checks.add("at eps=1 around 10 values can be reliably estimated (Base-Cut departs from Base)",
               "Base-Cut first exceeds 2x Base's MSE at k=%s" % reliable, "that k in [4, 20]",
               reliable is not None and 4 <= reliable <= 20)
    shown = [2, 10, 32]
    table = markdown_table(["method"] + ["MSE k=%d" % k for k in shown],
                           [[method] + ["%.3e" % m(method, k) for k in shown] for method in ALL_METHODS])
    write_summary(os.path.join(out_dir, "fig5.md"), "Fig. 5: top-k MSE vs k",
                  "Zipf s=%.1f, d=%d, n=%d users, OUE eps=%.1f, %d repeats, seed %d."
                  % (ZIPF_EXPONENT, ZIPF_DOMAIN, n, eps, repeats, seed), table, checks, time.time() - started)
    return checks


# --- calibrate ------------------------------------------------------------------------------

CALIBRATE_LABELS = {"base": "OUE", "base-cut": "OUE-Zero", "power": "OUE-Calibrate"}


def calibrate_outputs(est, var, n):
    """OUE, OUE-Zero (Base-Cut with [CAL] Eq. 22's beta = 0.05) and OUE-Calibrate (power prior,
    mean-variance fit), as fractions."""
    return {"base": est,
            "base-cut": post.postprocess("base-cut", est, var, n, alpha=OUE_ZERO_BETA),
            "power": post.postprocess("power", est, var, n)}


def run_calibrate(out_dir, users, repeats, seed):
    """[CAL] §IV Fig. 7 (estimation error vs eps) and Fig. 5 (heavy hitters vs threshold)."""
    started = time.time()
    rng = np.random.default_rng(seed)
    counts = kosarak_like_counts(users)
    n = int(counts.sum())
    truth = counts / n
    acc = Accumulator()
    for eps in CALIBRATE_EPS:
        for _ in range(repeats):
            est, var = fastsim.fast_oue(counts, eps, rng)
            for method, out in calibrate_outputs(est, var, n).items():
                acc.add(("error", eps, CALIBRATE_LABELS[method], "mse_counts"), metrics.mse(counts, out * n))
    p, q = fastsim.oue_pq(HEAVY_HITTER_EPS)
    significance = float(post.cut_threshold(fastsim.pure_variance(p, q, n), counts.size, OUE_ZERO_BETA)) * n
    thresholds = [factor * significance for factor in HEAVY_HITTER_THRESHOLD_FACTORS]
    for _ in range(repeats):
        est, var = fastsim.fast_oue(counts, HEAVY_HITTER_EPS, rng)
        for method, out in calibrate_outputs(est, var, n).items():
            for factor, threshold in zip(HEAVY_HITTER_THRESHOLD_FACTORS, thresholds):
                scores = metrics.heavy_hitter_prf(counts, out * n, threshold)
                for name, value in zip(("precision", "recall", "f_score"), scores):
                    acc.add(("heavy_hitters", factor, CALIBRATE_LABELS[method], name), value)
    write_csv(os.path.join(out_dir, "calibrate.csv"), acc.rows("calibrate", "eps_or_threshold_factor"))

    labels = list(CALIBRATE_LABELS.values())
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    for label in labels:
        errors = [acc.mean("error", e, label, "mse_counts") for e in CALIBRATE_EPS]
        axes[0].plot(CALIBRATE_EPS, errors, marker="o", label=label)
        for ax, name in zip(axes[1:], ("precision", "recall", "f_score")):
            ax.plot(thresholds, [acc.mean("heavy_hitters", f, label, name) for f in HEAVY_HITTER_THRESHOLD_FACTORS],
                    marker="o", markersize=3, label=label)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("epsilon")
    axes[0].set_ylabel("estimation error (MSE, counts^2)")
    for ax, name in zip(axes[1:], ("Precision", "Recall", "F-Score")):
        ax.axvline(significance, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("threshold (count), eps=%.0f" % HEAVY_HITTER_EPS)
        ax.set_ylabel(name)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Calibrate (Kosarak-shaped power law, d=%d, n=%d, %d repeats)" % (counts.size, n, repeats))
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "calibrate.png"), dpi=110)
    plt.close(fig)

    err = lambda label, eps: acc.mean("error", eps, label, "mse_counts")
    hh = lambda label, factor, name: acc.mean("heavy_hitters", factor, label, name)
    checks = Checks()
    orders = [math.log10(err("OUE", e) / max(err("OUE-Zero", e), err("OUE-Calibrate", e))) for e in CALIBRATE_EPS]
    checks.add("both OUE-Zero and OUE-Calibrate have orders of magnitude smaller estimation errors than OUE (Fig. 7)",
               "log10(OUE / worse of the two) over eps: min %.2f, max %.2f" % (min(orders), max(orders)),
               "at least 1 order at every eps", min(orders) >= 1.0)
    reduction = {e: 1.0 - err("OUE-Calibrate", e) / err("OUE-Zero", e) for e in CALIBRATE_EPS}
    checks.add("OUE-Calibrate outperforms OUE-Zero",
               "1 - MSE(Calibrate)/MSE(Zero): "
               + ", ".join("eps=%.0f: %.0f%%" % (e, 100 * r) for e, r in reduction.items()),
               "positive at every eps", all(r > 0 for r in reduction.values()))
    checks.add("the improvement grows with eps (Kosarak: 16% at eps=1, 97% at eps=5)",
               "eps=1: %.0f%% (Zero/Calibrate = %.2f), eps=5: %.0f%% (Zero/Calibrate = %.2f)"
               % (100 * reduction[1.0], err("OUE-Zero", 1.0) / err("OUE-Calibrate", 1.0),
                  100 * reduction[5.0], err("OUE-Zero", 5.0) / err("OUE-Calibrate", 5.0)),
               "improvement at eps=5 above eps=1", reduction[5.0] > reduction[1.0])
    factors = HEAVY_HITTER_THRESHOLD_FACTORS
    prec = sum(hh("OUE-Calibrate", f, "precision") >= hh("OUE", f, "precision") for f in factors)
    rec = sum(hh("OUE-Calibrate", f, "recall") <= hh("OUE", f, "recall") for f in factors)
    checks.add("OUE-Calibrate achieves higher Precision but lower Recall than OUE (Fig. 5, eps=4)",
               "Calibrate precision >= OUE's at %d of %d thresholds, recall <= OUE's at %d of %d"
               % (prec, len(factors), rec, len(factors)),
               "both at a majority of thresholds", prec > len(factors) / 2 and rec > len(factors) / 2)
    below = [f for f in factors if f < 1.0]
    wins = sum(hh("OUE-Calibrate", f, "f_score") >= max(hh("OUE", f, "f_score"), hh("OUE-Zero", f, "f_score"))
               for f in below)
    checks.add("OUE-Calibrate has a better F-Score, especially below the significance threshold",
               "Calibrate's F-Score is the best at %d of the %d thresholds below it" % (wins, len(below)),
               "at a majority of them", wins > len(below) / 2)
    above = [f for f in factors if f >= 1.0]
    same = all(abs(hh("OUE", f, name) - hh("OUE-Zero", f, name)) < 1e-12
               for f in above for name in ("precision", "recall"))
    checks.add("above the significance threshold OUE and OUE-Zero have the same performance",
               "identical precision and recall at all %d thresholds >= it: %s" % (len(above), same), "identical", same)

    rows = [["%.0f" % e] + ["%.4g" % err(label, e) for label in labels] for e in CALIBRATE_EPS]
    table = markdown_table(["eps"] + ["%s MSE (counts^2)" % label for label in labels], rows)
    scores = lambda label, f: " / ".join("%.3f" % hh(label, f, name) for name in ("precision", "recall", "f_score"))
    rows = [["%.0f" % t] + [scores(label, f) for label in labels] for f, t in zip(factors, thresholds)]
    table += ("\n\nHeavy hitters at eps=%.0f (P / R / F), significance threshold %.0f counts:\n\n"
              % (HEAVY_HITTER_EPS, significance))
    table += markdown_table(["threshold"] + labels, rows)
    write_summary(os.path.join(out_dir, "calibrate.md"), "Calibrate: estimation error and heavy hitters",
                  "Kosarak-shaped power-law dataset (d=%d, n=%d users, top item %d), OUE (exact aggregate simulation), "
                  "OUE-Zero = Base-Cut with beta=%.2f, OUE-Calibrate = power prior with the mean-variance fit; "
                  "%d repeats, seed %d." % (counts.size, n, counts.max(), OUE_ZERO_BETA, repeats, seed),
                  table, checks, time.time() - started)
    return checks


FAMILIES = {"fig1": run_fig1, "fig2": run_fig2, "fig5": run_fig5, "calibrate": run_calibrate}
DEFAULT_USERS = {"fig1": ZIPF_USERS, "fig2": ZIPF_USERS, "fig5": ZIPF_USERS, "calibrate": KOSARAK_USERS}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(FAMILIES) + ["all"])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--users", type=int, default=None, help="number of users (default: the paper's)")
    parser.add_argument("--quick", action="store_true", help="few repeats, for CI")
    parser.add_argument("--repeats", type=int, default=None, help="override the number of repeats")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args(argv)
    if args.users is not None and args.users < 1:
        parser.error("--users must be >= 1")
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    os.makedirs(args.out, exist_ok=True)
    families = sorted(FAMILIES) if args.family == "all" else [args.family]
    for family in families:
        repeats = args.repeats or (QUICK_REPEATS if args.quick else FULL_REPEATS)[family]
        users = args.users or DEFAULT_USERS[family]
        started = time.time()
        checks = FAMILIES[family](args.out, users, repeats, args.seed)
        print("%s: %d of %d shape checks reproduced (%.1f s) -> %s"
              % (family, sum(checks.results), len(checks.results), time.time() - started,
                 os.path.join(args.out, family + ".md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
