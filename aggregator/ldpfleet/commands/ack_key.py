"""`ldpfleet ack-key init|login|device`: the keys of MAC'd acknowledgements (protocol_spec/v2 §6,
ackkeys.py). The root key stays on the aggregator (`serve --ack-key`); a device gets only its
own key, a load generator only its login's."""
import os

from ..core.errors import ConfigError


def register(subparsers):
    p = subparsers.add_parser(
        "ack-key", help="the fleet's ack root key and the per-device / per-login keys from it",
        description="Acknowledgements (spec §6) carry a 16-byte HMAC tag under a per-device key "
                    "derived from the fleet's ack root key, which only the aggregator holds "
                    "(`serve --ack-key FILE`). A device holds only its own key (identity.json "
                    "`ack_key`: `flash --ack-key` writes it), so a key read out of one board "
                    "forges acks for that board alone.")
    sub = p.add_subparsers(dest="ack_key_command", metavar="ACTION")
    init_help = ("write a fresh ack root key: PATH (32 random bytes as hex, mode 0600; never "
                 "overwrites a file)")
    init = sub.add_parser("init", help=init_help, description=init_help + ".")
    init.add_argument("path")
    init.set_defaults(func=run_init)
    login_help = ("write the key of a load-generator login L: it checks the acks of its "
                  "simulated devices L/<id> and nothing else (`fleet --ack-login-key`)")
    login = sub.add_parser("login", help=login_help, description=login_help + ".")
    login.add_argument("--root", required=True, metavar="FILE", help="the ack root key")
    login.add_argument("--login", required=True, help="the load generator's broker login")
    login.add_argument("path", help="output file (mode 0600)")
    login.set_defaults(func=run_login)
    device_help = ("print a device's ack_key (64 hex digits) for its identity.json (e.g. the C "
                   "client's; `flash --ack-key` does it for MicroPython boards)")
    device = sub.add_parser("device", help=device_help, description=device_help + ".")
    device.add_argument("--root", required=True, metavar="FILE", help="the ack root key")
    device.add_argument("--device-id", required=True)
    device.set_defaults(func=run_device)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _new_file(path, key=None):
    from ..core.ackkeys import write_key_file
    try:
        return write_key_file(path, key)
    except FileExistsError:
        raise ConfigError("path", "%s exists; not overwriting a key" % path) from None
    except OSError as exc:
        raise ConfigError("path", "cannot write %s: %s" % (path, exc.strerror)) from None


def run_init(args):
    _new_file(args.path)
    print("wrote the ack root key %s (mode 0600: keep it with the aggregator; `serve --ack-key "
          "%s`, `flash --ack-key %s` for each board)" % (args.path, args.path, args.path))
    return 0


def _name(value, field):
    from ..core.config import NAME_RE
    if not NAME_RE.match(value):
        raise ConfigError(field, "%r must match [A-Za-z0-9_-]{1,64}" % value)
    return value


def run_login(args):
    from ..core.ackkeys import login_key, read_key_file
    root = read_key_file(args.root, "root")
    _new_file(args.path, login_key(root, _name(args.login, "login")))
    print("wrote the ack key of login %s to %s (`fleet --username %s --ack-login-key %s`)"
          % (args.login, os.path.abspath(args.path), args.login, args.path))
    return 0


def run_device(args):
    from ..core.ackkeys import device_key, read_key_file
    root = read_key_file(args.root, "root")
    print(device_key(root, _name(args.device_id, "device_id")).hex())
    return 0
