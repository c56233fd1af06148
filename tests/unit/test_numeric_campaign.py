"""Numeric campaigns in the service (service/campaigns/numeric.py): the `--domain` range syntax,
configs and status of duchi/pm/hm/sw campaigns, and `estimate`'s mean with its interval from the
mechanism's worst-case variance, and sw's EMS histogram (in process, no broker: aggregator-side
seeded fleets folded into the campaign's own sketch)."""
import math

import numpy as np
import pytest

from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms.numeric import NumericDomain
from ldpfleet.core.signing import write_signing_key
from ldpfleet.service import Store, create_campaign
from ldpfleet.service.campaigns.estimates import EstimateQuery
from ldpfleet.service.campaigns.manage import campaign_status, parse_domain
from ldpfleet.service.campaigns.numeric import parse_range, worst_report_variance
from ldpfleet.service.campaigns.query import estimate

KEY = None
TEMP = {"type": "range", "lo": -400, "hi": 850, "resolution": 1, "decimals": 1}


def test_range_syntax():
    assert parse_range("-40.0..85.0:0.1") == TEMP
    assert parse_range("-40..85:0.1") == TEMP
    assert parse_range("0..100") == {"type": "range", "lo": 0, "hi": 100, "resolution": 1}
    assert parse_range("0..5:0.25")["resolution"] == 25
    assert parse_domain('{"type": "ranges", "points": 101, "metrics": [{"lo": 0, "hi": 1}]}')[
        "type"] == "ranges"
    assert parse_domain("0-9") == {"type": "int", "size": 10}
    for bad, field in (("5..1", "domain.range"), ("0..1:0.3", "domain.resolution"),
                       ("0..70000", "domain.resolution"), ("a..b", "domain"),
                       ("0..1:0", "domain.resolution"), ("0..1:0.0000000001", "domain.range"),
                       ('{"type": "int", "size": 4}', "domain.type"),
                       ("0..1E+999999999", "domain"), ("0..1E+99999", "domain"),
                       ("-1E+16..0", "domain"), ("0..1E-999999999", "domain.range")):
        with pytest.raises(ConfigError) as info:
            parse_domain(bad)
        assert info.value.field == field, bad


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    global KEY
    d = tmp_path_factory.mktemp("numeric")
    key = str(d / "k.key")
    write_signing_key(key)
    url = "sqlite:///" + str(d / "state.db")
    with Store(url) as store:
        for mech in ("duchi", "pm", "sw"):
            create_campaign(store, None, key, mech, mech, 1.0, "-40.0..85.0:0.1")
        create_campaign(store, None, key, "hm", "hm", 1.0, {
            "type": "ranges", "points": 1001,
            "metrics": [{"lo": 0, "hi": 100, "name": "load"}, {"lo": -40, "hi": 85, "name": "temp"}]})
    KEY = key
    return url


def test_configs_and_status(state):
    with Store(state) as store:
        assert store.require_campaign("hm").config["phases"][0]["params"] == {"metrics": 2}
        sw = store.require_campaign("sw").config["phases"][0]["params"]
        assert sw["bins"] == 1024 and sw["window"] >= 1
        st = campaign_status(store, "pm")
        assert st["domain"] == {"type": "range", "size": 1251,
                                "range": "-40.0..85.0 by 0.1 (1251 points)"}
        assert st["phases"][0]["expected_error"]["mean_ci_halfwidth"] is None
        with pytest.raises(ConfigError):
            create_campaign(store, None, KEY, "x", "grr", 1.0, "0..10")


def fold(store, name, values, seed, metrics=None):
    """Fold a seeded fleet's reports of `values` (readings) into the campaign's sketch."""
    camp = store.require_campaign(name)
    mech = camp.mechanism(1)
    dom = NumericDomain(camp.config["domain"])
    if metrics:
        x = np.stack([dom.grid_points(values[:, a], a) for a in range(metrics)], axis=1)
    else:
        x = dom.grid_points(values)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(x, np.random.default_rng(seed)))
    store.put_sketch(name, 1, sketch.n, sketch.serialize())
    return mech


@pytest.mark.parametrize("name", ["duchi", "pm"])
def test_mean_interval_from_the_variance(state, name):
    rng = np.random.default_rng(7)
    temps = -40 + 125 * rng.beta(2, 5, size=20000)
    with Store(state) as store:
        mech = fold(store, name, temps, 11)
        out = estimate(store, name, EstimateQuery())
        st = campaign_status(store, name)
    doc = out.to_json()
    (m,) = doc["numeric"]["means"]
    true = float(np.mean(NumericDomain(TEMP).value(NumericDomain(TEMP).grid_points(temps))))
    assert m["ci_low"] <= true <= m["ci_high"]
    # the half-width is z sqrt(V_max / n) in degrees (62.5 degrees per unit of t)
    half = (m["ci_high"] - m["ci_low"]) / 2
    assert half == pytest.approx(1.959964 * math.sqrt(worst_report_variance(mech) / 20000) * 62.5,
                                 rel=1e-4)
    assert st["phases"][0]["expected_error"]["mean_ci_halfwidth"] == pytest.approx(half, rel=1e-4)
    if name == "duchi":  # C^2 = ((e+1)/(e-1))^2 at eps 1, up to the integer slope
        assert worst_report_variance(mech) == pytest.approx(((math.e + 1) / (math.e - 1)) ** 2,
                                                            rel=1e-3)
    else:  # Lemma 1 at |t| = 1
        h = math.exp(0.5) - 1
        assert worst_report_variance(mech) == pytest.approx(1 / h + (h + 4) / (3 * h * h),
                                                            rel=0.02)
    assert "mean" in out.to_text() and out.to_csv().startswith("metric,name,reports,mean")


