"""End-to-end acknowledgements for the simulated devices (spec §6): the load generator does what
a device does, so a pilot sees loss instead of assuming none.

It subscribes to the campaign's ack topics before publishing, keeps every simulated report, and
re-sends the unacknowledged ones after retry_s x U[0.5, 1.5), doubling up to retry_max_s (the
campaign's `delivery`), until all are acknowledged or its own deadline passes. A broker that
acknowledged a publish and then dropped it shows up here as a re-send, and, if it keeps
dropping, as `unacknowledged` in the result.

Given the fleet's ack root key, or its own login's key (ackkeys.py), it takes only MAC'd acks
whose tag verifies under each simulated device's key, as a provisioned device does; without a
key, a plain ack or the first 12 bytes of a MAC'd one."""
import threading
import time

import numpy as np

from .. import ackkeys, protocol


class AckTracker:
    """Acknowledgements of the reports of simulated devices `<prefix>-<i>`, i < devices (the
    prefix is `<login>/<name>` for a load generator that logs in, spec §4)."""

    def __init__(self, campaign: str, prefix: str, devices: int, report_size: int,
                 delivery: dict, rng, ack_root: bytes = None, ack_login_key: bytes = None):
        self.campaign = campaign
        self.prefix = prefix + "-"
        self.ack_root, self.ack_login_key = ack_root, ack_login_key
        self.delivery = delivery
        self.rng = rng
        self.reports = np.zeros((devices, report_size), np.uint8)
        self.sent = np.zeros(devices, bool)
        self.acked = np.zeros(devices, bool)
        self.statuses = {"accepted": 0, "duplicate": 0, "rejected": 0}
        self.ignored = 0
        self.resent = 0
        self._lock = threading.Lock()

    @property
    def topic_filter(self) -> str:
        login, _, _ = self.prefix.rpartition("/")
        return "ldp/%s/a/%s+" % (self.campaign, login + "/" if login else "")

    def keep(self, device_indices, reports: np.ndarray):
        """Remember the reports about to be published for these devices (fleet indices)."""
        with self._lock:
            self.reports[device_indices] = reports
            self.sent[device_indices] = True

    def on_message(self, topic: str, payload: bytes):
        """An ack on ldp/<campaign>/a/<prefix><i> for the report kept for i (the publisher's
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
            if not 0 <= i < self.sent.size or not self.sent[i] or \
                    not ackkeys.accepts(self.device_key(device), payload, self.reports[i].tobytes()):
                self.ignored += 1
                return
            if not self.acked[i]:
                self.acked[i] = True
                self.statuses[("accepted", "duplicate", "rejected")[ack[1]]] += 1

    def device_key(self, device: str):
        """The simulated device's ack key (its topic's device id), or None without a key."""
        if self.ack_root is not None:
            return ackkeys.device_key(self.ack_root, device)
        if self.ack_login_key is not None:
            return ackkeys.device_key_under_login(self.ack_login_key, device.partition("/")[2])
        return None

    def pending(self) -> np.ndarray:
        with self._lock:
            return np.flatnonzero(self.sent & ~self.acked)

    def _wait(self, seconds: float) -> float:
        return seconds * (0.5 + self.rng.random())

    def resend_until_acked(self, publisher, deadline: float) -> int:
        """Re-send what is unacknowledged with the campaign's backoff until every report is
        acknowledged or `deadline` (time.monotonic()); returns the unacknowledged count."""
        wait = float(self.delivery["retry_s"])
        due = time.monotonic() + self._wait(wait)
        topic = "ldp/%s/r/%s" % (self.campaign, self.prefix)
        while True:
            left = self.pending()
            now = time.monotonic()
            if left.size == 0 or now >= deadline:
                return int(left.size)
            if now < due:
                publisher.pump(min(0.05, due - now))  # the acks arrive while it reads
                continue
            publisher.publish_rows([topic + str(i) for i in left.tolist()], self.reports[left])
            self.resent += int(left.size)
            wait = min(wait * 2, float(self.delivery["retry_max_s"]))
            due = time.monotonic() + self._wait(wait)

    def to_json(self, unacknowledged: int) -> dict:
        return {"acknowledged": int(self.acked.sum()), "unacknowledged": unacknowledged,
                "resent": self.resent, "ack_status": dict(self.statuses),
                "acks_ignored": self.ignored}
