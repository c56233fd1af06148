"""`ldpminer-sh-opt` campaigns on the aggregator, in process (spec §3.1; LDPMiner, Qin et al.,
"Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy", CCS 2016, §4.4
"Optimization"): `campaign create --protocol ldpminer-sh-opt` writes `shc` in both phases with
the same m and l and the budget split as ldpminer-sh; the phase-1 reports of simulated devices go
through the real ingest path (`fold_batch`); `campaign advance` publishes the signed phase-2
message with the candidates (read back from the private broker and verified); the same devices
re-report from their kept (t, y1, x); `estimate` answers with the phase-2 estimates, whose
errors lie within z = Phi^-1(1 - alpha/(2k)), alpha = 1e-4, phase-2 standard deviations
(`ShcMechanism.item_variances` at p2). Hand-made shc configs are checked by the same rules
(`params.m`, `params.l`, `phases.mechanism`, `phases.eps_milli`). Devices are simulated with the
C kernels from a fixed seed; the device-level end to end test lives with the clients.
"""

import numpy as np
import pytest
from scipy import stats

from ldpfleet.core.errors import ConfigError
from ldpfleet.loadgen.campaign import fetch_campaign
from ldpfleet.core.mechanisms.shc import memo_from_reports
from ldpfleet.service import Store
from ldpfleet.service.campaigns.manage import build_config
from ldpfleet.core.signing import read_signing_key, write_signing_key
from support.service import cli_json, fold_batch, report_messages

SEED = 3131
DEVICES = 20000
PLANTED = (7, 42)
ALPHA = 1e-4


def run_cli(capsys, *args):
    return cli_json(capsys, *args)


def planted_sets(rng, n, d=64, size=3):
    """Each device holds `size` distinct items: the planted ones w.p. 0.5 each, the rest light."""
    sets = []
    for _ in range(n):
        mine = [p for p in PLANTED if rng.random() < 0.5]
        light = rng.choice([i for i in range(d) if i not in PLANTED], size - len(mine),
                           replace=False)
        sets.append(mine + [int(v) for v in light])
    return np.array(sets, np.uint32)


def create_sh_opt(capsys, broker_url, tmp_path, name, epsilon, salt):
    """(state URL, signing key file, `campaign create --protocol ldpminer-sh-opt` JSON) of a
    campaign over 64 items, sets of 3, top 2."""
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    key_file = str(tmp_path / "fleet.key")
    write_signing_key(key_file)
    made = run_cli(capsys, "campaign", "create", "--broker", broker_url, "--state", state,
                   "--signing-key", key_file, "--name", name, "--protocol", "ldpminer-sh-opt",
                   "--epsilon", epsilon, "--domain", 64, "--set-size", 3, "--top", 2,
                   "--salt", salt)
    return state, key_file, made


def test_ldpminer_sh_opt_campaign_in_process(mosquitto, tmp_path, capsys):
    state, key_file, made = create_sh_opt(capsys, mosquitto.url, tmp_path, "opt", 3, 5)
    assert made["protocol"] == {"protocol": "ldpminer-sh-opt", "k": 2, "k_max": 4, "set_size": 3,
                                "budget_split": 0.5}
    phases = made["config"]["phases"]
    assert [(p["mechanism"], p["eps_milli"]) for p in phases] == [("shc", 1500), ("shc", 1500)]
    assert phases[0]["params"] == phases[1]["params"] == {"m": 65536, "l": 3}

    rng = np.random.default_rng(SEED)
    sets = planted_sets(rng, DEVICES)
    with Store(state) as store:
        mech1 = store.require_campaign("opt").mechanism(1)
    reports1, x = mech1.perturb_phase1(sets, rng)
    memo = memo_from_reports(reports1, x)
    counts = fold_batch(state, report_messages("opt", reports1))
    assert counts.get(("opt", "accepted")) == DEVICES

    advanced = run_cli(capsys, "campaign", "advance", "opt", "--state", state,
                       "--broker", mosquitto.url)
    cand = advanced["candidates"]
    assert advanced["phase1_reports"] == DEVICES and len(cand) == 4 and set(PLANTED) <= set(cand)
    view = fetch_campaign(mosquitto.url, "opt", read_signing_key(key_file).public, phase=2)
    assert view.phase2["candidates"] == cand and view.phase2["phase"] == 2

    with Store(state) as store:
        mech2 = store.require_campaign("opt").mechanism(2)
    assert (mech2.name, mech2.eps1_milli, mech2.random_words) == ("shc", 1500, 1)
    reports2 = mech2.perturb_phase2(memo, rng)
    assert np.array_equal(reports2[:, 12:16], reports1[:, 12:16])  # the same rows t
    counts = fold_batch(state, report_messages("opt", reports2))
    assert counts.get(("opt", "accepted")) == DEVICES  # phase 2 dedupes per phase

    answer = run_cli(capsys, "estimate", "opt", "--state", state)
    assert answer["protocol"] == "ldpminer-sh-opt"
    assert answer["phase_reports"] == [DEVICES, DEVICES]
    rows = answer["items"]
    assert {r["key"] for r in rows} == set(PLANTED)
    f_true = np.bincount(sets.astype(np.int64).ravel(), minlength=64) / DEVICES
    sd = np.sqrt(mech2.item_variances(DEVICES, f_true[[r["key"] for r in rows]]))
    z = stats.norm.ppf(1 - ALPHA / 4)
    for row, s in zip(rows, sd):
        assert abs(row["frequency"] - f_true[row["key"]]) <= z * s, (row, s)
    status = run_cli(capsys, "campaign", "status", "opt", "--state", state)
    assert status["phase"] == 2 and [p["reports"] for p in status["phases"]] == [DEVICES] * 2
    # without --seed the load generator's simulated fleet is the campaign's own (seed = its
    # id, loadgen.fleet): phase 2 replays the phase 1 the same command made
    from ldpfleet.loadgen import FleetOptions, run_fleet
    again = run_fleet(mosquitto.url, "opt", read_signing_key(key_file).public,
                      FleetOptions(devices=5, phase=2, ack_wait=0))
    assert again.seed == status["campaign_id"] and again.sent == 5
    assert again.device_ids["simulated"][0] == "sim%d-0" % status["campaign_id"]


