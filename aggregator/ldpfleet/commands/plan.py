"""`ldpfleet plan`: recommend a mechanism and predict its error before a pilot."""
import json
import sys

from ..planner import plan


def run(args):
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
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
