"""Upgrades (docs/upgrade.md): a state made by the previous schema (tests/fixtures/state_v5,
made by ldpfleet 0.1.0) is migrated at start and keeps its campaigns, counters, estimates and
dedupe keys, on SQLite and on PostgreSQL; a state whose schema is newer than the code is
refused with a clear message and exit 2, and left as it was; `ldpfleet --version` names the
package, schema and protocol versions."""
import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ldpfleet import __version__
from ldpfleet.core import protocol
from ldpfleet.service.state.sql import SCHEMA_VERSION

from support.service import cli_json, fold_batch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "state_v5"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def sqlite_state(tmp_path) -> str:
    path = tmp_path / "state.db"
    with gzip.open(FIXTURE / "state.db.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return "sqlite:///%s" % path


def postgres_state(url: str) -> str:
    if not shutil.which("psql"):
        pytest.skip("no psql to restore the PostgreSQL fixture")
    dump = gzip.open(FIXTURE / "state.pg.sql.gz", "rt").read()
    proc = subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "--dbname", url], input=dump,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return url


def raw_schema(state: str) -> int:
    from ldpfleet.service.state import sql as store_sql
    conn = store_sql.connect(state, 10.0)
    try:
        return int(conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0])
    finally:
        conn.close()


def answers(capsys, state: str) -> dict:
    """What the operator's commands answer for every campaign of the fixture (the fields
    tools/make_state_fixture.py recorded)."""
    out = {}
    for name in EXPECTED["campaigns"]:
        status = cli_json(capsys, "campaign", "status", name, "--state", state)
        rows = cli_json(capsys, "estimate", name, "--state", state)["items"]
        out[name] = {
            "campaign_id": status["campaign_id"], "state": status["state"],
            "phase": status["phase"], "received": status["received"],
            "accepted": status["accepted"], "rejected": status["rejected"],
            "phase_reports": [ph["reports"] for ph in status["phases"]],
            "dedupe_purged_keys": (status["dedupe_purged"] or {}).get("keys"),
            "estimate": [[r["item"], r["estimate"]] for r in rows]}
    return out


def check_upgraded(capsys, state: str):
    assert EXPECTED["schema"] == 5 and raw_schema(state) == 5  # the fixture is the old schema
    listed = cli_json(capsys, "campaign", "list", "--state", state)  # any command migrates
    assert sorted(r["campaign"] for r in listed) == sorted(EXPECTED["campaigns"])
    assert raw_schema(state) == SCHEMA_VERSION
    assert answers(capsys, state) == EXPECTED["campaigns"]
    # the dedupe keys survived: every report accepted before the upgrade, sent again, is a
    # duplicate, never counted twice
    resend = [(topic, bytes.fromhex(payload)) for topic, payload in EXPECTED["resend"]]
    counts = fold_batch(state, resend, worker="after-upgrade")
    assert counts.get(("cpu", "duplicate")) == 3 and counts.get(("hh", "duplicate")) == 2, counts
    assert not any(reason == "accepted" for _, reason in counts), counts
    after = answers(capsys, state)
    assert after["cpu"]["estimate"] == EXPECTED["campaigns"]["cpu"]["estimate"]
    assert after["cpu"]["rejected"]["duplicate"] == EXPECTED["campaigns"]["cpu"]["rejected"]["duplicate"] + 3


def test_a_schema5_sqlite_state_is_migrated_and_answers_as_before(tmp_path, capsys):
    check_upgraded(capsys, sqlite_state(tmp_path))


def test_a_schema5_postgres_state_is_migrated_and_answers_as_before(postgres_url, capsys):
    check_upgraded(capsys, postgres_state(postgres_url))


def set_schema(state: str, version: int):
    from ldpfleet.service.state import sql as store_sql
    conn = store_sql.connect(state, 10.0)
    try:
        conn.execute("UPDATE meta SET value=? WHERE key='schema'", (str(version),))
        if conn.kind == "sqlite":
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_a_newer_schema_is_refused_clearly_and_left_unchanged(tmp_path, capsys):
    state = sqlite_state(tmp_path)
    cli_json(capsys, "campaign", "list", "--state", state)  # now the current schema
    newer = SCHEMA_VERSION + 1
    set_schema(state, newer)
    path = state[len("sqlite:///"):]
    before = Path(path).read_bytes()
    for args in (["campaign", "status", "cpu", "--state", state],
                 ["estimate", "cpu", "--state", state],
                 ["serve", "--state", state, "--broker", "mqtt://127.0.0.1:9", "--no-broker-check"]):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        message = proc.stderr.strip().splitlines()[-1]
        assert ("has schema %d, newer than this ldpfleet %s reads (schema %d)"
                % (newer, __version__, SCHEMA_VERSION)) in message, message
        assert "Nothing was changed" in message and "docs/upgrade.md" in message, message
        assert "Traceback" not in proc.stderr
    assert Path(path).read_bytes() == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == str(newer)


def test_a_newer_postgres_schema_is_refused(postgres_url):
    state = postgres_state(postgres_url)
    run_cli("campaign", "list", "--state", state)
    set_schema(state, SCHEMA_VERSION + 1)
    proc = run_cli("campaign", "status", "cpu", "--state", state)
    assert proc.returncode == 2 and "newer than this ldpfleet" in proc.stderr, proc.stderr
    assert raw_schema(state) == SCHEMA_VERSION + 1


def test_version_names_the_package_schema_and_protocol():
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ldpfleet %s (state schema %d, protocol v%d)" % (
        __version__, SCHEMA_VERSION, protocol.PROTOCOL_VERSION)
    from importlib.metadata import version
    assert __version__ == version("ldpfleet") != "0+unknown"
