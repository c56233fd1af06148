"""LDPLCM's core (ldpfleet.core.protocols.ldplcm; the learned-sketch paper Alg. 1-4, Thm 1-3): the
public device sampling rule, the integer model export (round trip, exact agreement with
sklearn's trees, validity rules), the boundary of Alg. 3, and the Alg. 4 estimator's
unbiasedness for low-frequent items within Theorem 3's variance bound, all through the shipped C
kernels with fixed aggregator-side seeds."""
import json
import math

import mmh3
import numpy as np
import pytest
from scipy import stats

from ldpfleet.core import config, protocol
from ldpfleet.eval import datasets
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.protocols import ldplcm as L
from ldpfleet.eval import ldplcm_sim
from support.ldplcm_docs import BAD_DOCS, small_doc  # shared with the device tests

Z_BOUND = 4.5
"""Per-check |z| bound; with the handful of checks below the false-alarm rate is < 1e-4."""


# --- sampling rule (spec §5) -------------------------------------------------------------------

def test_sampling_rule_is_the_public_hash_rule():
    ids = ["dev-%d" % i for i in range(3000)] + ["ü-ñ", "x"]
    salt = 0xDEADBEEF
    mask = L.phase1_mask(ids, salt, 250000)
    for i, dev in enumerate(ids[:200] + ids[-2:]):
        h = mmh3.hash(dev.encode("utf-8"), salt, signed=False)
        assert h == protocol.murmur3_32(dev.encode("utf-8"), salt)
        assert L.in_phase1(dev, salt, 250000) == (h % 1000000 < 250000)
    assert mask.tolist() == [L.in_phase1(dev, salt, 250000) for dev in ids]
    assert not L.phase1_mask(ids, salt, 0).any() and L.phase1_mask(ids, salt, 1000000).all()
    assert (L.phase1_mask(ids, salt + 1, 250000) != mask).any()


def test_sampling_rate_is_r():
    n, r = 40000, 0.1
    got = L.phase1_mask(("dev-%d" % i for i in range(n)), 12345, L.rate_ppm(r)).sum()
    assert abs(got - n * r) < Z_BOUND * math.sqrt(n * r * (1 - r))


def test_campaign_phases_carry_the_rate():
    phases = L.campaign_phases(4000, 64, 1024, 100000)
    cfg = config.make_config("lcm-test", phases, {"type": "int", "size": 5000}, 99, campaign_id=5)
    assert [p["sample_rate_ppm"] for p in cfg["phases"]] == [100000, 100000]
    assert L.phase1_mechanism(cfg).name == "cms" and L.phase2_mechanism(cfg).name == "lcm"
    for bad in (0, 1000000, 0.5, True):
        with pytest.raises(ConfigError) as err:
            L.campaign_phases(4000, 64, 1024, bad)
        assert err.value.field == "sample_rate_ppm"


# --- a trained model ---------------------------------------------------------------------------

D = 2000
HEAVY = {0: 0.2, 1: 0.15, 2: 0.1, 3: 0.05}


def planted_values(n, seed):
    """Zipf-like head (items 0-3, mass 0.5; g is learnt over the item index) on a uniform
    floor (0.5 over the other 1996 items)."""
    p = np.full(D, 0.5 / (D - len(HEAVY)))
    for x, f in HEAVY.items():
        p[x] = f
    return np.random.default_rng(seed).choice(D, size=n, p=p).astype(np.uint32)


@pytest.fixture(scope="module")
def trained():
    values = planted_values(50000, 1)
    mech = make_mechanism("cms", 4000, D, salt=0x51, campaign_id=1, k=16, m=256)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(values, np.random.default_rng(2)))
    return L.train_model(sketch, np.arange(D), theta=0.4, seed=3), values


def test_model_marks_the_planted_heavy_items(trained):
    training, _ = trained
    high = np.flatnonzero(L.high_mask(training.model, np.arange(D)))
    assert high.tolist() == [0, 1]  # prefix 0.2, 0.35 <= 0.4 < 0.45
    g = L.evaluate_int_array(training.model, high) / training.model.scale
    assert np.all(np.abs(g - np.array([0.2, 0.15])) < 0.02)
    assert 0.3 < training.theta_measured <= 0.4


