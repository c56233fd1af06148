"""Spec §5.4 `metric`: the optional name of the reading a campaign asks for."""
import pytest

from ldpfleet.core import config
from ldpfleet.core.errors import ConfigError

PHASES = [{"phase": 1, "mechanism": "pm", "eps_milli": 1000, "params": {}}]
DOMAIN = {"type": "range", "lo": -400, "hi": 850, "resolution": 1, "decimals": 1}


def test_make_config_writes_the_metric_and_check_config_accepts_it():
    doc = config.make_config("temps", PHASES, DOMAIN, 7, metric="temp")
    assert doc["metric"] == "temp"
    assert "metric" not in config.make_config("temps", PHASES, DOMAIN, 7)
    assert config.check_config(doc) is doc


@pytest.mark.parametrize("bad", ["", "Temp", "1x", "_x", "a" * 33, "te-mp", "t\u00e9", 5, None,
                                 ["temp"]])
def test_a_malformed_metric_refuses_the_config(bad):
    doc = config.make_config("temps", PHASES, DOMAIN, 7, metric="temp")
    doc["metric"] = bad
    with pytest.raises(ConfigError) as err:
        config.check_config(doc)
    assert err.value.field == "metric"
    with pytest.raises(ConfigError):
        config.make_config("temps", PHASES, DOMAIN, 7, metric=bad if bad is not None else 0)


def test_longest_metric_accepted():
    assert config.check_metric("a" + "_9" * 15 + "z") == "a" + "_9" * 15 + "z"
