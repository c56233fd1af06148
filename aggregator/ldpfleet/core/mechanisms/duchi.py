"""Duchi's one-bit mean (protocol_spec/v2 §3.3, id 13): the smallest numeric report.

Duchi, Jordan, Wainwright, "Minimax optimal procedures for locally private estimation" (JASA
2018) §4.2.3; restated in Wang et al., "Collecting and analyzing multidimensional data with
local differential privacy" (ICDE 2019) §III-A. The device's grid point x gives t in [-1, 1];
the bit is 1 with probability T(x) / 2^32, T(x) = 2^31 + (s/2)(2x - (N-1)) exactly linear in x
(`numeric.duchi_slope`), so z = (2b - 1) C with C = 2^32 / (s (N-1)) (~ (e^eps+1)/(e^eps-1))
is an exactly unbiased estimate of t with variance C^2 - t^2.

Aggregator state: the number of ones (int64, linear); n is the sketch's count.
"""
import numpy as np

from .. import kernels
from ..errors import ConfigError
from .numeric import (W, MeanEstimate, NumericMechanism, NumericSketch, check_grid_points, duchi_base, duchi_ok,
                      duchi_slope, kernel_ok, mean_from_moments, unit_value)


class DuchiMechanism(NumericMechanism):
    """One bit per report (R = 1): b = 1 iff w0 < T(x)."""

    name = "duchi"
    body_size = 1
    random_words = 1

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        n = self.domain_size
        if not duchi_ok(eps_milli, n):
            raise ConfigError("phases.eps_milli", "Duchi's bit over %d grid points has no "
                              "integer slope at eps_milli %d (spec §3.3)" % (n, eps_milli))
        self.slope = duchi_slope(eps_milli, n)
        self.base = duchi_base(n, self.slope)
        self.scale = W / (self.slope * (n - 1))
        self._params = kernels.ffi.new("ldp_duchi_params *", {"grid": n, "base": self.base,
                                                              "slope": self.slope})

    def threshold(self, x: int) -> int:
        """T(x) = 2^31 - (s/2)(N-1) + s x."""
        return self.base + self.slope * x

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        x = self.grid_value(value)
        (w0,) = self.check_words(words)
        return self.header(seq) + bytes([1 if w0 < self.threshold(x) else 0])

    def _perturb(self, x, n, words, out, stride):
        kernel_ok(kernels.lib.ldp_duchi_perturb(self._params, kernels.ptr(x), n, kernels.ptr(words),
                                                out, stride), self.name)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self.one_report(self.grid_value(value), words, seq, self._kernel)

    def perturb_batch(self, x, rng, seq_start: int = 0) -> np.ndarray:
        return self.run_batch(check_grid_points(x, self.domain_size), rng, seq_start, self._kernel)

    def validate_bodies(self, bodies: np.ndarray):
        return [("y", bodies[:, 0] > 1)]

    def new_sketch(self) -> "DuchiSketch":
        return DuchiSketch(self)

    def estimates(self, bits) -> np.ndarray:
        """Per-report estimates z = (2b - 1) C of t."""
        return (2.0 * np.asarray(bits, dtype=np.float64) - 1.0) * self.scale

    def report_distribution(self, x: int):
        """(estimate values, their exact probabilities) of one report at grid point x."""
        p1 = self.threshold(int(x)) / W
        return np.array([-self.scale, self.scale]), np.array([1 - p1, p1])

    def report_variance(self, x) -> np.ndarray:
        """Exact variance of one report's estimate at grid point(s) x: C^2 - t^2 (realised C)."""
        return self.scale ** 2 - unit_value(x, self.domain_size) ** 2

    def mean_variance(self, n: int, x) -> float:
        """Variance of the mean over n devices whose grid points are `x` (one per device)."""
        return float(np.mean(self.report_variance(x))) / n


class DuchiSketch(NumericSketch):
    STATE = ("ones",)

    def __init__(self, mechanism: DuchiMechanism):
        super().__init__(mechanism)
        self.ones = np.zeros(1, np.int64)

    def _fold_at(self, bodies, n, stride):
        kernels.lib.ldp_duchi_count(bodies, n, stride, kernels.ptr(self.ones))

    def mean(self, level: float = 0.95) -> MeanEstimate:
        """The unbiased mean of t with the sample variance of the reports' estimates."""
        c, ones = self.mechanism.scale, int(self.ones[0])
        total = c * (2 * ones - self.n)
        return mean_from_moments(total, self.n * c * c, self.n, level)

    def estimate(self, keys=None) -> np.ndarray:
        """The mean of t as a one-element array."""
        return np.array([self.mean().t])


MECHANISM = DuchiMechanism
