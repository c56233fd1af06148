"""`ldpfleet plan --every P --rounds R` and `ldpfleet simulate --rounds N` (recurring campaigns,
spec §3.2, §3.4): per memoised protocol the per-round error and the lifetime ε (the enrolment
charge), `auto`'s choice (core.longitudinal_plan.choose: the smallest per-round MSE whose
lifetime ε fits the budget), and the simulation's per-round MSE beside the analytic variance.
Every option has a default: the commands a newcomer types work as they are."""
import argparse
import json

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.commands.common import period
from ldpfleet.core.longitudinal_plan import PROTOCOLS, plan_recurring, protocol_mechanism


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_every_day_for_a_year_with_defaults(capsys):
    code, out, _ = run(capsys, "plan", "--every", "1d", "--rounds", "365")
    assert code == 0
    assert "365 rounds every 1d (365d)" in out and "k = 100 items" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert set(PROTOCOLS) | {"every-round-oue"} <= set(lines)
    assert "(auto)" in lines["ololoha"] and sum("(auto)" in v for v in lines.values()) == 1
    assert "200 (over)" in lines["l-osue"]
    assert " 6 " in lines["ololoha"] and " 4 " in lines["biloloha"]
    assert "365 (over)" in lines["every-round-oue"]
    assert out.splitlines()[-2].startswith("auto: ololoha")


def test_plan_json_is_the_planner_rows(capsys):
    code, out, _ = run(capsys, "plan", "--every", "12h", "--rounds", "60", "--users", 50000,
                       "--domain", 40, "--epsilon", 3, "--eps1", 1.5, "--json")
    assert code == 0
    got = json.loads(out)
    want = plan_recurring(3000, 1500, 40, 50000, 60)
    assert got["protocols"] == json.loads(json.dumps(want["protocols"]))
    assert got["every_s"] == 43200 and got["auto"] == want["auto"]
    for row in got["protocols"]:
        if row["protocol"] in PROTOCOLS:
            mech = protocol_mechanism(row["protocol"], 3000, 1500, 40)
            assert row["lifetime_eps"] == mech.enrolment_charge_milli(60) / 1000.0
            assert row["per_round_mse"] == pytest.approx(
                float(np.mean(mech.item_variances(50000, np.full(40, 1 / 40)))))
            assert row["report_bytes"] == mech.report_size + 4  # the round header


@pytest.mark.parametrize("extra, chosen", [
    ((), "ololoha"),                               # L-OSUE's 2·100 is over the budget 40
    (("--lifetime-budget", 500), "l-osue"),        # everything fits: the smallest MSE
    (("--rounds", 3), "l-osue"),                   # min(classes, 3)·2 = 6 for everybody
    (("--domain", 300), "ololoha"),                # unary and L-GRR states cannot hold 300
    (("--lifetime-budget", 3), None),              # not even BiLOLOHA's 4
])
def test_auto_chooses_the_smallest_error_within_the_lifetime_budget(capsys, extra, chosen):
    code, out, _ = run(capsys, "plan", "--every", "1d", *extra, "--json")
    assert code == 0
    got = json.loads(out)
    assert got["auto"] == chosen, got["auto_reason"]
    budget = got["lifetime_budget"]
    fits = [r for r in got["protocols"] if r["feasible"] and r["protocol"] in PROTOCOLS
            and r["lifetime_eps"] <= budget]
    if chosen is None:
        assert not fits and "biloloha, 4" in got["auto_reason"]
    else:
        assert min(fits, key=lambda r: r["per_round_mse"])["protocol"] == chosen


def test_plan_refuses_what_does_not_fit(capsys):
    assert run(capsys, "plan", "--every", "1d", "--top", 5)[0] == 2
    code, _, err = run(capsys, "plan", "--every", "1d", "--epsilon", 1, "--eps1", 2)
    assert code == 2 and "eps1_milli" in err
    code, _, err = run(capsys, "plan", "--users", 100)
    assert code == 2 and "--epsilon is required" in err and "--every 1d" in err
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, "plan", "--every", "5s")
    assert exit_info.value.code == 2


@pytest.mark.parametrize("text, seconds", [("1d", 86400), ("90s", 90), ("30m", 1800),
                                           ("12h", 43200), ("1w", 604800), ("3600", 3600)])
def test_period(text, seconds):
    assert period(text) == seconds


@pytest.mark.parametrize("text", ["5s", "9", "2y", "d", "-1d", "1.5h", "", "400w"])
def test_period_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        period(text)


def test_simulate_rounds_prints_each_round_beside_the_variance(capsys):
    code, out, _ = run(capsys, "simulate", "--rounds", 4, "--users", 3000, "--domain", 20,
                       "--json")
    assert code == 0
    got = json.loads(out)
    assert set(got["protocols"]) == set(PROTOCOLS) and got["change_rate"] == 0.1
    for name, s in got["protocols"].items():
        assert len(s["mse_per_round"]) == len(s["variance_per_round"]) == 4
        assert s["changes_per_round"][0] == 0 and all(c > 0 for c in s["changes_per_round"][1:])
        assert s["mse"] == pytest.approx(np.mean(s["mse_per_round"]))
        assert 0.5 < s["mse_over_variance"] < 1.6, (name, s["mse_over_variance"])
        assert s["lifetime_eps"] == min(protocol_mechanism(name, 2000, 1000, 20).classes, 4) * 2.0
    code, text, _ = run(capsys, "simulate", "--rounds", 4, "--users", 1000, "--domain", 10)
    assert code == 0 and "per round, MSE / analytic variance" in text
    assert len([line for line in text.splitlines()
                if line.startswith("  ") and line.strip()[:1].isdigit()]) == 4


def test_simulate_auto_runs_the_planners_choice(capsys):
    code, out, _ = run(capsys, "simulate", "--rounds", 30, "--users", 2000, "--protocol",
                       "auto", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["auto"] == "ololoha" and list(got["protocols"]) == ["ololoha"]


def test_simulate_rounds_change_rate_and_refusals(capsys):
    code, out, _ = run(capsys, "simulate", "--rounds", 3, "--users", 500, "--domain", 10,
                       "--change-rate", 0, "--protocol", "l-grr", "--json")
    assert code == 0 and json.loads(out)["protocols"]["l-grr"]["changes_per_round"] == [0, 0, 0]
    code, _, err = run(capsys, "simulate", "--rounds", 3, "--change-rate", 2)
    assert code == 2 and "change" in err
    code, _, err = run(capsys, "simulate")
    assert code == 2 and "--rounds" in err
    code, _, err = run(capsys, "simulate", "--protocol", "biloloha", "--epsilon", 1)
    assert code == 2 and "--rounds" in err
    code, _, err = run(capsys, "simulate", "--rounds", 3, "--mechanism", "grr")
    assert code == 2
