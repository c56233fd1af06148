"""Consistency post-processing of LDP frequency estimates.

Every method takes the unbiased estimates ``est`` of a frequency oracle as fractions of the
``n`` users (length ``d``), the oracle's per-item variance ``var`` (fraction units, a scalar or
one value per item) and returns post-processed fractions. Papers and equation numbers:

* [NH]  Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles
  under Local Differential Privacy" (NDSS 2020): Base, Base-Pos, Post-Pos, Base-Cut (§3.1,
  Eq. 9), Norm and Power (§3.2, Eq. 10), Norm-Mul, Norm-Sub, Norm-Cut, Norm-Hyb (§3.3), MLE-Apx
  (§3.4, Eq. 13-14, App. A), CLS (§3.5, App. B) — module `consistency`.
* [NA]  its arXiv version, "Locally Differentially Private Frequency Estimation with
  Consistency" §IV-E: PowerNS.
* [CAL] Jia, Gong, "Calibrate: Frequency Estimation and Heavy Hitter Identification with Local
  Differential Privacy via Incorporating Prior Knowledge" (INFOCOM 2019) §III: posterior mean
  (Eq. 11-12), power-law prior (Eq. 15), maximum likelihood (Eq. 16) and mean-variance
  (Eq. 17-20) prior fits, Gaussian noise with Var(s) of Eq. 14 — module `priors`.

Entry point: ``postprocess(method, est, var, n, **opts)``; ``METHODS`` maps the CLI names to
the functions. ``query_transform(method)`` gives what to apply to a query answer (clipping
for Post-Pos, the identity otherwise).
"""
import inspect

import numpy as np

from .checks import (DEFAULT_CUT_ALPHA, DEFAULT_WINDOW_SIGMAS, PostProcessError, cut_threshold,
                     project_to_simplex)
from .consistency import (base, base_pos, post_pos, post_pos_query, base_cut, norm, norm_mul,
                          norm_sub, norm_cut, norm_hyb, mle_apx, mle_apx_objective)
from .priors import (generalized_harmonic, PowerLawPrior, GaussianPrior, posterior_mean_counts,
                     calibrate, fit_power_prior, fit_gaussian_prior, power, power_ns,
                     calibrate_gauss)

__all__ = ["postprocess", "query_transform", "METHODS", "PostProcessError", "DEFAULT_CUT_ALPHA",
           "DEFAULT_WINDOW_SIGMAS", "cut_threshold", "project_to_simplex", "base", "base_pos",
           "post_pos", "post_pos_query", "base_cut", "norm", "norm_mul", "norm_sub", "norm_cut",
           "norm_hyb", "mle_apx", "mle_apx_objective", "generalized_harmonic", "PowerLawPrior",
           "GaussianPrior", "posterior_mean_counts", "calibrate", "fit_power_prior",
           "fit_gaussian_prior", "power", "power_ns", "calibrate_gauss"]

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
