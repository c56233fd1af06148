"""PEM's per-level estimate (protocols.pem.estimate over OLH reports of prefix keys; Wang, Li,
Jha, "Locally Differentially Private Heavy Hitter Identification", TDSC 2019, §4) is unbiased
with OLH's variance (Wang et al., USENIX Security 2017, §3): 300 replications of a group of
4,000 devices, a third holding a planted prefix; the mean is within 4 standard errors of the
truth and the sample variance within 4 standard errors (sqrt(2/(R-1)) of the ratio) of the
analytic one. Fixed aggregator-side seeds."""
import math

import numpy as np

from ldpfleet.core.protocols import pem


def test_level_estimate_unbiased_with_olh_variance():
    plan = pem.PemPlan(2000, max_len=6, top=1)
    mech = plan.mechanism()
    n, reps, f = 4000, 300, 1.0 / 3.0
    rng = np.random.default_rng(2026)
    codes = pem.encode_batch(["abcdef"] * int(n * f) + ["zz%04d" % i for i in
                                                      range(n - int(n * f))], 6)
    target = pem.prefix_keys(codes[:1], 24)           # "abc": held by the planted third only
    keys = pem.prefix_keys(codes, 24)
    est = np.array([pem.estimate(mech, mech.perturb_batch(keys, rng), target)[0]
                    for _ in range(reps)])
    truth = int(n * f) / n
    var = float(mech.item_variances(n, [truth])[0])
    assert abs(est.mean() - truth) <= 4 * math.sqrt(var / reps)
    ratio = est.var(ddof=1) / var
    assert abs(ratio - 1) <= 4 * math.sqrt(2.0 / (reps - 1)), ratio


def test_flh_level_estimate_unbiased_with_flh_variance():
    """The FLH path (spec §3.5; `pem.flh_estimate` over one group's kp x g table; Cormode,
    Maddock, Maple, VLDB 2021 §4.2): 400 campaigns of a group of 4,000 devices, each with a
    fresh salt (FLH is unbiased over the draw of its public seeds) and fresh device noise. A
    third hold the planted prefix "abc", the rest share 3 other prefixes ("zz0".."zz2"), so the
    public-seed collision term of `FlhMechanism.item_variances` (k' = 64) is about as large as
    OLH's part. Mean within 4 standard errors of the truth, sample variance within 5 standard
    errors of the ratio (sqrt(2/(R-1))) of the analytic one. Fixed seeds."""
    plan = pem.PemPlan(2000, max_len=6, top=1, kp=64)
    n, reps, f = 4000, 400, 1.0 / 3.0
    rng = np.random.default_rng(2027)
    codes = pem.encode_batch(["abcdef"] * int(n * f) + ["zz%04d" % i for i in
                                                      range(n - int(n * f))], 6)
    keys = pem.prefix_keys(codes, 24)
    target = keys[:1]
    uniq, counts = np.unique(keys, return_counts=True)
    truth = int(n * f) / n
    est = np.empty(reps)
    for r in range(reps):
        mech = plan.mechanism(salt=int(rng.integers(0, 1 << 32)))
        est[r] = pem.flh_estimate(mech, pem.flh_counts(mech, mech.perturb_batch(keys, rng)),
                                  target)[0]
    planted = uniq == target[0]
    freqs = np.r_[counts[planted], counts[~planted]] / n   # the planted prefix first
    assert sorted(freqs.tolist()) == [667 / 4000, 0.25, 0.25, truth]
    var = float(mech.item_variances(n, freqs)[0])
    base = float(pem.PemPlan(2000, oracle="olh", g=mech.g).mechanism().item_variances(n, [truth])[0])
    assert 0.5 < (var - base) / base < 2.0            # the collision term is really exercised
    assert abs(est.mean() - truth) <= 4 * math.sqrt(var / reps)
    ratio = est.var(ddof=1) / var
    assert abs(ratio - 1) <= 5 * math.sqrt(2.0 / (reps - 1)), ratio
