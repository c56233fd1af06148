"""Recurring campaigns on the aggregator (protocol_spec/v2 §3.4, §5.4 `schedule`): the shared
vectors (vectors/recurring.json: configs, rounds, round-header reports) against the aggregator's
rules, and the header rule's round checks (flags per campaign kind, round 1..min(R, open + 1),
in the spec's checking order)."""
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from ldpfleet.core import config as cfgmod
from ldpfleet.core import protocol, schedule
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import ERROR_FIELDS

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "protocol_spec" / "v2" / "vectors"
                      / "recurring.json").read_text())


# --- the shared vectors --------------------------------------------------------------------

@pytest.mark.parametrize("case", VECTORS["configs"], ids=lambda c: c["name"])
def test_config_vectors(case):
    if case["error"] is None:
        assert cfgmod.check_config(json.loads(json.dumps(case["body"])), now=case["now"])
    else:
        with pytest.raises(ConfigError) as err:
            cfgmod.check_config(json.loads(json.dumps(case["body"])), now=case["now"])
        assert err.value.field == case["error"], str(err.value)


def test_round_vectors():
    assert len(VECTORS["rounds"]) > 10
    for case in VECTORS["rounds"]:
        doc = {"schedule": case["schedule"], "not_after": case["not_after"]}
        assert schedule.round_count(doc) == case["rounds"], case
        assert schedule.round_at(doc, case["t"]) == case["round"], case
        opened = schedule.rounds_opened(doc, case["t"])
        if case["round"] is not None:  # the open round is the last opened
            assert opened == case["round"], case
            assert schedule.highest_round(doc, case["t"]) == min(case["round"] + 1, case["rounds"])
        else:  # before the start nothing opened; after the last round every round did
            assert opened in (0, case["rounds"]), case


def test_round_vectors_follow_the_spec_definition():
    """The `rounds` vectors are written by core.schedule itself; here they are held to spec
    §3.4's words, checked round by round without its formulas: R = `rounds`, else the least
    R with start + R·every_s >= not_after; round r is open at t iff 1 <= r <= R and
    start + (r-1)·every_s <= t < min(start + r·every_s, not_after)."""
    for case in VECTORS["rounds"]:
        s, na, t = case["schedule"], case["not_after"], case["t"]
        rounds = s.get("rounds")
        if rounds is None:
            rounds = 1
            while s["start"] + rounds * s["every_s"] < na:
                rounds += 1
        open_now = [r for r in range(1, rounds + 1)
                    if s["start"] + (r - 1) * s["every_s"] <= t < min(s["start"] + r * s["every_s"], na)]
        assert case["rounds"] == rounds, case
        assert [case["round"]] == (open_now or [None]), case


def _vector_mechanism(case):
    return make_mechanism(case["mechanism"], case["eps_milli"], case["domain_size"],
                          salt=case["salt"], campaign_id=case["campaign_id"], phase=case["phase"],
                          **case["params"])


def _rule(mech, rounds, max_round):
    return protocol.HeaderRule(mech.campaign_id, (protocol.MECHANISM_IDS[mech.name],),
                               (mech.report_size + 4,), rounds=rounds, max_round=max_round)


@pytest.mark.parametrize("case", VECTORS["reports"],
                         ids=lambda c: "%s-round%d" % (c["mechanism"], c["round"]))
def test_round_header_report_vectors_parse_on_the_aggregator(case):
    """Every round-header report passes the header rule of its campaign (R = the largest
    schedule allows), its round is the vector's, and cut to the one-shot form it is the
    vector's `one_shot_hex`, whose body the mechanism accepts."""
    report = bytes.fromhex(case["report_hex"])
    mech = _vector_mechanism(case)
    rule = _rule(mech, schedule.ROUNDS_MAX, schedule.ROUNDS_MAX)
    faults, _ = protocol.header_faults([report], rule)
    assert faults.tolist() == [-1]
    arr = np.frombuffer(report, np.uint8).reshape(1, -1)
    one_shot, rounds = schedule.split_round_rows(arr)
    assert rounds.tolist() == [case["round"]]
    assert one_shot.tobytes().hex() == case["one_shot_hex"]
    assert schedule.split_round(report) == (bytes.fromhex(case["one_shot_hex"]), case["round"])
    assert mech.validate(one_shot).tolist() == [-1]
    # the round is checked against R and the aggregator's clock
    faults, _ = protocol.header_faults([report], _rule(mech, case["round"], case["round"] - 1))
    assert [protocol.HEADER_FAULTS[f] for f in faults.tolist()] == ["round"]
    if case["round"] > 1:
        faults, _ = protocol.header_faults([report], _rule(mech, case["round"] - 1,
                                                           schedule.ROUNDS_MAX))
        assert [protocol.HEADER_FAULTS[f] for f in faults.tolist()] == ["round"]


