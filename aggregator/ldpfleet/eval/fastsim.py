"""Exact-distribution aggregate simulation of GRR and OUE frequency oracles.

Instead of perturbing every user's report, the aggregate support counts c_v are drawn from
their exact joint distribution with O(d) binomial/multinomial draws, then turned into the
unbiased estimates (c_v/n - q)/(p - q).

References: Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency
Estimation" (USENIX Security'17) define GRR and OUE and their variance; the consistency paper [NH]
(Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020)) restates them in §2.2 (GRR, Eq. 1-3), §2.3 (OUE,
Eq. 5-6) and the f-free approximation of Eq. 7.
"""
import math

import numpy as np

from ..core.errors import LdpError


class SimulationError(LdpError, ValueError):
    """Bad input to a simulation; ``field`` (also ``param``) names the offending parameter."""

    @property
    def param(self):
        return self.field


def _check_eps(eps):
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0:
        raise SimulationError("eps", "must be finite and > 0, got %r" % (eps,))
    return eps


def _check_counts(counts):
    arr = np.asarray(counts)
    if arr.ndim != 1 or arr.size < 2:
        raise SimulationError("counts", "must be a 1-D array of d >= 2 counts, got shape %s" % (arr.shape,))
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise SimulationError("counts", "must be integers")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise SimulationError("counts", "must be >= 0")
    if arr.sum() < 1:
        raise SimulationError("counts", "need at least one user")
    return arr


def grr_pq(eps, d):
    """GRR ([NH] Eq. 1): p = e^eps / (e^eps + d - 1), q = 1 / (e^eps + d - 1)."""
    eps = _check_eps(eps)
    denominator = math.exp(eps) + d - 1
    return math.exp(eps) / denominator, 1.0 / denominator


def oue_pq(eps):
    """OUE ([NH] §2.3): a 1 bit stays 1 w.p. p = 1/2, a 0 bit becomes 1 w.p. q = 1/(e^eps + 1)."""
    eps = _check_eps(eps)
    return 0.5, 1.0 / (math.exp(eps) + 1.0)


def pure_variance(p, q, n, f=0.0):
    """Exact variance of est_v = (c_v/n - q)/(p - q) for a pure protocol ([NH] Eq. 2 and 5):
    (q(1-q) + f_v (p-q)(1-p-q)) / (n (p-q)^2). With f = 0 it is the f-free sigma^2 of Eq. 7.

    Exact because c_v = Bin(n f_v, p) + Bin(n (1 - f_v), q), so Var(c_v) = n f_v p(1-p)
    + n(1 - f_v) q(1-q) and p(1-p) - q(1-q) = (p-q)(1-p-q).
    """
    f = np.asarray(f, dtype=np.float64)
    return (q * (1.0 - q) + f * (p - q) * (1.0 - p - q)) / (n * (p - q) ** 2)


def grr_variance(eps, d, n, f=0.0):
    """GRR ([NH] Eq. 3): ((d - 2 + e^eps)/(e^eps - 1)^2 + f_v (d - 2)/(e^eps - 1)) / n."""
    eps = _check_eps(eps)
    e = math.exp(eps)
    f = np.asarray(f, dtype=np.float64)
    return ((d - 2 + e) / (e - 1) ** 2 + f * (d - 2) / (e - 1)) / n


def oue_variance(eps, n, f=0.0):
    """OUE ([NH] Eq. 6): (4 e^eps/(e^eps - 1)^2 + f_v) / n."""
    eps = _check_eps(eps)
    e = math.exp(eps)
    f = np.asarray(f, dtype=np.float64)
    return (4.0 * e / (e - 1) ** 2 + f) / n


def unbiased_estimates(support_counts, n, p, q):
    """[NH] §2.2-2.3: est_v = (c_v/n - q) / (p - q), as fractions of the n users."""
    return (np.asarray(support_counts, dtype=np.float64) / n - q) / (p - q)


def grr_support_counts(counts, eps, rng):
    """Draw GRR's report counts c (sum n) from their exact joint distribution in O(d).

    A GRR report equals the true value w.p. p and each other value w.p. q. Since p - q =
    1 - d q, that is the mixture "keep the true value w.p. p - q, otherwise report a value
    uniform over all d" (own value: p - q + q = p, another: q). So c = Bin(n_v, p - q) kept
    per item + Multinomial(remaining users, uniform over d).
    """
    counts = _check_counts(counts)
    p, q = grr_pq(eps, counts.size)
    kept = rng.binomial(counts, p - q)
    spread = rng.multinomial(int(counts.sum() - kept.sum()), np.full(counts.size, 1.0 / counts.size))
    return kept + spread


def oue_support_counts(counts, eps, rng):
    """Draw OUE's bit counts c from their exact distribution in O(d): bits are perturbed
    independently, so c_v = Bin(n_v, 1/2) + Bin(n - n_v, q), independent over v."""
    counts = _check_counts(counts)
    p, q = oue_pq(eps)
    return rng.binomial(counts, p) + rng.binomial(counts.sum() - counts, q)


def fast_grr(counts, eps, rng):
    """GRR estimates (fractions) and the f-free variance sigma^2 of [NH] Eq. 7 (a float: the
    aggregator cannot know the f-term; ``grr_variance(eps, d, n, f)`` gives the exact one)."""
    counts = _check_counts(counts)
    n = int(counts.sum())
    p, q = grr_pq(eps, counts.size)
    est = unbiased_estimates(grr_support_counts(counts, eps, rng), n, p, q)
    return est, float(pure_variance(p, q, n))


def fast_oue(counts, eps, rng):
    """OUE estimates (fractions) and the f-free variance sigma^2 of [NH] Eq. 7 (a float;
    ``oue_variance(eps, n, f)`` gives the exact per-item one)."""
    counts = _check_counts(counts)
    n = int(counts.sum())
    p, q = oue_pq(eps)
    est = unbiased_estimates(oue_support_counts(counts, eps, rng), n, p, q)
    return est, float(pure_variance(p, q, n))


FAST_MECHANISMS = {"grr": fast_grr, "oue": fast_oue}
"""Mechanism name -> fast_*(counts, eps, rng) -> (est, var)."""


def mechanism_pq(mechanism, eps, d):
    """(p, q) of ``mechanism`` ("grr" or "oue"), e.g. for MLE-Apx's Eq. 13."""
    if mechanism == "grr":
        return grr_pq(eps, d)
    if mechanism == "oue":
        return oue_pq(eps)
    raise SimulationError("mechanism", "must be 'grr' or 'oue', got %r" % (mechanism,))
