"""Consistency post-processing of LDP frequency estimates.

Every method takes the unbiased estimates ``est`` of a frequency oracle as fractions of the
``n`` users (length ``d``), the oracle's per-item variance ``var`` (fraction units, a scalar or
one value per item) and returns post-processed fractions. Papers and equation numbers:

* [NH]  Wang, Lopuhaä-Zwakenberg, Li, Skoric, Li, "Consistent and Accurate Frequency Oracles
  under Local Differential Privacy" (NDSS'20; Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020)): Base,
  Base-Pos, Post-Pos, Base-Cut (§3.1, Eq. 9), Norm and Power (§3.2, Eq. 10), Norm-Mul,
  Norm-Sub, Norm-Cut, Norm-Hyb (§3.3), MLE-Apx (§3.4, Eq. 13-14, App. A), CLS (§3.5, App. B).
* [NA]  the arXiv version (Wang et al., "Locally Differentially Private Frequency Estimation with Consistency" (arXiv)) §IV-E: PowerNS.
* [CAL] Jia & Gong, "Calibrate" (Jia, Gong, "Calibrate: Frequency Estimation and Heavy Hitter Identification with Local Differential Privacy via Incorporating Prior Knowledge" (INFOCOM 2019)) §III:
  posterior mean (Eq. 11-12), power-law prior (Eq. 15), maximum likelihood (Eq. 16) and
  mean-variance (Eq. 17-20) prior fits, Gaussian noise with Var(s) of Eq. 14.

Entry point: ``postprocess(method, est, var, n, **opts)``; ``METHODS`` maps the CLI names to
the functions. ``query_transform(method)`` gives what to apply to a query answer (clipping
for Post-Pos, the identity otherwise).
"""
import inspect
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, signal, special, stats

from .errors import LdpError

DEFAULT_CUT_ALPHA = 2.0
"""[NH] §3.1: the paper sets alpha = 2 in T = F^-1(1 - alpha/d) sigma (two expected false
positives); Norm-Hyb (§3.3) uses the same threshold. The Calibrate paper's OUE-Zero uses 0.05."""

DEFAULT_WINDOW_SIGMAS = 10.0
"""[NH] §3.2: Power only needs true counts within 10 sigma of the estimate."""


class PostProcessError(LdpError, ValueError):
    """Bad input to a post-processing method; ``field`` (also ``param``) names the offending
    parameter."""

    @property
    def param(self):
        return self.field


# --- input checks ---------------------------------------------------------------------------

def _check_n(n):
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer, float, np.floating)):
        raise PostProcessError("n", "must be a positive integer, got %r" % (n,))
    if not math.isfinite(n) or n != int(n) or n < 1:
        raise PostProcessError("n", "must be a positive integer, got %r" % (n,))
    return int(n)


