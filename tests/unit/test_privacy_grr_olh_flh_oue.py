"""Exact ε-LDP of the shipped C perturbation of GRR, OLH, FLH and OUE, by enumeration
(protocol_spec/v2 §2; method in the helpers' briefing).

Every decision a kernel takes is `w < T` or `bucket(w, n)`, so the 2^32 values of each word
fall into a few intervals on which the report cannot change. For every combination of intervals
(one per consumed word) the C kernel runs on the intervals' first and on their last words; both
must give the same report (the code is constant on the interval, i.e. uses the thresholds the
test assumes), and the report gets the exact weight prod(interval size) / 2^32 per word. OLH
draws its seed from the whole word range; it is restricted to a few seeds of equal weight (the
ratio bound must hold for every seed). The worst ratio P(r|x) / P(r|x') over reports and input
pairs must be <= e^ε, and in fact <= E_full / 2^64 exactly; the bound is tight, and one step
past the shipped threshold breaks it.
"""
import itertools
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib

W = protocol.WORD
EPS_MILLI = [500, 1000, 2500, 5000]


def threshold_intervals(*thresholds):
    """Word intervals [first, last] (weight = size) cut at the given thresholds."""
    cuts = [0] + sorted(set(thresholds)) + [W]
    return [(a, b - 1, b - a) for a, b in zip(cuts, cuts[1:])]


