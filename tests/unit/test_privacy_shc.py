"""Exact privacy and unbiasedness of `shc` (spec §3 id 12, §3.1): LDPMiner-SH with correlated
phases (Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential
Privacy", CCS 2016, §4.4 "Optimization"), by enumeration over the shipped C kernels as
tests/test_privacy_psfo.py does.

A device's two reports are one run of five words: phase 1 (ldp_shc_perturb1) on w0..w3, phase 2
(ldp_shc_perturb2) on w4 from the phase-1 body's t and y1 and the kernel's own x. Every word is
split into the intervals on which the kernels are claimed to be constant (bucket edges of
bucket(w0, L) and bucket(w1, m), T1 for w2, 2^31 for w3, T_shc_a and T_shc_b for w4); both
kernels run on the all-first words and on each single word moved to its interval's last word,
and must agree (and, where asked, with the plain-Python device face `reference_phase1/2`). Each
joint output (t, y1, y2) is weighted by the product of interval sizes, giving its exact
probability for every set. Over every pair of sets of up to two items (empty set included):
the joint worst ratio is <= E(eps1 + eps2)/S <= e^(eps1+eps2) + 1e-12 (tight at l = 1), the
phase-1 marginal's <= E(eps1)/S and the phase-2 marginal's keep probability is p2. One threshold
step beyond (T_shc_a + 1 or T_shc_b + 1, at an eps where W - A or W - B is small enough for one
step to matter) breaks the joint bound: the check can fail.
"""
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.core.kernels import ptr
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.shc import ShcMechanism
from test_privacy_psfo import bucket_word, distribution, ordered_sets, threshold_word, worst_ratio

W = protocol.WORD
S = protocol.SCALE
ITEMS = [0, 1, 2, 3]
SETS = ordered_sets(ITEMS, 2)  # 1 empty + 4 singletons + 12 ordered pairs
SALT = 0x51


def mechanisms(eps1, eps2, l, m):
    common = dict(domain_size=16, salt=SALT, campaign_id=3, l=l, m=m)
    return (ShcMechanism(eps1, phase=1, **common),
            ShcMechanism(eps2, phase=2, eps1_milli=eps1, **common))


def joint_run(keys, params, refs=None):
    """run(words (N, 5)) -> (N, 10): phase-1 body then phase-2 body of one set through the C
    kernels with `params` (an ldp_shc_params *); with `refs` (phase-1, phase-2 mechanisms) every
    row is also made by the Python device face and compared."""
    def run(words):
        n = words.shape[0]
        w1 = np.ascontiguousarray(words[:, :4])
        w2 = np.ascontiguousarray(words[:, 4])
        flat = np.tile(np.asarray(keys, np.uint32), n)
        offsets = np.arange(n + 1, dtype=np.uint64) * np.uint64(len(keys))
        out1 = np.zeros((n, 5), np.uint8)
        x = np.zeros(n, np.uint8)
        lib.ldp_shc_perturb1(params, ptr(flat) if flat.size else ffi.NULL, ptr(offsets), n,
                             ptr(w1), ptr(out1), 5, ptr(x))
        t = np.ascontiguousarray(out1[:, :4]).view("<u4").ravel().copy()
        y1 = np.ascontiguousarray(out1[:, 4])
        out2 = np.zeros((n, 5), np.uint8)
        lib.ldp_shc_perturb2(params, ptr(t), ptr(y1), ptr(x), n, ptr(w2), ptr(out2), 5)
        if refs is not None:
            for row in range(n):
                ws = [int(v) for v in words[row]]
                rep1, xr = refs[0].reference_phase1(keys, ws[:4])
                assert rep1[12:] == out1[row].tobytes() and xr == x[row], (keys, ws)
                rep2 = refs[1].reference_phase2({"t": int(t[row]), "y1": int(y1[row]),
                                                 "x": xr}, ws[4:])
                assert rep2[12:] == out2[row].tobytes(), (keys, ws)
        return np.concatenate([out1, out2], axis=1)
    return run


