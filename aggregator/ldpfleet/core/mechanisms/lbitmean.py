"""The memoised one-bit mean of a daily counter (protocol_spec/v2 §3.2, id 21).

Ding, Kulkarni, Yekhanin, "Collecting telemetry data privately" (NeurIPS 2017): 1BitMean (§2.1)
reports one bit that is 1 with probability 1/(e^ε+1) + (x/m)(e^ε-1)/(e^ε+1) for a counter x in
[0, m]; for daily collection (§3) each device memoises one bit per point of a grid of s + 1
points over [0, m] and rounds its value to the grid with its own α chosen once (α-point
rounding, §3.1: unbiased, E[point] = x). Without more, a change of the reported bit reveals a
change of the rounded value (§3.3); as the paper's output perturbation does, every report is
the memoised bit flipped iff w < T_f, with T_f the smallest threshold that makes one report
ε1-LDP (spec §3.2).

The counter is an integer grid point in [0, m], m = domain_size - 1 of an `int` domain (a
numeric "range" domain is refused); values outside are clamped. Enrolment draws α (u32) and the s + 1
permanent bits: bit j is 1 iff w < T_j = T0 + floor(j (W - 2 T0) / s), T0 = T_oue_q(ε∞), so
T_s = W - T0 and any two grid points' bits are within e^ε∞. Rounding: j = floor(x s / m),
ρ = x s mod m, up to j + 1 iff α < floor(ρ W / m). Body y:u8 (0 or 1).
"""
from fractions import Fraction

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, IntParam, IntStateSketch, bitmap_bytes, body_ptr, pack_bitmap
from .longitudinal import EPS1_PARAM, W2, LongitudinalMechanism, split_input, t_bit_inst

S_MAX = 255


def grid_threshold(j: int, s: int, t0: int) -> int:
    return t0 + (j * (W - 2 * t0)) // s


class LbitmeanMechanism(LongitudinalMechanism):
    """Memoised 1BitMean over the integer grid [0, m], m = domain_size - 1 (params: s, the
    number of rounding segments, default 1; eps1_milli)."""

    name = "lbitmean"
    PARAMS = {"eps1_milli": EPS1_PARAM, "s": IntParam(1, 1, S_MAX)}
    body_size = 1
    random_words = 1

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        self.m = self.domain_size - 1
        if self.s > self.m:
            raise ConfigError("params.s", "s (%d) cannot exceed the grid's top m = %d"
                              % (self.s, self.m))
        self.t0 = protocol.t_oue_q(eps_milli)
        self.t_flip = t_bit_inst(self.t0, self.eps1_milli)

    classes = property(lambda self: self.s + 1)
    state_size = property(lambda self: 4 + bitmap_bytes(self.s + 1))
    enrol_words = property(lambda self: 2 + self.s)

    def clamp(self, value) -> int:
        """The grid point a value reports: integers clamped to [0, m], anything else 0."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            return 0
        return min(max(int(value), 0), self.m)

    def report_input(self, value) -> int:
        return self.clamp(value)

    def report_inputs(self, values):
        v = np.asarray(values, dtype=np.int64)
        return np.clip(v, 0, self.m).astype(np.uint32)

    def reference_enrol(self, words) -> bytes:
        w = self.check_enrol_words(words)
        bits = [w[1 + j] < grid_threshold(j, self.s, self.t0) for j in range(self.s + 1)]
        return w[0].to_bytes(4, "little") + pack_bitmap(bits)

    def grid_point(self, x: int, alpha: int) -> int:
        """α-point rounding of x to the grid (spec §3.2)."""
        j, rho = divmod(x * self.s, self.m)
        return j + (1 if alpha < (rho * W) // self.m else 0)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        value, state = split_input(value, self.state_size)
        (w0,) = self.check_words(words)
        j = self.grid_point(self.clamp(value), int.from_bytes(state[:4], "little"))
        bit = (state[4 + (j >> 3)] >> (j & 7)) & 1
        return self.header(seq) + bytes([bit ^ (1 if w0 < self.t_flip else 0)])

    def _enrol_kernel(self, n, words, out, stride):
        return kernels.lib.ldp_lbitmean_enrol(n, self.s, self.t0, words, out, stride)

    def _report_kernel(self, x, n, states, state_stride, words, out, stride):
        return kernels.lib.ldp_lbitmean_perturb(x, n, self.m, self.s, self.t_flip, states,
                                                state_stride, words, out, stride)

    fold_kind = kernels.lib.LDP_LONG_BIT
    fold_limit = 1

    def validate_bodies(self, bodies):
        return [("y", bodies[:, 0] > 1)]

    def new_sketch(self) -> "LbitmeanSketch":
        return LbitmeanSketch(self)

    # --- estimation -----------------------------------------------------------------------
    def report_one(self, j: int) -> Fraction:
        """P(y = 1 | grid point j), exact."""
        t, f = grid_threshold(j, self.s, self.t0), self.t_flip
        return Fraction(t * (W - f) + (W - t) * f, W2)

    def linear_coefficients(self):
        """(c0, c1): P(y = 1 | x) = c0 + c1 x / m for the real-valued rounding (the integer
        thresholds add at most 2^-31 to it)."""
        c0 = self.report_one(0)
        return c0, self.report_one(self.s) - c0

    def mean_variance(self, n: int, values) -> float:
        """Variance of one round's estimated mean (`LbitmeanSketch.mean`) for n devices
        holding `values` (their counters; independent devices, each bit Bernoulli)."""
        c0, c1 = (float(v) for v in self.linear_coefficients())
        p = c0 + c1 * np.clip(np.asarray(values, np.float64), 0, self.m) / self.m
        return float(self.m ** 2 * np.sum(p * (1 - p)) / (n * n * c1 * c1))

    def item_variances(self, n: int, freqs):
        raise NotImplementedError("lbitmean estimates a mean: use mean_variance")


class LbitmeanSketch(IntStateSketch):
    """ones = reports with y = 1; the estimated mean is m (ones/n - c0) / c1."""

    STATE = ("ones",)

    def __init__(self, mechanism: LbitmeanMechanism):
        super().__init__(mechanism)
        self.ones = np.zeros(1, np.int64)

    def update(self, reports) -> int:
        return self.mechanism.fold(self, reports, self.ones)

    def _fold(self, arr):
        got = kernels.lib.ldp_lbitmean_count(body_ptr(arr), arr.shape[0], arr.shape[1])
        if got < 0:
            raise ValueError("lbitmean body with y > 1 got past validation")
        self.ones[0] += got

    def mean(self) -> float:
        """Unbiased estimate of the devices' mean counter (Ding et al. §2.1's estimator)."""
        c0, c1 = (float(v) for v in self.mechanism.linear_coefficients())
        return self.mechanism.m * (self.ones[0] / max(self.n, 1) - c0) / c1

    def estimate(self, keys):
        raise NotImplementedError("lbitmean estimates a mean: use mean()")


MECHANISM = LbitmeanMechanism
