"""Operator-facing details of serve: a metrics port in use is named in one line (exit 2),
metrics listen on loopback unless told otherwise, and a broker password can come from a file or
the environment instead of the process list."""
import argparse
import socket
import subprocess
import sys

import pytest

from ldpfleet.commands.common import PASSWORD_ENV, add_password_args, resolve_password
from ldpfleet.core.errors import ConfigError


def test_metrics_port_in_use_is_named(mosquitto, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "serve", "--broker", mosquitto.url,
                               "--state", str(tmp_path / "s.db"), "--metrics-port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "127.0.0.1:%d" % port in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def parse(argv):
    p = argparse.ArgumentParser()
    add_password_args(p)
    return p.parse_args(argv)


def test_password_from_file_env_or_flag(tmp_path, monkeypatch, capsys):
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    assert resolve_password(parse([])) is None
    assert resolve_password(parse(["--password-file", str(secret)])) == "s3cret"
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert resolve_password(parse([])) == "from-env"
    assert resolve_password(parse(["--password-file", str(secret)])) == "s3cret"  # file wins
    assert resolve_password(parse(["--password", "flag"])) == "flag"
    assert "visible in the process list" in capsys.readouterr().err
    with pytest.raises(ConfigError) as info:
        resolve_password(parse(["--password", "a", "--password-file", str(secret)]))
    assert info.value.field == "password"
    with pytest.raises(ConfigError) as info:
        resolve_password(parse(["--password-file", str(tmp_path / "missing")]))
    assert info.value.field == "password_file"


def test_password_file_reaches_the_broker_login(tmp_path):
    """`campaign close --broker ... --password-file` with an unreadable file: one line, exit 2."""
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "campaign", "close", "x",
                           "--state", str(tmp_path / "none.db"), "--broker", "mqtt://127.0.0.1:1883",
                           "--username", "agg", "--password-file", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "password_file" in proc.stderr, proc.stderr
