"""GRR bounds EVERY pair of outputs, not only keep-vs-other (spec §2, "every pair of outputs").

The non-kept value goes through bucket(w1, n-1), whose buckets get cmin(n-1) or cmax(n-1) words,
so two inputs whose outputs are both "other" differ by cnt(r1)/cnt(r2) <= cmax/cmin. Near
n - 1 = 2^32 that is 2.0. This test computes the exact probability of every output class for
every input class from the integer counts the shipped code uses (the count of each bucket
checked against the C kernel's `ldp_bucket_count`), at bucket boundaries up to n - 1 = 2^32 - 2,
and asserts: configs `grr_ok` accepts are exactly eps-LDP; the rule is tight (configs it refuses
are not); and every side refuses them naming the field.
"""
import math
from fractions import Fraction

import pytest

from ldpfleet.core import config as campaign_config
from ldpfleet.core import protocol
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.kernels import lib

W = protocol.WORD


def worst_ratio(eps_milli: int, n: int) -> Fraction:
    """max over inputs x1 != x2 and outputs y of P(y | x1) / P(y | x2), exactly, from the
    bucket counts: P(x | x) = T/W, P(y | x) = (W-T)/W * cnt_{n-1}(r)/W for y != x (r the
    bucket that maps to y). Every count class that occurs is found by probing the buckets at
    both ends and one where the count changes (cnt takes the values cmin and cmax only)."""
    t = protocol.t_grr(eps_milli, n)
    counts = {protocol.bucket_count(0, n - 1), protocol.bucket_count(n - 2, n - 1)}
    counts |= {protocol.bucket_count(r, n - 1) for r in (1, (n - 1) // 2, n - 3) if 0 <= r < n - 1}
    assert counts <= {protocol.cmin(n - 1), protocol.cmax(n - 1)}
    for r in (0, n - 2):  # the shipped kernel's counts are the same
        assert lib.ldp_bucket_count(r, n - 1) == protocol.bucket_count(r, n - 1)
    keep = Fraction(t, W)
    others = [Fraction(W - t, W) * Fraction(c, W) for c in counts]
    probs = [keep] + others  # each output's probability under some input
    # y = x1 (kept) against y = "other" for x2, and "other" for both with different buckets
    return max(a / b for a in probs for b in probs)


BOUNDARY_N = [3, 5, 2 ** 16 + 1, 2 ** 16 + 2, 4294968, 4294969, 10 ** 7, 2 ** 31 + 1, 2 ** 31 + 2,
              2 ** 32 - 2, 2 ** 32 - 1]


@pytest.mark.parametrize("eps_milli", [1, 100, 600, 693, 694, 1000, 8000])
@pytest.mark.parametrize("n", BOUNDARY_N)
def test_accepted_grr_configs_are_exactly_eps_ldp(eps_milli, n):
    ratio = worst_ratio(eps_milli, n)
    bound = Fraction(protocol.exp_lower(eps_milli, 1000), protocol.SCALE)
    if protocol.grr_ok(eps_milli, n):
        assert ratio <= bound  # E_full / S <= e^eps (spec §2, every Taylor term rounded down)
    else:
        assert ratio > math.exp(eps_milli / 1000)  # the refused ones really break eps-LDP


def test_the_rule_is_tight_and_refuses_the_issues_examples():
    # (c+1)/c = 2.0 at d = 2^32 - 1 for eps = 0.1 and 0.6; 1.00233 > e^0.001 at d = 10^7
    for eps_milli, d in [(100, 2 ** 32 - 2), (600, 2 ** 32 - 2), (1, 10 ** 7)]:
        n = d + 1  # the mechanism domain includes ⊥
        assert not protocol.grr_ok(eps_milli, n)
        assert worst_ratio(eps_milli, n) > math.exp(eps_milli / 1000)
    assert protocol.grr_ok(1000, 10 ** 7)
    refused = sum(not protocol.grr_ok(e, n) for e in (1, 100, 600, 693) for n in BOUNDARY_N)
    accepted = sum(protocol.grr_ok(e, n) for e in (1, 100, 600, 693) for n in BOUNDARY_N)
    assert refused and accepted


@pytest.mark.parametrize("mechanism,params,field,d", [
    ("grr", {}, "domain.size", 10 ** 7),
    ("grr", {}, "domain.size", 2 ** 32 - 2),
])
def test_aggregator_refuses_configs_over_the_bound_with_the_field(mechanism, params, field, d):
    phases = [{"phase": 1, "mechanism": mechanism, "eps_milli": 1, "params": params}]
    with pytest.raises(ConfigError) as info:
        campaign_config.make_config("big", phases, {"type": "int", "size": d}, 7, campaign_id=1)
    assert info.value.field == field
    ok = [{"phase": 1, "mechanism": mechanism, "eps_milli": 1000, "params": params}]
    campaign_config.make_config("big", ok, {"type": "int", "size": 10 ** 7}, 7, campaign_id=1)


def test_c_kernel_rule_equals_the_reference():
    for e in (1, 100, 600, 693, 694, 1000):
        for n in BOUNDARY_N:
            assert lib.ldp_grr_ok(e, n) == int(protocol.grr_ok(e, n)), (e, n)
