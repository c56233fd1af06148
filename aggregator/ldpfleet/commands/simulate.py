"""`ldpfleet simulate`: in-process estimation-quality and speed rounds of one mechanism.

Prints one JSON object (`--json`) or a readable summary. Keys: mechanism, epsilon, eps_milli,
users, domain, dist, repeat, seed, params, fast, report_bytes, mse (full-domain MSE of
frequencies as fractions, mean over repeats; with --post an object keyed by method, `base`
always present), mse_per_repeat (base), theory_variance (the mechanism's variance averaged over
the true frequencies; null where the mechanism has none), mse_ratio (mse / theory_variance,
keyed like mse), client_seconds and aggregate_seconds (mean per round; client null with --fast),
client_reports_per_second, post_seconds (with --post), set_size (set-valued mechanisms), data.

`--data FILE` (ldpfleet.eval.datafile): users' own data instead of drawn values, a CSV with the header
`device,item`, one row per device and item (`dev7,`: a device holding no item); items are ints
if all are, else strings, the domain is the distinct items (no --domain, --dist). `--users N`
resamples the devices with replacement to N (seeded), else the file's devices are the users.
--mechanism needs exactly one item per device, e.g.
    ldpfleet simulate --mechanism grr --data apps.csv --users 100000 --epsilon 2 --json

`--protocol` (instead of `--mechanism`) simulates one campaign of a two-phase protocol or a
baseline on the same seeded data (ldpfleet.eval.simulation.simulate_protocol):
- ldpminer-rappor | ldpminer-sh | ldpminer-sh-opt | sampling-rappor | sampling-sh (LDPMiner
  §5: set-valued data; ldpminer-sh-opt is LDPMiner-SH with §4.4's correlated phases, spec §3.1,
  --set-size L --top K [--k-max --budget-split --sketch-m]): keys protocol, core_protocol,
  epsilon, users, domain, dist, set_size, k, k_max, l2, seed, re (median relative error over
  the true top-k), re_list, ndcg (NDCG of the true top-k's ranks), recall;
- svim | psfo | auto, the same keys: svim is the SVIM-style two-phase protocol (Wang, Li, Jha,
  S&P 2018; protocols.svim: devices split between the phases, padding-and-sampling GRR/OLH at
  the full eps, phase 1 at l = 1), psfo one-phase padding-and-sampling at length l, auto the
  protocol protocols.auto predicts best for (n, eps, d, l, k) -- run as itself, plus keys
  chosen_protocol, predicted_error (standard deviation of a top-k frequency estimate) and plan
  (every protocol's prediction; `ldpfleet plan --top K --set-size L` prints the same);
- ldplcm | cms | hcms | flh (LDPLCM §5, one item per user, --sketch-k K --sketch-m M; ldplcm
  also --sample-rate R --theta T, which the baselines ignore so one command line serves a
  comparison; flh uses k' = 128): keys protocol, core_protocol, epsilon, users, domain, dist,
  seed, sse and mse over the whole domain (frequencies as fractions), and for ldplcm
  phase1_users, phase2_users, high_items, theta_measured, sse_high, sse_low, ...

- pem (PEM, the prefix extending method over strings; Wang, Li, Jha, "Locally Differentially
  Private Heavy Hitter Identification", TDSC 2019; protocols.pem, eval.pem_sim): Zipf (--dist
  zipf:S) over `--param words=W` random `--param length=L` strings (default 1000, 10), or
  --data FILE's string items (one per device; --users N resamples); --top K; the plan is
  `PemPlan.for_fleet` (FLH, levels and k' from the fleet size) with knobs --param max_len=
  keep= kp= g= oracle=flh|olh pool= alphabet=, or the paper's schedule with step= first=
  (validate_share= too): keys protocol, users, epsilon, k, oracle, kp,
  recall (recall@k), top_items, true_top_items, candidates_per_level, client_seconds,
  decode_seconds, ...

`--rounds N` (recurring collection with memoised mechanisms, eval.longitudinal_sim; --protocol
l-osue | l-sue | l-grr | ololoha | biloloha | auto | all, default all): keys rounds,
change_rate, users, domain, epsilon (ε∞), eps1, dist, seed, repeat (independent runs per
protocol), protocol, auto and auto_reason (core.longitudinal_plan's choice), lifetime_budget,
and protocols: {name: {mechanism, params, mse, variance, mse_over_variance, ratio_se,
lifetime_eps (the enrolment charge for N rounds), replications, mse_per_round,
variance_per_round, changes_per_round}}.

The LDPMiner family also takes variable-size sets: `--data FILE` (devices may hold any number of
items, none included) or `--set-size-dist geometric:MEAN` (synthetic sizes on 1, 2, ...; fixed:L
is --set-size L). The padded length l (§3: shorter sets are padded, longer ones sampled) is
then the 90th percentile of the set sizes unless --set-size L is given. `--repeat R`: R runs on
fresh noise (synthetic data: fresh data; --data --users N: a fresh resample); re, re_list, ndcg,
recall are means, with re_per_repeat, ... lists. Further keys: data (path or null),
set_size_dist, set_size (null for variable sizes), set_size_p90, set_size_mean, l, l_per_repeat,
repeat, top_items and true_top_items (labels of the file's items; first repeat), e.g.
    ldpfleet simulate --protocol ldpminer-rappor --data baskets.csv --users 200000 \\
        --epsilon 4 --top 10 --repeat 5 --json
"""
import argparse
import json
import os
import sys

