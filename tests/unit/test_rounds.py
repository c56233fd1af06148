"""The read side of recurring campaigns (service/campaigns/rounds.py, protocol_spec/v2 §3.4
"Estimation"): `estimate --round R` is the one-shot estimate of round R's sketch alone (stored
under phase = R, partials of several workers merged), its intervals cover the devices' true
fractions at their level over seeded fleets, the default round is the latest with reports,
`estimate --series` lists every round with the same numbers and noise flags as the rounds'
own estimates, and wrong rounds or one-shot campaigns are refused naming the field.

Rounds are written into a SQLite state directly (tests/support/recurring_store.py: the
longitudinal mechanisms' batch faces through the C kernels, from seeded numpy Generators, as
the ingest folds them), so no broker runs here."""
import json
import math

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.core import config as cfgmod
from ldpfleet.core.errors import ConfigError
from ldpfleet.service import create_campaign
from ldpfleet.service.campaigns.estimates import EstimateQuery, item_stddevs, two_sided_z
from ldpfleet.service.campaigns.query import estimate
from ldpfleet.service.campaigns.rounds import compute_series
from support.recurring_store import (EVERY_S, START, Store, evolving_fleet, new_state, put_round,
                                     recurring_campaign)

P8 = np.array([0.35, 0.25, 0.15, 0.1, 0.05, 0.05, 0.03, 0.02])
NOW = START + 3 * EVERY_S + 7  # round 4 is open


def keys_of(camp):
    return cfgmod.domain_keys(camp.config, other=cfgmod.with_other(camp.mechanism_name(1)))


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """`fw`: loloha over 8 items, rounds 1-3 with reports (round 2 in two workers' partials),
    round 4 open without any; `cnt`: lbitmean rounds 1-2; `oneshot`: an OLH campaign."""
    tmp = tmp_path_factory.mktemp("rounds")
    url, key = new_state(tmp)
    rng = np.random.default_rng(20261127)
    sketches = {}
    with Store(url) as store:
        camp = recurring_campaign(store, key, "fw", "loloha", 8)
        fleet = evolving_fleet(camp.mechanism(1), 4000, 3, P8, 0.3, rng)
        for r in (1, 2, 3):
            sketches[r] = fleet.round_sketch(r, rng)
            if r == 2:  # two workers' partials of the same round, merged by the reader
                half = camp.mechanism(1).new_sketch()
                half.update(camp.mechanism(1).report_batch(fleet.values[1][:1500],
                                                           fleet.states[:1500], rng))
                rest = camp.mechanism(1).new_sketch()
                rest.update(camp.mechanism(1).report_batch(fleet.values[1][1500:],
                                                           fleet.states[1500:], rng))
                put_round(store, "fw", 2, half, worker="w1")
                put_round(store, "fw", 2, rest, worker="w2")
                merged = camp.mechanism(1).new_sketch()
                merged.merge(half)
                merged.merge(rest)
                sketches[2] = merged
            else:
                put_round(store, "fw", r, sketches[r])
        cnt = recurring_campaign(store, key, "cnt", "lbitmean", 21, params={"s": 4})
        counters = evolving_fleet(cnt.mechanism(1), 3000, 2, np.full(21, 1 / 21), 0.5, rng)
        for r in (1, 2):
            put_round(store, "cnt", r, counters.round_sketch(r, rng))
        create_campaign(store, None, key, "oneshot", "olh", 2.0, "0-7")
    return {"url": url, "sketches": sketches, "fleet": fleet, "counters": counters}


