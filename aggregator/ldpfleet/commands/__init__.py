"""CLI subcommand families, and argument types they share."""
import argparse


def _int_in(text: str, lo: int, hi: int = None) -> int:
    """`text` as an integer in [lo, hi] (hi None: no upper bound), else ArgumentTypeError."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        bounds = "in %d..%d" % (lo, hi) if hi is not None else ">= %d" % lo
        raise argparse.ArgumentTypeError("an integer %s, got %r" % (bounds, text))
    return value


def tcp_port(text: str) -> int:
    """argparse type: a TCP port number, 1..65535."""
    return _int_in(text, 1, 65535)


def non_negative(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_in(text, 0)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_in(text, 1)


def duration(text: str) -> float:
    """argparse type: a finite duration >= 0 (in the option's unit)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("a finite number >= 0, got %r" % text)
    return value


def host_address(text: str) -> str:
    """argparse type: a host name or address (no spaces or control characters)."""
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise argparse.ArgumentTypeError("a host name or address, got %r" % text)
    return text


PASSWORD_ENV = "LDPFLEET_PASSWORD"


def add_password_args(p, what: str = "broker"):
    """--password (shows in `ps`: discouraged), --password-file PATH (first line) and the
    LDPFLEET_PASSWORD environment variable, in that order of precedence."""
    p.add_argument("--password", default=None,
                   help="%s password (visible to other users in `ps`: prefer --password-file or "
                        "the %s environment variable)" % (what, PASSWORD_ENV))
    p.add_argument("--password-file", default=None, metavar="PATH",
                   help="read the %s password from the first line of PATH" % what)


def resolve_password(args):
    """The password of `add_password_args`, or None; a warning on stderr for --password."""
    import os
    import sys
    from ..core.errors import ConfigError
    if getattr(args, "password", None) is not None and getattr(args, "password_file", None):
        raise ConfigError("password", "give --password or --password-file, not both")
    if getattr(args, "password", None) is not None:
        print("ldpfleet: warning: --password is visible in the process list; use --password-file "
              "or %s" % PASSWORD_ENV, file=sys.stderr)
        return args.password
    if getattr(args, "password_file", None):
        try:
            with open(args.password_file, encoding="utf-8") as f:
                line = f.readline().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError("password_file", "cannot read %s: %s"
                              % (args.password_file, exc.strerror)) from None
        if not line:
            raise ConfigError("password_file", "%s is empty" % args.password_file)
        return line
    return os.environ.get(PASSWORD_ENV) or None
