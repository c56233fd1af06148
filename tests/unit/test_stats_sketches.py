"""Statistics and structure of the sketch and set-valued mechanisms (CMS, HCMS, SH, SRAPPOR, LCM).

Accuracy tests use fixed aggregator-side seeds and bounds derived from each mechanism's exact
variance (`item_variances`, averaged over random hash functions): every repetition uses a new
salt (new hash functions), the standardised squared errors e^2/Var average to 1 with standard
deviation sqrt(2 / (items * reps)) for near-Gaussian errors, and the mean error of a heavy item
over R repetitions has standard deviation sqrt(Var / R). Bounds are 5 standard deviations.
"""
import math

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet.core.errors import ConfigError, SketchMismatch
from ldpfleet.core.kernels import ptr
from ldpfleet._kernels import lib
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import Sketch
from ldpfleet.core.mechanisms.hcms import fwht
from ldpfleet.core.mechanisms.sh import KeySets, key_sets
from test_privacy_sketches import (bucket_points, cms_run, distribution, hcms_dists, sh_dists,
                                   srappor_dists, threshold_points)

W = protocol.WORD
REPS = 8
USERS = 40000
Z = 5.0


def zipf_probabilities(d, s=1.1):
    p = 1.0 / np.arange(1, d + 1) ** s
    return p / p.sum()


def zipf_values(n, d, rng):
    return rng.choice(d, size=n, p=zipf_probabilities(d)).astype(np.uint32)


def zipf_sets(n, d, size, rng):
    """(n, size) distinct items per user: successive sampling without replacement from Zipf
    (Gumbel top-size trick)."""
    noisy = np.log(zipf_probabilities(d)) + rng.gumbel(size=(n, d))
    return np.argpartition(-noisy, size - 1, axis=1)[:, :size].astype(np.uint32)


def true_counts(values, d):
    return np.bincount(np.asarray(values, np.int64).ravel(), minlength=d)


def run_reps(name, params, values, d, seed, eps_milli=1000, **perturb_kw):
    """R repetitions with fresh salts: (estimates (R, d), mechanisms)."""
    rng = np.random.default_rng(seed)
    ests, mechs = [], []
    for r in range(REPS):
        mech = make_mechanism(name, eps_milli, d, salt=0x1000 + 7919 * r, campaign_id=5, **params)
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(values, rng, **perturb_kw))
        ests.append(sketch.estimate(np.arange(d, dtype=np.uint32)))
        mechs.append(mech)
    return np.array(ests), mechs


def assert_calibrated(errors, variances, heavy):
    """errors (R, items) in counts, variances (items,) in counts^2."""
    reps, items = errors.shape
    score = float(np.mean(errors ** 2 / variances))
    assert abs(score - 1) <= Z * math.sqrt(2.0 / (reps * items)), score
    for v in heavy:
        z = errors[:, v].mean() / math.sqrt(variances[v] / reps)
        assert abs(z) <= Z, (v, z)


ACCURACY = [
    ("cms", dict(k=16, m=64), 256, None),
    ("hcms", dict(k=16, m=64), 256, None),
    ("sh", dict(m=256, l=1), 256, None),
    ("srappor", dict(l=1), 64, None),
    ("sh", dict(m=256, l=3), 64, 3),
    ("sh", dict(m=512, l=4), 64, 2),        # sets padded with the dummy
    ("srappor", dict(l=3), 64, 3),
    ("srappor", dict(l=4), 64, 2),
]


@pytest.mark.parametrize("name,params,d,set_size", ACCURACY)
def test_estimates_unbiased_and_mse_matches_exact_variance(name, params, d, set_size):
    data_rng = np.random.default_rng(20240601)
    if set_size is None:
        values = zipf_values(USERS, d, data_rng)
    else:
        values = zipf_sets(USERS, d, set_size, data_rng)
    counts = true_counts(values, d)
    ests, mechs = run_reps(name, params, values, d, seed=17)
    variances = mechs[0].item_variances(USERS, counts / USERS) * USERS ** 2
    assert_calibrated(ests - counts, variances, heavy=np.argsort(-counts)[:3])