def c_params(mech2, t_a=None, t_b=None):
    """The kernels' parameters of a phase-2 mechanism, thresholds optionally overridden."""
    return ffi.new("ldp_shc_params *", {"l": mech2.l, "salt": mech2.salt, "m": mech2.m,
                                        "t_rr": mech2.t_rr,
                                        "t_a": mech2.t_a if t_a is None else t_a,
                                        "t_b": mech2.t_b if t_b is None else t_b})


def joint_dists(sets, mech2, params, refs=None):
    """{10-byte joint body: integer weight} per set."""
    out = []
    for keys in sets:
        per_word = [bucket_word(max(mech2.l, len(keys))), bucket_word(mech2.m),
                    threshold_word(mech2.t_rr), threshold_word(protocol.T_HALF),
                    threshold_word(params.t_a, params.t_b)]
        out.append(distribution(joint_run(keys, params, refs), per_word))
    return out


def marginal(dist, part):
    """Phase-1 (part 0) or phase-2 (part 1) marginal of a joint distribution."""
    out = defaultdict(int)
    for body, weight in dist.items():
        out[body[5 * part:5 * part + 5]] += weight
    return dict(out)


def bound(eps_milli):
    return Fraction(protocol.exp_lower(eps_milli, 1000), S)


def assert_within(eps_milli, ratio, tight=False):
    e = math.exp(eps_milli / 1000)
    assert ratio <= bound(eps_milli) and float(ratio) <= e + 1e-12, (float(ratio), e)
    if tight:  # G = E2 - (E2 >> 16) leaves 2^-16 of room for rounding
        assert float(ratio) > e * (1 - 1e-4), (float(ratio), e)


EPS_PAIRS = [(500, 1500), (1000, 1000), (2000, 500), (1, 1), (3000, 4000)]


@pytest.mark.parametrize("eps1,eps2", EPS_PAIRS)
@pytest.mark.parametrize("l,m", [(1, 2), (1, 3), (2, 2), (2, 3)])
def test_shc_joint_and_phase1_exact_privacy_over_all_sets(eps1, eps2, l, m):
    """The joint (t, y1, y2) of both reports is (eps1 + eps2)-LDP exactly over every pair of
    sets of up to two items (empty set, padded, exact and sampled sets), tight at l = 1; phase 1
    alone is eps1-LDP, tight at l = 1; phase 2 alone keeps x with probability exactly p2."""
    _, mech2 = mechanisms(eps1, eps2, l, m)
    dists = joint_dists(SETS, mech2, c_params(mech2))
    assert_within(eps1 + eps2, worst_ratio(dists), tight=l == 1)
    assert_within(eps1, worst_ratio([marginal(d, 0) for d in dists]), tight=l == 1)
    p2 = protocol.shc_keep_probability(eps1, eps2)
    phase2 = worst_ratio([marginal(d, 1) for d in dists])
    assert phase2 <= p2 / (1 - p2) <= bound(eps1 + eps2)
    if l == 1:
        assert phase2 == p2 / (1 - p2)
    for d in dists:  # the phase-2 body repeats the phase-1 row
        assert all(body[:4] == body[5:9] for body in d)


def test_shc_python_device_face_is_constant_on_the_word_intervals():
    """The plain-Python reference gives the kernels' bodies (and x) at every enumerated word."""
    mech1, mech2 = mechanisms(1000, 2000, 2, 3)
    dists = joint_dists(SETS[:9], mech2, c_params(mech2), refs=(mech1, mech2))
    assert_within(3000, worst_ratio(dists))


def test_shc_mechanism_thresholds_are_the_spec_ones():
    """The mechanism (and so the kernels it drives) uses T_rr(eps1), T_shc_a, T_shc_b."""
    mech1, mech2 = mechanisms(700, 1300, 2, 4)
    assert mech1.t_rr == mech2.t_rr == protocol.t_rr(700)
    assert (mech2.t_a, mech2.t_b) == (protocol.t_shc_a(700, 1300), protocol.t_shc_b(700, 1300))
    p = mech2._cparams
    assert (p.l, p.salt, p.m, p.t_rr, p.t_a, p.t_b) == (2, SALT, 4, mech2.t_rr, mech2.t_a,
                                                        mech2.t_b)


