"""Adaptive svim campaigns on the aggregator (protocols.svim, spec §3 and §5.4 `fallback`),
without a broker: `campaign create --protocol svim` writes phase 2's `fallback`; `advance`
tests separability on the stored phase-1 sketch and publishes `"fallback": true` on flat data
(candidates on skewed data); the phase-2 header rule and sketch then follow the fallback
mechanism; `estimate` pools both phases exactly as the simulation's helper
(`svim.flat_estimates`, used by svim_sim) does for the same sketches; `campaign status` shows
the branch. The phase-2 message carries exactly one of candidates and `"fallback": true`.
"""
import copy

import numpy as np
import pytest

from ldpfleet.core import config as cfgmod
from ldpfleet.core import protocol
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms.base import Sketch
from ldpfleet.core.protocols import svim
from ldpfleet.eval import svim_sim
from ldpfleet.eval.twophase import run_phase
from ldpfleet.core.protocols.options import ProtocolOptions
from ldpfleet.service import Store
from ldpfleet.service.campaigns.manage import Issuance, campaign_status, publish_phase2
from ldpfleet.service.campaigns.answers import compute_answer
from ldpfleet.service.campaigns.protocols import advance_campaign, create_protocol_campaign
from ldpfleet.core.signing import write_signing_key

D, L, K, EPS = 64, 6, 2, 2.0


@pytest.fixture
def made(tmp_path):
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    store = Store("sqlite:///%s" % (tmp_path / "s.db"))

    def create(name, set_size=L, epsilon=EPS, domain=D):
        return create_protocol_campaign(
            store, None, key, name, "svim", epsilon, str(domain),
            options=ProtocolOptions(set_size=set_size, top=K), issue=Issuance(salt=9))
    yield store, create
    store.close()


def sets_of(kind, n, rng, size=L, d=D):
    """`n` sets of `size` distinct items: uniform ("flat") or two planted items ("skewed")."""
    w = np.ones(d)
    if kind == "skewed":
        w[[7, 42]] = 60.0
    return np.array([rng.choice(d, size=size, replace=False, p=w / w.sum()) for _ in range(n)],
                    np.uint32)


def put_sketch(store, name, phase, sketch):
    with store.batch():
        store.put_sketch(name, phase, int(sketch.n), sketch.serialize())


def test_create_writes_the_spelled_out_fallback(made):
    store, create = made
    camp = create("sv")
    ph2 = camp.config["phases"][1]
    assert ph2["fallback"] == svim.fallback_phase(2000, D, L)
    assert ph2["fallback"]["params"]["l"] == L and ph2["params"]["l"] == min(L, 2 * K)
    entry = cfgmod.fallback_entry(camp.config)
    assert entry == {"phase": 2, "mechanism": ph2["fallback"]["mechanism"], "eps_milli": 2000,
                     "params": ph2["fallback"]["params"]}
    assert not camp.fallback and camp.header_rule.mechanism_ids[1] == \
        protocol.MECHANISM_IDS[ph2["mechanism"]]


def test_config_rules_of_the_fallback(made):
    store, create = made
    doc = create("sv").config
    now = doc["not_before"] + 5
    cfgmod.check_config(doc, now)

    def field(fn):
        bad = copy.deepcopy(doc)
        fn(bad["phases"])
        try:
            cfgmod.check_config(bad, now)
        except ConfigError as exc:
            return exc.field
        return None
    assert field(lambda p: p[0].update(fallback=p[1]["fallback"])) == "phases.fallback"
    assert field(lambda p: p[1]["fallback"].update(mechanism="olh")) == "phases.fallback"
    assert field(lambda p: p[1]["fallback"]["params"].update(l=0)) == "phases.fallback"
    assert field(lambda p: p[1]["fallback"]["params"].update(x=1)) == "phases.fallback"
    assert field(lambda p: p[1]["fallback"].update(eps_milli=1)) == "phases.fallback"
    assert field(lambda p: p[1].pop("fallback")) is None  # optional (older svim configs)


def test_phase2_message_carries_candidates_or_fallback_exactly(made):
    store, create = made
    doc = create("sv").config
    body = cfgmod.make_phase2
    assert cfgmod.check_phase2_choice(doc, body(doc, fallback=True))["fallback"] is True
    assert "fallback" not in cfgmod.check_phase2_choice(doc, body(doc, candidates=[1, 2]))
    for bad in (body(doc), body(doc, candidates=[1, 2], fallback=True),
                dict(body(doc), fallback=False), dict(body(doc), fallback=1),
                dict(body(doc, candidates=[1]), fallback=None)):
        with pytest.raises(ConfigError) as exc:
            cfgmod.check_phase2_choice(doc, bad)
        assert exc.value.field == "candidates"
    no_fb = copy.deepcopy(doc)
    del no_fb["phases"][1]["fallback"]
    with pytest.raises(ConfigError) as exc:
        cfgmod.check_phase2_choice(no_fb, body(no_fb, fallback=True))
    assert exc.value.field == "candidates"
    # the service refuses both at once before storing anything
    with pytest.raises(ConfigError) as exc:
        publish_phase2(store, None, "sv", candidates=[1, 2], fallback=True)
    assert exc.value.field == "candidates" and store.require_campaign("sv").phase == 1


