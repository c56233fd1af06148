"""A batch of received messages as arrays over one byte buffer (what the ingest validates,
dedupes and folds without a Python object per message where it can).

A `ReportBatch` holds the bytes the messages arrived in and, per message, the offset and length
of its topic and of its payload (a length of -1: no topic that is text / a payload dropped on
arrival because it was too large). It is made from the spans of the lean MQTT client's scan of
a read (a `PublishBatch`: no copy of a payload) or from (topic, payload) pairs (`from_pairs`).
Report topics are split in C (`ldp_report_topics`, the rule of `parse_report_topic`) and their
campaign and device names are taken out of the buffer as one numpy string array each.
"""
import numpy as np

from ...core import protocol
from ...core.kernels import ffi, lib, ptr

HEADER = protocol.HEADER_SIZE


def _u32(a):
    return ffi.from_buffer("uint32_t[]", a)


class ReportBatch:
    """Messages as arrays: `data` (uint8), `topic_off`/`topic_len`, `payload_off`/`payload_len`
    (int64; -1 length = none), `packet_id` and `qos` (the broker's, for the PUBACKs)."""

    def __init__(self, data, topic_off, topic_len, payload_off, payload_len, packet_id=None,
                 qos=None):
        self.data = np.ascontiguousarray(np.frombuffer(data, np.uint8) if not isinstance(
            data, np.ndarray) else data, np.uint8)
        self.topic_off = np.asarray(topic_off, np.int64)
        self.topic_len = np.asarray(topic_len, np.int64)
        self.payload_off = np.asarray(payload_off, np.int64)
        self.payload_len = np.asarray(payload_len, np.int64)
        n = self.topic_off.shape[0]
        self.packet_id = np.zeros(n, np.uint16) if packet_id is None else np.asarray(packet_id, np.uint16)
        self.qos = np.ones(n, np.uint8) if qos is None else np.asarray(qos, np.uint8)
        self._split = None

    def __len__(self):
        return self.topic_off.shape[0]

    @classmethod
    def from_pairs(cls, messages) -> "ReportBatch":
        """From (topic str or None, payload bytes or None) pairs."""
        parts, toff, tlen, poff, plen, pos = [], [], [], [], [], 0
        for topic, payload in messages:
            raw = topic.encode("utf-8") if topic is not None else b""
            parts.append(raw)
            toff.append(pos)
            tlen.append(len(raw) if topic is not None else -1)
            pos += len(raw)
            body = bytes(payload) if payload is not None else b""
            parts.append(body)
            poff.append(pos)
            plen.append(len(body) if payload is not None else -1)
            pos += len(body)
        return cls(np.frombuffer(b"".join(parts), np.uint8), toff, tlen, poff, plen)

    @classmethod
    def concat(cls, batches) -> "ReportBatch":
        """One batch of several (their buffers joined, offsets moved)."""
        batches = [b for b in batches if len(b)]
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return cls(np.zeros(0, np.uint8), [], [], [], [])
        batches = [b.trimmed() for b in batches]
        shift = np.cumsum([0] + [b.data.shape[0] for b in batches[:-1]])
        cat = np.concatenate
        return cls(cat([b.data for b in batches]),
                   cat([b.topic_off + s for b, s in zip(batches, shift)]),
                   cat([b.topic_len for b in batches]),
                   cat([b.payload_off + s for b, s in zip(batches, shift)]),
                   cat([b.payload_len for b in batches]),
                   cat([b.packet_id for b in batches]), cat([b.qos for b in batches]))

    def trimmed(self) -> "ReportBatch":
        """The same messages over the span of `data` they use (a view, offsets moved): what
        `concat` copies. A batch's remainder after a flush (`take`) still shares the whole
        buffer of the read it came from; without this every concat would copy the bytes of
        messages already committed again, and the buffer would grow with every flush."""
        n = len(self)
        if n == 0 or self.data.shape[0] == 0:
            return self
        toff = np.where(self.topic_len < 0, self.data.shape[0], self.topic_off)
        poff = np.where(self.payload_len < 0, self.data.shape[0], self.payload_off)
        lo = int(min(toff.min(), poff.min()))
        hi = int(max((self.topic_off + np.maximum(self.topic_len, 0)).max(),
                     (self.payload_off + np.maximum(self.payload_len, 0)).max()))
        lo = min(lo, hi)
        if lo == 0 and hi == self.data.shape[0]:
            return self
        out = ReportBatch(self.data[lo:hi], self.topic_off - lo, self.topic_len,
                          self.payload_off - lo, self.payload_len, self.packet_id, self.qos)
        return out

    def take(self, idx) -> "ReportBatch":
        """The messages at `idx` (sharing `data`)."""
        idx = np.asarray(idx, np.int64)
        if idx.size == len(self):
            return self
        return ReportBatch(self.data, self.topic_off[idx], self.topic_len[idx],
                           self.payload_off[idx], self.payload_len[idx], self.packet_id[idx],
                           self.qos[idx])

    def compact(self) -> "ReportBatch":
        """The same messages in a buffer of their own that holds only their topics and kept
        payloads (a dropped payload's bytes are not kept)."""
        out = ReportBatch.from_pairs([(self.topic(i), self.payload(i)) for i in range(len(self))])
        out.packet_id, out.qos = self.packet_id.copy(), self.qos.copy()
        out.topic_len = np.where(self.topic_len < 0, self.topic_len, out.topic_len)
        return out

    # --- one message (logs, the rare paths) -------------------------------------------------
    def topic(self, i: int):
        """The topic as text, or None (not UTF-8, or none)."""
        if self.topic_len[i] < 0:
            return None
        try:
            return bytes(self.data[self.topic_off[i]:self.topic_off[i] + self.topic_len[i]]).decode()
        except UnicodeDecodeError:
            return None

    def payload(self, i: int):
        if self.payload_len[i] < 0:
            return None
        return bytes(self.data[self.payload_off[i]:self.payload_off[i] + self.payload_len[i]])

    def drop_payloads(self, mask):
        """Payloads dropped on arrival (too large): their length becomes -1."""
        self.payload_len = np.where(mask, -1, self.payload_len)

    # --- report topics ------------------------------------------------------------------------
    def split_topics(self):
        """(ok, campaign offset, campaign length, device offset, device length) of every topic
        by `ldp_report_topics` (spec §4: ldp/<campaign>/r/<device> or .../r/<login>/<id>)."""
        if self._split is None:
            n = len(self)
            ok = np.zeros(n, np.uint8)
            spans = [np.zeros(n, np.uint32) for _ in range(4)]
            toff = np.where(self.topic_len < 0, 0, self.topic_off).astype(np.uint32)
            tlen = np.where(self.topic_len < 0, 0, self.topic_len).astype(np.uint32)
            if n:
                lib.ldp_report_topics(ffi.from_buffer("uint8_t[]", self.data), n, _u32(toff),
                                      _u32(tlen), *[_u32(s) for s in spans],
                                      ffi.from_buffer("uint8_t[]", ok))
            self._split = (ok.astype(bool),) + tuple(s.astype(np.int64) for s in spans)
        return self._split

    def gather(self, off, length, idx, width: int) -> np.ndarray:
        """(len(idx), width) uint8: data[off[i]:off[i] + length[i]] for i in idx, cut to
        `width` and zero-padded (a negative length: zeros), in one C call (`ldp_gather_spans`)."""
        idx = np.ascontiguousarray(idx, np.int64)
        out = np.empty((idx.size, width), np.uint8)
        if idx.size and width:
            off = np.ascontiguousarray(off, np.int64)
            length = np.ascontiguousarray(length, np.int64)
            if off.size != length.size:
                raise ValueError("%d offsets, %d lengths" % (off.size, length.size))
            bad = lib.ldp_gather_spans(ffi.from_buffer("uint8_t[]", self.data), self.data.size,
                                       ptr(off), ptr(length), off.size, ptr(idx), idx.size,
                                       width, ptr(out))
            if bad:
                raise IndexError("%d index(es) or span(s) outside the batch" % bad)
        return out

    def strings(self, off, length, idx, text: bool = True) -> np.ndarray:
        """The ASCII strings at data[off[i]:off[i] + length[i]] for i in idx, as a numpy unicode
        array (names are [A-Za-z0-9_-/], checked by the topic rule); `text=False`: the bytes
        (numpy `S`, several times cheaper to compare and sort)."""
        idx = np.asarray(idx, np.int64)
        if idx.size == 0:
            return np.zeros(0, "U1" if text else "S1")
        width = max(1, int(length[idx].max()))
        raw = self.gather(off, length, idx, width).view("S%d" % width).ravel()
        return raw.astype("U%d" % width) if text else raw

    # --- payloads -----------------------------------------------------------------------------
    def headers(self, idx, width: int = HEADER):
        """(len(idx), width) header bytes (zero-padded when a payload is shorter; `width` 16:
        a recurring campaign's round header, spec §3.4) and lengths."""
        idx = np.asarray(idx, np.int64)
        return self.gather(self.payload_off, self.payload_len, idx, width), self.payload_len[idx]

    def rows(self, idx, size: int) -> np.ndarray:
        """(len(idx), size) payload bytes of messages whose payloads are `size` long."""
        return self.gather(self.payload_off, self.payload_len, idx, size)


