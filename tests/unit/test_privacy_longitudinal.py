"""Exact privacy of the memoised mechanisms' two-level channels (spec §3.2), by enumeration of
the shipped C kernels (tests/test_privacy_grr_olh_flh_oue.py's method).

Every decision of the enrolment and report kernels is `w < T` or `bucket(w, n)`, so each word's
2^32 values fall into a few intervals on which the output cannot change. The permanent step
(enrolment) is enumerated over the words of the one permanent response a value uses (and shown
not to depend on the others), the instantaneous step (report) over its own words; the kernel
runs on every interval's first and last word and must give the same output on both, which
weights it by the interval's size. Then, with the shipped integer thresholds:
* one report: P(report | x) = sum over the permanent response c of P(c | x) P(report | c), and
  the worst ratio over reports and input pairs is <= E(ε1)/S (so <= e^ε1), and one threshold
  step toward less noise breaks it where the check is exact;
* the permanent response: P(c | x) / P(c | x') <= E(ε∞)/S for every memoised value/bucket;
* a whole sequence of reports (three rounds) between value sequences that share the partition
  of the rounds into values/buckets: <= (E(ε∞)/S)^classes, the lifetime bound of the enrolment
  charge; a constant value alone <= E(ε∞)/S however many rounds.
Production parameters (n = 101, g = 256, ...) are checked from the shipped bucket counts and
thresholds: exactly where O(n^3) integers are cheap, else through the bounds the code checks.
"""
import itertools
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms import longitudinal as lon
from ldpfleet.core.mechanisms.lgrr import grr_chain_distribution

from test_privacy_grr_olh_flh_oue import bucket_intervals, threshold_intervals

W = protocol.WORD
S = protocol.SCALE


def e_bound(eps_milli):
    return Fraction(protocol.exp_lower(eps_milli, 1000), S)


def u32(a):
    return np.ascontiguousarray(a, np.uint32)


def p32(a):
    return ffi.cast("uint32_t *", a.ctypes.data)


def p8(a):
    return ffi.cast("uint8_t *", a.ctypes.data)


def weighted(word_specs):
    """(first words, last words, weight) of every combination of one interval per word."""
    for combo in itertools.product(*word_specs):
        yield [iv[0] for iv in combo], [iv[1] for iv in combo], math.prod(iv[2] for iv in combo)


def worst_ratio(dists):
    """max over outputs and input pairs of P(out | x) / P(out | x') (Fractions)."""
    outs = set().union(*dists.values())
    worst = Fraction(1)
    for o in outs:
        ps = [d.get(o, Fraction(0)) for d in dists.values()]
        assert min(ps) > 0, "an output impossible for some input"
        worst = max(worst, max(ps) / min(ps))
    return worst


def normalise(dist, total):
    assert sum(dist.values()) == total
    return {k: Fraction(v, total) for k, v in dist.items()}


# --- the kernels, one device at a time ------------------------------------------------------

def enrol(mech, words):
    out = np.zeros(mech.state_size, np.uint8)
    w = u32(words)
    assert mech._enrol_kernel(1, p32(w), p8(out), mech.state_size) == 0
    return out


def report_body(mech, x, state, words, t_inst=None):
    """One body through the batch kernel; `t_inst` overrides the instantaneous threshold."""
    out = np.zeros(mech.body_size, np.uint8)
    xs, w = u32([x]), u32(words)
    st = np.ascontiguousarray(state, np.uint8)
    name = mech.name
    if name in ("losue", "lsue"):
        t = mech.t_flip if t_inst is None else t_inst
        rc = lib.ldp_lue_perturb(p32(xs), 1, mech.domain_size, t, p8(st), mech.state_size, p32(w),
                                 p8(out), mech.body_size)
    elif name == "lgrr":
        t = mech.t_inst if t_inst is None else t_inst
        rc = lib.ldp_lgrr_perturb(p32(xs), 1, mech.domain_size, t, p8(st), mech.state_size, p32(w),
                                  p8(out), mech.body_size)
    elif name == "loloha":
        t = mech.t_inst if t_inst is None else t_inst
        rc = lib.ldp_loloha_perturb(p32(xs), 1, mech.g, t, p8(st), mech.state_size, p32(w), p8(out),
                                    mech.body_size)
    else:
        t = mech.t_flip if t_inst is None else t_inst
        rc = lib.ldp_lbitmean_perturb(p32(xs), 1, mech.m, mech.s, t, p8(st), mech.state_size, p32(w),
                                      p8(out), mech.body_size)
    assert rc == 0
    return out.tobytes()


