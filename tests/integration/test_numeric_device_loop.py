"""Numeric campaigns on both device loops (spec §1.1, §3.3, §7.1): the MicroPython `Device` and
the C client take their reading (given at start in value.json / --value; hm: one per metric) to
the grid and report it, and nothing they do depends on the reading except the report body: every
reading (in range, clipped at either end, 1e300, an int beyond the float range, not a number,
missing, a list, longer and shorter lists for hm) gives the same exit code, log lines, MQTT
packets, report headers and spend (the harness of test_device_equivalence.py, the same "OS
randomness" in every run). For every reading both clients publish the same report bytes, and
those bytes are the aggregator's reference: `NumericDomain.grid_point` of the reading (hm: of
each metric's) and the mechanism's `reference_report` on the words the device drew after the
report's nonce. NaN and ±inf cannot travel in JSON (a device never gets them this way; `flash`
refuses them): test_numeric_reading_timing.py compares their report bytes on all three sides."""
import json

import pytest

from ldpfleet.core import config as campaign_config
from ldpfleet.core import protocol
from ldpfleet.core.mechanisms.numeric import NumericDomain
from support.devices import config_doc
from support.brokers import PrivateMosquitto
from test_device_equivalence import observe
LOG = "log_type all\nlog_timestamp false\nconnection_messages false\n"

TEMP = {"type": "range", "lo": -400, "hi": 850, "resolution": 5, "decimals": 1}  # 251 points
PAIR = {"type": "ranges", "points": 101,
        "metrics": [{"lo": 0, "hi": 100, "name": "load"}, {"lo": -40, "hi": 85, "name": "temp"}]}
READINGS = [3.7, 21.5, -40.0, 85.0, -1000.0, 1e300, 7, None, "x", True, [3.7], [],
            0.0, -1e300, 10 ** 400, -10 ** 400, 2 ** 62, "NaN", {}, [1.0, 2.0]]
PAIRS = [[10.0, 21.5], [0, -40], [100.0, 85.0], [1e9, -1e9], 5.0, None, ["x", 3.7], [],
         [10 ** 400, None], [None, 3.7], [1.0, 2.0, 3.0], [True, -1e300], [[1.0], {}]]
SEED = 12345  # the harness's "OS randomness": xorshift32 from this seed on both clients
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
        full = run(client, tmp_path, case, doc, values, bodies=True)
        bodies[client] = {v: r["reports"] for v, r in full.items()}
    assert bodies["micropython"] == bodies["c"]
    for value in values:
        want = reference_reports(doc, value, bodies["c"][json.dumps(value)])
        assert bodies["c"][json.dumps(value)] == want, "reading %r: not the reference" % (value,)


def stream_words(seed=SEED):
    s = seed | 1
    while True:
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        yield s


def reference_reports(doc, value, published):
    """The aggregator's report (hex) for each published one: the grid point(s) of `value`
    (spec §1.1: a list gives one reading per metric, missing ones None; anything else is the
    first metric's) through `reference_report`, on the words the stream gave after the
    report's nonce."""
    mech = campaign_config.mechanism_for_phase(doc, 1)
    dom = NumericDomain(doc["domain"])
    readings = value if isinstance(value, list) else [value]
    xs = [dom.grid_point(readings[a] if a < len(readings) else None, a)
          for a in range(len(dom.metrics))]
    out = []
    for hexed in published:
        nonce = protocol.parse_header(bytes.fromhex(hexed))[5]
        words = stream_words()
        assert any(next(words) == nonce for _ in range(10000)), "nonce not from the stream"
        w = [next(words) for _ in range(mech.random_words)]
        out.append(mech.reference_report(xs if mech.name == "hm" else xs[0], w, nonce).hex())
    return out


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