from ..core.protocols.options import ProtocolOptions, add_protocol_arguments
from .simulate_rounds import LONGITUDINAL, run_rounds


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
    from ..eval.simulation import eps_milli_from  # lazy: keeps other commands' start-up fast
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
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--mechanism", choices=MECHANISMS, help="one frequency oracle (a round per --repeat)")
    kind.add_argument("--protocol", choices=PROTOCOLS + LONGITUDINAL,
                      help="a two-phase protocol or a baseline (one run; see the keys below); "
                           "with --rounds a memoised protocol (%s), auto (core.longitudinal_plan"
                           "'s choice) or all (default)" % ", ".join(LONGITUDINAL[:-1]))
    p.add_argument("--epsilon", type=_epsilon, metavar="E",
                   help="privacy budget per report (multiple of 0.001; required but with "
                        "--rounds, where it is eps_inf, the permanent response's, default 2)")
    p.add_argument("--data", default=None, metavar="FILE",
                   help="users' own data instead of drawn values: a CSV with the header "
                        "device,item, one row per device and item ('dev7,' = no item); "
                        "--mechanism needs exactly one item per device")
    p.add_argument("--users", type=_positive_int, metavar="N",
                   help="simulated devices (users) per round (required without --data but "
                        "with --rounds, default 10000; with --data: resample the file's devices "
                        "with replacement to N)")
    p.add_argument("--domain", type=_positive_int, metavar="D",
                   help="integer domain 0..D-1 (required without --data; --rounds: default 100)")
    p.add_argument("--dist", default=None,
                   help="true-value distribution: zipf:S | uniform | normal:MU,SIGMA | laplace:MU,B "
                        "(default zipf:1.1; Zipf ranks items in index order)")
    p.add_argument("--set-size-dist", default=None, metavar="SPEC",
                   help="--protocol (LDPMiner family): per-user set sizes geometric:MEAN (on "
                        "1, 2, ...; l defaults to their 90th percentile) | fixed:L (default: "
                        "fixed:--set-size)")
    p.add_argument("--repeat", type=_positive_int, default=1, metavar="R",
                   help="rounds on fresh data (the JSON reports their mean); --protocol "
                        "(LDPMiner family): runs on fresh noise and data or resample")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="aggregator-side seed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--post", type=_methods, default=[], metavar="M1,M2",
                   help="post-processing methods (ldpfleet.core.post.METHODS) to score as well")
    p.add_argument("--fast", action="store_true",
                   help="grr/oue: draw aggregate counts from their exact distribution")
    p.add_argument("--param", type=_param, action="append", default=[], metavar="k=v",
                   help="mechanism parameter (e.g. g=8, kp=1024, k=256, m=1024, l=4)")
    p.add_argument("--set-size", type=_positive_int, default=None, metavar="L",
                   help="items per user for set-valued mechanisms (sh) and LDPMiner protocols "
                        "(default 1); with --data or --set-size-dist: the padded set length l")
    add_protocol_arguments(p, int_type=_positive_int, who="users")
    rec = p.add_argument_group(
        "recurring collection (--rounds; eval.longitudinal_sim)",
        "Devices report every round with a memoised mechanism (spec §3.2): each enrols once\n"
        "and keeps its permanent responses; each round its value is redrawn with probability\n"
        "--change-rate. Prints every round's MSE (frequencies as fractions, over the domain)\n"
        "beside the analytic variance, per protocol. Defaults: --users 10000, --domain 100,\n"
        "--epsilon 2, --eps1 1, --dist zipf:1.1, --change-rate 0.1, --protocol all, e.g.\n"
        "    ldpfleet simulate --rounds 30 --change-rate 0.1 [--protocol auto]")
    rec.add_argument("--rounds", type=_positive_int, metavar="N",
                     help="simulate N rounds of a recurring campaign")
    rec.add_argument("--change-rate", type=float, default=0.1, metavar="P",
                     help="each device's chance per round of drawing a new value (default 0.1)")
    rec.add_argument("--eps1", type=_epsilon, metavar="E1",
                     help="one report's eps, below --epsilon (default --epsilon / 2)")
    rec.add_argument("--lifetime-budget", type=float, default=None, metavar="B",
                     help="--protocol auto chooses among the protocols whose lifetime eps fits "
                          "B (default 40, the board default)")
    p.set_defaults(func=run)
    p.epilog = "output keys:\n" + __doc__[__doc__.index("Prints one JSON"):]
    return p


