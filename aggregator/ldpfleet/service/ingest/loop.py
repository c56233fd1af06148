"""The ingest loop of `ldpfleet serve`: MQTT reports -> validated, deduplicated, folded into
per-campaign sketches, committed, acknowledged (protocol_spec/v2 §3, §4, §6).

Subscription: `ldp/+/r/#` (or `$share/<group>/ldp/+/r/#` for a worker of a group) at QoS 1
with a persistent session and a fixed client id: MQTT 3.1.1 with clean_session=False by
default, MQTT 5 with clean_start=False plus a non-zero Session Expiry Interval and a Maximum
Packet Size. The client is `leanmqtt.LeanClient`: whole socket reads scanned in one C call,
one write of PUBACKs per committed batch (README "Why hand-written parts exist": paho-mqtt and
gmqtt spend their per-message Python on every report, measured in tools/bench_ingest.py).

Batch cycle (`Ingestor._serve_once` + `_flush`, the batch itself in fold.py), at `batch_size`
messages, `batch_ms` after the first pending one, when the broker has had nothing more for
IDLE_FLUSH_S, or when the pending reports fill the broker's in-flight window toward us (nothing
more can arrive before we acknowledge: inflight.py; MQTT 5 announces a Receive Maximum so a
broker with small packaged limits still sends whole batches), whichever comes first:
1. one write transaction: validate, dedupe and fold every message of the batch, write this
   worker's sketch partials, the dedupe keys and the counters, COMMIT (fold.BatchFolder);
2. only then PUBACK every message of the batch (one write);
3. then publish the spec §6 acknowledgements (QoS 0, built in C, one write).

Why this loses nothing and counts nothing twice across `kill -9` (or a crash anywhere):
the broker keeps every QoS 1 message of our persistent session until we PUBACK it, and we
PUBACK only after the transaction holding that message's effect (sketch increment, dedupe
key, counter) is durably committed (SQLite `synchronous=FULL`, PostgreSQL
`synchronous_commit`). Killed before COMMIT: the database rolls the half-written transaction
back, nothing of the batch is in the state, and the broker redelivers all of its messages
after we reconnect with the same client id. Killed after
COMMIT but before (some of) the PUBACKs: the broker redelivers those messages, but their
dedupe keys were committed atomically with their sketch increments, so each one is now a
`duplicate` and is not folded again. The sketch is therefore always exactly the fold of
every accepted report once. (Counters of reasons are as exact; only `received` and
`duplicate` also count such redeliveries.) The same holds when the connection or the broker
drops: the pending, uncommitted batch is discarded and redelivered by the broker (its
persistence keeps the session across a restart).

Rejections are counted by reason (see `REASONS`) and logged at a bounded rate; nothing a
device sends can stop the loop. A lost connection is retried with capped backoff.

The no-loss argument (commit before acknowledge, dedupe in the same transaction, every message
counted once under one reason) is read here and in fold.py; the header rule, the bodies and the
store live in `protocol`, the mechanisms and `store`.
"""
import json
import logging
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from ...core import config as cfgmod
from ...core.config import NAME_RE
from ...core.errors import ConfigError, LoginTakenOver
from ...core.signing import read_signing_key
from ...mqtt import client as mqtt
from ...mqtt.lean import LeanClient
from ...mqtt.packets import MalformedPacket, PublishBatch
from .broker_watch import SYS_DROPPED, BrokerDrops
from ..campaigns.manage import status_document
from .batch import ReportBatch
from ..state.retention import RetentionTimer
from .fold import TOO_LARGE, BatchFolder
from .login_bound import DEFAULT_MAX_DEVICES_PER_LOGIN
from .inflight import InflightWindow
from ..state.store import Store

log = logging.getLogger("ldpfleet.service")

REPORT_TOPIC = "ldp/+/r/#"
"""Devices' `ldp/<campaign>/r/<id>` and load generators' `ldp/<campaign>/r/<login>/<id>` (spec §4)."""


