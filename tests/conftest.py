import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from support.brokers import PrivateMosquitto  # noqa: E402


@pytest.fixture
def mosquitto():
    """A private broker on a free loopback port for one test."""
    with PrivateMosquitto() as broker:
        yield broker


@pytest.fixture
def postgres_url():
    """A throw-away database on the machine's PostgreSQL (support/postgres.py), dropped after."""
    from support.postgres import ThrowawayDatabase, server_or_skip
    server_or_skip()
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
