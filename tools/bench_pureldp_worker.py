"""Times one workload through PyPI pure-ldp 1.2.0; prints one JSON object on stdout.

Runs inside tools/.venv-pureldp (pure-ldp 1.2.0 crashes with numpy>=2 in its CMS server and
with xxhash>=4 in OLH/FLH/CMS/HCMS, and imports scikit-learn and statsmodels without declaring
them); driven by tools/bench.py:

    python bench_pureldp_worker.py '{"mechanism": "olh", "n": 100000, "d": 1024, "eps": 2,
                                     "params": {"g": 8}, "budget": 10, "seed": 1}'

(or a JSON list of such jobs on stdin: one process, results printed as a list in order).

Phases, timed separately:
* setup: constructing client and server (FLH builds its k x d hash table twice here);
* client: `privatise` per user; aggregate: `aggregate` per report (pure-ldp takes one report
  per call); both streamed in chunks so reports never pile up in memory;
* estimate: the server's one-off `_update_estimates` (via check_and_update_estimates), then
  `estimate` for every domain item.

Where the whole run is predicted to exceed `budget` seconds, only a part is timed and scaled
linearly (`extrapolated: true`, `scaled` lists what): client/aggregate over `sample_n` users
(cost per report does not depend on n); the per-item estimate loop over `sample_items` items;
FLH's O(k d) setup and table sums with `sample_k` hash rows instead of k; HR's decoding, which
is linear in the number of reports, by n / sample_n.
"""
import json
import random
import sys
import time
import warnings

import numpy as np

warnings.simplefilter("ignore")

from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer  # noqa: E402
from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer  # noqa: E402
from pure_ldp.frequency_oracles.hadamard_response import (  # noqa: E402
    HadamardResponseClient, HadamardResponseServer)
from pure_ldp.frequency_oracles.local_hashing import (  # noqa: E402
    FastLHClient, FastLHServer, LHClient, LHServer)
from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer  # noqa: E402

CHUNK = 256
PILOT_USERS = 64
"""The sample starts with this many users and doubles while it fits half the budget."""


def identity(x):
    return x


def build(mech, eps, d, params, k_rows=None):
    """(client, server) for one mechanism with ldpfleet-equal parameters."""
    if mech == "grr":
        return DEClient(eps, d, index_mapper=identity), DEServer(eps, d, index_mapper=identity)
    if mech == "oue":
        return (UEClient(eps, d, use_oue=True, index_mapper=identity),
                UEServer(eps, d, use_oue=True, index_mapper=identity))
    if mech == "olh":
        g = params["g"]
        return (LHClient(eps, d, g=g, use_olh=False, index_mapper=identity),
                LHServer(eps, d, g=g, use_olh=False, index_mapper=identity))
    if mech == "flh":
        g, k = params["g"], k_rows or params["kp"]
        return (FastLHClient(eps, d, k, g=g, use_olh=False, index_mapper=identity),
                FastLHServer(eps, d, k, g=g, use_olh=False, index_mapper=identity))
    if mech in ("cms", "hcms"):
        had = mech == "hcms"
        server = CMSServer(eps, params["k"], params["m"], is_hadamard=had)
        return CMSClient(eps, server.get_hash_funcs(), params["m"], is_hadamard=had), server
    if mech == "hr":
        server = HadamardResponseServer(eps, d, index_mapper=identity)
        return HadamardResponseClient(eps, d, server.get_hash_funcs(), index_mapper=identity), server
    raise SystemExit("unknown mechanism %r" % mech)


def zipf_values(n, d, s, rng):
    p = (np.arange(d) + 1.0) ** -s
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), d - 1).tolist()


def stream(client, server, values):
    """Privatise then aggregate `values` chunk by chunk; (client s, aggregate s)."""
    c = a = 0.0
    for start in range(0, len(values), CHUNK):
        chunk = values[start:start + CHUNK]
        t0 = time.perf_counter()
        reports = [client.privatise(v) for v in chunk]
        t1 = time.perf_counter()
        for r in reports:
            server.aggregate(r)
        t2 = time.perf_counter()
        c += t1 - t0
        a += t2 - t1
    return c, a


