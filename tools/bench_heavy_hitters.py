#!/usr/bin/env python3
"""Heavy hitters over strings: ldpfleet's PEM beside PyPI pure-ldp 1.2.0's PEM on the same data,
in one run; prints one JSON object on stdout.

    .venv/bin/python tools/bench_heavy_hitters.py [--settings 100000:3,1000000:1] [--seed S]
                                                  [--repeat R] [--no-pureldp] [--out FILE]

Data (Wang, Li, Jha, "Locally Differentially Private Heavy Hitter Identification", TDSC 2019,
§6's Zipf setting): 1,000 random 10-character strings over 27 symbols (a-z and _), Zipf 1.1;
the same users (written to a temporary .npy) go to both implementations. Scored: recall@10
(share of the true top 10 found), client and decode seconds, speed ratios pure-ldp / ldpfleet.

ldpfleet: protocols.pem through eval.pem_sim (the shipped OLH kernels, C prefix keys) with
the public alphabet, levels of one byte after a first level of 2 bytes, 128 prefixes kept.
pure-ldp: PEMClient/PEMServer with Count-Mean Sketch (k = 32, m = 1024), the same alphabet,
start_length 2, fragment_length 1, top 10 kept per level (its design); it runs in
tools/.venv-pureldp (tools/bench.py's `venv_python`, created on first use) with this file as
its worker (`--pureldp-worker`, which imports only pure-ldp and numpy).
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
WORDS, LENGTH, ZIPF = 1000, 10, 1.1
ALPHABET = "abcdefghijklmnopqrstuvwxyz_"
CMS_K, CMS_M = 32, 1024
TARGETS = {"recall_at_10": 0.9, "decode_seconds_at_1e6": 60.0}


def log(msg):
    print("bench_heavy_hitters: %s" % msg, file=sys.stderr, flush=True)


# --- pure-ldp worker (runs inside tools/.venv-pureldp) ----------------------------------------

def pureldp_worker():
    import random
    import warnings
    warnings.simplefilter("ignore")
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
    job = json.loads(sys.stdin.read())
    random.seed(job["seed"])
    np.random.seed(job["seed"] % (1 << 32))
    words, users = job["words"], np.load(job["users"])
    eps, length = job["eps"], job["length"]
    server_fo = CMSServer(eps, CMS_K, CMS_M)
    client_fo = CMSClient(eps, server_fo.get_hash_funcs(), CMS_M)
    alphabet = list(ALPHABET)
    client = PEMClient(eps, 2, length, 1, alphabet=alphabet, fo_client=client_fo,
                       index_mapper=lambda x: x)
    server = PEMServer(eps, 2, length, 1, alphabet=alphabet, fo_server=server_fo,
                       index_mapper=lambda x: x)
    t0 = time.perf_counter()
    reports = [client.privatise(words[u]) for u in users]
    t1 = time.perf_counter()
    for r in reports:
        server.aggregate(r)
    t2 = time.perf_counter()
    top, _ = server.find_heavy_hitters(k=K)
    t3 = time.perf_counter()
    print(json.dumps({"top_items": list(top), "client_seconds": t1 - t0,
                      "aggregate_seconds": t2 - t1, "decode_seconds": t3 - t2}))


# --- driver -----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--settings", default="100000:3,1000000:1", metavar="N:EPS,...",
                   help="(users, epsilon) pairs (default 100000:3,1000000:1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--length", type=int, default=LENGTH,
                   help="characters per string (default %d; the issue's pure-ldp figures used 6)" % LENGTH)
    p.add_argument("--no-pureldp", action="store_true", help="ldpfleet only")
    p.add_argument("--keep", type=int, default=128, help="ldpfleet: prefixes kept per level")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="ldpfleet: R runs on fresh noise over the same users (recall_mean, "
                        "recall_per_repeat); pure-ldp runs once")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--pureldp-worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_ours(words, users, eps, keep, seed, length=LENGTH):
    sys.path.insert(0, str(ROOT / "aggregator"))
    from ldpfleet.core.protocols import pem
    from ldpfleet.eval import pem_sim
    plan = pem.PemPlan(int(round(eps * 1000)), max_len=length, top=K, step=8, first=16,
                       keep=keep, validate_share=0.0, alphabet=ALPHABET)
    r = pem_sim.simulate(plan, words, users, seed=seed)
    return {k: r[k] for k in ("recall", "top_items", "client_seconds", "decode_seconds",
                              "candidates_per_level", "keep", "levels", "g")}


def run_pureldp(words, users, eps, seed, length=LENGTH):
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from bench import venv_python  # the one pure-ldp venv helper
    py = venv_python()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "users.npy")
        np.save(path, users)
        job = {"words": words, "users": path, "eps": eps, "seed": seed, "length": length}
        proc = subprocess.run([str(py), __file__, "--pureldp-worker"], input=json.dumps(job),
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("pure-ldp worker failed: %s" % proc.stderr.strip()[-2000:])
    return json.loads(proc.stdout)


def main(argv=None):
    args = parse_args(argv)
    if args.pureldp_worker:
        return pureldp_worker()
    sys.path.insert(0, str(ROOT / "aggregator"))
    from ldpfleet.eval import pem_sim
    settings = [(int(a), float(b)) for a, b in (s.split(":") for s in args.settings.split(","))]
    drng = np.random.default_rng(args.seed)
    words, probs = pem_sim.zipf_strings(WORDS, args.length, ZIPF, drng)
    out = {"data": {"words": WORDS, "length": args.length, "zipf": ZIPF, "alphabet": ALPHABET,
                    "seed": args.seed}, "k": K, "targets": TARGETS, "runs": []}
    for n, eps in settings:
        users = pem_sim.draw_users(n, probs, drng)
        counts = np.bincount(users, minlength=WORDS)
        truth = {words[i] for i in np.argsort(-counts, kind="stable")[:K]}
        log("n=%d eps=%g: ldpfleet" % (n, eps))
        ours = run_ours(words, users, eps, args.keep, args.seed + 1, args.length)
        if args.repeat > 1:
            recalls = [ours["recall"]] + [run_ours(words, users, eps, args.keep,
                                                   args.seed + 1 + 1000 * r, args.length)["recall"]
                                          for r in range(1, args.repeat)]
            ours["recall_per_repeat"] = recalls
            ours["recall_mean"] = float(np.mean(recalls))
        run = {"users": n, "epsilon": eps, "ldpfleet": ours}
        if not args.no_pureldp:
            log("n=%d eps=%g: pure-ldp (pure Python, slow)" % (n, eps))
            pure = run_pureldp(words, users, eps, args.seed + 1, args.length)
            pure["recall"] = len(truth & set(pure["top_items"])) / float(K)
            run["pureldp"] = pure
            run["speed_ratio"] = {
                "decode": pure["decode_seconds"] / max(ours["decode_seconds"], 1e-9),
                "total": (pure["client_seconds"] + pure["aggregate_seconds"]
                          + pure["decode_seconds"])
                / max(ours["client_seconds"] + ours["decode_seconds"], 1e-9)}
        out["runs"].append(run)
    text = json.dumps(out, indent=1, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
