"""Numeric campaigns on both device loops (spec §1.1, §3.3, §7.1): the MicroPython `Device` and
the C client take their reading (a float given at start; hm: one per metric) to the grid and
report it, and nothing they do depends on the reading except the report body: every reading
(in range, clipped at either end, not a number, missing, a list) gives the same exit code, log
lines, MQTT packets, report headers and spend (the harness of test_device_equivalence.py, the
same "OS randomness" in every run). Both clients make the same bytes from the same words and
reading, and the aggregator's reference report of the reading's grid point agrees."""
import json

import pytest

from support.devices import config_doc
from support.brokers import PrivateMosquitto
from test_device_equivalence import observe
LOG = "log_type all\nlog_timestamp false\nconnection_messages false\n"

TEMP = {"type": "range", "lo": -400, "hi": 850, "resolution": 5, "decimals": 1}  # 251 points
PAIR = {"type": "ranges", "points": 101,
        "metrics": [{"lo": 0, "hi": 100, "name": "load"}, {"lo": -40, "hi": 85, "name": "temp"}]}
READINGS = [3.7, 21.5, -40.0, 85.0, -1000.0, 1e300, 7, None, "x", True, [3.7], []]
PAIRS = [[10.0, 21.5], [0, -40], [100.0, 85.0], [1e9, -1e9], 5.0, None, ["x", 3.7], []]
CASES = {
    "duchi": (config_doc("nd-duchi", mechanism="duchi", eps_milli=1000, params={}, domain=TEMP),
              READINGS),
    "pm": (config_doc("nd-pm", mechanism="pm", eps_milli=1000, params={}, domain=TEMP), READINGS),
    "sw": (config_doc("nd-sw", mechanism="sw", eps_milli=1000, params={"bins": 64, "window": 33},
                      domain=TEMP), READINGS),
    "hm": (config_doc("nd-hm", mechanism="hm", eps_milli=6000, params={"metrics": 2},
                      domain=PAIR), PAIRS),
}


def run(client, tmp_path, case, doc, values, bodies=False):
    """`observe` on a broker of its own (its packet log holds only this run)."""
    with PrivateMosquitto(extra_conf=LOG) as b:
        return observe(client, b, tmp_path / client / str(bodies), case, doc, None, values,
                       bodies=bodies)


@pytest.mark.parametrize("case", sorted(CASES))
def test_numeric_behaviour_does_not_depend_on_the_reading(tmp_path, case):
    doc, values = CASES[case]
    bodies = {}
    for client in ("micropython", "c"):
        results = run(client, tmp_path, case, doc, values)
        reference = results[json.dumps(values[0])]
        assert reference["code"] == 0, reference["log"]
        assert reference["reports"] and reference["spent"] == doc["phases"][0]["eps_milli"]
        for value, got in results.items():
            assert got == reference, "%s: reading %s behaves differently from %r" % (
                client, value, values[0])
        full = run(client, tmp_path, case, doc, values[:4], bodies=True)
        bodies[client] = {v: r["reports"] for v, r in full.items()}
    assert bodies["micropython"] == bodies["c"]


@pytest.mark.parametrize("client,device", [("agent", "micropython"), ("c-agent", "c")])
@pytest.mark.parametrize("case", ["pm", "hm"])
def test_agent_behaviour_does_not_depend_on_the_provider(tmp_path, case, client, device):
    """ldp.agent.Agent with a provider of metric `temp` (spec §5.4): every reading, a provider
    that raises and one whose reading changes on every call behave alike but for the bodies;
    the reading is taken at report time (the bodies of two fixed readings differ as the
    flash-time device's do)."""
    doc, values = CASES[case]
    doc = dict(doc, metric="temp")
    values = list(values) + ["RAISE", "LIVE"] + (["SLOW"] if client == "c-agent" else [])
    results = run(client, tmp_path, case, doc, values)
    reference = results[json.dumps(values[0])]
    assert reference["code"] == 0, reference["log"]
    assert reference["reports"] and reference["spent"] == doc["phases"][0]["eps_milli"]
    for value, got in results.items():
        assert got == reference, "%s: reading %s behaves differently from %r" % (client, value, values[0])
    agent = run(client, tmp_path, case, doc, values[:4], bodies=True)
    device = run(device, tmp_path, case, doc, values[:4], bodies=True)
    assert {v: r["reports"] for v, r in agent.items()} == {v: r["reports"] for v, r in device.items()}

