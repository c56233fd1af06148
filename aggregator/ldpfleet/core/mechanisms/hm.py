"""Hybrid Mechanism with metric sampling (protocol_spec/v2 §3.3, id 15).

Wang et al., "Collecting and analyzing multidimensional data with local differential privacy"
(ICDE 2019): §IV-C, the Hybrid Mechanism (PM with probability alpha = 1 - e^(-eps/2) above
eps* ~ 0.61, Duchi's one-bit otherwise; both unbiased, so its variance is the alpha-mixture of
theirs, 4.29 at eps 1 in the worst case), and §IV-D, Algorithm 4: a device with d metrics
reports k = max(1, min(d, floor(eps / 2.5))) of them, drawn uniformly without replacement, each
at eps / k (here eps_milli // k). The draw (a partial Fisher-Yates shuffle from k OS words) and
the choice of PM or Duchi (one word) never depend on the values; the report says which metrics
and which mechanism.

Body: k entries of (attr:u8, kind:u8, y:u32): kind 0 = Duchi's bit y in {0, 1}, kind 1 = PM's
cell y in [0, D + L). Words: k sampling words, then (w_choice, w0, w1) per entry (R = 4k).

Estimator: a metric's mean is the mean of the per-report estimates of the reports that carry it
(the paper's d/k scaling with the realised share of reports; unbiased because which devices
carry a metric is independent of every value). Aggregator state per metric: Duchi reports and
ones, PM reports, sum of cells and of squared cells (hi/lo) — int64, linear.
"""
import numpy as np

from .. import kernels
from ..errors import ConfigError
from .base import IntParam, body_u32
from .numeric import (METRICS_MAX, W, MeanEstimate, NumericMechanism, NumericSketch,
                      check_grid_points,
                      duchi_base, duchi_ok, duchi_slope, hm_choice_threshold, hm_sampled,
                      kernel_ok, mean_from_moments, pm_shape, unit_value, window_ok,
                      window_reference, window_threshold, WindowChannel)


