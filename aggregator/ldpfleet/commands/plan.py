"""`ldpfleet plan`: recommend a mechanism and predict its error before a pilot."""
import argparse
import json
import sys

from ..core.longitudinal_plan import DEFAULT_LIFETIME_BUDGET
from ..core.planner import plan
from .common import period, positive_int


def run_protocols(args):
    """`--top K --set-size L`: choose a heavy-hitter protocol (protocols.auto)."""
    from ..core import protocol
    from ..core.errors import LdpError
    from ..core.protocols import auto
    if args.users is None or args.target_mse is not None or args.report_bytes_max is not None:
        print("ldpfleet plan: --top/--set-size need --users N (and take no --target-mse or "
              "--report-bytes-max)", file=sys.stderr)
        return 2
    if args.top is None or args.set_size is None:
        print("ldpfleet plan: give both --top K and --set-size L", file=sys.stderr)
        return 2
    try:
        result = auto.choose(args.users, protocol.eps_to_milli(args.epsilon), args.domain,
                             args.set_size, args.top, args.k_max)
    except LdpError as exc:
        print("ldpfleet plan: error: %s" % exc, file=sys.stderr)
        return 2
    result.update({"users": args.users, "epsilon": args.epsilon, "domain": args.domain,
                   "set_size": args.set_size, "top": args.top})
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print("chosen: %s (predicted error: sd of a top-%d frequency %.4g)"
          % (result["chosen_protocol"], args.top, result["predicted_error"]))
    for row in result["rows"]:
        if row["feasible"]:
            extra = "" if row["phase1_sd"] is None else "  phase-1 sd %.4g" % row["phase1_sd"]
            print("  %-16s sd %.4g%s  %s" % (row["cli_name"], row["predicted_sd"], extra,
                                           json.dumps(row["params"], sort_keys=True)))
        else:
            print("  %-16s not feasible: %s" % (row["cli_name"], row["reason"]))
    return 0


RECURRING_DEFAULTS = {"epsilon": 2.0, "domain": 100, "users": 10000}
"""`plan --every/--rounds` without --epsilon, --domain, --users: the figures of issue
"Telemetry, not surveys" (k = 100 items, ε∞ = 2) for a fleet of 10,000."""


