"""`ldpfleet` command line: each subcommand family lives in its own module with
`register(subparsers)`; a module that fails to import is reported, not hidden."""
import argparse
import importlib
import sys

from . import configfile

COMMAND_MODULES = [
    "ldpfleet.commands.simulate",       # simulate
    "ldpfleet.commands.plan",           # plan
    "ldpfleet.commands.serve",          # serve
    "ldpfleet.commands.broker_check",   # broker-check
    "ldpfleet.commands.campaign",       # campaign (keygen, rotate-keys: campaign_keys)
    "ldpfleet.commands.estimate",       # estimate
    "ldpfleet.commands.fleet",          # fleet
    "ldpfleet.commands.demo",           # demo
    "ldpfleet.commands.broker_config",  # broker-config
    "ldpfleet.commands.flash",          # flash
    "ldpfleet.commands.provision",      # provision
    "ldpfleet.commands.device_cert",    # device-cert
    "ldpfleet.commands.devices",        # devices silent
    "ldpfleet.commands.config",         # config check
    "ldpfleet.commands.ack_key",        # ack-key
]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ldpfleet",
        description="Private telemetry for device fleets: devices report under local "
                    "differential privacy over MQTT; this command runs the aggregator "
                    "(serve), manages campaigns, estimates, simulates, plans and flashes "
                    "devices. `ldpfleet COMMAND --help` for each command.")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="options from this TOML file (else $LDPFLEET_CONFIG, else "
                             "./ldpfleet.toml if it exists); precedence: flag > LDPFLEET_<NAME> "
                             "environment variable > file > default. `ldpfleet config check`")
    parser.add_argument("--version", action="version", version=version_line(),
                        help="the installed version, the state schema and the wire protocol "
                             "it speaks, then exit")
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
    configfile.install(parser)
    return parser, broken


def version_line() -> str:
    """`ldpfleet --version`: the package version (its metadata), the state schema version this
    code writes (an older state is migrated at start, a newer one refused: docs/upgrade.md)
    and the protocol version of its messages."""
    from . import __version__
    from .core import protocol
    from .service.state.sql import SCHEMA_VERSION
    return "ldpfleet %s (state schema %d, protocol v%d)" % (__version__, SCHEMA_VERSION,
                                                           protocol.PROTOCOL_VERSION)


def main(argv=None):
    parser, broken = build_parser()
    try:
        configfile.apply(parser, sys.argv[1:] if argv is None else argv)
    except Exception as exc:  # noqa: BLE001 - the one table below
        return _failed(exc)
    args = parser.parse_args(argv)
    for name, exc in broken:
        print("ldpfleet: warning: %s failed to load: %s" % (name, exc), file=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except BrokenPipeError as exc:
        if not _stdout_gone():
            return _failed(exc)
        return _reader_gone()
    except Exception as exc:  # noqa: BLE001 - mapped by the one table below, else a bug (exit 70)
        return _failed(exc)


SIGPIPE_EXIT = 141
"""128 + SIGPIPE: what a shell reports for a command whose output's reader went away."""


def _stdout_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone (`... | head`): a broken
    pipe there is the reader's doing, not the broker's (ConnectionError's label)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _reader_gone() -> int:
    """Exit quietly as `yes | head` does: the command's own `finally` clauses have run (the
    demo stopped its broker and serve); stdout now points to /dev/null so the interpreter's
    last flush does not fail again."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return SIGPIPE_EXIT


INTERNAL_EXIT = 70
"""EX_SOFTWARE (sysexits.h): an exception the table does not name, i.e. a bug."""

INTERNAL_LINE = "ldpfleet: internal error (a bug: please report it with the traceback above)"


def _failed(exc):
    """One line and the table's exit code for an expected failure; for anything else the full
    traceback, then INTERNAL_LINE, and INTERNAL_EXIT."""
    for kinds, code, label in exit_codes():
        if isinstance(exc, kinds):
            if code is None:
                break  # a bug the table names so that a broader row does not take it
            print("ldpfleet: %s: %s" % (label, _describe(exc)), file=sys.stderr)
            return code
    import traceback
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(INTERNAL_LINE, file=sys.stderr)
    return INTERNAL_EXIT


def exit_codes():
    """THE table of expected failures -> (exit code, label of the one line printed); first
    match wins:

    5  another connection took `serve`'s broker login over (a service manager should not
       restart it: the two would take it from each other again);
    3  the broker is unreachable (its name does not resolve, it does not answer in time),
       refuses us, or cannot be started;
    4  the environment: the state database is unusable (StateError: PostgreSQL unreachable;
       the database drivers' errors), a file cannot be read or written (OSError, named), too
       little memory;
    2  bad input: an LdpError naming the field (a DataFileError names the file and line).

    A row with code None is a bug although a broader row would match it (the database drivers'
    ProgrammingError and InterfaceError). Anything else (a bare ValueError, KeyError, TypeError ...) is a bug: `_failed` prints its
    traceback and exits INTERNAL_EXIT."""
    import socket
    import sqlite3
    from .broker.embedded import BrokerUnavailable
    from .core.errors import DataFileError, LdpError, LoginTakenOver, StateError
    from .service.state.sql import database_bug_errors, database_errors
    return [
        (database_bug_errors(), None, "internal"),  # our SQL or connection use: a bug
        ((LoginTakenOver,), 5, "broker login"),
        ((ConnectionError, BrokerUnavailable, TimeoutError, socket.gaierror), 3, "broker"),
        ((StateError, sqlite3.Error) + database_errors(), 4, "error"),
        ((DataFileError,), 2, "data file"),
        ((LdpError,), 2, "error"),
        ((OSError, MemoryError), 4, "error"),
    ]


def _describe(exc) -> str:
    if isinstance(exc, MemoryError):
        return "not enough memory for this run (smaller --users/--domain?)"
    import sqlite3
    from .service.state.sql import database_errors
    if isinstance(exc, sqlite3.Error):
        return "state file: %s" % exc
    if isinstance(exc, database_errors()):
        return "state database: %s" % str(exc).strip()
    if isinstance(exc, OSError) and exc.filename is not None:
        return "%s: %s" % (exc.filename, exc.strerror or exc)
    return str(exc) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
