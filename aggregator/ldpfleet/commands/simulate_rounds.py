"""`ldpfleet simulate --rounds N`: recurring collection with memoised mechanisms, simulated in
process (eval.longitudinal_sim; spec §3.2, §3.4): per protocol every round's MSE beside the
analytic variance, the lifetime ε and `auto`'s choice (core.longitudinal_plan). The options
are simulate's (commands/simulate.py registers them)."""
import json
import sys

from ..core.protocols.options import ProtocolOptions

LONGITUDINAL = ("l-osue", "l-sue", "l-grr", "ololoha", "biloloha", "all")
"""--rounds' --protocol: core.longitudinal_plan.PROTOCOLS and all of them (auto is simulate's
PROTOCOLS already)."""
ROUNDS_DEFAULTS = {"users": 10000, "domain": 100, "epsilon": 2000}


def _fail(message):
    print("ldpfleet simulate: error: %s" % message, file=sys.stderr)
    return 2


def run_rounds(args):
    """`--rounds N`: memoised protocols over N rounds of evolving values
    (eval.longitudinal_sim.simulate_protocols); per-round MSE beside the analytic variance."""
    from ..core.errors import LdpError
    from ..core.longitudinal_plan import DEFAULT_LIFETIME_BUDGET, PROTOCOLS as NAMES, plan_recurring
    from ..eval import datasets
    from ..eval.longitudinal_sim import Evolution, simulate_protocols
    if args.mechanism is not None:
        return _fail("--rounds simulates memoised protocols: give --protocol %s or auto, not "
                     "--mechanism" % "|".join(LONGITUDINAL))
    if args.protocol is not None and args.protocol not in LONGITUDINAL + ("auto",):
        return _fail("--rounds takes --protocol %s or auto, not %s"
                     % ("|".join(LONGITUDINAL), args.protocol))
    for flag, bad in (("--data", args.data is not None), ("--post", bool(args.post)),
                      ("--fast", args.fast), ("--param", bool(args.param)),
                      ("--set-size", args.set_size is not None),
                      ("--set-size-dist", args.set_size_dist is not None)):
        if bad:
            return _fail("%s does not go with --rounds" % flag)
    given = [f for f in ProtocolOptions.from_args(args).given() if f != "set_size"]
    if given:
        return _fail("--%s does not go with --rounds" % given[0].replace("_", "-"))
    users = args.users or ROUNDS_DEFAULTS["users"]
    domain = args.domain or ROUNDS_DEFAULTS["domain"]
    eps = args.epsilon or ROUNDS_DEFAULTS["epsilon"]
    eps1 = args.eps1 or max(1, eps // 2)
    dist = args.dist or "zipf:1.1"
    budget = DEFAULT_LIFETIME_BUDGET if args.lifetime_budget is None else args.lifetime_budget
    try:
        probs = datasets.probabilities(dist, domain)
        evolution = Evolution(users, args.rounds, args.change_rate, probs)
        plan = plan_recurring(eps, eps1, domain, users, args.rounds, budget, probs)
        chosen = args.protocol or "all"
        if chosen == "auto":
            if plan["auto"] is None:
                return _fail("auto: %s" % plan["auto_reason"])
            names = [plan["auto"]]
        elif chosen == "all":
            names = [r["protocol"] for r in plan["protocols"]
                     if r["feasible"] and r["protocol"] in NAMES]
        else:
            names = [chosen]
        sim = simulate_protocols(names, eps, eps1, evolution, args.seed, args.repeat)
    except (LdpError, ValueError) as exc:
        return _fail(exc)
    result = {"rounds": args.rounds, "change_rate": args.change_rate, "users": users,
              "domain": domain, "epsilon": eps / 1000.0, "eps1": eps1 / 1000.0, "dist": dist,
              "seed": args.seed, "repeat": args.repeat, "protocol": chosen,
              "auto": plan["auto"], "auto_reason": plan["auto_reason"],
              "lifetime_budget": budget, "protocols": sim}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(rounds_summary(result))
    return 0


def rounds_summary(r) -> str:
    names = list(r["protocols"])
    lines = ["%d rounds, change rate %g, users=%d  domain=%d  dist=%s  eps_inf=%g  eps1=%g  "
             "repeat=%d  seed=%d" % (r["rounds"], r["change_rate"], r["users"], r["domain"],
                                      r["dist"], r["epsilon"], r["eps1"], r["repeat"], r["seed"]),
             "  %-16s %-11s %-11s %-16s %s" % ("protocol", "MSE", "variance", "MSE/variance",
                                               "lifetime eps")]
    for name in names:
        s = r["protocols"][name]
        se = "" if s["ratio_se"] is None else " +- %.3f" % s["ratio_se"]
        lines.append("  %-16s %-11.4g %-11.4g %-16s %g" % (
            name + (" (auto)" if name == r["auto"] else ""), s["mse"], s["variance"],
            "%.3f%s" % (s["mse_over_variance"], se), s["lifetime_eps"]))
    lines.append("per round, MSE / analytic variance%s:" % (
        "" if len(names) > 1 else " (%s)" % names[0]))
    lines.append("  %5s %9s  %s" % ("round", "changed", "  ".join("%-22s" % n for n in names)))
    first = r["protocols"][names[0]]
    for i in range(r["rounds"]):
        cells = ["%.3e / %.3e" % (r["protocols"][n]["mse_per_round"][i],
                                  r["protocols"][n]["variance_per_round"][i]) for n in names]
        lines.append("  %5d %9.0f  %s" % (i + 1, first["changes_per_round"][i],
                                           "  ".join("%-22s" % c for c in cells)))
    if r["auto"] is not None:
        lines.append("auto: %s -- %s" % (r["auto"], r["auto_reason"]))
    return "\n".join(lines)