def _period(seconds: int) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return "%d%s" % (seconds // size, unit)
    return "%ds" % seconds


def run_recurring(args):
    """`--every P [--rounds R]`: per memoised protocol, per-round error and lifetime ε
    (core.longitudinal_plan), and the one `auto` chooses."""
    from ..core import protocol
    from ..core.errors import LdpError
    from ..core.longitudinal_plan import BASELINE, plan_recurring
    for flag, value in (("--top", args.top), ("--set-size", args.set_size),
                        ("--k-max", args.k_max), ("--target-mse", args.target_mse),
                        ("--report-bytes-max", args.report_bytes_max)):
        if value is not None:
            print("ldpfleet plan: %s does not go with --every/--rounds (a recurring campaign)"
                  % flag, file=sys.stderr)
            return 2
    eps = args.epsilon if args.epsilon is not None else RECURRING_DEFAULTS["epsilon"]
    domain = args.domain if args.domain is not None else RECURRING_DEFAULTS["domain"]
    users = args.users if args.users is not None else RECURRING_DEFAULTS["users"]
    try:
        eps_milli = protocol.eps_to_milli(eps)
        eps1_milli = (protocol.eps_to_milli(args.eps1) if args.eps1 is not None
                      else max(1, eps_milli // 2))
        freqs = None
        if args.dist is not None:
            from ..eval import datasets  # noqa: F401 (eval is above core; commands may use it)
            freqs = datasets.probabilities(args.dist, domain)
        result = plan_recurring(eps_milli, eps1_milli, domain, users, args.rounds,
                                args.lifetime_budget, freqs)
    except (LdpError, ValueError) as exc:
        print("ldpfleet plan: error: %s" % exc, file=sys.stderr)
        return 2
    result.update({"every_s": args.every, "epsilon": eps_milli / 1000.0,
                   "eps1": eps1_milli / 1000.0, "dist": args.dist or "uniform"})
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    rounds = args.rounds
    when = "" if args.every is None else " every %s" % _period(args.every)
    span = "" if args.every is None or rounds is None else " (%s)" % _period(args.every * rounds)
    print("recurring campaign: %s%s%s; n = %d devices, k = %d items (%s), eps_inf = %g, "
          "eps1 = %g, lifetime budget %g" % (
              "no round limit" if rounds is None else "%d rounds" % rounds, when, span, users,
              domain,
              args.dist or "uniform", eps_milli / 1000.0, eps1_milli / 1000.0,
              args.lifetime_budget))
    print("  %-16s %-9s %-13s %-13s %-11s %7s %7s" % (
        "protocol", "params", "per-round sd", "per-round MSE", "lifetime eps", "report", "state"))
    for row in result["protocols"]:
        name = row["protocol"] + (" (auto)" if row["protocol"] == result["auto"] else "")
        if not row["feasible"]:
            print("  %-16s not feasible: %s" % (name, row["reason"]))
            continue
        params = ",".join("%s=%s" % kv for kv in sorted(row["params"].items())
                          if kv[0] != "eps1_milli") or "-"
        life = "unbounded" if row["lifetime_eps"] is None else "%g" % row["lifetime_eps"]
        if row["lifetime_eps"] is not None and row["lifetime_eps"] > args.lifetime_budget:
            life += " (over)"
        print("  %-16s %-9s %-13.4g %-13.4g %-11s %6dB %6dB" % (
            name, params, row["per_round_sd"], row["per_round_mse"], life, row["report_bytes"],
            row["state_bytes"]))
    print("auto: %s -- %s" % (result["auto"] or "none", result["auto_reason"]))
    print("(%s: a fresh one-shot OUE at eps1 every round, no memoisation, for comparison: a "
          "recurring campaign cannot run it. Per-round sd: a frequency near 0, as a fraction; "
          "MSE: averaged over the k items. Lifetime eps: the enrolment charge, min(classes, "
          "rounds) x eps_inf, charged once whatever the values do.)" % BASELINE)
    return 0


def domain_arg(text: str):
    """argparse type: a number of items, or `strings:max_len=L` (a PEM campaign, spec §3.5)."""
    if str(text).startswith("strings:"):
        from ..core.errors import ConfigError
        from ..service.campaigns.manage import parse_domain
        try:
            return parse_domain(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of items or strings:max_len=L, got %r"
                                         % text) from None


def run(args):
    if args.every is not None or args.rounds is not None:
        return run_recurring(args)
    if isinstance(args.domain, dict):  # strings nobody listed: PEM
        from .plan_strings import run_strings
        for flag, value in (("--epsilon", args.epsilon), ("--users", args.users)):
            if value is None:
                print("ldpfleet plan: %s is required for a strings domain" % flag,
                      file=sys.stderr)
                return 2
        return run_strings(args, args.domain["max_len"])
    if args.alphabet is not None:
        print("ldpfleet plan: --alphabet is for a strings domain (--domain strings:max_len=L)",
              file=sys.stderr)
        return 2
    for flag, value in (("--eps1", args.eps1), ("--dist", args.dist)):
        if value is not None:
            print("ldpfleet plan: %s is for recurring campaigns (--every/--rounds)" % flag,
                  file=sys.stderr)
            return 2
    for flag, value in (("--epsilon", args.epsilon), ("--domain", args.domain)):
        if value is None:
            print("ldpfleet plan: %s is required (or plan a recurring campaign: --every 1d "
                  "--rounds 365)" % flag, file=sys.stderr)
            return 2
    if args.top is not None or args.set_size is not None:
        return run_protocols(args)
    if (args.users is None) == (args.target_mse is None):
        print("ldpfleet plan: give exactly one of --users / --target-mse", file=sys.stderr)
        return 2
    result = plan(args.epsilon, args.domain, users=args.users, target_mse=args.target_mse,
                  report_bytes_max=args.report_bytes_max)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    if result["recommended"] is None:
        print("no mechanism fits these constraints:")
    else:
        print("recommended: %s %s" % (result["recommended"], result["recommended_params"]))
    for row in result["candidates"]:
        if row["feasible"]:
            extra = ("users needed %d" % row["users_needed"]) if "users_needed" in row else \
                ("expected MSE %.3g" % row["expected_mse"])
            print("  %-5s %4d B  %s  decode ops %.3g" % (row["mechanism"], row["report_bytes"], extra,
                                                         row["decode_ops"]))
        else:
            print("  %-5s not feasible: %s" % (row["mechanism"], row["reason"]))
    return 0


def register(sub):
    p = sub.add_parser(
        "plan", help="recommend a mechanism and predict its error",
        description="Rank the frequency oracles for a campaign by their variance formulas: "
                    "given the fleet size, the expected mean squared error of every item's "
                    "frequency; given a target error, the fleet size each one needs. A cheaper "
                    "decoder within 10%% of the best variance is preferred. "
                    "With --every/--rounds, a recurring campaign instead (spec §3.4): per "
                    "memoised protocol (L-OSUE, L-SUE, L-GRR, OLOLOHA, BiLOLOHA) the error of "
                    "one round's estimates and the lifetime eps a device is charged at "
                    "enrolment, and the one `auto` chooses; every option has a default there, "
                    "e.g. `ldpfleet plan --every 1d --rounds 365`.")
    p.add_argument("--epsilon", type=float, metavar="E",
                   help="privacy budget per report, in nats (required for a one-shot plan); "
                        "recurring: eps_inf, the permanent response's (default 2)")
    p.add_argument("--domain", type=domain_arg, metavar="D",
                   help="number of items (required for a one-shot plan; recurring: default 100), "
                        "or strings:max_len=L for strings nobody listed (PEM)")
    p.add_argument("--alphabet", default=None, metavar="CHARS",
                   help="strings domain: the characters the strings are made of (public)")
    p.add_argument("--users", type=int, metavar="N",
                   help="fleet size: predict each mechanism's error (give this or --target-mse; "
                        "recurring: devices per round, default 10000)")
    p.add_argument("--target-mse", type=float, metavar="X",
                   help="wanted MSE of a frequency: predict the fleet size each needs")
    p.add_argument("--report-bytes-max", type=int, metavar="B",
                   help="leave out mechanisms whose reports are larger than B bytes")
    p.add_argument("--top", type=int, metavar="K",
                   help="set-valued heavy hitters: choose a protocol for the top K items "
                        "(with --set-size and --users; protocols.auto)")
    p.add_argument("--set-size", type=int, metavar="L",
                   help="with --top: the padded set length l (e.g. the 90th percentile of the "
                        "devices' set sizes)")
    p.add_argument("--k-max", type=int, metavar="C",
                   help="with --top: phase-2 candidates (default 2K)")
    rec = p.add_argument_group("recurring campaigns (campaign create --every P --rounds R)")
    rec.add_argument("--every", type=period, metavar="P",
                     help="the round period: 90s, 30m, 12h, 1d, 1w or seconds (10 s to a year)")
    rec.add_argument("--rounds", type=positive_int, metavar="R",
                     help="number of rounds (default: no limit, the largest enrolment charge)")
    rec.add_argument("--eps1", type=float, metavar="E1",
                     help="one report's eps, below --epsilon (default --epsilon / 2)")
    rec.add_argument("--lifetime-budget", type=float, default=DEFAULT_LIFETIME_BUDGET,
                     metavar="B", help="a device's lifetime eps budget; auto chooses among the "
                                       "protocols whose enrolment charge fits it (default %g, "
                                       "the board default)" % DEFAULT_LIFETIME_BUDGET)
    rec.add_argument("--dist", default=None,
                     help="the items' true distribution for the per-round MSE, e.g. zipf:1.1 "
                          "(default uniform)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