def test_model_json_round_trip_is_exact_and_reproducible(trained):
    training, _ = trained
    model = training.model
    text = L.model_to_json(model)
    assert L.model_from_json(text) == model
    assert L.model_from_json(text.encode()) == model
    assert L.model_from_json(json.loads(text)) == model
    assert text == config.canonical(json.loads(text))
    doc = json.loads(text)
    assert doc["format"] == "ldplcm-gbr" and doc["version"] == 1
    assert all(isinstance(v, int) for key in ("split", "right", "roots") for v in doc[key])
    values = trained[1]  # retrain from the same inputs and seed: the same bytes
    mech = make_mechanism("cms", 4000, D, salt=0x51, campaign_id=1, k=16, m=256)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(values, np.random.default_rng(2)))
    assert L.model_to_json(L.train_model(sketch, np.arange(D), theta=0.4, seed=3).model) == text


def test_integer_paths_are_sklearns_paths(trained):
    """Every tree's integer walk ends in the leaf sklearn's float32 walk reaches (thresholds
    floor(t) for integer x), so g_int is exactly round(init 2^s) + sum round(lr v_leaf 2^s)."""
    training, _ = trained
    reg, model = training.regressor, training.model
    x = np.arange(D)
    leaves = reg.apply(x.reshape(-1, 1).astype(np.float32)).reshape(D, -1).astype(np.int64)
    want = np.full(D, int(round(float(reg.init_.constant_.ravel()[0]) * model.scale)), np.int64)
    for t, est in enumerate(reg.estimators_[:, 0]):
        values = est.tree_.value[:, 0, 0]
        want += np.array([int(round(reg.learning_rate * values[leaf] * model.scale))
                          for leaf in leaves[:, t]], np.int64)
    got = L.evaluate_int_array(model, x)
    assert got.tolist() == want.tolist()
    assert got.tolist() == [L.evaluate_int(model, int(i)) for i in x]


def test_integer_decision_equals_float_decision_away_from_the_boundary(trained):
    training, _ = trained
    reg, model = training.regressor, training.model
    x = np.arange(D)
    g_float = reg.predict(x.reshape(-1, 1).astype(np.float64))
    g_int = L.evaluate_int_array(model, x)
    rounding = (len(model.roots) + 1) / 2 / model.scale + 1e-12
    assert np.max(np.abs(g_int / model.scale - g_float)) <= rounding
    p = model.boundary / model.scale
    clear = np.abs(g_float - p) > rounding
    assert clear.sum() > D - 10 and (g_float[clear] >= p).any() and (g_float[clear] < p).any()
    assert np.array_equal(g_int[clear] >= model.boundary, g_float[clear] >= p)
    assert [L.is_high(model, int(i)) for i in x] == (g_int >= model.boundary).tolist()


def test_thresholds_are_clamped_into_the_domain(trained):
    training, _ = trained
    model = training.model
    inner = [s for s, r in zip(model.split, model.right) if r >= 0]
    assert inner and all(-1 <= s <= D - 1 for s in inner)
    assert model.scale_bits == L.DEFAULT_SCALE_BITS


# --- validity rules (the device applies the same) ------------------------------------------------

def test_small_model_evaluates_by_hand():
    model = L.check_model(small_doc())
    # tree 0: x <= 5 -> 10 else -20; tree 1: x <= 7 -> 1 else 2
    assert [L.evaluate_int(model, x) for x in (0, 5, 6, 7, 8)] == [111, 111, 81, 81, 82]
    assert [L.is_high(model, x) for x in (5, 6, 8)] == [True, True, True]
    assert not L.is_high(L.check_model(small_doc(boundary=82)), 7)


@pytest.mark.parametrize("why,doc", BAD_DOCS, ids=[b[0] for b in BAD_DOCS])
def test_invalid_models_are_refused(why, doc):
    with pytest.raises(ConfigError) as err:
        L.model_from_json(json.dumps(doc))
    assert err.value.field == "model"