def test_hand_made_shc_configs_follow_the_rules():
    """`campaign create --mechanism shc,shc` builds phase 2 with phase 1's eps; phases that
    differ in m or l, a lone or mixed shc phase, and a pair past shc_ok are refused."""
    dom = {"type": "int", "size": 64}
    doc = build_config("hand", ["shc", "shc"], [1.0, 2.0], dom,
                       [{"m": 128, "l": 2}, {"m": 128, "l": 2}])
    assert [p["params"] for p in doc["phases"]] == [{"m": 128, "l": 2}] * 2
    for mechs, eps, params, field in [
            (["shc", "shc"], [1.0, 2.0], [{"m": 128, "l": 2}, {"m": 64, "l": 2}], "params.m"),
            (["shc", "shc"], [1.0, 2.0], [{"m": 128, "l": 2}, {"m": 128, "l": 3}], "params.l"),
            (["shc", "sh"], [1.0, 2.0], [{}, {}], "phases.mechanism"),
            (["sh", "shc"], [1.0, 2.0], [{}, {}], "phases.mechanism"),
            (["shc", "shc"], [32.0, 32.001], [{}, {}], "phases.eps_milli")]:
        with pytest.raises(ConfigError) as err:
            build_config("hand", mechs, eps, dom, params)
        assert err.value.field == field, (mechs, params)
    with pytest.raises(ConfigError) as err:
        build_config("hand", "shc", 1.0, dom, {"m": 128, "l": 2})
    assert err.value.field == "phases.mechanism"



def test_load_generator_runs_shc_phase_two_from_a_replayed_phase_one(mosquitto, tmp_path, capsys):
    """`ldpfleet fleet` keeps no state between runs; for shc phase 2 its simulated devices
    replay phase 1 from the same seed and re-report from those memos (loadgen.simulated
    `_shc_memos`): every device's phase-2 body repeats its phase-1 row t, and y2 agrees with y1
    as often as the chain x -> y1, x -> y2 says (T_rr, T_shc_a, T_shc_b; 5 sd)."""
    from ldpfleet.loadgen.campaign import CampaignView
    from ldpfleet.loadgen.items import item_distribution
    from ldpfleet.loadgen.simulated import simulated_device_ids, simulated_reports
    _state, _key_file, made = create_sh_opt(capsys, mosquitto.url, tmp_path, "lg", 2, 6)
    doc, n = made["config"], 3000
    ids = simulated_device_ids(n, "lg")
    dist = item_distribution("zipf:1.1", doc)
    seen = {}
    from ldpfleet.core import config
    mechs = {1: config.mechanism_for_phase(doc, 1),
             2: config.mechanism_for_phase(doc, 2, candidates=[0, 1, 2, 3])}
    for phase, phase2 in ((1, None), (2, {"candidates": [0, 1, 2, 3], "phase": 2})):
        view = CampaignView(doc, phase, phase2)
        sent, _counts, reports = simulated_reports(view, mechs[phase], dist, ids,
                                                   np.random.default_rng(SEED), 3)
        assert len(sent) == n
        seen[phase] = reports
    body1, body2 = seen[1][:, 12:], seen[2][:, 12:]
    assert np.array_equal(body1[:, :4], body2[:, :4])  # the same row t, device by device
    mech2 = mechs[2]
    w = 2.0 ** 32
    p1 = mech2.t_rr / w
    agree = p1 * mech2.t_a / w + (1 - p1) * (1 - mech2.t_b / w)
    got = np.mean(body1[:, 4] == body2[:, 4])
    assert abs(got - agree) < 5 * np.sqrt(agree * (1 - agree) / n), (got, agree)
    # a phase-2 run with another seed replays other memos: rows no longer match
    other = simulated_reports(CampaignView(doc, 2, {"candidates": [0, 1, 2, 3], "phase": 2}),
                              mechs[2], dist, ids, np.random.default_rng(SEED + 1), 3)[2]
    same_t = np.all(other[:, 12:16] == body1[:, :4], axis=1)
    assert same_t.mean() < 0.01  # t is uniform over m = 65536 rows
