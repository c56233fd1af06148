"""[NH] Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles
under Local Differential Privacy" (NDSS 2020) §3: the baselines, the normalisations and
MLE-Apx (see the package docstring for the equations)."""
import numpy as np

from .checks import (DEFAULT_CUT_ALPHA, PostProcessError, _check_inputs, cut_threshold,
                     project_to_simplex)

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