def phase1(store, name, kind, n=20000, seed=3):
    rng = np.random.default_rng(seed)
    camp = store.require_campaign(name)
    sketch = run_phase(camp.mechanism(1), sets_of(kind, n, rng), rng)
    put_sketch(store, name, 1, sketch)
    return sketch


def test_advance_takes_the_flat_branch_on_flat_data(made, capsys):
    store, create = made
    create("flat")
    sketch1 = phase1(store, "flat", "flat")
    keys = np.arange(D, dtype=np.uint32)
    want = svim.separation(*svim.phase1_scores(sketch1, keys), K, 2 * K)
    assert not want["separable"]
    out = advance_campaign(store, None, "flat")
    assert out["branch"] == "flat" and "candidates" not in out
    assert out["separation"]["z"] == pytest.approx(want["z"]) and out["separation"]["z"] < 1
    camp = store.require_campaign("flat")
    assert camp.phase == 2 and camp.phase2 == cfgmod.make_phase2(camp.config, fallback=True)
    assert camp.fallback and camp.protocol["branch"] == "flat"
    fb = camp.config["phases"][1]["fallback"]
    mech2 = camp.mechanism(2)
    assert (mech2.name, mech2.phase, mech2.params["l"]) == (fb["mechanism"], 2, L)
    assert getattr(mech2, "listed", False) is False  # over the whole integer domain
    rule = camp.header_rule
    assert rule.mechanism_ids == (protocol.MECHANISM_IDS[camp.config["phases"][0]["mechanism"]],
                               protocol.MECHANISM_IDS[fb["mechanism"]])
    assert rule.report_sizes[1] == mech2.report_size
    status = campaign_status(store, "flat")
    assert status["branch"] == "flat" and status["phases"][1]["fallback"] is True
    assert status["phases"][1]["mechanism"] == fb["mechanism"]
    from ldpfleet import cli
    capsys.readouterr()
    assert cli.main(["campaign", "status", "flat", "--state", store.path]) == 0
    assert "branch flat" in capsys.readouterr().out


def test_advance_keeps_the_candidates_on_skewed_data(made):
    store, create = made
    create("skew")
    phase1(store, "skew", "skewed")
    out = advance_campaign(store, None, "skew")
    assert out["branch"] == "candidates" and {7, 42} <= set(out["candidates"])
    assert out["separation"]["z"] > 1
    camp = store.require_campaign("skew")
    assert not camp.fallback and camp.phase2["candidates"] == out["candidates"]
    assert campaign_status(store, "skew")["branch"] == "candidates"
    assert camp.mechanism(2).name == camp.config["phases"][1]["mechanism"]


def test_flat_estimate_pools_as_the_simulation_helper(made, monkeypatch):
    store, create = made
    create("flat")
    sketch1 = phase1(store, "flat", "flat")
    advance_campaign(store, None, "flat")
    camp = store.require_campaign("flat")
    rng = np.random.default_rng(8)
    sketch2 = run_phase(camp.mechanism(2), sets_of("flat", 20000, rng), rng)
    put_sketch(store, "flat", 2, sketch2)
    answer = compute_answer(store, "flat", top=D)
    assert answer.branch == "flat" and answer.to_json()["branch"] == "flat"
    assert answer.phase_reports == [20000, 20000] and len(answer.rows) == D
    keys = np.arange(D, dtype=np.uint32)
    s1, s2 = (Sketch.deserialize(store.sketch_blob("flat", p)[1]) for p in (1, 2))
    f, var, ratio = svim.flat_estimates(s1, s2, keys, L)
    got = {row["key"]: row for row in answer.rows}
    np.testing.assert_allclose([got[k]["frequency"] for k in range(D)], f, rtol=1e-12)
    np.testing.assert_allclose([got[k]["stddev"] ** 2 for k in range(D)], var, rtol=1e-12)
    assert answer.params["ratio"] == pytest.approx(ratio[0])
    assert [row["key"] for row in answer.rows] == np.argsort(-f, kind="stable").tolist()
    # the simulation's flat branch computes with the very same helper
    seen = []
    real = svim.flat_estimates
    monkeypatch.setattr(svim, "flat_estimates", lambda *a: seen.append(a) or real(*a))
    svim_sim._flat_phase2(sketch1, sets_of("flat", 500, rng), (2000, D, L, 9), rng)
    assert len(seen) == 1 and seen[0][3] == L
    # uniform sets of L items: every item's frequency is L / D
    assert np.all(np.abs(f - L / D) <= 5 * np.sqrt(var))
    assert ratio[0] == pytest.approx(L, rel=0.1)
    text = answer.to_text()
    assert "flat branch" in text
    default = compute_answer(store, "flat")
    assert len(default.rows) == K
