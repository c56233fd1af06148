"""LDPMiner's two-phase core (ldpfleet.core.protocols.ldpminer; LDPMiner §3, §4, §5.1.3): budget
split, campaign configs, candidate selection, trimming and padding, the final top-k on planted
datasets through the shipped C kernels, and the simulation driver. Statistical checks use fixed
aggregator-side seeds and bounds from the mechanisms' exact item variances."""
import math

import numpy as np
import pytest

from ldpfleet.core import config, protocol
from ldpfleet.eval import datasets
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.sh import KeySets
from ldpfleet.core.protocols import ldpminer as lm
from ldpfleet.eval import ldpminer_sim as lms

W = protocol.WORD
Z_BOUND = 5.0
"""|estimate - truth| / sigma bound per item; P(|N(0,1)| > 5) < 6e-7 per check."""


def planted_sets(n, d, heavy, heavy_share, size, seed):
    """(n, size) distinct items: each heavy item joins a user's set w.p. heavy_share, the rest
    of the set is uniform over the other items (rejection until distinct)."""
    rng = np.random.default_rng(seed)
    heavy = np.asarray(heavy)
    light = np.setdiff1d(np.arange(d), heavy)
    out = np.empty((n, size), np.uint32)
    for u in range(n):
        mine = [int(h) for h in heavy if rng.random() < heavy_share][:size]
        fill = rng.choice(light, size=size - len(mine), replace=False)
        out[u] = np.concatenate([np.asarray(mine, np.int64), fill]).astype(np.uint32)
    return out


def truth(sets, d):
    return np.bincount(sets.astype(np.int64).ravel(), minlength=d) / sets.shape[0]


def campaign(name, eps_milli=4000, d=200, l=5, k_max=6, salt=0xA11CE, **kw):
    return config.make_config("lm-test", lm.campaign_phases(name, eps_milli, l, k_max, **kw),
                              {"type": "int", "size": d}, salt, campaign_id=77)


@pytest.fixture(scope="module")
def planted():
    d, heavy = 200, [17, 101, 150]
    sets = planted_sets(40000, d, heavy, 0.6, 5, seed=11)
    return d, heavy, sets, truth(sets, d)


# --- budget and configs -------------------------------------------------------------------------

@pytest.mark.parametrize("eps_milli,share,expect", [(4000, 0.5, (2000, 2000)), (1099, 0.5, (550, 549)),
                                                    (3000, 0.25, (750, 2250)), (2, 0.5, (1, 1)),
                                                    (1000, 0.0001, (1, 999))])
def test_split_budget_sums_exactly(eps_milli, share, expect):
    e1, e2 = lm.split_budget(eps_milli, share)
    assert (e1, e2) == expect and e1 + e2 == eps_milli and min(e1, e2) >= 1


@pytest.mark.parametrize("eps_milli,share,field", [(1, 0.5, "eps_milli"), (2000, 0.0, "phase1_share"),
                                                   (2000, 1.0, "phase1_share"), (True, 0.5, "eps_milli")])
def test_split_budget_rejects(eps_milli, share, field):
    with pytest.raises(ConfigError) as err:
        lm.split_budget(eps_milli, share)
    assert err.value.field == field


def test_campaign_phases_build_valid_configs_and_mechanisms():
    cfg = campaign("lm-rp", eps_milli=3001, l=50, k_max=20)
    p1, p2 = cfg["phases"]
    assert p1["mechanism"] == "sh" and p2["mechanism"] == "srappor"
    assert p1["eps_milli"] + p2["eps_milli"] == 3001
    assert p1["params"] == {"m": lm.DEFAULT_M, "l": 50} and p2["params"] == {"l": 20}
    assert lm.phase1_mechanism(cfg).name == "sh"
    mech2 = lm.phase2_mechanism(cfg, [9, 3, 7])
    assert mech2.name == "srappor" and list(mech2.candidates) == [9, 3, 7] and mech2.l == 20
    msg = lm.phase2_message(cfg, [9, 3, 7])
    assert msg["candidates"] == [9, 3, 7] and msg["phase"] == 2 and msg["campaign_id"] == 77
    assert config.canonical(msg)  # JSON-serialisable as it will be signed

    sh2 = campaign("lm-sh", l=50, k_max=80)["phases"][1]
    assert sh2["mechanism"] == "sh" and sh2["params"]["l"] == 50  # min(l, k_max)
    padl = campaign("lm-sh", l=50, k_max=20, phase2_pad="l")["phases"][1]
    assert padl["params"]["l"] == 50
    single = campaign("rp", l=50)["phases"]
    assert len(single) == 1 and single[0]["mechanism"] == "srappor" and single[0]["eps_milli"] == 4000
    with pytest.raises(ConfigError) as err:
        lm.campaign_phases("lm-rp", 4000, 50)
    assert err.value.field == "k_max"
    with pytest.raises(ConfigError) as err:
        lm.campaign_phases("ldpminer", 4000, 50, 10)
    assert err.value.field == "protocol"


