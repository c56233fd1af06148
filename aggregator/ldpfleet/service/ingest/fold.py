"""One batch of received reports -> validated, deduplicated, folded, committed (spec §3, §6).

`BatchFolder.process(batch)` runs the whole batch in ONE store transaction, top-down:
1. reload campaigns if another process changed them;
2. split every topic (`ReportBatch.split_topics`, C) and group the messages by campaign
   (one numpy string array, `np.unique`): bad topics, unknown and closed campaigns and payloads
   dropped on arrival (`too_large`) are counted;
3. THE header rule over each campaign's messages at once (`protocol.header_checks`);
4. per campaign phase (`_fold_group`, in a savepoint): the public sampling rule (LDPLCM), the
   body fields of the phase's mechanism, dedupe per (campaign, phase, device) against the
   store (the same nonce again is a `duplicate`, another one a `second_report`; the keys are
   claimed with the store's unique key, so concurrent workers accept a report once), and ONE
   `sketch.update` (one C call) of the accepted reports;
5. this worker's sketch partials, the dedupe keys and the counters, and at most once a minute
   each touched campaign's totals into its history (history.py); COMMIT.
A recurring campaign (spec §3.4) folds per ROUND where another folds per phase: its reports
carry flags 1 and `round:u32` after the header, the header rule checks the round against the
schedule at the folder's clock, and each round is a slot of its own (its sketch, its dedupe
keys: the stores' `phase` column holds the round, service/campaigns/rounds.py); the round
field is cut off before the body check and the fold (`schedule.split_round_rows`), so the
round's sketch takes the one-shot form.
The caller acknowledges the broker (PUBACK) only after `process` returned, then publishes the
spec §6 acknowledgements `acks`. Every message is counted once under `received` and once under
exactly one reason (`REASONS`); messages carry a reason code in a numpy array, never an object.
"""
import logging
import time
from collections import defaultdict

import numpy as np

from ...core import config as cfgmod
from ...core import protocol, schedule
from ...core.mechanisms.base import ERROR_FIELDS, Sketch, first_faults
from .batch import AckBatch, ReportBatch
from ..state.history import HistoryRecorder
from .login_bound import DEFAULT_MAX_DEVICES_PER_LOGIN, LoginBound
from ..state.seen_log import unique_keys
from ..state.store import GLOBAL

log = logging.getLogger("ldpfleet.service")

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
DEVICE_LIMIT = "device_limit"
RECEIVED = "received"
REASONS = (ACCEPTED, DUPLICATE, SECOND_REPORT, UNKNOWN_CAMPAIGN, CLOSED_CAMPAIGN, BAD_TOPIC,
           INTERNAL_ERROR, PHASE_NOT_OPEN, WRONG_PHASE_DEVICE, TOO_LARGE,
           DEVICE_LIMIT) + tuple(ERROR_FIELDS)
"""Every message is counted once under `received` and once under exactly one of these.
The protocol field names (`size`, `version`, `phase`, ...) are malformed reports, checked in
this order: version, phase (1..the campaign's number of phases), `phase_not_open` (a phase-2
report before the phase-2 message, `ldpfleet campaign advance`), mechanism, flags (1 in a
recurring campaign, else 0), campaign_id, size, round (recurring: 1..R and at most the round
open at the aggregator's clock plus one), then `wrong_phase_device` (LDPLCM, spec §5: a device reports only in the
phase the public rule `ldplcm.reports_in_phase` puts it in), then
the body fields of `mech.validate`. `too_large`: a payload longer than every open campaign's
report (and than SMALL_PAYLOAD), dropped when it arrives, before it is buffered: what a device
sends cannot grow serve's memory beyond batch_size x the largest report. `device_limit`: a
report from a new device id of a load-generator login that already brought its bound of ids
into the campaign phase (login_bound.py)."""
REJECTIONS = tuple(r for r in REASONS if r != ACCEPTED)
CODE = {name: i for i, name in enumerate(REASONS)}
SMALL_PAYLOAD = 4096
"""Payloads up to this size are always buffered and classified (unknown campaigns included)."""
TRANSIENT = (CODE[PHASE_NOT_OPEN], CODE[INTERNAL_ERROR])
ROUND_SKETCHES = 4
"""Round sketches of one recurring campaign a worker keeps in memory: the most recently folded
(the round open now, late reports of the one before). Every other round's sketch is stored as
of the last commit and reloaded when a late report arrives, so a worker's memory does not grow
with R (up to 100,000 rounds, spec §5.4)."""
"""Rejections that get no acknowledgement: the device re-sends later."""


