"""Accuracy metrics for frequency estimates (all frequencies as fractions or all as counts).

* [NH] consistency paper (Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020)) §4.1: full-domain MSE,
  top-k MSE (§4.4), set-value MSE over random subsets of rho% of the domain (§4.3, Fig. 2),
  MAE (App. C.2).
* [CAL] Calibrate (Jia, Gong, "Calibrate: Frequency Estimation and Heavy Hitter Identification with Local Differential Privacy via Incorporating Prior Knowledge" (INFOCOM 2019)) §II-C: heavy hitters above a
  threshold, Precision / Recall / F-Score (Eq. 6-8).
* [LM] LDPMiner (Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy" (CCS 2016)) §5.1.3: Relative Error
  (RE) and NDCG with the rank gain rel = log2(|d - |rank_actual - rank_estimated||).
"""
import numpy as np


def _pair(f_true, f_est):
    f_true = np.asarray(f_true, dtype=np.float64)
    f_est = np.asarray(f_est, dtype=np.float64)
    if f_true.ndim != 1 or f_true.size == 0:
        raise ValueError("f_true must be a non-empty 1-D array, got shape %s" % (f_true.shape,))
    if f_est.shape != f_true.shape:
        raise ValueError("f_est has shape %s, f_true %s" % (f_est.shape, f_true.shape))
    return f_true, f_est


def _check_k(k, d):
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= d:
        raise ValueError("k must be an integer in [1, d=%d], got %r" % (d, k))
    return int(k)


def sse(f_true, f_est):
    """Sum of squared errors over the domain."""
    f_true, f_est = _pair(f_true, f_est)
    return float(np.sum((f_est - f_true) ** 2))


def mse(f_true, f_est):
    """[NH] §4.1: MSE = (1/d) sum_v (f_v - f'_v)^2."""
    f_true, f_est = _pair(f_true, f_est)
    return float(np.mean((f_est - f_true) ** 2))


def mae(f_true, f_est):
    """[NH] App. C.2: MAE = (1/d) sum_v |f_v - f'_v|."""
    f_true, f_est = _pair(f_true, f_est)
    return float(np.mean(np.abs(f_est - f_true)))


def top_indices(values, k):
    """Indices of the k largest values, largest first; ties go to the lower index."""
    values = np.asarray(values, dtype=np.float64)
    return np.argsort(-values, kind="stable")[:_check_k(k, values.size)]


def topk_mse(f_true, f_est, k):
    """[NH] §4.4: MSE over D_tk, the k items with the highest TRUE frequency."""
    f_true, f_est = _pair(f_true, f_est)
    top = top_indices(f_true, k)
    return float(np.mean((f_est[top] - f_true[top]) ** 2))


def random_subsets(d, rho, n_sets, rng):
    """[NH] §4.3: ``n_sets`` subsets of round(rho d) items (at least 1) drawn uniformly without
    replacement, as an (n_sets, size) index array."""
    if not 0.0 < rho <= 1.0:
        raise ValueError("rho must be in (0, 1], got %r" % (rho,))
    if int(n_sets) != n_sets or n_sets < 1:
        raise ValueError("n_sets must be a positive integer, got %r" % (n_sets,))
    n_sets = int(n_sets)
    size = max(1, int(round(rho * d)))
    if size == d:
        return np.tile(np.arange(d), (n_sets, 1))
    keys = rng.random((n_sets, d))
    return np.argpartition(keys, size - 1, axis=1)[:, :size]


def set_query_mse(f_true, f_est, rho, rng, n_sets=100, answer_transform=None):
    """[NH] §4.3 (Fig. 2): MSE between f_{D_s} = sum_{v in D_s} f_v and the estimated set sum
    over ``n_sets`` random subsets D_s of rho*d items. ``answer_transform`` is applied to each
    estimated set answer (``post.post_pos_query`` for Post-Pos). Equal ``rng`` states give
    equal subsets, so methods can be compared on the same queries."""
    f_true, f_est = _pair(f_true, f_est)
    subsets = random_subsets(f_true.size, rho, n_sets, rng)
    answers = f_est[subsets].sum(axis=1)
    if answer_transform is not None:
        answers = answer_transform(answers)
    return float(np.mean((answers - f_true[subsets].sum(axis=1)) ** 2))


def heavy_hitter_prf(f_true, f_est, threshold, zero_division=0.0):
    """[CAL] §II-C, Eq. 6-8: Precision, Recall and F-Score of threshold heavy hitters.

    An item is a true positive if f_v > threshold and f'_v > threshold, a false positive if
    f_v <= threshold and f'_v > threshold, a false negative if f_v > threshold and f'_v <=
    threshold. A ratio with a zero denominator is ``zero_division``. Returns (P, R, F).
    """
    f_true, f_est = _pair(f_true, f_est)
    actual = f_true > threshold
    predicted = f_est > threshold
    true_pos = int(np.sum(actual & predicted))
    false_pos = int(np.sum(~actual & predicted))
    false_neg = int(np.sum(actual & ~predicted))
    precision = true_pos / (true_pos + false_pos) if true_pos + false_pos else zero_division
    recall = true_pos / (true_pos + false_neg) if true_pos + false_neg else zero_division
    f_score = (2 * precision * recall / (precision + recall)) if precision + recall else 0.0
    return float(precision), float(recall), float(f_score)


def relative_error(f_true, f_est, k):
    """[LM] §5.1.3: RE = median over the true top-k items v of |f'_v - f_v| / f_v."""
    f_true, f_est = _pair(f_true, f_est)
    top = top_indices(f_true, k)
    if np.any(f_true[top] <= 0):
        raise ValueError("relative error needs positive true frequencies on the top-%d items" % k)
    return float(np.median(np.abs(f_est[top] - f_true[top]) / f_true[top]))


def ranks(values):
    """1-based rank of each item by descending value (ties: lower index ranks first)."""
    values = np.asarray(values, dtype=np.float64)
    out = np.empty(values.size, dtype=np.int64)
    out[np.argsort(-values, kind="stable")] = np.arange(1, values.size + 1)
    return out


def rank_gain(rank_actual, rank_estimated, d):
    """[LM] §5.1.3: rel_v = log2(|d - |rank_actual(v) - rank_estimated(v)||)."""
    displacement = np.abs(np.asarray(rank_actual) - np.asarray(rank_estimated))
    return np.log2(np.abs(d - displacement))


def ndcg(f_true, f_est, k):
    """[LM] §5.1.3: NDCG_k = DCG_k / IDCG_k with DCG_k = rel_{v1} + sum_{i=2}^k rel_{vi}/log2(i)
    over the true top-k items v_1..v_k (in true order), ranks taken over the whole domain of
    d >= 2 items; IDCG_k is DCG_k when every estimated rank is exact (rel = log2 d)."""
    f_true, f_est = _pair(f_true, f_est)
    d = f_true.size
    if d < 2:
        raise ValueError("NDCG needs d >= 2 (IDCG = 0 for d = 1)")
    top = top_indices(f_true, k)
    gains = rank_gain(ranks(f_true)[top], ranks(f_est)[top], d)
    discounts = np.ones(top.size)
    discounts[1:] = np.log2(np.arange(2, top.size + 1))
    return float(np.sum(gains / discounts) / (np.log2(d) * np.sum(1.0 / discounts)))