def _check_est(est):
    try:
        arr = np.asarray(est, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PostProcessError("est", "not a numeric array (%s)" % exc) from None
    if arr.ndim != 1 or arr.size == 0:
        raise PostProcessError("est", "must be a non-empty 1-D array, got shape %s" % (arr.shape,))
    if not np.all(np.isfinite(arr)):
        raise PostProcessError("est", "contains NaN or infinity")
    return arr.copy()


def _check_var(var, d):
    try:
        arr = np.asarray(var, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PostProcessError("var", "not numeric (%s)" % exc) from None
    if arr.ndim != 0 and arr.shape != (d,):
        raise PostProcessError("var", "must be a scalar or have shape (%d,), got %s" % (d, arr.shape))
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise PostProcessError("var", "must be finite and > 0")
    return arr


def _check_inputs(est, var, n):
    n = _check_n(n)
    est = _check_est(est)
    return est, _check_var(var, est.size), n


def _scalar_variance(var, method):
    """The Gaussian noise of [CAL] Eq. 14 / [NH] Eq. 7 has one variance for all items."""
    if var.ndim == 0:
        return float(var)
    if np.ptp(var) > 1e-12 * float(var.max()):
        raise PostProcessError("var", "%s needs one noise variance for all items (the f-free "
                               "variance of [NH] Eq. 7); got per-item values" % method)
    return float(var[0])


def cut_threshold(var, d, alpha):
    """[NH] Eq. 9: T = F^-1(1 - alpha/d) * sigma, sigma from var (elementwise if an array)."""
    alpha = float(alpha)
    if not 0.0 < alpha < d:
        raise PostProcessError("alpha", "must be in (0, d=%d), got %r" % (d, alpha))
    return stats.norm.isf(alpha / d) * np.sqrt(var)


# --- simplex projection ---------------------------------------------------------------------

def project_to_simplex(values, total=1.0):
    """Euclidean projection onto {x >= 0, sum x = total}: [NH] §3.5 CLS / App. B.

    Sort descending; the support D1 is the longest prefix with u_j - (sum_{i<=j} u_i - total)/j
    > 0, and delta = -(sum_{D1} u - total)/|D1| ([NH] App. B's closed form). O(d log d).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0 or total <= 0:
        return np.zeros_like(values)
    ordered = np.sort(values)[::-1]
    prefix = np.cumsum(ordered)
    ranks = np.arange(1, values.size + 1)
    support = np.nonzero(ordered - (prefix - total) / ranks > 0)[0][-1] + 1
    delta = -(prefix[support - 1] - total) / support
    return np.maximum(values + delta, 0.0)


# --- [NH] §3.1 baselines --------------------------------------------------------------------

def base(est, var, n):
    """[NH] §3.1 Base: the unbiased estimates as they are."""
    est, var, n = _check_inputs(est, var, n)
    return est


def base_pos(est, var, n):
    """[NH] §3.1 Base-Pos: negative estimates become 0."""
    est, var, n = _check_inputs(est, var, n)
    return np.maximum(est, 0.0)


def post_pos(est, var, n):
    """[NH] §3.1 Post-Pos: the distribution is left as is; clip each query answer with
    ``post_pos_query``."""
    est, var, n = _check_inputs(est, var, n)
    return est


def post_pos_query(answer):
    """[NH] §3.1 Post-Pos: a negative query answer becomes 0 (scalar or array of answers)."""
    return np.maximum(np.asarray(answer, dtype=np.float64), 0.0)


def base_cut(est, var, n, alpha=DEFAULT_CUT_ALPHA):
    """[NH] §3.1 Base-Cut: estimates below T = F^-1(1 - alpha/d) sigma (Eq. 9) become 0."""
    est, var, n = _check_inputs(est, var, n)
    threshold = cut_threshold(var, est.size, alpha)
    return np.where(est >= threshold, np.maximum(est, 0.0), 0.0)


# --- [NH] §3.2-3.3 normalisation ------------------------------------------------------------

def norm(est, var, n):
    """[NH] §3.2 Norm: add delta = (1 - sum est)/d to every estimate."""
    est, var, n = _check_inputs(est, var, n)
    return est + (1.0 - est.sum()) / est.size


def norm_mul(est, var, n):
    """[NH] §3.3 Norm-Mul: gamma * max(est, 0) with gamma making the sum 1.

    With no positive estimate there is no such gamma; the uniform distribution is returned."""
    est, var, n = _check_inputs(est, var, n)
    positive = np.maximum(est, 0.0)
    mass = positive.sum()
    if mass <= 0:
        return np.full(est.size, 1.0 / est.size)
    return positive / mass


def norm_sub(est, var, n):
    """[NH] §3.3 Norm-Sub: max(est + delta, 0) summing to 1; equals CLS (§3.5, App. B)."""
    est, var, n = _check_inputs(est, var, n)
    return project_to_simplex(est, 1.0)


def _top_group_prefix(ordered, prefix, limit, strict):
    """Largest k such that the k highest estimates sum to <= limit (< limit if strict),
    never splitting a run of equal estimates (so equal inputs get equal outputs)."""
    fits = prefix < limit if strict else prefix <= limit
    group_end = np.append(ordered[1:] < ordered[:-1], True)
    candidates = np.nonzero(fits & group_end)[0]
    return 0 if candidates.size == 0 else int(candidates[-1]) + 1


def norm_cut(est, var, n):
    """[NH] §3.3 Norm-Cut: if sum max(est, 0) > 1, zero every estimate below the smallest theta
    with sum_{est >= theta} est <= 1; otherwise only zero the negatives. Sum <= 1."""
    est, var, n = _check_inputs(est, var, n)
    positive = np.maximum(est, 0.0)
    if positive.sum() <= 1.0:
        return positive
    order = np.argsort(-est, kind="stable")
    ordered = est[order]
    ordered = ordered[ordered > 0]
    kept = _top_group_prefix(ordered, np.cumsum(ordered), 1.0, strict=False)
    out = np.zeros_like(est)
    out[order[:kept]] = est[order[:kept]]
    return out


def norm_hyb(est, var, n, alpha=DEFAULT_CUT_ALPHA):
    """[NH] §3.3 Norm-Hyb: keep estimates above T (Eq. 9, alpha = 2), Norm-Sub the rest to
    1 - (kept mass). If the estimates above T sum past 1, keep the largest k highest
    estimates that sum to less than 1 instead."""
    est, var, n = _check_inputs(est, var, n)
    threshold = cut_threshold(var, est.size, alpha)
    keep = est > threshold
    if est[keep].sum() > 1.0:
        order = np.argsort(-est, kind="stable")
        ordered = est[order]
        kept = _top_group_prefix(ordered, np.cumsum(ordered), 1.0, strict=True)
        keep = np.zeros(est.size, dtype=bool)
        keep[order[:kept]] = True
    out = np.empty_like(est)
    out[keep] = est[keep]
    out[~keep] = project_to_simplex(est[~keep], 1.0 - est[keep].sum())
    return out


# --- [NH] §3.4 MLE-Apx ----------------------------------------------------------------------

def _check_pq(p, q):
    if p is None:
        raise PostProcessError("p", "mle-apx needs the mechanism's p (and q), [NH] Eq. 13")
    if q is None:
        raise PostProcessError("q", "mle-apx needs the mechanism's q (and p), [NH] Eq. 13")
    p, q = float(p), float(q)
    if not 0.0 < q < p < 1.0:
        raise PostProcessError("p", "need 0 < q < p < 1, got p=%r q=%r" % (p, q))
    if p + q > 1.0:
        raise PostProcessError("q", "need p + q <= 1 (true for GRR with d >= 2 and OUE)")
    return p, q


def mle_apx(est, var, n, p=None, q=None):
    """[NH] §3.4 MLE-Apx: minimise Eq. 13 with the closed form Eq. 14 on the support D1.

    With a_v = c_v/n - q = (p - q) est_v, Q = q(1-q), B = (p-q)(1-p-q) (App. A):
    x = (sum_{D1} a - (p-q)) / (B + |D1| Q), f'_v = (a_v - Q x) / (p - q + B x).
    D1 starts as D and loses its non-positive entries until none is left ([NH] §3.4). f' is
    increasing in a_v, so D1 is always a top set: each round is a binary search on the sorted
    estimates and the whole method is O(d log d).
    """
    est, var, n = _check_inputs(est, var, n)
    p, q = _check_pq(p, q)
    gap = p - q
    quad_q = q * (1.0 - q)
    quad_b = gap * (1.0 - p - q)
    shifted = gap * est
    order = np.argsort(-shifted, kind="stable")
    ascending = shifted[order][::-1]
    prefix = np.cumsum(shifted[order])
    support = est.size
    while True:
        x = (prefix[support - 1] - gap) / (quad_b + support * quad_q)
        nonpositive = np.searchsorted(ascending[est.size - support:], quad_q * x, side="right")
        if nonpositive == 0:
            break
        support -= nonpositive
    out = np.zeros_like(est)
    top = order[:support]
    out[top] = (shifted[top] - quad_q * x) / (gap + quad_b * x)
    return out


def mle_apx_objective(f, est, p, q):
    """[NH] Eq. 13 in terms of est (c_v/n - q = (p-q) est_v): sum_v (c_v/n - q - (p-q) f_v)^2
    / (q(1-q) + (p-q)(1-p-q) f_v). Minimised over the simplex by ``mle_apx``."""
    f = np.asarray(f, dtype=np.float64)
    residual = (p - q) * (np.asarray(est, dtype=np.float64) - f)
    return float(np.sum(residual ** 2 / (q * (1.0 - q) + (p - q) * (1.0 - p - q) * f)))


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


# --- registry -------------------------------------------------------------------------------

METHODS = {
    "base": base,
    "base-pos": base_pos,
    "post-pos": post_pos,
    "base-cut": base_cut,
    "norm": norm,
    "norm-mul": norm_mul,
    "norm-cut": norm_cut,
    "norm-sub": norm_sub,
    "norm-hyb": norm_hyb,
    "mle-apx": mle_apx,
    "power": power,
    "power-ns": power_ns,
    "calibrate-gauss": calibrate_gauss,
}
"""CLI name -> function(est, var, n, **opts) -> post-processed fractions."""


def _method(method):
    try:
        return METHODS[method]
    except (KeyError, TypeError):
        raise PostProcessError("method", "unknown method %r; known: %s" % (method, ", ".join(METHODS))) from None


def postprocess(method, est, var, n, /, **opts):
    """Apply the post-processing ``method`` (a key of ``METHODS``); ``opts`` are the method's
    keyword parameters (alpha for base-cut/norm-hyb, p and q for mle-apx, fit/exponent/window
    for power and power-ns, fit/mean/std/window for calibrate-gauss)."""
    func = _method(method)
    allowed = inspect.signature(func).parameters
    for name in opts:
        if name not in allowed or name in ("est", "var", "n"):
            raise PostProcessError(name, "%s takes no option %r" % (method, name))
    return func(est, var, n, **opts)


def query_transform(method):
    """What to apply to a query answer computed from ``method``'s output: clipping at 0 for
    Post-Pos ([NH] §3.1), the identity for every other method."""
    _method(method)
    if method == "post-pos":
        return post_pos_query
    return lambda answer: np.asarray(answer, dtype=np.float64)