def test_a_round_is_the_estimate_of_its_own_sketch(state):
    with Store(state["url"]) as store:
        camp = store.require_campaign("fw")
        keys = keys_of(camp)
        mech = camp.mechanism(1)
        z = two_sided_z(0.95)
        for r in (1, 2, 3):
            table = estimate(store, "fw", EstimateQuery(round=r), now=NOW)
            sketch = state["sketches"][r]
            assert table.n == sketch.n == 4000 and table.round["round"] == r
            assert table.round["opens"] == START + (r - 1) * EVERY_S
            assert table.round["closes"] == START + r * EVERY_S
            assert table.round["round_chosen"] is None
            freq = np.asarray(sketch.estimate(keys), np.float64) / sketch.n
            sd = item_stddevs(mech, freq, sketch.n)
            got = np.array([row["frequency"] for row in table.rows])
            assert got == pytest.approx(freq, rel=1e-12, abs=1e-12)
            assert [row["ci_low"] for row in table.rows] == pytest.approx(freq - z * sd)
            assert [row["ci_high"] for row in table.rows] == pytest.approx(freq + z * sd)
        # the rounds differ (fresh instantaneous noise, values changed): not one sketch thrice
        one = estimate(store, "fw", EstimateQuery(round=1), now=NOW)
        three = estimate(store, "fw", EstimateQuery(round=3), now=NOW)
        assert [r["estimate"] for r in one.rows] != [r["estimate"] for r in three.rows]


def test_default_round_is_the_latest_with_reports_and_says_so(state):
    with Store(state["url"]) as store:
        table = estimate(store, "fw", EstimateQuery(top=3), now=NOW)
        assert table.round["round"] == 3 and "latest round with reports" in table.round["round_chosen"]
        text = table.to_text()
        assert "round 3 of 10" in text and "latest round with reports" in text
        doc = table.to_json()
        assert doc["round"] == 3 and doc["rounds"] == 10 and len(doc["items"]) == 3
        # round 4 is open but empty: asked for, it has no estimate yet
        empty = estimate(store, "fw", EstimateQuery(round=4), now=NOW)
        assert empty.n == 0 and "no estimate yet" in empty.to_text()


def test_a_round_not_yet_open_is_not_the_default(tmp_path):
    """The ingest accepts round r + 1 while round r is open (clock skew, spec §3.4): one
    skewed device's early report must not make that round, not open yet, the one `estimate`
    and the series pick by default over the open round's thousands of reports."""
    url, key = new_state(tmp_path)
    rng = np.random.default_rng(7)
    with Store(url) as store:
        camp = recurring_campaign(store, key, "skew", "loloha", 8)
        fleet = evolving_fleet(camp.mechanism(1), 2000, 2, P8, 0.3, rng)
        put_round(store, "skew", 1, fleet.round_sketch(1, rng))
        early = camp.mechanism(1).new_sketch()
        early.update(camp.mechanism(1).report_batch(fleet.values[1][:1], fleet.states[:1], rng))
        put_round(store, "skew", 2, early)
        now = START + 30  # round 1 open
        table = estimate(store, "skew", EstimateQuery(top=3), now=now)
        assert table.round["round"] == 1 and table.n == 2000
        assert compute_series(store, "skew", now=now).items_from_round == 1
        # once round 2 has opened, it is the latest round with reports
        assert estimate(store, "skew", EstimateQuery(top=3), now=START + EVERY_S).round["round"] == 2


def test_wrong_rounds_and_one_shot_campaigns_name_the_field(state):
    with Store(state["url"]) as store:
        for bad in (0, 11, -1):
            with pytest.raises(ConfigError) as info:
                estimate(store, "fw", EstimateQuery(round=bad), now=NOW)
            assert info.value.field == "round", bad
        with pytest.raises(ConfigError) as info:
            estimate(store, "oneshot", EstimateQuery(round=1), now=NOW)
        assert info.value.field == "round" and "not recurring" in str(info.value)
        with pytest.raises(ConfigError) as info:
            compute_series(store, "oneshot", now=NOW)
        assert info.value.field == "schedule"
        with pytest.raises(ConfigError) as info:
            estimate(store, "fw", EstimateQuery(phase=2), now=NOW)
        assert info.value.field == "phase"
        with pytest.raises(ConfigError) as info:
            compute_series(store, "fw", last=0, now=NOW)
        assert info.value.field == "last"
        # a one-shot campaign's estimate is unchanged (no round in its answer)
        assert "round" not in estimate(store, "oneshot", EstimateQuery()).to_json()