@pytest.mark.parametrize("name", ["cms", "hcms", "sh"])
def test_default_parameters_at_core_target_scale(name):
    """The core target's setting (eps 2, 200000 users, 1024 items, Zipf 1.1) with the default
    k, m (SH: m, l): MSE matches the exact variance and heavy items are unbiased."""
    n, d = 200000, 1024
    values = zipf_values(n, d, np.random.default_rng(2024))
    counts = true_counts(values, d)
    rng = np.random.default_rng(31)
    errors, mech = [], None
    for r in range(2):
        mech = make_mechanism(name, 2000, d, salt=0x5EED5A17 + r, campaign_id=1)
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(values, rng))
        errors.append(sketch.estimate(np.arange(d, dtype=np.uint32)) - counts)
    variances = mech.item_variances(n, counts / n) * n * n
    assert_calibrated(np.array(errors), variances, heavy=np.argsort(-counts)[:3])


def test_cms_variance_collision_terms_are_needed():
    """The calibration above fails if the hash-collision terms are dropped (the test has teeth):
    on this dataset they are a sizeable share of the exact variance."""
    d, n = 256, USERS
    mech = make_mechanism("cms", 1000, d, k=16, m=64)
    f = zipf_probabilities(d)
    q = mech.flip_probability
    privacy_only = q * (1 - q) / (1 - 2 * q) ** 2 / n * (64 / 63) ** 2
    assert mech.variance(n, f) > privacy_only * (1 + Z * math.sqrt(2.0 / (REPS * d)))


def test_hcms_and_cms_default_parameters_and_variance_without_freqs():
    for name in ("cms", "hcms", "lcm"):
        mech = make_mechanism(name, 2000, 1024)
        assert (mech.params["k"], mech.params["m"]) == (256, 1024)
        assert mech.variance(1000) == pytest.approx(float(mech.item_variances(1000)[0]))
    sh = make_mechanism("sh", 2000, 1024)
    assert (sh.params["m"], sh.params["l"]) == (65536, 1)


# --- LDPLCM -----------------------------------------------------------------------------------

def test_lcm_low_frequent_estimates_unbiased_within_theorem_3():
    d, k, m, eps_milli = 256, 16, 64, 1000
    values = zipf_values(USERS, d, np.random.default_rng(99))
    counts = true_counts(values, d)
    f = counts / USERS
    order = np.argsort(-f)
    high = np.zeros(d, bool)
    high[order[:np.searchsorted(np.cumsum(f[order]), 0.5)]] = True
    theta = float(f[high].sum())
    low = np.flatnonzero(~high)
    rng = np.random.default_rng(5)
    est_known, est_self, mechs = [], [], []
    for r in range(REPS):
        mech = make_mechanism("lcm", eps_milli, d, salt=77 + r, k=k, m=m)
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(values, rng, high=high[values]))
        keys = np.arange(d, dtype=np.uint32)
        est_known.append(sketch.estimate(keys, theta=theta))
        est_self.append(sketch.estimate(keys))
        mechs.append(mech)
        with_model = sketch.estimate(keys, high_mask=high, high_counts=counts * 1.0)
        assert np.array_equal(with_model[high], counts[high])
        assert np.array_equal(with_model[~high], est_self[-1][~high])
    mech = mechs[0]
    heavy_low = np.arange(low.size)[np.argsort(-counts[low])[:3]]
    for ests, known in ((est_known, True), (est_self, False)):
        var = mech.item_variances(USERS, f, high=high, theta_known=known)[low] * USERS ** 2
        assert_calibrated(np.array(ests)[:, low] - counts[low], var, heavy=heavy_low)
    # Theorem 3's bound on Var[sum] (times (m/(m-1))^2 for the estimator) holds for every low item
    q = mech.flip_probability
    low_f = counts[low].astype(float)
    bound = (USERS * q * (1 - q) / (1 - 2 * q) ** 2 + (USERS * (1 - theta) - low_f) / m
             + np.sum(low_f ** 2) / (k * m)) * (m / (m - 1)) ** 2
    exact = mech.item_variances(USERS, f, high=high, theta_known=True)[low] * USERS ** 2
    assert np.all(exact <= bound)
    # ... and the model pays off: lower variance than Apple-CMS on the same data
    cms = make_mechanism("cms", eps_milli, d, k=k, m=m)
    assert mech.variance(USERS, f, high=high) < cms.variance(USERS, f)


def test_lcm_without_high_users_is_cms():
    d = 128
    values = zipf_values(5000, d, np.random.default_rng(1))
    cms = make_mechanism("cms", 2000, d, salt=3, k=8, m=32)
    lcm = make_mechanism("lcm", 2000, d, salt=3, k=8, m=32)
    a, b = cms.new_sketch(), lcm.new_sketch()
    ra = cms.perturb_batch(values, np.random.default_rng(2))
    rb = lcm.perturb_batch(values, np.random.default_rng(2))
    assert np.array_equal(ra[:, 12:], rb[:, 12:])
    a.update(ra)
    b.update(rb)
    keys = np.arange(d)
    assert np.array_equal(a.estimate(keys), b.estimate(keys, theta=0.0))


