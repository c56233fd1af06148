"""The ingest loop of `ldpfleet serve`: MQTT reports -> validated, deduplicated, folded into
per-campaign sketches, committed, acknowledged (protocol_spec/v2 §3, §4).

Subscription: `ldp/+/r/+` at QoS 1 with a persistent session and a fixed client id, paho-mqtt
2.x with `manual_ack=True`. MQTT 3.1.1 with clean_session=False by default (paho decodes the
MQTT 5 properties of every PUBLISH, which made ingest ~1.6x slower here); `protocol=5` uses
clean_start=False plus a non-zero Session Expiry Interval.

Batch cycle (`Ingestor.process_batch` + `Ingestor._flush`), at `batch_size` messages or
`batch_ms` after the first pending one, whichever comes first:
1. one SQLite write transaction: reload campaigns if another process changed them;
2. route every message by topic to its campaign, check headers and sizes with the one
   header rule (`protocol.header_faults`), then the body fields of the phase's mechanism;
3. dedupe valid reports per (campaign, phase, device id): the same seq again is a
   `duplicate`, another seq from a device that already reported in this phase is a
   `second_report` (devices send one report per phase, spec §6);
4. fold the accepted reports of each campaign+phase into its sketch in ONE `sketch.update`
   (one C-kernel call);
5. write sketches, dedupe keys and counters, COMMIT;
6. only then PUBACK every message of the batch.

Why this loses nothing and counts nothing twice across `kill -9` (or a crash anywhere):
the broker keeps every QoS 1 message of our persistent session until we PUBACK it, and we
PUBACK only after the transaction holding that message's effect (sketch increment, dedupe
key, counter) is durably committed (`synchronous=FULL`). Killed before COMMIT: SQLite rolls
the half-written transaction back, nothing of the batch is in the state, and the broker
redelivers all of its messages after we reconnect with the same client id. Killed after
COMMIT but before (some of) the PUBACKs: the broker redelivers those messages, but their
dedupe keys were committed atomically with their sketch increments, so each one is now a
`duplicate` and is not folded again. The sketch is therefore always exactly the fold of
every accepted report once. (Counters of reasons are as exact; only `received` and
`duplicate` also count such redeliveries.) The same holds when the connection or the broker
drops: the pending, uncommitted batch is discarded and redelivered by the broker (its
persistence keeps the session across a restart).

Rejections are counted by reason (see `REASONS`) and logged at a bounded rate; nothing a
device sends can stop the loop. A lost connection is retried with capped backoff.

Why one module of ~500 lines: the no-loss argument (commit before acknowledge, dedupe in the
same transaction, every message counted once under one reason) is read top to bottom here; the
header rule, the bodies and the store live in `protocol`, the mechanisms and `store`.
"""
import json
import logging
import os
import select
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .. import config as cfgmod
from .. import protocol
from ..config import NAME_RE, acknowledged
from ..errors import ConfigError
from ..signing import read_signing_key
from ..mechanisms.base import ERROR_FIELDS, Sketch, first_faults
from .. import mqtt
from .broker_watch import SYS_DROPPED, BrokerDrops
from .campaigns import status_document
from .store import GLOBAL, Store

log = logging.getLogger("ldpfleet.service")

REPORT_TOPIC = "ldp/+/r/#"
"""Devices' `ldp/<campaign>/r/<id>` and load generators' `ldp/<campaign>/r/<login>/<id>` (spec §4)."""
RECEIVED = "received"
ACCEPTED = "accepted"
DUPLICATE = "duplicate"
SECOND_REPORT = "second_report"
UNKNOWN_CAMPAIGN = "unknown_campaign"
CLOSED_CAMPAIGN = "closed_campaign"
BAD_TOPIC = "bad_topic"
INTERNAL_ERROR = "internal_error"
PHASE_NOT_OPEN = "phase_not_open"
WRONG_PHASE_DEVICE = "wrong_phase_device"
TOO_LARGE = "too_large"
REASONS = (ACCEPTED, DUPLICATE, SECOND_REPORT, UNKNOWN_CAMPAIGN, CLOSED_CAMPAIGN, BAD_TOPIC,
           INTERNAL_ERROR, PHASE_NOT_OPEN, WRONG_PHASE_DEVICE, TOO_LARGE) + tuple(ERROR_FIELDS)
