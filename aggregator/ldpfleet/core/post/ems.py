"""Expectation-maximisation with smoothing (EMS) for Square Wave reports, and what a histogram
over bins gives: quantiles, the mean, the Wasserstein-1 distance.

Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Estimating numerical distributions under local
differential privacy" (SIGMOD 2020) §5: EM over the channel P (P[i, j] = probability of output
j given input bin i) maximises the likelihood of the output counts; EMS adds, after each M
step, a smoothing of the bin probabilities with the binomial kernel (1, 2, 1)/4 (cut and
renormalised at the edges), which keeps the estimate from fitting the noise. Stopping rule as
the authors' code: the log-likelihood (in reports) improved by less than 10^-3.

The channel is an operator (`forward`: bins -> outputs, `backward`: its transpose), applied to R
histograms at once (columns), so a bootstrap runs all its replicates in one loop. `BandChannel`
is the Square Wave window in O(bins + outputs) per product (cumulative sums); `MatrixChannel` a
dense matrix.
"""
import numpy as np

DEFAULT_TOLERANCE = 1e-3
DEFAULT_MAX_ITER = 10000


class MatrixChannel:
    """A dense (bins, outputs) channel matrix."""

    def __init__(self, matrix: np.ndarray):
        self.matrix = np.asarray(matrix, dtype=np.float64)
        self.t = np.ascontiguousarray(self.matrix.T)
        self.bins, self.outputs = self.matrix.shape

    def forward(self, theta):
        return self.t @ theta

    def backward(self, r):
        return self.matrix @ r


class BandChannel:
    """Square Wave's window: input bin i gives output j in [i, i + L) with probability `high`
    per cell, every other of the bins - 1 + L outputs with `low` per cell."""

    def __init__(self, bins: int, width: int, high: float, low: float):
        self.bins, self.width, self.high, self.low = bins, width, high, low
        self.outputs = bins - 1 + width
        j = np.arange(self.outputs)
        self._hi = np.minimum(j + 1, bins)             # forward: bins [j - L + 1, j] ∩ [0, B)
        self._lo = np.maximum(j - width + 1, 0)
        i = np.arange(bins)
        self._end = i + width                          # backward: outputs [i, i + L)

    def forward(self, theta):
        c = np.concatenate([np.zeros((1,) + theta.shape[1:]), np.cumsum(theta, axis=0)])
        inside = c[self._hi] - c[self._lo]
        return self.low * (c[-1] - inside) + self.high * inside

    def backward(self, r):
        c = np.concatenate([np.zeros((1,) + r.shape[1:]), np.cumsum(r, axis=0)])
        inside = c[self._end] - c[:self.bins]
        return self.low * c[-1] + (self.high - self.low) * inside


def smooth(theta: np.ndarray) -> np.ndarray:
    """The binomial (1, 2, 1)/4 kernel on every column, the edge bins' weights renormalised
    (the authors' smoothing matrix as a 3-tap filter), then each column renormalised."""
    out = 2.0 * theta
    out[1:] += theta[:-1]
    out[:-1] += theta[1:]
    out /= 4.0
    out[0] *= 4.0 / 3.0
    out[-1] *= 4.0 / 3.0
    return out / out.sum(axis=0)


def as_channel(channel):
    return MatrixChannel(channel) if isinstance(channel, np.ndarray) else channel


def ems(counts, channel, smoothing: bool = True, tolerance: float = DEFAULT_TOLERANCE,
        max_iter: int = DEFAULT_MAX_ITER, start=None):
    """(bin probabilities, iterations) maximising the (smoothed) likelihood of the output
    `counts` (one vector, or an (R, outputs) array: then (bins, R) estimates and the largest
    iteration count) under `channel` (a matrix or a channel operator). `start`: a warm start.
    Each column stops at the first estimate whose log-likelihood improved by less than
    `tolerance` on the one before."""
    channel = as_channel(channel)
    counts = np.asarray(counts, dtype=np.float64)
    one = counts.ndim == 1
    h = np.ascontiguousarray(counts.reshape(-1, counts.shape[-1]).T)     # (outputs, R)
    reps = h.shape[1]
    if start is None:
        start = np.full(channel.bins, 1.0 / channel.bins)
    theta = np.repeat(np.asarray(start, dtype=np.float64).reshape(-1, 1), reps, axis=1)
    result = np.empty_like(theta)
    active = np.arange(reps)           # columns still iterating (converged ones are dropped)
    old = None
    iterations = 0
    for iterations in range(max_iter + 1):
        q = channel.forward(theta)
        used = h > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            loglik = np.where(used, h * np.log(q), 0.0).sum(axis=0)
            ratio = np.where(used, h / q, 0.0)
        if old is not None:
            now = np.abs(loglik - old) < tolerance
            if now.any():
                result[:, active[now]] = theta[:, now]
                keep = ~now
                active, theta, h, ratio, loglik = (active[keep], theta[:, keep], h[:, keep],
                                                   ratio[:, keep], loglik[keep])
                if not active.size:
                    break
        old = loglik
        theta = theta * channel.backward(ratio)
        theta /= theta.sum(axis=0)
        if smoothing:
            theta = smooth(theta)
    if active.size:
        result[:, active] = theta
    return (result[:, 0] if one else result), iterations


def cdf_at_edges(theta) -> np.ndarray:
    """Cumulative probability at the B + 1 bin edges."""
    return np.concatenate([[0.0], np.cumsum(theta)])


def quantile(theta, edges, q: float) -> float:
    """The q-quantile of a histogram (bin i spans edges[i]..edges[i+1], mass uniform inside)."""
    cdf = cdf_at_edges(theta)
    cdf = cdf / cdf[-1]
    i = int(np.searchsorted(cdf, q, side="left"))
    i = min(max(i, 1), len(theta))
    lo, hi = cdf[i - 1], cdf[i]
    frac = 0.0 if hi <= lo else (q - lo) / (hi - lo)
    return float(edges[i - 1] + frac * (edges[i] - edges[i - 1]))


def histogram_mean(theta, edges) -> float:
    """Mean of a histogram whose mass is uniform inside each bin."""
    edges = np.asarray(edges, dtype=np.float64)
    return float(np.dot(theta, (edges[:-1] + edges[1:]) / 2) / np.sum(theta))


def wasserstein1(p, q, width: float = None) -> float:
    """W1 between two histograms over the same B equal bins: sum |CDF_p - CDF_q| x bin width
    (1/B by default: the distance on [0, 1])."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    width = 1.0 / p.size if width is None else width
    return float(np.abs(np.cumsum(p / p.sum()) - np.cumsum(q / q.sum())).sum() * width)