def test_series_lists_each_rounds_own_estimate(state):
    with Store(state["url"]) as store:
        series = compute_series(store, "fw", top=3, now=NOW)
        doc = series.to_json()
        assert doc["current_round"] == 4 and doc["rounds"] == 10 and doc["every_s"] == EVERY_S
        assert [e["round"] for e in doc["series"]] == [1, 2, 3, 4]
        assert [e["n"] for e in doc["series"]] == [4000, 4000, 4000, 0]
        assert doc["series"][3]["estimates"] == []
        latest = estimate(store, "fw", EstimateQuery(round=3, top=3), now=NOW)
        assert doc["items"] == [row["item"] for row in latest.rows]
        assert doc["items_from_round"] == 3
        for entry in doc["series"][:3]:
            table = estimate(store, "fw", EstimateQuery(round=entry["round"]), now=NOW)
            rows = {row["item"]: row for row in table.rows}
            assert entry["discoveries"] == table.significance.discoveries
            assert [e["item"] for e in entry["estimates"]] == doc["items"]
            for e in entry["estimates"]:
                row = rows[e["item"]]
                assert (e["estimate"], e["frequency"], e["low"], e["high"], e["noise"]) == (
                    row["estimate"], row["frequency"], row["ci_low"], row["ci_high"], row["noise"])
        # the CSV holds the same numbers, one row per (round, item)
        lines = series.to_csv().splitlines()
        assert lines[0] == "round,opens,closes,n,item,estimate,frequency,low,high,noise"
        assert len(lines) == 1 + 3 * 3
        # the text table: a line per round, the items as columns
        text = series.to_text()
        assert "top 3 of round 3" in text and len(text.splitlines()) == 3 + 4
        # --last: the latest rounds only
        assert [e["round"] for e in compute_series(store, "fw", last=2, now=NOW).series] == [3, 4]


def test_series_of_named_items_tests_those_items(state):
    """Items named before looking are the family (as `estimate --items`): each round tests
    exactly them."""
    with Store(state["url"]) as store:
        series = compute_series(store, "fw", items=["7", "0"], now=NOW)
        assert series.items == [7, 0] and series.items_from_round is None
        for entry in series.series[:3]:
            table = estimate(store, "fw", EstimateQuery(round=entry["round"], items=["7", "0"]),
                             now=NOW)
            assert table.significance.tested == 2
            assert [(e["item"], e["frequency"], e["noise"]) for e in entry["estimates"]] == [
                (row["item"], row["frequency"], row["noise"]) for row in table.rows]
        with pytest.raises(ConfigError) as info:
            compute_series(store, "fw", items=["99"], now=NOW)
        assert info.value.field == "items"


def test_lbitmean_rounds_are_means_with_intervals(state):
    with Store(state["url"]) as store:
        out = estimate(store, "cnt", EstimateQuery(), now=NOW)
        assert out.round["round"] == 2 and out.n == 3000
        doc = out.to_json()
        [mean] = doc["numeric"]["means"]
        truth = float(np.mean(state["counters"].values[1]))
        assert mean["ci_low"] < truth < mean["ci_high"]
        with pytest.raises(ConfigError) as info:
            estimate(store, "cnt", EstimateQuery(top=3), now=NOW)
        assert info.value.field == "top"
        series = compute_series(store, "cnt", now=NOW).to_json()
        assert [e["n"] for e in series["series"]] == [3000, 3000, 0, 0]
        assert series["series"][1]["mean"]["mean"] == pytest.approx(mean["mean"])
        assert series["series"][3]["mean"] is None and series["items"] is None


