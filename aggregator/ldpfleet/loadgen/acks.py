"""End-to-end acknowledgements for the simulated devices (spec §6): the load generator does what
a device does, so a pilot sees loss instead of assuming none.

It subscribes to the campaign's ack topics before publishing and matches every acknowledgement
against the report it published for that device; its re-sends follow each device's own timer
(schedule.py). A broker that acknowledged a publish and then dropped it shows up as a re-send,
and, if it keeps dropping, as `unacknowledged` in the result.

Given the fleet's ack root key, or its own login's key (ackkeys.py), it takes only MAC'd acks
whose tag verifies under each simulated device's key, as a provisioned device does; without a
key, a plain ack or the first 12 bytes of a MAC'd one."""
import threading

import numpy as np

from ..core import ackkeys, protocol


class AckTracker:
    """Acknowledgements of the reports of simulated devices `<prefix>-<i>`, i a fleet index
    (the prefix is `<login>/<name>` for a load generator that logs in, spec §4). `reports`:
    every device's report (fleet index -> row); `active`: the fleet indices that report in
    this phase."""

    def __init__(self, campaign: str, prefix: str, reports: np.ndarray, active: np.ndarray,
                 ack_root: bytes = None, ack_login_key: bytes = None):
        self.campaign = campaign
        self.prefix = prefix + "-"
        self.ack_root, self.ack_login_key = ack_root, ack_login_key
        self.reports = reports
        self.active = np.zeros(len(reports), bool)
        self.active[active] = True
        self.expected = int(self.active.sum())
        self.acked = np.zeros(len(reports), bool)
        self.statuses = {"accepted": 0, "duplicate": 0, "rejected": 0}
        self.ignored = 0
        self._lock = threading.Lock()

    @property
    def topic_filter(self) -> str:
        login, _, _ = self.prefix.rpartition("/")
        return "ldp/%s/a/%s+" % (self.campaign, login + "/" if login else "")

    def on_message(self, topic: str, payload: bytes):
        """An ack on ldp/<campaign>/a/<prefix><i> for the report of device i (the publisher's
        callback)."""
        device = topic[len("ldp/%s/a/" % self.campaign):]
        ack = protocol.parse_ack(bytes(payload[:protocol.ACK_SIZE])) \
            if len(payload) in (protocol.ACK_SIZE, ackkeys.MAC_ACK_SIZE) else None
        i = -1
        if ack is not None and device.startswith(self.prefix):
            try:
                i = int(device[len(self.prefix):])
            except ValueError:
                i = -1
        with self._lock:
            if not 0 <= i < self.active.size or not self.active[i] or \
                    not ackkeys.accepts(self.device_key(device), payload, self.reports[i].tobytes()):
                self.ignored += 1
                return
            if not self.acked[i]:
                self.acked[i] = True
                self.statuses[("accepted", "duplicate", "rejected")[ack[1]]] += 1

    def acked_count(self) -> int:
        return int(self.acked.sum())

    def device_key(self, device: str):
        """The simulated device's ack key (its topic's device id), or None without a key."""
        if self.ack_root is not None:
            return ackkeys.device_key(self.ack_root, device)
        if self.ack_login_key is not None:
            return ackkeys.device_key_under_login(self.ack_login_key, device.partition("/")[2])
        return None

    def pending(self) -> np.ndarray:
        """The fleet indices whose report is not acknowledged yet."""
        with self._lock:
            return np.flatnonzero(self.active & ~self.acked)

    def pending_count(self) -> int:
        return self.expected - self.acked_count()

    def to_json(self, resent: int) -> dict:
        return {"acknowledged": self.acked_count(), "unacknowledged": self.pending_count(),
                "resent": resent, "ack_status": dict(self.statuses),
                "acks_ignored": self.ignored}