def bucket_intervals(n):
    """The n intervals of bucket(., n): first word of bucket r is ceil(r W / n)."""
    out = []
    for r in range(n):
        first = -(-r * W // n)
        size = protocol.bucket_count(r, n)
        assert protocol.bucket(first, n) == r and protocol.bucket(first + size - 1, n) == r
        out.append((first, first + size - 1, size))
    assert sum(s for _, _, s in out) == W
    return out


def point_words(values):
    """Single words of equal weight (a restricted seed set)."""
    return [(v, v, 1) for v in values]


def exact_distributions(run, inputs, word_specs):
    """{input: {report body: probability (Fraction)}} for the kernel `run(inputs, words)`.

    `run` takes a u32 array of n inputs and an (n, R) word array and returns (n, body) bytes."""
    combos = list(itertools.product(*word_specs))
    first = np.array([[iv[0] for iv in c] for c in combos], np.uint32)
    last = np.array([[iv[1] for iv in c] for c in combos], np.uint32)
    weights = [math.prod(iv[2] for iv in c) for c in combos]
    total = math.prod(sum(iv[2] for iv in spec) for spec in word_specs)
    dists = {}
    for x in inputs:
        xs = np.full(len(combos), x, np.uint32)
        a, b = run(xs, first), run(xs, last)
        assert np.array_equal(a, b), "kernel output changes inside a word interval"
        dist = defaultdict(int)
        for body, weight in zip(a, weights):
            dist[body.tobytes()] += weight
        assert sum(dist.values()) == total
        dists[x] = {r: Fraction(c, total) for r, c in dist.items()}
    for x, dist in dists.items():
        assert sum(dist.values()) == 1
    return dists


def worst_ratio(dists):
    """max over reports r and inputs x, x' of P(r|x) / P(r|x') (inf if some P(r|x') = 0)."""
    reports = set().union(*dists.values())
    worst = Fraction(1)
    for r in reports:
        probs = [d.get(r, Fraction(0)) for d in dists.values()]
        if min(probs) == 0:
            return math.inf
        worst = max(worst, max(probs) / min(probs))
    return worst


def assert_exact_and_tight(eps_milli, ratio, ratio_past):
    """ratio <= E_full/2^64 <= e^eps (+1e-12), tight to 1e-6, and the next threshold breaks it."""
    bound = Fraction(protocol.exp_lower(eps_milli, 1000), protocol.SCALE)
    e = math.exp(eps_milli / 1000)
    assert ratio <= bound
    assert float(ratio) <= e + 1e-12
    assert float(ratio) > e * (1 - 1e-6)
    assert ratio_past > bound
    assert float(ratio_past) > e + 1e-12


def body_runner(call, body_size):
    def run(xs, words):
        out = np.zeros((xs.size, body_size), np.uint8)
        xs = np.ascontiguousarray(xs)
        words = np.ascontiguousarray(words)
        rc = call(ffi.cast("uint32_t *", xs.ctypes.data), xs.size,
                  ffi.cast("uint32_t *", words.ctypes.data),
                  ffi.cast("uint8_t *", out.ctypes.data), body_size)
        assert rc == 0
        return out
    return run


def grr_ratio(eps_milli, d, t):
    run = body_runner(lambda x, n, w, o, s: lib.ldp_grr_perturb(x, n, d, t, w, o, s), 4)
    dists = exact_distributions(run, range(d), [threshold_intervals(t), bucket_intervals(d - 1)])
    assert len(set().union(*dists.values())) == d
    return worst_ratio(dists)


@pytest.mark.parametrize("eps_milli", EPS_MILLI)
@pytest.mark.parametrize("d", [2, 3, 5, 8])
def test_grr_exact_privacy(eps_milli, d):
    t = protocol.t_grr(eps_milli, d)
    assert_exact_and_tight(eps_milli, grr_ratio(eps_milli, d, t), grr_ratio(eps_milli, d, t + 1))


OLH_SEEDS = [0, 1, 0x9E3779B9, 0xDEADBEEF, 0xFFFFFFFF, 123456789]


def olh_ratio(g, t, d):
    run = body_runner(lambda x, n, w, o, s: lib.ldp_olh_perturb(x, n, g, t, w, o, s), 6)
    specs = [point_words(OLH_SEEDS), threshold_intervals(t), bucket_intervals(g - 1)]
    return worst_ratio(exact_distributions(run, range(d), specs))


@pytest.mark.parametrize("eps_milli", EPS_MILLI)
@pytest.mark.parametrize("g", [2, 3, 4])
def test_olh_exact_privacy(eps_milli, g):
    d = 6
    t = protocol.t_grr(eps_milli, g)
    assert_exact_and_tight(eps_milli, olh_ratio(g, t, d), olh_ratio(g, t + 1, d))


def flh_ratio(g, kp, salt, t, d):
    run = body_runner(lambda x, n, w, o, s: lib.ldp_flh_perturb(x, n, g, kp, salt, t, w, o, s), 6)
    specs = [bucket_intervals(kp), threshold_intervals(t), bucket_intervals(g - 1)]
    dists = exact_distributions(run, range(d), specs)
    for dist in dists.values():  # every seed index is drawn with its exact bucket weight
        for s in range(kp):
            mass = sum(p for r, p in dist.items() if int.from_bytes(r[:4], "little") == s)
            assert mass == Fraction(protocol.bucket_count(s, kp), W)
    return worst_ratio(dists)


@pytest.mark.parametrize("eps_milli", EPS_MILLI)
@pytest.mark.parametrize("g,kp", [(2, 1), (3, 4), (4, 3)])
def test_flh_exact_privacy(eps_milli, g, kp):
    d, salt = 6, 0xFFFFFFFE
    t = protocol.t_grr(eps_milli, g)
    assert_exact_and_tight(eps_milli, flh_ratio(g, kp, salt, t, d), flh_ratio(g, kp, salt, t + 1, d))


def oue_ratio(d, t_p, t_q):
    body = (d + 7) // 8
    run = body_runner(lambda x, n, w, o, s: lib.ldp_oue_perturb(x, n, d, t_p, t_q, w, o, s), body)
    return worst_ratio(exact_distributions(run, range(d), [threshold_intervals(t_q, t_p)] * d))


@pytest.mark.parametrize("eps_milli", EPS_MILLI)
@pytest.mark.parametrize("d", [2, 3, 5])
def test_oue_exact_privacy(eps_milli, d):
    t_q = protocol.t_oue_q(eps_milli)
    assert_exact_and_tight(eps_milli, oue_ratio(d, protocol.T_OUE_P, t_q),
                           oue_ratio(d, protocol.T_OUE_P, t_q - 1))


def test_olh_seed_restriction_still_sees_hash_collisions_and_separations():
    """The restricted seed set exercises both cases OLH's bound rests on: a seed where two
    inputs share a bucket and one where they differ."""
    same = differ = False
    for seed in OLH_SEEDS:
        b = {protocol.bucket(protocol.keyed_hash(x, seed), 3) for x in range(6)}
        same |= len(b) < 6
        differ |= len(b) > 1
    assert same and differ


def test_enumeration_detects_a_kernel_that_ignores_its_interval():
    """The first/last-word check has teeth: a threshold the test does not know about (a cut
    inside an interval) makes first and last words disagree."""
    t = protocol.t_grr(1000, 4)
    run = body_runner(lambda x, n, w, o, s: lib.ldp_grr_perturb(x, n, 4, t, w, o, s), 4)
    with pytest.raises(AssertionError, match="inside a word interval"):
        exact_distributions(run, range(4), [threshold_intervals(t + 5), bucket_intervals(3)])
