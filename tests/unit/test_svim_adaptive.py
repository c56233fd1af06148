"""Adaptive svim (core/protocols/svim.py): at the end of phase 1 the collector tests whether
phase 1 separates the head (`svim.separation`, a function of the phase-1 estimates only); on
flat data phase 2 runs PSFO over the whole domain at the full l and both phases are pooled by
inverse variance, which for fixed-size sets has the variance of one-phase PSFO over all
devices; on skewed data phase 2 runs over the candidate list as before."""
import math
from dataclasses import dataclass

import numpy as np
import pytest

from ldpfleet.eval import datasets
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.psfo import choose_oracle
from ldpfleet.eval import ldpminer_sim
from ldpfleet.core.protocols import svim

N, D, L, EPS = 40000, 200, 10, 2000


@dataclass(frozen=True)
class Tuning(ldpminer_sim.MinerTuning):
    svim_adaptive: bool = True
    svim_z: float = svim.SEPARATION_Z


def _data(dist, seed, sizes="fixed:%d" % L):
    sets = datasets.draw_variable_sets(N, sizes, D, dist, np.random.default_rng(seed))
    return sets, np.bincount(sets.keys, minlength=D)[:D] / N


def test_separation_is_the_gap_in_sds_of_the_difference():
    scores = np.array([9.0, 8.0, 7.0, 3.0, 2.9, 1.0])
    var = np.full(6, 0.5)
    sep = svim.separation(scores, var, 4, 3)  # 2nd = ceil(4/2)-th (8.0) against the 4th (3.0)
    assert sep["gap"] == pytest.approx(5.0) and sep["sd"] == pytest.approx(1.0)
    assert sep["separable"] and sep["z"] == pytest.approx(5.0)
    assert svim.separation(scores, var, 3, 3)["z"] == pytest.approx(5.0)  # ceil(3/2) = 2
    assert not svim.separation(scores, var, 8, 4)["separable"]  # 3.0 vs 2.9: 0.1 sd
    assert svim.separation(scores, var, 2, 6)["separable"]  # the list is the whole domain


def test_ratio_of_sums_and_pooling():
    s1 = np.array([0.02, 0.01, 0.0, 0.05])
    r, var_r = svim.ratio_of_sums(s1, np.full(4, 1e-6), 10 * s1, np.full(4, 1e-4), 50)
    assert r == pytest.approx(10.0)
    assert var_r == pytest.approx((4e-4 + 100 * 4e-6) / 0.08 ** 2)
    assert svim.ratio_of_sums(s1, np.zeros(4), 100 * s1, np.zeros(4), 50)[0] == 50  # <= l
    assert svim.ratio_of_sums(s1, np.zeros(4), 0.5 * s1, np.zeros(4), 50)[0] == 1  # >= 1
    f, v = svim.pooled([0.01], [1e-6], [0.2], [1e-4], (10.0, 0.0))
    # r s1 = 0.1 with variance 1e-4, phase 2 0.2 with 1e-4: equal weights
    assert f[0] == pytest.approx(0.15) and v[0] == pytest.approx(5e-5)


def test_flat_data_takes_the_flat_branch_within_psfos_variance():
    """Uniform items, 10 per device: the flat branch for every seed; every item's estimate has
    the variance of one-phase PSFO over all n devices (z-scores against psfo's exact variance:
    mean within 4 / sqrt(runs * d), sd within 15 % of 1), and its RE is within two standard
    errors of psfo's on the same data (paired seeds)."""
    mech = make_mechanism(choose_oracle(EPS, D), EPS, D, l=L)
    zs, re_flat, re_psfo = [], [], []
    for seed in range(4):
        sets, f = _data("uniform", seed)
        tuning = Tuning(l=L)
        ans = ldpminer_sim.run_ldpminer("svim", sets, D, EPS, [5, 10], np.random.default_rng(50 + seed),
                                        tuning)
        assert {a.branch for a in ans.values()} == {"flat"}, [a.separation for a in ans.values()]
        est = ans[5].estimates
        zs.append((est - f) / np.sqrt(mech.item_variances(N, f)))
        one = ldpminer_sim.run_ldpminer("psfo", sets, D, EPS, [5], np.random.default_rng(90 + seed),
                                        tuning)
        re_flat.append(ldpminer_sim.score(f, ans[5], 5)["re"])
        re_psfo.append(ldpminer_sim.score(f, one[5], 5)["re"])
    z = np.concatenate(zs)
    assert abs(z.mean()) < 4 / math.sqrt(z.size) * 3, z.mean()  # PSOLH items correlate a little
    assert 0.85 < z.std() < 1.15, z.std()
    diff = np.array(re_flat) - np.array(re_psfo)
    se = np.std(re_flat + re_psfo, ddof=1) / math.sqrt(len(diff)) * math.sqrt(2)
    assert diff.mean() < 2 * se, (re_flat, re_psfo)


def test_skewed_data_takes_the_candidate_branch():
    sets, f = _data("zipf:1.2", 7, "geometric:6")
    ans = ldpminer_sim.run_ldpminer("svim", sets, D, EPS, [3, 5], np.random.default_rng(3),
                                    Tuning(l=L))
    assert {a.branch for a in ans.values()} == {"candidates"}, [a.separation for a in ans.values()]
    truth = set(np.argsort(-f, kind="stable")[:3].tolist())
    assert truth <= set(ans[5].top_index.tolist())  # the head found (seeded)


def test_non_adaptive_svim_keeps_the_candidate_list_on_flat_data():
    sets, _ = _data("uniform", 0)
    ans = ldpminer_sim.run_ldpminer("svim", sets, D, EPS, [5], np.random.default_rng(1),
                                    Tuning(l=L, svim_adaptive=False))
    assert ans[5].branch == "candidates" and not ans[5].separation["separable"]


def test_fallback_phase_is_the_listless_oracle_at_full_length():
    # every parameter spelled out as the config's `fallback` writes it (spec §5.4)
    assert svim.fallback_phase(2000, 1000, 50) == {"mechanism": "psolh",
                                                   "params": {"l": 50, "g": 8}}
    assert svim.fallback_phase(4000, 100, 7) == {"mechanism": "psgrr", "params": {"l": 7}}