"""Every message is counted once under `received` and once under exactly one of these.
The protocol field names (`size`, `version`, `phase`, ...) are malformed reports, checked in
this order: version, phase (1..the campaign's number of phases), `phase_not_open` (a phase-2
report before the phase-2 message, `ldpfleet campaign advance`), mechanism, flags,
campaign_id, size, then `wrong_phase_device` (LDPLCM, spec §5: a device reports only in the
phase the public rule `ldplcm.reports_in_phase` puts it in), then
the body fields of `mech.validate`. `too_large`: a payload longer than every open campaign's
report (and than SMALL_PAYLOAD), dropped when it arrives, before it is buffered: what a device
sends cannot grow serve's memory beyond batch_size x the largest report."""
SMALL_PAYLOAD = 4096
"""Payloads up to this size are always buffered and classified (unknown campaigns included)."""
REJECTIONS = tuple(r for r in REASONS if r != ACCEPTED)


def _report_size(camp, phase: int) -> int:
    """The report size of an open campaign phase (0 if its mechanism cannot be built: its
    reports are then rejected anyway)."""
    try:
        return camp.mechanism(phase).report_size
    except Exception:  # noqa: BLE001 (the header rule counts what this campaign receives)
        return 0


def default_client_id(state: str, group: str = None) -> str:
    """The persistent session's client id when `--client-id` is not given. Alone: `ldpfleet-agg-`
    + 8 hex digits of SHA-256 of the state file's absolute path (or of the PostgreSQL URL
    without its password): stable across restarts (the session is resumed), different for every
    state (two serves on one broker never take each other's session). In a worker group:
    `ldpfleet-<group>-<hostname>` (one worker per machine; more on one machine need their own
    `--client-id`)."""
    import hashlib
    import socket
    from .store_sql import is_postgres, redact
    if group:
        host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
        return "ldpfleet-%s-%s" % (group, host or "host")
    where = redact(state) if is_postgres(state) else os.path.abspath(state)
    return "ldpfleet-agg-" + hashlib.sha256(where.encode("utf-8")).hexdigest()[:8]


TAKEOVER_WINDOW = 60.0
"""Seconds in which repeated drops right after connecting mean another client uses our id."""


@dataclass
class IngestOptions:
    client_id: str = "ldpfleet-aggregator"
    batch_size: int = 2000
    batch_ms: float = 200.0
    session_expiry: int = 7 * 86400
    keepalive: int = 30
    status_interval: float = 30.0
    """Seconds between retained status publications of open campaigns (0: never)."""
    protocol: int = 4
    """4 = MQTT 3.1.1 (clean_session=False) or 5 (clean_start=False + Session Expiry
    Interval `session_expiry`). The broker must let a whole batch be in flight to us
    un-acknowledged, or batches close on `batch_ms` only (Mosquitto 2.0.11 did with its
    defaults in our runs; `max_inflight_messages 0` makes sure)."""
    log_burst: int = 5
    log_period: float = 10.0
    group: str = None
    """`serve --group NAME`: subscribe through the MQTT shared subscription
    `$share/NAME/ldp/+/r/#` (one of the group's workers gets each report; PostgreSQL state)."""
    max_packet_bytes: int = 1 << 20
    """MQTT 5: the Maximum Packet Size announced at CONNECT (the broker drops larger messages
    for us instead of sending them). Both versions drop payloads larger than every open
    campaign's report on arrival (`too_large`)."""


class BoundedLog:
    """At most `burst` lines per reason per `period` seconds; the rest are summarised."""

    def __init__(self, logger, burst: int = 5, period: float = 10.0):
        self.logger, self.burst, self.period = logger, burst, period
        self.windows = {}

    def __call__(self, reason: str, message: str, *args):
        now = time.monotonic()
        start, shown, hidden = self.windows.get(reason, (now, 0, 0))
        if now - start >= self.period:
            if hidden:
                self.logger.warning("%s: %d more like this in the last %.0f s", reason, hidden,
                                    now - start)
            start, shown, hidden = now, 0, 0
        if shown < self.burst:
            self.logger.warning("%s: " + message, reason, *args)
            shown += 1
        else:
            hidden += 1
        self.windows[reason] = (start, shown, hidden)


