import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The exact-privacy enumerations of tests/unit are reused by integration tests (the re-signing
# test enumerates the same channels), whichever files a run collects.
sys.path.insert(1, os.path.join(HERE, "unit"))

from support.brokers import PrivateMosquitto  # noqa: E402

# The folder a test lives in says what it needs (README, "Tests"): tests/unit runs in process
# only, tests/statistical too but takes long (large simulated fleets), tests/integration starts
# brokers, interpreters, databases, browsers or compilers.
FOLDER_MARKS = ("unit", "statistical", "integration")


def pytest_collection_modifyitems(config, items):
    """Mark every test by its folder under tests/ (`-m unit`, `-m statistical`, `-m integration`)."""
    for item in items:
        rel = os.path.relpath(str(item.path), HERE).split(os.sep)
        if rel[0] in FOLDER_MARKS:
            item.add_marker(getattr(pytest.mark, rel[0]))


@pytest.fixture
def mosquitto():
    """A private broker on a free loopback port for one test."""
    with PrivateMosquitto() as broker:
        yield broker


@pytest.fixture
def postgres_url(tmp_path, monkeypatch):
    """A throw-away database on the machine's PostgreSQL (support/postgres.py), dropped after.
    Its dedupe root key file (a PostgreSQL state names one: dedupe.py) is `pg.dedupe-key` in
    the test's directory, through LDPFLEET_DEDUPE_KEY as an operator would set it (serve
    subprocesses inherit it)."""
    from support.postgres import ThrowawayDatabase, server_or_skip
    server_or_skip()
    monkeypatch.setenv("LDPFLEET_DEDUPE_KEY", str(tmp_path / "pg.dedupe-key"))
    with ThrowawayDatabase() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request, tmp_path):
    """The state of one test on each backend: a SQLite file, then a throw-away PostgreSQL
    database."""
    if request.param == "sqlite":
        yield "sqlite:///" + str(tmp_path / "state.db")
    else:
        yield request.getfixturevalue("postgres_url")
