"""[CAL] Jia, Gong, "Calibrate: Frequency Estimation and Heavy Hitter Identification with
Local Differential Privacy via Incorporating Prior Knowledge" (INFOCOM 2019) §III: priors, the
posterior mean, the prior fits, and the Power / PowerNS / Calibrate-Gauss methods built on them
([NH] §3.2 Power, [NA] §IV-E PowerNS)."""
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, signal, special

from .checks import (DEFAULT_WINDOW_SIGMAS, PostProcessError, _check_inputs, _scalar_variance,
                     project_to_simplex)

# --- [CAL] §III Calibrate: priors ------------------------------------------------------------

def generalized_harmonic(n, s):
    """H(n, s) = sum_{k=1}^n k^-s, the power-law normaliser of [CAL] Eq. 15 / [NH] Eq. 10.

    Direct sum of the first 1000 terms, Euler-Maclaurin (three Bernoulli terms) for the rest:
    the next term is below 1e-20 of the sum, so the result is exact to rounding. O(1) in n.
    """
    head = min(int(n), 1000)
    ks = np.arange(1, head + 1, dtype=np.float64)
    total = float(np.sum(ks ** -s))
    if n <= head:
        return total
    a, b = float(head + 1), float(n)
    log_ratio = math.log(b / a)
    if abs(1.0 - s) * log_ratio < 1e-12:
        integral = a ** (1.0 - s) * log_ratio
    else:
        integral = a ** (1.0 - s) * math.expm1((1.0 - s) * log_ratio) / (1.0 - s)
    d1 = lambda x: -s * x ** (-s - 1)
    d3 = lambda x: -s * (s + 1) * (s + 2) * x ** (-s - 3)
    d5 = lambda x: -s * (s + 1) * (s + 2) * (s + 3) * (s + 4) * x ** (-s - 5)
    return (total + integral + 0.5 * (a ** -s + b ** -s) + (d1(b) - d1(a)) / 12.0
            - (d3(b) - d3(a)) / 720.0 + (d5(b) - d5(a)) / 30240.0)


@dataclass(frozen=True)
class PowerLawPrior:
    """[CAL] Eq. 15 / [NH] Eq. 10: Pr[true count = k] proportional to k^-exponent, k = 1..n."""

    exponent: float
    n: int

    @property
    def lo(self):
        return 1

    @property
    def hi(self):
        return self.n

    def log_weight(self, k):
        return -self.exponent * np.log(k)

    def log_normaliser(self):
        return math.log(generalized_harmonic(self.n, self.exponent))

    def mean(self):
        return generalized_harmonic(self.n, self.exponent - 1.0) / generalized_harmonic(self.n, self.exponent)

    def posterior_centre(self, x, sigma):
        return np.clip(np.rint(x), self.lo, self.hi)


@dataclass(frozen=True)
class GaussianPrior:
    """[CAL] §III-C: Pr[true count = k] proportional to exp(-(k - mean)^2 / (2 std^2)),
    k = 0..n (counts)."""

    mean: float
    std: float
    n: int

    @property
    def lo(self):
        return 0

    @property
    def hi(self):
        return self.n

    def log_weight(self, k):
        return -0.5 * ((k - self.mean) / self.std) ** 2

    def log_normaliser(self):
        half_width = 12.0 * self.std + 2.0
        start = max(self.lo, int(math.floor(self.mean - half_width)))
        stop = min(self.hi, int(math.ceil(self.mean + half_width)))
        if start > stop:
            nearest = self.lo if self.mean < self.lo else self.hi
            return float(self.log_weight(np.float64(nearest)))
        return float(special.logsumexp(self.log_weight(np.arange(start, stop + 1, dtype=np.float64))))

    def posterior_centre(self, x, sigma):
        """Gaussian x Gaussian: the unconstrained posterior mean, clipped to the support."""
        shrink = self.std ** 2 / (self.std ** 2 + sigma ** 2)
        return np.clip(np.rint(self.mean + shrink * (x - self.mean)), self.lo, self.hi)


# --- [CAL] §III Calibrate: the posterior mean -----------------------------------------------

