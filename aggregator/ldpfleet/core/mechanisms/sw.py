"""Square Wave on a discrete output grid, with EMS (protocol_spec/v2 §3.3, id 16).

Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Estimating numerical distributions under local
differential privacy" (SIGMOD 2020) §4: a value v in [0, 1] is reported as a point within b of
v with density e^eps times the density elsewhere in [-b, 1 + b]. Discretely: the grid point x
falls in input bin i = floor(x B / N) (B `bins`, 2..1024); the output is one of D + L cells,
D = B - 1, the window of L (`window`, default round(2 b B) with the paper's b, §4.2) cells at
i kept with the integer threshold T_win (`numeric`), so every ratio is <= e^eps exactly.
Body y:u16 (D + L <= 3071); R = 2.

Aggregator state: the count of every output cell (int64, linear). `histogram()` runs EMS
(`post.ems`, §5) over the channel (`band_channel`) to a distribution over the B bins; quantiles and
the mean come from it, with intervals from a bootstrap over the reports (resampled output
counts, EMS again from the uniform start, as the estimate): EMS is a smoothed fixed point with
no closed-form variance, and resampling reports repeats exactly the noise the estimate saw
(sampling and perturbation); the smoothing's bias is not in the interval.
"""
import numpy as np

from .. import kernels
from ..errors import ConfigError
from .base import IntParam
from .numeric import W, NumericSketch, WindowMechanism, sw_default_window

BINS_MAX = 1024
DEFAULT_BINS = 1024
"""bins defaults to min(N, 1024): EMS's (1, 2, 1) smoothing acts per bin, so coarse bins bias a
distribution that is narrow against the range (N(21.5, 4) on -40..85 at eps 1, n = 10^5: quartiles
off by ~1 degree at 256 bins, ~0.1 at 1024; Beta(2, 5) on the whole range: W1 alike)."""
BOOTSTRAP = 100
BOOTSTRAP_SEED = 0x5157


