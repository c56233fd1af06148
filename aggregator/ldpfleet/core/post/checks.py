"""Shared by the post-processing methods: defaults, the typed error, input checks, the
threshold of the cut methods and the projection onto the probability simplex."""
import math

import numpy as np
from scipy import stats

from ..errors import LdpError

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