# --- candidates ----------------------------------------------------------------------------------

def test_candidates_are_the_top_phase1_estimates(planted):
    d, heavy, sets, _ = planted
    cfg = campaign("lm-rp", d=d)
    mech = lm.phase1_mechanism(cfg)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(sets, np.random.default_rng(5)))
    keys = np.arange(d)
    est = sketch.estimate(keys)
    for k_max in (1, 3, 6, 50):
        cand = lm.candidates_from_phase1(sketch, k_max, keys)
        assert cand.tolist() == np.argsort(-est, kind="stable")[:k_max].tolist()
    assert set(lm.candidates_from_phase1(sketch, 3, keys).tolist()) == set(heavy)
    with pytest.raises(ConfigError) as err:
        lm.candidates_from_phase1(sketch, 0, keys)
    assert err.value.field == "k_max"
    with pytest.raises(ConfigError):
        lm.candidates_from_phase1(sketch, d + 1, keys)


def test_candidate_ties_follow_domain_order():
    """An empty sketch estimates every item 0: the candidates are the first domain keys."""
    cfg = campaign("lm-sh", d=50)
    sketch = lm.phase1_mechanism(cfg).new_sketch()
    keys = np.array([40, 7, 33, 2, 19] + list(range(100, 145)), np.uint32)
    assert lm.candidates_from_phase1(sketch, 4, keys).tolist() == [40, 7, 33, 2]


# --- trimming and padding (§4.4) -----------------------------------------------------------------

def test_trim_keeps_the_users_candidates_in_their_order():
    assert lm.trim_to_candidates([5, 9, 1, 7, 3], [3, 9, 100]) == [9, 3]
    assert lm.trim_to_candidates([5, 1], [3, 9]) == []
    sets = np.array([[5, 9, 1], [3, 4, 9], [8, 6, 2]], np.uint32)
    trimmed = lm.trim_sets(sets, [9, 3])
    assert isinstance(trimmed, KeySets)
    assert trimmed.keys.tolist() == [9, 3, 9] and trimmed.offsets.tolist() == [0, 1, 3, 3]
    ragged = lm.trim_sets([[5, 9, 1], [3, 4, 9], [], [8, 6, 2]], [9, 3])
    assert ragged.keys.tolist() == [9, 3, 9] and ragged.offsets.tolist() == [0, 1, 3, 3, 3]


