"""Piecewise Mechanism on a discrete output grid (protocol_spec/v2 §3.3, id 14).

Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, "Collecting and analyzing multidimensional data
with local differential privacy" (ICDE 2019) §III-B, Algorithm 2: the output is uniform on a
window of width C - 1 around t with probability e^(eps/2) / (e^(eps/2) + 1), else uniform on
the rest of [-C, C]. Here the output range is D + L cells: the window of L cells slides by
u = floor(65536 / (N-1)) cells per grid step (D = u (N-1) positions), L = floor(D S / E_half)
(L / D ~ e^(-eps/2) = (C-1)/(C+1), the paper's proportion), and the in-window probability is
the integer threshold T_win that makes every output's ratio <= e^eps exactly (`numeric`).

Estimator: E[j | x] = A + B x up to (1 - P_in) L / 2^32 (`WindowChannel.affine_mean`; at most
2^-31 of the range for eps >= 1, 2^-21 at eps 0.001), so f(j) = 2 (j - A) / (B (N-1)) - 1
estimates t; its variance is the paper's t^2 / (e^(eps/2) - 1) + (e^(eps/2) + 3) / (3 (e^(eps/2)
- 1)^2) up to the grid (`report_variance` gives the exact one).

Aggregator state: sum of j and of j^2 (as j^2 >> 20 and j^2 mod 2^20: int64 for 2^43 reports).
"""
import numpy as np

from .. import kernels
from .numeric import (MeanEstimate, NumericSketch, WindowMechanism, mean_from_moments, pm_shape, unit_value)


class PmMechanism(WindowMechanism):
    """y:u32, the output cell j in [0, D + L); R = 2 (w0 window or not, w1 the cell)."""

    name = "pm"
    out_bytes = 4

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        n = self.domain_size
        self.u, span, width = pm_shape(eps_milli, n)
        self.setup_window(self.u, 1, span, width)
        a, b = self.channel.affine_mean(self.u)
        self.slope_t = 2.0 / (b * (n - 1))   # f(j) = slope_t j + offset_t
        self.offset_t = -2.0 * a / (b * (n - 1)) - 1.0

    def estimates(self, cells) -> np.ndarray:
        """Per-report estimates f(j) of t."""
        return self.slope_t * np.asarray(cells, dtype=np.float64) + self.offset_t

    def report_distribution(self, x: int):
        """(estimate values f(j), their exact probabilities) of one report at grid point x."""
        return self.estimates(np.arange(self.cells)), self.channel.probabilities(int(x) * self.u)

    def report_moments(self, x: int):
        """(E[f(j)] - t, Var f(j)) at grid point x, from the exact output distribution."""
        f, p = self.report_distribution(x)
        mean = float(np.dot(p, f))
        return mean - float(unit_value(x, self.domain_size)), float(np.dot(p, (f - mean) ** 2))

    def report_variance(self, x) -> np.ndarray:
        """Exact variance of one report's estimate at grid point(s) x."""
        return np.array([self.report_moments(v)[1] for v in np.atleast_1d(x)])

    def mean_variance(self, n: int, x) -> float:
        """Variance of the mean over n devices whose grid points are `x` (one per device;
        exact per distinct point)."""
        values, counts = np.unique(np.asarray(x), return_counts=True)
        return float(np.dot(self.report_variance(values), counts) / counts.sum()) / n

    def new_sketch(self) -> "PmSketch":
        return PmSketch(self)


def moments_of_cells(mech, total_cells: int, square_hi: int, square_lo: int, n: int):
    """(sum, sum of squares) of the per-report estimates slope j + offset from the sums of j and
    j^2 (j^2 as hi << 20 | lo)."""
    squares = (int(square_hi) << 20) + int(square_lo)
    a, b = mech.slope_t, mech.offset_t
    total = a * total_cells + n * b
    return total, a * a * squares + 2 * a * b * total_cells + n * b * b


class PmSketch(NumericSketch):
    STATE = ("sums",)

    def __init__(self, mechanism: PmMechanism):
        super().__init__(mechanism)
        self.sums = np.zeros(3, np.int64)

    def _fold_at(self, bodies, n, stride):
        kernels.lib.ldp_window_sums(self.mechanism._params, bodies, n, stride, kernels.ptr(self.sums))

    def mean(self, level: float = 0.95) -> MeanEstimate:
        total, squares = moments_of_cells(self.mechanism, int(self.sums[0]), int(self.sums[1]),
                                          int(self.sums[2]), self.n)
        return mean_from_moments(total, squares, self.n, level)

    def estimate(self, keys=None) -> np.ndarray:
        return np.array([self.mean().t])


MECHANISM = PmMechanism