def test_lcm_high_users_encode_all_minus_one():
    mech = make_mechanism("lcm", 3000, 64, k=4, m=16)
    rng = np.random.default_rng(8)
    reports = mech.perturb_batch(np.arange(20000, dtype=np.uint32) % 64, rng,
                                 high=np.ones(20000, bool))
    sketch = mech.new_sketch()
    sketch.update(reports)
    q = mech.flip_probability
    ones = sketch.ones.sum()
    cells = 20000 * 16
    assert abs(ones - q * cells) <= Z * math.sqrt(cells * q * (1 - q))
    assert abs(sketch.low_users()) <= Z * math.sqrt(mech.variance(20000) * 20000 ** 2 * 16)


# --- linear-sketch structure ------------------------------------------------------------------

STRUCTURE = [("cms", dict(k=8, m=24)), ("hcms", dict(k=8, m=32)), ("sh", dict(m=128, l=2)),
             ("srappor", dict(l=2, candidates=[5, 1, 9, 33])), ("lcm", dict(k=4, m=16))]


def batch_for(mech, n, rng):
    if mech.set_valued:
        return mech.perturb_batch(zipf_sets(n, 40, 2, rng), rng)
    keys = zipf_values(n, 40, rng)
    if mech.name == "lcm":
        return mech.perturb_batch(keys, rng, high=keys < 2)
    return mech.perturb_batch(keys, rng)


@pytest.mark.parametrize("name,params", STRUCTURE)
def test_merge_serialize_and_mismatch(name, params):
    rng = np.random.default_rng(11)
    mech = make_mechanism(name, 1500, 40, salt=123, campaign_id=9, **params)
    first, second = batch_for(mech, 3000, rng), batch_for(mech, 2000, rng)
    a, b, whole = mech.new_sketch(), mech.new_sketch(), mech.new_sketch()
    a.update(first)
    b.update(list(map(bytes, second)))
    whole.update(np.concatenate([first, second]))
    a.merge(b)
    assert a.n == whole.n == 5000
    for key, arr in whole._state().items():
        assert np.array_equal(a._state()[key], arr)
    keys = [5, 1, 9, 33] if name == "srappor" else np.arange(40)
    assert np.array_equal(a.estimate(keys), whole.estimate(keys))
    back = Sketch.deserialize(whole.serialize())
    assert type(back) is type(whole) and back.n == whole.n
    assert np.array_equal(back.estimate(keys), whole.estimate(keys))
    for field, change in [("salt", dict(salt=124)), ("eps_milli", dict(eps_milli=1600)),
                          ("campaign_id", dict(campaign_id=10))]:
        kw = dict(eps_milli=1500, salt=123, campaign_id=9)
        kw.update(change)
        other = make_mechanism(name, kw.pop("eps_milli"), 40, **kw, **params).new_sketch()
        with pytest.raises(SketchMismatch) as info:
            whole.merge(other)
        assert info.value.field == field
    first_param = next(iter(params))
    changed = dict(params, **{first_param: params[first_param] * 2})
    with pytest.raises(SketchMismatch) as info:
        whole.merge(make_mechanism(name, 1500, 40, salt=123, campaign_id=9, **changed).new_sketch())
    assert info.value.field == "params"


@pytest.mark.parametrize("name,params", STRUCTURE)
def test_reference_matches_c_on_random_inputs(name, params):
    rng = np.random.default_rng(4)
    mech = make_mechanism(name, 700, 40, salt=0xFFFFFFF0, **params)
    for _ in range(60):
        words = rng.integers(0, W, mech.random_words, dtype=np.uint64).tolist()
        if mech.set_valued:
            size = int(rng.integers(0, 5))
            value = [int(x) for x in rng.choice(np.array([5, 1, 9, 33, 70, 71, 2**32 - 1]), size,
                                                replace=False)]
        elif name == "lcm":
            value = {"key": int(rng.integers(0, W)), "high": bool(rng.integers(0, 2))}
        else:
            value = int(rng.integers(0, W))
        assert mech.reference_report(value, words, 3) == mech.c_report(value, words, 3)


