#!/usr/bin/env python3
"""Heavy hitters over strings: ldpfleet's PEM beside PyPI pure-ldp 1.2.0's PEM and SFP on the
same data, in one run; prints one JSON object on stdout.

    .venv/bin/python tools/bench_heavy_hitters.py [--settings 100000:3:6,1000000:1:6,1000000:1:10]
        [--seed S] [--repeat R] [--seeds S] [--oracle flh|olh] [--no-pureldp]
        [--pureldp-max-len 6] [--out FILE]

Data (Wang, Li, Jha, "Locally Differentially Private Heavy Hitter Identification", TDSC 2019,
§6's Zipf setting): 1,000 random strings over 27 symbols (a-z and _), Zipf 1.1; a setting is
users:epsilon:length. The same users (written to a temporary .npy) go to every implementation.
Scored: recall@10 (share of the true top 10 found), microseconds per user (client), decode
seconds (pure-ldp: aggregate + find_heavy_hitters; ldpfleet: fold + identify), and the ratios
ldpfleet / pure-ldp (recall) and pure-ldp / ldpfleet (time).

ldpfleet: protocols.pem through eval.pem_sim with `PemPlan.for_fleet(n, eps, length,
alphabet)` (FLH over prefix keys, spec §3.5; levels, keep and k' from the fleet size), with
`--repeat R` runs on fresh noise over the same users (recall mean) and `--seeds S` runs on S
data draws (recall mean, sd, min, max).
pure-ldp: PEMClient/PEMServer and SFPClient/SFPServer with Count-Mean Sketch (k = 32,
m = 1024), the same alphabet; PEM start_length 2, fragment_length 1 (top 10 kept per level,
its design); SFP fragments of 2 characters (Apple's "Learning with Privacy at Scale"), top 10
fragments per position. It runs once per setting up to `--pureldp-max-len` characters (its PEM
server checks every report against every prefix, so longer strings are not feasible), in
tools/.venv-pureldp (tools/bench.py's `venv_python`: pure-ldp 1.2.0 with numpy<2, xxhash<4,
created on first use), with this file as its worker (`--pureldp-worker`, which imports only
pure-ldp and numpy).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
K = 10
WORDS, ZIPF = 1000, 1.1
ALPHABET = "abcdefghijklmnopqrstuvwxyz_"
CMS_K, CMS_M = 32, 1024
SFP_FRAGMENT = 2
TARGETS = {"recall_at_10": 0.9, "decode_seconds_at_1e6_len_10": 60.0}
SETTINGS = "100000:3:6,1000000:1:6,1000000:1:10"


def log(msg):
    print("bench_heavy_hitters: %s" % msg, file=sys.stderr, flush=True)


# --- pure-ldp worker (runs inside tools/.venv-pureldp) ----------------------------------------

def pureldp_worker():
    import random
    import warnings
    warnings.simplefilter("ignore")
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp.sfp_client import SFPClient
    from pure_ldp.heavy_hitters.apple_sfp.sfp_server import SFPServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
    job = json.loads(sys.stdin.read())
    random.seed(job["seed"])
    np.random.seed(job["seed"] % (1 << 32))
    words, users = job["words"], np.load(job["users"])
    eps, length = job["eps"], job["length"]
    server_fo = CMSServer(eps, CMS_K, CMS_M)
    client_fo = CMSClient(eps, server_fo.get_hash_funcs(), CMS_M)
    alphabet = list(ALPHABET)
    if job["method"] == "pem":
        client = PEMClient(eps, 2, length, 1, alphabet=alphabet, fo_client=client_fo,
                           index_mapper=lambda x: x)
        server = PEMServer(eps, 2, length, 1, alphabet=alphabet, fo_server=server_fo,
                           index_mapper=lambda x: x)
    else:
        alphabet = set(ALPHABET)  # SFP adds its padding character to a set
        client = SFPClient(eps, SFP_FRAGMENT, length, alphabet=alphabet, fo_client=client_fo,
                           index_mapper=lambda x: x)
        server = SFPServer(eps, SFP_FRAGMENT, length, alphabet=alphabet, fo_server=server_fo,
                           index_mapper=lambda x: x)
    t0 = time.perf_counter()
    reports = [client.privatise(words[u]) for u in users]
    t1 = time.perf_counter()
    for r in reports:
        server.aggregate(r)
    t2 = time.perf_counter()
    top, freqs = server.find_heavy_hitters(k=K)
    t3 = time.perf_counter()
    if job["method"] == "sfp":  # SFP returns every candidate with its estimate, unsorted
        order = np.argsort(-np.asarray(freqs, dtype=np.float64), kind="stable")[:K]
        top = [top[i] for i in order]
    print(json.dumps({"top_items": list(top), "client_seconds": t1 - t0,
                      "aggregate_seconds": t2 - t1, "decode_seconds": t3 - t2}))


# --- driver -----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--settings", default=SETTINGS, metavar="N:EPS:LEN,...",
                   help="(users, epsilon, characters) triples (default %s)" % SETTINGS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-pureldp", action="store_true", help="ldpfleet only")
    p.add_argument("--pureldp-max-len", type=int, default=6,
                   help="run pure-ldp on settings of at most this many characters (default 6)")
    p.add_argument("--oracle", default="flh", choices=("flh", "olh"),
                   help="ldpfleet's per-group oracle (default flh, spec §3.5)")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="ldpfleet: R runs on fresh noise over the same users (recall_mean, "
                        "recall_per_repeat); pure-ldp runs once")
    p.add_argument("--seeds", type=int, default=1, metavar="S",
                   help="ldpfleet: also S data draws (seeds seed..seed+S-1, fresh strings, users "
                        "and noise) per setting: recall mean, min, max as `over_seeds`")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--pureldp-worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_ours(words, users, eps, length, seed, oracle="flh"):
    sys.path.insert(0, str(ROOT / "aggregator"))
    from ldpfleet.core.protocols import pem
    from ldpfleet.eval import pem_sim
    plan = pem.PemPlan.for_fleet(users.size, int(round(eps * 1000)), length, alphabet=ALPHABET,
                                 top=K, oracle=oracle)
    r = pem_sim.simulate(plan, words, users, seed=seed)
    out = {k: r[k] for k in ("recall", "top_items", "client_seconds", "decode_seconds",
                             "candidates_per_level", "keep", "levels", "g", "kp", "oracle")}
    out["level_bits"] = plan.level_bits()
    out["us_per_user"] = 1e6 * r["client_seconds"] / users.size
    return out


def run_pureldp(method, words, users, eps, seed, length):
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from bench import venv_python  # the one pure-ldp venv helper
    py = venv_python()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "users.npy")
        np.save(path, users)
        job = {"method": method, "words": words, "users": path, "eps": eps, "seed": seed,
               "length": length}
        proc = subprocess.run([str(py), __file__, "--pureldp-worker"], input=json.dumps(job),
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("pure-ldp %s worker failed: %s" % (method, proc.stderr.strip()[-2000:]))
    out = json.loads(proc.stdout)
    out["us_per_user"] = 1e6 * out["client_seconds"] / users.size
    return out


def ratios(ours, pure):
    """recall ldpfleet / pure-ldp; times pure-ldp / ldpfleet (how many times faster)."""
    ours_decode = max(ours["decode_seconds"], 1e-9)
    return {"recall": ours["recall"] / pure["recall"] if pure["recall"] else None,
            "per_user": pure["us_per_user"] / max(ours["us_per_user"], 1e-9),
            "decode": (pure["aggregate_seconds"] + pure["decode_seconds"]) / ours_decode}


def draw(pem_sim, n, length, seed):
    """The words, each user's word and the true top K of one data seed."""
    drng = np.random.default_rng([seed, length])
    words, probs = pem_sim.zipf_strings(WORDS, length, ZIPF, drng)
    users = pem_sim.draw_users(n, probs, drng)
    counts = np.bincount(users, minlength=WORDS)
    return words, users, {words[i] for i in np.argsort(-counts, kind="stable")[:K]}


