"""Creating a recurring campaign (protocol_spec/v2 §3.4, §5.4 `schedule`): `campaign create
--every P [--rounds N | --until T] [--start T] [--eps1 E]` writes a config that check_config
accepts with the right R; bad options are refused before anything is stored or published, with
the option's field (exit 2); `--protocol auto --every` takes the planner's memoised mechanism.
(The CLI run against a broker: tests/integration/test_recurring_cli.py.)"""
import calendar

import pytest

from ldpfleet import cli
from ldpfleet.core import config as cfgmod
from ldpfleet.core import schedule
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.signing import write_signing_key
from ldpfleet.service.campaigns.manage import Issuance, build_config
from ldpfleet.service.campaigns.recurring import (Recurrence, choose_memoised, parse_period,
                                                  parse_time)

NOW = 1_800_000_000


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("10m", 600), ("1h", 3600), ("1d", 86400),
                                          ("45", 45), ("365d", 31536000), (" 2h ", 7200)])
def test_periods(text, seconds):
    assert parse_period(text) == seconds


@pytest.mark.parametrize("bad", ["", "1y", "-5", "1.5h", "h", "9s", "9", "366d", "1d1h", None])
def test_bad_periods_name_every(bad):
    with pytest.raises(ConfigError) as err:
        parse_period(bad)
    assert err.value.field == "every"


def test_times():
    assert parse_time("1800000000", "until") == 1800000000
    assert parse_time("2027-01-15", "until") == calendar.timegm((2027, 1, 15, 0, 0, 0))
    assert parse_time("2027-01-15T00:00:00Z", "until") == parse_time("2027-01-15", "until")
    assert parse_time("2027-01-15T01:00:00+01:00", "start") == parse_time("2027-01-15", "until")
    for bad in ("tomorrow", "2027-13-01", "15/01/2027", ""):
        with pytest.raises(ConfigError) as err:
            parse_time(bad, "until")
        assert err.value.field == "until"


def _config(recurrence, mechanism="loloha", params=None):
    doc = build_config("fw", mechanism, 2.0, {"type": "int", "size": 20},
                       params=params or {}, issue=Issuance(recurrence=recurrence))
    return doc


def test_rounds_set_the_end(monkeypatch):
    monkeypatch.setattr("time.time", lambda: NOW)
    doc = _config(Recurrence.from_options("1h", rounds=24))
    assert doc["schedule"] == {"start": NOW, "every_s": 3600, "rounds": 24}
    assert doc["not_after"] == NOW + 24 * 3600 and doc["not_before"] == NOW - 60
    assert cfgmod.check_config(doc, now=NOW) and schedule.check_schedule(doc) == 24
    assert doc["phases"][0]["params"]["eps1_milli"] == 1000  # default eps_inf / 2
    # --rounds sets the end, whatever --valid-days (or ldpfleet.toml's valid-days) says
    again = build_config("fw", "loloha", 2.0, {"type": "int", "size": 20}, params={},
                         issue=Issuance(valid_days=2, recurrence=Recurrence.from_options(
                             "1h", rounds=24)))
    assert again["not_after"] == NOW + 24 * 3600


def test_until_and_start(monkeypatch):
    monkeypatch.setattr("time.time", lambda: NOW)
    doc = _config(Recurrence.from_options("1d", until=str(NOW + 10 * 86400 + 5),
                                          start=str(NOW + 600)))
    assert doc["schedule"] == {"start": NOW + 600, "every_s": 86400}
    assert doc["not_after"] == NOW + 10 * 86400 + 5
    assert schedule.check_schedule(doc) == 10  # ceil((T - start) / P)
    # without --rounds/--until: the default validity window
    doc = _config(Recurrence.from_options("1d"))
    assert doc["not_after"] == NOW + 30 * 86400 and schedule.round_count(doc) == 30
    # a start already past (its first round still open) moves not_before back
    doc = _config(Recurrence.from_options("10m", rounds=3, start=str(NOW - 300)))
    assert doc["not_before"] == NOW - 300 and schedule.round_at(doc, NOW) == 1


@pytest.mark.parametrize("opts,field", [
    (dict(every="1h", rounds=0), "rounds"),
    (dict(every="1h", rounds=100001), "rounds"),
    (dict(every="1h", rounds=3, until="1900000000"), "rounds"),
    (dict(every="1h", until="not-a-date"), "until"),
    (dict(every="1h", until=str(NOW - 10)), "until"),
    (dict(every="1h", start="yesterday"), "start"),
    (dict(every="1h", start=str(NOW - 7200), rounds=5), "start"),
    (dict(every="5s", rounds=3), "every"),
])
def test_bad_schedule_options(monkeypatch, opts, field):
    monkeypatch.setattr("time.time", lambda: NOW)
    with pytest.raises(ConfigError) as err:
        _config(Recurrence.from_options(**opts))
    assert err.value.field == field, str(err.value)


def test_recurring_needs_a_memoised_mechanism_and_eps1_below_eps(monkeypatch):
    monkeypatch.setattr("time.time", lambda: NOW)
    with pytest.raises(ConfigError) as err:
        _config(Recurrence.from_options("1h", rounds=3), mechanism="olh")
    assert err.value.field == "phases.mechanism"
    with pytest.raises(ConfigError) as err:
        _config(Recurrence.from_options("1h", rounds=3), params={"eps1_milli": 2000})
    assert err.value.field == "params.eps1_milli"


