"""PEM campaigns on the aggregator without a broker (protocol_spec/v2 §3.5): `campaign create
--domain strings:max_len=L` writes pem then psgrr l=1 with the public split; simulated devices
(the load generator's own report path: loadgen.simulated, loadgen.strings) report phase 1 into
the per-group sketch, `advance` publishes the candidates' keys (the strings stay in the protocol
document), phase 2 validates them and `estimate` shows the validated strings with intervals;
in phase 1 `estimate` shows unvalidated candidates."""
import json
import numpy as np
import pytest

from ldpfleet.core import strings_domain
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.protocols.options import ProtocolOptions
from ldpfleet.core.signing import write_signing_key
from ldpfleet.loadgen.campaign import CampaignView, phase_mechanism
from ldpfleet.loadgen.items import item_distribution
from ldpfleet.loadgen.simulated import simulated_device_ids, simulated_reports
from ldpfleet.service import Store
from ldpfleet.service.campaigns.estimates import EstimateQuery
from ldpfleet.service.campaigns.manage import Issuance, parse_domain
from ldpfleet.service.campaigns.protocols import advance_campaign, create_protocol_campaign
from ldpfleet.service.campaigns.query import estimate


@pytest.fixture
def made(tmp_path):
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    store = Store("sqlite:///%s" % (tmp_path / "s.db"))

    def create(name, domain="strings:max_len=4", epsilon=4.0, **opts):
        return create_protocol_campaign(store, None, key, name, "pem", epsilon, domain,
                                        options=ProtocolOptions(**opts), issue=Issuance(salt=9))
    yield store, create
    store.close()


def test_parse_domain_and_config():
    assert parse_domain("strings:max_len=16") == {"type": "strings", "max_len": 16}
    for bad in ("strings:max_len=0", "strings:max_len=65", "strings:len=4", "strings:max_len=x"):
        with pytest.raises(ConfigError) as info:
            parse_domain(bad)
        assert info.value.field == "domain.max_len"


def test_create_writes_pem_then_psgrr(made):
    store, create = made
    camp = create("c", top=3)
    p1, p2 = camp.config["phases"]
    assert p1["mechanism"] == "pem" and p2 == {"phase": 2, "mechanism": "psgrr", "eps_milli": 4000,
                                               "sample_rate_ppm": 900000, "params": {"l": 1}}
    # the public parameters are PemPlan.for_fleet's for the default fleet's phase-1 share
    from ldpfleet.core.protocols.pem import PemPlan
    from ldpfleet.service.campaigns.pem_campaign import DEFAULT_FLEET
    plan = PemPlan.for_fleet(int(DEFAULT_FLEET * 0.9), 4000, 4, top=12)
    assert p1["params"]["levels"] == plan.level_bits() == [8, 16, 24, 32]
    assert p1["params"]["kp"] == plan.kp >= 1024
    assert camp.protocol["keep"] == plan.keep and camp.protocol["pool"] is True
    alpha = create("c2", top=3, alphabet="abc")
    assert alpha.config["phases"][0]["params"]["levels"] == [32]  # 4 characters of 4 symbols: one level
    assert alpha.protocol["alphabet"] == "abc"
    assert p1["sample_rate_ppm"] == 900000
    assert camp.protocol["k_max"] == 12 and camp.protocol["max_len"] == 4
    with pytest.raises(ConfigError) as info:
        create_protocol_campaign(store, None, camp.signing_key_ref, "d", "svim", 2.0,
                                 "strings:max_len=4", options=ProtocolOptions(set_size=1, top=2))
    assert info.value.field == "domain.type"


def run_phase(store, name, n, phase, dist="zipf:1.3,30,4", seed=5):
    camp = store.require_campaign(name)
    view = CampaignView(camp.config, phase, camp.phase2)
    mech = phase_mechanism(view)
    distribution = item_distribution(dist, camp.config)
    ids = simulated_device_ids(n, "sim")
    chosen, counts, reports = simulated_reports(view, mech, distribution, ids,
                                                np.random.default_rng(seed))
    sketch = mech.new_sketch()
    if phase == 1:
        sketch.update(reports[chosen], devices=[ids[i] for i in chosen.tolist()])
    else:
        sketch.update(reports[chosen])
    with store.batch():
        store.put_sketch(name, phase, int(sketch.n), sketch.serialize())
    return counts


