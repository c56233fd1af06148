"""Each campaign's counters over time: the `counter_history` table (schema 7) and the trend the
dashboard draws (`GET /campaigns/{name}/trend`, `ldpfleet campaign trend`).

`serve` appends, inside the transaction that commits a batch, one row per campaign the batch
touched and per minute (`HistoryRecorder`: at most one attempt per campaign a minute in each
process; the table's key (campaign, minute) keeps one row when several workers try): the
campaign's totals summed over every worker's counters as that transaction sees them —
received, accepted, duplicates (re-sends of reports already counted) and the other
rejections. The totals are cumulative, so a minute without reports has no row and the trend
stays flat there. A row is ~60 bytes: a year of a busy campaign is half a million rows.
"""
import math
import time

INTERVAL_S = 60
"""One history row per campaign and minute at most."""

MAX_POINTS = 240
"""A trend returns at most this many points (evenly spaced rows, the last one kept)."""

_TOTALS = """
SELECT campaign, sum(CASE WHEN reason = 'received' THEN count ELSE 0 END),
       sum(CASE WHEN reason = 'accepted' THEN count ELSE 0 END),
       sum(CASE WHEN reason = 'duplicate' THEN count ELSE 0 END),
       sum(CASE WHEN reason NOT IN ('received', 'accepted', 'duplicate') THEN count ELSE 0 END)
FROM counters WHERE campaign IN ({names}) GROUP BY campaign
"""


def append(store, names, now: float):
    """Rows of `names` for the minute of `now` (inside the caller's transaction); a minute
    that already has its row keeps it."""
    names = sorted(set(names))
    if not names:
        return
    rows = store.db.execute(_TOTALS.format(names=", ".join("?" * len(names))),
                            names).fetchall()
    minute = int(now // INTERVAL_S)
    store.db.executemany(
        "INSERT INTO counter_history VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (campaign, minute) DO NOTHING",
        [(c, minute, float(now), int(r), int(a), int(d), int(x)) for c, r, a, d, x in rows])


class HistoryRecorder:
    """Calls `append` for the campaigns a batch touched, at most once a minute each (the
    minute of the wall clock; a restarted process may try again: the key keeps one row)."""

    def __init__(self, interval: float = INTERVAL_S, clock=time.time):
        self.interval, self.clock = interval, clock
        self._last = {}

    def record(self, store, names):
        now = self.clock()
        minute = int(now // self.interval)
        due = [n for n in set(names) if n and self._last.get(n) != minute]
        if due:
            append(store, due, now)
            for n in due:
                self._last[n] = minute


def trend(store, name: str, max_points: int = MAX_POINTS) -> dict:
    """The campaign's history (the CLI's `campaign trend --json`, the API's /trend): points
    {at, received, accepted, duplicates, rejected} oldest first, at most `max_points` (evenly
    spaced rows, the newest kept), then the counters as they are now (`at` now)."""
    store.require_campaign(name)
    rows = store.db.execute("SELECT at, received, accepted, duplicates, rejected FROM "
                            "counter_history WHERE campaign = ? ORDER BY minute",
                            (name,)).fetchall()
    keep = max(1, int(max_points) - 1)
    if len(rows) > keep:
        step = len(rows) / keep
        rows = [rows[min(len(rows) - 1, int(math.floor((i + 1) * step)) - 1)]
                for i in range(keep)]
    points = [{"at": float(at), "received": int(r), "accepted": int(a), "duplicates": int(d),
               "rejected": int(x)} for at, r, a, d, x in rows]
    counters = store.counters(name)
    others = sum(v for k, v in counters.items() if k not in ("received", "accepted", "duplicate"))
    points.append({"at": time.time(), "received": counters.get("received", 0),
                   "accepted": counters.get("accepted", 0),
                   "duplicates": counters.get("duplicate", 0), "rejected": others})
    return {"campaign": name, "interval_s": INTERVAL_S, "points": points}