def main(argv=None):
    args = parse_args(argv)
    if args.pureldp_worker:
        return pureldp_worker()
    sys.path.insert(0, str(ROOT / "aggregator"))
    from ldpfleet.eval import pem_sim
    settings = [(int(a), float(b), int(c)) for a, b, c in
                (s.split(":") for s in args.settings.split(","))]
    out = {"data": {"words": WORDS, "zipf": ZIPF, "alphabet": ALPHABET, "seed": args.seed},
           "k": K, "targets": TARGETS, "command": " ".join(sys.argv), "runs": []}
    for n, eps, length in settings:
        words, users, truth = draw(pem_sim, n, length, args.seed)
        log("n=%d eps=%g length=%d: ldpfleet" % (n, eps, length))
        ours = run_ours(words, users, eps, length, args.seed + 1, args.oracle)
        if args.repeat > 1:
            more = [run_ours(words, users, eps, length, args.seed + 1 + 1000 * r, args.oracle)
                    for r in range(1, args.repeat)]
            recalls = [ours["recall"]] + [m["recall"] for m in more]
            ours["recall_per_repeat"] = recalls
            ours["recall_mean"] = float(np.mean(recalls))
            ours["decode_seconds_max"] = max([ours["decode_seconds"]]
                                             + [m["decode_seconds"] for m in more])
        run = {"users": n, "epsilon": eps, "length": length, "ldpfleet": ours}
        if args.seeds > 1:
            recalls = [ours["recall"]]
            for seed in range(args.seed + 1, args.seed + args.seeds):
                log("n=%d eps=%g length=%d: ldpfleet, data seed %d" % (n, eps, length, seed))
                w, u, _ = draw(pem_sim, n, length, seed)
                recalls.append(run_ours(w, u, eps, length, seed + 1, args.oracle)["recall"])
            run["over_seeds"] = {"seeds": args.seeds, "recall": recalls,
                                 "mean": float(np.mean(recalls)), "sd": float(np.std(recalls)),
                                 "min": min(recalls), "max": max(recalls)}
        if not args.no_pureldp and length <= args.pureldp_max_len:
            for method in ("pem", "sfp"):
                log("n=%d eps=%g length=%d: pure-ldp %s (pure Python, slow)"
                    % (n, eps, length, method))
                pure = run_pureldp(method, words, users, eps, args.seed + 1, length)
                pure["recall"] = len(truth & set(pure["top_items"])) / float(K)
                run["pureldp_" + method] = pure
                run["ratio_vs_pureldp_" + method] = ratios(ours, pure)
        out["runs"].append(run)
    text = json.dumps(out, indent=1, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