def test_phase1_advance_phase2_estimate(made):
    store, create = made
    create("c", top=3)
    counts1 = run_phase(store, "c", 30000, 1)
    early = estimate(store, "c", EstimateQuery())
    doc = early.to_json()
    assert doc["phase"] == 1 and doc["validated"] is False
    from ldpfleet.service.http.models import Estimate
    Estimate.model_validate(doc)  # the HTTP API's response model takes it
    assert "UNVALIDATED" in early.to_text()
    truth = sorted(counts1, key=lambda s: -counts1[s])[:3]
    assert set(truth) <= {r["item"] for r in doc["items"]}
    out = advance_campaign(store, None, "c")
    camp = store.require_campaign("c")
    assert camp.phase == 2 and camp.phase2["candidates"] == out["candidates"]
    assert len(out["candidates"]) <= 12
    codes = [bytes.fromhex(c) for c in camp.protocol["candidate_codes"]]
    assert [strings_domain.code_key(c) for c in codes] == out["candidates"]
    # the message carries keys; the state keeps the strings (a cut character shows as U+FFFD)
    assert camp.protocol["candidate_strings"] == [strings_domain.code_string(c) for c in codes]
    counts2 = run_phase(store, "c", 30000, 2)
    result = estimate(store, "c", EstimateQuery())
    assert "validated" in result.to_text() and "interval" in result.to_text()
    answer = result.to_json()
    Estimate.model_validate(answer)
    assert answer["protocol"] == "pem" and answer["n"] == sum(counts2.values())
    rows = answer["items"]
    assert [r["item"] for r in rows[:3]] and set(truth) <= {r["item"] for r in rows}
    n2 = sum(counts2.values())
    camp = store.require_campaign("c")
    mech2 = phase_mechanism(CampaignView(camp.config, 2, camp.phase2))
    z = 1.959963984540054
    for r in rows:
        if r["item"] in truth:
            f = counts2[r["item"]] / n2
            # the interval is +- z sd, sd psgrr's (l = 1, k_max candidates) at the estimate,
            # and the truth is within 3 sd of the estimate (no slack: an interval of the wrong
            # width, or an estimate over the wrong n, fails here)
            sd = float(np.sqrt(mech2.item_variances(n2, [r["frequency"]])[0]))
            assert r["ci_high"] - r["frequency"] == pytest.approx(z * sd, rel=1e-6)
            assert r["frequency"] - r["ci_low"] == pytest.approx(z * sd, rel=1e-6)
            assert abs(r["frequency"] - f) <= 3 * float(np.sqrt(mech2.item_variances(n2, [f])[0]))
            assert not r["noise"]
    phase1 = estimate(store, "c", EstimateQuery(phase=1)).to_json()
    assert phase1["validated"] is False


def test_fleet_strings_file(tmp_path, made):
    store, create = made
    create("f", top=2)
    path = tmp_path / "s.txt"
    path.write_text("# crash signatures\nnull deref 5\noom 3\nhi\n")
    dist = item_distribution(str(path), store.require_campaign("f").config)
    assert dist.items == ["null deref", "oom", "hi"]
    assert np.allclose(dist.probs, [5 / 9, 3 / 9, 1 / 9])


def test_plausible_candidates():
    from ldpfleet.service.campaigns.pem_campaign import plausible
    assert plausible(b"ab\0\0") and plausible("h\u00e9".encode() + b"\0")
    assert plausible(b"ab\xc3")  # a full code may end in a cut character (spec §3.5)
    assert not plausible(b"a\xc3\0\0")  # ... a shorter one may not
    assert not plausible(b"\0\0\0\0") and not plausible(b"\xff\xfeab")


def test_items_are_shown_with_non_printing_characters_escaped():
    """A string nobody listed may hold a newline or a tab (a candidate surviving the noise):
    the text output escapes it, so one row stays one line; printable non-ASCII is kept."""
    from ldpfleet.service.campaigns.display import shown
    assert shown("crash\n\tat 0x1") == "crash\\n\\tat 0x1"
    assert shown("température", 5) == "tempé"
    assert shown(42) == "42"
    assert "\n" not in shown("a\x00b\x1bc\u2028d")


def test_plan_shows_the_parameters_campaign_create_writes(made, capsys):
    """`ldpfleet plan --domain strings:max_len=L` reports the public parameters `campaign create`
    writes for the same fleet (one rule: PemPlan.for_fleet), and the level noise from FLH's
    variance for the devices per group."""
    import math
    from ldpfleet import cli
    from ldpfleet.commands.plan_strings import plan_strings
    store, create = made
    camp = create("p", epsilon=3.0, fleet_size=20000, alphabet="abcdefghijklmnopqrstuvwxyz")
    params = camp.config["phases"][0]["params"]
    r = plan_strings(3.0, 4, 20000, alphabet="abcdefghijklmnopqrstuvwxyz")
    assert (r["levels_bits"], r["kp"], r["g"]) == (params["levels"], params["kp"], params["g"])
    assert r["phase1_devices"] == 18000 and r["phase2_devices"] == 2000
    e = math.exp(3.0)
    olh_var = 4 * e / (e - 1) ** 2 if params["g"] == round(e) + 1 else None
    groups = len(params["levels"])
    if olh_var is not None:  # OLH's optimum g: within integer thresholds' rounding
        assert r["level_sd"] ** 2 * 18000 / groups == pytest.approx(olh_var, rel=0.05)
    assert cli.main(["plan", "--domain", "strings:max_len=4", "--epsilon", "3", "--users",
                     "20000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["levels_bits"] == plan_strings(3.0, 4, 20000)["levels_bits"]
    assert cli.main(["plan", "--domain", "strings:max_len=4", "--epsilon", "3"]) == 2


def test_estimate_refuses_what_a_pem_phase_cannot_answer(made):
    """`estimate --phase 2` before `campaign advance` is refused like any campaign's unopened
    phase (it crashed with KeyError 'size': the generic item table of a strings domain), and
    `--items`/`--subset` of a PEM phase 1 (its answer is PEM's candidates, not the estimates
    of given items) are refused instead of silently ignored."""
    store, create = made
    create("q", top=3)
    run_phase(store, "q", 3000, 1)
    with pytest.raises(ConfigError) as info:
        estimate(store, "q", EstimateQuery(phase=2))
    assert info.value.field == "phase" and "not opened phase 2" in str(info.value)
    for flag in ("items", "subset"):
        for phase in (1, None):
            with pytest.raises(ConfigError) as info:
                estimate(store, "q", EstimateQuery(phase=phase, **{flag: ["abc"]}))
            assert info.value.field == flag