def default_client_id(state: str, group: str = None) -> str:
    """The persistent session's client id when `--client-id` is not given. Alone: `ldpfleet-agg-`
    + 8 hex digits of SHA-256 of the state file's absolute path (or of the PostgreSQL URL
    without its password): stable across restarts (the session is resumed), different for every
    state (two serves on one broker never take each other's session). In a worker group:
    `ldpfleet-<group>-<hostname>` (one worker per machine; more on one machine need their own
    `--client-id`)."""
    import hashlib
    import socket
    from ..state.sql import is_postgres, redact
    if group:
        host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
        return "ldpfleet-%s-%s" % (group, host or "host")
    where = redact(state) if is_postgres(state) else os.path.abspath(state)
    return "ldpfleet-agg-" + hashlib.sha256(where.encode("utf-8")).hexdigest()[:8]


SYS_DROPPED_BYTES = SYS_DROPPED.encode()
IDLE_FLUSH_S = 0.02
"""A pending batch is committed once a read waited this long for more (the broker's backlog is
drained); under a steady trickle batches still close at batch_ms or batch_size."""
TAKEOVER_WINDOW = 60.0
"""Seconds in which repeated drops right after connecting mean another client uses our id."""
QUICK_DROPS = 3
"""Drops within 5 s of connecting, in TAKEOVER_WINDOW, that mean another connection takes ours
over (MQTT 3.1.1 has no reason code; MQTT 5 says 0x8E "session taken over" at once)."""


