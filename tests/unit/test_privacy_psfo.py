"""Exact privacy of the padding-and-sampling oracles PSGRR and PSOLH (spec §3 ids 10, 11; Wang,
Li, Jha, IEEE S&P 2018 §4) by enumeration over the shipped C kernels, as
tests/test_privacy_sketches.py does for SH and SRAPPOR.

Every random word the kernel consumes is split into the intervals on which it is claimed to be
constant (bucket edges ceil(r 2^32 / n) of bucket(w0, L), the keep threshold, the buckets of
the "other" choice; PSOLH's seed word runs over a fixed seed set, as in the OLH test, since
P(y | seed, x) must be bounded for every seed). For every combination of intervals the kernel
runs on the all-first words and on each single word moved to its interval's last word; all must
give the same body, and the plain-Python reference (`reference_report`) must give it too. Each
body is weighted by the product of interval sizes (exact integers), giving P(body | set)
exactly; the worst ratio over bodies and every pair of sets (the empty set, sets with items
that are not candidates or outside the int domain, padded, exact and sampled sets) must be
<= E_full / 2^64 <= e^eps + 1e-12, tight at l = 1, and the next threshold must break it.
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
from ldpfleet.core.mechanisms.psfo import PsGrrMechanism, PsOlhMechanism

W = protocol.WORD
OLH_SEEDS = [0, 1, 0x9E3779B9, 0xDEADBEEF, 0xFFFFFFFF, 123456789]
CANDIDATES = [30, 10, 20]
NON_CANDIDATES = [40, 50]


def intervals(points):
    """[(first, last, size)] between consecutive breakpoints."""
    points = sorted(set(points))
    return [(a, b - 1, b - a) for a, b in zip(points, points[1:]) if b > a]


def threshold_word(*ts):
    return intervals([0, W, *ts])


def bucket_word(*ns):
    """Intervals on which bucket(., n) is constant for every n in `ns`."""
    return intervals([0, W] + [-((-r * W) // n) for n in ns for r in range(n + 1)])


def point_word(values):
    return [(v, v, 1) for v in values]


def ordered_sets(items, max_size):
    return [list(p) for s in range(max_size + 1) for p in itertools.permutations(items, s)]


def distribution(run, per_word):
    """{body: integer weight} from `run(words (N, R) uint32) -> (N, B)`; weights sum to the
    product of the words' total weights. Checks `run` is constant on every interval."""
    combos = list(itertools.product(*per_word))
    r = len(per_word)
    words = np.empty((len(combos), r + 1, r), np.uint32)
    for c, combo in enumerate(combos):
        words[c, :, :] = [iv[0] for iv in combo]
        for p in range(r):
            words[c, p + 1, p] = combo[p][1]
    bodies = run(words.reshape(-1, r)).reshape(len(combos), r + 1, -1)
    assert (bodies == bodies[:, :1, :]).all(), "kernel output varies inside a word interval"
    dist = defaultdict(int)
    for c, combo in enumerate(combos):
        dist[bodies[c, 0].tobytes()] += math.prod(iv[2] for iv in combo)
    assert sum(dist.values()) == math.prod(sum(iv[2] for iv in w) for w in per_word)
    return dist


def worst_ratio(dists):
    """max over bodies and set pairs of P(body|x)/P(body|x') as a Fraction (inf if some P is 0)."""
    bodies = set().union(*dists)
    worst = Fraction(1)
    totals = [sum(d.values()) for d in dists]
    for b in bodies:
        probs = [Fraction(d.get(b, 0), total) for d, total in zip(dists, totals)]
        if min(probs) == 0:
            return math.inf
        worst = max(worst, max(probs) / min(probs))
    return worst


def assert_exact(eps_milli, ratio, tight):
    bound = Fraction(protocol.exp_lower(eps_milli, 1000), protocol.SCALE)
    e = math.exp(eps_milli / 1000)
    assert ratio <= bound and float(ratio) <= e + 1e-12, (float(ratio), e)
    if tight:
        assert float(ratio) > e * (1 - 1e-6), (float(ratio), e)


