"""Numeric metrics on an integer grid (protocol_spec/v2 §1.1, §3.3): what `duchi`, `pm`, `hm`
and `sw` share.

A reading becomes a grid point x in [0, N) (`grid_point`, spec §1.1); every mechanism here
takes x and maps it to t = (2x - (N-1)) / (N-1) in [-1, 1] (means) or to one of B bins (Square
Wave). Every probability is an integer threshold on uniform u32 words (spec §2):

* Duchi's one-bit (Duchi, Jordan, Wainwright, "Minimax optimal procedures for locally private
  estimation", JASA 2018, §4.2.3 one-dimensional case): the bit is 1 iff w0 < T(x) with
  T(x) = 2^31 + (s/2)(2x - (N-1)), s = 2 floor((2 T_rr - 2^32) / (2 (N-1))). T is exactly
  linear in x, so E[(2b-1) 2^32 / (s (N-1))] = t exactly, and T(N-1) <= T_rr, T(0) >= 2^32 - T_rr
  bound every ratio by T_rr / (2^32 - T_rr) <= e^eps.
* The sliding-window channel shared by the Piecewise Mechanism (Wang et al., "Collecting and
  analyzing multidimensional data with local differential privacy", ICDE 2019, §III-B) and
  Square Wave (Li et al., "Estimating numerical distributions under local differential
  privacy", SIGMOD 2020, §4): outputs j in [0, D + L); input position p in [0, D]; with
  w0 < T_win the output is p + bucket(w1, L) (the window of L cells at p), otherwise
  r = bucket(w1, D) and j = r + L [r >= p] (the D cells outside the window). Every output's
  count of word pairs is T_win cnt_L(.) or (2^32 - T_win) cnt_D(.), so every ratio is at most
  max_count / min_count, and `window_ok` checks that against E_full / 2^64 exactly.
"""
import functools
import math
from fractions import Fraction

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, IntStateSketch, Mechanism, body_ptr, check_words, report_array, run_chunks

S = protocol.SCALE
GRID_MAX = 65536
"""Most grid points of a numeric domain (spec §1.1)."""
PM_SPAN = 65536
"""PM's window moves u = floor(PM_SPAN / (N - 1)) output cells per grid step (spec §3.3)."""
HM_PM_FROM_MILLI = 611
"""hm mixes in PM iff its per-metric eps_milli >= 611 (Wang et al. §IV-C: PM beats Duchi's
one-bit above eps* ~ 0.61)."""
HM_SAMPLE_MILLI = 2500
"""hm reports k = max(1, min(d, eps_milli // 2500)) of its d metrics (Wang et al. §IV-D)."""
METRICS_MAX = 64


exp_lower = functools.lru_cache(maxsize=512)(protocol.exp_lower)
"""E(a, b) of spec §2, cached: every numeric threshold of one config needs it several times."""


# --- spec §1.1: the grid --------------------------------------------------------------------

