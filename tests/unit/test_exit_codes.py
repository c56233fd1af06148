"""The one exit-code table (`cli.exit_codes`): an LdpError is bad input (exit 2, one line naming
the field); the state, files and memory are the environment (exit 4); the broker 3 and 5; any
other exception is a bug: its traceback on stderr, then one line saying so, exit 70."""
import socket
import sqlite3
import sys
import types

import pytest

from ldpfleet import cli
from ldpfleet.core.errors import (ConfigError, DataFileError, LoginTakenOver, ReportFormatError,
                                  StateError, UsageError)

FAKE = "ldpfleet_test_fake_command"


@pytest.fixture
def boom(monkeypatch, tmp_path, capsys):
    """Run `ldpfleet boom`, a command that raises the given exception: (exit code, stderr)."""
    monkeypatch.chdir(tmp_path)  # no ./ldpfleet.toml
    monkeypatch.delenv("LDPFLEET_CONFIG", raising=False)

    def run(exc):
        module = types.ModuleType(FAKE)

        def fail(_args):
            raise exc

        module.register = lambda sub: sub.add_parser("boom").set_defaults(func=fail)
        monkeypatch.setitem(sys.modules, FAKE, module)
        monkeypatch.setattr(cli, "COMMAND_MODULES", cli.COMMAND_MODULES + [FAKE])
        capsys.readouterr()
        code = cli.main(["boom"])
        return code, capsys.readouterr().err
    return run


@pytest.mark.parametrize("exc", [ValueError("no such bucket"), KeyError("phase"),
                                 TypeError("unsupported operand"), OverflowError("too big"),
                                 ZeroDivisionError("division by zero"), RuntimeError("stuck")])
def test_an_untyped_exception_is_an_internal_error_with_its_traceback(boom, exc):
    code, err = boom(exc)
    assert code == cli.INTERNAL_EXIT == 70
    lines = err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):", err
    assert lines[-1] == "ldpfleet: internal error (a bug: please report it with the traceback above)"
    assert lines[-2].startswith(type(exc).__name__ + ":"), err
    assert "in fail" in err  # the frame that raised


@pytest.mark.parametrize("exc", [sqlite3.ProgrammingError("Cannot operate on a closed database."),
                                 sqlite3.InterfaceError("Error binding parameter 1")])
def test_the_database_drivers_bug_errors_are_internal_errors(boom, exc):
    """ProgrammingError / InterfaceError say our SQL or our use of a connection is wrong: a bug,
    although they are sqlite3.Error like the environment's failures (exit 4)."""
    code, err = boom(exc)
    lines = err.strip().splitlines()
    assert code == cli.INTERNAL_EXIT and lines[0] == "Traceback (most recent call last):", err
    assert lines[-1] == cli.INTERNAL_LINE and "sqlite3.%s" % type(exc).__name__ in lines[-2], err


@pytest.mark.parametrize("exc, line", [
    (ConfigError("top", "must be >= 1, got 0"), "ldpfleet: error: top: must be >= 1, got 0"),
    (UsageError("post_opt", "needs --post"), "ldpfleet: error: post_opt: needs --post"),
    (ReportFormatError("size", "21 bytes, expected 20"), "ldpfleet: error: size: 21 bytes, expected 20"),
    (DataFileError("row", "two columns", "a.csv", 3), "ldpfleet: data file: row: a.csv line 3: two columns"),
])
def test_a_typed_error_is_bad_input_naming_the_field(boom, exc, line):
    code, err = boom(exc)
    assert code == 2 and err == line + "\n", err


@pytest.mark.parametrize("exc, code, says", [
    (StateError("state", "cannot connect to PostgreSQL at postgresql://h/db"), 4,
     "state: cannot connect to PostgreSQL"),
    (sqlite3.DatabaseError("file is not a database"), 4, "state file: file is not a database"),
    (FileNotFoundError(2, "No such file or directory", "/nope/items.txt"), 4,
     "/nope/items.txt: No such file or directory"),
    (PermissionError(13, "Permission denied", "/root/s.db"), 4, "/root/s.db: Permission denied"),
    (MemoryError(), 4, "not enough memory"),
    (ConnectionRefusedError(111, "Connection refused"), 3, "ldpfleet: broker:"),
    (socket.gaierror(-2, "Name or service not known"), 3, "ldpfleet: broker:"),
    (TimeoutError("no CONNACK from mqtt://b:1883 within 10 s"), 3, "ldpfleet: broker: no CONNACK"),
    (LoginTakenOver("username", "taken over"), 5, "ldpfleet: broker login: username: taken over"),
])
def test_the_environment_and_the_broker(boom, exc, code, says):
    got, err = boom(exc)
    assert got == code and says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_the_table_maps_only_typed_errors_to_2():
    def code(exc):
        return next((c for kinds, c, _ in cli.exit_codes() if isinstance(exc, kinds)), None)
    assert code(ConfigError("x", "y")) == code(UsageError("x", "y")) == 2
    assert code(StateError("state", "y")) == 4
    assert code(ValueError("x")) is None and code(KeyError("x")) is None