def tight_step_pair():
    """An (eps1, eps2) where T_shc_b + 1 (and T_shc_a + 1) push the joint counts' ratio past
    E(eps1 + eps2)/S: found by the closed form of spec §3.1's four ratios."""
    for eps1, eps2 in [(500, 13000), (1000, 13000), (500, 14000)]:
        t1, a, b = protocol.shc_thresholds(eps1, eps2)
        e2 = bound(eps1 + eps2)

        def worst(a_, b_):
            return max(Fraction(t1 * a_, (W - t1) * (W - b_)),
                       Fraction((W - t1) * b_, t1 * (W - a_)))
        if worst(a, b) <= e2 < worst(a, b + 1) and worst(a + 1, b) > e2:
            return eps1, eps2
    raise AssertionError("no eps pair where one threshold step matters")


def test_shc_privacy_check_has_teeth():
    """One threshold step beyond the spec's (A + 1 or B + 1), at eps where W - B is small
    enough for one step to matter, breaks the joint bound; the spec's thresholds pass there."""
    eps1, eps2 = tight_step_pair()
    _, mech2 = mechanisms(eps1, eps2, 1, 2)
    sets = SETS[1:5]
    assert_within(eps1 + eps2, worst_ratio(joint_dists(sets, mech2, c_params(mech2))))
    for params in (c_params(mech2, t_b=mech2.t_b + 1), c_params(mech2, t_a=mech2.t_a + 1)):
        ratio = worst_ratio(joint_dists(sets, mech2, params))
        assert ratio > bound(eps1 + eps2)


def test_shc_ok_refuses_what_the_enumeration_would_break():
    """shc_ok holds for the spec's thresholds and fails for the shifted ones (its four
    inequalities are the enumeration's ratios)."""
    eps1, eps2 = tight_step_pair()
    t1, a, b = protocol.shc_thresholds(eps1, eps2)
    e2 = protocol.exp_lower(eps1 + eps2, 1000)

    def ok(a_, b_):
        return (t1 * a_ * S <= e2 * (W - t1) * (W - b_) and (W - t1) * (W - b_) * S <= e2 * t1 * a_
                and t1 * (W - a_) * S <= e2 * (W - t1) * b_
                and (W - t1) * b_ * S <= e2 * t1 * (W - a_))
    assert protocol.shc_ok(eps1, eps2) and ok(a, b)
    assert not ok(a, b + 1) and not ok(a + 1, b)


# --- unbiasedness (exact, per user) and accuracy (statistical, fixed seed) -------------------

def bucket_weights(n):
    return [Fraction(protocol.bucket_count(r, n), W) for r in range(n)]


def phi(key, t):
    return 1 if protocol.keyed_hash(key, protocol.row_seed(SALT, t)) < 2 ** 31 else -1


@pytest.mark.parametrize("l,m", [(1, 3), (2, 4), (3, 2)])
def test_shc_phase2_estimate_exactly_unbiased_per_user(l, m):
    """LDPMiner Alg. 1 at p2: one user with set v adds E f2^(x) = l sum_i rho_i kappa(v_i, x)
    (rho_i = cnt_L(i)/2^32, kappa(a, b) = sum_t P(t) phi(t, a) phi(t, b)); the dummy adds 0
    (its x is a fair bit). Computed exactly from the enumerated joint distribution."""
    _, mech2 = mechanisms(1200, 800, l, m)
    sets = [[], [10], [40], [20, 10], [30, 40, 10], [10, 20, 30, 40]]
    keys = [10, 20, 30, 40, 50]
    p_t = bucket_weights(m)
    p2 = protocol.shc_keep_probability(1200, 800)
    for keys_set, dist in zip(sets, joint_dists(sets, mech2, c_params(mech2))):
        total = sum(dist.values())
        rho = bucket_weights(max(l, len(keys_set)))
        for x in keys:
            got = sum(Fraction(w, total) * (1 if b[9] else -1) * phi(x, int.from_bytes(b[5:9],
                                                                                     "little"))
                      for b, w in dist.items()) * l / (2 * p2 - 1)
            want = l * sum(rho[i] * sum(p_t[t] * phi(v, t) * phi(x, t) for t in range(m))
                           for i, v in enumerate(keys_set))
            assert got == want, (keys_set, x)