class SwMechanism(WindowMechanism):
    """params: bins (B, <= N; default min(N, 1024)), window (L, <= 2B; default from the
    paper's b)."""

    name = "sw"
    out_bytes = 2
    PARAMS = {"bins": IntParam(DEFAULT_BINS, 2, BINS_MAX), "window": IntParam(1, 1, 2 * BINS_MAX)}
    window_field = "params.window"

    def __init__(self, eps_milli: int, domain_size: int, bins: int = None, window: int = None,
                 **kw):
        if bins is None:
            bins = min(DEFAULT_BINS, domain_size)
        if window is None and isinstance(bins, int) and 2 <= bins <= BINS_MAX:
            window = sw_default_window(eps_milli, bins)
        super().__init__(eps_milli, domain_size, bins=bins, window=window, **kw)
        if self.bins > self.domain_size:
            raise ConfigError("params.bins", "at most the domain's %d grid points, got %d"
                              % (self.domain_size, self.bins))
        if self.window > 2 * self.bins:
            raise ConfigError("params.window", "at most 2 x bins = %d cells, got %d"
                              % (2 * self.bins, self.window))
        self.setup_window(self.bins, self.domain_size, self.bins - 1, self.window)

    def bin_of(self, x):
        """Input bin(s) floor(x B / N)."""
        return self.position(x)

    def bin_edges(self) -> np.ndarray:
        """B + 1 edges in grid units: bin i holds grid points ceil(i N / B) .. ceil((i+1) N / B)
        - 1, its edges are half a grid step outside them, clipped to [0, N - 1]."""
        n, b = self.domain_size, self.bins
        first = -((-np.arange(b + 1, dtype=np.int64) * n) // b)
        return np.clip(first - 0.5, 0.0, n - 1.0)

    def channel_matrix(self) -> np.ndarray:
        """P[i, j]: probability of output cell j for input bin i (exact counts / 2^64)."""
        return self.channel.matrix(range(self.bins))

    def band_channel(self):
        """The channel EMS runs on: every window cell at T / (2^32 L), every other cell at
        (2^32 - T) / (2^32 D) — each within one word in cmin (relative 2^-21 at most) of the
        exact `channel_matrix` (bucket counts are cmin or cmin + 1)."""
        from ..post.ems import BandChannel
        return BandChannel(self.bins, self.width, self.t_in / W / self.width,
                           (W - self.t_in) / W / self.span)

    def new_sketch(self) -> "SwSketch":
        return SwSketch(self)


def _ems():
    """post.ems, imported on first use (the post package pulls in scipy: serve's ingest path,
    which only folds counts, need not load it)."""
    from ..post import ems
    return ems


class SwSketch(NumericSketch):
    STATE = ("counts",)

    def __init__(self, mechanism: SwMechanism):
        super().__init__(mechanism)
        self.counts = np.zeros(mechanism.cells, np.int64)
        self._channel = None
        self._boot = None

    def _fold_at(self, bodies, n, stride):
        kernels.lib.ldp_window_hist(self.mechanism._params, bodies, n, stride, kernels.ptr(self.counts))

    @property
    def channel(self):
        if self._channel is None:
            self._channel = self.mechanism.band_channel()
        return self._channel

    def histogram(self, smoothing: bool = True, **opts) -> np.ndarray:
        """The distribution over the B input bins (EMS; EM with smoothing=False)."""
        return _ems().ems(self.counts, self.channel, smoothing=smoothing, **opts)[0]

    def bootstrap(self, replicates: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED):
        """(estimate, (bins, replicates) replicate histograms): the output counts resampled
        multinomially (seeded, aggregator-side), EMS run on each exactly as for the estimate
        (uniform start, same stopping rule), so a replicate varies as the estimate does. Cached.

        Not from the estimate: a warm start stops (log-likelihood tolerance) near where it
        began and narrows the spread. Measured over 200 seeded fleets (eps 1, 64 bins, n =
        2 x 10^4; 9 bins across the range), bootstrap SD / SD of the estimates across fleets,
        warm -> uniform start:
        Beta(5, 5) bins 0.77..0.91 -> 0.92..1.06, mean 0.93 -> 1.02; Beta(2, 5) bins 0.58
        (upper tail)..0.98 -> 0.93..1.08, mean 0.91 -> 1.00 (the SD of an SD from 200 draws:
        5 %). At the default 1024 bins, n = 10^5, Beta(2, 5) (40 fleets: 11 %) the starts
        differ less (mean 0.91 -> 0.92, median bin 0.99 -> 1.08); the uniform start costs
        ~20 % more iterations there (100 replicates: 4.5 s)."""
        key = (replicates, seed, self.n, self.counts.tobytes())
        if self._boot is not None and self._boot[0] == key:
            return self._boot[1]
        theta = self.histogram()
        rng = np.random.default_rng(seed)
        total = int(self.counts.sum())
        resampled = rng.multinomial(total, self.counts / max(total, 1), size=replicates)
        reps = _ems().ems(resampled, self.channel)[0]
        self._boot = (key, (theta, reps))
        return theta, reps

    def quantiles(self, qs, level: float = 0.95, replicates: int = BOOTSTRAP,
                  seed: int = BOOTSTRAP_SEED) -> list:
        """[(q, quantile, low, high)] in grid units, with percentile bootstrap intervals."""
        edges = self.mechanism.bin_edges()
        theta, reps = self.bootstrap(replicates, seed)
        alpha = (1 - level) / 2
        out = []
        for q in qs:
            values = [_ems().quantile(r, edges, q) for r in reps.T]
            out.append((q, _ems().quantile(theta, edges, q), float(np.quantile(values, alpha)),
                        float(np.quantile(values, 1 - alpha))))
        return out

    def mean(self, level: float = 0.95, replicates: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED):
        """(mean, low, high) in grid units from the histogram, bootstrap interval."""
        edges = self.mechanism.bin_edges()
        theta, reps = self.bootstrap(replicates, seed)
        values = [_ems().histogram_mean(r, edges) for r in reps.T]
        alpha = (1 - level) / 2
        return (_ems().histogram_mean(theta, edges), float(np.quantile(values, alpha)),
                float(np.quantile(values, 1 - alpha)))

    def estimate(self, keys=None) -> np.ndarray:
        """The histogram over the bins (fractions)."""
        return self.histogram()


MECHANISM = SwMechanism