def test_hm_means_per_metric(state):
    rng = np.random.default_rng(8)
    values = np.stack([100 * rng.beta(2, 5, 20000), rng.normal(20, 5, 20000)], axis=1)
    with Store(state) as store:
        fold(store, "hm", values, 12, metrics=2)
        doc = estimate(store, "hm", EstimateQuery()).to_json()
        dom = NumericDomain(store.require_campaign("hm").config["domain"])
    means = doc["numeric"]["means"]
    assert [m["name"] for m in means] == ["load", "temp"]
    # eps 1: a report carries k = 1 of the 2 metrics, each metric ~ half the reports
    assert sum(m["reports"] for m in means) == 20000
    for a, m in enumerate(means):
        assert abs(m["reports"] - 10000) < 5 * math.sqrt(5000)
        true = float(np.mean(dom.value(dom.grid_points(values[:, a], a), a)))
        assert m["ci_low"] <= true <= m["ci_high"], (a, m, true)


def test_sw_histogram(state):
    rng = np.random.default_rng(9)
    temps = -40 + 125 * rng.beta(2, 5, size=20000)
    with Store(state) as store:
        fold(store, "sw", temps, 13)
        out = estimate(store, "sw", EstimateQuery())
    doc = out.to_json()["numeric"]
    hist = doc["histogram"]
    assert len(hist) == 1024 and hist[0]["low"] == -40.0 and hist[-1]["high"] == 85.0
    assert sum(b["fraction"] for b in hist) == pytest.approx(1.0, abs=1e-6)
    assert all(b["ci_low"] <= b["fraction"] + 1e-12 and b["fraction"] <= b["ci_high"] + 1e-12
               for b in hist)
    (m,) = doc["means"]
    assert abs(m["mean"] - float(np.mean(temps))) < 2.0  # EMS smoothing: not an interval claim
    median = [q for q in doc["quantiles"] if q["q"] == 0.5][0]
    assert abs(median["value"] - float(np.median(temps))) < 3.0
    assert "bootstrap" in doc["interval"] and out.to_csv().startswith("bin,low,high,fraction")


def test_numeric_refuses_item_options(state):
    with Store(state) as store:
        for query in (EstimateQuery(top=3), EstimateQuery(items=["1"]),
                      EstimateQuery(threshold="auto")):
            with pytest.raises(ConfigError):
                estimate(store, "pm", query)
        assert estimate(store, "pm", EstimateQuery(post="base-pos")).warnings


def test_fleet_readings():
    from ldpfleet.loadgen.items import draw_indices, item_distribution
    doc = {"domain": TEMP}
    dist = item_distribution(None, doc)  # beta:2,5 scaled into -40..85
    r = draw_indices(20000, dist, np.random.default_rng(1), 0)
    assert r.shape == (20000,) and -40 <= r.min() and r.max() <= 85
    assert abs(float(np.mean(r)) - (-40 + 125 * 2 / 7)) < 0.5
    x = dist.grid(r)
    assert x.dtype == np.uint32 and x.max() <= 1250
    counts = {}
    dist.add_counts(counts, r[:10])
    assert sum(counts.values()) == 10 and isinstance(dist.value(r[0]), float)
    pair = item_distribution("uniform", {"domain": {
        "type": "ranges", "points": 11, "metrics": [{"lo": 0, "hi": 10}, {"lo": 5, "hi": 6}]}})
    r2 = pair.draw(100, np.random.default_rng(2))
    assert r2.shape == (100, 2) and pair.grid(r2).shape == (100, 2)
    assert len(pair.value(r2[0])) == 2
    for bad in ("zipf:1.1", "beta:1", "normal:a,b"):
        with pytest.raises(ConfigError):
            item_distribution(bad, doc)


def test_unchanged_sketch_answers_from_the_cache(state):
    import time
    with Store(state) as store:
        fold(store, "sw", -40 + 125 * np.random.default_rng(3).beta(2, 5, 5000), 14)
        t0 = time.monotonic()
        first = estimate(store, "sw", EstimateQuery(post="base-pos"))
        slow = time.monotonic() - t0
        t0 = time.monotonic()
        again = estimate(store, "sw", EstimateQuery())
        fast = time.monotonic() - t0
        assert again.to_json()["numeric"] == first.to_json()["numeric"]
        assert first.warnings and not again.warnings  # the caller's warning stays its own
        assert fast < slow
        fold(store, "sw", -40 + 125 * np.random.default_rng(4).beta(2, 5, 5000), 15)
        assert estimate(store, "sw", EstimateQuery()).to_json()["numeric"] != first.to_json()["numeric"]


def test_flash_value_takes_readings():
    from ldpfleet.commands.flash import parse_value
    assert parse_value("3.7") == 3.7
    assert parse_value("[42.0, 21.5]") == [42.0, 21.5]
    assert parse_value("[1, 2.5]") == [1, 2.5]
    assert parse_value("5") == 5 and parse_value("cpu") == "cpu" and parse_value(None) is None
    for bad in ("[1.5, \"x\"]", "[1.5, true]", "1e999"):
        with pytest.raises(ConfigError):
            parse_value(bad)


@pytest.mark.parametrize("spec", ["normal:0,-1", "normal:0,0", "beta:nan,1", "normal:nan,1",
                                  "constant:nan", "beta:1e999,1", "constant:inf"])
def test_fleet_readings_need_finite_parameters(spec):
    from ldpfleet.loadgen.numeric import NumericDistribution
    with pytest.raises(ConfigError) as info:
        NumericDistribution(spec, {"type": "range", "lo": 0, "hi": 100, "resolution": 1})
    assert info.value.field == "dist"
