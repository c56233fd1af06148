"""What the commands share: argparse types, the broker options (`--broker`, `--username`,
the password options, TLS), the state options (`--state`, `--dedupe-key`) and what they
resolve to (broker settings, the opened state), and item lists given as text or a file."""
import argparse

from ..core.errors import ConfigError


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




def period(text: str) -> int:
    """argparse type: a recurring campaign's round period in whole seconds, `90s`, `30m`,
    `12h`, `1d`, `1w` or a plain number of seconds (core.schedule.parse_period's rule)."""
    from ..core import schedule
    from ..core.errors import ConfigError
    try:
        return schedule.parse_period(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message if hasattr(exc, "message") else str(exc))


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


def broker_args(p, required=True):
    """--broker URL, --username, the password options, --tls, --cafile."""
    p.add_argument("--broker", required=required, help="mqtt://HOST:PORT or mqtts://HOST:PORT")
    p.add_argument("--username", default=None, help="broker login")
    add_password_args(p)
    p.add_argument("--tls", action="store_true", help="TLS (implied by mqtts:// or --cafile)")
    p.add_argument("--cafile", default=None, help="CA certificate(s) to verify the broker")


def state_arg(p):
    """--state (SQLite file or PostgreSQL URL) and --dedupe-key."""
    p.add_argument("--state", required=True,
                   help="state: a SQLite file (sqlite:///relative/path, sqlite:////absolute/path or a "
                        "path) or a PostgreSQL database (postgresql://USER[:PASSWORD]@HOST[:PORT]/DB; "
                        "the password better in PGPASSWORD or ~/.pgpass)")
    p.add_argument("--dedupe-key", default=None, metavar="FILE",
                   help="the root key of the dedupe keys (64 hex digits), kept out of the state "
                        "so a copy of the state links no device across campaigns. Default for a "
                        "SQLite state: STATEFILE.dedupe-key, made on first use; a PostgreSQL "
                        "state needs it, the same file for every worker and command (made on "
                        "first use if missing; or `openssl rand -hex 32 > FILE`)")


def broker_settings(args):
    """The BrokerSettings of the broker options, None without --broker."""
    from ..mqtt.client import BrokerSettings
    if getattr(args, "broker", None) is None:
        return None
    return BrokerSettings.from_url(args.broker, username=args.username,
                                   password=resolve_password(args),
                                   tls=args.tls, cafile=args.cafile)


def command_broker(args, store):
    """The broker settings of a campaign command, refused when they log in as `serve` does: a
    broker that binds client ids to logins (broker-config's) would hand serve's session, and
    the reports queued in it, to this command's connection."""
    broker = broker_settings(args)
    serve_login = store.meta("serve.username")
    if broker is not None and broker.username and broker.username == serve_login:
        raise ConfigError("username", "%s is the login `serve` uses for this state; run campaign "
                          "commands with another login (broker-config's admin login, e.g. %s-admin)"
                          " so they never take over serve's session" % (broker.username, broker.username))
    return broker


def open_store(args, create: bool = True):
    """The state of a command (`--state`, `--dedupe-key`)."""
    from ..service.state.store import Store
    return Store(args.state, create=create, dedupe_key=getattr(args, "dedupe_key", None))


def split_commas(text):
    """The non-empty comma-separated parts of `text`."""
    return [t.strip() for t in str(text).split(",") if t.strip()]


def item_list(text):
    """Comma-separated items, or a file with one per line (as strings; None stays None)."""
    import os
    if text is None:
        return None
    if os.path.isfile(text):
        with open(text, encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f if line.strip()]
    return split_commas(text)
