"""ldpfleet.eval.accuracy on hand-computed examples ([NH] §4.1/4.3/4.4, [CAL] Eq. 6-8, [LM] §5.1.3)."""
import math

import numpy as np
import pytest

from ldpfleet.eval import accuracy as metrics
from ldpfleet.core import post


def test_mse_mae_sse():
    truth = [0.5, 0.3, 0.2]
    est = [0.4, 0.4, 0.2]
    assert metrics.sse(truth, est) == pytest.approx(0.02)
    assert metrics.mse(truth, est) == pytest.approx(0.02 / 3)
    assert metrics.mae(truth, est) == pytest.approx(0.2 / 3)


def test_topk_mse_uses_the_true_top_k():
    truth = [0.1, 0.5, 0.3, 0.1]
    est = [0.9, 0.4, 0.3, 0.1]
    assert metrics.topk_mse(truth, est, 2) == pytest.approx(0.005)
    assert metrics.topk_mse(truth, est, 3) == pytest.approx((0.01 + 0 + 0.64) / 3)


def test_set_query_mse_whole_domain_and_transform():
    truth = np.array([0.5, 0.3, 0.2])
    est = np.array([0.6, -0.5, 0.2])
    rng = np.random.default_rng(0)
    assert metrics.set_query_mse(truth, est, 1.0, rng, n_sets=3) == pytest.approx((0.3 - 1.0) ** 2)
    clip = post.query_transform("post-pos")
    assert metrics.set_query_mse(truth, -est, 1.0, rng, 2, clip) == pytest.approx(1.0)


def test_set_query_mse_on_singletons_is_mean_of_item_errors():
    """rho = 1/d gives single-item sets; with many sets every item is drawn."""
    truth = np.array([0.4, 0.3, 0.2, 0.1])
    est = np.array([0.5, 0.3, 0.0, 0.1])
    value = metrics.set_query_mse(truth, est, 0.25, np.random.default_rng(1), n_sets=4000)
    counts = np.bincount(metrics.random_subsets(4, 0.25, 4000, np.random.default_rng(1))[:, 0], minlength=4)
    assert value == pytest.approx(float(np.dot(counts, (est - truth) ** 2) / 4000))


def test_random_subsets_are_uniform_without_replacement():
    """Each item is in a set w.p. rho; over S sets its count is Binomial(S, rho) -> 4.5 sd bound."""
    d, rho, sets = 50, 0.3, 4000
    subsets = metrics.random_subsets(d, rho, sets, np.random.default_rng(2))
    assert subsets.shape == (sets, 15)
    assert all(len(set(row)) == 15 for row in subsets[:200])
    hits = np.bincount(subsets.ravel(), minlength=d)
    assert np.max(np.abs(hits - sets * rho)) <= 4.5 * math.sqrt(sets * rho * (1 - rho))


def test_heavy_hitter_precision_recall_f_score():
    truth = [10, 8, 3, 1, 0]
    est = [9, 2, 6, 0, 7]
    precision, recall, f_score = metrics.heavy_hitter_prf(truth, est, 5)
    assert precision == pytest.approx(1 / 3)
    assert recall == pytest.approx(1 / 2)
    assert f_score == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert metrics.heavy_hitter_prf(truth, est, 100) == (0.0, 0.0, 0.0)
    assert metrics.heavy_hitter_prf(truth, truth, 5) == (1.0, 1.0, 1.0)


def test_relative_error_is_median_over_true_top_k():
    truth = [0.4, 0.3, 0.2, 0.1]
    est = [0.3, 0.3, 0.25, 0.0]
    assert metrics.relative_error(truth, est, 3) == pytest.approx(0.25)
    assert metrics.relative_error(truth, est, 4) == pytest.approx((0.25 + 0.25) / 2)
    with pytest.raises(ValueError):
        metrics.relative_error([0.5, 0.5, 0.0], [0.5, 0.5, 0.0], 3)


def test_rank_gain():
    assert metrics.rank_gain(1, 3, 10) == pytest.approx(3.0)
    assert metrics.rank_gain(5, 5, 16) == pytest.approx(4.0)
    assert metrics.rank_gain(1, 10, 10) == pytest.approx(0.0)


def test_ranks_break_ties_by_index():
    np.testing.assert_array_equal(metrics.ranks([0.2, 0.5, 0.2, 0.1]), [2, 1, 3, 4])


def test_ndcg_hand_computed():
    """d=4; true ranks 1..4, estimated ranks (4, 2, 3, 1). Gains: log2|4-3| = 0, log2 4 = 2,
    log2 4 = 2. DCG_3 = 0 + 2/log2(2) + 2/log2(3); IDCG_3 = 2 (1 + 1/log2(2) + 1/log2(3))."""
    truth = [0.4, 0.3, 0.2, 0.1]
    est = [0.1, 0.3, 0.2, 0.4]
    dcg = 0 + 2 / math.log2(2) + 2 / math.log2(3)
    idcg = 2 * (1 + 1 / math.log2(2) + 1 / math.log2(3))
    assert metrics.ndcg(truth, est, 3) == pytest.approx(dcg / idcg)
    assert metrics.ndcg(truth, truth, 3) == pytest.approx(1.0)
    assert metrics.ndcg(truth, est, 1) == pytest.approx(0.0)


@pytest.mark.parametrize("call", [
    lambda: metrics.mse([0.1, 0.2], [0.1]),
    lambda: metrics.mse([], []),
    lambda: metrics.topk_mse([0.1, 0.2], [0.1, 0.2], 3),
    lambda: metrics.topk_mse([0.1, 0.2], [0.1, 0.2], 0),
    lambda: metrics.random_subsets(10, 0.0, 5, np.random.default_rng(0)),
    lambda: metrics.ndcg([1.0], [1.0], 1),
])
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()