def report_size(camp, phase: int) -> int:
    """The report size of an open campaign phase as it arrives (the round header included; 0
    if its mechanism cannot be built: its reports are then rejected anyway)."""
    try:
        return camp.report_size(phase)
    except Exception:  # noqa: BLE001 (the header rule counts what this campaign receives)
        return 0


class BatchFolder:
    """Validate/dedupe/fold/commit batches into one store (its worker's partials)."""

    def __init__(self, store, bounded_log, max_devices_per_login=DEFAULT_MAX_DEVICES_PER_LOGIN):
        self.store = store
        self.bounded_log = bounded_log
        self.login_bound = LoginBound(store, max_devices_per_login)
        self.campaigns = {}
        self._data_version = None
        self._sketches = {}
        self.largest = SMALL_PAYLOAD
        self.acks = AckBatch()
        self.history = HistoryRecorder()
        self.clock = time.time
        """The aggregator's clock (unix seconds): which rounds of a recurring campaign are
        open (tests set it)."""

    # --- campaigns and sketches --------------------------------------------------------
    def refresh_campaigns(self):
        version = self.store.data_version()
        if version == self._data_version and self.campaigns:
            return
        fresh = {c.name: c for c in self.store.campaigns()}
        for key in list(self._sketches):
            old, new = self.campaigns.get(key[0]), fresh.get(key[0])
            if (new is None or old is None or old.config_payload != new.config_payload
                    or old.phase2_payload != new.phase2_payload):
                del self._sketches[key]
        self.campaigns = fresh
        self._data_version = version
        self.largest = max([SMALL_PAYLOAD] + [report_size(camp, phase)
                                              for camp in fresh.values() if camp.open
                                              for phase in range(1, camp.phase + 1)])

    def _sketch(self, campaign, slot):
        """This worker's sketch of a slot: a phase, or a recurring campaign's round."""
        key = (campaign.name, slot)
        if key in self._sketches:  # the dict's order is the order of last use
            self._sketches[key] = self._sketches.pop(key)
        else:
            stored = self.store.worker_sketch_blob(campaign.name, slot)
            if stored is None:
                self._sketches[key] = campaign.slot_mechanism(slot).new_sketch()
            else:
                self._sketches[key] = Sketch.deserialize(stored[1])
        return self._sketches[key]

    def _evict_round_sketches(self):
        """After a commit (every sketch in memory then equals its stored blob): forget all but
        the ROUND_SKETCHES most recently used round sketches of each recurring campaign."""
        per_campaign = defaultdict(list)
        for key in self._sketches:
            camp = self.campaigns.get(key[0])
            if camp is not None and camp.recurring:
                per_campaign[key[0]].append(key)
        for keys in per_campaign.values():
            for key in keys[:-ROUND_SKETCHES]:
                del self._sketches[key]

    # --- one batch ---------------------------------------------------------------------
    def process(self, batch: ReportBatch) -> dict:
        """Validate, dedupe, fold and COMMIT one batch. Returns {(campaign or "", reason):
        count} of what was committed; sets `acks` to the (topic, payload) acknowledgements to
        publish. Raises only if the store fails, in which case nothing of the batch is
        committed and the in-memory sketches are reset to the stored ones."""
        n = len(batch)
        self.reason = np.full(n, -1, np.int16)
        self.status = np.full(n, -1, np.int8)
        self.owner = np.full(n, -1, np.int32)  # index into `names`; -1: GLOBAL
        self.acks = AckBatch()
        try:
            with self.store.batch():
                self.refresh_campaigns()
                names = self._route(batch)
                touched = []
                for name, members in names.items():
                    for phase, idx in self._check_headers(name, members, batch).items():
                        if self._fold_in_savepoint(name, phase, idx, batch):
                            touched.append((name, phase))
                for name, phase in touched:
                    sketch = self._sketches[(name, phase)]
                    self.store.put_sketch(name, phase, sketch.n, sketch.serialize())
                counts = self._counts(self._names)
                self.store.add_counts(counts)
                self.history.record(self.store, [c for c, _reason in counts if c in self.campaigns])
        except BaseException:
            self._sketches.clear()
            raise
        self._evict_round_sketches()
        self.acks = self._acknowledgements(batch, self._names)
        return counts

    def _reject(self, idx, reason: str, batch, status=protocol.ACK_REJECTED, what=""):
        """Count `idx` under `reason` (one bounded log line naming the first)."""
        if len(idx) == 0:
            return
        self.reason[idx] = CODE[reason]
        if status is not None:
            self.status[idx] = status
        first = int(idx[0])
        length = batch.payload_len[first]
        self.bounded_log(reason, "%d message(s)%s, e.g. topic %r, %s", len(idx), what,
                         batch.topic(first), "dropped on arrival" if length < 0 else
                         "%d bytes" % length)

    def _route(self, batch) -> dict:
        """{campaign name: indices} of the messages an open campaign takes; the others are
        counted (bad topic, unknown or closed campaign, too large)."""
        ok, coff, clen, _doff, _dlen = batch.split_topics()
        too_large = batch.payload_len < 0
        self._reject(np.flatnonzero(~ok & ~too_large), BAD_TOPIC, batch)
        self._reject(np.flatnonzero(~ok & too_large), TOO_LARGE, batch, status=None)
        okidx = np.flatnonzero(ok)
        raw = batch.strings(coff, clen, okidx, text=False)
        if raw.size and (raw == raw[0]).all():  # the usual batch: one campaign
            raw, inverse = raw[:1], np.zeros(raw.size, np.int64)
        else:
            raw, inverse = np.unique(raw, return_inverse=True)
        names = [b.decode("ascii") for b in raw.tolist()]
        taken = {}
        for u, name in enumerate(names):
            members = okidx[inverse.ravel() == u] if len(names) > 1 else okidx
            camp = self.campaigns.get(name)
            big = too_large[members]
            if camp is not None:
                self.owner[members] = u
            self._reject(members[big], TOO_LARGE, batch, status=None)
            members = members[~big]
            if camp is None:
                self._reject(members, UNKNOWN_CAMPAIGN, batch)
            elif not camp.open:
                self._reject(members, CLOSED_CAMPAIGN, batch, what=" for campaign %s" % name)
            elif len(members):
                taken[name] = members
        self._names = names
        return taken

    def _check_headers(self, name, members, batch) -> dict:
        """The header rule over one campaign's messages: faults counted; returns {slot:
        indices} of the rest (slot: the phase, or a recurring campaign's round)."""
        camp = self.campaigns[name]
        try:
            rule = camp.header_rule_at(int(self.clock()))
            hdr, lengths = batch.headers(members, rule.header_size)
            faults, slots = protocol.header_checks(hdr, lengths, rule)
        except Exception as exc:  # e.g. a phase mechanism that cannot be built
            self.reason[members] = CODE[INTERNAL_ERROR]
            self.bounded_log(INTERNAL_ERROR, "campaign %s: %r", name, exc)
            return {}
        if rule.rounds:
            slots = protocol.header_rounds(hdr)
        for fault in np.unique(faults[faults >= 0]).tolist():
            reason = protocol.HEADER_FAULTS[fault]
            bad = faults == fault
            self._reject(members[bad], reason, batch,
                         status=None if reason == PHASE_NOT_OPEN else protocol.ACK_REJECTED,
                         what=self._header_what(camp, rule, reason, slots[bad]))
        good = faults < 0
        return {int(p): members[good & (slots == p)] for p in np.unique(slots[good]).tolist()}

    @staticmethod
    def _header_what(camp, rule, reason, slots) -> str:
        """How a header rejection's log line names the campaign (and round, spec §3.4)."""
        if not rule.rounds:
            return " for campaign %s" % camp.name
        if reason == "flags":
            return " for campaign %s (recurring: flags must be 1 with a round header)" % camp.name
        if reason == "round":
            return (" for campaign %s round %d (rounds 1..%d of %d accepted now)"
                    % (camp.name, int(slots[0]), min(rule.max_round, rule.rounds), rule.rounds))
        return " for campaign %s" % camp.name

    def _fold_in_savepoint(self, name, phase, idx, batch) -> bool:
        """`_fold_group` in a savepoint: a bug must not wedge the queue on one report, and
        nothing of a failed group (dedupe keys included) is committed. True if it accepted.
        `phase`: the slot (a recurring campaign's round)."""
        try:
            with self.store.savepoint("fold_group"):
                return self._fold_group(name, phase, idx, batch)
        except Exception as exc:
            self.status[idx] = -1
            self.reason[idx] = CODE[INTERNAL_ERROR]
            self._sketches.pop((name, phase), None)
            self.bounded_log(INTERNAL_ERROR, "campaign %s %s: %r", name,
                             self.campaigns[name].slot_label(phase), exc)
            return False

    def _fold_group(self, name, phase, idx, batch) -> bool:
        """Body validation, dedupe and ONE sketch update for the candidate reports of one
        campaign phase (`phase`: the slot; a recurring campaign's round, whose reports are
        cut to their one-shot form first). Returns whether any report was accepted."""
        camp = self.campaigns[name]
        mech = camp.slot_mechanism(phase)
        label = camp.slot_label(phase)
        if camp.sample_rate_ppm is not None and not camp.recurring:
            from ...core.protocols.ldplcm import reports_in_phase
            _ok, _coff, _clen, doff, dlen = batch.split_topics()
            in_phase = reports_in_phase(batch.strings(doff, dlen, idx).tolist(), camp.config,
                                        phase)
            self._reject(idx[~in_phase], WRONG_PHASE_DEVICE, batch,
                         what=" for campaign %s %s" % (name, label))
            idx = idx[in_phase]
        if len(idx) == 0:
            return False
        arr = batch.rows(idx, camp.report_size(camp.slot_phase(phase)))
        if camp.recurring:
            arr, _rounds = schedule.split_round_rows(arr)
        codes = first_faults(mech.validate_bodies(arr[:, protocol.HEADER_SIZE:]),
                             np.full(len(idx), -1, np.int16))
        for code in np.unique(codes[codes >= 0]).tolist():
            self._reject(idx[codes == code], ERROR_FIELDS[code], batch,
                         what=" for campaign %s %s" % (name, label))
        valid = np.flatnonzero(codes < 0)
        seqs = np.ascontiguousarray(arr[valid, 8:12]).view("<u4").ravel()
        new = self._dedupe(name, phase, idx[valid], batch, seqs)
        keep = idx[valid[new]]
        if keep.size == 0:
            return False
        self.reason[keep] = CODE[ACCEPTED]
        self.status[keep] = protocol.ACK_ACCEPTED
        rows = arr[valid[new]] if camp.recurring else batch.rows(keep, mech.report_size)
        sketch = self._sketch(camp, phase)
        if hasattr(sketch, "groups_of"):  # pem: the group of the topic's device id (spec §3.5)
            _ok, _coff, _clen, doff, dlen = batch.split_topics()
            sketch.update(np.ascontiguousarray(rows),
                          groups=sketch.groups_of_spans(batch.data, doff[keep], dlen[keep]))
        else:
            sketch.update(np.ascontiguousarray(rows))
        return True

    def _dedupe(self, name, phase, rows, batch, seqs) -> np.ndarray:
        """Mask of the rows whose report is the first of its device in this phase: the first of the
        batch per device whose dedupe key this transaction claimed (`Store.claim_key_array`).
        The keys are the campaign's keyed hashes of the rows' device ids and the tags of their
        nonces (dedupe.py), one C call each over the batch; the batch's devices are told apart
        by `seen_log.unique_keys` over the 16-byte hashes (a collision: about n^2 / 2^129).
        The others are `_seen_before` (the stored tag, or the batch's first one)."""
        if rows.size == 0:
            return np.zeros(0, bool)
        _ok, _coff, _clen, doff, dlen = batch.split_topics()
        keys = self.store.campaign_keys(name)
        hashes = keys.spans(batch.data, doff[rows], dlen[rows])
        tags = keys.nonce_tags(seqs)
        uniq, first, inverse = unique_keys(hashes)
        admission = self.login_bound.admit(name, phase, batch, rows[first], uniq)
        if admission is None:
            claimed, prior = self.store.claim_key_array(name, phase, uniq, tags[first])
            admitted = np.ones(rows.size, bool)
        else:
            claimed, prior = self._claim_admitted(name, phase, uniq, tags[first], admission)
            admitted = admission.admitted[inverse]
            self._device_limit(name, phase, rows[~admitted], admission)
        new = np.zeros(rows.size, bool)
        new[first[claimed]] = True
        self._seen_before(name, phase, rows, np.flatnonzero(~new & admitted), batch, seqs, tags,
                          np.where(prior[inverse] >= 0, prior[inverse], tags[first[inverse]]))
        return new

    def _claim_admitted(self, name, phase, uniq, tags, admission):
        """`claim_key_array` of the admitted devices only (login_bound.py); the others count as
        neither claimed nor seen. The claimed ids are added to their logins' counts."""
        claimed = np.zeros(uniq.shape[0], bool)
        prior = np.full(uniq.shape[0], -1, np.int64)
        ok = np.flatnonzero(admission.admitted)
        claimed[ok], prior[ok] = self.store.claim_key_array(name, phase, uniq[ok], tags[ok])
        self.login_bound.record(name, phase, admission, claimed)
        return claimed, prior

    def _device_limit(self, name, phase, rows, admission):
        self.reason[rows] = CODE[DEVICE_LIMIT]
        self.status[rows] = protocol.ACK_REJECTED
        for login, (used, refused) in admission.refused.items():
            self.bounded_log(DEVICE_LIMIT, "campaign %s %s: login %s already brought %d "
                             "device ids (serve --max-devices-per-login %d); %d new id(s) "
                             "refused", name, self.campaigns[name].slot_label(phase), login,
                             used, self.login_bound.limit, refused)

    def _seen_before(self, name, phase, rows, old, batch, seqs, tags, prior_tags):
        """Reports `old` (indices into `rows`) from devices whose report for this phase is
        already claimed (redeliveries, second reports, lost races): the same nonce again (the
        same tag as the stored one, or as the batch's first) is a `duplicate`, another one a
        `second_report`."""
        if old.size == 0:
            return
        same = prior_tags[old] == tags[old]
        dup, second = rows[old[same]], old[~same]
        self.reason[dup] = CODE[DUPLICATE]
        self.status[dup] = protocol.ACK_DUPLICATE
        self.reason[rows[second]] = CODE[SECOND_REPORT]
        self.status[rows[second]] = protocol.ACK_REJECTED
        _ok, _coff, _clen, doff, dlen = batch.split_topics()
        for i in second.tolist():
            row = int(rows[i])
            self.bounded_log(SECOND_REPORT, "campaign %s %s device %s: nonce %s differs "
                             "from its accepted report's", name,
                             self.campaigns[name].slot_label(phase),
                             bytes(batch.data[doff[row]:doff[row] + dlen[row]]).decode(),
                             int(seqs[i]))

    def _counts(self, names) -> dict:
        """{(campaign or "", reason): count}, `received` included, from the reason codes."""
        if (self.reason < 0).any():  # every message must have an outcome: a bug otherwise
            missing = np.flatnonzero(self.reason < 0)
            log.error("internal: %d message(s) without an outcome; counted as internal_error",
                      len(missing))
            self.reason[missing] = CODE[INTERNAL_ERROR]
        counts = defaultdict(int)
        width = len(REASONS)
        owner = self.owner.astype(np.int64) + 1  # 0: GLOBAL
        combined = owner * width + self.reason
        for value, hits in zip(*np.unique(combined, return_counts=True)):
            who, reason = divmod(int(value), width)
            key = GLOBAL if who == 0 else names[who - 1]
            counts[(key, REASONS[reason])] += int(hits)
            counts[(key, RECEIVED)] += int(hits)
        return dict(counts)

    def _acknowledgements(self, batch, names) -> AckBatch:
        """The spec §6 acknowledgements of a committed batch: one per report with a device
        topic, a header and a campaign whose config asks for them, with its outcome.
        Transient rejections (`phase_not_open`, `internal_error`) get none: the device
        re-sends."""
        parts = []
        due = (self.status >= 0) & (self.owner >= 0) & (batch.payload_len >= protocol.HEADER_SIZE)
        for u in np.unique(self.owner[due]).tolist():
            camp = self.campaigns.get(names[u])
            if camp is None or not cfgmod.acknowledged(camp.config):
                continue
            idx = np.flatnonzero(due & (self.owner == u))
            hdr, _lengths = batch.headers(idx)
            body = np.empty((len(idx), protocol.ACK_SIZE), np.uint8)
            body[:, 0] = protocol.PROTOCOL_VERSION
            body[:, 1] = protocol.ACK_KIND
            body[:, 2] = hdr[:, 2]
            body[:, 3] = self.status[idx]
            body[:, 4:12] = hdr[:, 4:12]
            parts.append(AckBatch.for_devices(("ldp/%s/a/" % camp.name).encode(), batch, idx, body))
        return AckBatch.concat(parts)