def run(job):
    mech, n, d, eps = job["mechanism"], int(job["n"]), int(job["d"]), float(job["eps"])
    params, budget = job.get("params", {}), float(job.get("budget", 60.0))
    random.seed(job.get("seed", 0))
    np.random.seed(job.get("seed", 0) % 2**32)
    rng = np.random.default_rng(job.get("seed", 0))
    scaled = []

    k_full = params.get("kp") if mech == "flh" else None
    k_rows = None
    if mech == "flh":
        t0 = time.perf_counter()
        build(mech, eps, d, params, k_rows=1)
        per_row = time.perf_counter() - t0
        if per_row * k_full > budget / 4:
            k_rows = max(1, min(k_full, int(budget / 4 / max(per_row, 1e-9))))
            scaled.append("setup and table sums: k=%d -> %d" % (k_rows, k_full))
    t0 = time.perf_counter()
    client, server = build(mech, eps, d, params, k_rows=k_rows)
    setup = time.perf_counter() - t0
    if k_rows:
        setup *= k_full / k_rows

    client_s = agg_s = 0.0
    sample_n, chunk = 0, min(n, PILOT_USERS)
    while chunk > 0:
        c, a = stream(client, server, zipf_values(chunk, d, 1.1, rng))
        client_s, agg_s, sample_n = client_s + c, agg_s + a, sample_n + chunk
        per_user = (client_s + agg_s) / sample_n
        chunk = min(n - sample_n, sample_n)  # doubling, while the next round fits the budget
        if (client_s + agg_s) + per_user * chunk > budget / 2:
            chunk = 0
    if sample_n < n:
        client_s *= n / sample_n
        agg_s *= n / sample_n
        scaled.append("client and aggregate: n=%d -> %d" % (sample_n, n))

    t0 = time.perf_counter()
    server.check_and_update_estimates()
    update_est = time.perf_counter() - t0
    if k_rows:
        update_est *= k_full / k_rows
    if mech == "hr" and sample_n < n:
        update_est *= n / sample_n
        scaled.append("HR decoding: n=%d -> %d" % (sample_n, n))

    items = list(range(d))
    t0 = time.perf_counter()
    done = 0
    for x in items:
        server.estimate(x, suppress_warnings=True)
        done += 1
        if done % 64 == 0 and time.perf_counter() - t0 > budget / 4:
            break
    per_item = time.perf_counter() - t0
    if done < d:
        per_item *= d / done
        scaled.append("estimate loop: %d -> %d items" % (done, d))

    out = {
        "mechanism": mech, "n": n, "d": d, "eps": eps, "params": params,
        "setup_seconds": setup,
        "client_seconds": client_s,
        "client_reports_per_second": n / client_s if client_s > 0 else None,
        "update_seconds": agg_s,
        "estimate_seconds": update_est + per_item,
        "aggregate_seconds": agg_s + update_est + per_item,
        "sample_n": sample_n, "sample_items": done,
        "sample_k": k_rows,
        "extrapolated": bool(scaled), "scaled": scaled,
    }
    if mech == "olh":
        out["hash_evals_per_second"] = n * d / agg_s if agg_s > 0 else None
    if mech == "flh":
        out["hash_evals"] = 2 * k_full * d
    return out


def main(argv):
    """Jobs (one object or a list) from argv[1] or stdin; the results, in order, on stdout."""
    jobs = json.loads(argv[1] if len(argv) > 1 else sys.stdin.read())
    single = isinstance(jobs, dict)
    results = []
    for job in [jobs] if single else jobs:
        try:
            results.append(run(job))
        except Exception as exc:  # report and go on with the other workloads
            results.append({"mechanism": job.get("mechanism"), "n": job.get("n"), "d": job.get("d"),
                            "eps": job.get("eps"), "error": "%s: %s" % (type(exc).__name__, exc)})
    print(json.dumps(results[0] if single else results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