# --- kernels ----------------------------------------------------------------------------------

def hadamard(m):
    idx = np.arange(m)
    parity = np.array([[bin(a & b).count("1") & 1 for b in idx] for a in idx])
    return 1 - 2 * parity


@pytest.mark.parametrize("m", [1, 2, 4, 8, 32, 64])
def test_fwht_matches_dense_hadamard_product(m):
    rng = np.random.default_rng(m)
    ints = rng.integers(-10**6, 10**6, size=(3, m), dtype=np.int64)
    floats = rng.normal(size=(3, m))
    h = hadamard(m)
    assert np.array_equal(fwht(ints.copy()), ints @ h)
    assert np.allclose(fwht(floats.copy()), floats @ h)
    assert np.array_equal(fwht(fwht(ints.copy())), m * ints)


def test_fwht_rejects_bad_input():
    with pytest.raises(ValueError):
        fwht(np.zeros((2, 6), np.int64))
    with pytest.raises(TypeError):
        fwht(np.zeros((2, 4), np.int32))


def test_sh_decoder_matches_direct_sum():
    mech = make_mechanism("sh", 1000, 100, salt=0xFFFFFFFE, m=16, l=1)
    sketch = mech.new_sketch()
    sketch.z = np.random.default_rng(3).integers(-50, 50, 16).astype(np.int64)
    sketch.z[[2, 9]] = 0
    keys = np.array([0, 1, 7, 99, 2**32 - 1] + list(range(1000, 1700)), np.uint32)
    direct = [sum(int(sketch.z[t]) * (1 if protocol.keyed_hash(int(key), protocol.row_seed(
        mech.salt, t)) < 2**31 else -1) for t in range(16)) for key in keys]
    assert sketch.correlations(keys).tolist() == direct


@pytest.mark.parametrize("kc", [1, 2, 3, 8, 255, 1000])
def test_c_candidate_sort_matches_mechanism(kc):
    cands = np.random.default_rng(kc).choice(W, kc, replace=False).astype(np.uint32)
    keys, index = np.zeros(kc, np.uint32), np.zeros(kc, np.uint32)
    lib.ldp_srappor_sort_candidates(ptr(cands), kc, ptr(keys), ptr(index))
    mech = make_mechanism("srappor", 1000, 10, candidates=cands)
    assert np.array_equal(keys, mech.sorted_candidates)
    assert np.array_equal(index, mech.sorted_index)


def test_c_accumulators_skip_out_of_range_bodies():
    rows = np.zeros(4, np.int64)
    ones = np.zeros((4, 8), np.int64)
    bodies = np.array([[4, 0, 0xFF], [3, 0, 0x81]], np.uint8)
    assert lib.ldp_cms_accumulate(ptr(bodies), 2, 3, 4, 8, ptr(rows), ptr(ones)) == 1
    assert rows.tolist() == [0, 0, 0, 1] and ones[3].tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    sums = np.zeros((2, 4), np.int64)
    bodies = np.array([[1, 0, 4, 0, 1], [0, 0, 1, 0, 2], [2, 0, 0, 0, 1], [1, 0, 3, 0, 0]],
                      np.uint8)
    assert lib.ldp_hcms_accumulate(ptr(bodies), 4, 5, 2, 4, ptr(sums)) == 3
    assert sums.tolist() == [[0, 0, 0, 0], [0, 0, 0, -1]]
    z = np.zeros(4, np.int64)
    bodies = np.array([[4, 0, 0, 0, 1], [3, 0, 0, 0, 1], [0, 0, 0, 1, 0]], np.uint8)
    assert lib.ldp_sh_accumulate(ptr(bodies), 3, 5, 4, ptr(z)) == 2
    assert z.tolist() == [0, 0, 0, 1]


# --- input validation -------------------------------------------------------------------------