def skewed_sets(n, d, size, rng):
    """(n, size) distinct items per user, Zipf(1.1)-weighted without replacement."""
    p = 1.0 / np.arange(1, d + 1) ** 1.1
    noisy = np.log(p / p.sum()) + rng.gumbel(size=(n, d))
    return np.argpartition(-noisy, size - 1, axis=1)[:, :size].astype(np.uint32)


def shc_run(sets, eps1, eps2, l, m, salt, rng):
    """(phase-1 sketch, phase-2 sketch) of one simulated shc campaign over `sets`."""
    from ldpfleet.core.mechanisms.shc import memo_from_reports
    common = dict(domain_size=64, salt=salt, campaign_id=1, l=l, m=m)
    mech1 = ShcMechanism(eps1, phase=1, **common)
    mech2 = ShcMechanism(eps2, phase=2, eps1_milli=eps1, **common)
    reports, x = mech1.perturb_phase1(sets, rng)
    s1, s2 = mech1.new_sketch(), mech2.new_sketch()
    s1.update(reports)
    s2.update(mech2.perturb_phase2(memo_from_reports(reports, x), rng))
    return s1, s2


def test_shc_phase2_estimates_unbiased_within_their_variance():
    """Fixed seed: the phase-2 estimates of the 10 heaviest items lie within Z sd of the truth,
    sd from `item_variances` at the true frequencies, for every repetition (fresh salts)."""
    n, d, l, m, z = 40000, 64, 2, 1024, 5.0
    rng = np.random.default_rng(20240611)
    sets = skewed_sets(n, d, l, rng)
    f = np.bincount(sets.ravel(), minlength=d) / n
    heavy = np.argsort(-f)[:10].astype(np.uint32)
    errors = []
    for rep in range(4):
        s1, s2 = shc_run(sets, 1000, 1000, l, m, 0x1000 + 7919 * rep, rng)
        assert s1.n == s2.n == n
        sd = np.sqrt(s2.mechanism.item_variances(n, f[heavy]))
        err = s2.estimate(heavy) / n - f[heavy]
        assert np.all(np.abs(err) <= z * sd), (err, sd)
        errors.append(err / sd)
    # standardised squared errors average ~1 (40 near-Gaussian terms: sd of the mean ~0.22)
    assert 0.3 < float(np.mean(np.square(errors))) < 2.0


def test_shc_phase2_is_more_accurate_than_sh_at_eps2():
    """The phase-2 sign at p2 has a smaller sd than plain sampling SH at eps2: by the variance
    formula (ratio (2 p_sh - 1) / (2 p2 - 1) for the dominant term) and measured over repeats
    on the same sets."""
    n, d, l, m, reps = 5000, 64, 2, 256, 60
    eps1, eps2 = 1000, 1000
    shc2 = make_mechanism("shc", eps2, d, l=l, m=m, phase=2, eps1_milli=eps1)
    sh = make_mechanism("sh", eps2, d, l=l, m=m, phase=2)
    v_shc, v_sh = shc2.variance(n), sh.variance(n)
    assert v_shc < 0.5 * v_sh
    rng = np.random.default_rng(7)
    sets = skewed_sets(n, d, l, rng)
    key = np.array([int(np.bincount(sets.ravel(), minlength=d).argmax())], np.uint32)
    est_shc, est_sh = [], []
    for rep in range(reps):
        salt = 0x2000 + 104729 * rep
        est_shc.append(shc_run(sets, eps1, eps2, l, m, salt, rng)[1].estimate(key)[0] / n)
        mech = make_mechanism("sh", eps2, d, l=l, m=m, salt=salt, phase=2)
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(sets, rng))
        est_sh.append(sketch.estimate(key)[0] / n)
    sd_shc, sd_sh = float(np.std(est_shc)), float(np.std(est_sh))
    assert sd_shc < 0.8 * sd_sh, (sd_shc, sd_sh)
    assert 0.6 < sd_shc / math.sqrt(shc2.variance(n)) < 1.5