def test_the_vectors_cover_every_memoised_mechanism_and_extreme_rounds():
    assert {c["mechanism"] for c in VECTORS["reports"]} == set(schedule.MEMOISED)
    assert {1, schedule.ROUNDS_MAX} <= {c["round"] for c in VECTORS["reports"]}


# --- the header rule -------------------------------------------------------------------------

CID = 0xC0FFEE01
MECH = make_mechanism("lgrr", 2000, 9, salt=5, campaign_id=CID, eps1_milli=1000)
GOOD1 = MECH.perturb({"value": 3, "state": MECH.enrol()}, seq=77)
"""A one-shot-form lgrr report (flags 0, no round)."""


RULE = protocol.HeaderRule(CID, (protocol.MECHANISM_IDS["lgrr"],), (MECH.report_size + 4,),
                           rounds=5, max_round=3)
ONE_SHOT_RULE = protocol.HeaderRule(CID, (protocol.MECHANISM_IDS["lgrr"],), (MECH.report_size,))


def names(reports, rule=RULE):
    faults, _ = protocol.header_faults(reports, rule)
    return [protocol.HEADER_FAULTS[f] if f >= 0 else None for f in faults.tolist()]


CORRUPT = {
    "version": lambda r: bytes([1]) + r[1:],
    "phase": lambda r: r[:2] + b"\x02" + r[3:],
    "mechanism": lambda r: r[:1] + bytes([protocol.MECHANISM_IDS["grr"]]) + r[2:],
    "flags": lambda r: r[:3] + b"\x00" + r[4:],
    "campaign_id": lambda r: r[:4] + (CID ^ 1).to_bytes(4, "little") + r[8:],
    "round": lambda r: r[:12] + (0).to_bytes(4, "little") + r[16:],
}


def test_rounds_accepted_and_refused():
    r = [schedule.with_round(GOOD1, k) for k in range(1, 7)]
    r.append(GOOD1[:3] + b"\x01" + GOOD1[4:12] + bytes(4) + GOOD1[12:])  # round 0
    # rounds 1..3 (open + 1 at the clock), 4 and 5 later, 6 above R, 0 never
    assert names(r) == [None, None, None, "round", "round", "round", "round"]
    late = protocol.HeaderRule(CID, RULE.mechanism_ids, RULE.report_sizes, rounds=5, max_round=5)
    assert names(r, late) == [None] * 5 + ["round", "round"]


def test_flags_must_match_the_campaign_kind():
    flagged = schedule.with_round(GOOD1, 1)
    assert names([GOOD1 + bytes(4), flagged[:3] + b"\x02" + flagged[4:], flagged]) == [
        "flags", "flags", None]
    # a one-shot campaign refuses a flagged report (its length is wrong too: flags first)
    assert names([flagged, GOOD1, GOOD1[:3] + b"\x01" + GOOD1[4:]], ONE_SHOT_RULE) == [
        "flags", None, "flags"]


def test_checking_order_with_the_round():
    good = schedule.with_round(GOOD1, 2)
    assert names([good]) == [None]
    for field, bad in CORRUPT.items():
        assert names([bad(good)]) == [field], field
    order = ["version", "phase", "mechanism", "flags", "campaign_id", "round"]
    for first, second in itertools.combinations(order, 2):
        assert names([CORRUPT[second](CORRUPT[first](good))]) == [first], (first, second)
    # size: short first, the exact size before the round; a report cut inside the round
    assert names([good[:11], good + b"\x00", CORRUPT["round"](good) + b"\x00", good[:14]]) == [
        "size", "size", "size", "size"]


def test_array_and_list_forms_agree():
    rows = [schedule.with_round(GOOD1, k) for k in (1, 2, 3, 4)]
    arr = np.frombuffer(b"".join(rows), np.uint8).reshape(4, -1)
    assert names(arr) == names(rows) == [None, None, None, "round"]


def test_round_is_a_registry_error_after_campaign_id():
    assert ERROR_FIELDS.index("round") == ERROR_FIELDS.index("campaign_id") + 1
    assert protocol.HEADER_FAULTS[-1] == "round"


def test_split_round_rows_is_split_round_on_every_row():
    rows = [schedule.with_round(GOOD1[:8] + bytes([k, 0, 0, 0]) + GOOD1[12:], k * 1000 + 1)
            for k in range(5)]
    arr = np.frombuffer(b"".join(rows), np.uint8).reshape(5, -1)
    one_shot, rounds = schedule.split_round_rows(arr)
    assert one_shot.flags["C_CONTIGUOUS"]
    for i, row in enumerate(rows):
        assert schedule.split_round(row) == (one_shot[i].tobytes(), int(rounds[i]))