def test_parameter_and_input_errors():
    with pytest.raises(ConfigError) as info:
        make_mechanism("hcms", 1000, 10, m=48)
    assert info.value.field == "m"
    with pytest.raises(ConfigError) as info:
        make_mechanism("cms", 1000, 10, k=0)
    assert info.value.field == "k"
    for name in ("cms", "hcms", "sh", "srappor", "lcm"):
        with pytest.raises(ConfigError) as info:
            make_mechanism(name, 1000, 10, g=4)
        assert info.value.field == "g"
    with pytest.raises(ConfigError) as info:
        make_mechanism("srappor", 1000, 10, candidates=[3, 3])
    assert info.value.field == "candidates"
    with pytest.raises(ConfigError) as info:
        make_mechanism("srappor", 1000, 1 << 20)
    assert info.value.field == "candidates"
    sh = make_mechanism("sh", 1000, 10, m=16)
    with pytest.raises(ValueError):
        sh.perturb_batch([[1, 2, 1]], np.random.default_rng(0))
    with pytest.raises(ValueError):
        sh.perturb_batch(np.array([[4, 4]]), np.random.default_rng(0))
    with pytest.raises(ValueError):
        sh.reference_report([7, 7], [0, 0, 0])
    with pytest.raises(ValueError):
        key_sets(KeySets(np.array([1, 2], np.uint32), np.array([0, 3], np.uint64)))
    lcm = make_mechanism("lcm", 1000, 10, k=2, m=8)
    with pytest.raises(ValueError):
        lcm.new_sketch().estimate([1, 2], theta=1.5)
    with pytest.raises(ValueError):
        lcm.perturb_batch(np.array([1, 2], np.uint32), np.random.default_rng(0), high=[True])


def test_sets_are_checked_once_and_what_is_taken_from_checked_sets_stays_checked():
    """key_sets marks the sets it checked (DistinctSets) and returns them unchanged; sets taken
    from them (take_sets, trim_sets, chunk_of) keep the mark, plain KeySets are checked."""
    from ldpfleet.core.mechanisms.sh import DistinctSets, take_sets
    from ldpfleet.core.protocols.ldpminer import trim_sets
    from ldpfleet.eval.twophase import chunk_of
    plain = KeySets(np.array([1, 2, 3, 1], np.uint32), np.array([0, 3, 4], np.uint64))
    checked = key_sets(plain)
    assert isinstance(checked, DistinctSets) and key_sets(checked) is checked
    assert isinstance(key_sets(np.array([[1, 2], [2, 3]])), DistinctSets)
    for derived in (take_sets(checked, [1, 1, 0]), trim_sets(checked, [1, 3]),
                    chunk_of(checked, 1, 2)):
        assert isinstance(derived, DistinctSets)
    assert not isinstance(take_sets(plain, [0]), DistinctSets)
    with pytest.raises(ValueError, match="twice"):  # unchecked sets taken from unchecked ones
        key_sets(take_sets(KeySets(np.array([5, 5], np.uint32), np.array([0, 2], np.uint64)), [0]))


def test_srappor_non_candidates_are_not_estimated():
    mech = make_mechanism("srappor", 1000, 1000, l=1, candidates=[10, 20])
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch([[10], [30], []], np.random.default_rng(0)))
    est = sketch.estimate([20, 30, 10])
    assert np.isnan(est[1]) and np.isfinite(est[[0, 2]]).all()


def test_key_set_forms_agree():
    lists = [[3, 1], [], [7], [2**32 - 1, 0, 5]]
    flat = KeySets(np.array([3, 1, 7, 2**32 - 1, 0, 5], np.uint32),
                   np.array([0, 2, 2, 3, 6], np.uint64))
    a, b = key_sets(lists), key_sets(flat)
    assert np.array_equal(a.keys, b.keys) and np.array_equal(a.offsets, b.offsets)
    mech = make_mechanism("sh", 1000, 10, m=64, l=2)
    ra = mech.perturb_batch(lists, np.random.default_rng(1))
    rb = mech.perturb_batch(flat, np.random.default_rng(1))
    assert np.array_equal(ra, rb)
    two_d = np.array([[1, 2], [3, 4]], np.uint32)
    assert np.array_equal(mech.perturb_batch(two_d, np.random.default_rng(2)),
                          mech.perturb_batch([[1, 2], [3, 4]], np.random.default_rng(2)))


# --- exact expectation of the estimators (enumerated report distributions) --------------------

def assert_exact(got, expected):
    """Equal up to float rounding (far below the 2^-32 steps of the realised probabilities)."""
    assert np.allclose(got, expected, rtol=0, atol=1e-12), (got, expected)


def exact_expectation(mech, dist, keys, **estimate_kw):
    """E[estimate(keys)] for ONE user whose body distribution is `dist` ({body: weight})."""
    total = sum(dist.values())
    header = mech.header(0)
    out = np.zeros(len(keys))
    for body, weight in dist.items():
        sketch = mech.new_sketch()
        sketch.update(header + body)
        out += weight / total * sketch.estimate(keys, **estimate_kw)
    return out