@dataclass
class IngestOptions:
    client_id: str = "ldpfleet-aggregator"
    batch_size: int = 10000
    batch_ms: float = 200.0
    session_expiry: int = 7 * 86400
    keepalive: int = 30
    status_interval: float = 30.0
    """Seconds between retained status publications of open campaigns (0: never)."""
    protocol: int = 5
    """5 = MQTT 5 (clean_start=False + Session Expiry Interval `session_expiry`, Receive
    Maximum `receive_maximum`) or 4 = MQTT 3.1.1 (clean_session=False), whose in-flight window
    is the broker's own (`max_inflight_messages`, 20 in Mosquitto's packaged config; a strict
    one is learned, inflight.py)."""
    receive_maximum: int = 65535
    """MQTT 5: QoS 1 reports the broker may send before our PUBACKs. serve acknowledges after
    each commit, so this bounds what one commit can hold behind any broker (Mosquitto honours
    it over its `max_inflight_messages`) and how far a connected serve may fall behind before
    the broker's queue limit applies (behind packaged limits Mosquitto 2.0.11 held about
    55,000 small reports for a serve that stopped reading, then dropped; 1,020 over 3.1.1).
    Memory: at most this many reports are held un-acknowledged."""
    log_burst: int = 5
    log_period: float = 10.0
    group: str = None
    """`serve --group NAME`: subscribe through the MQTT shared subscription
    `$share/NAME/ldp/+/r/#` (one of the group's workers gets each report; PostgreSQL state)."""
    max_packet_bytes: int = 1 << 20
    """MQTT 5: the Maximum Packet Size announced at CONNECT (the broker drops larger messages
    for us instead of sending them). Both versions: a longer packet is skipped as it streams in
    (leanmqtt `max_receive`: memory stays bounded also in 3.1.1, which cannot announce it), and
    payloads larger than every open campaign's report are dropped on arrival (`too_large`)."""
    purge_after_days: float = None
    """Retention (retention.RetentionTimer): drop the dedupe keys of campaigns closed more than
    this many days ago, at start and then hourly; None: never."""
    dedupe_key: str = None
    """The dedupe root key file (`serve --dedupe-key`; None: Store's default, dedupe.py)."""
    max_devices_per_login: int = DEFAULT_MAX_DEVICES_PER_LOGIN
    """New device ids one load-generator login may bring into a campaign phase (0: no bound;
    login_bound.py)."""
    ack_key: bytes = None
    """The fleet's ack root key (`serve --ack-key FILE`, ackkeys.py): acknowledgements are MAC'd
    (28 bytes, spec §6), so only the aggregator can stop a device's re-sends; None: plain
    12-byte acknowledgements (warned about once at start)."""


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

    progress = None
    """What serve logs while it runs (progress.ProgressLog): ticked once per loop turn."""

    def __init__(self, state_url: str, broker: mqtt.BrokerSettings = None,
                 options: IngestOptions = None, metrics=None):
        self.options = options or IngestOptions()
        self.store = Store(state_url, worker=self.options.client_id,
                           dedupe_key=self.options.dedupe_key)
        self.broker = broker
        self.metrics = metrics
        self.bounded_log = BoundedLog(log, self.options.log_burst, self.options.log_period)
        self.folder = BatchFolder(self.store, self.bounded_log,
                                  self.options.max_devices_per_login)
        self.retention = RetentionTimer(self.store, self.options.purge_after_days, log)
        self._pending = []
        self._first_pending = None
        self._pending_count = 0
        self._ready = False
        self.connected = False
        """Subscribed to the broker now (the HTTP API's /readyz reads it)."""
        self._stop = threading.Event()
        self._status_due = 0.0
        self._status_sent = {}
        self._status_keys = {}
        self._connected_at = 0.0
        self._quick_drops = []
        self._takeover_logged = -TAKEOVER_WINDOW
        self._unacked = 0
        self.window = InflightWindow(self.options.receive_maximum
                                     if self.options.protocol == 5 else None)
        self.acks = None
        self.broker_drops = BrokerDrops(self.store, metrics)

    # --- one batch (fold.py) -------------------------------------------------------------
    def process_batch(self, messages) -> dict:
        """Validate, dedupe, fold and COMMIT one batch: a ReportBatch or (topic, payload) pairs
        (a payload None: dropped on arrival). Returns {(campaign or "", reason): count};
        `acks` then holds the acknowledgements to publish (fold.BatchFolder.process)."""
        if not isinstance(messages, ReportBatch):
            messages = ReportBatch.from_pairs(messages)
        counts = self.folder.process(messages)
        self.acks = self.folder.acks
        if self.options.ack_key is not None:
            self.acks = self.acks.tagged(self.options.ack_key)
        return counts

    @property
    def report_subscription(self) -> str:
        """REPORT_TOPIC, or its shared subscription `$share/<group>/...` for a worker group."""
        group = self.options.group
        return "$share/%s/%s" % (group, REPORT_TOPIC) if group else REPORT_TOPIC

    # --- MQTT loop ---------------------------------------------------------------------
    def stop(self):
        self._stop.set()

    # --- MQTT loop (leanmqtt.LeanClient) -----------------------------------------------------
    def _connect(self):
        """A connected, subscribed LeanClient, or None (logged; the caller backs off)."""
        opts = self.options
        client = LeanClient(self.broker, opts.client_id, protocol=opts.protocol, persistent=True,
                            session_expiry=opts.session_expiry, keepalive=opts.keepalive,
                            max_packet=opts.max_packet_bytes if opts.protocol == 5 else None,
                            max_receive=opts.max_packet_bytes,
                            receive_maximum=opts.receive_maximum if opts.protocol == 5 else None)
        try:
            present = client.connect(timeout=10.0)
            self._connected_at = time.monotonic()
            self.window.reset()
            log.info("connected to %s %s (session present: %s)", self.broker.url,
                     self._identity(client), present)
            if self._ready and not present:
                log.error("the broker did not keep our session (persistence off, or the session "
                          "expired): reports it held for us are gone")
            granted = client.subscribe([(self.report_subscription, 1), (SYS_DROPPED, 0)])
        except ConnectionRefusedError as exc:
            older = opts.protocol == 5 and getattr(exc, "code", None) in (1, 0x84)
            log.error("%s%s", exc, "; a broker without MQTT 5 needs serve --mqtt 4" if older else "")
            client.close()
            return None
        except (OSError, ConnectionError) as exc:
            self.bounded_log("broker", "cannot connect to %s: %s", self.broker.url, exc)
            client.close()
            return None
        if granted[0] >= 0x80:
            log.error("subscription to %s refused (code 0x%02x)", self.report_subscription, granted[0])
            client.disconnect()
            return None
        if len(granted) > 1 and granted[1] >= 0x80:
            log.warning("cannot watch the broker's drop counter %s (code 0x%02x): loss inside "
                        "the broker will not be reported; allow the aggregator to read it",
                        SYS_DROPPED, granted[1])
        self._ready = self.connected = True
        log.info("subscribed to %s", self.report_subscription)
        try:
            ready = json.dumps({"pid": os.getpid(), "client_id": opts.client_id,
                                "time": time.time()})
            self.store.set_metas({"ingest.ready": ready, "ingest.ready:" + opts.client_id: ready})
        except Exception as exc:  # readiness is informative; ingesting matters more
            log.error("could not record readiness in the state: %r", exc)
        return client

    def _identity(self, client) -> str:
        """Who we are on the broker, as far as we can know: the client id we asked for, or the
        one the broker assigned (MQTT 5 Assigned Client Identifier); with a login, a broker that
        binds client ids to logins (broker-config's `use_username_as_clientid`) uses the login
        as the id without telling a 3.1.1 client."""
        assigned = client.connack_properties.get(0x12)
        if assigned:
            return "as client id %s (assigned by the broker)" % assigned.decode(errors="replace")
        user = self.broker.username
        if not user:
            return "as %s" % self.options.client_id
        return ("as login %s with client id %s (a broker that binds client ids to logins uses %s)"
                % (user, self.options.client_id, user))

    def _lost(self, exc):
        """The connection dropped: log it. Another connection taking ours over (MQTT 5 reason
        0x8E, or QUICK_DROPS drops right after connecting) is a shared login when we log in --
        LoginTakenOver stops serve, since retrying would only take the other one's connection in
        turn -- and a client-id clash otherwise (logged; we keep retrying)."""
        self.connected = False
        log.warning("disconnected from broker: %s", exc)
        now = time.monotonic()
        self._quick_drops = [t for t in self._quick_drops if now - t < TAKEOVER_WINDOW]
        if now - self._connected_at < 5.0 and not isinstance(exc, MalformedPacket):
            self._quick_drops.append(now)
        taken = "session taken over" in str(exc)  # MQTT 5 DISCONNECT reason 0x8E
        if not (taken or len(self._quick_drops) >= QUICK_DROPS):
            return
        why = ("the broker said: session taken over" if taken else
               "%d drops right after connecting in a minute" % len(self._quick_drops))
        user = self.broker.username
        if user:
            raise LoginTakenOver("username", "login %s is connected from elsewhere: each worker "
                                 "needs its own login; broker-config --workers N makes them (%s)"
                                 % (user, why))
        if now - self._takeover_logged > TAKEOVER_WINDOW:
            self._takeover_logged = now
            log.error("another client uses client id %s on this broker and takes over our "
                      "session (%s); give each serve its own --client-id (the default is "
                      "derived from the state)", self.options.client_id, why)

    def _receive(self, got: PublishBatch):
        """Keep what one read brought: the broker's drop counter goes to `broker_drops`,
        reports to the pending batch; a payload longer than every open campaign's report is
        dropped here (`too_large`), its bytes not kept."""
        if not len(got):
            return
        batch = ReportBatch(got.data, got.topic_off, got.topic_len, got.payload_off,
                            np.where(got.oversized, -1, got.payload_len), got.packet_id, got.qos)
        sys_topic = (got.topic_len == len(SYS_DROPPED_BYTES)) & (got.qos == 0)
        for i in np.flatnonzero(sys_topic).tolist():
            if got.topic_bytes(i) == SYS_DROPPED_BYTES:
                self.broker_drops.observe(got.payload(i))
                batch.topic_len[i] = -2  # not a report: left out below
        batch = batch.take(np.flatnonzero(batch.topic_len != -2))
        big = batch.payload_len > self.folder.largest
        if big.any():
            for i in np.flatnonzero(big)[:self.options.log_burst].tolist():
                self.bounded_log(TOO_LARGE, "topic %r: %d bytes, more than any open campaign's "
                                 "report (%d); dropped", batch.topic(i), batch.payload_len[i],
                                 self.folder.largest)
            batch.drop_payloads(big)
            batch = batch.compact()
        if len(batch):
            if not self._pending:
                self._first_pending = time.monotonic()
            self._pending.append(batch)
            self._pending_count += len(batch)
            self._unacked += int(np.count_nonzero(batch.qos))

    def _flush(self, client):
        """Commit the pending batch (its first batch_size messages; the rest stays pending),
        then PUBACK it, then the spec §6 acknowledgements."""
        batch = ReportBatch.concat(self._pending)
        limit = self.options.batch_size
        if len(batch) > limit:
            rest = batch.take(np.arange(limit, len(batch)))
            batch = batch.take(np.arange(limit))
            self._pending, self._pending_count = [rest], len(rest)
            self._unacked = int(np.count_nonzero(rest.qos))
            self._first_pending = time.monotonic()
        else:
            self._pending, self._pending_count, self._unacked = [], 0, 0
        started = time.perf_counter()
        try:
            counts = self.process_batch(batch)
        except Exception as exc:
            # Nothing was committed: drop the connection without acking, the broker redelivers.
            raise ConnectionError("batch of %d not committed (%r); reconnecting for redelivery"
                                  % (len(batch), exc)) from exc
        client.puback(batch.packet_id[batch.qos > 0])
        client.send_packets(self.acks.packets(self.options.protocol))
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
        for camp in self.folder.campaigns.values():
            if not camp.open:
                continue
            doc = status_document(self.store, camp)
            key = self._status_key(camp)
            shown = (doc["counters"], doc.get("round"))  # a recurring campaign's round too
            if key is not None and self._status_sent.get(camp.name) != shown:
                client.publish("ldp/%s/status" % camp.name, cfgmod.sign(doc, key), qos=0,
                               retain=True)
                self._status_sent[camp.name] = shown

    def run(self):
        """Serve until `stop()`: connect, ingest, reconnect on loss; flush on the way out."""
        backoff, attempts, client = 0.1, 0, None
        with self.store.batch():
            self.folder.refresh_campaigns()
        while not self._stop.is_set():
            if client is None:
                # Unacked messages of an uncommitted batch come back from the broker.
                self._pending, self._pending_count, self._unacked = [], 0, 0
                if self.metrics is not None:
                    self.metrics.backlog(0)
                if attempts:
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                attempts += 1
                client = self._connect()
                if client is not None:
                    backoff = 0.1
                continue
            try:
                self._serve_once(client)
            except (ConnectionError, OSError) as exc:
                client.close()
                client = None
                try:
                    self._lost(exc)
                except LoginTakenOver:  # the one line is the command's (cli exit codes)
                    self.store.close()
                    raise
        if client is not None:
            try:
                if self._pending:
                    self._flush(client)
                client.disconnect()
            except (ConnectionError, OSError) as exc:
                log.warning("at stop: %s", exc)
        self.store.close()

    def _serve_once(self, client):
        """One read, a flush when the batch is full, fills the broker's in-flight window,
        is old enough (batch_ms) or the broker has had nothing more for IDLE_FLUSH_S (a
        backlog's last batch does not wait batch_ms); then the drop counter, the status."""
        opts = self.options
        timeout = 0.2
        if self._pending:
            left = opts.batch_ms / 1000.0 - (time.monotonic() - self._first_pending)
            timeout = max(0.0, min(IDLE_FLUSH_S, left))
        got = client.poll(timeout)
        self._receive(got)
        self.window.saw(self._unacked)
        if self._pending and not len(got) and timeout >= IDLE_FLUSH_S and \
                self.window.idle(self._unacked) and self.window.learned < opts.batch_size:
            log.info("the broker sends at most %d reports before our acknowledgements (learned): "
                     "each commit holds at most that many%s", self.window.learned,
                     "" if opts.protocol == 5 else
                     " (MQTT 3.1.1: --mqtt 5 announces a Receive Maximum instead; or raise the "
                     "broker's max_inflight_messages)")
        if self.metrics is not None:
            self.metrics.backlog(self._pending_count)
        while self._pending_count >= opts.batch_size:
            self._flush(client)
        if self._pending and (not len(got) or self.window.full(self._unacked) or
                              time.monotonic() - self._first_pending >= opts.batch_ms / 1000.0):
            self._flush(client)
        try:
            self.broker_drops.flush()
        except Exception as exc:  # watching the broker must never stop ingest
            self.bounded_log("broker_watch", "broker drop counter not recorded: %r", exc)
        try:
            self.retention.tick()
        except Exception as exc:  # retention must never stop ingest
            self.bounded_log("retention", "dedupe keys not purged: %r", exc)
        if self.progress is not None:
            self.progress.tick()
        if opts.status_interval and time.monotonic() >= self._status_due:
            self._status_due = time.monotonic() + opts.status_interval
            try:
                with self.store.batch():
                    self.folder.refresh_campaigns()
                self._publish_status(client)
            except (ConnectionError, OSError):
                raise
            except Exception as exc:
                self.bounded_log("status", "status not published: %r", exc)
