"""The numeric mechanisms' linear sketches and their place in a config (spec §1.1, §3.3):
update (reports as they arrive, validated), merge (addition, compatible sketches only),
serialize / deserialize, and the mechanism a numeric config prescribes."""
import numpy as np
import pytest

from ldpfleet.core import config as campaign_config
from ldpfleet.core.errors import ReportFormatError, SketchMismatch
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import Sketch

CASES = [("duchi", {}, 1251), ("pm", {}, 1251), ("hm", {"metrics": 3}, 1001),
         ("sw", {"bins": 64, "window": 30}, 4096)]


def values(mech, n, rng):
    shape = (n, mech.metrics) if mech.name == "hm" else (n,)
    return rng.integers(0, mech.domain_size, size=shape)


@pytest.mark.parametrize("name,params,points", CASES)
def test_update_merge_serialize(name, params, points):
    """Two halves merged equal the whole; the serialized sketch comes back equal; the report
    path (`update`) and the simulation path (`simulate`) fold the same bodies the same way."""
    mech = make_mechanism(name, 1000, points, campaign_id=9, **params)
    rng = np.random.default_rng(3)
    x = values(mech, 20000, rng)
    reports = mech.perturb_batch(x, np.random.default_rng(4))
    whole, a, b = mech.new_sketch(), mech.new_sketch(), mech.new_sketch()
    whole.update(reports)
    a.update(reports[:7000])
    b.update(reports[7000:])
    a.merge(b)
    for key, value in whole._state().items():
        assert np.array_equal(value, a._state()[key])
    assert a.n == whole.n == 20000
    back = Sketch.deserialize(whole.serialize())
    assert type(back) is type(whole) and back.n == whole.n
    for key, value in whole._state().items():
        assert np.array_equal(value, back._state()[key])
    sim = mech.new_sketch()
    sim.fold_bodies(reports[:, 12:])
    for key, value in whole._state().items():
        assert np.array_equal(value, sim._state()[key])
    est = whole.estimate()
    assert np.all(np.isfinite(est))


def test_merge_refuses_other_parameters():
    a = make_mechanism("pm", 1000, 1251).new_sketch()
    for other in (make_mechanism("pm", 2000, 1251), make_mechanism("pm", 1000, 1252),
                  make_mechanism("pm", 1000, 1251, campaign_id=5)):
        with pytest.raises(SketchMismatch):
            a.merge(other.new_sketch())
    with pytest.raises(SketchMismatch):
        make_mechanism("hm", 1000, 101, metrics=2).new_sketch().merge(
            make_mechanism("hm", 1000, 101, metrics=3).new_sketch())


@pytest.mark.parametrize("name,params,points", CASES)
def test_update_rejects_bad_bodies(name, params, points):
    """A body outside the mechanism's outputs is a ReportFormatError, and the sketch is left
    unchanged."""
    mech = make_mechanism(name, 1000, points, **params)
    good = mech.perturb_batch(values(mech, 3, np.random.default_rng(1)), np.random.default_rng(2))
    bad = good.copy()
    bad[1, 12:] = 0xFF
    sketch = mech.new_sketch()
    with pytest.raises(ReportFormatError):
        sketch.update(bad)
    assert sketch.n == 0 and all(not v.any() for v in sketch._state().values())


def test_a_numeric_config_prescribes_its_mechanism():
    """check_config accepts a numeric config; mechanism_for_phase builds the mechanism over the
    domain's N grid points (no ⊥), hm with the domain's metrics."""
    doc = campaign_config.make_config(
        "temp", [{"phase": 1, "mechanism": "hm", "eps_milli": 1000, "params": {"metrics": 2}}],
        {"type": "ranges", "points": 501, "metrics": [{"lo": -400, "hi": 850, "decimals": 1},
                                                     {"lo": 0, "hi": 100}]}, salt=1)
    mech = campaign_config.mechanism_for_phase(doc, 1)
    assert (mech.name, mech.domain_size, mech.metrics) == ("hm", 501, 2)
    doc = campaign_config.make_config(
        "volts", [{"phase": 1, "mechanism": "sw", "eps_milli": 1000,
                   "params": {"bins": 121, "window": 62}}],
        {"type": "range", "lo": 3000, "hi": 4200, "resolution": 10, "decimals": 3}, salt=1)
    mech = campaign_config.mechanism_for_phase(doc, 1)
    assert (mech.name, mech.domain_size, mech.bins) == ("sw", 121, 121)