def grid_point(reading, lo: int, hi: int, decimals: int, n: int) -> int:
    """Spec §1.1: the grid point of a reading, never refusing: x = floor(t + 1/2) with
    t = (reading * 10^decimals - lo) * (N - 1) / (hi - lo) in float64, clipped to [0, N-1];
    anything that is not a number (None, a string, a bool) and NaN map to the midpoint
    (N - 1) // 2. The same arithmetic runs for every number."""
    t = float((n - 1) // 2)
    if isinstance(reading, (int, float)) and not isinstance(reading, bool):
        try:
            v = float(reading)
        except OverflowError:  # an int beyond float range
            v = math.inf if reading > 0 else -math.inf
        t = (v * float(10 ** decimals) - float(lo)) * float(n - 1) / float(hi - lo)
        if t != t:  # NaN
            t = float((n - 1) // 2)
    t = min(max(t, 0.0), float(n - 1))
    return int(math.floor(t + 0.5))


def grid_points(readings, lo: int, hi: int, decimals: int, n: int) -> np.ndarray:
    """`grid_point` of a float array (the same float64 steps; NaN to the midpoint)."""
    v = np.asarray(readings, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        t = (v * float(10 ** decimals) - float(lo)) * float(n - 1) / float(hi - lo)
    t = np.where(np.isnan(t), float((n - 1) // 2), t)
    return np.floor(np.clip(t, 0.0, float(n - 1)) + 0.5).astype(np.int64)


class NumericDomain:
    """A `range` or `ranges` domain of a config (spec §1.1): N grid points over each metric's
    [lo, hi] (integers in units of 10^-decimals)."""

    def __init__(self, domain: dict):
        from ..config import check_numeric_domain
        self.points = check_numeric_domain(domain)
        metrics = domain["metrics"] if domain["type"] == "ranges" else [domain]
        self.metrics = [(m["lo"], m["hi"], m.get("decimals", 0)) for m in metrics]
        self.names = [m.get("name", "") for m in metrics]

    def grid_point(self, reading, metric: int = 0) -> int:
        lo, hi, dec = self.metrics[metric]
        return grid_point(reading, lo, hi, dec, self.points)

    def grid_points(self, readings, metric: int = 0) -> np.ndarray:
        lo, hi, dec = self.metrics[metric]
        return grid_points(readings, lo, hi, dec, self.points)

    def value(self, x, metric: int = 0):
        """The reading at grid point(s) x (float; x may be fractional, e.g. a mean)."""
        lo, hi, dec = self.metrics[metric]
        return (lo + np.asarray(x, dtype=np.float64) * (hi - lo) / (self.points - 1)) / 10 ** dec


def unit_value(x, n: int):
    """t = (2x - (N-1)) / (N-1) in [-1, 1] for grid point(s) x."""
    return (2.0 * np.asarray(x, dtype=np.float64) - (n - 1)) / (n - 1)


def check_grid_points(x, n: int) -> np.ndarray:
    """Grid points as a uint32 array, ValueError for one outside [0, N)."""
    arr = np.asarray(x)
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= n):
        raise ConfigError("value", "grid points must be integers in [0, %d)" % n)
    return np.ascontiguousarray(arr, dtype=np.uint32)


def check_grid(n: int, field: str = "domain.points") -> int:
    if not 2 <= n <= GRID_MAX:
        raise ConfigError(field, "a numeric domain has 2..%d grid points, got %d" % (GRID_MAX, n))
    return n


# --- spec §3.3: thresholds --------------------------------------------------------------------

def duchi_slope(eps_milli: int, n: int) -> int:
    """s = 2 floor((2 T_rr - 2^32) / (2 (N-1))): T(x) = 2^31 - (s/2)(N-1) + s x."""
    return 2 * ((2 * protocol.t_rr(eps_milli) - W) // (2 * (n - 1)))


def duchi_base(n: int, slope: int) -> int:
    """T(0) = 2^31 - (s/2)(N-1)."""
    return (1 << 31) - (slope // 2) * (n - 1)


def duchi_ok(eps_milli: int, n: int) -> bool:
    """s >= 2 (the bit depends on x) and T(N-1) / T(0) <= E_full / 2^64."""
    s = duchi_slope(eps_milli, n)
    base = duchi_base(n, s)
    top = base + s * (n - 1)
    e = exp_lower(eps_milli, 1000)
    return s >= 2 and base >= 1 and top * S <= e * base and (W - base) * S <= e * (W - top)


def window_threshold(eps_milli: int, width: int, span: int) -> int:
    """T_win = floor(E_full W cmin(D) / (S cmax(L) + E_full cmin(D))), within [1, 2^32 - 1]:
    the largest T with T cmax(L) S <= E_full (2^32 - T) cmin(D)."""
    e = exp_lower(eps_milli, 1000)
    c = protocol.cmin(span)
    t = (e * W * c) // (S * protocol.cmax(width) + e * c)
    return min(max(t, 1), W - 1)


def window_counts(t: int, width: int, span: int):
    """(largest, smallest) word-pair count of any output of the window channel."""
    high = (t * protocol.cmax(width), t * protocol.cmin(width))
    low = ((W - t) * protocol.cmax(span), (W - t) * protocol.cmin(span))
    return max(high[0], low[0]), min(high[1], low[1])


def window_ok(eps_milli: int, width: int, span: int, t: int = None) -> bool:
    """Spec §3.3 `window_ok`: 1 <= L, 1 <= D, L + D <= 2^32 and every output's count is within
    E_full / 2^64 of every other's (largest * S <= E_full * smallest)."""
    if not (width >= 1 and span >= 1 and width + span <= W):
        return False
    t = window_threshold(eps_milli, width, span) if t is None else t
    top, bottom = window_counts(t, width, span)
    return bottom > 0 and top * S <= exp_lower(eps_milli, 1000) * bottom


def pm_shape(eps_milli: int, n: int):
    """(u, D, L) of `pm` over N grid points: u = floor(65536 / (N-1)), D = u (N-1),
    L = max(1, floor(D S / E_half)) (L / D ~ e^(-eps/2), the paper's (C-1)/(C+1))."""
    u = PM_SPAN // (n - 1)
    span = u * (n - 1)
    return u, span, max(1, (span * S) // exp_lower(eps_milli, 2000))


def hm_choice_threshold(eps_milli: int) -> int:
    """hm uses PM iff w < T_hm: T_hm = 2^32 - ceil(2^32 S / E_half) (~ 1 - e^(-eps/2)) for
    eps_milli >= 611, else 0 (Duchi's one-bit only)."""
    if eps_milli < HM_PM_FROM_MILLI:
        return 0
    return W - (-(-W * S // exp_lower(eps_milli, 2000)))


def hm_sampled(eps_milli: int, d: int) -> int:
    """k = max(1, min(d, floor(eps / 2.5))) metrics per report."""
    return max(1, min(d, eps_milli // HM_SAMPLE_MILLI))


def sw_default_window(eps_milli: int, bins: int) -> int:
    """L = round(2 b B) cells with the paper's b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 -
    eps)) (Li et al. §4.2), at least 1, at most 2B. Aggregator-side only: configs carry L."""
    eps = eps_milli / 1000.0
    if eps < 1e-3:
        b = 0.5
    else:
        e = math.exp(min(eps, 700.0))
        b = (eps * e - e + 1) / (2 * e * (e - 1 - eps))
    return int(min(max(round(2 * b * bins), 1), 2 * bins))


# --- the window channel's exact moments ----------------------------------------------------

def bucket_counts(n: int) -> np.ndarray:
    """cnt_n(r) for r in [0, n) (int64): ceil((r+1) W / n) - ceil(r W / n)."""
    r = np.arange(n + 1, dtype=np.int64)
    first = -((-r * W) // n)
    return np.diff(first)


class WindowChannel:
    """The exact output distribution of the sliding window (spec §3.3) with threshold `t`,
    window width L and span D: P(j | p) over j in [0, D + L) for a position p in [0, D]."""

    def __init__(self, t: int, width: int, span: int):
        self.t, self.width, self.span = t, width, span
        self.cells = width + span
        self.cnt_in = bucket_counts(width)
        self.cnt_out = bucket_counts(span)

    def counts(self, p: int):
        """Exact word-pair counts of every output (Python ints, total 2^64) for position p."""
        out = [0] * self.cells
        for r, c in enumerate(self.cnt_out.tolist()):
            out[r + (self.width if r >= p else 0)] = (W - self.t) * c
        for r, c in enumerate(self.cnt_in.tolist()):
            out[p + r] = self.t * c
        return out

    def probabilities(self, p: int) -> np.ndarray:
        """P(j | p) as float64 (from the exact counts)."""
        out = np.empty(self.cells)
        r = np.arange(self.span)
        out[r + np.where(r >= p, self.width, 0)] = (W - self.t) / W * self.cnt_out / W
        out[p:p + self.width] = self.t / W * self.cnt_in / W
        return out

    def matrix(self, positions) -> np.ndarray:
        """(len(positions), D + L) float64: row i = P(. | positions[i])."""
        return np.stack([self.probabilities(int(p)) for p in positions])

    def affine_mean(self, u: int):
        """(A, B) with E[j | p = u x] = A + B x up to (1 - P_in) L / 2^32 (the rounding of the
        first word of bucket u x): P_in = T/2^32, mu_n = sum_r r cnt_n(r) / 2^32."""
        p_in = Fraction(self.t, W)
        mu_in = Fraction(int(np.dot(np.arange(self.width, dtype=np.int64), self.cnt_in)), W)
        mu_out = Fraction(int(np.dot(np.arange(self.span, dtype=np.int64), self.cnt_out)), W)
        a = p_in * mu_in + (1 - p_in) * (mu_out + self.width)
        b = u * (p_in - (1 - p_in) * Fraction(self.width, self.span))
        return float(a), float(b)


# --- the mechanisms' common client plumbing -------------------------------------------------

class NumericMechanism(Mechanism):
    """A mechanism over the N grid points of a numeric domain (`domain_size` = N): the value is a
    grid point x (spec §1.1, `grid_point`)."""

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        check_grid(self.domain_size, "domain.points")

    def grid_value(self, value) -> int:
        x = int(value)
        if isinstance(value, bool) or not 0 <= x < self.domain_size:
            raise ConfigError("value", "grid point must be in [0, %d), got %r"
                              % (self.domain_size, value))
        return x

    def check_words(self, words) -> list:
        return check_words(words, self.random_words, self.name)

    def run_batch(self, x: np.ndarray, rng, seq_start: int, kernel) -> np.ndarray:
        """Reports for every row of `x` (grid points, one row per device): words from `rng` in
        chunks, `kernel(x_chunk, n, words, out, start)` writes the bodies of rows start..."""
        out = report_array(self, x.shape[0], seq_start)

        def write(start, stop, words):
            kernel(np.ascontiguousarray(x[start:stop]), stop - start, words, out, start)

        run_chunks(self, rng, x.shape[0], write)
        return out

    def _perturb(self, x, n, words, out, stride):
        """The C kernel: bodies of n devices with grid points x from `words`, written at the
        pointer `out` every `stride` bytes."""
        raise NotImplementedError

    def _kernel(self, x, n, words, out, start):
        """`_perturb` into the bodies of rows start... of a report array."""
        self._perturb(x, n, words, body_ptr(out, start), out.shape[1])

    def simulate(self, x, rng, sketch=None):
        """Simulation's fast path: bodies only (no headers to fill, no reports to parse) from
        the C kernel straight into a sketch (new, or `sketch` updated); words from the seeded
        `rng` (aggregator side). Returns the sketch."""
        x = np.ascontiguousarray(check_grid_points(x, self.domain_size))
        sketch = self.new_sketch() if sketch is None else sketch
        rows = kernels.chunk_rows(self.random_words)
        for start, stop in kernels.spans(x.shape[0], min(rows, 1 << 20)):
            n = stop - start
            words = kernels.random_words(rng, n, self.random_words)
            bodies = np.empty((n, self.body_size), np.uint8)
            self._perturb(np.ascontiguousarray(x[start:stop]), n, words, kernels.byte_ptr(bodies),
                          self.body_size)
            sketch.fold_bodies(bodies)
        return sketch

    def one_report(self, x, words, seq: int, kernel) -> bytes:
        """One report through the batch kernel (batch of one; x a grid point or, for hm, the
        list of the device's grid points)."""
        out = report_array(self, 1, seq)
        w = np.array([self.check_words(words)], dtype=np.uint32)
        kernel(np.array([x], dtype=np.uint32), 1, w, out, 0)
        return out[0].tobytes()


class NumericSketch(IntStateSketch):
    """A numeric mechanism's int64 sketch: `_fold_at(pointer, n, stride)` folds n bodies."""

    def _fold_at(self, bodies, n: int, stride: int):
        raise NotImplementedError

    def _fold(self, arr):
        self._fold_at(body_ptr(arr), arr.shape[0], arr.shape[1])

    def fold_bodies(self, bodies: np.ndarray) -> int:
        """Simulation: fold an (n, body_size) array of bodies made by the mechanism's own
        kernel (no header, not validated)."""
        bodies = np.ascontiguousarray(bodies, dtype=np.uint8)
        if bodies.shape[0]:
            self._fold_at(kernels.byte_ptr(bodies), bodies.shape[0], bodies.shape[1])
        self.n += bodies.shape[0]
        return bodies.shape[0]


def kernel_ok(rc: int, name: str):
    if rc != 0:
        raise ValueError("%s kernel rejected its input" % name)


def window_params(ffi, grid: int, mul: int, div: int, span: int, width: int, t: int,
                  out_bytes: int):
    """The C `ldp_window_params` of one window channel (spec §3.3)."""
    p = ffi.new("ldp_window_params *")
    p.grid, p.mul, p.div, p.span, p.width, p.t_in, p.out_bytes = (grid, mul, div, span, width, t,
                                                                   out_bytes)
    return p


def window_reference(p: int, t: int, width: int, span: int, w0: int, w1: int) -> int:
    """Spec §3.3, plain Python: p + bucket(w1, L) if w0 < T, else r + L [r >= p] with
    r = bucket(w1, D)."""
    if w0 < t:
        return p + protocol.bucket(w1, width)
    r = protocol.bucket(w1, span)
    return r + (width if r >= p else 0)


def normal_interval(mean: float, se: float, level: float = 0.95):
    """mean -+ z se."""
    from statistics import NormalDist
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return mean - z * se, mean + z * se


class MeanEstimate:
    """A mean in t units ([-1, 1] over the domain), its standard error and a normal interval;
    `n` the reports it rests on. `grid(N)` gives the same in grid points."""

    __slots__ = ("t", "se", "low", "high", "n")

    def __init__(self, t: float, se: float, n: int, level: float = 0.95):
        self.t, self.se, self.n = t, se, n
        self.low, self.high = normal_interval(t, se, level)

    def grid(self, n: int):
        """(mean, low, high) in grid points of an N-point grid: x = (N-1)(t+1)/2."""
        return tuple((n - 1) * (v + 1) / 2 for v in (self.t, self.low, self.high))

    def as_dict(self) -> dict:
        return {"t": self.t, "se": self.se, "low": self.low, "high": self.high, "n": self.n}


def mean_from_moments(total: float, squares: float, n: int, level: float = 0.95) -> MeanEstimate:
    """Mean of n per-report estimates from their sum and sum of squares, with the sample
    variance / n as its variance (nan with fewer than two reports)."""
    if n < 1:
        return MeanEstimate(math.nan, math.nan, 0, level)
    mean = total / n
    var = (squares - n * mean * mean) / (n - 1) if n > 1 else math.nan
    return MeanEstimate(mean, math.sqrt(max(var, 0.0) / n), n, level)


def duchi_variance(eps: float, t=0.0):
    """Per-report variance of Duchi's one-bit at input t in [-1, 1]: ((e^eps+1)/(e^eps-1))^2 - t^2
    (Duchi et al. JASA 2018; Wang et al. ICDE 2019, Eq. 3)."""
    c = (math.exp(eps) + 1) / (math.exp(eps) - 1)
    return c * c - np.asarray(t, dtype=np.float64) ** 2


def pm_variance(eps: float, t=0.0):
    """Per-report variance of the Piecewise Mechanism: t^2 / (e^(eps/2) - 1) + (e^(eps/2) + 3) /
    (3 (e^(eps/2) - 1)^2) (Wang et al. ICDE 2019, Lemma 1)."""
    h = math.exp(eps / 2) - 1
    t = np.asarray(t, dtype=np.float64)
    return t * t / h + (h + 4) / (3 * h * h)


def hm_alpha(eps: float) -> float:
    """Probability hm uses PM: 1 - e^(-eps/2) above eps* (0.611 here), else 0."""
    return 1 - math.exp(-eps / 2) if eps >= HM_PM_FROM_MILLI / 1000.0 else 0.0


def hm_variance(eps: float, t=0.0):
    """Per-report variance of the Hybrid Mechanism: both parts are unbiased, so it is
    alpha Var_PM + (1 - alpha) Var_Duchi (Wang et al. ICDE 2019, §IV-C; 4.29 at eps 1)."""
    a = hm_alpha(eps)
    return a * pm_variance(eps, t) + (1 - a) * duchi_variance(eps, t)


def hm_mean_variance(eps: float, d: int, n: int, t):
    """Variance of one metric's mean over n devices of hm with d metrics at eps: each report
    carries k = max(1, min(d, floor(eps/2.5))) metrics at eps/k, a metric's mean is over the
    ~ n k / d reports that carry it: (d / (k n)) mean(Var_HM(eps/k, t)) + (d/k - 1) var(t) / n."""
    k = hm_sampled(int(round(eps * 1000)), d)
    t = np.asarray(t, dtype=np.float64)
    per = float(np.mean(hm_variance((int(round(eps * 1000)) // k) / 1000.0, t)))
    return d / (k * n) * per + (d / k - 1) * float(np.var(t)) / n


class WindowMechanism(NumericMechanism):
    """A mechanism that reports one cell j of the sliding window channel (spec §3.3) from two
    words: `pm` (position u x) and `sw` (position floor(x B / N)). Body y: u16 or u32."""

    random_words = 2
    out_bytes = 4
    window_field = "phases.eps_milli"

    def setup_window(self, mul: int, div: int, span: int, width: int):
        """Fix the channel (position x mul / div, D = span, L = width) and its threshold;
        ConfigError when window_ok fails."""
        t = window_threshold(self.eps_milli, width, span)
        if not window_ok(self.eps_milli, width, span, t):
            raise ConfigError(self.window_field, "the %s window (L %d, D %d) is not exactly eps-LDP "
                              "at eps_milli %d with integer thresholds (spec §3.3)"
                              % (self.name, width, span, self.eps_milli))
        self.mul, self.div, self.span, self.width, self.t_in = mul, div, span, width, t
        self.cells = span + width
        self.channel = WindowChannel(t, width, span)
        self._params = kernels.ffi.new("ldp_window_params *", {
            "grid": self.domain_size, "mul": mul, "div": div, "span": span, "width": width,
            "t_in": t, "out_bytes": self.out_bytes})

    @property
    def body_size(self) -> int:
        return self.out_bytes

    def position(self, x):
        """The window's position for grid point(s) x: x mul // div."""
        return np.asarray(x, dtype=np.int64) * self.mul // self.div

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        x = self.grid_value(value)
        w0, w1 = self.check_words(words)
        j = window_reference(x * self.mul // self.div, self.t_in, self.width, self.span, w0, w1)
        return self.header(seq) + j.to_bytes(self.out_bytes, "little")

    def _perturb(self, x, n, words, out, stride):
        kernel_ok(kernels.lib.ldp_window_perturb(self._params, kernels.ptr(x), n, kernels.ptr(words),
                                                 out, stride), self.name)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self.one_report(self.grid_value(value), words, seq, self._kernel)

    def perturb_batch(self, x, rng, seq_start: int = 0) -> np.ndarray:
        return self.run_batch(check_grid_points(x, self.domain_size), rng, seq_start, self._kernel)

    def cells_of(self, bodies: np.ndarray) -> np.ndarray:
        """The y field of every body."""
        raw = np.ascontiguousarray(bodies[:, :self.out_bytes])
        return raw.view("<u2" if self.out_bytes == 2 else "<u4").ravel()

    def validate_bodies(self, bodies: np.ndarray):
        return [("y", self.cells_of(bodies) >= self.cells)]