class AckBatch:
    """The spec §6 acknowledgements of a committed batch: `topics` (uint8) with per ack
    `topic_off`/`topic_len` and the device id's offset in it (`device_off`: the topic's tail),
    and `payloads` ((n, 12) uint8, or (n, 28) once `tagged`). `packets(version)` is them as QoS 0
    PUBLISH packets, built in one C call (`ldp_mqtt_build_publishes`)."""

    def __init__(self, topics=None, topic_off=None, topic_len=None, payloads=None, device_off=None):
        self.topics = np.zeros(0, np.uint8) if topics is None else topics
        self.topic_off = np.zeros(0, np.uint32) if topic_off is None else topic_off
        self.topic_len = np.zeros(0, np.uint32) if topic_len is None else topic_len
        self.payloads = np.zeros((0, protocol.ACK_SIZE), np.uint8) if payloads is None else payloads
        self.device_off = self.topic_off if device_off is None else device_off

    def __len__(self):
        return self.topic_off.shape[0]

    @classmethod
    def for_devices(cls, prefix: bytes, batch: ReportBatch, idx, payloads) -> "AckBatch":
        """Topics `prefix + <device>` of the messages `idx` of `batch` (their device spans)."""
        _ok, _coff, _clen, doff, dlen = batch.split_topics()
        idx = np.asarray(idx, np.int64)
        plen = len(prefix)
        dev_len = dlen[idx]
        width = plen + (int(dev_len.max()) if idx.size else 0)
        rows = np.empty((idx.size, width), np.uint8)  # prefix + device, padded to one width
        rows[:, :plen] = np.frombuffer(prefix, np.uint8)
        rows[:, plen:] = batch.gather(doff, dlen, idx, width - plen)
        topic_off = np.arange(idx.size, dtype=np.uint32) * np.uint32(width)
        return cls(rows.ravel(), topic_off, (plen + dev_len).astype(np.uint32),
                   np.ascontiguousarray(payloads, np.uint8), topic_off + np.uint32(plen))

    @classmethod
    def concat(cls, parts) -> "AckBatch":
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else cls()
        shift = np.cumsum([0] + [p.topics.shape[0] for p in parts[:-1]])
        return cls(np.concatenate([p.topics for p in parts]),
                   np.concatenate([p.topic_off + np.uint32(s) for p, s in zip(parts, shift)]),
                   np.concatenate([p.topic_len for p in parts]),
                   np.concatenate([p.payloads for p in parts]),
                   np.concatenate([p.device_off + np.uint32(s) for p, s in zip(parts, shift)]))

    def tagged(self, root: bytes) -> "AckBatch":
        """The same acknowledgements MAC'd under the ack root key (spec §6: 28 bytes each, the
        tag under each topic's device key), computed in one C call."""
        from ...core.ackkeys import sign_batch
        if len(self) == 0 or self.payloads.shape[1] != protocol.ACK_SIZE:
            return self
        dev_len = self.topic_off + self.topic_len - self.device_off
        return AckBatch(self.topics, self.topic_off, self.topic_len,
                        sign_batch(root, self.topics, self.device_off, dev_len, self.payloads),
                        self.device_off)

    def pairs(self) -> list:
        """(topic str, payload bytes) of every acknowledgement (tests, logs)."""
        return [(bytes(self.topics[o:o + n]).decode(), self.payloads[i].tobytes())
                for i, (o, n) in enumerate(zip(self.topic_off.tolist(), self.topic_len.tolist()))]

    def packets(self, version: int) -> bytes:
        """Every acknowledgement as a QoS 0 PUBLISH packet (MQTT `version` 4 or 5), one buffer."""
        n = len(self)
        if n == 0:
            return b""
        width = int(self.payloads.shape[1])
        cap = int(self.topic_len.sum()) + n * (width + 12)
        out = np.empty(cap, np.uint8)
        size = lib.ldp_mqtt_build_publishes(
            ffi.from_buffer("uint8_t[]", self.topics), _u32(self.topic_off), _u32(self.topic_len),
            ffi.from_buffer("uint8_t[]", np.ascontiguousarray(self.payloads)), width, n, 0, version,
            ffi.NULL, ffi.from_buffer("uint8_t[]", out), cap)
        if size < 0:
            raise ValueError("acknowledgements not encodable: %s"
                             % ffi.string(lib.ldp_mqtt_strerror(size)).decode())
        return out[:size].tobytes()
