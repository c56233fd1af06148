"""`--protocol auto`, `ldpfleet plan --top K --set-size L` and the SVIM-style protocol
(protocols.auto, protocols.svim, mechanisms.psfo): the predicted errors are the mechanisms'
exact variances, the choice is the smallest, and a simulated auto run IS the chosen protocol's
run (same seed, same answer)."""
import json
import math

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.eval import datasets
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.psfo import choose_oracle
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.protocols import auto, svim


def run_json(capsys, *args):
    capsys.readouterr()
    assert cli.main([str(a) for a in args] + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_oracle_choice_follows_the_domain_size_rule():
    # GRR iff D + 1 < 3 e^eps + 2 (Wang et al. USENIX Sec 2017 §4.5): at eps = 2, 3e^2 + 2 = 24.2
    assert choose_oracle(2000, 23) == "psgrr" and choose_oracle(2000, 24) == "psolh"
    g, o = (make_mechanism(n, 2000, 1000, l=1, candidates=list(range(23))) for n in ("psgrr", "psolh"))
    assert g.item_variances(1000, [0.0])[0] < o.item_variances(1000, [0.0])[0]
    g, o = (make_mechanism(n, 2000, 1000, l=1, candidates=list(range(40))) for n in ("psgrr", "psolh"))
    assert g.item_variances(1000, [0.0])[0] > o.item_variances(1000, [0.0])[0]


def test_plan_predicts_each_protocol_from_its_variance_and_picks_the_smallest(capsys):
    out = run_json(capsys, "plan", "--epsilon", 2, "--domain", 10000, "--users", 1000000,
                   "--top", 10, "--set-size", 60)
    rows = {r["protocol"]: r for r in out["rows"]}
    n, l, l2 = 1e6, 60, 20
    rp = make_mechanism("srappor", 2000, 10000, l=l).item_variances(n, [0.0])[0]
    assert rows["rp"]["predicted_sd"] == pytest.approx(math.sqrt(rp))
    # svim: the better of its branches' bounds (protocols.auto): candidates at l2 on the phase-2
    # devices minus the size group; flat: phase 1 (l = 1, n/2, scaled by l) pooled with PSFO
    # at l over the other n/2 -- exactly one-phase PSFO over all n at f = 0
    ph2 = make_mechanism(choose_oracle(2000, 20), 2000, 10000, l=l2, candidates=list(
        range(20))).item_variances(n / 2 * (1 - svim.SIZE_SHARE), [0.0])[0]
    psfo = make_mechanism(choose_oracle(2000, 10000), 2000, 10000, l=l).item_variances(n, [0.0])[0]
    assert rows["psfo"]["predicted_sd"] == pytest.approx(math.sqrt(psfo))
    assert ph2 < psfo and rows["svim"]["predicted_sd"] == pytest.approx(math.sqrt(ph2))
    # 200 candidates: the flat bound wins; at r = l it is PSFO's variance over the share of the
    # devices that report items in either phase, 1/2 + 1/2 * (1 - FLAT_SIZE_SHARE) of n
    flat = auto.predict(n, 2000, 10000, l, 10, k_max=200)
    used = 0.5 + 0.5 * (1 - svim.FLAT_SIZE_SHARE)
    assert {r["protocol"]: r for r in flat}["svim"]["predicted_sd"] == pytest.approx(
        math.sqrt(psfo / used), rel=1e-9)
    # sets shorter than l (r = l / 2): phase 1's scaled scores are 4 times less noisy
    short = auto.predict(n, 2000, 10000, l, 10, k_max=200, size_ratio=l / 2)
    psfo1 = psfo / l ** 2  # PSFO's f = 0 variance is l^2 times its l = 1 variance
    pooled = 1 / (0.5 / ((l / 2) ** 2 * psfo1) + 0.5 * (1 - svim.FLAT_SIZE_SHARE) / psfo)
    assert {r["protocol"]: r for r in short}["svim"]["predicted_sd"] == pytest.approx(
        math.sqrt(pooled), rel=1e-9)
    assert rows["lm-rp"]["params"]["eps2_milli"] == 1000 and rows["svim"]["params"]["l2"] == l2
    best = min((r for r in out["rows"] if r["feasible"]), key=lambda r: r["predicted_sd"])
    assert out["chosen"] == best["protocol"] == "svim"
    assert out["predicted_error"] == best["predicted_sd"] and out["chosen_protocol"] == "svim"


def test_plan_refuses_incomplete_protocol_questions(capsys):
    assert cli.main(["plan", "--epsilon", "2", "--domain", "100", "--users", "10", "--top", "3"]) == 2
    assert "--set-size" in capsys.readouterr().err
    for k_max in ("2", "0", "101"):  # below top, zero, above the domain
        assert cli.main(["plan", "--epsilon", "2", "--domain", "100", "--users", "10", "--top",
                         "3", "--set-size", "5", "--k-max", k_max]) == 2
        assert "k_max" in capsys.readouterr().err


def test_ldpminer_is_chosen_only_where_nothing_else_can_run():
    """auto.choose's rule: an LDPMiner protocol's phase 1 (sampling SH at eps/2 over length l)
    is noisier than every one-phase protocol at eps on a grid of settings, even where its
    phase 2 predicts the smallest error -- so LDPMiner is chosen only when nothing else is
    allowed and feasible, and then the one with the smallest predicted error."""
    lm_best_somewhere = False
    for n in (10 ** 5, 10 ** 6):
        for eps in (500, 1000, 2000, 4000):
            for d, l, k in ((1000, 5, 5), (1000, 50, 5), (10000, 20, 20), (60000, 9, 10)):
                rows = {r["protocol"]: r for r in auto.predict(n, eps, d, l, k)}
                single = min(rows[p]["predicted_sd"] for p in ("rp", "sh", "psfo"))
                for p in ("lm-rp", "lm-sh", "lm-sho"):
                    assert rows[p]["phase1_sd"] > single, (n, eps, d, l, k, p)
                lm = min(rows[p]["predicted_sd"] for p in ("lm-rp", "lm-sh", "lm-sho"))
                assert auto.choose(n, eps, d, l, k)["chosen"] not in ("lm-rp", "lm-sh", "lm-sho")
                camp = auto.choose(n, eps, d, l, k, allowed=("lm-rp", "lm-sh", "lm-sho", "svim"),
                                   size_step=False)
                assert camp["chosen"] == "svim"
                lm_best_somewhere |= lm < camp["predicted_error"]
                only_lm = auto.choose(n, eps, d, l, k, allowed=("lm-rp", "lm-sh", "lm-sho"))
                assert only_lm["predicted_error"] == lm
    # somewhere a campaign's LDPMiner predicts less error than its svim: the rule, not the
    # prediction, keeps LDPMiner out (e.g. n = 10^5, eps 1, d = 1000, l = 5, k = 5)
    assert lm_best_somewhere
    rows = auto.predict(10 ** 6, 4000, 1000, 50, 5)
    lm = next(r for r in rows if r["protocol"] == "lm-rp")
    assert lm["predicted_sd"] < min(r["predicted_sd"] for r in rows if r["protocol"] == "rp")
    assert auto.choose(10 ** 6, 4000, 1000, 50, 5, allowed=("rp", "lm-rp"))["chosen"] == "rp"
    with pytest.raises(ConfigError) as err:  # only infeasible protocols allowed: named
        auto.choose(10 ** 6, 1000, 10 ** 8, 5, 5, allowed=("rp", "psfo"))
    assert "sampling-rappor" in str(err.value) and "psfo" in str(err.value)


def test_sh_protocols_are_rated_and_cover_domains_too_large_for_the_others():
    """The SH family (sampling SH, LDPMiner-SH, LDPMiner-SH with §4.4's correlated phases) is
    rated by its exact variances; above 2^24 items only it is feasible, and a campaign there
    (svim cannot run) takes the LDPMiner protocol with the smallest predicted error."""
    n, eps, d, l, k = 10 ** 6, 2000, 10 ** 8, 20, 10
    rows = {r["protocol"]: r for r in auto.predict(n, eps, d, l, k)}
    assert not rows["rp"]["feasible"] and not rows["psfo"]["feasible"]
    assert not rows["svim"]["feasible"]
    m = 65536
    sh = make_mechanism("sh", eps, d, l=l, m=m).item_variances(n, [0.0])[0]
    assert rows["sh"]["predicted_sd"] == pytest.approx(math.sqrt(sh), rel=1e-12)
    lm_sh = make_mechanism("sh", 1000, d, l=min(l, 2 * k), m=m).item_variances(n, [0.0])[0]
    assert rows["lm-sh"]["predicted_sd"] == pytest.approx(math.sqrt(lm_sh), rel=1e-12)
    sho = make_mechanism("shc", 1000, d, l=l, m=m, phase=2, eps1_milli=1000,
                         candidates=list(range(2 * k))).item_variances(n, [0.0])[0]
    assert rows["lm-sho"]["predicted_sd"] == pytest.approx(math.sqrt(sho), rel=1e-12)
    assert rows["lm-sho"]["phase1_sd"] == rows["lm-sh"]["phase1_sd"]
    assert auto.choose(n, eps, d, l, k)["chosen"] == "sh"
    from ldpfleet.core.protocols.options import ProtocolOptions
    from ldpfleet.service.campaigns.protocols import protocol_phases
    phases, doc = protocol_phases("auto", eps, {"type": "int", "size": d},
                                  ProtocolOptions(set_size=l, top=k, fleet_size=n))
    best = min((rows[p] for p in ("lm-rp", "lm-sh", "lm-sho")), key=lambda r: r["predicted_sd"])
    assert best["protocol"] == "lm-sho"  # phase 2 untrimmed, but as accurate as eps1 + eps2
    assert doc["protocol"] == "ldpminer-sh-opt" == best["cli_name"]
    assert doc["plan"]["predicted_error"] == pytest.approx(best["predicted_sd"], rel=1e-12)
    assert [p["mechanism"] for p in phases] == ["shc", "shc"]


def test_simulated_auto_is_the_chosen_protocols_run(capsys):
    common = ["simulate", "--users", 20000, "--domain", 300, "--dist", "zipf:1.0",
              "--set-size-dist", "geometric:6", "--epsilon", 3, "--top", 5, "--seed", 9]
    picked = run_json(capsys, *common, "--protocol", "auto")
    assert picked["chosen_protocol"] == "svim" and picked["predicted_error"] > 0
    again = run_json(capsys, *common, "--protocol", picked["chosen_protocol"])
    for key in ("re", "recall", "ndcg", "top_items"):
        assert picked[key] == again[key]
    assert picked["recall"] == 1.0  # an easy head at eps 3 (seeded)


def test_svim_phase2_estimates_are_unbiased_within_their_variance():
    """Phase 2 alone over fixed candidates: PSGRR/PSOLH padded to l2 = min(l, k_max) on
    trimmed sets; z-scores of the candidates' estimates over 20 seeded runs."""
    rng = np.random.default_rng(4)
    n, d, kc = 20000, 200, 8
    sets = datasets.draw_variable_sets(n, "geometric:5", d, "zipf:1.0", rng)
    f = np.bincount(sets.keys, minlength=d)[:d] / n
    cand = np.arange(kc, dtype=np.uint32)
    from ldpfleet.core.protocols.ldpminer import trim_sets
    from ldpfleet.eval.twophase import run_phase
    trimmed = trim_sets(sets, cand)
    for name in ("psgrr", "psolh"):
        mech = make_mechanism(name, 2000, d, l=svim.phase2_length(30, kc),
                              candidates=[int(c) for c in cand])
        z = []
        for r in range(20):
            sk = run_phase(mech, trimmed, np.random.default_rng(100 + r))
            z.append((sk.estimate(cand) / n - f[cand]) / np.sqrt(mech.item_variances(n, f[cand])))
        z = np.concatenate(z)
        # mean of 160 z-scores: sd 1/sqrt(160) if independent (they are positively correlated
        # within a run for PSOLH, so allow 4 sd); spread within 25 % of 1
        assert abs(z.mean()) < 4 / math.sqrt(z.size), (name, z.mean())
        assert 0.75 < z.std() < 1.25, (name, z.std())


def test_svim_campaign_phases_split_devices_not_the_budget():
    phases = svim.campaign_phases(2000, 10000, 60, 20)
    assert [p["eps_milli"] for p in phases] == [2000, 2000]
    assert phases[0]["sample_rate_ppm"] == phases[1]["sample_rate_ppm"] == 500000
    assert phases[0]["params"] == {"l": 1} and phases[1]["params"] == {"l": 20}
    assert [p["mechanism"] for p in phases] == ["psolh", "psgrr"]


def test_auto_choice_matches_predict():
    rows = auto.predict(10 ** 6, 1000, 1000, 50, 20)
    choice = auto.choose(10 ** 6, 1000, 1000, 50, 20)
    assert choice["rows"] == rows
    best = min(r["predicted_sd"] for r in rows if r["feasible"])
    sd = {r["protocol"]: r["predicted_sd"] for r in rows}
    # here (d = 1000, l = 50, k = 20, r = l by default) svim's flat bound is one-phase PSFO's
    # over the 97.5 % of the devices that report items, and PSFO is chosen
    used = 0.5 + 0.5 * (1 - svim.FLAT_SIZE_SHARE)
    assert sd["svim"] == pytest.approx(sd["psfo"] / math.sqrt(used), rel=1e-9)
    assert sd["psfo"] == best and choice["chosen"] == "psfo"
    assert choice["predicted_error"] == sd["psfo"]
    # on sets of 20 items on average (r = 20 < l) svim's pool wins
    short = auto.choose(10 ** 6, 1000, 1000, 50, 20, size_ratio=20)
    assert short["chosen"] == "svim" and short["predicted_error"] < sd["psfo"]


def test_listless_psfo_and_svim_refuse_a_string_domain():
    """Without a candidate list psgrr/psolh run over the int items 0..d-1; on a string domain
    they would measure nothing, so the config and the campaign are refused (domain.type)."""
    from ldpfleet.core import config
    from ldpfleet.core.errors import ConfigError
    from ldpfleet.core.protocols.options import ProtocolOptions
    from ldpfleet.service.campaigns.protocols import protocol_phases
    words = {"type": "str", "items": ["apple", "pear", "kiwi"]}
    for name in ("psgrr", "psolh"):
        with pytest.raises(ConfigError) as err:
            config.make_config("c", [{"phase": 1, "mechanism": name, "eps_milli": 2000,
                                      "params": {"l": 2}}], words, 7)
        assert err.value.field == "domain.type"
    with pytest.raises(ConfigError) as err:
        protocol_phases("svim", 2000, words, ProtocolOptions(set_size=2, top=1))
    assert err.value.field == "domain.type"
    # auto on a string domain chooses among the LDPMiner protocols (hashing or candidates)
    _phases, doc = protocol_phases("auto", 2000, words,
                                   ProtocolOptions(set_size=2, top=1, fleet_size=1000))
    rows = {r["protocol"]: r for r in doc["plan"]["rows"]}
    assert not rows["svim"]["feasible"] and not rows["psfo"]["feasible"]
    assert "domain.type" in rows["svim"]["reason"]
    best = min((rows[p] for p in ("lm-rp", "lm-sh", "lm-sho")), key=lambda r: r["predicted_sd"])
    assert doc["protocol"] == best["cli_name"]
    with pytest.raises(ConfigError) as err:
        protocol_phases("auto", 2000, {"type": "int", "size": 50},
                        ProtocolOptions(set_size=2, top=1, fleet_size=1000, budget_split=0.3))
    assert err.value.field == "budget_split"


def test_a_campaign_plans_svim_without_the_size_step():
    """`campaign create --protocol auto` predicts svim as a campaign runs it (its phase-2
    length fixed at creation, no size group): the candidate branch on all the phase-2 devices,
    never the flat-branch bound the simulation's size step earns."""
    n, eps, d, l, k = 10 ** 6, 1000, 7520, 9, 5
    sim = {r["protocol"]: r for r in auto.predict(n, eps, d, l, k)}
    camp = {r["protocol"]: r for r in auto.predict(n, eps, d, l, k, size_step=False)}
    kc = 2 * k
    cand = math.sqrt(float(make_mechanism(choose_oracle(eps, kc), eps, d, l=min(l, kc),
                                          candidates=list(range(kc)))
                           .item_variances(1, [0.0])[0]) / (n * (1 - svim.DEFAULT_PHASE1_SHARE)))
    assert camp["svim"]["predicted_sd"] == pytest.approx(cand, rel=1e-12)
    assert sim["svim"]["predicted_sd"] < camp["svim"]["predicted_sd"]
    # the campaign's own planning path (what `campaign create --protocol auto` records)
    from ldpfleet.core.protocols.options import ProtocolOptions
    from ldpfleet.service.campaigns.protocols import protocol_phases
    _phases, doc = protocol_phases("auto", eps, {"type": "int", "size": d},
                                   ProtocolOptions(set_size=l, top=k, fleet_size=n))
    assert doc["protocol"] == "svim"
    assert doc["plan"]["predicted_error"] == pytest.approx(cand, rel=1e-12)
