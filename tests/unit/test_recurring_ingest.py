"""The ingest of a recurring campaign (protocol_spec/v2 §3.4) through the real path (validate,
dedupe, fold, commit) in process: every round lands in its own storage slot (the `phase`
column holds the round: service/campaigns/rounds.py), dedupe is per (campaign, round,
device), flags and rounds are checked against the campaign kind and the aggregator's clock,
each round's sketch is byte-identical to one in-process sketch of its accepted reports in the
one-shot form, acknowledgements are unchanged, and a restarted ingest keeps all of it.

`run_scenario(state_url)` is also run on PostgreSQL (tests/integration/test_recurring_postgres.py)."""
import logging
import os
import time

import numpy as np

from ldpfleet.core import schedule
from ldpfleet.core.signing import write_signing_key
from ldpfleet.service import Store, create_campaign
from ldpfleet.service.campaigns import rounds
from ldpfleet.service.campaigns.coverage import ProvisionedFleet, coverage, silent_devices
from ldpfleet.service.campaigns.manage import Issuance, campaign_status
from ldpfleet.service.campaigns.recurring import Recurrence
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
from support.service import direct_sketch

N = 40
EVERY = 60
R = 3
SEED = 3141


def make_campaigns(state_url, tmp_path, start):
    key = os.path.join(str(tmp_path), "fleet.key")
    write_signing_key(key)
    with Store(state_url) as store:
        daily = create_campaign(store, None, key, "fw", "loloha", 2.0, "16",
                                params={"eps1_milli": 1000},
                                issue=Issuance(recurrence=Recurrence(EVERY, rounds=R, start=start)))
        once = create_campaign(store, None, key, "once", "olh", 2.0, "16")
    return daily, once


def flagged(one_shot: np.ndarray, r: int) -> np.ndarray:
    """One-shot-form rows as round r's reports (core.schedule.with_round on each)."""
    return np.stack([np.frombuffer(schedule.with_round(row.tobytes(), r), np.uint8)
                     for row in one_shot])


def messages(campaign, rows, start=0):
    return [("ldp/%s/r/dev%d" % (campaign, start + i), row.tobytes()) for i, row in enumerate(rows)]


class Ingest:
    """An in-process ingest worker whose clock the test sets."""

    def __init__(self, state_url, now):
        self.ingestor = Ingestor(state_url, options=IngestOptions(client_id="w1"))
        self.ingestor.folder.clock = lambda: now[0]

    def __call__(self, msgs):
        counts = self.ingestor.process_batch(msgs)
        return {reason: n for (camp, reason), n in counts.items() if camp == "fw"}, counts

    def close(self):
        self.ingestor.store.close()


def run_scenario(state_url, tmp_path):
    start = int(time.time()) - 5  # the config must be valid now (create_campaign checks it)
    daily, _once = make_campaigns(state_url, tmp_path, start)
    assert daily.recurring and daily.rounds == R
    mech = daily.mechanism(1)
    rng = np.random.default_rng(SEED)
    values = rng.integers(0, 16, N)
    states = mech.enrol_batch(N, rng)
    one_shot = {r: mech.report_batch(values, states, rng, seq_start=1000 * r) for r in (1, 2, 3)}
    now = [start + 1]  # round 1 open: rounds 1 and 2 accepted (clock skew), 3 not yet
    ingest = Ingest(state_url, now)
    try:
        got, _ = ingest(messages("fw", flagged(one_shot[1], 1)))
        assert got == {"received": N, "accepted": N}
        acks = dict(ingest.ingestor.acks.pairs())
        assert acks["ldp/fw/a/dev0"] == bytes([2, 0x41, 1, 0]) + one_shot[1][0, 4:12].tobytes()

        # duplicates within round 1 once, another nonce a second report
        again = flagged(one_shot[1][:10], 1)
        other = flagged(one_shot[2][10:15], 1)  # round 2's nonces in round 1
        got, _ = ingest(messages("fw", again) + messages("fw", other, 10))
        assert got == {"received": 15, "duplicate": 10, "second_report": 5}

        # the same devices in round 2 (open + 1) are accepted; round 3 is refused for now
        got, _ = ingest(messages("fw", flagged(one_shot[2], 2))
                        + messages("fw", flagged(one_shot[3][:4], 3)))
        assert got == {"received": N + 4, "accepted": N, "round": 4}

        # malformed headers: flags of the wrong kind, round 0 and above R
        unflagged = np.concatenate([one_shot[3][:2], np.zeros((2, 4), np.uint8)], axis=1)
        bad = (messages("fw", unflagged)  # flags 0 at the recurring report size
               + messages("fw", _with_round_field(flagged(one_shot[3][:3], 3), 0))
               + messages("fw", _with_round_field(flagged(one_shot[3][:2], 3), R + 1)))
        got, _ = ingest(bad)
        assert got == {"received": 7, "flags": 2, "round": 5}
        # a one-shot campaign refuses a flagged report
        olh = ingest.ingestor.folder.campaigns["once"].mechanism(1)
        oneshot_olh = olh.perturb_batch(np.arange(3), rng)
        _, counts = ingest([("ldp/once/r/x%d" % i, schedule.with_round(row.tobytes(), 1))
                            for i, row in enumerate(oneshot_olh)])
        assert counts[("once", "flags")] == 3

        # the clock reaches round 3: its reports are accepted, in slot 3
        now[0] = start + 2 * EVERY + 1
        got, _ = ingest(messages("fw", flagged(one_shot[3], 3)))
        assert got == {"received": N, "accepted": N}
    finally:
        ingest.close()

    # a restarted worker keeps the per-round dedupe
    ingest = Ingest(state_url, now)
    try:
        got, _ = ingest(messages("fw", flagged(one_shot[2][:6], 2))
                        + messages("fw", flagged(one_shot[1][:6], 2)))
        assert got == {"received": 12, "duplicate": 6, "second_report": 6}
    finally:
        ingest.close()

    with Store(state_url) as store:
        camp = store.require_campaign("fw")
        assert store.sketch_slots("fw") == [1, 2, 3] == list(rounds.opened_slots(camp, now[0]))
        assert list(rounds.slots(camp)) == [1, 2, 3] and rounds.current_round(camp, now[0]) == 3
        for r in (1, 2, 3):
            n, blob = store.sketch_blob("fw", r)
            assert n == N
            assert blob == direct_sketch(rounds.slot_mechanism(camp, r), one_shot[r]).serialize()
            assert store.seen_count("fw", r) == N
        counters = store.counters("fw")
        assert counters["accepted"] == 3 * N
        # `campaign status`: the reports of every round; coverage counts devices, not rounds
        status = campaign_status(store, "fw")
        assert status["schedule"]["per_round"] == [{"round": r, "reports": N} for r in (1, 2, 3)]
        assert status["coverage"]["reported"] == N and status["phases"][0]["reports"] == 3 * N  # summed over rounds
        devices = tmp_path / "devices.txt"
        devices.write_text("".join("dev%d\n" % i for i in range(N)) + "ghost\n")
        fleet = ProvisionedFleet(str(devices))
        assert coverage(store, "fw", fleet)["reported"] == N
        silent = silent_devices(store, "fw", fleet)
        assert silent["silent"] == ["ghost"] and silent["reported"] == N
        assert [(p["round"], p["reported"], p["silent"]) for p in silent["phases"]] == [
            (rounds.opened_slots(camp)[-1], N, ["ghost"])]
        assert counters["received"] == sum(v for k, v in counters.items() if k != "received")


