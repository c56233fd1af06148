"""Retention: a closed campaign's dedupe keys can go; its sketches and counters stay.

Once a campaign is closed, serve rejects every further report as `closed_campaign` before any
dedupe lookup, so the keys no longer protect anything (the close already zeroed their nonce
tags): `purge` deletes them and the campaign's salt (dedupe.py: no key of that campaign can be
computed again, whoever holds the root key), records when and how many (`purges`), `campaign
status` shows it, and `estimate` is unchanged (the sketch is untouched). `serve --purge-after-days N` purges every campaign closed more than N days ago, at
start and then hourly (`RetentionTimer`).
"""
import time

from ...core.errors import ConfigError
from . import dedupe

DAY_S = 86400.0
CHECK_EVERY_S = 3600.0
CLOSE_GRACE_S = 60.0
"""A purge waits this long after the close: a worker that loaded the campaign as open at the
start of its batch must have committed that batch, or it could claim a just-purged key again."""


def purge(store, name: str) -> int:
    """Drop the dedupe keys of the closed campaign `name`; returns how many were dropped."""
    with store.batch():
        camp = store.require_campaign(name)
        if camp.state != "closed":
            raise ConfigError("name", "campaign %s is open: close it first (`ldpfleet campaign "
                                      "close %s`); only a closed campaign's dedupe keys can go"
                              % (name, name))
        if camp.closed_at is not None and time.time() - camp.closed_at < CLOSE_GRACE_S:
            raise ConfigError("name", "campaign %s was closed %.0f s ago: purge at least %.0f s "
                                      "after the close (batches in flight may still claim keys)"
                              % (name, time.time() - camp.closed_at, CLOSE_GRACE_S))
        keys = store.seen_count(name)
        store.conn.zero_deleted(True)
        try:
            store.conn.execute("DELETE FROM seen WHERE campaign=?", (name,))
            store.conn.execute("DELETE FROM seen_log WHERE campaign=?", (name,))
            dedupe.drop_salt(store.conn, name)
        finally:
            store.conn.zero_deleted(False)
        store.claims.dropped()
        store.conn.execute(
            "INSERT INTO purges VALUES (?, ?, ?) ON CONFLICT (campaign) DO UPDATE SET "
            "purged_at=excluded.purged_at, keys=purges.keys + excluded.keys",
            (name, time.time(), keys))
    return keys


def closed_before(store, days: float, now: float = None) -> list:
    """Names of the campaigns closed more than `days` days ago whose keys are not purged yet
    (or got keys after their last purge)."""
    cutoff = (now or time.time()) - days * DAY_S
    rows = store.conn.execute(
        "SELECT name FROM campaigns WHERE state='closed' AND closed_at IS NOT NULL AND "
        "closed_at < ? AND (name NOT IN (SELECT campaign FROM purges) OR EXISTS "
        "(SELECT 1 FROM seen WHERE seen.campaign = campaigns.name) OR EXISTS "
        "(SELECT 1 FROM seen_log WHERE seen_log.campaign = campaigns.name)) ORDER BY name",
        (cutoff,)).fetchall()
    return [r[0] for r in rows]


def purge_closed_before(store, days: float) -> dict:
    """`purge` every campaign closed more than `days` days ago: {name: keys dropped}."""
    return {name: purge(store, name) for name in closed_before(store, days)}


def purge_record(store, name: str):
    """{"purged_at", "keys"} of the campaign's purge, or None."""
    row = store.conn.execute("SELECT purged_at, keys FROM purges WHERE campaign=?",
                             (name,)).fetchone()
    return {"purged_at": row[0], "keys": int(row[1])} if row else None


class RetentionTimer:
    """serve's `--purge-after-days`: `tick()` purges when due (at the first call, then hourly)."""

    def __init__(self, store, days: float, log):
        self.store, self.days, self.log = store, days, log
        self.due = 0.0

    def tick(self, now: float = None):
        now = now if now is not None else time.monotonic()
        if self.days is None or now < self.due:
            return
        self.due = now + CHECK_EVERY_S
        for name, keys in purge_closed_before(self.store, self.days).items():
            self.log.info("retention: purged %d dedupe keys of campaign %s (closed more than "
                          "%g days ago)", keys, name, self.days)
