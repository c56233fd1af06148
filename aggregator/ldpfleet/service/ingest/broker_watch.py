"""Loss the aggregator cannot see in its own counters: the broker's drops.

A broker acknowledges a QoS 1 publish to the device and may still drop it before the
subscriber gets it, when the subscriber's queue is full (Mosquitto's `max_queued_messages`,
default 1000, and `max_queued_bytes`). Mosquitto counts such drops in its `$SYS` tree; `serve`
subscribes to that counter, exports it (`/metrics`: `ldpfleet_broker_messages_dropped`, the
broker's own count, and `ldpfleet_broker_drops_seen`, the rise while this serve watched), keeps
it in the state file for `campaign status`, and logs an error naming the settings to change.

Other brokers expose the same number elsewhere: EMQX as the `messages.dropped` metric
(`$SYS/brokers/<node>/metrics/messages/dropped`, also `emqx_messages_dropped` in its
Prometheus endpoint); HiveMQ as `com.hivemq.messages.dropped.count` (its Prometheus extension).
With acknowledgements on (spec §6) a dropped report is re-sent by its device, so a drop costs
time, not a report; with them off it is lost.
"""
import json
import logging
import threading
import time

log = logging.getLogger("ldpfleet.service")

SYS_DROPPED = "$SYS/broker/publish/messages/dropped"
META_KEY = "broker.drops"
OWN_DROPS_FOR_S = 60.0
"""How long drops of serve's own start-up broker-check are expected on the counter (Mosquitto
publishes it every sys_interval, 10 s by default)."""
ADVICE = ("raise max_queued_messages and max_queued_bytes in mosquitto.conf (`ldpfleet "
          "broker-config` writes them sized for the fleet; `ldpfleet broker-check` measures "
          "them) and keep the campaigns' delivery.ack on so devices re-send")


class BrokerDrops:
    """The broker's drop counter as last seen, and how much it rose while we watched (a broker
    restart resets it: the rise then counts from 0). The last value is kept in the state file,
    so drops while serve was down (killed, restarting) count at its next start."""

    def __init__(self, store, metrics=None):
        self.store = store
        self.metrics = metrics
        stored = drops_in_state(store) or {}
        self.last = stored.get("broker_dropped")
        self.seen = stored.get("seen_by_serve", 0)
        self._pending = None
        self._written = None
        self._lock = threading.Lock()
        self._holding = False
        self._held = 0
        self._own = 0
        self._own_until = 0.0

    def hold(self):
        """serve's own broker-check is about to overflow a queue on purpose: rises of the
        counter are kept aside, not reported, until `release`."""
        with self._lock:
            self._holding = True

    def release(self, own_drops: int):
        """The check is over and the broker dropped `own_drops` of its own messages: that much
        of the counter's rise (now or within OWN_DROPS_FOR_S) is the check's, not reports."""
        with self._lock:
            self._holding = False
            self._own += max(0, own_drops)
            self._own_until = time.monotonic() + OWN_DROPS_FOR_S

    def observe(self, payload: bytes):
        """A message on SYS_DROPPED (called from the MQTT callback: only records)."""
        try:
            self._pending = int(payload.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            log.warning("unreadable %s payload %r", SYS_DROPPED, payload[:32])

    def flush(self):
        """Account for the last observed value: log a rise, export it, keep it in the state."""
        value, self._pending = self._pending, None
        if value is None:
            return
        if self.last is not None:
            rise = value - self.last if value >= self.last else value
            with self._lock:
                if self._holding:
                    self._held, rise = self._held + max(rise, 0), 0
                else:
                    rise, self._held = rise + self._held, 0
                    if time.monotonic() > self._own_until:
                        self._own = 0
                    own = min(max(rise, 0), self._own)
                    self._own -= own
                    rise -= own
            if rise > 0:
                self.seen += rise
                log.error("the broker dropped %d messages (its %s is now %d, %d since serve "
                          "first watched it): a subscriber's queue was full. %s", rise,
                          SYS_DROPPED, value, self.seen, ADVICE)
        self.last = value
        if self.metrics is not None:
            self.metrics.broker_drops(value, self.seen)
        state = (value, self.seen)
        if state != self._written:
            self.store.set_meta(META_KEY, json.dumps(
                {"broker_dropped": value, "seen_by_serve": self.seen, "time": int(time.time())}))
            self._written = state


def drops_in_state(store) -> dict:
    """What `campaign status` shows: the last drop counter serve recorded, or None."""
    raw = store.meta(META_KEY)
    return json.loads(raw) if raw else None
