"""The simulated fleet of a recurring campaign (loadgen/recurring.py, spec §3.4): its reports are
what the aggregator parses (core.schedule.split_round, then the mechanism's checks), each device
enrols once and reports from its memoised permanent response, nonces are fresh per (device,
round), and the per-round change rate is realised within its binomial bounds."""
import time

import numpy as np
import pytest

from ldpfleet.core import config as cc
from ldpfleet.core import protocol
from ldpfleet.core import schedule as sch
from ldpfleet.core.errors import ConfigError
from ldpfleet.loadgen.campaign import CampaignView, phase_mechanism
from ldpfleet.loadgen.items import item_distribution
from ldpfleet.loadgen.recurring import RecurringDevices, _next_round

NOW = int(time.time())
MEMOISED = [("losue", {"eps1_milli": 1000}, {"type": "int", "size": 20}),
            ("lsue", {"eps1_milli": 1000}, {"type": "str", "items": ["a", "b", "c"]}),
            ("lgrr", {"eps1_milli": 1000}, {"type": "int", "size": 10}),
            ("loloha", {"eps1_milli": 1000, "g": 2}, {"type": "int", "size": 100}),
            ("loloha", {"eps1_milli": 1000, "g": 3}, {"type": "int", "size": 100}),
            ("lbitmean", {"eps1_milli": 1000, "s": 4}, {"type": "int", "size": 50})]


def recurring_config(mechanism, params, domain, start=NOW, every_s=60, rounds=30,
                     not_after=None):
    return cc.make_config("rec", [{"phase": 1, "mechanism": mechanism, "eps_milli": 2000,
                                   "params": params}], domain, salt=7,
                          not_before=NOW - 60, not_after=not_after or NOW + 86400,
                          recurring={"start": start, "every_s": every_s, "rounds": rounds})


def fleet_of(doc, n, change_rate, seed, dist=None):
    view = CampaignView(doc, 1)
    mech = phase_mechanism(view)
    return mech, RecurringDevices(mech, item_distribution(dist, doc), n, change_rate,
                                  np.random.default_rng(seed))


@pytest.mark.parametrize("mechanism,params,domain", MEMOISED,
                         ids=[m + str(p.get("g", "")) for m, p, _ in MEMOISED])
def test_round_reports_parse_on_the_aggregator_side(mechanism, params, domain):
    doc = recurring_config(mechanism, params, domain)
    mech, fleet = fleet_of(doc, 500, 0.2, seed=11)
    nonces = []
    for r in (1, 2, 7):
        fleet.advance()
        reports = fleet.reports(r)
        assert reports.shape == (500, sch.ROUND_HEADER + mech.body_size)
        plain = []
        for row in reports:
            one_shot, got_round = sch.split_round(bytes(row))
            assert got_round == r and sch.with_round(one_shot, r) == bytes(row)
            assert protocol.parse_header(one_shot)[3] == 0  # the one-shot form: flags 0
            plain.append(np.frombuffer(one_shot, np.uint8))
        hdr = reports[:, :12]
        assert (hdr[:, 0] == protocol.PROTOCOL_VERSION).all()
        assert (hdr[:, 1] == protocol.MECHANISM_IDS[mechanism]).all()
        assert (hdr[:, 2] == 1).all() and (hdr[:, 3] == sch.ROUND_FLAG).all()
        assert (hdr[:, 4:8].copy().view("<u4").ravel() == doc["campaign_id"]).all()
        mech.check(np.array(plain))  # ReportFormatError on any invalid body or header
        nonces.append(hdr[:, 8:12].copy().view("<u4").ravel())
    # one fresh nonce per (device, round): no device repeats one across rounds, and the
    # nonces of a round are not a counter (the one-shot fleet's seq) but spread over 2^32
    assert all((a != b).all() for a, b in ((nonces[0], nonces[1]), (nonces[1], nonces[2])))
    assert len(np.unique(nonces[0])) == 500 and nonces[0].max() > 1 << 30


def _mode(column):
    return np.bincount(column).argmax()


def test_a_device_whose_value_does_not_change_keeps_its_permanent_response():
    """L-GRR: every report of a device with a constant value is the instantaneous GRR of
    state[x], drawn once: over 80 rounds the plurality of its reports is state[x] for every
    device (its own permanent response, not the true value, which it equals only with the
    permanent keep probability). The state is the enrolment's, never redrawn."""
    doc = recurring_config("lgrr", {"eps1_milli": 1000}, {"type": "int", "size": 4})
    mech, fleet = fleet_of(doc, 400, 0.0, seed=3, dist="uniform")
    ys = []
    for r in range(1, 81):
        fleet.advance()
        ys.append(fleet.reports(r)[:, 16:20].copy().view("<u4").ravel())
        if r == 1:
            states = fleet.states.copy()
    assert np.array_equal(states, fleet.states)
    ys = np.array(ys).T  # devices x rounds
    x = fleet.values.astype(np.int64)
    permanent = fleet.states[np.arange(400), x]
    modes = np.array([_mode(row) for row in ys])
    assert (modes == permanent).all()
    # the permanent response is not the value for a good share of devices (keep prob < 1):
    # so the test above could fail for a fleet that redrew its permanent response per round
    lost = np.mean(permanent != x)
    keep = protocol.t_grr(2000, mech.domain_size) / 2 ** 32
    assert abs(lost - (1 - keep)) < 5 * np.sqrt(keep * (1 - keep) / 400)