def assert_broken(eps_milli, ratio):
    assert ratio > Fraction(protocol.exp_lower(eps_milli, 1000), protocol.SCALE)
    assert float(ratio) > math.exp(eps_milli / 1000) + 1e-12


def cand_arrays(candidates):
    if candidates is None:
        return None, None
    cand = np.asarray(candidates, np.uint32)
    order = np.argsort(cand, kind="stable")
    return np.ascontiguousarray(cand[order]), np.ascontiguousarray(order.astype(np.uint32))


def set_run(kernel, keys, size, reference=None):
    """run(words) for one set through `kernel(keys, offsets, n, words, out, stride)`; with
    `reference` (a mechanism), every row is also made by its reference_report and compared."""
    def run(words):
        n = words.shape[0]
        words = np.ascontiguousarray(words)
        flat = np.tile(np.asarray(keys, np.uint32), n)
        offsets = np.arange(n + 1, dtype=np.uint64) * np.uint64(len(keys))
        out = np.zeros((n, size), np.uint8)
        kernel(ptr(flat) if flat.size else ffi.NULL, ptr(offsets), n, ptr(words), ptr(out), size)
        if reference is not None:
            for row, w in zip(out, words):
                ref = reference.reference_report(keys, [int(x) for x in w])[protocol.HEADER_SIZE:]
                assert ref == row.tobytes(), (keys, list(w))
        return out
    return run


def psgrr_dists(sets, l, candidates, d, t, reference=None):
    """P(body | set) of PSGRR over `candidates` (None: the int domain 0..d-1) with keep
    threshold t."""
    cs, ci = cand_arrays(candidates)
    kc = d if candidates is None else len(candidates)

    def kernel(keys, offsets, n, words, out, stride):
        lib.ldp_psgrr_perturb(keys, offsets, n, l, ffi.NULL if cs is None else ptr(cs),
                              ffi.NULL if ci is None else ptr(ci), kc, t, words, out, stride)
    return [distribution(set_run(kernel, keys, 4, reference),
                         [bucket_word(max(l, len(keys))), threshold_word(t), bucket_word(kc)])
            for keys in sets]


def psolh_dists(sets, l, candidates, d, g, t, reference=None):
    cs, ci = cand_arrays(candidates)
    kc = d if candidates is None else len(candidates)

    def kernel(keys, offsets, n, words, out, stride):
        lib.ldp_psolh_perturb(keys, offsets, n, l, ffi.NULL if cs is None else ptr(cs),
                              ffi.NULL if ci is None else ptr(ci), kc, g, t, words, out, stride)
    return [distribution(set_run(kernel, keys, 6, reference),
                         [bucket_word(max(l, len(keys))), point_word(OLH_SEEDS), threshold_word(t),
                          bucket_word(g - 1, g)])
            for keys in sets]


def phase_sets(listed, kc, d):
    """(items, sets): phase 2 over the first kc CANDIDATES with two non-candidates; phase 1 over
    the int domain 0..d-1 with two keys outside it."""
    items = CANDIDATES[:kc] + NON_CANDIDATES if listed else list(range(d)) + [d, 1000]
    return items, ordered_sets(items, 3)


# --- PSGRR -----------------------------------------------------------------------------------

@pytest.mark.parametrize("eps_milli", [500, 1000, 2500])
@pytest.mark.parametrize("listed,kc,l", [(True, 3, 1), (True, 3, 2), (True, 2, 3), (True, 1, 2),
                                         (False, 2, 1), (False, 3, 2), (False, 4, 3)])
def test_psgrr_exact_privacy_over_all_sets(eps_milli, listed, kc, l):
    d = 100 if listed else kc
    cands = CANDIDATES[:kc] if listed else None
    _, sets = phase_sets(listed, kc, d)
    t = protocol.t_grr(eps_milli, kc + 1)
    dists = psgrr_dists(sets, l, cands, d, t)
    assert_exact(eps_milli, worst_ratio(dists), tight=l == 1)
    by_set = {tuple(s): dist for s, dist in zip(sets, dists)}
    outside = NON_CANDIDATES if listed else [d, 1000]
    assert by_set[(outside[0],)] == by_set[(outside[1],)] == by_set[()], \
        "a key that is not an item must report the dummy"
    assert len(set().union(*dists)) == kc + 1
    assert_broken(eps_milli, worst_ratio(psgrr_dists(sets[:kc + 2], 1, cands, d, t + 1)))