def parse_report_topic(topic):
    """(campaign, device) of `ldp/<campaign>/r/<device-id>` or of a load generator's
    `ldp/<campaign>/r/<login>/<id>` (device "<login>/<id>", spec §4), else None."""
    if topic is None:
        return None
    parts = topic.split("/")
    if (len(parts) not in (4, 5) or parts[0] != "ldp" or parts[2] != "r"
            or not all(NAME_RE.match(p) for p in parts[1:2] + parts[3:])):
        return None
    return parts[1], "/".join(parts[3:])


class Ingestor:
    """Validate/dedupe/fold/commit batches (`process_batch`, no MQTT needed) and the MQTT
    loop around it (`run`). One Ingestor per state file; it owns the file's sketches."""

    def __init__(self, state_url: str, broker: mqtt.BrokerSettings = None,
                 options: IngestOptions = None, metrics=None):
        self.options = options or IngestOptions()
        self.store = Store(state_url, worker=self.options.client_id)
        self.broker = broker
        self.metrics = metrics
        self.bounded_log = BoundedLog(log, self.options.log_burst, self.options.log_period)
        self._campaigns = {}
        self._data_version = None
        self._sketches = {}
        self._pending = []
        self._first_pending = None
        self._received = 0
        self._connected = False
        self._ready = False
        self._stop = threading.Event()
        self._status_due = 0.0
        self._status_sent = {}
        self._status_keys = {}
        self._connected_at = 0.0
        self._quick_drops = []
        self._takeover_logged = -TAKEOVER_WINDOW
        self._status = {}
        self.acks = []
        self.broker_drops = BrokerDrops(self.store, metrics)
        self._report_mid = None
        self._client_ack = []
        self._largest = SMALL_PAYLOAD

    # --- campaigns and sketches --------------------------------------------------------
    def _refresh_campaigns(self):
        version = self.store.data_version()
        if version == self._data_version and self._campaigns:
            return
        fresh = {c.name: c for c in self.store.campaigns()}
        for key in list(self._sketches):
            old, new = self._campaigns.get(key[0]), fresh.get(key[0])
            if (new is None or old is None or old.config_payload != new.config_payload
                    or old.phase2_payload != new.phase2_payload):
                del self._sketches[key]
        self._campaigns = fresh
        self._data_version = version
        self._largest = max([SMALL_PAYLOAD] + [_report_size(camp, phase)
                                               for camp in fresh.values() if camp.open
                                               for phase in range(1, camp.phase + 1)])

    def _sketch(self, campaign, phase):
        key = (campaign.name, phase)
        if key not in self._sketches:
            stored = self.store.worker_sketch_blob(campaign.name, phase)
            if stored is None:
                self._sketches[key] = campaign.mechanism(phase).new_sketch()
            else:
                self._sketches[key] = Sketch.deserialize(stored[1])
        return self._sketches[key]

    # --- one batch ---------------------------------------------------------------------
    def _route(self, topic):
        """(counter key, reason) of a message no campaign takes, or (campaign, None)."""
        where = parse_report_topic(topic)
        if where is None:
            return GLOBAL, BAD_TOPIC
        name = where[0]
        camp = self._campaigns.get(name)
        if camp is None:
            return GLOBAL, UNKNOWN_CAMPAIGN
        if not camp.open:
            return name, CLOSED_CAMPAIGN
        return name, None

    def process_batch(self, messages) -> dict:
        """Validate, dedupe, fold and COMMIT one batch of (topic, payload) messages.

        Top-down: route by topic (`_route`), the header rule per campaign
        (`protocol.header_faults`), then per campaign phase the body fields, dedupe and one
        sketch update (`_fold_group`), then the store. Returns {(campaign or "", reason):
        count} of what was committed (every message once under `received` and once under
        its outcome). Raises only if the store fails, in which case nothing of the batch is
        committed and the in-memory sketches are reset to the stored ones."""
        counts = defaultdict(int)
        self._status = {}
        self.acks = []
        try:
            with self.store.batch():
                self._refresh_campaigns()
                routed = defaultdict(list)
                for index, (topic, payload) in enumerate(messages):
                    key, reason = self._route(topic)
                    counts[(key, RECEIVED)] += 1
                    if payload is None:  # dropped on arrival (_on_message): too large
                        counts[(key, TOO_LARGE)] += 1
                        continue
                    if reason is None:
                        routed[key].append(index)
                    else:
                        counts[(key, reason)] += 1
                        self._status[index] = protocol.ACK_REJECTED
                        self.bounded_log(reason, "topic %r, %d bytes", topic, len(payload))
                groups = {}
                for name, indices in routed.items():
                    groups.update(self._check_headers(name, indices, messages, counts))
                touched = []
                for (name, phase), indices in groups.items():
                    self.store.conn.execute("SAVEPOINT fold_group")
                    try:
                        outcome, seen = self._fold_group(name, phase, indices, messages)
                        self.store.conn.execute("RELEASE SAVEPOINT fold_group")
                    except Exception as exc:  # a bug must not wedge the queue on one report
                        self.store.conn.execute("ROLLBACK TO SAVEPOINT fold_group")
                        for index in indices:
                            self._status.pop(index, None)
                        self._sketches.pop((name, phase), None)
                        counts[(name, INTERNAL_ERROR)] += len(indices)
                        self.bounded_log(INTERNAL_ERROR, "campaign %s phase %d: %r", name, phase, exc)
                        continue
                    for reason, n in outcome.items():
                        counts[(name, reason)] += n
                    if seen:
                        touched.append((name, phase))
                for name, phase in touched:
                    sketch = self._sketches[(name, phase)]
                    self.store.put_sketch(name, phase, sketch.n, sketch.serialize())
                self.store.add_counts(counts)
        except BaseException:
            self._sketches.clear()
            raise
        self.acks = self._acknowledgements(messages)
        return dict(counts)

    def _acknowledgements(self, messages) -> list:
        """(topic, payload) of the spec §6 acknowledgements of a committed batch: one per
        report with a device topic, a header and a campaign whose config asks for them, with
        its outcome. Transient rejections (`phase_not_open`, `internal_error`) get none: the
        device re-sends."""
        acks = []
        for index, status in self._status.items():
            topic, payload = messages[index]
            where = parse_report_topic(topic)
            if where is None or len(payload) < protocol.HEADER_SIZE:
                continue
            camp = self._campaigns.get(where[0])
            if camp is None or not acknowledged(camp.config):
                continue
            acks.append((protocol.ack_topic(*where), protocol.ack_for(payload, status)))
        return acks

    def _check_headers(self, name, indices, messages, counts) -> dict:
        """The header rule over one campaign's messages: faults counted into `counts`;
        returns {(campaign, phase): indices} of the rest."""
        try:
            faults, phases = protocol.header_faults([messages[i][1] for i in indices],
                                                    self._campaigns[name].header_rule)
        except Exception as exc:  # e.g. a phase mechanism that cannot be built
            counts[(name, INTERNAL_ERROR)] += len(indices)
            self.bounded_log(INTERNAL_ERROR, "campaign %s: %r", name, exc)
            return {}
        groups = defaultdict(list)
        for index, fault, phase in zip(indices, faults.tolist(), phases.tolist()):
            if fault < 0:
                groups[(name, phase)].append(index)
            else:
                reason = protocol.HEADER_FAULTS[fault]
                counts[(name, reason)] += 1
                if reason != PHASE_NOT_OPEN:
                    self._status[index] = protocol.ACK_REJECTED
                self.bounded_log(reason, "topic %r, %d bytes", messages[index][0],
                                 len(messages[index][1]))
        return groups

    def _fold_group(self, name, phase, indices, messages):
        """Body validation, dedupe and ONE sketch update for the candidate reports of one
        campaign phase. Returns ({reason: count}, dedupe rows of the accepted reports)."""
        camp = self._campaigns[name]
        mech = camp.mechanism(phase)
        outcome = defaultdict(int)
        indices = self._sampled_devices(camp, phase, indices, messages, outcome)
        if not indices:
            return outcome, []
        arr = np.frombuffer(b"".join(messages[i][1] for i in indices), np.uint8).reshape(
            len(indices), mech.report_size)
        codes = first_faults(mech.validate_bodies(arr[:, protocol.HEADER_SIZE:]),
                             np.full(len(indices), -1, np.int16))
        for row in np.flatnonzero(codes >= 0).tolist():
            self._status[indices[row]] = protocol.ACK_REJECTED
        for code, hits in zip(*np.unique(codes[codes >= 0], return_counts=True)):
            outcome[ERROR_FIELDS[code]] += int(hits)
            self.bounded_log(ERROR_FIELDS[code], "campaign %s: %d reports", name, int(hits))
        valid = np.flatnonzero(codes < 0)
        seqs = arr[valid, 8:12].copy().view("<u4").ravel()
        devices = [parse_report_topic(messages[indices[r]][0])[1] for r in valid]
        known = self.store.seen_seqs(name, phase, set(devices))
        fresh = []
        for row, device, seq in zip(valid.tolist(), devices, seqs.tolist()):
            prior = known.get(device)
            if prior is None:
                known[device] = seq
                fresh.append((row, device, seq))
            else:
                self._classify_seen(name, phase, indices[row], device, seq, prior, outcome)
        claimed = self.store.claim_seen([(name, phase, d, q) for _r, d, q in fresh])
        keep, seen = [], []
        lost = [(r, d, q) for r, d, q in fresh if d not in claimed]
        winners = self.store.seen_seqs(name, phase, {d for _r, d, _q in lost}) if lost else {}
        for row, device, seq in fresh:
            if device in claimed:
                seen.append((name, phase, device, seq))
                keep.append(row)
                self._status[indices[row]] = protocol.ACK_ACCEPTED
            else:  # another worker committed this device's report first (PostgreSQL)
                self._classify_seen(name, phase, indices[row], device, seq, winners.get(device),
                                    outcome)
        if keep:
            self._sketch(camp, phase).update(np.ascontiguousarray(arr[keep]))
            outcome[ACCEPTED] += len(keep)
        return outcome, seen

    def _classify_seen(self, name, phase, index, device, seq, prior, outcome):
        """A report from a device whose report for this phase is already claimed: the same
        nonce again is a `duplicate` (a redelivery), another one a `second_report`."""
        if prior == seq:
            outcome[DUPLICATE] += 1
            self._status[index] = protocol.ACK_DUPLICATE
        else:
            outcome[SECOND_REPORT] += 1
            self._status[index] = protocol.ACK_REJECTED
            self.bounded_log(SECOND_REPORT, "campaign %s phase %d device %s nonce %s after %s",
                             name, phase, device, seq, prior)

    def _sampled_devices(self, camp, phase, indices, messages, outcome):
        """The indices whose device the public sampling rule puts in `phase`
        (`ldplcm.reports_in_phase`, spec §5); the others are counted as `wrong_phase_device`."""
        if camp.sample_rate_ppm is None:
            return indices
        from ..protocols.ldplcm import reports_in_phase
        devices = [parse_report_topic(messages[i][0])[1] for i in indices]
        in_phase = reports_in_phase(devices, camp.config, phase)
        wrong = int(np.count_nonzero(~in_phase))
        for i, ok in zip(indices, in_phase.tolist()):
            if not ok:
                self._status[i] = protocol.ACK_REJECTED
        if wrong:
            outcome[WRONG_PHASE_DEVICE] += wrong
            self.bounded_log(WRONG_PHASE_DEVICE, "campaign %s phase %d: %d reports from devices "
                             "the sampling rule puts in the other phase", camp.name, phase, wrong)
        return [i for i, ok in zip(indices, in_phase.tolist()) if ok]

    @property
    def report_subscription(self) -> str:
        """REPORT_TOPIC, or its shared subscription `$share/<group>/...` for a worker group."""
        group = self.options.group
        return "$share/%s/%s" % (group, REPORT_TOPIC) if group else REPORT_TOPIC

    # --- MQTT loop ---------------------------------------------------------------------
    def stop(self):
        self._stop.set()

    def _on_connect(self, client, _userdata, _flags, reason, _props):
        if reason.is_failure:
            log.error("broker refused the connection: %s", reason)
            return
        self._connected = True
        self._connected_at = time.monotonic()
        present = getattr(_flags, "session_present", None)
        log.info("connected to %s as %s (session present: %s)", self.broker.url,
                 self.options.client_id, present)
        if self._ready and present is False:
            log.error("the broker did not keep our session (persistence off, or the session "
                      "expired): reports it held for us are gone")
        _rc, self._report_mid = client.subscribe(self.report_subscription, qos=1)
        client.subscribe(SYS_DROPPED, qos=0)

    def _on_subscribe(self, _client, _userdata, mid, reasons, _props):
        if mid != self._report_mid:
            if any(r.is_failure for r in reasons):
                log.warning("cannot watch the broker's drop counter %s (%s): loss inside the "
                            "broker will not be reported; allow the aggregator to read it",
                            SYS_DROPPED, reasons)
            return
        if any(r.is_failure for r in reasons):
            log.error("subscription to %s refused: %s", self.report_subscription, reasons)
            return
        self._ready = True
        log.info("subscribed to %s", self.report_subscription)
        try:
            ready = json.dumps({"pid": os.getpid(), "client_id": self.options.client_id,
                                "time": time.time()})
            self.store.set_metas({"ingest.ready": ready,
                                  "ingest.ready:" + self.options.client_id: ready})
        except Exception as exc:  # readiness is informative; ingesting matters more
            log.error("could not record readiness in the state file: %r", exc)

    def _on_disconnect(self, _client, _userdata, _flags, reason, _props):
        if self._connected:
            log.warning("disconnected from broker: %s", reason)
            now = time.monotonic()
            quick = now - self._connected_at < 5.0
            self._quick_drops = [t for t in self._quick_drops if now - t < TAKEOVER_WINDOW]
            if quick:
                self._quick_drops.append(now)
            taken = getattr(reason, "value", None) == 142  # MQTT 5 "Session taken over"
            if (taken or len(self._quick_drops) >= 3) and now - self._takeover_logged > TAKEOVER_WINDOW:
                self._takeover_logged = now
                log.error("another client uses client id %s on this broker and takes over our "
                          "session (%s); give each serve its own --client-id (the default is "
                          "derived from the state file)", self.options.client_id,
                          "session taken over" if taken else
                          "%d drops right after connecting in a minute" % len(self._quick_drops))
        self._connected = False

    def _on_message(self, _client, _userdata, msg):
        try:
            topic = msg.topic
        except UnicodeDecodeError:
            topic = None
        if topic == SYS_DROPPED:
            self.broker_drops.observe(msg.payload)
            if msg.qos:
                self._client_ack.append((msg.mid, msg.qos))
            return
        if not self._pending:
            self._first_pending = time.monotonic()
        payload = msg.payload
        if len(payload) > self._largest:
            self.bounded_log(TOO_LARGE, "topic %r: %d bytes, more than any open campaign's "
                             "report (%d); dropped", topic, len(payload), self._largest)
            payload = None
        self._pending.append((topic, payload, msg.mid, msg.qos))
        self._received += 1

    def _flush(self, client):
        batch, self._pending = self._pending, []
        started = time.perf_counter()
        try:
            counts = self.process_batch([(t, p) for t, p, _mid, _qos in batch])
        except Exception as exc:
            # Nothing was committed: drop the connection without acking, the broker redelivers.
            log.error("batch of %d not committed (%r); reconnecting for redelivery", len(batch), exc)
            client.disconnect()
            self._connected = False
            return
        for _topic, _payload, mid, qos in batch:
            client.ack(mid, qos)
        for topic, payload in self.acks:  # spec §6: only after the commit above
            client.publish(topic, payload, qos=0)
        if self.metrics is not None:
            self.metrics.observe_batch(counts, time.perf_counter() - started, 0, len(self.acks))

    def _status_key(self, camp):
        """The campaign's signing key (read once per path), or None: the status is a signed
        message (spec §5.4) and is not published without one."""
        ref = camp.signing_key_ref
        if ref not in self._status_keys:
            try:
                self._status_keys[ref] = read_signing_key(ref)
            except ConfigError as exc:
                self._status_keys[ref] = None
                log.warning("status of campaign %s not published: %s", camp.name, exc)
        return self._status_keys[ref]

    def _publish_status(self, client):
        for camp in self._campaigns.values():
            if not camp.open:
                continue
            doc = status_document(self.store, camp)
            key = self._status_key(camp)
            if key is not None and self._status_sent.get(camp.name) != doc["counters"]:
                client.publish("ldp/%s/status" % camp.name, cfgmod.sign(doc, key), qos=0,
                               retain=True)
                self._status_sent[camp.name] = doc["counters"]

    def _connect(self, client) -> bool:
        try:
            mqtt.connect(client, self.broker, persistent=True,
                         session_expiry=self.options.session_expiry,
                         keepalive=self.options.keepalive,
                         max_packet=self.options.max_packet_bytes)
            return True
        except OSError as exc:
            self.bounded_log("broker", "cannot connect to %s: %s", self.broker.url, exc)
            return False

    def run(self):
        """Serve until `stop()`: connect, ingest, reconnect on loss; flush on the way out."""
        opts = self.options
        client = self.broker.make_client(opts.client_id, persistent=True, manual_ack=True,
                                         protocol=mqtt.PROTOCOLS[opts.protocol])
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        backoff, linked, attempts = 0.1, False, 0
        with self.store.batch():
            self._refresh_campaigns()
        while not self._stop.is_set():
            if not linked or client.socket() is None:
                # Unacked messages of an uncommitted batch come back from the broker.
                self._pending = []
                if self.metrics is not None:
                    self.metrics.backlog(0)
                if attempts and not self._connected:  # refused or unreachable: back off
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                self._connected = False
                attempts += 1
                linked = self._connect(client)
                continue
            linked = self._service_socket(client)
            for mid, qos in self._client_ack:
                client.ack(mid, qos)
            self._client_ack = []
            try:
                self.broker_drops.flush()
            except Exception as exc:  # watching the broker must never stop ingest
                self.bounded_log("broker_watch", "broker drop counter not recorded: %r", exc)
            if self.metrics is not None:
                self.metrics.backlog(len(self._pending))
            if self._connected:
                backoff = 0.1
            due = (self._pending and (len(self._pending) >= opts.batch_size or
                   time.monotonic() - self._first_pending >= opts.batch_ms / 1000.0))
            if linked and due:
                self._flush(client)
                linked = client.socket() is not None
            if opts.status_interval and self._connected and time.monotonic() >= self._status_due:
                self._status_due = time.monotonic() + opts.status_interval
                try:
                    with self.store.batch():
                        self._refresh_campaigns()
                    self._publish_status(client)
                except Exception as exc:
                    self.bounded_log("status", "status not published: %r", exc)
        if linked and client.socket() is not None:
            if self._pending:
                self._flush(client)
            client.disconnect()
            client.loop_write()
        self.store.close()

    def _service_socket(self, client) -> bool:
        """One select round: read a burst of packets, write what is queued, keepalive.
        Returns False when the connection is gone."""
        sock = client.socket()
        if sock is None:
            return False
        timeout = 0.2
        if self._pending:
            left = self.options.batch_ms / 1000.0 - (time.monotonic() - self._first_pending)
            timeout = max(0.0, min(timeout, left))
        if getattr(sock, "pending", None) and sock.pending() > 0:
            timeout = 0.0
        try:
            readable, _w, _x = select.select([sock], [sock] if client.want_write() else [], [], timeout)
        except (OSError, ValueError):
            return False
        if readable:
            for _ in range(self.options.batch_size):
                before = self._received
                if client.loop_read() != 0 or client.socket() is None:
                    return False
                if self._received == before or len(self._pending) >= self.options.batch_size:
                    break
        if client.want_write() and client.loop_write() != 0:
            return False
        if client.loop_misc() != 0:
            return False
        return client.socket() is not None
