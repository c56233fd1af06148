"""`ldpfleet demo`: an embedded broker, the aggregator, a campaign and a simulated fleet on this
machine (ldpfleet.loadgen.demo)."""
import json
import sys

from .fleet import progress_wanted


def register(subparsers):
    d = subparsers.add_parser(
        "demo", help="run broker, aggregator, a campaign and a simulated fleet on this machine",
        description="Start an embedded Mosquitto and the aggregator, create a campaign with a "
                    "fresh signing key, simulate a fleet (plus real MicroPython devices when "
                    "`micropython` is installed), then show true vs estimated heavy hitters and "
                    "write a PNG plot.")
    d.add_argument("--devices", type=int, default=20000)
    d.add_argument("--micropython", type=int, default=None,
                   help="real MicroPython devices (default 3 when `micropython` is installed)")
    d.add_argument("--mechanism", default="olh")
    d.add_argument("--epsilon", type=float, default=2.0)
    d.add_argument("--domain", type=int, default=64, help="domain size d")
    d.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the true items")
    d.add_argument("--top", type=int, default=10, help="heavy hitters to show")
    d.add_argument("--seed", type=int, default=None)
    d.add_argument("--broker", default=None, help="use this broker instead of an embedded one")
    d.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the aggregator to accept every report")
    d.add_argument("--out", default=None,
                   help="directory for the plot, the state, the logs and the campaign's signing "
                        "key, kept (default: a temporary directory, removed when the demo ends, "
                        "also on Ctrl-C, unless --keep)")
    d.add_argument("--keep", action="store_true",
                   help="keep the temporary directory (its path is printed)")
    d.add_argument("--json", action="store_true")
    d.add_argument("--dashboard", nargs="?", const="127.0.0.1:0", default=None,
                   metavar="HOST:PORT",
                   help="also serve the HTTP API and the live dashboard (default 127.0.0.1 on a "
                        "free port; PORT 0: a free one), print its URL with a fresh read token, "
                        "and keep broker, aggregator and dashboard up until Ctrl-C")
    d.set_defaults(func=run_demo_command)


def run_demo_command(args):
    def print_json(result):
        if args.json:  # before --dashboard holds the services up
            json.dump(result, sys.stdout)
            sys.stdout.write("\n")
            sys.stdout.flush()
    try:
        result = _run_demo(args, print_json)
    except KeyboardInterrupt:
        print("ldpfleet: demo interrupted: broker and aggregator stopped%s" % (
            "" if args.out or args.keep else ", its temporary directory removed"),
            file=sys.stderr)
        return 130
    return 0 if result["lost"] == 0 else 1


def _run_demo(args, print_json):
    from ..loadgen import DemoOptions, run_demo
    return run_demo(DemoOptions(
        devices=args.devices, micropython=args.micropython, mechanism=args.mechanism,
        epsilon=args.epsilon, domain=args.domain, zipf=args.zipf, top=args.top, seed=args.seed,
        broker_url=args.broker, timeout=args.timeout, out_dir=args.out,
        progress=progress_wanted(args), dashboard=args.dashboard, keep=args.keep),
        log=None if args.json else print, on_result=print_json)