class HmMechanism(NumericMechanism):
    """d metrics (params: metrics), each over the N grid points of the campaign's domain."""

    name = "hm"
    PARAMS = {"metrics": IntParam(1, 1, METRICS_MAX)}

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        n, d = self.domain_size, self.metrics
        self.sampled = hm_sampled(eps_milli, d)
        self.eps_metric = eps_milli // self.sampled
        e = self.eps_metric
        if not duchi_ok(e, n):
            raise ConfigError("phases.eps_milli", "hm's one-bit part over %d grid points has no "
                              "integer slope at eps_milli %d (spec §3.3)" % (n, e))
        self.slope = duchi_slope(e, n)
        self.base = duchi_base(n, self.slope)
        self.duchi_scale = W / (self.slope * (n - 1))
        self.t_choice = hm_choice_threshold(e)
        self.u, self.span, self.width = pm_shape(e, n)
        self.t_in = window_threshold(e, self.width, self.span)
        if not window_ok(e, self.width, self.span, self.t_in):
            raise ConfigError("phases.eps_milli", "hm's PM window is not exactly eps-LDP at "
                              "eps_milli %d (spec §3.3)" % e)
        self.cells = self.span + self.width
        self.channel = WindowChannel(self.t_in, self.width, self.span)
        a, b = self.channel.affine_mean(self.u)
        self.slope_t, self.offset_t = 2.0 / (b * (n - 1)), -2.0 * a / (b * (n - 1)) - 1.0
        self._params = kernels.ffi.new("ldp_hm_params *", {
            "metrics": d, "sampled": self.sampled, "t_choice": self.t_choice,
            "duchi": {"grid": n, "base": self.base, "slope": self.slope},
            "pm": {"grid": n, "mul": self.u, "div": 1, "span": self.span, "width": self.width,
                   "t_in": self.t_in, "out_bytes": 4}})

    @property
    def body_size(self) -> int:
        return 6 * self.sampled

    @property
    def random_words(self) -> int:
        return 4 * self.sampled

    @property
    def pm_probability(self) -> float:
        return self.t_choice / W

    def grid_values(self, value) -> list:
        """The device's d grid points (an int is one metric)."""
        values = [value] if isinstance(value, (int, np.integer)) else list(value)
        if len(values) != self.metrics:
            raise ConfigError("value", "hm needs %d grid points, got %d"
                              % (self.metrics, len(values)))
        return [self.grid_value(v) for v in values]

    def sampled_metrics(self, words) -> list:
        """The k metrics of a report: partial Fisher-Yates with r = i + bucket(w_i, d - i)."""
        from .. import protocol
        perm = list(range(self.metrics))
        for i in range(self.sampled):
            r = i + protocol.bucket(words[i], self.metrics - i)
            perm[i], perm[r] = perm[r], perm[i]
        return perm[:self.sampled]

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        xs = self.grid_values(value)
        words = self.check_words(words)
        k = self.sampled
        body = b""
        for i, a in enumerate(self.sampled_metrics(words)):
            wc, w0, w1 = words[k + 3 * i:k + 3 * i + 3]
            x = xs[a]
            if wc < self.t_choice:
                kind, y = 1, window_reference(x * self.u, self.t_in, self.width, self.span, w0, w1)
            else:
                kind, y = 0, 1 if w0 < self.base + self.slope * x else 0
            body += bytes([a, kind]) + y.to_bytes(4, "little")
        return self.header(seq) + body

    def _perturb(self, x, n, words, out, stride):
        kernel_ok(kernels.lib.ldp_hm_perturb(self._params, kernels.ptr(x), n, kernels.ptr(words),
                                             out, stride), self.name)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self.one_report(self.grid_values(value), words, seq, self._kernel)

    def perturb_batch(self, x, rng, seq_start: int = 0) -> np.ndarray:
        """x: (n, d) grid points (or (n,) when d == 1)."""
        x = check_grid_points(x, self.domain_size).reshape(-1, self.metrics)
        return self.run_batch(np.ascontiguousarray(x), rng, seq_start, self._kernel)

    def simulate(self, x, rng, sketch=None):
        """`NumericMechanism.simulate` with (n, d) grid points."""
        x = check_grid_points(x, self.domain_size).reshape(-1, self.metrics)
        return super().simulate(np.ascontiguousarray(x), rng, sketch)

    def validate_bodies(self, bodies: np.ndarray):
        attr_bad = np.zeros(bodies.shape[0], bool)
        kind_bad = np.zeros(bodies.shape[0], bool)
        y_bad = np.zeros(bodies.shape[0], bool)
        attrs = [bodies[:, 6 * i] for i in range(self.sampled)]
        for i in range(self.sampled):
            attr_bad |= attrs[i] >= self.metrics
            for j in range(i):
                attr_bad |= attrs[i] == attrs[j]
            kind = bodies[:, 6 * i + 1]
            kind_bad |= (kind > 1) | ((kind == 1) & (self.t_choice == 0))
            y = body_u32(bodies, 6 * i + 2)
            y_bad |= np.where(kind == 0, y > 1, y >= self.cells)
        return [("attr", attr_bad), ("kind", kind_bad), ("y", y_bad)]

    def new_sketch(self) -> "HmSketch":
        return HmSketch(self)

    def report_distribution(self, x: int):
        """(estimate values, exact probabilities) of one carried metric's estimate at grid point
        x: PM's cells with probability T_hm / 2^32, Duchi's -C, +C otherwise."""
        p = self.t_choice / W
        fj = self.slope_t * np.arange(self.cells) + self.offset_t
        p1 = (self.base + self.slope * int(x)) / W
        c = self.duchi_scale
        return (np.concatenate([fj, [-c, c]]),
                np.concatenate([p * self.channel.probabilities(int(x) * self.u),
                                [(1 - p) * (1 - p1), (1 - p) * p1]]))

    def report_variance(self, x) -> np.ndarray:
        """Exact variance of one carried metric's estimate at grid point(s) x (the mixture of
        Duchi's and PM's exact distributions)."""
        out = []
        for v in np.atleast_1d(x):
            f, prob = self.report_distribution(int(v))
            mean = float(np.dot(prob, f))
            out.append(float(np.dot(prob, (f - mean) ** 2)))
        return np.array(out)

    def mean_variance(self, n: int, x) -> float:
        """Variance of one metric's mean over n devices whose grid points of that metric are
        `x`: ~ (d / (k n)) mean(per-report variance) + (d/k - 1) var(t) / n (the share of
        devices that carry it)."""
        x = np.asarray(x)
        values, counts = np.unique(x, return_counts=True)
        per = float(np.dot(self.report_variance(values), counts) / counts.sum())
        ratio = self.metrics / self.sampled
        return ratio * per / n + (ratio - 1) * float(np.var(unit_value(x, self.domain_size))) / n


class HmSketch(NumericSketch):
    """acc[a] = (Duchi reports, ones, PM reports, sum of cells, sum of cell^2 >> 20, sum of
    cell^2 mod 2^20) of metric a."""

    STATE = ("acc",)

    def __init__(self, mechanism: HmMechanism):
        super().__init__(mechanism)
        self.acc = np.zeros((mechanism.metrics, 6), np.int64)

    def _fold_at(self, bodies, n, stride):
        kernels.lib.ldp_hm_fold(self.mechanism._params, bodies, n, stride, kernels.ptr(self.acc))

    def means(self, level: float = 0.95) -> list:
        """One MeanEstimate per metric (t units)."""
        m = self.mechanism
        out = []
        for nd, ones, npm, total, hi, lo in self.acc.tolist():
            c = m.duchi_scale
            squares_pm = (hi << 20) + lo
            a, b = m.slope_t, m.offset_t
            total_z = c * (2 * ones - nd) + a * total + npm * b
            squares = nd * c * c + a * a * squares_pm + 2 * a * b * total + npm * b * b
            out.append(mean_from_moments(total_z, squares, nd + npm, level))
        return out

    def mean(self, level: float = 0.95) -> MeanEstimate:
        """The first metric's mean (the only one when d = 1)."""
        return self.means(level)[0]

    def estimate(self, keys=None) -> np.ndarray:
        return np.array([e.t for e in self.means()])


MECHANISM = HmMechanism
