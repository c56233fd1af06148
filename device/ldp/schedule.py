"""Recurring campaigns on the device (protocol_spec/v2 §3.4, §5.4 `schedule`): which configs
recur, how many rounds they have, which round is open at a time, and the round header.

The same rules as the aggregator's ldpfleet.core.schedule (field names and checking order
equal; `vectors/recurring.json` holds the shared cases): a config with
`"schedule": {"start": T0, "every_s": P[, "rounds": N]}` has exactly one phase, whose mechanism is
a memoised one (spec §3.2), and memoised mechanisms run nowhere else (`phases.mechanism` either
way). Round r (1-based) is open for `start + (r-1)·P <= t < min(start + r·P, not_after)`.
Integers only.
"""
import struct

from .errors import ConfigError
from .mechanisms import LONGITUDINAL

EVERY_S_MIN = 10
EVERY_S_MAX = 31536000  # 10 s (tests, demos) to a year
ROUNDS_MAX = 100000
KEYS = ("start", "every_s", "rounds")
ROUND_FLAG = 1  # header `flags` bit 0: a u32 `round` follows the 12-byte header
HEADER = 12


def is_recurring(doc):
    return "schedule" in doc


def check_phase_kind(ph, recurring):
    """Memoised mechanisms only in recurring configs, recurring configs only with memoised
    mechanisms (spec §3.4): field phases.mechanism either way."""
    memoised = ph.get("mechanism") in LONGITUDINAL
    if memoised and not recurring:
        raise ConfigError("phases.mechanism", "%s is a memoised mechanism: it runs in recurring "
                          "campaigns only (a config with a schedule, spec §3.4)" % ph["mechanism"])
    if recurring and not memoised:
        raise ConfigError("phases.mechanism", "a recurring campaign takes a memoised mechanism, "
                          "not %r (spec §3.4)" % (ph.get("mechanism"),))


def _int(obj, key, lo, hi):
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError("schedule", "schedule.%s must be an integer in [%d, %d], got %r"
                          % (key, lo, hi, v))
    return v


def check_schedule(doc):
    """Spec §5.4 `schedule` of a config that has one (not_before/not_after already checked);
    returns the number of rounds R. One phase only (field `phases`)."""
    s = doc["schedule"]
    if not isinstance(s, dict):
        raise ConfigError("schedule", "schedule must be an object")
    for key in s:
        if key not in KEYS:
            raise ConfigError("schedule", "unknown schedule key %r" % (key,))
    if len(doc["phases"]) != 1:
        raise ConfigError("phases", "a recurring campaign has exactly one phase (spec §3.4)")
    _int(s, "start", doc["not_before"], doc["not_after"] - 1)
    _int(s, "every_s", EVERY_S_MIN, EVERY_S_MAX)
    if "rounds" in s:
        _int(s, "rounds", 1, ROUNDS_MAX)
    r = round_count(doc)
    if not 1 <= r <= ROUNDS_MAX:
        raise ConfigError("schedule", "%d rounds: a schedule has 1..%d" % (r, ROUNDS_MAX))
    if s["start"] + (r - 1) * s["every_s"] >= doc["not_after"]:
        raise ConfigError("schedule", "round %d would open at or after not_after" % r)
    return r


def round_count(doc):
    """R: the schedule's `rounds`, else ceil((not_after - start) / every_s)."""
    s = doc["schedule"]
    if "rounds" in s:
        return s["rounds"]
    return -((s["start"] - doc["not_after"]) // s["every_s"])


def round_at(doc, t):
    """The round open at unix time `t` (1..R), or None."""
    s = doc["schedule"]
    if not s["start"] <= t < doc["not_after"]:
        return None
    r = (t - s["start"]) // s["every_s"] + 1
    return r if r <= round_count(doc) else None


def round_window(doc, r):
    """[opens, closes) of round r in unix seconds."""
    s = doc["schedule"]
    opens = s["start"] + (r - 1) * s["every_s"]
    return opens, min(opens + s["every_s"], doc["not_after"])


def is_over(doc, t):
    """Every round has closed at time `t` (round R's window, or not_after, is past)."""
    return t >= round_window(doc, round_count(doc))[1]


def with_round(report, r):
    """A one-shot-form report (12-byte header, flags 0) as round r's report: flags 1 and
    le32(r) after the header (spec §3.4; the aggregator's schedule.with_round)."""
    if not 1 <= r <= 0xFFFFFFFF:
        raise ValueError("round must be in [1, 2^32 - 1]")
    return (report[:3] + bytes((ROUND_FLAG,)) + report[4:HEADER] + struct.pack("<I", r)
            + report[HEADER:])
