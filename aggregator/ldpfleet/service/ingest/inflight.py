"""The broker's in-flight window toward `serve`: how many QoS 1 reports it sends before it waits
for serve's PUBACKs. serve acknowledges only after a batch is committed, so once that many are
pending nothing more can arrive until it commits: waiting for the broker to go idle then only
costs time (behind Mosquitto's packaged `max_inflight_messages 20`, a 20 ms idle wait per 20
reports capped ingest near 1,000 reports/s).

- MQTT 5: serve announces a Receive Maximum at CONNECT; Mosquitto (2.0.11 checked) then sends
  up to that many, whatever its own `max_inflight_messages`. A broker may still grant fewer
  (EMQX caps it at its `max_inflight`), so the window is also learned, as in 3.1.1.
- MQTT 3.1.1 has no way to announce or read the window: it is learned. When the broker goes idle
  (nothing for IDLE_FLUSH_S) `LEARN_STREAK` times in a row with the same number of un-acknowledged
  reports pending, that number is taken as the window; a read that brings more than it proves it
  wrong and it is forgotten. A wrong (too small) window only makes batches smaller; it never
  delays or loses a report.
"""

LEARN_STREAK = 3


class InflightWindow:
    """`full(unacked)`: nothing more can arrive before serve acknowledges. `announced`: the
    Receive Maximum serve sent (MQTT 5), None in 3.1.1."""

    def __init__(self, announced: int = None):
        self.announced = announced
        self.learned = None
        self._idle_at = None
        self._streak = 0

    @property
    def limit(self):
        """The window in effect (None: unknown, batches close on size, age or idleness)."""
        known = [w for w in (self.announced, self.learned) if w]
        return min(known) if known else None

    def full(self, unacked: int) -> bool:
        limit = self.limit
        return limit is not None and unacked >= limit

    def saw(self, unacked: int):
        """After every read: more pending than the learned window disproves it."""
        if self.learned is not None and unacked > self.learned:
            self.learned, self._idle_at, self._streak = None, None, 0

    def idle(self, unacked: int) -> bool:
        """The broker sent nothing for a whole idle wait with `unacked` reports pending; True
        when that makes a newly learned window."""
        if unacked <= 0:
            return False
        if unacked == self._idle_at:
            self._streak += 1
        else:
            self._idle_at, self._streak = unacked, 1
        if (self._streak >= LEARN_STREAK and self.learned != unacked
                and (self.announced is None or unacked < self.announced)):
            self.learned = unacked
            return True
        return False

    def reset(self):
        """A new connection: the broker (or its configuration) may have changed."""
        self.learned, self._idle_at, self._streak = None, None, 0