_RELIABLE_FRACTION = 1e-9
"""Grid points whose FFT marginal falls below this fraction of ||w|| ||g|| (the scale of FFT
rounding error) are recomputed directly, so the relative error stays below ~1e-6."""

_DIRECT_BLOCK = 1 << 22


def _gaussian_kernel(sigma, half_width):
    offsets = np.arange(-half_width, half_width + 1, dtype=np.float64)
    return np.exp(-0.5 * (offsets / sigma) ** 2)


def _direct_posterior(x, sigma, prior, half_width):
    """Exact posterior mean and log marginal (log sum_k w(k) g(x - k)) by summation over the
    2*half_width+1 counts around the posterior's centre, in log space. Vectorised in blocks."""
    offsets = np.arange(-half_width, half_width + 1, dtype=np.float64)
    centre = prior.posterior_centre(x, sigma)
    means = np.empty_like(x)
    log_marginal = np.empty_like(x)
    rows = max(1, _DIRECT_BLOCK // offsets.size)
    for start in range(0, x.size, rows):
        xs = x[start:start + rows, None]
        counts = centre[start:start + rows, None] + offsets[None, :]
        inside = (counts >= prior.lo) & (counts <= prior.hi)
        safe = np.clip(counts, prior.lo, prior.hi)
        log_terms = np.where(inside, prior.log_weight(safe) - 0.5 * ((xs - safe) / sigma) ** 2, -np.inf)
        peak = log_terms.max(axis=1, keepdims=True)
        weights = np.exp(log_terms - peak)
        mass = weights.sum(axis=1)
        means[start:start + rows] = (weights * safe).sum(axis=1) / mass
        log_marginal[start:start + rows] = np.log(mass) + peak[:, 0]
    return means, log_marginal


def _grid_posterior(points, sigma, prior, half_width):
    """Posterior mean and log marginal at integer ``points`` (sorted, unique) by FFT convolution
    of the prior weights w(k) and k w(k) with the Gaussian kernel over +-half_width.

    Points are split into chunks (a new chunk at every gap wider than 2 half_width and every
    8 half_width of span); each chunk convolves only the prior counts within half_width of it,
    so the cost is O(L log L) in the covered length L <= min(n, d * (2 half_width + 1)).
    Returns (means, log_marginal, reliable).
    """
    kernel = _gaussian_kernel(sigma, half_width)
    kernel_norm = float(np.sqrt(np.sum(kernel ** 2)))
    means = np.empty(points.size)
    log_marginal = np.empty(points.size)
    reliable = np.zeros(points.size, dtype=bool)
    gap_break = np.concatenate([[True], np.diff(points) > 2 * half_width])
    cluster = np.cumsum(gap_break) - 1
    cluster_start = points[gap_break][cluster]
    piece = (points - cluster_start) // (8 * half_width + 1)
    new_chunk = gap_break.copy()
    new_chunk[1:] |= piece[1:] != piece[:-1]
    starts = np.flatnonzero(new_chunk)
    stops = np.append(starts[1:], points.size)
    for first, last in zip(starts, stops):
        chunk = points[first:last]
        k_lo = max(prior.lo, int(chunk[0]) - half_width)
        k_hi = min(prior.hi, int(chunk[-1]) + half_width)
        if k_lo > k_hi:
            continue
        counts = np.arange(k_lo, k_hi + 1, dtype=np.float64)
        log_w = prior.log_weight(counts)
        shift = float(log_w.max())
        weights = np.exp(log_w - shift)
        rows = np.vstack([weights, weights * (counts - k_lo)])
        conv = signal.fftconvolve(rows, kernel[None, :], mode="full", axes=1)
        index = (chunk - (k_lo - half_width)).astype(np.int64)
        covered = (index >= 0) & (index < conv.shape[1])
        index = np.clip(index, 0, conv.shape[1] - 1)
        marginal = conv[0, index]
        first_moment = conv[1, index]
        floor = _RELIABLE_FRACTION * float(np.sqrt(np.sum(weights ** 2))) * kernel_norm
        ok = covered & (marginal > floor)
        means[first:last] = k_lo + first_moment / np.where(ok, marginal, 1.0)
        log_marginal[first:last] = np.log(np.where(ok, marginal, 1.0)) + shift
        reliable[first:last] = ok
    return means, log_marginal, reliable


def posterior_mean_counts(x, sigma, prior, window=DEFAULT_WINDOW_SIGMAS, with_log_marginal=False):
    """[CAL] Eq. 11-12 / [NH] Eq. 10: E[true count | estimated count x] under ``prior`` and
    Gaussian noise N(0, sigma^2) (counts), truncated at +-window sigma.

    The sums over true counts are evaluated for all items at once as FFT convolutions on the
    integer grid at floor(x) and floor(x) + 1, then linearly interpolated (the posterior mean
    is smooth on the scale of sigma, its second derivative is O(1/sigma), so the interpolation
    error is O(1/sigma) counts). Grid points the FFT cannot resolve (far tails) are summed
    directly in log space. The optional log marginal is log sum_k w(k) g(x - k) with the
    unnormalised prior weights w and kernel g = exp(-(x-k)^2 / 2 sigma^2).
    """
    x = np.asarray(x, dtype=np.float64)
    half_width = max(1, int(math.ceil(window * sigma)))
    below = np.floor(x)
    frac = x - below
    points, inverse = np.unique(np.concatenate([below, below + 1.0]), return_inverse=True)
    means, log_marginal, reliable = _grid_posterior(points, sigma, prior, half_width)
    if not reliable.all():
        redo = ~reliable
        means[redo], log_marginal[redo] = _direct_posterior(points[redo], sigma, prior, half_width)
    lower, upper = inverse[:x.size], inverse[x.size:]
    result = (1.0 - frac) * means[lower] + frac * means[upper]
    if not with_log_marginal:
        return result
    return result, (1.0 - frac) * log_marginal[lower] + frac * log_marginal[upper]


def calibrate(est, var, n, prior, window=DEFAULT_WINDOW_SIGMAS):
    """[CAL] Eq. 12 with a given prior (``PowerLawPrior`` or ``GaussianPrior`` over counts):
    the posterior mean of each item's true frequency (fractions)."""
    est, var, n = _check_inputs(est, var, n)
    sigma = math.sqrt(_scalar_variance(var, "calibrate")) * n
    return posterior_mean_counts(est * n, sigma, prior, window) / n


# --- [CAL] §III-C prior fits ----------------------------------------------------------------

_EXPONENT_RANGE = (0.0, 30.0)


def _log_likelihood(x, sigma, prior, window):
    """[CAL] Eq. 16 up to a constant: sum_i log sum_k p_f(k) p_s(x_i - k)."""
    _, log_marginal = posterior_mean_counts(x, sigma, prior, window, with_log_marginal=True)
    return float(np.sum(log_marginal) - x.size * prior.log_normaliser())


def fit_power_prior(est, var, n, fit="mean-variance", window=DEFAULT_WINDOW_SIGMAS):
    """Fit the power-law exponent of [CAL] Eq. 15 to the estimates.

    ``fit="mean-variance"`` ([CAL] Eq. 17, one parameter): solve E_alpha[k] = mean of the
    estimated counts, E_alpha[k] = H(n, alpha-1)/H(n, alpha) (decreasing in alpha; the noise
    has mean 0, Eq. 13). ``fit="ml"`` ([CAL] Eq. 16): maximise the marginal likelihood of the
    estimated counts over alpha (bounded scalar search). Returns a ``PowerLawPrior``.
    """
    est, var, n = _check_inputs(est, var, n)
    lo, hi = _EXPONENT_RANGE
    if fit == "mean-variance":
        target = float(np.mean(est)) * n
        gap = lambda a: math.log(PowerLawPrior(a, n).mean()) - math.log(target)
        if target >= PowerLawPrior(lo, n).mean():
            return PowerLawPrior(lo, n)
        if target <= PowerLawPrior(hi, n).mean():
            return PowerLawPrior(hi, n)
        return PowerLawPrior(optimize.brentq(gap, lo, hi, xtol=1e-10), n)
    if fit == "ml":
        sigma = math.sqrt(_scalar_variance(var, "power")) * n
        x = est * n
        loss = lambda a: -_log_likelihood(x, sigma, PowerLawPrior(a, n), window)
        found = optimize.minimize_scalar(loss, bounds=(0.01, 10.0), method="bounded",
                                         options={"xatol": 1e-4})
        return PowerLawPrior(float(found.x), n)
    raise PostProcessError("fit", "must be 'mean-variance' or 'ml', got %r" % (fit,))


def fit_gaussian_prior(est, var, n, fit="mean-variance", window=DEFAULT_WINDOW_SIGMAS):
    """Fit the Gaussian prior's mean and std (counts) to the estimates.

    ``fit="mean-variance"`` ([CAL] Eq. 17-20): mean = mean of estimated counts, std^2 = their
    variance minus the noise variance (floored at 1e-6 sigma). ``fit="ml"`` ([CAL] Eq. 16):
    Nelder-Mead on (mean/sigma, log std/sigma) from the mean-variance start.
    """
    est, var, n = _check_inputs(est, var, n)
    sigma = math.sqrt(_scalar_variance(var, "calibrate-gauss")) * n
    x = est * n
    spread = max(float(np.var(x)) - sigma ** 2, (1e-6 * sigma) ** 2)
    start = GaussianPrior(float(np.mean(x)), math.sqrt(spread), n)
    if fit == "mean-variance":
        return start
    if fit == "ml":
        def loss(theta):
            prior = GaussianPrior(theta[0] * sigma, math.exp(theta[1]) * sigma, n)
            return -_log_likelihood(x, sigma, prior, window)

        found = optimize.minimize(loss, [start.mean / sigma, math.log(start.std / sigma)],
                                  method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6})
        return GaussianPrior(float(found.x[0]) * sigma, math.exp(float(found.x[1])) * sigma, n)
    raise PostProcessError("fit", "must be 'mean-variance' or 'ml', got %r" % (fit,))


