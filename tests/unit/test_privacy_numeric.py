"""Exact ε-LDP of the numeric mechanisms' shipped C perturbation (protocol_spec/v2 §3.3), by
enumeration as in tests/test_privacy_grr_olh_flh_oue.py: every decision is `w < T` or
`bucket(w, n)`, so each word's 2^32 values fall into intervals on which the report cannot change;
the kernel runs on each interval's first and last word (both must give the same report) and the
report gets the interval's exact weight. The worst ratio P(r|x)/P(r|x') over reports and input
pairs must be <= E_full/2^64 <= e^eps.

* Small grids: every input and every output enumerated (Duchi, the window channel of pm and sw,
  hm's entries), tight where the construction is tight (one step past the window threshold
  breaks it).
* Production grids: pm's and hm's window at every N in [2, 65536] and sw's at every bins in
  [2, 1024] (several eps): every output's count is T cnt_L(.) or (2^32 - T) cnt_D(.) — checked
  against the kernel's own counts, output by output, at production shapes — so the worst ratio
  is max/min over those counts, computed exactly from the shipped thresholds.
"""
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.core.mechanisms import make_mechanism, numeric
from test_privacy_grr_olh_flh_oue import (bucket_intervals, exact_distributions,
                                          threshold_intervals, worst_ratio)

W = protocol.WORD
S = protocol.SCALE
EPS_MILLI = [500, 1000, 2500, 5000]


def bound(eps_milli):
    return Fraction(protocol.exp_lower(eps_milli, 1000), S)


def assert_private(eps_milli, ratio):
    assert ratio <= bound(eps_milli)
    assert float(ratio) <= math.exp(eps_milli / 1000) + 1e-12


def kernel_runner(call, body_size, ncols=1):
    """run(xs, words) -> (n, body) bytes through a numeric kernel `call(x_ptr, n, words_ptr,
    out_ptr, stride)`; `xs` holds n inputs (hm: n rows of ncols grid points)."""
    def run(xs, words):
        xs = np.ascontiguousarray(np.repeat(np.asarray(xs, np.uint32)[:, None], ncols, axis=1))
        words = np.ascontiguousarray(words, dtype=np.uint32)
        out = np.zeros((words.shape[0], body_size), np.uint8)
        rc = call(ffi.cast("uint32_t *", xs.ctypes.data), words.shape[0],
                  ffi.cast("uint32_t *", words.ctypes.data), ffi.cast("uint8_t *", out.ctypes.data),
                  body_size)
        assert rc == 0
        return out
    return run


