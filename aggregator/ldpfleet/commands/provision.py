"""`ldpfleet provision`: one complete bundle per board of a fleet, from broker-config's
credentials.csv (what `flash --bundle` then copies to a board)."""
import json
import os
import shlex
from pathlib import Path

from ..provision import boards
from .board_options import add_board_args, board_options, device_logins


def register(subparsers):
    pv = subparsers.add_parser(
        "provision", help="write one complete bundle per board of a fleet (credentials.csv)",
        description="For every device row of broker-config's credentials.csv, OUT/<device id>/ "
                    "gets what `flash` puts on that board: the client compiled for --march "
                    "(compiled once, hard-linked into every bundle), identity.json (0600: its "
                    "login and password from credentials.csv, its broker, the trusted keys, "
                    "Wi-Fi from --wifi-password-file), ledger.init and the broker's CA. Then "
                    "`ldpfleet flash --bundle OUT/<id> --port /dev/ttyUSB0` puts one on a board. "
                    "Secrets only come from files.")
    pv.add_argument("--credentials", required=True, metavar="CSV",
                    help="broker-config's credentials.csv (the rows of role device)")
    pv.add_argument("--out", required=True, metavar="DIR",
                    help="output directory (made 0700: the bundles hold passwords)")
    add_board_args(pv)
    pv.add_argument("--json", action="store_true")
    pv.set_defaults(func=run_provision_command)


def run_provision_command(args):
    options = board_options(args)
    logins = device_logins(args.credentials)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    lib_dir = out / (".lib-" + options.march)
    library = (lib_dir, boards.compile_library(lib_dir, options.march))
    for device_id, login in logins.items():
        boards.stage_board(out / device_id, device_id, options,
                           None if options.client_ca else login, library=library)
    first = next(iter(logins))
    summary = {"bundles": len(logins), "out": str(out), "march": options.march,
               "broker": {"host": options.broker_host,
                          "port": options.broker_port or (8883 if options.broker_ca else 1883),
                          "tls": bool(options.broker_ca),
                          "login": "certificate" if options.client_ca else "password"},
               "flash": "ldpfleet flash --bundle %s --port /dev/ttyUSB0"
                        % shlex.quote(str(out / first))}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print("wrote %d board bundles into %s (client compiled for %s; broker %s:%d%s, login by "
              "%s); each holds its board's password: keep the directory private" % (
                  len(logins), out, options.march, options.broker_host, summary["broker"]["port"],
                  " over TLS" if options.broker_ca else "", summary["broker"]["login"]))
        print("flash a board: %s" % summary["flash"])
    return 0