FILLS = [lambda i: 0, lambda i: W - 1, lambda i: (i * 2654435761 + 12345) % W]
"""Words of the permanent responses a value does not use: the value's response must not
depend on them."""


# --- GRR chains: L-GRR (entry x), LOLOHA (entry b, the value's bucket) ---------------------

def grr_permanent(mech, b):
    """{c: count} of entry b's permanent output over its two enrolment words."""
    n = mech.classes
    off = 1 if mech.name == "loloha" else 0
    dist = defaultdict(int)
    specs = [threshold_intervals(mech.t_perm), bucket_intervals(n - 1)]
    for first, last, weight in weighted(specs):
        outs = set()
        for words in (first, last):
            for fill in FILLS:
                w = [fill(i) for i in range(mech.enrol_words)]
                w[off + 2 * b], w[off + 2 * b + 1] = words
                outs.add(int(enrol(mech, w)[off * 4 + b]))
        assert len(outs) == 1, "entry %d depends on other words or is not constant" % b
        dist[outs.pop()] += weight
    return normalise(dist, W * W)


def grr_instant(mech, c, x_or_key, b, t_inst=None):
    """{y: count} of one report whose memoised entry b holds c."""
    n = mech.classes
    dist = defaultdict(int)
    specs = [threshold_intervals(mech.t_inst if t_inst is None else t_inst), bucket_intervals(n - 1)]
    for first, last, weight in weighted(specs):
        outs = set()
        for words in (first, last):
            for fill in FILLS[:2]:
                state = np.zeros(mech.state_size, np.uint8)
                if mech.name == "loloha":
                    state[:4] = np.frombuffer(LOLOHA_SEED.to_bytes(4, "little"), np.uint8)
                    state[4:] = [fill(i) % n for i in range(n)]
                    state[4 + b] = c
                else:
                    state[:] = [fill(i) % n for i in range(n)]
                    state[b] = c
                body = report_body(mech, x_or_key, state, words, t_inst)
                y = int.from_bytes(body[-2:] if mech.name == "loloha" else body, "little")
                if mech.name == "loloha":
                    assert body[:4] == LOLOHA_SEED.to_bytes(4, "little")
                outs.add(y)
        assert len(outs) == 1
        dist[outs.pop()] += weight
    return normalise(dist, W * W)


LOLOHA_SEED = 0x9E3779B9


def loloha_key_of_bucket(mech, b):
    """A key the seed hashes to bucket b."""
    for key in range(100000):
        if protocol.bucket(protocol.keyed_hash(key, LOLOHA_SEED), mech.g) == b:
            return key
    raise AssertionError("no key for bucket %d" % b)


def grr_chain(mech, t_inst=None):
    """({b: P(c | b)}, {c: P(y | c)}) from the kernels."""
    n = mech.classes
    perm = {b: grr_permanent(mech, b) for b in range(n)}
    inputs = [loloha_key_of_bucket(mech, b) if mech.name == "loloha" else b for b in range(n)]
    inst = {c: grr_instant(mech, c, inputs[c], c, t_inst) for c in range(n)}
    return perm, inst


def compose(perm_b, inst):
    out = defaultdict(Fraction)
    for c, pc in perm_b.items():
        for y, py in inst[c].items():
            out[y] += pc * py
    return dict(out)


GRR_CASES = [("lgrr", 1000, 2, {"eps1_milli": 500}), ("lgrr", 2000, 3, {"eps1_milli": 1000}),
             ("lgrr", 2000, 4, {"eps1_milli": 700}), ("lgrr", 500, 5, {"eps1_milli": 499}),
             ("lgrr", 4000, 3, {"eps1_milli": 1}),
             ("loloha", 2000, 50, {"eps1_milli": 1000, "g": 2}),
             ("loloha", 2000, 50, {"eps1_milli": 1000}), ("loloha", 3000, 50, {"eps1_milli": 2500, "g": 5})]