def _check_window(window):
    window = float(window)
    if not window > 0:
        raise PostProcessError("window", "must be > 0, got %r" % (window,))
    return window


def power(est, var, n, fit="mean-variance", exponent=None, window=DEFAULT_WINDOW_SIGMAS):
    """[NH] §3.2 Power = [CAL] Calibrate with a power-law prior: [NH] Eq. 10 / [CAL] Eq. 12.

    ``exponent`` fixes the prior; otherwise it is fitted (``fit``: "mean-variance" or "ml").
    """
    est, var, n = _check_inputs(est, var, n)
    window = _check_window(window)
    if exponent is None:
        prior = fit_power_prior(est, var, n, fit, window)
    else:
        if not math.isfinite(float(exponent)) or float(exponent) < 0:
            raise PostProcessError("exponent", "must be finite and >= 0, got %r" % (exponent,))
        prior = PowerLawPrior(float(exponent), n)
    return calibrate(est, var, n, prior, window)


def power_ns(est, var, n, fit="mean-variance", exponent=None, window=DEFAULT_WINDOW_SIGMAS):
    """[NA] §IV-E PowerNS: Norm-Sub applied to the output of Power."""
    return project_to_simplex(power(est, var, n, fit=fit, exponent=exponent, window=window), 1.0)


def calibrate_gauss(est, var, n, fit="mean-variance", mean=None, std=None, window=DEFAULT_WINDOW_SIGMAS):
    """[CAL] Calibrate (Eq. 12) with a Gaussian prior over true counts 0..n.

    ``mean`` and ``std`` (fractions) fix the prior; otherwise it is fitted (``fit``)."""
    est, var, n = _check_inputs(est, var, n)
    window = _check_window(window)
    if (mean is None) != (std is None):
        raise PostProcessError("std" if std is None else "mean", "give both mean and std, or neither")
    if mean is None:
        prior = fit_gaussian_prior(est, var, n, fit, window)
    else:
        if not float(std) > 0:
            raise PostProcessError("std", "must be > 0, got %r" % (std,))
        prior = GaussianPrior(float(mean) * n, float(std) * n, n)
    return calibrate(est, var, n, prior, window)
