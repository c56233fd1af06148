"""`ldpfleet simulate`: in-process estimation-quality and speed rounds of one mechanism.

Prints one JSON object (`--json`) or a readable summary. Keys: mechanism, epsilon, eps_milli,
users, domain, dist, repeat, seed, params, fast, report_bytes, mse (full-domain MSE of
frequencies as fractions, mean over repeats; with --post an object keyed by method, `base`
always present), mse_per_repeat (base), theory_variance (the mechanism's variance averaged over
the true frequencies; null where the mechanism has none), mse_ratio (mse / theory_variance,
keyed like mse), client_seconds and aggregate_seconds (mean per round; client null with --fast),
client_reports_per_second, post_seconds (with --post), set_size (set-valued mechanisms).

`--protocol` (instead of `--mechanism`) simulates one campaign of a two-phase protocol or a
baseline on the same seeded data (ldpfleet.simulation.simulate_protocol):
- ldpminer-rappor | ldpminer-sh | sampling-rappor | sampling-sh (LDPMiner §5: set-valued data,
  --set-size L --top K [--k-max --budget-split --sketch-m]): keys protocol, core_protocol,
  epsilon, users, domain, dist, set_size, k, k_max, l2, seed, re (median relative error over
  the true top-k), re_list, ndcg (NDCG of the true top-k's ranks), recall;
- ldplcm | cms | hcms | flh (LDPLCM §5, one item per user, --sketch-k K --sketch-m M; ldplcm
  also --sample-rate R --theta T, which the baselines ignore so one command line serves a
  comparison; flh uses k' = 128): keys protocol, core_protocol, epsilon, users, domain, dist,
  seed, sse and mse over the whole domain (frequencies as fractions), and for ldplcm
  phase1_users, phase2_users, high_items, theta_measured, sse_high, sse_low, ...
"""
import argparse
import json
import os
import sys

from ..protocols.options import ProtocolOptions, add_protocol_arguments


MECHANISMS = ["grr", "olh", "flh", "oue", "cms", "hcms", "sh"]


def _param(text):
    """k=v with v an int, else a float, else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected k=v, got %r" % text)
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer, got %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %d" % value)
    return value


def _epsilon(text):
    from ..simulation import eps_milli_from  # lazy: keeps other commands' start-up fast
    try:
        return eps_milli_from(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _methods(text):
    return [m.strip() for m in text.split(",") if m.strip()]


def register(subparsers):
    p = subparsers.add_parser(
        "simulate", help="simulate rounds of one mechanism in process (accuracy and speed)",
        description="Simulate rounds of one mechanism (--mechanism) or one campaign of a "
                    "two-phase protocol (--protocol) in process, on seeded synthetic data, and "
                    "print its accuracy (MSE, or relative error / recall / NDCG for heavy "
                    "hitters) and speed.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--mechanism", choices=MECHANISMS, help="one frequency oracle (a round per --repeat)")
    kind.add_argument("--protocol", choices=PROTOCOLS,
                      help="a two-phase protocol or a baseline (one run; see the keys below)")
    p.add_argument("--epsilon", required=True, type=_epsilon, metavar="E",
                   help="privacy budget per report (multiple of 0.001)")
    p.add_argument("--users", required=True, type=_positive_int, metavar="N",
                   help="simulated devices (users) per round")
    p.add_argument("--domain", required=True, type=_positive_int, metavar="D",
                   help="integer domain 0..D-1")
    p.add_argument("--dist", default="zipf:1.1",
                   help="true-value distribution: zipf:S | uniform | normal:MU,SIGMA | laplace:MU,B "
                        "(default zipf:1.1; Zipf ranks items in index order)")
    p.add_argument("--repeat", type=_positive_int, default=1, metavar="R",
                   help="rounds on fresh data (the JSON reports their mean)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="aggregator-side seed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--post", type=_methods, default=[], metavar="M1,M2",
                   help="post-processing methods (ldpfleet.post.METHODS) to score as well")
    p.add_argument("--fast", action="store_true",
                   help="grr/oue: draw aggregate counts from their exact distribution")
    p.add_argument("--param", type=_param, action="append", default=[], metavar="k=v",
                   help="mechanism parameter (e.g. g=8, kp=1024, k=256, m=1024, l=4)")
    p.add_argument("--set-size", type=_positive_int, default=1, metavar="L",
                   help="items per user for set-valued mechanisms (sh) and LDPMiner protocols")
    add_protocol_arguments(p, int_type=_positive_int, who="users")
    p.set_defaults(func=run)
    p.epilog = "output keys:\n" + __doc__[__doc__.index("Prints one JSON"):]
    return p


PROTOCOLS = ("ldpminer-rappor", "ldpminer-sh", "sampling-rappor", "sampling-sh",
             "ldplcm", "cms", "hcms", "flh")


def _fail(message):
    print("ldpfleet simulate: error: %s" % message, file=sys.stderr)
    return 2


def _progress(total):
    """A tqdm bar on stderr, only when stderr is a terminal (80x24 if it reports no size)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # the `eval` extra: no bar without it
        return None
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except OSError:
        size = os.terminal_size((0, 0))
    return tqdm(total=total, unit="user", unit_scale=True, file=sys.stderr, leave=False,
                ncols=size.columns or 80, nrows=size.lines or 24)


