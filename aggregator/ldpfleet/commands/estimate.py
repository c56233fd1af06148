"""`ldpfleet estimate NAME`: a campaign's frequency estimates with confidence intervals, or a
two-phase protocol's answer (ldpfleet.service.campaigns.estimates)."""
import json
import sys

from ..core.errors import ConfigError
from .common import item_list, open_store, state_arg

SERIES_LAST = 90  # service/campaigns/rounds.py's default (not imported: the CLI starts lean)


def register(subparsers):
    e = subparsers.add_parser(
        "estimate", help="frequency estimates with confidence intervals",
        description="A two-phase protocol campaign in phase 2 prints the protocol's answer "
                    "(LDPMiner: top-k with frequencies; LDPLCM: every item's frequency and "
                    "whether the model calls it high-frequent; --top limits it); --phase N "
                    "gives one phase's raw estimates instead.")
    e.add_argument("name")
    state_arg(e)
    e.add_argument("--phase", type=int, default=None, help="default: the campaign's current phase")
    e.add_argument("--round", type=int, default=None, metavar="R",
                   help="a recurring campaign's round R (default: the latest round with "
                        "reports, named in the answer)")
    e.add_argument("--series", action="store_true",
                   help="a recurring campaign's rounds: window, n and the estimates of the "
                        "--top items (default 5) of the latest round, or of --items, each "
                        "with its interval (lbitmean: the mean)")
    e.add_argument("--last", type=int, default=None, metavar="N",
                   help="--series: the N latest rounds (default %d)" % SERIES_LAST)
    e.add_argument("--post", default=None,
                   help="consistency post-processing (ldpfleet.core.post.METHODS) of one phase's "
                        "estimates; `none` for none (clears a config file's [estimate] post); a "
                        "two-phase protocol's answer ignores it with a warning")
    e.add_argument("--post-opt", action="append", default=[], metavar="K=V",
                   help="option of the post-processing method (repeatable)")
    e.add_argument("--top", type=int, default=None, help="only the K largest")
    e.add_argument("--threshold", default=None,
                   help="'auto': only the rows that stand out of the noise (at the --fdr "
                        "false-discovery rate), or a fraction of the reports")
    e.add_argument("--fdr", type=float, default=0.05, metavar="LEVEL",
                   help="false-discovery rate of a list: rows that do not stand out of the "
                        "noise of all the estimated items at this level are flagged `noise` "
                        "(Benjamini-Hochberg, or -Yekutieli where the estimates may depend on "
                        "each other; default 0.05)")
    e.add_argument("--confidence", type=float, default=0.95)
    e.add_argument("--items", default=None,
                   help="estimate only these items: comma-separated, or a file with one per line")
    e.add_argument("--subset", default=None,
                   help="set-value query: the fraction of users whose item is in this set "
                        "(comma-separated, or a file with one per line)")
    fmt = e.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    e.set_defaults(func=run_estimate)


def run_estimate(args):
    from ..service.campaigns.manage import parse_params
    from ..service.campaigns.estimates import EstimateQuery, parse_threshold
    from ..service.campaigns.query import estimate
    from ..service.campaigns.significance import check_level
    parse_threshold(args.threshold)
    check_level(args.fdr)
    if args.top is not None and args.top < 1:
        raise ConfigError("top", "must be at least 1, got %d" % args.top)
    if args.series:
        return run_series(args)
    if args.last is not None:
        raise ConfigError("last", "--last applies to --series")
    if args.post_opt and args.post in (None, "", "none"):
        raise ConfigError("post_opt", "options of a post-processing method need --post METHOD")
    with open_store(args, create=False) as store:
        result = estimate(store, args.name, EstimateQuery(
            phase=args.phase, post=args.post, post_opts=parse_params(args.post_opt),
            top=args.top, threshold=args.threshold, confidence=args.confidence,
            items=item_list(args.items), subset=item_list(args.subset), fdr=args.fdr,
            round=args.round))
    return _print_result(args, result)


def run_series(args):
    """`estimate NAME --series` (service/campaigns/rounds.py)."""
    from ..service.campaigns.rounds import compute_series
    for flag in ("round", "phase", "subset", "threshold"):
        if getattr(args, flag) is not None:
            raise ConfigError(flag, "--%s does not apply to --series (every round is shown)"
                              % flag)
    with open_store(args, create=False) as store:
        result = compute_series(store, args.name, top=args.top, items=item_list(args.items),
                                confidence=args.confidence, fdr=args.fdr, last=args.last)
    if args.post not in (None, "", "none"):  # perhaps the config file's [estimate] post
        result.warnings.append("post-processing %s applies to one round's estimates (--round "
                               "R): the series is not post-processed" % args.post)
    return _print_result(args, result)


def _print_result(args, result):
    """An estimate table or a protocol answer as JSON, CSV or text; its warnings on stderr."""
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
    elif args.csv:
        result.to_csv(sys.stdout)
    else:
        print(result.to_text())
    for warning in result.warnings:
        print("ldpfleet: warning: %s" % warning, file=sys.stderr)
    return 0
