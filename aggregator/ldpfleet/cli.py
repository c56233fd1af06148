"""`ldpfleet` command line: each subcommand family lives in its own module with
`register(subparsers)`; a module that fails to import is reported, not hidden."""
import argparse
import importlib
import sys

COMMAND_MODULES = [
    "ldpfleet.commands.simulate",   # simulate
    "ldpfleet.commands.plan",       # plan
    "ldpfleet.commands.service",    # serve, campaign, estimate
    "ldpfleet.commands.fleet",      # fleet, demo, broker-config
    "ldpfleet.commands.flash",      # flash
]


def build_parser():
    parser = argparse.ArgumentParser(prog="ldpfleet", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    broken = []
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # family not built yet
            broken.append((name, exc))
            continue
        module.register(sub)
    return parser, broken


def main(argv=None):
    parser, broken = build_parser()
    args = parser.parse_args(argv)
    for name, exc in broken:
        print("ldpfleet: warning: %s failed to load: %s" % (name, exc), file=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