def union_intervals(*ns):
    """Word intervals cut at every bucket edge of bucket(., n) for each n in `ns`."""
    cuts = {0, W}
    for n in ns:
        cuts.update(-(-r * W // n) for r in range(n))
    cuts = sorted(cuts)
    return [(a, b - 1, b - a) for a, b in zip(cuts, cuts[1:])]


# --- Duchi ------------------------------------------------------------------------------------

def duchi_run(mech):
    return kernel_runner(lambda x, n, w, o, s: lib.ldp_duchi_perturb(mech._params, x, n, w, o, s), 1)


@pytest.mark.parametrize("eps_milli", EPS_MILLI + [1, 64000])
@pytest.mark.parametrize("n", [2, 3, 5, 17])
def test_duchi_exact_privacy_small_grids(eps_milli, n):
    """Every input x of the grid and both outputs; w0 cut at every T(x'). The ratio is the
    realised T(N-1)/T(0) = T_rr / (2^32 - T_rr) up to the slope's rounding."""
    mech = make_mechanism("duchi", eps_milli, n)
    cuts = [mech.threshold(x) for x in range(n)]
    dists = exact_distributions(duchi_run(mech), range(n), [threshold_intervals(*cuts)])
    ratio = worst_ratio(dists)
    assert_private(eps_milli, ratio)
    assert ratio == Fraction(mech.threshold(n - 1), mech.threshold(0))
    for x in range(n):  # P(1 | x) is exactly linear in x: E[(2b-1) C] = t exactly
        assert dists[x][b"\x01"] == Fraction(mech.threshold(x), W)
        assert (2 * dists[x][b"\x01"] - 1) * W / (mech.slope * (n - 1)) == Fraction(2 * x - (n - 1), n - 1)


@pytest.mark.parametrize("eps_milli", [1, 100, 610, 1000, 2500, 8000, 44000, 64000])
def test_duchi_every_production_grid(eps_milli):
    """Every N in [2, 65536]: the shipped slope and base (C, which the vectors tie to the
    Python and MicroPython code) give T(0) >= 1, T(N-1) = 2^32 - T(0), s >= 2, and
    T(N-1) S <= E_full T(0); the kernel's bit flips exactly at T(0) and T(N-1)."""
    e = protocol.exp_lower(eps_milli, 1000)
    slope, base = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    tops, bases = [], []
    for n in range(2, numeric.GRID_MAX + 1):
        assert lib.ldp_duchi_slope(eps_milli, n, slope, base) == 0
        s, b = slope[0], base[0]
        top = b + s * (n - 1)
        assert s >= 2 and b >= 1 and top == W - b
        tops.append(top)
        bases.append(b)
    tops, bases = np.array(tops, dtype=object), np.array(bases, dtype=object)
    assert all(tops * S <= e * bases)
    for n in (2, 257, 65536):
        mech = make_mechanism("duchi", eps_milli, n)
        run = duchi_run(mech)
        for x in (0, n - 1):
            t = mech.threshold(x)
            assert run([x, x], np.array([[t - 1], [t]])).ravel().tolist() == [1, 0]


# --- the window channel (pm, sw, hm's PM part) -------------------------------------------------

def window_run(params):
    return kernel_runner(lambda x, n, w, o, s: lib.ldp_window_perturb(params, x, n, w, o, s),
                         params.out_bytes)


def window_params(grid, mul, div, span, width, t, out_bytes=4):
    return numeric.window_params(ffi, grid, mul, div, span, width, t, out_bytes)


def interval_grid(*specs):
    """(first words, last words, weights) of every combination of the intervals of each word
    (rows in itertools.product order); weights as uint64 (their product must fit)."""
    arrays = [np.array(spec, dtype=np.uint64) for spec in specs]
    grids = np.meshgrid(*[np.arange(len(a)) for a in arrays], indexing="ij")
    idx = [g.ravel() for g in grids]
    first = np.stack([a[i, 0] for a, i in zip(arrays, idx)], axis=1).astype(np.uint32)
    last = np.stack([a[i, 1] for a, i in zip(arrays, idx)], axis=1).astype(np.uint32)
    weight = np.ones(len(idx[0]), np.uint64)
    for a, i in zip(arrays, idx):
        weight = weight * a[i, 2]
    return first, last, weight


def window_dists(params, inputs):
    """Exact distributions of the kernel over both intervals of w0 and every piece of w1 cut
    at the buckets of L and of D (vectorised: weights as uint64, per-output sums)."""
    first, last, weight = interval_grid(threshold_intervals(params.t_in),
                                        union_intervals(params.width, params.span))
    run = window_run(params)
    cells = params.span + params.width
    out = {}
    for x in inputs:
        xs = np.full(first.shape[0], x, np.uint32)
        a, b = run(xs, first), run(xs, last)
        assert np.array_equal(a, b), "kernel output changes inside a word interval"
        y = a.view("<u2" if params.out_bytes == 2 else "<u4").ravel().astype(np.int64)
        assert y.max() < cells
        counts = np.zeros(cells, np.uint64)
        np.add.at(counts, y, weight)
        assert sum(int(c) for c in counts) == S
        out[x] = counts
    return out


def counts_ratio(dists):
    """Worst ratio of exact per-output counts {x: uint64 counts}, exactly (Fraction)."""
    stack = np.stack(list(dists.values()))
    hi, lo = stack.max(axis=0), stack.min(axis=0)
    assert lo.min() > 0
    pairs = set(zip(hi.tolist(), lo.tolist()))
    return max(Fraction(int(a), int(b)) for a, b in pairs)


def structural_counts(t, width, span):
    """The counts every output can have: T cnt_L(.) and (2^32 - T) cnt_D(.)."""
    return {t * protocol.cmin(width), t * protocol.cmax(width),
            (W - t) * protocol.cmin(span), (W - t) * protocol.cmax(span)}


@pytest.mark.parametrize("eps_milli", EPS_MILLI)
@pytest.mark.parametrize("width,span", [(1, 1), (2, 3), (3, 5), (4, 7), (6, 4), (5, 11)])
def test_window_exact_privacy_small_and_tight(eps_milli, width, span):
    """The window channel on every position p in [0, D] and every output, with the shipped
    threshold: within E_full / 2^64, tight where the counts are uneven, and T_win + 1 breaks it."""
    t = numeric.window_threshold(eps_milli, width, span)
    assert numeric.window_ok(eps_milli, width, span, t)
    ratio = counts_ratio(window_dists(window_params(span + 1, 1, 1, span, width, t), range(span + 1)))
    assert_private(eps_milli, ratio)
    assert float(ratio) > math.exp(eps_milli / 1000) * (1 - 1e-6)
    past = counts_ratio(window_dists(window_params(span + 1, 1, 1, span, width, t + 1),
                                     range(span + 1)))
    assert past > bound(eps_milli)


@pytest.mark.parametrize("eps_milli", [1, 1000, 4000])
@pytest.mark.parametrize("n", [2, 3])
def test_pm_exact_privacy_small_grids(eps_milli, n):
    """pm at its production shape (D = u (N-1) ~ 65536 cells, L = D S // E_half) on every grid
    point and every output; every output's count is one of the structural counts."""
    mech = make_mechanism("pm", eps_milli, n)
    dists = window_dists(mech._params, range(n))
    allowed = structural_counts(mech.t_in, mech.width, mech.span)
    for counts in dists.values():
        assert set(int(c) for c in np.unique(counts)) <= allowed
    assert_private(eps_milli, counts_ratio(dists))


@pytest.mark.slow
@pytest.mark.parametrize("eps_milli", [1000])
def test_pm_exact_privacy_on_the_largest_grid(eps_milli):
    """N = 65536 (u = 1): positions 0, 1, the middle and the end, every output."""
    mech = make_mechanism("pm", eps_milli, 65536)
    dists = window_dists(mech._params, [0, 1, 32768, 65535])
    allowed = structural_counts(mech.t_in, mech.width, mech.span)
    for counts in dists.values():
        assert set(int(c) for c in np.unique(counts)) <= allowed
    assert_private(eps_milli, counts_ratio(dists))


@pytest.mark.parametrize("eps_milli", [1000, 4000])
@pytest.mark.parametrize("n,bins,width", [(8, 4, 3), (7, 3, 5), (5, 5, 1), (9, 2, 4)])
def test_sw_exact_privacy_small_grids(eps_milli, n, bins, width):
    """sw over every grid point (input bin x B // N, uneven bins included) and every output."""
    mech = make_mechanism("sw", eps_milli, n, bins=bins, window=width)
    dists = window_dists(mech._params, range(n))
    assert_private(eps_milli, counts_ratio(dists))
    for x in range(n):  # the kernel's distribution is the channel's exact counts at the bin
        assert [int(c) for c in dists[x]] == mech.channel.counts(x * bins // n)


def structural_ratio(t, width, span):
    counts = structural_counts(t, width, span)
    return Fraction(max(counts), min(counts))


@pytest.mark.parametrize("eps_milli", [1, 500, 611, 1000, 2000, 4000, 10000, 64000])
def test_pm_and_hm_every_production_grid(eps_milli):
    """Every N in [2, 65536]: the shipped shape and threshold (Python; C checked equal on a
    sample) give every output's count within E_full / 2^64 of every other's."""
    e = protocol.exp_lower(eps_milli, 1000)
    u_, d_, l_, t_ = (ffi.new("uint32_t *") for _ in range(4))
    for n in range(2, numeric.GRID_MAX + 1):
        u, span, width = numeric.pm_shape(eps_milli, n)
        t = numeric.window_threshold(eps_milli, width, span)
        counts = structural_counts(t, width, span)
        assert max(counts) * S <= e * min(counts), n
        if n % 257 == 2 or n > 65530:
            assert lib.ldp_pm_shape(eps_milli, n, u_, d_, l_) == 0
            assert lib.ldp_window_threshold(eps_milli, l_[0], d_[0], t_) == 0
            assert (u_[0], d_[0], l_[0], t_[0]) == (u, span, width, t)
            assert lib.ldp_window_ok(eps_milli, width, span, t) == 1


@pytest.mark.parametrize("eps_milli", [1, 300, 1000, 2000, 8000, 64000])
def test_sw_every_bins_and_window(eps_milli):
    """Every bins B in [2, 1024] with the default window and with L = 1 and 2B."""
    e = protocol.exp_lower(eps_milli, 1000)
    for bins in range(2, 1025):
        for width in {numeric.sw_default_window(eps_milli, bins), 1, 2 * bins}:
            t = numeric.window_threshold(eps_milli, width, bins - 1)
            counts = structural_counts(t, width, bins - 1)
            assert max(counts) * S <= e * min(counts), (bins, width)


# --- hm ----------------------------------------------------------------------------------------

def hm_entry_dists(mech, inputs):
    """Exact counts of one hm entry (d = k = 1: the sampling word has one bucket) over its
    outputs (kind, y) -> index kind (D + L) + y, for every grid point: w_c cut at T_hm, w0 at
    every Duchi threshold and T_win, w1 at the buckets of L and D. Weights of (w0, w1) pieces
    as uint64 per w_c interval, then times the w_c interval's size (Python ints)."""
    assert mech.metrics == mech.sampled == 1
    cells = mech.cells
    wc = threshold_intervals(mech.t_choice) if mech.t_choice else [(0, W - 1, W)]
    w0 = threshold_intervals(mech.t_in, *[mech.base + mech.slope * x for x in inputs])
    w1 = union_intervals(mech.width, mech.span)
    pairs_first, pairs_last, weight = interval_grid(w0, w1)
    run = kernel_runner(lambda x, n, w, o, s: lib.ldp_hm_perturb(mech._params, x, n, w, o, s), 6)
    out = {}
    for x in inputs:
        total = np.zeros(2 * cells, dtype=object)
        for c0, c1, size in wc:
            first = np.concatenate([np.zeros((len(weight), 1), np.uint32),
                                    np.full((len(weight), 1), c0, np.uint32), pairs_first], axis=1)
            last = np.concatenate([np.full((len(weight), 1), W - 1, np.uint32),
                                   np.full((len(weight), 1), c1, np.uint32), pairs_last], axis=1)
            xs = np.full(len(weight), x, np.uint32)
            a, b = run(xs, first), run(xs, last)
            assert np.array_equal(a, b), "kernel output changes inside a word interval"
            assert (a[:, 0] == 0).all()
            kind = a[:, 1].astype(np.int64)
            y = np.ascontiguousarray(a[:, 2:6]).view("<u4").ravel().astype(np.int64)
            counts = np.zeros(2 * cells, np.uint64)
            np.add.at(counts, kind * cells + y, weight)
            total += counts.astype(object) * size
        assert sum(total) == W ** 3
        out[x] = total
    return out


def object_ratio(dists):
    """Worst ratio of exact per-output counts (object arrays; outputs no input can give skipped,
    an output some input can give and another cannot is infinite)."""
    stack = np.stack(list(dists.values()))
    hi, lo = stack.max(axis=0), stack.min(axis=0)
    pairs = {(int(a), int(b)) for a, b in zip(hi.tolist(), lo.tolist()) if a}
    if any(b == 0 for _, b in pairs):
        return math.inf
    return max(Fraction(a, b) for a, b in pairs)


@pytest.mark.parametrize("eps_milli", [500, 611, 1000, 2000])
def test_hm_entry_exact_privacy(eps_milli):
    """One metric (k = 1) on N = 2 and 3: the mixture of PM (kind 1) and Duchi (kind 0) chosen
    by a value-independent word; every (kind, y) output enumerated."""
    for n in (2, 3):
        mech = make_mechanism("hm", eps_milli, n)
        dists = hm_entry_dists(mech, range(n))
        assert_private(eps_milli, object_ratio(dists))
        for x in range(n):  # the choice of mechanism does not depend on x
            assert Fraction(int(sum(dists[x][mech.cells:])), W ** 3) == Fraction(mech.t_choice, W)
        if eps_milli < numeric.HM_PM_FROM_MILLI:
            assert mech.t_choice == 0


def hm_report(mech, vec, words) -> bytes:
    x = np.ascontiguousarray(np.array([vec], np.uint32))
    w = np.ascontiguousarray(np.array([words], np.uint32))
    out = np.zeros((1, mech.body_size), np.uint8)
    assert lib.ldp_hm_perturb(mech._params, ffi.cast("uint32_t *", x.ctypes.data), 1,
                              ffi.cast("uint32_t *", w.ctypes.data),
                              ffi.cast("uint8_t *", out.ctypes.data), mech.body_size) == 0
    return out[0].tobytes()


def test_hm_metric_sampling_never_depends_on_the_values():
    """d = 5, k = 2 (eps 5000): over every interval pair of the two sampling words the kernel
    chooses the same metrics for every vector of grid points, and each ordered pair gets the
    exact weight of the partial Fisher-Yates shuffle's buckets; an entry's output depends only
    on its own metric's grid point and its own words."""
    n, d = 3, 5
    mech = make_mechanism("hm", 5000, n, metrics=d)
    assert (mech.sampled, mech.eps_metric) == (2, 2500)
    rest = [0x12345678, 0x9ABCDEF0, 0x0F0F0F0F, 0xF0F0F0F0, 77, 0xDEADBEEF]
    weights = defaultdict(int)
    vectors = ([0] * d, [2] * d, [0, 1, 2, 1, 0], [2, 2, 0, 1, 1])
    for a in bucket_intervals(d):
        for b in bucket_intervals(d - 1):
            picks = {(r[0], r[6]) for vec in vectors for w0, w1 in ((a[0], b[0]), (a[1], b[1]))
                     for r in [hm_report(mech, vec, [w0, w1] + rest)]}
            assert len(picks) == 1
            weights[picks.pop()] += a[2] * b[2]
    assert len(weights) == d * (d - 1) and sum(weights.values()) == W * W
    for (i, j), weight in weights.items():
        r1 = i if j == 0 else j  # the second draw's position after swapping 0 and i
        assert weight == protocol.bucket_count(i, d) * protocol.bucket_count(r1 - 1, d - 1)
    words = [0, 0] + rest
    a0, a1 = mech.sampled_metrics(words)
    first = hm_report(mech, [0] * d, words)[:6]
    for other in range(n):
        vec = [other] * d
        vec[a0] = 0
        changed = words[:5] + [W - 1, 12345, 0xDEADBEEF]  # the second entry's words only
        assert hm_report(mech, vec, words)[:6] == first
        assert hm_report(mech, vec, changed)[:6] == first


def test_hm_report_is_eps_ldp_by_composition():
    """Every k the rule gives (eps up to 64000, d up to 64): k independent entries at
    eps_k = eps_milli // k (k eps_k <= eps_milli), each within E(eps_k)/2^64 <= e^(eps_k) (the
    entry test above), and value-independent metric choices: the report's ratio is at most
    (E(eps_k)/2^64)^k <= e^eps."""
    for eps_milli in (1, 2499, 2500, 5000, 7499, 10000, 33333, 64000):
        for d in (1, 2, 3, 10, 64):
            k = numeric.hm_sampled(eps_milli, d)
            ek = eps_milli // k
            assert 1 <= k <= d and k * ek <= eps_milli
            assert k == max(1, min(d, eps_milli // 2500))
            assert k * math.log(protocol.exp_lower(ek, 1000) / S) <= eps_milli / 1000 + 1e-12