def test_trimmed_sets_are_padded_with_the_dummy():
    cfg = campaign("lm-rp", l=5, k_max=4)
    rp = lm.phase2_mechanism(cfg, [10, 20, 30, 40])
    no_flip = [W - 1] * (rp.kc + 1)
    # l2 = min(5, 4) = 4 slots: a user holding 2 candidates picks a dummy slot for w0 in [W/2, W)
    sh = lm.phase2_mechanism(campaign("lm-sh", l=5, k_max=4), [10, 20, 30, 40])
    for encode_rp, encode_sh in [(rp.reference_report, sh.reference_report),
                                 (rp.c_report, sh.c_report)]:
        for w0, bit in [(0, 1), (W // 4, 0), (W // 2, 4), (W - 1, 4)]:
            body = encode_rp(lm.trim_to_candidates([99, 20, 77, 10], rp.candidates),
                             [w0] + no_flip)[12:]
            assert [(body[b >> 3] >> (b & 7)) & 1 for b in range(rp.kc + 1)] == \
                [1 if b == bit else 0 for b in range(rp.kc + 1)]
        empty = encode_rp(lm.trim_to_candidates([99, 77], rp.candidates), [0] + no_flip)
        assert empty[12] == 1 << 4  # nothing left: the dummy bit kc
        for w2, sign in [(0, 1), (protocol.T_HALF - 1, 1), (protocol.T_HALF, 0), (W - 1, 0)]:
            report = encode_sh([20], [W - 1, 12345, w2])  # slot 3 of 4 >= s = 1: dummy
            assert report[-1] == sign


def test_phase2_is_unbiased_when_users_hold_at_most_l2_candidates():
    """Users hold 6 items of which up to 4 are candidates; l2 = min(l, k_max) = 4 makes the
    phase-2 estimates unbiased (|z| < 5 with the exact srappor variance); padding to l2 = 2
    (fewer slots than candidates held) is detectably biased, so the check has teeth."""
    d, cand = 60, [3, 11, 25, 42]
    sets = planted_sets(30000, d, cand, 0.5, 6, seed=3)
    f = truth(sets, d)[cand]
    trimmed = lm.trim_sets(sets, cand)
    for l2, unbiased in [(4, True), (2, False)]:
        mech = make_mechanism("srappor", 3000, d, salt=9, campaign_id=1, phase=2, l=l2,
                              candidates=cand)
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(trimmed, np.random.default_rng(l2)))
        est = sketch.estimate(cand) / sketch.n
        z = (est - f) / np.sqrt(mech.item_variances(sketch.n, f))
        assert (np.max(np.abs(z)) < Z_BOUND) == unbiased, z


# --- final answers on a planted dataset -------------------------------------------------------

@pytest.mark.parametrize("name", lm.PROTOCOLS)
def test_topk_finds_the_planted_heavy_hitters(planted, name):
    d, heavy, sets, f_true = planted
    answers = lms.run_ldpminer(name, sets, d, 4000, [3], np.random.default_rng(21),
                               lms.MinerTuning(k_max=6))
    answer = answers[3]
    assert set(answer.top_index.tolist()) == set(heavy)
    res = lms.score(f_true, answer, 3)
    assert res["recall"] == 1.0 and res["re"] < 0.1 and res["ndcg"] > 0.99


def test_final_topk_ranks_candidates_by_phase2(planted):
    d, heavy, sets, f_true = planted
    cfg = campaign("lm-rp", d=d)
    rng = np.random.default_rng(8)
    mech1 = lm.phase1_mechanism(cfg)
    s1 = mech1.new_sketch()
    s1.update(mech1.perturb_batch(sets, rng))
    cand = lm.candidates_from_phase1(s1, 6, np.arange(d))
    mech2 = lm.phase2_mechanism(cfg, cand)
    s2 = mech2.new_sketch()
    s2.update(mech2.perturb_batch(lm.trim_sets(sets, cand), rng))
    top = lm.final_topk(s1, s2, 3, combine="phase2")
    f2 = s2.estimate(cand) / s2.n
    assert top.keys.tolist() == cand[np.argsort(-f2, kind="stable")[:3]].tolist()
    assert np.allclose(top.frequencies, np.sort(f2)[::-1][:3])
    sd = np.sqrt(mech2.item_variances(s2.n, f_true[top.keys]))
    assert np.all(np.abs(top.frequencies - f_true[top.keys]) < Z_BOUND * sd)
    ivw = lm.final_topk(s1, s2, 3, combine="ivw")
    assert set(ivw.keys.tolist()) == set(heavy)
    f1 = s1.estimate(ivw.keys) / s1.n
    f2k = s2.estimate(ivw.keys) / s2.n
    assert np.all((ivw.frequencies >= np.minimum(f1, f2k) - 1e-15)
                  & (ivw.frequencies <= np.maximum(f1, f2k) + 1e-15))
    sh_cfg = campaign("lm-sh", d=d)
    s2sh = lm.phase2_mechanism(sh_cfg, cand).new_sketch()
    with pytest.raises(ConfigError) as err:
        lm.final_topk(s1, s2sh, 3)
    assert err.value.field == "candidates"
    with pytest.raises(ConfigError) as err:
        lm.final_topk(s1, s2, 7)
    assert err.value.field == "k"


def test_single_phase_topk_over_the_domain(planted):
    d, heavy, sets, _ = planted
    mech = config.mechanism_for_phase(campaign("sh", d=d), 1)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(sets, np.random.default_rng(2)))
    top = lm.single_phase_topk(sketch, 3, np.arange(d))
    assert set(top.keys.tolist()) == set(heavy)
    assert list(top.frequencies) == sorted(top.frequencies, reverse=True)


def test_score_conventions():
    f_true = np.array([0.5, 0.4, 0.3, 0.1, 0.05])
    answer = lms.Answer(np.array([0, 3]), np.array([0.45, 0.2]), np.array([0, 3, 2, 1, 4]),
                       np.array([0.45, 0.2, 0.33, 0.2, 0.0]))
    res = lms.score(f_true, answer, 3)
    assert res["recall"] == pytest.approx(1 / 3)
    assert res["re"] == pytest.approx(0.1)      # median of 0.1, 0.5, 0.1
    assert res["re_list"] == pytest.approx(1.0)  # median of 0.1, 1, 1 (missed = 0)
    assert 0 < res["ndcg"] < 1


POP = datasets.Population(eps=4.0, users=4000, domain=100, dist="laplace:50,5", seed=4)