def test_sum_bound_is_tight():
    edge = (1 << 30) - 2 - 100 - 2  # |init| + tree 0 largest + tree 1 largest
    assert L.check_model(small_doc(split=[5, 10, -edge, 7, 1, 2])).init == 100
    with pytest.raises(ConfigError):
        L.check_model(small_doc(split=[5, 10, -edge - 1, 7, 1, 2]))


# --- Alg. 3 boundary -----------------------------------------------------------------------------

@pytest.mark.parametrize("pred,theta,total,want", [
    ([50, 30, 10, 5, 5], 0.5, None, (50, 0.5)),
    ([50, 30, 10, 5, 5], 0.85, None, (30, 0.8)),
    ([5, 30, 50, 10, 5], 0.95, None, (10, 0.9)),   # the cut splits the run of 5s: all low
    ([50, 30, 10, 5, 5], 1 - 1e-9, None, (10, 0.9)),
    ([40, 20, 20, 20, 0], 0.7, 100, (40, 0.4)),
    ([20, 20, 20], 0.5, 60, (21, 0.0)),            # a run from the top: nothing high
    ([40, 20, 20, 10], 0.85, 100, (20, 0.8)),      # the cut after a whole run keeps it
    ([50, 30, -40], 0.5, None, (51, 0.0)),         # total 40: the top item alone exceeds it
    ([50, 30, -40], 0.5, 100, (50, 0.5)),          # known total mass
    ([50, 30, -40, -60], 0.9, 100, (30, 0.8)),     # the falling tail never joins
    ([-5, -7], 0.5, 100, (-4, 0.0)),
])
def test_boundary_from_predictions(pred, theta, total, want):
    p, measured = L.boundary_from_predictions(pred, theta, total)
    assert (p, pytest.approx(measured)) == (want[0], want[1])


# --- Alg. 4: Theorem 2 and Theorem 3 -------------------------------------------------------------

def theorem3_bound(n, n_low, f, sum_low_sq, k, m, q):
    """Theorem 3 in counts with the realised flip probability q ((c^2 - 1)/4 = q(1-q)/(1-2q)^2):
    Var[(1/k) sum M] < n (c^2-1)/4 + (n (1-theta) - f)/m + sum_low F^2 / (k m); the estimate is
    m/(m-1) times that sum minus a constant."""
    v = q * (1 - q) / (1 - 2 * q) ** 2
    return (m / (m - 1)) ** 2 * (n * v + (n_low - f) / m + sum_low_sq / (k * m))