def _with_round_field(rows, r):
    out = rows.copy()
    out[:, 12:16] = np.frombuffer(int(r).to_bytes(4, "little"), np.uint8)
    return out


def test_recurring_campaign_on_sqlite(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ldpfleet")
    run_scenario("sqlite:///" + str(tmp_path / "state.db"), tmp_path)
    text = caplog.text
    # every rejection's log line names the campaign and the round
    assert "for campaign fw round 3 (rounds 1..2 of 3 accepted now)" in text
    assert "campaign fw round 1 device dev10: nonce 2010 differs" in text
    assert "for campaign fw (recurring: flags must be 1 with a round header)" in text


def test_a_worker_keeps_few_round_sketches_in_memory(tmp_path):
    """A worker folding round after round holds at most fold.ROUND_SKETCHES round sketches of a
    campaign (R may be 100,000); a late report of a round long forgotten folds into that round's
    stored sketch, reloaded: the sketch equals the direct one of all its accepted reports."""
    from ldpfleet.service.ingest import fold
    rounds_n, n = 10, 6
    start = int(time.time()) - 5
    key = os.path.join(str(tmp_path), "fleet.key")
    write_signing_key(key)
    url = "sqlite:///" + str(tmp_path / "state.db")
    with Store(url) as store:
        daily = create_campaign(store, None, key, "fw", "loloha", 2.0, "16",
                                params={"eps1_milli": 1000},
                                issue=Issuance(recurrence=Recurrence(EVERY, rounds=rounds_n, start=start)))
    mech = daily.mechanism(1)
    rng = np.random.default_rng(SEED)
    states = mech.enrol_batch(2 * n, rng)
    one_shot = {r: mech.report_batch(rng.integers(0, 16, 2 * n), states, rng, seq_start=100 * r)
                for r in range(1, rounds_n + 1)}
    now = [start]
    ingest = Ingest(url, now)
    try:
        for r in range(1, rounds_n + 1):
            now[0] = start + (r - 1) * EVERY + 1
            got, _ = ingest(messages("fw", flagged(one_shot[r][:n], r)))
            assert got == {"received": n, "accepted": n}
            held = [k for k in ingest.ingestor.folder._sketches if k[0] == "fw"]
            assert len(held) <= fold.ROUND_SKETCHES, held
        got, _ = ingest(messages("fw", flagged(one_shot[1][n:], 1), start=n))  # late, round 1
        assert got == {"received": n, "accepted": n}
    finally:
        ingest.close()
    with Store(url) as store:
        camp = store.require_campaign("fw")
        for r in range(1, rounds_n + 1):
            count, blob = store.sketch_blob("fw", r)
            rows = one_shot[r] if r == 1 else one_shot[r][:n]
            assert count == len(rows)
            assert blob == direct_sketch(rounds.slot_mechanism(camp, r), rows).serialize()