@pytest.mark.parametrize("name,eps,n,params", GRR_CASES)
def test_grr_chains_one_report_and_permanent(name, eps, n, params):
    mech = make_mechanism(name, eps, n, **params)
    perm, inst = grr_chain(mech)
    assert worst_ratio(perm) <= e_bound(eps)  # the permanent response, per memoised entry
    one = {b: compose(perm[b], inst) for b in perm}
    worst = worst_ratio(one)
    assert worst <= e_bound(mech.eps1_milli) and float(worst) <= math.exp(mech.eps1_milli / 1000) + 1e-12
    # the integer solution sits at the paper's: within 1% of e^ε1
    assert float(worst) > math.exp(mech.eps1_milli / 1000) * 0.99
    # and equals the exact distribution the aggregator computes from the counts
    for b in perm:
        assert one[b] == {y: p for y, p in enumerate(grr_chain_distribution(
            mech.classes, mech.t_perm, mech.t_inst, b)) if p}


@pytest.mark.parametrize("n", [2, 3, 5])
def test_grr_chain_threshold_is_tight(n):
    """n - 1 divides 2^32 here, so the chain bound is exact: t_inst + 1 breaks ε1."""
    mech = make_mechanism("lgrr", 2000, n, eps1_milli=1000)
    assert mech.t_inst < W - 1
    perm, inst = grr_chain(mech, t_inst=mech.t_inst + 1)
    one = {b: compose(perm[b], inst) for b in perm}
    assert worst_ratio(one) > e_bound(mech.eps1_milli)


# --- unary encodings: L-OSUE, L-SUE --------------------------------------------------------

def lue_distributions(mech, f=None):
    """({x: P(row x | x)}, {x: P(report | x)}) from the kernels: row x over its n enrolment
    words (the other rows' words filled three ways), the report over its n words."""
    n = mech.domain_size
    perm, one = {}, {}
    for x in range(n):
        cuts = [mech.t_p if j == x else mech.t_q for j in range(n)]
        rows = defaultdict(int)
        for first, last, weight in weighted([threshold_intervals(t) for t in cuts]):
            got = set()
            for words in (first, last):
                for fill in FILLS:
                    w = [fill(i) for i in range(n * n)]
                    w[x * n:(x + 1) * n] = words
                    st = enrol(mech, w)
                    got.add(st[x * mech.row_bytes:(x + 1) * mech.row_bytes].tobytes())
            assert len(got) == 1
            rows[got.pop()] += weight
        perm[x] = normalise(rows, W ** n)
        reports = defaultdict(Fraction)
        flip = mech.t_flip if f is None else f
        for row, p_row in perm[x].items():
            dist = defaultdict(int)
            for first, last, weight in weighted([threshold_intervals(flip)] * n):
                got = set()
                for words in (first, last):
                    for fill in (0, 0xFF):
                        st = np.full(mech.state_size, fill, np.uint8)
                        st[x * mech.row_bytes:(x + 1) * mech.row_bytes] = np.frombuffer(row, np.uint8)
                        got.add(report_body(mech, x, st, words, flip))
                assert len(got) == 1
                dist[got.pop()] += weight
            for body, c in dist.items():
                reports[body] += p_row * Fraction(c, W ** n)
        one[x] = dict(reports)
    return perm, one


LUE_CASES = [("losue", 2000, 2, 1000), ("losue", 1000, 3, 300), ("lsue", 2000, 3, 1000),
             ("lsue", 4000, 2, 3999), ("losue", 500, 3, 1)]


@pytest.mark.parametrize("name,eps,n,eps1", LUE_CASES)
def test_unary_chains_one_report_and_permanent(name, eps, n, eps1):
    mech = make_mechanism(name, eps, n, eps1_milli=eps1)
    perm, one = lue_distributions(mech)
    # the permanent rows of two values: every row within E(ε∞)/S
    assert worst_ratio(perm) <= e_bound(eps)
    worst = worst_ratio(one)
    assert worst <= e_bound(eps1)
    assert float(worst) > math.exp(eps1 / 1000) * 0.999999  # the smallest integer flip
    # one step less flipping breaks it (the check is exact)
    _, tighter = lue_distributions(mech, mech.t_flip - 1)
    assert worst_ratio(tighter) > e_bound(eps1)
    # and the aggregator's p*, q* are the bits' exact marginals
    p, q = mech.support_pq()
    bit = {x: sum(pr for body, pr in one[x].items() if body[0] >> x & 1) for x in range(n)}
    assert all(v == p for v in bit.values())
    assert sum(pr for body, pr in one[0].items() if body[0] >> 1 & 1) == q