def collision_share(mech, u, d):
    """(1/k) sum_j [h_j(u) == h_j(d)]: a user with item u adds this to E S(d) (fixed hashes)."""
    def col(key, j):
        return protocol.bucket(protocol.keyed_hash(key, protocol.row_seed(mech.salt, j)), mech.m)
    return sum(col(u, j) == col(d, j) for j in range(mech.k)) / mech.k


def bucket_weights(n):
    return [protocol.bucket_count(r, n) / W for r in range(n)]


KEYS_SMALL = [0, 1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("name,k,m", [("cms", 3, 3), ("cms", 2, 4), ("hcms", 3, 4), ("lcm", 3, 5)])
def test_sketch_estimators_exactly_unbiased_per_user(name, k, m):
    """Theorem 2 / Apple's unbiasedness, exactly: with fixed hash functions one user holding u
    adds E f^(d) = ([u == d] + c(u, d) - gamma) / (1 - gamma), c = share of rows where u and d
    collide, whose mean over random hashes is 0 for u != d; a high-frequent LCM user adds 0."""
    mech = make_mechanism(name, 1500, 100, salt=0xFFFFFFFF, campaign_id=0, phase=1, k=k, m=m)
    if name == "hcms":
        dists = hcms_dists(KEYS_SMALL, k, m, mech.t_rr, mech.salt)
        gamma = 1.0 / m
    else:
        points = [bucket_points(k)] + [threshold_points(mech.t_flip)] * m
        dists = [distribution(cms_run(u, False, k, m, mech.t_flip, mech.salt), points)
                 for u in KEYS_SMALL]
        gamma = sum(p * p for p in bucket_weights(m))
    for u, dist in zip(KEYS_SMALL, dists):
        expected = [((u == d) + (collision_share(mech, u, d) if u != d else 0) - gamma)
                    / (1 - gamma) for d in KEYS_SMALL]
        assert_exact(exact_expectation(mech, dist, KEYS_SMALL), expected)
    if name == "lcm":
        points = [bucket_points(k)] + [threshold_points(mech.t_flip)] * m
        high = distribution(cms_run(0, True, k, m, mech.t_flip, mech.salt), points)
        assert_exact(exact_expectation(mech, high, KEYS_SMALL), 0)
        assert_exact(exact_expectation(mech, high, KEYS_SMALL, theta=1.0), 0)


@pytest.mark.parametrize("name,l,m", [("sh", 1, 3), ("sh", 2, 4), ("sh", 3, 2), ("srappor", 2, 0),
                                      ("srappor", 3, 0)])
def test_set_estimators_exactly_unbiased_per_user(name, l, m):
    """LDPMiner Alg. 1: one user with set v adds E f^(x) = l sum_i rho_i kappa(v_i, x), rho_i =
    cnt_L(i)/2^32 the sampling probability of position i (1/l when l is a power of two and the
    set is not longer than l) and kappa the projection correlation sum_t P(t) phi(t,v_i) phi(t,x)
    (SH; 1 for x = v_i, mean 0 over random hashes) or [v_i == x] (SRAPPOR)."""
    cands = [10, 20, 30]
    keys = cands + [40]
    if name == "sh":
        mech = make_mechanism("sh", 1200, 100, salt=0x51, phase=1, m=m, l=l)
    else:
        mech = make_mechanism("srappor", 1200, 100, phase=1, l=l, candidates=cands)
    sets = [[], [10], [40], [20, 10], [30, 40, 10], [10, 20, 30, 40]]
    if name == "sh":
        dists = sh_dists(sets, l, m, mech.t_rr, mech.salt)
        p_t = bucket_weights(m)

        def phi(key, t):
            return 1 if protocol.keyed_hash(key, protocol.row_seed(mech.salt, t)) < 2**31 else -1

        def kappa(a, b):
            return sum(p_t[t] * phi(a, t) * phi(b, t) for t in range(m))
    else:
        dists = srappor_dists(sets, l, cands, mech.t_flip)

        def kappa(a, b):
            return float(a == b)
    for keys_set, dist in zip(sets, dists):
        rho = bucket_weights(max(l, len(keys_set)))
        expected = [l * sum(rho[i] * kappa(v, x) for i, v in enumerate(keys_set)) for x in keys]
        got = exact_expectation(mech, dist, keys)
        if name == "srappor":
            got, expected = got[:3], expected[:3]  # 40 is not a candidate: not estimated
        assert_exact(got, expected)