def test_auto_chooses_a_memoised_mechanism_by_the_planner():
    """`campaign create --protocol auto --every` takes plan --every's `(auto)` choice: the
    smallest per-round MSE among the protocols whose lifetime charge fits the budget."""
    from ldpfleet.core import longitudinal_plan
    small = choose_memoised(1.0, {"type": "int", "size": 4})
    large = choose_memoised(2.0, {"type": "int", "size": 1000}, eps1="0.5")
    assert small["mechanism"] in schedule.MEMOISED and large["mechanism"] == "loloha"
    assert large["params"]["eps1_milli"] == 500
    rows = {r["protocol"]: r for r in large["plan"]["protocols"]}
    assert not rows["l-osue"]["feasible"] and not rows["l-grr"]["feasible"]  # n too large
    for choice in (small, large):
        plan = choice["plan"]
        assert choice["protocol"] == plan["auto"]
        assert plan["auto"] == longitudinal_plan.choose(plan["protocols"])["chosen"]
        mech, fixed = longitudinal_plan.PROTOCOLS[choice["protocol"]]
        assert choice["mechanism"] == mech and fixed.items() <= choice["params"].items()
    # a small lifetime budget rules out the protocols whose charge exceeds it
    tight = choose_memoised(2.0, {"type": "int", "size": 50}, rounds=365, lifetime_budget=4.0)
    assert tight["protocol"] == "biloloha" and tight["params"]["g"] == 2
    with pytest.raises(ConfigError) as err:
        choose_memoised(2.0, {"type": "int", "size": 50}, rounds=365, lifetime_budget=1.0)
    assert err.value.field == "protocol"
    # a numeric domain: every party refuses a memoised mechanism on it (lbitmean's counter is an
    # int domain's), so auto refuses it too rather than choose a config check_config refuses
    numeric = {"type": "range", "lo": 0, "hi": 100, "resolution": 1, "decimals": 0}
    with pytest.raises(ConfigError) as err:
        choose_memoised(2.0, numeric)
    assert err.value.field == "domain"


# --- the CLI refuses bad input before it touches the state or a broker ----------------------

@pytest.fixture
def create(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LDPFLEET_CONFIG", raising=False)
    key = str(tmp_path / "k.key")
    write_signing_key(key)

    def run(*extra, mechanism=("--mechanism", "loloha")):
        capsys.readouterr()
        code = cli.main(["campaign", "create", "--broker", "mqtt://127.0.0.1:9", "--state",
                         str(tmp_path / "s.db"), "--signing-key", key, "--name", "fw",
                         "--epsilon", "2", "--domain", "16", *mechanism, *extra])
        return code, capsys.readouterr().err
    return run


@pytest.mark.parametrize("extra,field", [
    (["--every", "1y"], "every"),
    (["--every", "3s", "--rounds", "2"], "every"),
    (["--every", "1h", "--rounds", "0"], "rounds"),
    (["--every", "1h", "--rounds", "2", "--until", "2099-01-01"], "rounds"),
    (["--every", "1h", "--until", "soon"], "until"),
    (["--every", "1h", "--until", "2001-01-01"], "until"),
    (["--rounds", "3"], "rounds"),
    (["--until", "2099-01-01"], "until"),
    (["--eps1", "1"], "eps1"),
    (["--every", "1h", "--rounds", "3", "--eps1", "abc"], "eps1"),
    (["--every", "1h", "--rounds", "3", "--eps1", "2"], "params.eps1_milli"),
    (["--every", "1h", "--rounds", "3", "--eps1", "1", "--param", "eps1_milli=900"], "eps1"),
])
def test_cli_refuses_bad_schedule_options(create, extra, field):
    code, err = create(*extra)
    assert code == 2 and (" %s:" % field) in err, err


def test_cli_refuses_one_shot_mechanisms_and_protocols_with_every(create):
    code, err = create("--every", "1h", "--rounds", "3", mechanism=("--mechanism", "olh"))
    assert code == 2 and "phases.mechanism:" in err, err
    code, err = create("--every", "1h", "--rounds", "3", mechanism=("--protocol", "svim"))
    assert code == 2 and "protocol:" in err, err
    code, err = create(mechanism=("--mechanism", "loloha"))  # memoised without --every
    assert code == 2 and "phases.mechanism:" in err, err


def test_auto_rates_the_charge_over_the_configs_own_rounds():
    """Without --rounds/--until the config's R comes from its validity window (30 days by
    default): `auto` rates each protocol's lifetime charge over that R, not over unbounded
    rounds — L-OSUE over 51 outputs costs 102 nats unbounded but 3 rounds of 10 days cost 6."""
    import argparse
    from ldpfleet.commands.campaign_recurring import auto_mechanism
    args = argparse.Namespace(protocol="auto", param=None, epsilon="2", domain="50", eps1=None,
                              fleet_size=None, valid_days=None)
    mech, params = auto_mechanism(args, [], Recurrence.from_options("10d"))
    assert mech == "losue", (mech, params)
    unbounded = choose_memoised(2.0, {"type": "int", "size": 50})
    assert unbounded["mechanism"] != "losue"
