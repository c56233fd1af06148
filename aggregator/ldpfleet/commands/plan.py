"""`ldpfleet plan`: recommend a mechanism and predict its error before a pilot."""
import json
import sys

from ..core.planner import plan


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


def run(args):
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
                    "decoder within 10%% of the best variance is preferred.")
    p.add_argument("--epsilon", type=float, required=True, metavar="E",
                   help="privacy budget per report, in nats")
    p.add_argument("--domain", type=int, required=True, metavar="D", help="number of items")
    p.add_argument("--users", type=int, metavar="N",
                   help="fleet size: predict each mechanism's error (give this or --target-mse)")
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
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