def run_protocol(args):
    from ..simulation import ProtocolConfig, simulate_protocol
    for flag, bad in (("--repeat", args.repeat != 1), ("--post", bool(args.post)),
                      ("--fast", args.fast), ("--param", bool(args.param))):
        if bad:
            return _fail("%s is for --mechanism runs, not --protocol" % flag)
    cfg = ProtocolConfig(protocol=args.protocol, eps_milli=args.epsilon, users=args.users,
                         domain=args.domain, dist=args.dist, seed=args.seed,
                         options=ProtocolOptions.from_args(args))
    try:
        result = simulate_protocol(cfg)
    except (ValueError, TypeError) as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(protocol_summary(result))
    return 0


def protocol_summary(r) -> str:
    head = "%s  eps=%g  users=%d  domain=%d  dist=%s  seed=%d" % (
        r["protocol"], r["epsilon"], r["users"], r["domain"], r["dist"], r["seed"])
    if "re" in r:
        return "\n".join([head, "set size %d  k=%d  k_max=%s  l2=%s" % (
            r["set_size"], r["k"], r["k_max"], r["l2"]),
            "RE %s  (listed only: %s)  NDCG %s  recall %s" % (
                _fmt(r["re"]), _fmt(r["re_list"]), _fmt(r["ndcg"]), _fmt(r["recall"]))])
    lines = [head, "sse %s  mse %s" % (_fmt(r["sse"]), _fmt(r["mse"]))]
    if r["protocol"] == "ldplcm":
        lines.append("phase 1 %d users, phase 2 %d users, %d high-frequent items (theta "
                     "measured %s); sse high %s, low %s" % (
                         r["phase1_users"], r["phase2_users"], r["high_items"],
                         _fmt(r["theta_measured"]), _fmt(r["sse_high"]), _fmt(r["sse_low"])))
    return "\n".join(lines)


def run(args):
    from ..simulation import SimulationConfig, simulate
    if args.protocol:
        return run_protocol(args)
    given = [f for f in ProtocolOptions.from_args(args).given() if f != "set_size"]
    if given:
        return _fail("--%s is for --protocol runs" % given[0].replace("_", "-"))
    cfg = SimulationConfig(mechanism=args.mechanism, eps_milli=args.epsilon, users=args.users,
                           domain=args.domain, dist=args.dist, repeat=args.repeat, seed=args.seed,
                           post=args.post, fast=args.fast, params=dict(args.param),
                           set_size=args.set_size)
    bar = _progress(cfg.users * cfg.repeat)
    try:
        result = simulate(cfg, progress=bar)
    except (ValueError, TypeError) as exc:
        return _fail(exc)
    except ImportError as exc:
        return _fail("mechanism %r is not available: %s" % (cfg.mechanism, exc))
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(summary(result))
    return 0


def _fmt(x):
    return "n/a" if x is None else "%.4g" % x


def summary(r) -> str:
    lines = ["%s  eps=%g  users=%d  domain=%d  dist=%s  repeat=%d  seed=%d%s"
             % (r["mechanism"], r["epsilon"], r["users"], r["domain"], r["dist"], r["repeat"],
                r["seed"], "  (fast)" if r["fast"] else ""),
             "params: %s   report: %d bytes" % (json.dumps(r["params"], sort_keys=True), r["report_bytes"]),
             "theory variance: %s" % _fmt(r["theory_variance"])]
    mse = r["mse"] if isinstance(r["mse"], dict) else {"base": r["mse"]}
    ratio = r["mse_ratio"] if isinstance(r["mse_ratio"], dict) else {"base": r["mse_ratio"]}
    for method in mse:
        extra = ""
        if "post_seconds" in r and method != "base":
            extra = "  (%.3f s)" % r["post_seconds"][method]
        lines.append("mse %-15s %s   mse/theory %s%s" % (method, _fmt(mse[method]), _fmt(ratio[method]), extra))
    if r["client_seconds"] is not None:
        lines.append("client: %.3f s per round (%s reports/s)"
                     % (r["client_seconds"], _fmt(r["client_reports_per_second"])))
    lines.append("aggregation: %.3f s per round" % r["aggregate_seconds"])
    return "\n".join(lines)
