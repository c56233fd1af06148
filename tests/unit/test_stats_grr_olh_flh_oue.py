"""Statistics and sketch algebra of GRR, OLH, FLH and OUE.

Estimators: unbiased (mean over R repeats within a z-bound from the theoretical variance) and
with the variance `item_variances` predicts (per item, R * MSE / var is chi-square(R) under the
normal approximation of a sum of n independent reports). Seeds are fixed, so these tests are
deterministic; the bounds are what make them meaningful, and each statistical test also checks
that a wrong variance formula (the f = 0 approximation, or FLH without its collision term)
would have been rejected.
"""
import numpy as np
import pytest
from scipy import stats

from ldpfleet.core import kernels, protocol
from ldpfleet.core.errors import ConfigError, ReportFormatError, SketchMismatch
from ldpfleet.core.mechanisms import make_mechanism, mechanism_from_description
from ldpfleet.core.mechanisms.base import Sketch

Z = 4.9                      # two-sided normal tail ~1e-6 per checked item
TAIL = 1e-6                  # chi-square tail for the MSE bounds
COUNTS = np.array([1000, 400, 200, 150, 100, 80, 50, 20])   # n = 2000 users over d = 8 items
N = int(COUNTS.sum())
FREQS = COUNTS / N


def repeated_estimates(make, repeats, seed):
    """(repeats, d) estimated fractions; `make(r)` gives repeat r's mechanism."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(repeats):
        mech = make(r)
        keys = np.repeat(mech.domain_key_array(), COUNTS)
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(keys, rng))
        out.append(sketch.estimate(mech.domain_key_array()) / N)
    return np.array(out)


def check_unbiased_and_variance(est, variances, wrong_variances):
    repeats = est.shape[0]
    err = est - FREQS
    bias_bound = Z * np.sqrt(variances / repeats)
    assert np.all(np.abs(err.mean(axis=0)) <= bias_bound), (err.mean(axis=0), bias_bound)
    lo, hi = stats.chi2.ppf(TAIL / 2, repeats), stats.chi2.isf(TAIL / 2, repeats)
    chi = (err ** 2).sum(axis=0) / variances
    assert np.all((lo <= chi) & (chi <= hi)), (chi / repeats, lo / repeats, hi / repeats)
    wrong = (err ** 2).sum(axis=0) / wrong_variances
    assert np.any((wrong < lo) | (wrong > hi)), "the test cannot tell the wrong variance apart"


def test_grr_unbiased_with_predicted_variance():
    mech = make_mechanism("grr", 1000, 8)
    est = repeated_estimates(lambda r: mech, 4000, seed=11)
    check_unbiased_and_variance(est, mech.item_variances(N, FREQS), np.full(8, mech.variance(N)))


def test_oue_unbiased_with_predicted_variance():
    mech = make_mechanism("oue", 2000, 8)
    est = repeated_estimates(lambda r: mech, 4000, seed=12)
    check_unbiased_and_variance(est, mech.item_variances(N, FREQS), np.full(8, mech.variance(N)))


def test_olh_unbiased_with_predicted_variance():
    mech = make_mechanism("olh", 2000, 8)
    assert mech.g == 8
    est = repeated_estimates(lambda r: mech, 2500, seed=13)
    check_unbiased_and_variance(est, mech.item_variances(N, FREQS), np.full(8, mech.variance(N)))


def test_flh_unbiased_over_public_seeds_with_collision_variance():
    """Each repeat draws a fresh salt (a fresh set of k' public seeds): the estimate is unbiased
    over that draw and its variance includes the collision term."""
    salts = np.random.default_rng(99).integers(0, 2 ** 32, 2500)
    mechs = [make_mechanism("flh", 1000, 8, kp=16, salt=int(s)) for s in salts]
    est = repeated_estimates(lambda r: mechs[r], len(mechs), seed=14)
    m = mechs[0]
    olh_part = make_mechanism("olh", 1000, 8, g=m.g).item_variances(N, FREQS)
    check_unbiased_and_variance(est, m.item_variances(N, FREQS), olh_part)


def test_flh_collision_term_vanishes_for_many_public_seeds():
    m1 = make_mechanism("flh", 1000, 8, kp=16)
    m2 = make_mechanism("flh", 1000, 8, kp=10 ** 6)
    olh = make_mechanism("olh", 1000, 8, g=m1.g)
    # every item but the heavy one collides with the heavy one's 1000 users
    assert np.all(m1.item_variances(N, FREQS)[1:] > 2 * olh.item_variances(N, FREQS)[1:])
    assert np.allclose(m2.item_variances(N, FREQS), olh.item_variances(N, FREQS), rtol=1e-2)


def test_variance_matches_the_textbook_formulas_up_to_integer_rounding():
    """Realised p*, q* are within 2^-30 of Wang et al.'s real-valued ones."""
    e = np.exp(1.5)
    p, q = e / (e + 7), 1 / (e + 7)
    grr = make_mechanism("grr", 1500, 8)
    assert grr.variance(1000) == pytest.approx(q * (1 - q) / (1000 * (p - q) ** 2), rel=1e-7)
    oue = make_mechanism("oue", 1500, 8)
    assert oue.variance(1000) == pytest.approx(4 * e / (1000 * (e - 1) ** 2), rel=1e-7)
    olh = make_mechanism("olh", 1500, 8, g=5)
    p = e / (e + 4)
    assert olh.variance(1000) == pytest.approx((0.2 * 0.8) / (1000 * (p - 0.2) ** 2), rel=1e-7)


# --- sketch algebra ----------------------------------------------------------------------

MECHS = {
    "grr": dict(eps_milli=1000, domain_size=11),
    "oue": dict(eps_milli=1000, domain_size=13),
    "olh": dict(eps_milli=2000, domain_size=50),
    "flh": dict(eps_milli=2000, domain_size=50, kp=64),
}
STRING_DOMAIN = ["cpu", "mem", "disk", "net", "gpu", "fan", "psu"]


def build(name, **over):
    kw = dict(MECHS[name], salt=77, campaign_id=5)
    kw.update(over)
    return make_mechanism(name, kw.pop("eps_milli"), kw.pop("domain_size"), **kw)


def reports_for(mech, n, seed):
    rng = np.random.default_rng(seed)
    keys = mech.domain_key_array()[rng.integers(0, mech.domain_size, n)]
    return mech.perturb_batch(keys, rng, seq_start=seed)


def states_equal(a, b):
    sa, sb = a._state(), b._state()
    return a.n == b.n and sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", sorted(MECHS))
def test_merge_equals_one_sketch_fed_everything(name):
    mech = build(name)
    ra, rb = reports_for(mech, 3000, 1), reports_for(mech, 1700, 2)
    a, b, both = mech.new_sketch(), mech.new_sketch(), mech.new_sketch()
    a.update(ra)
    b.update(rb)
    both.update(np.concatenate([ra, rb]))
    a.merge(b)
    assert states_equal(a, both)
    keys = mech.domain_key_array()
    assert np.array_equal(a.estimate(keys), both.estimate(keys))


@pytest.mark.parametrize("name", sorted(MECHS))
def test_update_in_pieces_and_as_bytes_equals_one_update(name):
    mech = build(name)
    reps = reports_for(mech, 500, 3)
    whole, pieces = mech.new_sketch(), mech.new_sketch()
    whole.update(reps)
    pieces.update([r.tobytes() for r in reps[:200]])
    pieces.update(reps[200:201].tobytes())
    pieces.update(reps[201:])
    assert states_equal(whole, pieces)


@pytest.mark.parametrize("name", sorted(MECHS))
@pytest.mark.parametrize("string_domain", [False, True])
def test_serialize_round_trip(name, string_domain):
    over = {}
    if string_domain:
        over = dict(domain_size=len(STRING_DOMAIN), domain_keys=STRING_DOMAIN)
    mech = build(name, **over)
    sketch = mech.new_sketch()
    sketch.update(reports_for(mech, 800, 4))
    back = Sketch.deserialize(sketch.serialize())
    assert type(back) is type(sketch)
    assert back.mechanism.describe() == mech.describe()
    assert states_equal(back, sketch)
    assert np.array_equal(back.estimate(STRING_DOMAIN if string_domain else [0, 1]),
                          sketch.estimate(STRING_DOMAIN if string_domain else [0, 1]))
    back.merge(sketch)  # still compatible, domain included
    assert back.n == 2 * sketch.n


@pytest.mark.parametrize("name", sorted(MECHS))
def test_merging_incompatible_sketches_raises(name):
    base = build(name).new_sketch()
    changes = [("eps_milli", dict(eps_milli=MECHS[name]["eps_milli"] + 1)),
               ("campaign_id", dict(campaign_id=6)), ("phase", dict(phase=2)),
               ("domain_size", dict(domain_size=MECHS[name]["domain_size"] + 1))]
    if name == "olh":
        changes.append(("params", dict(g=3)))
    if name == "flh":
        changes += [("params", dict(kp=65)), ("salt", dict(salt=78))]
    for field, over in changes:
        with pytest.raises(SketchMismatch) as info:
            base.merge(build(name, **over).new_sketch())
        assert info.value.field == field
    d = MECHS[name]["domain_size"]
    keyed = build(name, domain_keys=list(range(100, 100 + d))).new_sketch()
    with pytest.raises(SketchMismatch) as info:
        base.merge(keyed)
    assert info.value.field == "domain_keys"
    other_keys = build(name, domain_keys=list(range(101, 101 + d))).new_sketch()
    with pytest.raises(SketchMismatch):
        keyed.merge(other_keys)


def corrupt(name, mech, report):
    """(field, corrupted report) pairs for one valid report."""
    r = bytearray(report)
    out = [("version", bytes([1]) + report[1:]), ("flags", report[:3] + b"\x01" + report[4:]),
           ("campaign_id", report[:4] + b"\x09\x00\x00\x00" + report[8:]),
           ("mechanism", report[:1] + bytes([9]) + report[2:])]
    if name == "grr":
        out.append(("y", bytes(r[:12]) + mech.domain_size.to_bytes(4, "little")))
    if name in ("olh", "flh"):
        out.append(("y", bytes(r[:16]) + mech.g.to_bytes(2, "little")))
    if name == "flh":
        out.append(("seed_index", bytes(r[:12]) + mech.kp.to_bytes(4, "little") + bytes(r[16:])))
    if name == "oue":
        r[-1] |= 0x80
        out.append(("padding", bytes(r)))
    return out


@pytest.mark.parametrize("name", sorted(MECHS))
def test_malformed_batch_raises_with_field_and_leaves_sketch_unchanged(name):
    mech = build(name)
    reps = reports_for(mech, 20, 5)
    sketch = mech.new_sketch()
    sketch.update(reps[:10])
    before = sketch.serialize()
    for field, bad in corrupt(name, mech, reps[10].tobytes()):
        batch = reps.copy()
        batch[13] = np.frombuffer(bad, np.uint8)
        with pytest.raises(ReportFormatError) as info:
            sketch.update(batch)
        assert info.value.field == field
        assert "report 13" in str(info.value)
    for bad in (reps[:, :-1], reps[0].tobytes() + b"\x00"):
        with pytest.raises(ReportFormatError) as info:
            sketch.update(bad)
        assert info.value.field == "size"
    assert sketch.serialize() == before


@pytest.mark.parametrize("name", sorted(MECHS))
def test_batch_path_equals_reference_with_the_same_words(name):
    mech = build(name)
    rng = np.random.default_rng(21)
    keys = mech.domain_key_array()[rng.integers(0, mech.domain_size, 300)]
    batch = mech.perturb_batch(keys, np.random.default_rng(7), seq_start=2 ** 32 - 100)
    words = kernels.random_words(np.random.default_rng(7), 300, mech.random_words)
    for i in range(300):
        seq = (2 ** 32 - 100 + i) % 2 ** 32
        assert batch[i].tobytes() == mech.reference_report(int(keys[i]), words[i].tolist(), seq)
    assert mech.check(batch).shape == (300, mech.report_size)


@pytest.mark.parametrize("name", sorted(MECHS))
def test_keys_outside_the_domain_name_the_key(name):
    mech = build(name)
    sketch = mech.new_sketch()
    with pytest.raises(ValueError, match="4000000"):
        sketch.estimate([0, 4000000])
    keyed = build(name, domain_size=len(STRING_DOMAIN), domain_keys=STRING_DOMAIN)
    with pytest.raises(ValueError, match=str(protocol.item_key("ram"))):
        keyed.new_sketch().estimate(["cpu", "ram"])
    if name in ("grr", "oue"):   # their reports carry the domain index
        with pytest.raises(ValueError, match="4000000"):
            mech.perturb_batch(np.array([1, 4000000]), np.random.default_rng(0))


def test_string_domain_estimates_follow_the_domain_order():
    mech = build("grr", eps_milli=5000, domain_size=len(STRING_DOMAIN), domain_keys=STRING_DOMAIN)
    keys = np.array([protocol.item_key("disk")] * 900 + [protocol.item_key("fan")] * 100)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(keys, np.random.default_rng(3)))
    est = sketch.estimate(["disk", "fan", "cpu"])
    assert est[0] > 800 and 50 < est[1] < 150 and abs(est[2]) < 50
    with pytest.raises(ValueError, match="twice"):
        build("grr", domain_size=3, domain_keys=["a", "b", "a"])


def test_parameter_defaults_and_config_errors():
    assert build("olh", eps_milli=2000).g == 8
    assert build("olh", eps_milli=1000).g == 4
    assert build("olh", eps_milli=12000).g == 65536
    flh = build("flh", eps_milli=2000)
    assert (flh.g, flh.kp) == (8, 64) and make_mechanism("flh", 2000, 10).kp == 10000
    described = mechanism_from_description(flh.describe())
    assert described.describe() == flh.describe() and described.config_params() == {"g": 8, "kp": 64}
    for name, over, field in [("olh", dict(g=1), "g"), ("olh", dict(g=65537), "g"),
                              ("flh", dict(kp=0), "kp"), ("flh", dict(g=65536, kp=10 ** 4), "kp"),
                              ("grr", dict(g=4), "g"), ("oue", dict(k=2), "k")]:
        with pytest.raises(ConfigError) as info:
            build(name, **over)
        assert info.value.field == field
