"""The machine's PostgreSQL for the tests: started if it is stopped, one throw-away database per
use (created, handed out as a URL, dropped afterwards).

The server is reached as `LDPFLEET_TEST_POSTGRES_ADMIN` (default
postgresql://postgres@127.0.0.1:5432/postgres: Debian's cluster with trust auth on loopback).
Without a reachable server the PostgreSQL tests are skipped with the reason, unless
`LDPFLEET_TEST_POSTGRES=require` (what `.ci/run` sets): then they fail."""
import glob
import os
import shutil
import subprocess
import time
import uuid

import pytest

ADMIN_URL = os.environ.get("LDPFLEET_TEST_POSTGRES_ADMIN",
                           "postgresql://postgres@127.0.0.1:5432/postgres")


def _connect(url: str):
    import psycopg
    return psycopg.connect(url, autocommit=True, connect_timeout=3)


def _start_cluster() -> str:
    """Start Debian's stopped cluster(s) with pg_ctlcluster (the env's documented command)."""
    if not shutil.which("pg_ctlcluster"):
        return "no pg_ctlcluster on this machine"
    said = []
    for conf in sorted(glob.glob("/etc/postgresql/*/*/postgresql.conf")):
        version, cluster = conf.split("/")[3:5]
        out = subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster,
                              "start"], capture_output=True, text=True, timeout=60)
        said.append("%s/%s: %s" % (version, cluster, (out.stderr or out.stdout).strip() or "started"))
    return "; ".join(said) or "no cluster under /etc/postgresql"


def server_or_skip():
    """Make sure the server answers (start it once if not); skip or fail with the reason."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        reason = "psycopg is not installed (pip install 'ldpfleet[postgres]')"
    else:
        reason = None
        for attempt in range(2):
            try:
                _connect(ADMIN_URL).close()
                return
            except Exception as exc:  # noqa: BLE001 (any failure to reach the server)
                reason = "PostgreSQL at %s: %s" % (ADMIN_URL, str(exc).strip().splitlines()[0])
            if attempt == 0:
                reason += " (start: %s)" % _start_cluster()
                for _ in range(40):
                    try:
                        _connect(ADMIN_URL).close()
                        return
                    except Exception:  # noqa: BLE001
                        time.sleep(0.25)
    if os.environ.get("LDPFLEET_TEST_POSTGRES") == "require":
        pytest.fail("PostgreSQL is required here and unreachable: %s" % reason)
    pytest.skip("no PostgreSQL: %s" % reason)


class ThrowawayDatabase:
    """`with ThrowawayDatabase() as url:` a new empty database, dropped on exit (WITH FORCE:
    connections a killed serve left behind do not block the drop)."""

    def __init__(self):
        self.name = "ldpfleet_test_%d_%s" % (os.getpid(), uuid.uuid4().hex[:10])

    def __enter__(self) -> str:
        with _connect(ADMIN_URL) as conn:
            conn.execute('CREATE DATABASE "%s"' % self.name)
        base = ADMIN_URL.rsplit("/", 1)[0]
        return "%s/%s" % (base, self.name)

    def __exit__(self, *exc):
        with _connect(ADMIN_URL) as conn:
            conn.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % self.name)
