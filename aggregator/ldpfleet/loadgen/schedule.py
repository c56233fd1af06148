"""When each simulated device publishes, the way the devices it simulates do (spec §6): its own
first-publish delay, U[0, delivery.spread_s), and, in a campaign with acknowledgements, its
own re-send timer, retry_s x U[0.5, 1.5) after each publish, doubling up to retry_max_s, until
its acknowledgement arrives. Never one fleet-wide burst of re-sends: a timer shared by
thousands of devices recreates the burst it retries.

`DeviceSchedule` holds one due time per device (arrays: 8 bytes each, plus the wait);
`publish_on_schedule` publishes whatever is due, in chunks, through the bounded window of the
load generator's publisher, reads acknowledgements in between and says how far it is on a
status callback every STATUS_EVERY seconds.
"""
import time

import numpy as np

CHUNK = 1 << 14
STATUS_EVERY = 5.0


class DeviceSchedule:
    """Due times (time.monotonic()) of the `active` fleet indices (of `size`); the others are
    never due. `delivery`: the campaign's (spec §5.4); `rng`: the load generator's own
    randomness (timing is not part of a seeded run's reproducible reports)."""

    def __init__(self, size: int, active: np.ndarray, delivery: dict, rng, start: float):
        delivery = delivery or {}
        self.rng = rng
        self.spread = float(delivery.get("spread_s", 0))
        self.acks = bool(delivery.get("ack", False))
        self.retry_s = float(delivery.get("retry_s", 0) or 0)
        self.retry_max_s = float(delivery.get("retry_max_s", 0) or 0)
        self.due = np.full(size, np.inf)
        self.due[active] = start + rng.random(len(active)) * self.spread
        self.last_first = float(self.due[active].max()) if len(active) else start
        """When the last first publish is due, then was made (ack_wait counts from it)."""
        self.wait = np.full(size, self.retry_s)
        self.sent = np.zeros(size, bool)
        self.active = self.unsent = len(active)
        self.resent = 0

    def take(self, now: float, acked: np.ndarray = None, limit: int = CHUNK) -> np.ndarray:
        """Up to `limit` devices due at `now`, earliest first; acknowledged ones never again."""
        due = np.flatnonzero(self.due <= now)
        if acked is not None and due.size:
            done = acked[due]
            self.due[due[done]] = np.inf
            due = due[~done]
        if due.size > limit:
            due = due[np.argpartition(self.due[due], limit - 1)[:limit]]
        return due

    def published(self, devices: np.ndarray, now: float):
        """`devices` were just published: with acknowledgements their next re-send is due after
        their own wait (which then doubles), else never."""
        first = ~self.sent[devices]
        if first.any():
            self.last_first = max(self.last_first, now)
        self.unsent -= int(first.sum())
        self.resent += int((~first).sum())
        self.sent[devices] = True
        if not self.acks:
            self.due[devices] = np.inf
            return
        wait = self.wait[devices]
        self.due[devices] = now + wait * (0.5 + self.rng.random(len(devices)))
        self.wait[devices] = np.minimum(wait * 2, self.retry_max_s)

    def next_due(self) -> float:
        return float(self.due.min()) if self.due.size else np.inf


def publish_on_schedule(publisher, schedule: DeviceSchedule, topics_of, reports: np.ndarray,
                        tracker=None, ack_wait: float = 0.0, status=None, tick=None,
                        deadline: float = None):
    """Publish each device's report when the schedule says, until every device has published
    and, with a `tracker` (acknowledgements), every report is acknowledged or `ack_wait`
    seconds have passed since the last first publish, or the `deadline` (time.monotonic(): a
    recurring campaign's round closes, spec §3.4) has come. `topics_of(indices)`: their topics;
    `status(line)`: progress every STATUS_EVERY seconds; `tick(k)`: k first publishes."""
    started = last_status = time.monotonic()
    while True:
        now = time.monotonic()
        due = schedule.take(now, tracker.acked if tracker is not None else None)
        if due.size:
            first = int((~schedule.sent[due]).sum())
            publisher.publish_rows(topics_of(due), reports[due])
            schedule.published(due, time.monotonic())
            if tick and first:
                tick(first)
            continue
        pending = tracker.pending_count() if tracker is not None else 0
        if not schedule.unsent and (not pending or now >= schedule.last_first + ack_wait
                                    or (deadline is not None and now >= deadline)):
            return
        if status is not None and now - last_status >= STATUS_EVERY:
            last_status = now
            status(_progress(schedule, tracker, now - started))
        publisher.pump(min(0.05, max(0.0, schedule.next_due() - now)))


def _progress(schedule: DeviceSchedule, tracker, elapsed: float) -> str:
    parts = []
    if schedule.unsent:
        parts.append("%d of %d not yet published (first publishes spread over %g s)"
                     % (schedule.unsent, schedule.active, schedule.spread))
    if tracker is not None:
        parts.append("%d/%d acknowledged, %d re-sent" % (tracker.acked_count(), tracker.expected,
                                                         schedule.resent))
    return "%.0f s: %s" % (elapsed, "; ".join(parts) or "waiting")