def test_alg4_is_unbiased_for_low_items_within_theorem3():
    """Planted: 3 high items hold theta = 1/2 of the users, 100 low items 100 users each,
    item 500 nobody. R campaigns with fresh salts (the theorems average over hash functions)
    and fresh flips. Alg. 4 with the exact theta and the sketch-normalised variant are unbiased
    (|z| < 4.5) with sample variances inside Theorem 3's bound (chi-square 1e-4 upper quantile);
    plain CMS-style correction (theta = 0) is biased and Apple-CMS on the same users (high items
    hashed too) exceeds the bound: both checks have teeth."""
    k, m, eps_milli, runs = 8, 64, 2000, 300
    high_items, low_items = [1000, 1001, 1002], list(range(100))
    values = np.concatenate([np.repeat(high_items, [3400, 3300, 3300]),
                             np.repeat(low_items, 100)]).astype(np.uint32)
    high = np.isin(values, high_items)
    n, n_low, theta = values.size, int((~high).sum()), float(high.mean())
    probe = np.array([0, 1, 50, 99, 500], np.uint32)
    f = np.array([100, 100, 100, 100, 0], np.float64)
    rng = np.random.default_rng(2024)
    est = {"theta": [], "sketch": [], "theta0": [], "cms": []}
    for r in range(runs):
        salt = int(rng.integers(0, 1 << 32))
        lcm = make_mechanism("lcm", eps_milli, 2000, salt=salt, campaign_id=1, k=k, m=m)
        sketch = lcm.new_sketch()
        sketch.update(lcm.perturb_batch(values, rng, high=high))
        est["theta"].append(sketch.estimate(probe, theta=theta))
        est["sketch"].append(sketch.estimate(probe))
        est["theta0"].append(sketch.estimate(probe, theta=0.0))
        cms = make_mechanism("cms", eps_milli, 2000, salt=salt, campaign_id=1, k=k, m=m)
        plain = cms.new_sketch()
        plain.update(cms.perturb_batch(values, rng))
        est["cms"].append(plain.estimate(probe))
    est = {key: np.array(v) for key, v in est.items()}
    q = protocol.t_flip(eps_milli) / protocol.WORD
    bound = theorem3_bound(n, n_low, f, 100 * 100.0 ** 2, k, m, q)
    chi = stats.chi2.ppf(1 - 1e-4, runs - 1) / (runs - 1)
    for key in ("theta", "sketch"):
        z = (est[key].mean(axis=0) - f) / np.sqrt(bound / runs)
        assert np.max(np.abs(z)) < Z_BOUND, (key, z)
        assert np.all(est[key].var(axis=0, ddof=1) <= chi * bound), key
    z0 = (est["theta0"].mean(axis=0) - f) / np.sqrt(bound / runs)
    assert np.max(z0) < -10, z0  # low users only: n/m over-subtracted
    assert np.all(est["cms"].var(axis=0, ddof=1) > chi * bound)
    z_cms = (est["cms"].mean(axis=0) - f) / np.sqrt(est["cms"].var(axis=0, ddof=1) / runs)
    assert np.max(np.abs(z_cms)) < Z_BOUND  # Apple-CMS is unbiased too, only noisier


def test_estimate_frequencies_uses_the_model_for_high_items(trained):
    training, values = trained
    model = training.model
    lcm = make_mechanism("lcm", 4000, D, salt=0x52, campaign_id=1, k=16, m=256)
    rest = planted_values(40000, 9)
    sketch = lcm.new_sketch()
    sketch.update(lcm.perturb_batch(rest, np.random.default_rng(4),
                                    high=L.high_mask(model, rest)))
    est, high = L.estimate_frequencies(sketch, model, np.arange(D), theta=training.theta_measured)
    assert np.flatnonzero(high).tolist() == [0, 1]
    g = L.evaluate_int_array(model, np.arange(D))
    assert np.array_equal(est[high], g[high] / model.scale)
    f_true = np.bincount(rest, minlength=D) / rest.size
    low_var = lcm.item_variances(sketch.n, f_true, high=high, theta_known=True)[~high]
    # the mean error over the low items, against the sd it would have if they were independent
    assert abs(np.mean(est[~high] - f_true[~high])) < Z_BOUND * math.sqrt(np.mean(low_var) / low_var.size)


def test_simulate_ldplcm_and_baselines_run_on_the_same_data():
    pop = datasets.Population(eps=4.0, users=30000, domain=4096, dist="zipf:1.1", seed=6)
    res = ldplcm_sim.simulate_ldplcm(pop, ldplcm_sim.LcmTuning(k=16, m=256, sample_rate=0.2,
                                                               theta=0.5), return_estimates=True)
    assert res["phase1_users"] + res["phase2_users"] == 30000
    assert abs(res["phase1_users"] - 6000) < Z_BOUND * math.sqrt(30000 * 0.2 * 0.8)
    assert res["high_items"] >= 1 and math.isfinite(res["sse"])
    assert res["sse"] == pytest.approx(res["sse_high"] + res["sse_low"])
    assert res["mse"] == pytest.approx(res["sse"] / 4096)
    for name in ("cms", "hcms", "flh"):
        params = {"k": 16, "m": 256} if name != "flh" else {}
        base = ldplcm_sim.simulate_baseline(name, pop, params, return_estimates=True)
        assert math.isfinite(base["sse"]) and base["users"] == 30000
        assert np.array_equal(base["truth"], res["truth"]), name
