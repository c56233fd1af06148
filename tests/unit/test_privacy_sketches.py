"""Exact privacy of the sketch and set-valued mechanisms (CMS, HCMS, SH, SRAPPOR, LCM) by
enumeration over the shipped C perturbation kernels (briefing's method, protocol v2 §2).

Every random word the kernel consumes is split into the intervals on which the kernel is
claimed to be constant (threshold breakpoints, bucket edges ceil(r 2^32/n)). For every combination
of intervals the kernel runs on the all-first words and on each single word moved to its
interval's last word; all must give the same body (so the thresholds assumed here are the
ones the code uses). Each body is weighted by the product of interval sizes (exact integers
over 2^(32 R)), giving P(body | input) exactly. The worst ratio over bodies and input pairs
must be <= e^eps + 1e-12 and tight; a kernel run with a threshold for a larger epsilon must
violate it (the check has teeth).
"""
import itertools
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.core.kernels import ptr

W = protocol.WORD


def threshold_points(*ts):
    return sorted({0, W, *ts})


def bucket_points(n):
    return sorted({-((-r * W) // n) for r in range(n + 1)})


def intervals(points):
    """[(first, last, size)] between consecutive breakpoints."""
    return [(a, b - 1, b - a) for a, b in zip(points, points[1:]) if b > a]


def distribution(run, word_points):
    """{body: integer weight} (weights sum to W^R) from `run(words (N, R) uint32) -> (N, B)`.

    Checks the kernel is constant on every interval: all-first words vs. each word alone
    moved to its interval's last word."""
    per_word = [intervals(p) for p in word_points]
    combos = list(itertools.product(*per_word))
    r = len(per_word)
    words = np.empty((len(combos), r + 1, r), np.uint32)
    for c, combo in enumerate(combos):
        first = [iv[0] for iv in combo]
        words[c, :, :] = first
        for p in range(r):
            words[c, p + 1, p] = combo[p][1]
    bodies = run(words.reshape(-1, r)).reshape(len(combos), r + 1, -1)
    assert (bodies == bodies[:, :1, :]).all(), "kernel output varies inside a word interval"
    dist = defaultdict(int)
    for c, combo in enumerate(combos):
        dist[bodies[c, 0].tobytes()] += math.prod(iv[2] for iv in combo)
    assert sum(dist.values()) == W ** r
    return dist


def worst_ratio(dists):
    """max over bodies and input pairs of P(body|x)/P(body|x') (inf if some P is 0)."""
    bodies = set().union(*dists)
    worst = Fraction(1)
    totals = [sum(d.values()) for d in dists]
    for b in bodies:
        probs = [Fraction(d.get(b, 0), total) for d, total in zip(dists, totals)]
        lo, hi = min(probs), max(probs)
        if lo == 0:
            return math.inf
        worst = max(worst, hi / lo)
    return float(worst)


def assert_exact_ldp(eps_milli, dists):
    eps = eps_milli / 1000
    ratio = worst_ratio(dists)
    assert ratio <= math.exp(eps) + 1e-12, (ratio, math.exp(eps))
    return ratio


def out_buffer(n, size):
    return np.zeros((n, size), np.uint8)


# --- CMS and LCM ------------------------------------------------------------------------------

def cms_run(key, high, k, m, t, salt):
    size = 2 + (m + 7) // 8

    def run(words):
        n = words.shape[0]
        words = np.ascontiguousarray(words)
        keys = np.full(n, key, np.uint32)
        flags = np.full(n, 1 if high else 0, np.uint8)
        out = out_buffer(n, size)
        lib.ldp_cms_perturb(ptr(keys), ptr(flags), n, salt, k, m, t,
                            ptr(words), ptr(out), size)
        return out
    return run


def cms_dists(inputs, k, m, t, salt):
    points = [bucket_points(k)] + [threshold_points(t)] * m
    return [distribution(cms_run(key, high, k, m, t, salt), points) for key, high in inputs]


KEYS = [0, 1, 2, 3, 1000, 0xFFFFFFFF]


@pytest.mark.parametrize("eps_milli", [250, 1000, 2000, 4000])
@pytest.mark.parametrize("k,m", [(2, 4), (1, 3), (2, 2)])
def test_cms_exact_privacy(eps_milli, k, m):
    t = protocol.t_flip(eps_milli)
    dists = cms_dists([(key, False) for key in KEYS], k, m, t, salt=0x5A17)
    ratio = assert_exact_ldp(eps_milli, dists)
    assert ratio > math.exp(eps_milli / 1000) * (1 - 1e-6), "bound not tight: enumeration too weak"


@pytest.mark.parametrize("eps_milli", [500, 2000, 4000])
def test_lcm_exact_privacy_high_and_low(eps_milli):
    t = protocol.t_flip(eps_milli)
    inputs = [(key, False) for key in KEYS] + [(0, True), (12345, True)]
    dists = cms_dists(inputs, 2, 4, t, salt=99)
    assert dists[-1] == dists[-2], "a high-frequent user's report must not depend on the item"
    ratio = assert_exact_ldp(eps_milli, dists)
    assert ratio > math.exp(eps_milli / 1000) * (1 - 1e-6)
    # all -1 against one low item alone differs in one bit: ratio (W-T)/T = e^(eps/2)
    assert worst_ratio([dists[0], dists[-1]]) <= math.exp(eps_milli / 2000) + 1e-12


@pytest.mark.parametrize("name", ["cms", "lcm"])
def test_bitmap_sketch_privacy_check_has_teeth(name):
    eps_milli = 1000
    t = protocol.t_flip(eps_milli + 200)  # flips too rarely for eps = 1
    inputs = [(key, False) for key in KEYS] + ([(0, True)] if name == "lcm" else [])
    ratio = worst_ratio(cms_dists(inputs, 2, 4, t, salt=7))
    assert ratio > math.exp(eps_milli / 1000) * 1.1


# --- HCMS -------------------------------------------------------------------------------------

def hcms_dists(keys, k, m, t, salt):
    def run_for(key):
        def run(words):
            n = words.shape[0]
            words = np.ascontiguousarray(words)
            keys_arr = np.full(n, key, np.uint32)
            out = out_buffer(n, 5)
            lib.ldp_hcms_perturb(ptr(keys_arr), n, salt, k, m, t, ptr(words), ptr(out), 5)
            return out
        return run
    points = [bucket_points(k), bucket_points(m), threshold_points(t)]
    return [distribution(run_for(key), points) for key in keys]


@pytest.mark.parametrize("eps_milli", [250, 1000, 3000, 6000])
@pytest.mark.parametrize("k,m", [(2, 4), (1, 2), (2, 2)])
def test_hcms_exact_privacy(eps_milli, k, m):
    dists = hcms_dists(KEYS, k, m, protocol.t_rr(eps_milli), salt=0xBEEF)
    ratio = assert_exact_ldp(eps_milli, dists)
    assert ratio > math.exp(eps_milli / 1000) * (1 - 1e-6)


def test_hcms_privacy_check_has_teeth():
    ratio = worst_ratio(hcms_dists(KEYS, 2, 4, protocol.t_rr(1300), salt=0xBEEF))
    assert ratio > math.exp(1.0) * 1.1


# --- set-valued: SH and SRAPPOR ---------------------------------------------------------------

def ordered_sets(items, max_size):
    return [list(p) for s in range(max_size + 1) for p in itertools.permutations(items, s)]


def set_run(kernel, keys, size):
    def run(words):
        n = words.shape[0]
        words = np.ascontiguousarray(words)
        flat = np.tile(np.asarray(keys, np.uint32), n)
        offsets = np.arange(n + 1, dtype=np.uint64) * np.uint64(len(keys))
        out = out_buffer(n, size)
        kernel(ptr(flat) if flat.size else ffi.NULL, ptr(offsets), n,
               ptr(words), ptr(out), size)
        return out
    return run


def sh_dists(sets, l, m, t, salt):
    def kernel(keys, offsets, n, words, out, stride):
        lib.ldp_sh_perturb(keys, offsets, n, l, salt, m, t, words, out, stride)
    dists = []
    for keys in sets:
        points = [bucket_points(max(l, len(keys))), bucket_points(m),
                  threshold_points(t, protocol.T_HALF)]
        dists.append(distribution(set_run(kernel, keys, 5), points))
    return dists


SH_ITEMS = [0, 1, 2, 3]


@pytest.mark.parametrize("eps_milli", [500, 1000, 3000])
@pytest.mark.parametrize("l,m", [(1, 4), (2, 4), (2, 2), (1, 3)])
def test_sh_exact_privacy_over_all_sets(eps_milli, l, m):
    sets = ordered_sets(SH_ITEMS, 3)  # empty (all dummy), padded, exact, truncated sets
    dists = sh_dists(sets, l, m, protocol.t_rr(eps_milli), salt=0x51)
    ratio = assert_exact_ldp(eps_milli, dists)
    if l == 1:
        assert ratio > math.exp(eps_milli / 1000) * (1 - 1e-6)


def test_sh_privacy_check_has_teeth():
    sets = ordered_sets(SH_ITEMS, 2)
    ratio = worst_ratio(sh_dists(sets, 1, 4, protocol.t_rr(1300), salt=0x51))
    assert ratio > math.exp(1.0) * 1.1


CANDIDATES = [30, 10, 20]
NON_CANDIDATES = [40, 50]


def srappor_dists(sets, l, candidates, t):
    cand = np.asarray(candidates, np.uint32)
    order = np.argsort(cand, kind="stable")
    sorted_keys = np.ascontiguousarray(cand[order])
    index = np.ascontiguousarray(order.astype(np.uint32))
    kc = cand.size
    size = (kc + 1 + 7) // 8

    def kernel(keys, offsets, n, words, out, stride):
        lib.ldp_srappor_perturb(keys, offsets, n, l, ptr(sorted_keys), ptr(index), kc, t, words,
                                out, stride)
    dists = []
    for keys in sets:
        points = [bucket_points(max(l, len(keys)))] + [threshold_points(t)] * (kc + 1)
        dists.append(distribution(set_run(kernel, keys, size), points))
    return dists


@pytest.mark.parametrize("eps_milli", [500, 2000, 4000])
@pytest.mark.parametrize("l,kc", [(1, 3), (2, 3), (2, 2), (1, 1)])
def test_srappor_exact_privacy_with_non_candidates(eps_milli, l, kc):
    items = CANDIDATES[:kc] + NON_CANDIDATES
    sets = ordered_sets(items, 2)
    dists = srappor_dists(sets, l, CANDIDATES[:kc], protocol.t_flip(eps_milli))
    ratio = assert_exact_ldp(eps_milli, dists)
    if l == 1:
        assert ratio > math.exp(eps_milli / 1000) * (1 - 1e-6)
    by_set = {tuple(s): d for s, d in zip(sets, dists)}
    assert by_set[(40,)] == by_set[(50,)] == by_set[()], "non-candidates must report the dummy"


def test_srappor_privacy_check_has_teeth():
    sets = ordered_sets(CANDIDATES + NON_CANDIDATES[:1], 1)
    ratio = worst_ratio(srappor_dists(sets, 1, CANDIDATES, protocol.t_flip(1300)))
    assert ratio > math.exp(1.0) * 1.1