def test_unary_rows_are_memoised_per_value():
    """L-OSUE: a constant-valued device's reports are row x of its state with every bit
    flipped with probability t_flip/W < 1/2: the per-bit majority over 60 rounds is the row."""
    doc = recurring_config("losue", {"eps1_milli": 1000}, {"type": "int", "size": 15})
    mech, fleet = fleet_of(doc, 200, 0.0, seed=5, dist="uniform")
    n = mech.domain_size
    ones = np.zeros((200, n))
    for r in range(1, 61):
        fleet.advance()
        body = fleet.reports(r)[:, 16:]
        ones += np.unpackbits(body, axis=1, bitorder="little")[:, :n]
    rows = fleet.states.reshape(200, n, mech.row_bytes)[np.arange(200), fleet.values]
    expected = np.unpackbits(rows, axis=1, bitorder="little")[:, :n]
    assert np.array_equal(ones > 30, expected.astype(bool))


def test_change_rate_is_realised_within_binomial_bounds():
    """Each round every device draws a new value with probability p (eval.longitudinal_sim's
    evolve); with a fixed seed the number that drew is within 5 sd of np, and those whose
    value actually changed are within 5 sd of np(1 - sum f^2) (a draw may give the old
    value back). The true counts are the devices' values."""
    doc = recurring_config("loloha", {"eps1_milli": 1000, "g": 2}, {"type": "int", "size": 20})
    n, p = 20000, 0.1
    _mech, fleet = fleet_of(doc, n, p, seed=2026)
    probs = fleet.dist.probs
    stay = float(np.sum(probs ** 2))
    fleet.advance()
    assert fleet.redrawn.size == n
    for r in range(2, 8):
        before = fleet.values.copy()
        fleet.advance()
        sd = np.sqrt(n * p * (1 - p))
        assert abs(fleet.redrawn.size - n * p) < 5 * sd
        q = p * (1 - stay)
        assert abs(fleet.changed - n * q) < 5 * np.sqrt(n * q * (1 - q))
        moved = np.flatnonzero(before != fleet.values)
        assert fleet.changed == moved.size and set(moved) <= set(fleet.redrawn.tolist())
        counts = fleet.true_counts()
        assert sum(counts.values()) == n
        assert counts == {int(i): int(c) for i, c in zip(*np.unique(fleet.values,
                                                                     return_counts=True))}


def test_change_rate_zero_and_one():
    doc = recurring_config("lgrr", {"eps1_milli": 1000}, {"type": "int", "size": 10})
    _m, still = fleet_of(doc, 1000, 0.0, seed=1)
    _m, always = fleet_of(doc, 1000, 1.0, seed=1)
    first = still.advance().copy()
    always.advance()
    for _ in range(3):
        assert np.array_equal(still.advance(), first) and still.redrawn.size == 0
        always.advance()
        assert always.redrawn.size == 1000
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError) as err:
            fleet_of(doc, 10, bad, seed=1)
        assert err.value.field == "change_rate"


def test_next_round_follows_the_schedule():
    doc = recurring_config("lgrr", {"eps1_milli": 1000}, {"type": "int", "size": 10},
                           start=NOW + 100, every_s=60, rounds=3, not_after=NOW + 1000)
    assert _next_round(doc, None, NOW) == 1  # before the start: wait for round 1
    assert _next_round(doc, None, NOW + 100) == 1
    assert _next_round(doc, None, NOW + 165) == 2  # joins the round open now
    assert _next_round(doc, 2, NOW + 170) == 3  # round 2 done: the next to open
    assert _next_round(doc, 1, NOW + 230) == 3  # late: round 2 is over, 3 open
    assert _next_round(doc, 3, NOW + 230) is None  # the last round ran
    assert _next_round(doc, None, NOW + 300) is None  # after round 3 closed


@pytest.mark.parametrize("mechanism", ["loloha", "lgrr", "losue", "lsue"])
def test_round_estimates_match_the_true_counts_over_a_string_domain(mechanism):
    """The reports carry the devices' items (item keys of a string domain, as devices hash
    them): each round's estimate, from the reports as the aggregator reads them, is within
    5 sd of the fleet's true counts for every item."""
    items = ["fw-%d" % i for i in range(12)]
    doc = recurring_config(mechanism, {"eps1_milli": 1000}, {"type": "str", "items": items})
    mech, fleet = fleet_of(doc, 20000, 0.3, seed=8)
    for r in (1, 2):
        fleet.advance()
        plain = np.array([np.frombuffer(sch.split_round(bytes(row))[0], np.uint8)
                          for row in fleet.reports(r)])
        sketch = mech.new_sketch()
        sketch.update(plain)
        truth = fleet.true_counts()
        counts = np.array([truth.get(i, 0) for i in items])
        freqs = np.append(counts / 20000, np.zeros(mech.domain_size - len(items)))
        sd = np.sqrt(mech.item_variances(20000, freqs))[:len(items)] * 20000
        assert np.all(np.abs(np.asarray(sketch.estimate(items)) - counts) < 5 * sd)
