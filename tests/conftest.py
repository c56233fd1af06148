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