@pytest.mark.parametrize("listed,kc,l", [(True, 3, 2), (False, 3, 3)])
def test_psgrr_reference_is_constant_on_the_word_intervals(listed, kc, l):
    """The plain-Python reference gives the kernel's body at every enumerated word (so it is
    constant on the same intervals and has the same exact distribution)."""
    d = 100 if listed else kc
    cands = CANDIDATES[:kc] if listed else None
    mech = PsGrrMechanism(1000, d, candidates=cands, l=l)
    _, sets = phase_sets(listed, kc, d)
    dists = psgrr_dists(sets, l, cands, d, mech.t_keep, reference=mech)
    assert_exact(1000, worst_ratio(dists), tight=False)


# --- PSOLH -----------------------------------------------------------------------------------

@pytest.mark.parametrize("eps_milli", [500, 1000, 2500])
@pytest.mark.parametrize("listed,kc,l,g", [(True, 3, 1, 2), (True, 3, 2, 3), (True, 2, 3, 4),
                                           (True, 1, 1, 3), (False, 3, 1, 3), (False, 2, 2, 2)])
def test_psolh_exact_privacy_over_all_sets(eps_milli, listed, kc, l, g):
    d = 100 if listed else kc
    cands = CANDIDATES[:kc] if listed else None
    _, sets = phase_sets(listed, kc, d)
    t = protocol.t_grr(eps_milli, g)
    dists = psolh_dists(sets, l, cands, d, g, t)
    # tight at l = 1 once two real items can hash apart (item vs dummy is p g < e^eps)
    assert_exact(eps_milli, worst_ratio(dists), tight=l == 1 and (kc >= 2 or not listed))
    by_set = {tuple(s): dist for s, dist in zip(sets, dists)}
    if listed:
        assert by_set[(NON_CANDIDATES[0],)] == by_set[(NON_CANDIDATES[1],)] == by_set[()], \
            "a non-candidate must report the dummy"
    if kc >= 2 or not listed:
        assert_broken(eps_milli, worst_ratio(psolh_dists(sets[:4], 1, cands, d, g, t + 1)))


@pytest.mark.parametrize("listed,kc,l,g", [(True, 3, 2, 3), (False, 2, 2, 4)])
def test_psolh_reference_is_constant_on_the_word_intervals(listed, kc, l, g):
    d = 100 if listed else kc
    cands = CANDIDATES[:kc] if listed else None
    mech = PsOlhMechanism(1000, d, candidates=cands, l=l, g=g)
    _, sets = phase_sets(listed, kc, d)
    sets = [s for s in sets if len(s) <= 2]
    dists = psolh_dists(sets, l, cands, d, g, mech.t_keep, reference=mech)
    assert_exact(1000, worst_ratio(dists), tight=False)


def test_psolh_seed_set_sees_collisions_and_separations():
    """The restricted seed set exercises both cases OLH's bound rests on."""
    same = differ = False
    for seed in OLH_SEEDS:
        b = [protocol.bucket(protocol.keyed_hash(x, seed), 3) for x in CANDIDATES]
        same |= len(set(b)) < len(b)
        differ |= len(set(b)) > 1
    assert same and differ


def test_enumeration_detects_a_kernel_that_ignores_its_interval():
    t = protocol.t_grr(1000, 4)
    with pytest.raises(AssertionError, match="inside a word interval"):
        distribution(set_run(lambda *a: lib.ldp_psgrr_perturb(a[0], a[1], a[2], 1, ffi.NULL, ffi.NULL,
                                                              3, t, *a[3:]), [1], 4),
                     [bucket_word(1), threshold_word(t + 5), bucket_word(3)])