PROTOCOLS = ("ldpminer-rappor", "ldpminer-sh", "ldpminer-sh-opt", "sampling-rappor",
             "sampling-sh", "svim", "psfo", "auto",
             "ldplcm", "cms", "hcms", "flh", "pem")


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


def _population_flags(args):
    """The error message for --data / --users / --domain / --dist that do not fit, or None."""
    if args.data is None:
        for flag, value in (("--users", args.users), ("--domain", args.domain)):
            if value is None:
                return "%s N is required without --data" % flag
        return None
    for flag, value in (("--domain", args.domain), ("--dist", args.dist),
                        ("--set-size-dist", args.set_size_dist)):
        if value is not None:
            return "%s does not go with --data (the file gives the items and the domain)" % flag
    return None


def run_pem(args):
    """`--protocol pem`: PEM over strings (eval.pem_sim): synthetic Zipf over random strings,
    or --data FILE's string items (one per device)."""
    from ..core.errors import DataFileError, LdpError
    from ..core.protocols import pem
    from ..eval import pem_sim
    for flag, bad in (("--post", bool(args.post)), ("--fast", args.fast),
                      ("--set-size-dist", args.set_size_dist is not None)):
        if bad:
            return _fail("%s does not go with --protocol pem" % flag)
    params = dict(args.param)
    try:
        words = params.pop("words", 1000)
        length = params.pop("length", 10)
        for name, value in (("words", words), ("length", length)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**6:
                return _fail("--param %s must be an integer in 1..1000000, got %r" % (name, value))
        max_len = params.pop("max_len", length)

        def make_plan(n):
            """`PemPlan.for_fleet` unless --param step/first ask for the paper's schedule."""
            if "step" in params or "first" in params:
                return pem.PemPlan(args.epsilon, max_len=max_len, top=args.top or 10, **params)
            return pem.PemPlan.for_fleet(n, args.epsilon, max_len, top=args.top or 10, **params)
        if args.users is None and args.data is None:
            return _fail("--users N is required without --data")
        plan = make_plan(args.users or 1)
        if args.data is not None:
            if args.domain is not None or args.dist is not None:
                return _fail("--domain, --dist do not go with --protocol pem --data")
            import numpy as np
            from ..eval import datafile
            data = datafile.load_item_csv(args.data)
            users = data.single_values().astype(np.int32)
            if args.users is not None:  # resample the file's devices with replacement
                users = users[np.random.default_rng(args.seed).integers(0, users.size,
                                                                        args.users)]
            if args.users is None:
                plan = make_plan(users.size)
            result = pem_sim.simulate(plan, [str(x) for x in data.labels], users,
                                      seed=args.seed + 1)
            result["data"] = args.data
        else:
            dist = args.dist or "zipf:1.1"
            if not dist.startswith("zipf:"):
                return _fail("--protocol pem draws strings from zipf:S only")
            result = pem_sim.simulate_zipf(plan, args.users, words=words, length=length,
                                           s=float(dist[5:]), seed=args.seed)
    except DataFileError:
        raise  # cli.exit_codes: one line naming the file and line
    except LdpError as exc:
        return _fail(exc)
    except TypeError as exc:  # an unknown --param name
        return _fail("--protocol pem: %s" % exc)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print("pem  eps=%g  users=%d  max_len=%d  levels=%s  keep=%d  validate=%g  seed=%d\n"
              "recall@%d %.2f  client %.2f s  decode %.2f s\ntop: %s" % (
                  result["epsilon"], result["users"], result["max_len"], result["level_bits"],
                  result["keep"], result["validate_share"], result["seed"], result["k"],
                  result["recall"], result["client_seconds"], result["decode_seconds"],
                  ", ".join(result["top_items"])))
    return 0


def run_protocol(args):
    from ..core.errors import DataFileError, LdpError
    if args.protocol == "pem":
        return run_pem(args)
    from ..eval.simulation import ProtocolConfig, simulate_protocol
    for flag, bad in (("--post", bool(args.post)),
                      ("--fast", args.fast), ("--param", bool(args.param))):
        if bad:
            return _fail("%s is for --mechanism runs, not --protocol" % flag)
    problem = _population_flags(args)
    if problem:
        return _fail(problem)
    cfg = ProtocolConfig(protocol=args.protocol, eps_milli=args.epsilon, users=args.users,
                         domain=args.domain, dist=args.dist or "zipf:1.1", seed=args.seed,
                         options=ProtocolOptions.from_args(args), data=args.data,
                         set_size_dist=args.set_size_dist, repeat=args.repeat)
    try:
        result = simulate_protocol(cfg)
    except DataFileError:
        raise  # cli.exit_codes: one line naming the file and line
    except LdpError as exc:  # bad settings; anything else is a bug (cli: exit 70)
        return _fail(exc)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(protocol_summary(result))
    return 0


def protocol_summary(r) -> str:
    head = "%s  eps=%g  users=%d  domain=%d  %s  seed=%d" % (
        r["protocol"], r["epsilon"], r["users"], r["domain"],
        "data=%s" % r["data"] if r.get("data") else "dist=%s" % r["dist"], r["seed"])
    if "re" in r:
        sizes = ("set size %d" % r["set_size"] if r["set_size"] is not None else
                 "set sizes mean %.3g, p90 %d" % (r["set_size_mean"], r["set_size_p90"]))
        return "\n".join([head, "%s  l=%d  k=%d  k_max=%s  l2=%s  repeat=%d" % (
            sizes, r["l"], r["k"], r["k_max"], r["l2"], r["repeat"]),
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
    from ..core.errors import DataFileError, LdpError
    from ..eval.simulation import SimulationConfig, simulate
    if args.rounds is not None:
        return run_rounds(args)
    if args.mechanism is None and args.protocol is None:
        return _fail("one of the arguments --mechanism --protocol is required, or --rounds N "
                     "for a recurring campaign (e.g. `ldpfleet simulate --rounds 30 "
                     "--change-rate 0.1`)")
    if args.protocol in LONGITUDINAL:
        return _fail("--protocol %s is a memoised protocol: give --rounds N" % args.protocol)
    for flag, value in (("--eps1", args.eps1), ("--lifetime-budget", args.lifetime_budget)):
        if value is not None:
            return _fail("%s goes with --rounds" % flag)
    if args.epsilon is None:
        return _fail("--epsilon E is required")
    if args.protocol:
        return run_protocol(args)
    given = [f for f in ProtocolOptions.from_args(args).given() if f != "set_size"]
    if args.set_size_dist is not None:
        given.insert(0, "set_size_dist")
    if given:
        return _fail("--%s is for --protocol runs" % given[0].replace("_", "-"))
    problem = _population_flags(args)
    if problem:
        return _fail(problem)
    cfg = SimulationConfig(mechanism=args.mechanism, eps_milli=args.epsilon, users=args.users,
                           domain=args.domain, dist=args.dist or "zipf:1.1", repeat=args.repeat,
                           seed=args.seed, post=args.post, fast=args.fast,
                           params=dict(args.param), set_size=args.set_size or 1, data=args.data)
    bar = _progress((cfg.users or 0) * cfg.repeat or None)
    try:
        result = simulate(cfg, progress=bar)
    except DataFileError:
        raise  # cli.exit_codes: one line naming the file and line
    except LdpError as exc:  # bad settings; anything else is a bug (cli: exit 70)
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
    lines = ["%s  eps=%g  users=%d  domain=%d  %s  repeat=%d  seed=%d%s"
             % (r["mechanism"], r["epsilon"], r["users"], r["domain"],
                "data=%s" % r["data"] if r.get("data") else "dist=%s" % r["dist"], r["repeat"],
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
