#!/usr/bin/env python3
"""Per-round accuracy of the memoised protocols under evolving values, and what they cost a
device over its life (spec §3.2); prints JSON on stdout and a Markdown table on stderr.

    python tools/longitudinal_table.py [--n 100000] [--k 100] [--rounds 30] [--change-rate 0.1]
                                       [--eps 2] [--eps1 1] [--dist zipf:1.1] [--seed 20260]
                                       [--replications R] [--plan-rounds 365] [--out FILE]

Simulation (ldpfleet.eval.longitudinal_sim, the shipped C kernels, real memoisation: one
permanent state per device for the whole run): n devices over `rounds` rounds, each device's
value redrawn from the distribution with probability `change-rate` per round; per protocol the
per-round MSE of the frequency estimates (fractions, averaged over the k items and the rounds),
its analytic variance, their ratio and the ratio's standard error across independent runs
(`--replications`, default longitudinal_sim.REPLICATIONS: 6-16 per protocol). Planner (`plan_longitudinal`): the per-round standard deviation of a frequency
at f = 0 and the lifetime ε a device is charged at enrolment for `plan-rounds` rounds, with the
baseline that re-reports fresh OUE at ε1 every round.
"""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))

from ldpfleet.eval import datasets
from ldpfleet.core import protocol  # noqa: E402
from ldpfleet.eval.longitudinal_sim import (
    PROTOCOLS,
    REPLICATIONS,
    Evolution,
    plan_longitudinal,
    simulate_protocols)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--change-rate", type=float, default=0.1)
    p.add_argument("--eps", type=float, default=2.0, help="ε∞ (the permanent response)")
    p.add_argument("--eps1", type=float, default=1.0, help="ε1 (one report)")
    p.add_argument("--dist", default="zipf:1.1")
    p.add_argument("--seed", type=int, default=20260)
    p.add_argument("--replications", type=int, default=None,
                   help="runs per protocol (default: longitudinal_sim.REPLICATIONS)")
    p.add_argument("--plan-rounds", type=int, default=365)
    p.add_argument("--protocols", default=",".join(PROTOCOLS))
    p.add_argument("--out")
    args = p.parse_args(argv)
    eps, eps1 = protocol.eps_to_milli(args.eps), protocol.eps_to_milli(args.eps1)
    evolution = Evolution(args.n, args.rounds, args.change_rate,
                          datasets.probabilities(args.dist, args.k))
    names = [x for x in args.protocols.split(",") if x]
    t0 = time.perf_counter()
    sim = simulate_protocols(names, eps, eps1, evolution, args.seed,
                             args.replications or REPLICATIONS)
    plan = {r["protocol"]: r for r in plan_longitudinal(eps, eps1, args.k, args.n, args.plan_rounds)}
    result = {"tool": "tools/longitudinal_table.py", "config": vars(args), "simulation": sim,
              "plan": plan, "wall_seconds": time.perf_counter() - t0}
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    lines = ["| protocol | g | per-round MSE | analytic variance | ratio (± se) | lifetime ε, %d rounds | lifetime ε, %d rounds |"
             % (args.rounds, args.plan_rounds), "|---|---|---|---|---|---|---|"]
    for name in names:
        s, pl = sim[name], plan[name]
        lines.append("| %s | %s | %.3e | %.3e | %.3f ± %.3f | %g | %g |" % (
            name, s["params"].get("g", ""), s["mse"], s["variance"], s["mse_over_variance"],
            s["ratio_se"] or 0.0, s["lifetime_eps"], pl["lifetime_eps"]))
    base = plan["every-round-oue"]
    lines.append("| every-round-oue | | | %.3e (f = 0) | | %g | %g |" % (
        base["per_round_variance"], args.rounds * args.eps1, base["lifetime_eps"]))
    print("\n".join(lines), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