def test_simulate_ldpminer_pairs_datasets_and_is_finite(monkeypatch):
    drawn = {}
    real_draw = lms.draw_sets

    def recording_draw(*args, **kw):
        drawn[current] = real_draw(*args, **kw)
        return drawn[current]

    monkeypatch.setattr(lms, "draw_sets", recording_draw)
    runs = {}
    for current in ("lm-rp", "rp"):
        runs[current] = lms.simulate_ldpminer(current, POP, 5, 3)
    assert np.array_equal(drawn["lm-rp"], drawn["rp"]) and drawn["rp"].shape == (4000, 5)
    for r in runs.values():
        assert all(math.isfinite(r[key]) for key in ("re", "re_list", "ndcg", "recall"))
    assert runs["lm-rp"]["k_max"] == 6 and runs["lm-rp"]["l2"] == 5 and runs["rp"]["k_max"] is None
    again = lms.simulate_ldpminer("lm-rp", POP, 5, 3)
    assert again == runs["lm-rp"]


# --- ldpminer-sh-opt: shc in both phases (LDPMiner §4.4, spec §3.1) ---------------------------

def test_correlated_protocol_configs_and_mechanisms():
    """lm-sho: shc in both phases with the same m and l (no trimming, so no l2 = min(l, k_max)),
    the budget split as lm-sh's; phase 2 carries eps1 for its thresholds and the candidates only
    as what the answer is for; a config whose phases differ is refused."""
    cfg = campaign("lm-sho", eps_milli=3001, l=50, k_max=20)
    p1, p2 = cfg["phases"]
    assert p1["mechanism"] == p2["mechanism"] == "shc"
    assert (p1["eps_milli"], p2["eps_milli"]) == lm.split_budget(3001)
    assert p1["params"] == p2["params"] == {"m": lm.DEFAULT_M, "l": 50}
    assert lm.phase2_length(50, 20, "kmax", "lm-sho") == 50
    mech1 = lm.phase1_mechanism(cfg)
    mech2 = lm.phase2_mechanism(cfg, [9, 3, 7])
    assert (mech1.name, mech1.random_words, mech2.name, mech2.random_words) == ("shc", 4, "shc", 1)
    assert mech2.eps1_milli == p1["eps_milli"] and list(mech2.candidates) == [9, 3, 7]
    assert mech2.t_rr == mech1.t_rr == protocol.t_rr(p1["eps_milli"])
    bad = [dict(p1), dict(p2, params={"m": lm.DEFAULT_M, "l": 20})]
    with pytest.raises(ConfigError) as err:
        config.make_config("x", bad, {"type": "int", "size": 200}, 1)
    assert err.value.field == "params.l"


def test_correlated_protocol_answer_is_the_phase2_estimate(planted):
    """The same users report both phases (phase 2 from their kept (t, y1, x), untrimmed); the
    candidates' answer is the phase-2 estimate, within Z sd of the truth with the phase-2 sd
    (keep probability p2), which is below lm-sh's at eps2; combining with phase 1 is refused."""
    d, heavy, sets, f_true = planted
    cfg = campaign("lm-sho", d=d, l=5)
    rng = np.random.default_rng(8)
    s1, memo = lms._run_correlated_phase1(lm.phase1_mechanism(cfg), sets, rng)
    assert memo.t.size == sets.shape[0] and set(np.unique(memo.x).tolist()) <= {0, 1}
    cand = lm.candidates_from_phase1(s1, 6, np.arange(d))
    mech2 = lm.phase2_mechanism(cfg, cand)
    s2 = lms._run_correlated_phase2(mech2, memo, rng)
    assert s1.n == s2.n == sets.shape[0]
    top = lm.final_topk(s1, s2, 3)
    assert set(top.keys.tolist()) == set(heavy)
    assert np.allclose(top.frequencies, s2.estimate(top.keys) / s2.n)
    sd = np.sqrt(mech2.item_variances(s2.n, f_true[top.keys]))
    assert np.all(np.abs(top.frequencies - f_true[top.keys]) < Z_BOUND * sd)
    sh2 = lm.phase2_mechanism(campaign("lm-sh", d=d, l=5), cand)
    assert mech2.variance(s2.n) < 0.7 * sh2.variance(s2.n)  # (0.76 / 0.96)^2 at eps 2 + 2
    with pytest.raises(ConfigError) as err:
        lm.final_topk(s1, s2, 3, combine="ivw")
    assert err.value.field == "combine"


def test_simulate_correlated_protocol_pairs_with_lm_sh():
    runs = {name: lms.simulate_ldpminer(name, POP, 5, 3) for name in ("lm-sh", "lm-sho")}
    assert runs["lm-sho"]["l2"] == 5 and runs["lm-sho"]["k_max"] == 6
    assert all(math.isfinite(runs["lm-sho"][key]) for key in ("re", "re_list", "ndcg", "recall"))
    assert lms.simulate_ldpminer("lm-sho", POP, 5, 3) == runs["lm-sho"]