def test_cli_round_and_series(state, capsys):
    url = state["url"]
    capsys.readouterr()
    assert cli.main(["estimate", "fw", "--state", url, "--round", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["round"] == 2 and doc["n"] == 4000
    assert cli.main(["estimate", "fw", "--state", url, "--series", "--top", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["items"]) == 2 and doc["series"][0]["round"] == 1
    assert cli.main(["estimate", "fw", "--state", url, "--series", "--csv"]) == 0
    assert capsys.readouterr().out.startswith("round,opens,closes,n,item,")
    assert cli.main(["estimate", "fw", "--state", url, "--round", "11"]) == 2
    assert "round" in capsys.readouterr().err
    assert cli.main(["estimate", "fw", "--state", url, "--series", "--round", "2"]) == 2
    assert cli.main(["estimate", "oneshot", "--state", url, "--series"]) == 2
    assert "schedule" in capsys.readouterr().err


@pytest.mark.parametrize("mechanism,reps", [("loloha", 120), ("lgrr", 120), ("losue", 60)])
def test_round_intervals_cover_the_truth_at_their_level(tmp_path, mechanism, reps):
    """Seeded fleets (1500 devices, 8 items, values changing between rounds): round 2's 95 %
    intervals of the 9 estimated items (⊥ included, truth 0) cover the devices' true round-2
    fractions at a rate within 3.5 standard errors of 95 % (the items of one fleet are
    counted as one unit: their coverage is not independent)."""
    url, key = new_state(tmp_path)
    rng = np.random.default_rng({"loloha": 11, "lgrr": 12, "losue": 13}[mechanism])
    covered = []
    with Store(url) as store:
        camp = recurring_campaign(store, key, "cov", mechanism, 8)
        keys_n = len(keys_of(camp))
        for _ in range(reps):
            fleet = evolving_fleet(camp.mechanism(1), 1500, 2, P8, 0.3, rng)
            put_round(store, "cov", 2, fleet.round_sketch(2, rng))
            table = estimate(store, "cov", EstimateQuery(round=2), now=NOW)
            truth = np.bincount(fleet.values[1], minlength=keys_n)[:keys_n] / 1500
            covered.append(np.mean([row["ci_low"] <= t <= row["ci_high"]
                                    for row, t in zip(table.rows, truth)]))
    rate = float(np.mean(covered))
    se = float(np.std(covered, ddof=1)) / math.sqrt(reps)
    assert abs(rate - 0.95) <= 3.5 * max(se, 0.005), (rate, se)


def test_lbitmean_round_intervals_cover_the_mean(tmp_path):
    """The mean's interval (binomial variance at the round's share of 1-bits: an upper bound
    of the devices' sum of p_i(1 - p_i)) covers the devices' true mean counter at least at its
    level over seeded fleets, and is not loose beyond it (coverage below 99.5 %)."""
    url, key = new_state(tmp_path)
    rng = np.random.default_rng(31)
    probs = np.linspace(3, 1, 41) / np.linspace(3, 1, 41).sum()
    hits = []
    with Store(url) as store:
        camp = recurring_campaign(store, key, "m", "lbitmean", 41, params={"s": 5})
        for _ in range(300):
            fleet = evolving_fleet(camp.mechanism(1), 1000, 2, probs, 0.5, rng)
            put_round(store, "m", 2, fleet.round_sketch(2, rng))
            [mean] = estimate(store, "m", EstimateQuery(round=2), now=NOW).to_json()[
                "numeric"]["means"]
            hits.append(mean["ci_low"] <= float(np.mean(fleet.values[1])) <= mean["ci_high"])
    rate = float(np.mean(hits))
    se = math.sqrt(0.95 * 0.05 / len(hits))
    assert 0.95 - 3.5 * se <= rate <= 0.995, rate


def test_series_before_any_report_and_options_a_mean_has_not(state, tmp_path):
    url, key = new_state(tmp_path)
    with Store(url) as store:
        recurring_campaign(store, key, "new", "lgrr", 4)
        early = compute_series(store, "new", now=START - 5)
        assert early.series == [] and early.items == [] and early.current_round is None
        assert "no round has reports yet" in early.to_text()
        opened = compute_series(store, "new", now=NOW)
        assert [(e["round"], e["n"], e["estimates"]) for e in opened.series] == [
            (r, 0, []) for r in (1, 2, 3, 4)]
        assert "no round has reports yet" in opened.to_text()
        assert estimate(store, "new", EstimateQuery(), now=NOW).round["round"] == 4
    with Store(state["url"]) as store:
        for flag, kw in (("top", {"top": 2}), ("items", {"items": ["3"]})):
            with pytest.raises(ConfigError) as info:
                compute_series(store, "cnt", now=NOW, **kw)
            assert info.value.field == flag
