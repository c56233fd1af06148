"""Times one longitudinal workload through PyPI multi-freq-ldpy 0.2.5; prints JSON on stdout.

Runs inside tools/.venv-mfldpy (multi-freq-ldpy 0.2.5 with xxhash<4: its L_LH client hashes
str values, which xxhash 4 refuses), driven by `tools/bench.py --longitudinal`:

    python bench_mfldpy_worker.py '{"protocol": "ololoha", "n": 20000, "k": 100,
                                     "eps_perm": 2, "eps_1": 1, "budget": 10, "seed": 1}'

(or a JSON list of such jobs on stdin: one process, results printed as a list in order).

Protocols and the package's functions: l-grr L_GRR, l-osue L_OSUE, l-sue L_SUE, ololoha L_LH
(optimal=True), biloloha L_LH (optimal=False); clients `*_Client` one value per call,
aggregators `*_Aggregator_MI` over the whole report list. Its clients are stateless (a fresh
permanent response per call), which changes nothing in what the aggregator does.

Phases, timed separately: client (per user, over a sample that doubles while it fits a quarter
of the budget, scaled to n: `extrapolated`), aggregate (the aggregator on n reports: the sample's
reports repeated to n, which costs what fresh ones would; when the aggregator on the sample
predicts more than half the budget, it is timed on the sample and scaled linearly).
"""
import json
import sys
import time
import warnings

import numpy as np

warnings.simplefilter("ignore")

from multi_freq_ldpy.long_freq_est.L_GRR import L_GRR_Aggregator_MI, L_GRR_Client  # noqa: E402
from multi_freq_ldpy.long_freq_est.L_LH import L_LH_Aggregator_MI, L_LH_Client  # noqa: E402
from multi_freq_ldpy.long_freq_est.L_OSUE import L_OSUE_Aggregator_MI, L_OSUE_Client  # noqa: E402
from multi_freq_ldpy.long_freq_est.L_SUE import L_SUE_Aggregator_MI, L_SUE_Client  # noqa: E402

PILOT_USERS = 64


def functions(protocol, k, ep, e1):
    """(client(value), aggregator(reports)) of one protocol."""
    if protocol == "l-grr":
        return (lambda v: L_GRR_Client(v, k, ep, e1)), (lambda r: L_GRR_Aggregator_MI(r, k, ep, e1))
    if protocol == "l-osue":
        return (lambda v: L_OSUE_Client(v, k, ep, e1)), (lambda r: L_OSUE_Aggregator_MI(r, ep, e1))
    if protocol == "l-sue":
        return (lambda v: L_SUE_Client(v, k, ep, e1)), (lambda r: L_SUE_Aggregator_MI(r, ep, e1))
    if protocol in ("ololoha", "biloloha"):
        opt = protocol == "ololoha"
        return ((lambda v: L_LH_Client(v, k, ep, e1, opt)),
                (lambda r: L_LH_Aggregator_MI(r, k, ep, e1, opt)))
    raise SystemExit("unknown protocol %r" % protocol)


def zipf_values(n, k, s, rng):
    p = (np.arange(k) + 1.0) ** -s
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), k - 1).tolist()


def run(job):
    protocol, n, k = job["protocol"], int(job["n"]), int(job["k"])
    ep, e1, budget = float(job["eps_perm"]), float(job["eps_1"]), float(job.get("budget", 60.0))
    rng = np.random.default_rng(job.get("seed", 0))
    np.random.seed(job.get("seed", 0) % 2**32)
    client, aggregate = functions(protocol, k, ep, e1)
    client(0)  # numba compiles on first use: not part of the timing
    scaled = []
    reports, client_s, chunk = [], 0.0, min(n, PILOT_USERS)
    while chunk > 0:
        values = zipf_values(chunk, k, 1.1, rng)
        t0 = time.perf_counter()
        reports += [client(v) for v in values]
        client_s += time.perf_counter() - t0
        per_user = client_s / len(reports)
        chunk = min(n - len(reports), len(reports))
        if client_s + per_user * chunk > budget / 4:
            chunk = 0
    sample_n = len(reports)
    if sample_n < n:
        client_s *= n / sample_n
        scaled.append("client: n=%d -> %d" % (sample_n, n))
    t0 = time.perf_counter()
    aggregate(reports)
    sample_agg = time.perf_counter() - t0
    if sample_n < n and sample_agg * n / sample_n > budget / 2:
        agg_s = sample_agg * n / sample_n
        scaled.append("aggregate: n=%d -> %d" % (sample_n, n))
    elif sample_n < n:
        full = (reports * (n // sample_n + 1))[:n]
        t0 = time.perf_counter()
        aggregate(full)
        agg_s = time.perf_counter() - t0
    else:
        agg_s = sample_agg
    return {"protocol": protocol, "n": n, "k": k, "eps_perm": ep, "eps_1": e1,
            "client_seconds": client_s, "client_reports_per_second": n / client_s if client_s else None,
            "aggregate_seconds": agg_s, "sample_n": sample_n,
            "extrapolated": bool(scaled), "scaled": scaled}


def main(argv):
    """Jobs (one object or a list) from argv[1] or stdin; the results, in order, on stdout."""
    jobs = json.loads(argv[1] if len(argv) > 1 else sys.stdin.read())
    single = isinstance(jobs, dict)
    results = []
    for job in [jobs] if single else jobs:
        try:
            results.append(run(job))
        except Exception as exc:  # report and go on with the other workloads
            results.append({"protocol": job.get("protocol"), "n": job.get("n"), "k": job.get("k"),
                            "error": "%s: %s" % (type(exc).__name__, exc)})
    print(json.dumps(results[0] if single else results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
