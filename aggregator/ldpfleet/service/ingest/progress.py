"""What `serve` tells its log while it runs: progress of the ingest, campaign changes, and why
it stopped.

- **Progress**, at most every `interval` seconds (serve --progress-interval, default 30) and
  only when something changed: per campaign, the reports this serve committed since its last
  line — accepted (and per second), duplicates (re-sends, redeliveries), rejected by reason —
  and the rise of the broker's drop counter (all campaigns: the broker does not say whose).
  Counts are checked every second, so the first batch after start or after a quiet spell
  longer than `interval` is logged within a second; the rate is over the time since the last
  line or the last quiet check, whichever is later.
- **Campaign changes**: every create, advance and close recorded by the CLI or the HTTP API
  (service/campaigns/events.py), with where it came from, within a second of it.
- **Shutdown** (`stopped`): why serve stopped and what it committed since it started.

The numbers are this worker's committed counters (the `counters` table, worker = its client
id), read through a connection of its own: what is logged was committed, and a state that
cannot be read costs a warning, never the ingest. `tick()` is the one hook in the ingest loop;
it returns at once unless a check is due.
"""
import json
import logging
import time

from ..campaigns import events as lifecycle
from .broker_watch import META_KEY as DROPS_META
from .fold import ACCEPTED, DUPLICATE, RECEIVED

log = logging.getLogger("ldpfleet.service")

POLL_S = 1.0
"""Seconds between checks for new counts and campaign events."""


def _fmt(n) -> str:
    return "{:,}".format(int(n))


class ProgressLog:
    def __init__(self, state_url: str, worker: str, interval: float = 30.0, clock=time.monotonic):
        self.state_url, self.worker, self.interval, self.clock = state_url, worker, interval, clock
        self._store = None
        self.started = clock()
        self.baseline = self.logged = self._counts()
        self.drops_logged = self._drops()
        self.last_line = float("-inf")  # the first line may come at the first check
        self.quiet_since = self.started
        self.due = self.started + POLL_S
        self.events_seen = set(self._events())
        self._failing = False

    # --- reading the state ---------------------------------------------------------------------
    @property
    def store(self):
        from ..state.store import Store
        if self._store is None:
            self._store = Store(self.state_url, create=False)
        return self._store

    def _counts(self) -> dict:
        """{(campaign, reason): count} this worker committed (every run of it)."""
        rows = self.store.db.execute("SELECT campaign, reason, count FROM counters WHERE worker=?",
                                     (self.worker,)).fetchall()
        return {(c, r): int(n) for c, r, n in rows}

    def _drops(self) -> int:
        raw = self.store.meta(DROPS_META)
        return int(json.loads(raw).get("seen_by_serve", 0)) if raw else 0

    def _events(self) -> dict:
        return lifecycle.events(self.store)

    # --- the hook ------------------------------------------------------------------------------
    def tick(self):
        """From the ingest loop: log what is due (never raises)."""
        now = self.clock()
        if now < self.due:
            return
        self.due = now + POLL_S
        try:
            self._log_events()
            if self.interval > 0:
                self._log_progress(now)
            if self._failing:
                log.info("progress: the state is readable again")
            self._failing = False
        except Exception as exc:  # noqa: BLE001 (the log must never stop the ingest)
            if not self._failing:
                log.warning("progress: cannot read the state: %s", str(exc).strip() or exc)
            self._failing = True
            self._close()

    def _log_events(self):
        new = {k: e for k, e in self._events().items() if k not in self.events_seen}
        for key in sorted(new, key=lambda k: (new[k].get("at", 0), k)):
            log.info("%s", lifecycle.describe(new[key]))
            self.events_seen.add(key)

    def _log_progress(self, now: float):
        counts, drops = self._counts(), self._drops()
        delta = {k: v - self.logged.get(k, 0) for k, v in counts.items()
                 if v != self.logged.get(k, 0)}
        rose = drops - self.drops_logged
        if not delta and rose <= 0:
            self.quiet_since = now  # the next line's window starts after this quiet check
            return
        if now - self.last_line < self.interval:
            return  # at most one line per interval
        window = max(now - max(self.last_line, self.quiet_since), 1e-3)
        for line in self.lines(delta, counts, rose, window):
            log.info("%s", line)
        self.logged, self.drops_logged, self.last_line = counts, drops, now

    def lines(self, delta: dict, counts: dict, drops_rose: int, window: float) -> list:
        """The progress lines of one window (one per campaign with new counts)."""
        campaigns = sorted({c for c, _ in delta})
        out = []
        for name in campaigns:
            got = {r: n for (c, r), n in delta.items() if c == name}
            rejected = {r: n for r, n in got.items() if r not in (RECEIVED, ACCEPTED, DUPLICATE)}
            accepted = got.get(ACCEPTED, 0)
            total = counts.get((name, ACCEPTED), 0) - self.baseline.get((name, ACCEPTED), 0)
            text = "progress: campaign %s: %s accepted in %.1f s (%s/s), %s duplicates, %s rejected" % (
                name or "(none)", _fmt(accepted), window, _fmt(round(accepted / window)),
                _fmt(got.get(DUPLICATE, 0)), _fmt(sum(rejected.values())))
            if rejected:
                text += " (%s)" % ", ".join("%s %s" % (r, _fmt(n)) for r, n in
                                            sorted(rejected.items(), key=lambda kv: -kv[1]))
            if name:
                text += "; %s accepted since serve started" % _fmt(total)
            text += "; broker drops (all campaigns) +%s" % _fmt(max(drops_rose, 0))
            out.append(text)
        if not campaigns:  # only the broker's drop counter moved
            out.append("progress: no report committed in %.1f s; broker drops (all campaigns) +%s"
                       % (window, _fmt(drops_rose)))
        return out

    # --- the end ---------------------------------------------------------------------------------
    def stopped(self, reason: str):
        """The shutdown line: why, for how long, and what this serve committed since it started."""
        ran = self.clock() - self.started
        try:
            self._log_events()
            counts = self._counts()
        except Exception as exc:  # noqa: BLE001
            log.warning("serve stopped (%s) after %s; its counts cannot be read: %s", reason,
                        _duration(ran), exc)
            self._close()
            return
        delta = {k: v - self.baseline.get(k, 0) for k, v in counts.items()
                 if v != self.baseline.get(k, 0)}
        received = sum(n for (c, r), n in delta.items() if r == RECEIVED)
        parts = []
        for name in sorted({c for c, _ in delta}):
            got = {r: n for (c, r), n in delta.items() if c == name}
            rejected = sum(n for r, n in got.items() if r not in (RECEIVED, ACCEPTED, DUPLICATE))
            parts.append("%s: %s accepted, %s duplicates, %s rejected" % (
                name or "(no campaign)", _fmt(got.get(ACCEPTED, 0)), _fmt(got.get(DUPLICATE, 0)),
                _fmt(rejected)))
        log.info("serve stopped (%s) after %s: committed %s messages since it started%s",
                 reason, _duration(ran), _fmt(received),
                 " (%s)" % "; ".join(parts) if parts else "")
        self._close()

    def _close(self):
        if self._store is not None:
            try:
                self._store.close()
            except Exception:  # noqa: BLE001
                pass
            self._store = None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%d min %d s" % divmod(seconds, 60)
    return "%d h %d min" % (seconds // 3600, seconds % 3600 // 60)
