"""Recurring campaigns in the service (protocol_spec/v2 §3.4): where each round's reports live.

STORAGE CONTRACT. The ingest folds a recurring campaign's reports round by round: the `phase`
column of the `sketches`, `seen`, `seen_log` and `login_devices` tables holds the ROUND number
(1..R) for such a campaign — its storage "slot" is the round — so every round has its own
sketch (`Store.sketch_blob(name, round)`; the workers' partials merge by addition) and dedupe is
per (campaign, round, device) with the one-shot machinery. A one-shot campaign's slots are its
phases. Each round's sketch is the phase-1 mechanism's (`slot_mechanism`), fed the reports in
their one-shot form (core.schedule.split_round: flags 0, no round field).

Readers (estimate, the HTTP API, the dashboard, Prometheus) call these helpers instead of
looking at the config themselves; the rules are core/schedule.py's.
"""
import time

from ...core import schedule


def is_recurring(camp) -> bool:
    """Does the campaign's config carry a `schedule` (spec §3.4)?"""
    return camp.recurring


def round_count(camp) -> int:
    """R of a recurring campaign; 0 for a one-shot campaign."""
    return camp.rounds


def slots(camp) -> range:
    """Every storage slot of the campaign: its rounds 1..R (recurring), else its phases."""
    return range(1, (round_count(camp) if is_recurring(camp) else len(camp.config["phases"])) + 1)


def opened_slots(camp, now: int = None) -> range:
    """The slots that can hold reports at `now` (default: the clock): the rounds opened so far
    (recurring), else the phases open."""
    if not is_recurring(camp):
        return range(1, camp.phase + 1)
    return range(1, schedule.rounds_opened(camp.config, _now(now)) + 1)


def current_round(camp, now: int = None):
    """The round open at `now` (1..R), or None (one-shot, before start, after the last)."""
    if not is_recurring(camp):
        return None
    return schedule.round_at(camp.config, _now(now))


def slot_phase(camp, slot: int) -> int:
    """The config phase whose mechanism folds `slot` (1 for every round)."""
    return camp.slot_phase(slot)


def slot_mechanism(camp, slot: int):
    """The Mechanism whose sketch slot `slot` holds."""
    return camp.slot_mechanism(slot)


def round_window(camp, r: int):
    """[opens, closes) of round r in unix seconds."""
    return schedule.round_window(camp.config, r)


def describe(camp, now: int = None):
    """What `campaign status/list` and the status message show of the schedule; None for a
    one-shot campaign."""
    if not is_recurring(camp):
        return None
    t = _now(now)
    return {"schedule": dict(camp.config["schedule"]), "rounds": round_count(camp),
            "round": schedule.round_at(camp.config, t),
            "rounds_opened": schedule.rounds_opened(camp.config, t)}


def _now(now):
    return int(time.time()) if now is None else int(now)
