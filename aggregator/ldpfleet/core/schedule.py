"""Recurring campaigns (protocol_spec/v2 §3.4, §5.4 `schedule`): the one place that says which
configs recur, how many rounds they have and which round is open at a time.

A recurring campaign's config carries `"schedule": {"start": T0, "every_s": P[, "rounds": N]}`;
round r (1-based) is open for `start + (r-1)·P <= t < min(start + r·P, not_after)`. Its single
phase runs a memoised mechanism (§3.2: the permanent response is drawn once at enrolment and
charged once, so rounds cost nothing more); memoised mechanisms run nowhere else. Every party
(aggregator, MicroPython and C clients) applies these rules alike; `vectors/recurring.json`
holds the cases. Integers only."""
import numpy as np

import re

from . import mechanism_table
from .errors import ConfigError

EVERY_S_MIN = 10
EVERY_S_MAX = 31536000
"""10 s (tests, demos) to a year."""
ROUNDS_MAX = 100000
KEYS = ("start", "every_s", "rounds")
PERIOD_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
PERIOD_RE = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")
MEMOISED = frozenset(mechanism_table.LONGITUDINAL)
"""The longitudinal mechanisms of spec §3.2 (ids 17-21)."""
ROUND_FLAG = 1
"""Header `flags` bit 0 (spec §3.4): a u32 `round` follows the 12-byte header."""


def is_recurring(doc: dict) -> bool:
    return "schedule" in doc


def check_phase_kind(ph: dict, recurring: bool):
    """Memoised mechanisms only in recurring configs and recurring configs only with memoised
    mechanisms (spec §3.4): refused with field phases.mechanism either way."""
    memoised = ph.get("mechanism") in MEMOISED
    if memoised and not recurring:
        raise ConfigError("phases.mechanism", "%s is a memoised mechanism: it runs in recurring "
                          "campaigns only (a config with a schedule, spec §3.4)" % ph["mechanism"])
    if recurring and not memoised:
        raise ConfigError("phases.mechanism", "a recurring campaign takes a memoised mechanism "
                          "(%s), not %r: a one-shot mechanism would spend eps every round "
                          "(spec §3.4)" % (", ".join(sorted(MEMOISED)), ph.get("mechanism")))


def _int(obj, key, lo, hi):
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError("schedule", "schedule.%s must be an integer in [%d, %d], got %r"
                          % (key, lo, hi, v))
    return v


def check_schedule(doc: dict) -> int:
    """Spec §5.4 `schedule` of a config that has one (its not_before/not_after already checked);
    returns the number of rounds R. One phase only (field `phases`)."""
    s = doc["schedule"]
    if not isinstance(s, dict):
        raise ConfigError("schedule", "schedule must be an object")
    extra = sorted(set(s) - set(KEYS))
    if extra:
        raise ConfigError("schedule", "unknown schedule key(s) %s" % ", ".join(map(repr, extra)))
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
        raise ConfigError("schedule", "round %d would open at %d, at or after not_after %d"
                          % (r, s["start"] + (r - 1) * s["every_s"], doc["not_after"]))
    return r


def round_count(doc: dict) -> int:
    """R: the schedule's `rounds`, else ceil((not_after - start) / every_s)."""
    s = doc["schedule"]
    if "rounds" in s:
        return s["rounds"]
    return -((s["start"] - doc["not_after"]) // s["every_s"])


def round_at(doc: dict, t: int):
    """The round open at unix time `t` (1..R), or None (before start, at or after not_after,
    after round R)."""
    s = doc["schedule"]
    if not s["start"] <= t < doc["not_after"]:
        return None
    r = (t - s["start"]) // s["every_s"] + 1
    return r if r <= round_count(doc) else None


def rounds_opened(doc: dict, t: int) -> int:
    """How many rounds have opened by unix time `t`: 0 before `start`, R once the last round
    opened (also at and after not_after)."""
    s = doc["schedule"]
    if t < s["start"]:
        return 0
    return min((t - s["start"]) // s["every_s"] + 1, round_count(doc))


def highest_round(doc: dict, t: int) -> int:
    """The highest round a report may carry at the aggregator's clock `t` (spec §3.4): the
    round open at t plus one (clock skew), at most R; after the last round opened, R."""
    return min(rounds_opened(doc, t) + 1, round_count(doc))


def round_window(doc: dict, r: int):
    """[opens, closes) of round r in unix seconds."""
    s = doc["schedule"]
    opens = s["start"] + (r - 1) * s["every_s"]
    return opens, min(opens + s["every_s"], doc["not_after"])


HEADER = 12
ROUND_HEADER = 16


def with_round(report: bytes, r: int) -> bytes:
    """A one-shot-form report (12-byte header, flags 0) as round r's report of a recurring
    campaign: flags 1 and le32(r) after the header (spec §3.4)."""
    if not 1 <= r <= 0xFFFFFFFF:
        raise ValueError("round must be in [1, 2^32 - 1]")
    return report[:3] + bytes([ROUND_FLAG]) + report[4:HEADER] + r.to_bytes(4, "little") + report[HEADER:]


def split_round(report: bytes):
    """(one-shot-form report, round) of a flagged report; (report, None) of an unflagged one.
    Size and other header fields are the caller's checks (spec §3.4's order)."""
    if len(report) < ROUND_HEADER or report[3] != ROUND_FLAG:
        return report, None
    r = int.from_bytes(report[HEADER:ROUND_HEADER], "little")
    return report[:3] + b"\x00" + report[4:HEADER] + report[ROUND_HEADER:], r


def split_round_rows(arr):
    """`split_round` of a batch: (n, ROUND_HEADER + body) uint8 rows of flagged reports ->
    ((n, HEADER + body) C-contiguous one-shot-form rows, flags 0; (n,) uint32 rounds), in
    three numpy copies (the fold of a recurring campaign's reports: the round's sketch takes
    the one-shot form, spec §3.4)."""
    n, width = arr.shape
    if width < ROUND_HEADER:
        raise ValueError("rows of %d bytes carry no round header" % width)
    out = np.empty((n, width - (ROUND_HEADER - HEADER)), np.uint8)
    out[:, :HEADER] = arr[:, :HEADER]
    out[:, 3] = 0
    out[:, HEADER:] = arr[:, ROUND_HEADER:]
    return out, row_rounds(arr)


def row_rounds(arr):
    """The `round` field (u32 LE at offset 12) of (n, >= 16) uint8 rows, as uint32."""
    return np.ascontiguousarray(arr[:, HEADER:ROUND_HEADER]).view("<u4").ravel()


def parse_period(text) -> int:
    """A round period as operators write it — `90s`, `30m`, `12h`, `1d`, `1w` or plain seconds —
    in seconds within [EVERY_S_MIN, EVERY_S_MAX] (ConfigError("every") otherwise). The one
    parser `campaign create --every`, `plan --every` and `simulate` use."""
    m = PERIOD_RE.match(str(text).lower())
    if not m:
        raise ConfigError("every", "expected a period like 90s, 30m, 12h, 1d, 1w or seconds, "
                          "got %r" % (text,))
    seconds = int(m.group(1)) * PERIOD_UNITS[m.group(2) or "s"]
    if not EVERY_S_MIN <= seconds <= EVERY_S_MAX:
        raise ConfigError("every", "the period must be %d s to %d s (a year), got %d s"
                          % (EVERY_S_MIN, EVERY_S_MAX, seconds))
    return seconds