# --- the memoised one-bit mean ------------------------------------------------------------

def lbitmean_distributions(mech, f=None):
    """({x: P(memoised bit used | x)}, {x: P(y | x)}): α over the rounding thresholds' intervals,
    the s + 1 bits over theirs, the report word over the flip threshold."""
    m, s = mech.m, mech.s
    alpha_cuts = sorted({(rho * W) // m for rho in range(m)} - {0})
    bit_cuts = [lon_threshold(mech, j) for j in range(s + 1)]
    flip = mech.t_flip if f is None else f
    perm, one = {}, {}
    for x in range(m + 1):
        used, ys = defaultdict(int), defaultdict(int)
        specs = [threshold_intervals(*alpha_cuts)] + [threshold_intervals(t) for t in bit_cuts]
        for first, last, weight in weighted(specs):
            states = [enrol(mech, [a] + bits) for a, bits in
                      ((first[0], first[1:]), (last[0], last[1:]))]
            assert states[0][4:].tobytes() == states[1][4:].tobytes()  # the bits; α differs
            j = mech.grid_point(x, first[0])
            assert j == mech.grid_point(x, last[0])
            used[(j, (states[0][4 + (j >> 3)] >> (j & 7)) & 1)] += weight
            for rf, rl, rw in weighted([threshold_intervals(flip)]):
                got = {report_body(mech, x, st, [w], flip) for st in states for w in (rf[0], rl[0])}
                assert len(got) == 1
                ys[got.pop()] += weight * rw
        perm[x] = normalise(used, W ** (s + 2))
        one[x] = normalise(ys, W ** (s + 3))
    return perm, one


def lon_threshold(mech, j):
    from ldpfleet.core.mechanisms.lbitmean import grid_threshold
    return grid_threshold(j, mech.s, mech.t0)


@pytest.mark.parametrize("eps,m,s,eps1", [(2000, 4, 1, 1000), (1000, 4, 4, 400), (3000, 5, 2, 2999),
                                         (500, 1, 1, 1)])
def test_one_bit_mean_one_report_and_permanent(eps, m, s, eps1):
    mech = make_mechanism("lbitmean", eps, m + 1, s=s, eps1_milli=eps1)
    perm, one = lbitmean_distributions(mech)
    # the permanent bit of any grid point against any other: within E(ε∞)/S
    bits = {j: Fraction(lon_threshold(mech, j), W) for j in range(s + 1)}
    for a, b in itertools.permutations(bits.values(), 2):
        assert a / b <= e_bound(eps) and (1 - a) / (1 - b) <= e_bound(eps)
    worst = worst_ratio(one)
    assert worst <= e_bound(eps1)
    assert float(worst) > math.exp(eps1 / 1000) * 0.999999 or m == 1
    _, tighter = lbitmean_distributions(mech, mech.t_flip - 1)
    assert worst_ratio(tighter) > e_bound(eps1)
    # α-point rounding is unbiased (up to the integer thresholds): E[j] = x s / m
    for x in range(m + 1):
        mean_j = sum(j * p for (j, _), p in perm[x].items())
        assert abs(mean_j - Fraction(x * s, m)) < Fraction(s, W)


# --- a whole sequence: the lifetime bound of the enrolment charge -------------------------

def sequence_distribution(perm, inst, seq):
    """P(y_1..y_T | value sequence) with the permanent responses of the values (buckets) the
    sequence uses drawn once: a product over its distinct values."""
    classes = sorted(set(seq))
    out = {}
    outputs = sorted(set().union(*[set(d) for d in inst.values()]))
    for ys in itertools.product(outputs, repeat=len(seq)):
        total = Fraction(1)
        for v in classes:
            rounds = [t for t, u in enumerate(seq) if u == v]
            total *= sum(pc * math.prod(inst[c].get(ys[t], 0) for t in rounds)
                         for c, pc in perm[v].items())
        out[ys] = total
    assert sum(out.values()) == 1
    return out


def partition(seq):
    first = {}
    return tuple(first.setdefault(v, len(first)) for v in seq)


@pytest.mark.parametrize("name,eps,n,params", [("lgrr", 1000, 3, {"eps1_milli": 500}),
                                               ("loloha", 2000, 50, {"eps1_milli": 1000, "g": 3})])
def test_three_rounds_within_the_lifetime_bound(name, eps, n, params):
    """Every pair of 3-round value (bucket) sequences with the same partition of the rounds:
    the joint report distribution within (E(ε∞)/S)^classes; a constant value within E(ε∞)/S."""
    mech = make_mechanism(name, eps, n, **params)
    perm, inst = grr_chain(mech)
    seqs = list(itertools.product(range(mech.classes), repeat=3))
    dists = {seq: sequence_distribution(perm, inst, seq) for seq in seqs}
    by_partition = defaultdict(list)
    for seq in seqs:
        by_partition[partition(seq)].append(seq)
    worst_seen = {}
    for part, group in by_partition.items():
        classes = len(set(part))
        worst = worst_ratio({seq: dists[seq] for seq in group})
        assert worst <= e_bound(eps) ** classes, (part, float(worst))
        worst_seen[classes] = max(worst_seen.get(classes, 1), worst)
    assert worst_seen[1] <= e_bound(eps) and worst_seen[1] > 1  # constant values: ε∞ at most
    assert mech.enrolment_charge_milli(3) == min(mech.classes, 3) * eps


# --- production parameters, from the shipped counts --------------------------------------

def exact_grr_chain_worst(n, t_perm, t_inst):
    """max over x, x', y of P(y | x) / P(y | x') of the chain, from the bucket counts (integers,
    units W^4)."""
    cnt = [protocol.bucket_count(r, n - 1) for r in range(n - 1)]

    def step(c, t):
        out = [(W - t) * cnt[r] for r in range(n - 1)]
        out.insert(c, t * W)
        return out
    second = [step(c, t_inst) for c in range(n)]
    worst = Fraction(1)
    cols = [[0] * n for _ in range(n)]  # cols[y][x]
    for x in range(n):
        first = step(x, t_perm)
        for y in range(n):
            cols[y][x] = sum(first[c] * second[c][y] for c in range(n))
    for y in range(n):
        worst = max(worst, Fraction(max(cols[y]), min(cols[y])))
    return worst


@pytest.mark.parametrize("eps,eps1,n", [(2000, 1000, 101), (1000, 500, 11), (4000, 1000, 64)])
def test_lgrr_production_exact_from_counts(eps, eps1, n):
    mech = make_mechanism("lgrr", eps, n, eps1_milli=eps1)
    worst = exact_grr_chain_worst(n, mech.t_perm, mech.t_inst)
    assert worst <= e_bound(eps1)
    assert float(worst) > math.exp(eps1 / 1000) * 0.99999


@pytest.mark.parametrize("name,eps,eps1,n,params", [
    ("lgrr", 8000, 4000, 256, {}), ("lgrr", 64000, 1, 256, {}), ("loloha", 8000, 100, 1000, {"g": 256}),
    ("loloha", 2000, 1000, 100, {}), ("loloha", 6000, 5000, 100, {})])
def test_grr_chains_production_bounds(name, eps, eps1, n, params):
    """The shipped thresholds pass the chain bounds (which contain every exact ratio, and are
    checked against the exact counts above) and the permanent response passes grr_ok."""
    mech = make_mechanism(name, eps, n, eps1_milli=eps1, **params)
    n_out = mech.classes
    assert protocol.grr_ok(eps, n_out)
    e1 = protocol.exp_lower(eps1, 1000)
    assert lon.grr_chain_ok(n_out, mech.t_perm, mech.t_inst, e1)
    if mech.t_inst < W - 1:
        assert not lon.grr_chain_ok(n_out, mech.t_perm, mech.t_inst + 1, e1)
    (s_lo, s_hi), (o_lo, o_hi) = lon.grr_chain_bounds(n_out, mech.t_perm, mech.t_inst)
    assert s_lo <= s_hi and o_lo <= o_hi and s_hi * S <= e1 * o_lo


def test_chain_bounds_contain_the_exact_channel():
    """For bucket counts that differ (n - 1 = 3, 6, 100) every exact P(y | x) lies inside the
    bounds the thresholds are checked with."""
    for n, t_perm, t_inst in [(4, 2 ** 31, 2 ** 30), (7, 3 * 2 ** 30, 2 ** 31), (101, 2 ** 31, 2 ** 29)]:
        (s_lo, s_hi), (o_lo, o_hi) = lon.grr_chain_bounds(n, t_perm, t_inst)
        for x in range(n):
            dist = grr_chain_distribution(n, t_perm, t_inst, x)
            for y, p in enumerate(dist):
                v = p * W ** 4
                assert v.denominator == 1
                lo, hi = (s_lo, s_hi) if y == x else (o_lo, o_hi)
                assert lo <= v <= hi, (n, x, y)


@pytest.mark.parametrize("name,eps,eps1,n", [("losue", 2000, 1000, 101), ("lsue", 2000, 1000, 101),
                                             ("losue", 8000, 7999, 128), ("lsue", 500, 1, 128)])
def test_unary_production_exact(name, eps, eps1, n):
    """Bits are independent (the small-n enumeration shows each body bit uses its own two
    words), so one report's worst ratio is p*(1-q*) / (q*(1-p*)) of the exact marginals."""
    mech = make_mechanism(name, eps, n, eps1_milli=eps1)
    p, q = mech.support_pq()
    assert p * (1 - q) / (q * (1 - p)) <= e_bound(eps1)
    p1, q1 = mech.memo_pq()
    assert p1 * (1 - q1) / (q1 * (1 - p1)) <= e_bound(eps)
    f = mech.t_flip - 1
    pt = Fraction(mech.t_p * (W - f) + (W - mech.t_p) * f, W * W)
    qt = Fraction(mech.t_q * (W - f) + (W - mech.t_q) * f, W * W)
    assert pt * (1 - qt) / (qt * (1 - pt)) > e_bound(eps1)


def grr_chain_eps(k, t_perm, t_inst):
    d = [grr_chain_distribution(k, t_perm, t_inst, x) for x in range(k)]
    return math.log(max(max(d[x][y] for x in range(k)) / min(d[x][y] for x in range(k))
                        for y in range(k)))


def test_paper_parameters_and_what_the_integers_realise():
    """L-OSUE and L-SUE: the realised instantaneous keep probability is the paper's closed form
    (Arcolezi et al. 2022; multi-freq-ldpy's RAPPOR/L-OSUE clients) up to the integer rounding.
    L-GRR (and LOLOHA, which runs it over g): the paper's p2 solves p1 p2 + q1 q2 = e^ε1 (p1 q2
    + q1 p2), not the report's ratio; its exact channel is ε ≈ 0.70 for a nominal ε1 = 1 at
    k = 10, ε∞ = 2 (more noise than needed), while the integer solution realises ε1."""
    e, e1, E = 2.0, 1.0, math.exp
    osue = make_mechanism("losue", 2000, 100, eps1_milli=1000)
    p2 = (1 - E(e1 + e)) / (E(e1) - E(e) - E(e1 + e) + 1)
    assert abs((1 - osue.t_flip / W) - p2) < 1e-6
    sue = make_mechanism("lsue", 2000, 100, eps1_milli=1000)
    root = math.sqrt((4 * E(3.5 * e) - 4 * E(2.5 * e) - 4 * E(1.5 * e) + 4 * E(e / 2) + E(4 * e)
                      + 4 * E(3 * e) - 10 * E(2 * e) + 4 * E(e) + 1) * E(e1))
    a = E(e1) - E(2 * e) + 2 * E(e) - 2 * E(e1 + e) + E(e1 + 2 * e) - 1
    b = (E(1.5 * e) - E(e / 2) + E(e) - E(e1 + e / 2) - E(e1 + e) + E(e1 + 1.5 * e) + E(e1 + 2 * e) - 1)
    p2 = -(root * (E(e1) - 1) * (E(e) - 1) ** 2 - a * b) / ((E(e1) - 1) * (E(e) - 1) ** 2 * a)
    assert abs((1 - sue.t_flip / W) - p2) < 1e-6
    k = 10
    grr = make_mechanism("lgrr", 2000, k, eps1_milli=1000)
    p1 = E(e) / (E(e) + k - 1)
    q1 = (1 - p1) / (k - 1)
    paper = (q1 - E(e1) * p1) / (-p1 * E(e1) + k * q1 * E(e1) - q1 * E(e1) - p1 * (k - 1) + q1)
    assert abs(grr_chain_eps(k, grr.t_perm, int(paper * W)) - 0.70) < 0.01
    assert 0.999999 < grr_chain_eps(k, grr.t_perm, grr.t_inst) <= 1.0
