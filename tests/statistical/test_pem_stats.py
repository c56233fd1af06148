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
