#!/usr/bin/env python3
"""Time every post-processing method of ldpfleet.core.post at Kosarak's size (d=42,178, n=10^6).

    python tools/bench_post.py [--eps 1.0] [--runs 5] [--seed 7]

Prints JSON: the setup and, per method, the median wall time of ``--runs`` calls (seconds)
on one OUE estimate (exact aggregate simulation of a power-law dataset). The consistency
paper (App. C.1) reports Power taking more than 4 hours per instance at this size.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

try:
    from ldpfleet.eval import fastsim
    from ldpfleet.core import post
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "aggregator"))
    from ldpfleet.eval import fastsim
    from ldpfleet.core import post

DOMAIN = 42_178
USERS = 1_000_000
ZIPF_EXPONENT = 1.1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    weights = np.arange(1, DOMAIN + 1, dtype=np.float64) ** -ZIPF_EXPONENT
    counts = rng.multinomial(USERS, weights / weights.sum())
    est, var = fastsim.fast_oue(counts, args.eps, rng)
    p, q = fastsim.oue_pq(args.eps)
    timings = {}
    for method in post.METHODS:
        opts = {"p": p, "q": q} if method == "mle-apx" else {}
        runs = []
        for _ in range(max(1, args.runs)):
            started = time.perf_counter()
            post.postprocess(method, est, var, USERS, **opts)
            runs.append(time.perf_counter() - started)
        timings[method] = float(np.median(runs))
    started = time.perf_counter()
    post.fit_power_prior(est, var, USERS, fit="ml")
    ml_fit = time.perf_counter() - started
    print(json.dumps({"d": DOMAIN, "n": USERS, "eps": args.eps, "mechanism": "oue",
                      "dataset": "zipf s=%.1f" % ZIPF_EXPONENT, "runs": args.runs,
                      "seconds_median": timings, "power_ml_fit_seconds": ml_fit}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
