"""The two faces every mechanism module has (protocol_spec/v2/README.md §3).

Client face (`Mechanism`): `perturb(key, seq) -> report bytes` with words from the OS RNG
(or an explicit word list under test), `perturb_batch(keys, rng)` for simulation, and
`reference_report(key, words, seq)` in plain Python (the independent implementation the
shared vectors are generated from).

Aggregator face (`Sketch`): linear, DataSketches-shaped: `update(reports)`, `merge(other)`,
`serialize()` / `deserialize()`, `estimate(keys) -> estimated counts`.

Also the helpers every mechanism module shares: parameter and word validation, report arrays
with their headers filled, chunked simulation, body field access, bitmaps, the int64-state
sketch, and the generators of the shared vectors (deterministic words, parse cases).
"""
import json
import os
import struct

import numpy as np

from .. import kernels, mechanism_table, protocol
from ..errors import ConfigError, ReportFormatError, SketchMismatch

SKETCH_MAGIC = b"LDPS"
SKETCH_FORMAT = 1
"""Version of the serialized sketch (`Sketch.serialize`): raise it when the layout changes, and
keep `deserialize` reading the older ones (the state keeps sketches across upgrades)."""
W = protocol.WORD


def os_random_words(count: int):
    """`count` uniform u32 words from the OS RNG (the production source)."""
    return list(struct.unpack("<%dI" % count, os.urandom(4 * count)))


def bitmap_bytes(bits: int) -> int:
    return (bits + 7) // 8


# --- parameter, word and key validation -----------------------------------------------------

def check_int(name: str, value, lo: int, hi: int) -> int:
    """An integer parameter in [lo, hi], else ConfigError(name)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(name, "must be an integer, got %r" % (value,))
    if not lo <= int(value) <= hi:
        raise ConfigError(name, "must be in [%d, %d], got %d" % (lo, hi, value))
    return int(value)


class IntParam:
    """One integer config parameter of a mechanism: its default (an int, or a function of
    eps_milli) and its bounds [lo, hi]. A mechanism declares them in `PARAMS`."""

    __slots__ = ("default", "lo", "hi")

    def __init__(self, default, lo: int, hi: int):
        self.default, self.lo, self.hi = default, lo, hi

    def value(self, name: str, given, eps_milli: int) -> int:
        """The given value checked, or the default when None."""
        if given is None:
            given = self.default(eps_milli) if callable(self.default) else self.default
        return check_int(name, given, self.lo, self.hi)


def reject_unknown(name: str, params, known=None):
    """ConfigError naming the first of `params` that mechanism `name` does not take; with
    `known` (the names it does take) anything else is unknown and the message lists them."""
    for key in params:
        if known is None:
            raise ConfigError(key, "%s takes no parameter %r" % (name, key))
        if key not in known:
            raise ConfigError(key, "%s takes no parameter %r (known: %s)"
                              % (name, key, ", ".join(known) or "none"))


def check_words(words, count: int, name: str = None) -> list:
    """`count` u32 random words as ints (ValueError otherwise; `name`: the mechanism's)."""
    words = [int(w) for w in words]
    if len(words) != count:
        who = "need" if name is None else name + " needs"
        raise ValueError("%s %d random words, got %d" % (who, count, len(words)))
    if any(not 0 <= w < W for w in words):
        raise ValueError("random words must be u32")
    return words


def as_keys(keys) -> np.ndarray:
    """Item keys as a contiguous 1-D uint32 array (ValueError for anything outside [0, 2^32))."""
    if isinstance(keys, (int, np.integer)):
        keys = [keys]
    arr = np.asarray(keys)
    if arr.size == 0:
        return np.zeros(0, np.uint32)
    if arr.dtype.kind not in "iu":
        raise TypeError("item keys must be integers (use protocol.item_key), got %s" % arr.dtype)
    if arr.dtype != np.uint32 and (arr.min() < 0 or arr.max() >= W):
        raise ValueError("item keys must be in [0, 2^32)")
    return np.ascontiguousarray(arr.ravel(), dtype=np.uint32)


# --- report arrays and batches -------------------------------------------------------------

def fill_headers(out: np.ndarray, mech: "Mechanism", seq_start: int):
    """Header columns of an (n, report_size) array: fixed fields, then seq = seq_start + i."""
    n = out.shape[0]
    out[:, :protocol.HEADER_SIZE] = np.frombuffer(mech.header(0), np.uint8)
    seq = (np.arange(n, dtype=np.uint64) + np.uint64(seq_start % W)) % np.uint64(W)
    out[:, 8:12] = seq.astype("<u4").view(np.uint8).reshape(n, 4)


def report_array(mech: "Mechanism", n: int, seq_start: int) -> np.ndarray:
    """(n, report_size) uint8 with every header filled: seq = seq_start + i (mod 2^32)."""
    out = np.zeros((n, mech.report_size), np.uint8)
    fill_headers(out, mech, seq_start)
    return out


def run_chunks(mech: "Mechanism", rng, n: int, kernel):
    """Simulation: kernel(start, stop, words) over chunks of users whose words (drawn from the
    seeded `rng`, kernels.random_words) stay within ~2^24."""
    for start, stop in kernels.spans(n, kernels.chunk_rows(mech.random_words)):
        kernel(start, stop, kernels.random_words(rng, stop - start, mech.random_words))


def contiguous_bodies(mech: "Mechanism", reports):
    """Validated reports as a C-contiguous (n, report_size) array (ReportFormatError if not)."""
    return np.ascontiguousarray(mech.check(reports))


def body_ptr(arr: np.ndarray, row: int = 0):
    """Pointer to the body of report `row` of an (n, report_size) array."""
    return kernels.byte_ptr(arr, row * arr.shape[1] + protocol.HEADER_SIZE)


def body_u32(bodies: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian u32 field at `offset` of every body."""
    return np.ascontiguousarray(bodies[:, offset:offset + 4]).view("<u4").ravel()


def body_u16(bodies: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian u16 field at `offset` of every body."""
    return np.ascontiguousarray(bodies[:, offset:offset + 2]).view("<u2").ravel()


def pack_bitmap(bits) -> bytes:
    """Bit i of the list at byte i >> 3, bit i & 7 (spec §3 bitmaps)."""
    out = bytearray(bitmap_bytes(len(bits)))
    for i, bit in enumerate(bits):
        if bit:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


class Mechanism:
    """Client face and parameters of one mechanism in one campaign phase.

    Subclasses set `name`, declare their config parameters in `PARAMS` (name -> IntParam; any
    other parameter raises ConfigError, each one becomes an attribute), set `body_size` and
    `random_words` (class attributes, or properties when they depend on parameters) and
    implement `reference_report`, `perturb_batch`, `validate_bodies`, `new_sketch`,
    `item_variances` (or `variance`).
    """

    name = ""
    set_valued = False
    PARAMS = {}
    default_phase = 1
    estimate_dependence = "any"
    """How the estimates of items nobody holds depend on each other given the fleet's data:
    "independent" where shown (then a list is tested with Benjamini-Hochberg), else "any"
    (Benjamini-Yekutieli); service/campaigns/significance.py says why for each mechanism."""
    body_size: int
    random_words: int

    def __init__(self, eps_milli: int, domain_size: int, salt: int = 0, campaign_id: int = 0,
                 phase: int = None, **params):
        protocol._check_eps(eps_milli)
        if domain_size < 2:
            raise ValueError("domain_size must be >= 2, got %d" % domain_size)
        reject_unknown(self.name, params, tuple(self.PARAMS))
        self.eps_milli = eps_milli
        self.eps = eps_milli / 1000.0
        self.domain_size = int(domain_size)
        self.salt = int(salt) % protocol.WORD
        self.campaign_id = int(campaign_id)
        self.phase = self.default_phase if phase is None else int(phase)
        self.params = {}
        for key, spec in self.PARAMS.items():
            self.params[key] = spec.value(key, params.get(key), eps_milli)
            setattr(self, key, self.params[key])

    # --- sizes ---------------------------------------------------------------------------
    @property
    def report_size(self) -> int:
        return protocol.HEADER_SIZE + self.body_size

    def header(self, seq: int) -> bytes:
        return protocol.pack_header(self.name, self.phase, self.campaign_id, seq)

    def config_params(self) -> dict:
        """Parameters as they appear in the campaign config's phase entry."""
        return dict(self.params)

    def describe(self) -> dict:
        return {"mechanism": self.name, "eps_milli": self.eps_milli, "domain_size": self.domain_size,
                "salt": self.salt, "campaign_id": self.campaign_id, "phase": self.phase,
                "params": self.config_params()}

    # --- client face ---------------------------------------------------------------------
    def reference_report(self, value, words, seq: int = 0) -> bytes:
        """Plain-Python perturbation from explicit random words (spec §3)."""
        raise NotImplementedError

    def c_report(self, value, words, seq: int = 0) -> bytes:
        """The same report through the C kernel (batch of one): must equal reference_report."""
        raise NotImplementedError

    def perturb(self, value, seq: int = 0, words=None) -> bytes:
        """One report. `words` only under test; production draws from os.urandom."""
        if words is None:
            words = os_random_words(self.random_words)
        return self.reference_report(value, words, seq)

    def perturb_batch(self, keys: np.ndarray, rng: np.random.Generator, seq_start: int = 0) -> np.ndarray:
        """Simulation: reports for many users through the C kernels, shape (n, report_size) uint8.

        The aggregator-side simulator may use a seeded numpy Generator; devices never do."""
        raise NotImplementedError

    # --- validation ----------------------------------------------------------------------
    def as_report_array(self, reports) -> np.ndarray:
        """bytes / list of bytes / 2-D uint8 array -> (n, report_size) uint8 (checks sizes)."""
        if isinstance(reports, np.ndarray):
            arr = reports
            if arr.ndim != 2 or arr.shape[1] != self.report_size or arr.dtype != np.uint8:
                raise ReportFormatError("size", "expected (n, %d) uint8 reports, got %s %s"
                                        % (self.report_size, arr.shape, arr.dtype))
            return arr
        if isinstance(reports, (bytes, bytearray, memoryview)):
            reports = [bytes(reports)]
        for r in reports:
            if len(r) != self.report_size:
                raise ReportFormatError("size", "report of %d bytes, %s expects %d"
                                        % (len(r), self.name, self.report_size))
        if not reports:
            return np.zeros((0, self.report_size), np.uint8)
        return np.frombuffer(b"".join(reports), np.uint8).reshape(-1, self.report_size)

    def validate(self, arr: np.ndarray) -> np.ndarray:
        """Per-report error field index into protocol registry 'errors' (-1 = valid): the
        header by `protocol.header_faults` (this mechanism, phase and campaign id), then
        the body fields."""
        faults, _ = protocol.header_faults(arr, self.header_rule)
        out = np.where(faults >= 0, HEADER_TO_ERROR[faults], -1).astype(np.int16)
        return first_faults(self.validate_bodies(arr[:, protocol.HEADER_SIZE:]), out)

    @property
    def header_rule(self) -> protocol.HeaderRule:
        """Reports of this mechanism's phase only."""
        before = (0,) * (self.phase - 1)
        return protocol.HeaderRule(self.campaign_id, before + (protocol.MECHANISM_IDS[self.name],),
                                   before + (self.report_size,), first_phase=self.phase)

    def check(self, reports) -> np.ndarray:
        """Reports as an array, raising ReportFormatError for the first invalid one."""
        arr = self.as_report_array(reports)
        codes = self.validate(arr)
        bad = np.flatnonzero(codes >= 0)
        if bad.size:
            raise ReportFormatError(ERROR_FIELDS[codes[bad[0]]],
                                    "report %d is invalid for %s" % (bad[0], self.name))
        return arr

    def validate_bodies(self, bodies: np.ndarray):
        """[(field, bool mask of invalid rows)] for the body fields."""
        raise NotImplementedError

    # --- aggregator face -----------------------------------------------------------------
    def new_sketch(self) -> "Sketch":
        raise NotImplementedError

    def item_variances(self, n: int, freqs) -> np.ndarray:
        """Exact variance of each item's estimated fraction, for true fractions `freqs`."""
        raise NotImplementedError

    def variance(self, n: int, freqs=None) -> float:
        """Theoretical variance of one item's frequency estimate, as a fraction of n.

        With `freqs` (true fractions) the mean over those items of `item_variances`;
        without, the value for an item of frequency 0 (the usual f -> 0 approximation)."""
        return float(np.mean(self.item_variances(n, [0.0] if freqs is None else freqs)))


ERROR_FIELDS = list(mechanism_table.ERRORS)
"""The registry's `errors` (ReportFormatError fields), generated into mechanism_table."""
HEADER_TO_ERROR = np.array([ERROR_FIELDS.index(f) if f in ERROR_FIELDS else -1
                            for f in protocol.HEADER_FAULTS] + [-1], np.int16)
"""protocol.HEADER_FAULTS index -> ERROR_FIELDS index (`phase_not_open` cannot happen for a
single mechanism: its rule opens its own phase)."""


def first_faults(checks, codes: np.ndarray) -> np.ndarray:
    """Fill `codes` (-1 = valid so far) with the ERROR_FIELDS index of each row's first
    failing (field, bad-row mask) of `checks`, in order; returns `codes`."""
    for field, bad in checks:
        codes[(codes < 0) & bad] = ERROR_FIELDS.index(field)
    return codes


def padding_mask(bitmaps: np.ndarray, bits: int):
    """Rows whose unused high bits of the last bitmap byte are not zero."""
    spare = 8 * bitmaps.shape[1] - bits
    if spare == 0:
        return np.zeros(bitmaps.shape[0], bool)
    return (bitmaps[:, -1] >> (8 - spare)) != 0


class Sketch:
    """A linear sketch of one mechanism. Merging is addition."""

    def __init__(self, mechanism: Mechanism):
        self.mechanism = mechanism
        self.n = 0

    def update(self, reports) -> int:
        """Fold validated reports in (one C call per batch). Returns how many."""
        raise NotImplementedError

    def _state(self) -> dict:
        """name -> numpy array of the linear state."""
        raise NotImplementedError

    def _set_state(self, state: dict):
        raise NotImplementedError

    def compatible(self, other: "Sketch"):
        a, b = self.mechanism.describe(), other.mechanism.describe()
        for key in a:
            if a[key] != b[key]:
                raise SketchMismatch(key, "cannot merge %r with %r" % (a[key], b[key]))

    def merge(self, other: "Sketch") -> "Sketch":
        self.compatible(other)
        mine, theirs = self._state(), other._state()
        for name in mine:
            mine[name] += theirs[name]
        self._set_state(mine)
        self.n += other.n
        return self

    def serialize(self) -> bytes:
        """LDPS | u32 json length | json(format, describe, n, arrays dtype/shape) | raw arrays.

        `format` is SKETCH_FORMAT; a sketch without one (written before formats were numbered)
        has the same layout and reads as format 0."""
        state = self._state()
        meta = {"format": SKETCH_FORMAT, "mechanism": self.mechanism.describe(), "n": self.n,
                "arrays": [[k, str(v.dtype), list(v.shape)] for k, v in state.items()]}
        head = json.dumps(meta, sort_keys=True).encode()
        return SKETCH_MAGIC + struct.pack("<I", len(head)) + head + b"".join(
            np.ascontiguousarray(v).tobytes() for v in state.values())

    @classmethod
    def deserialize(cls, data: bytes) -> "Sketch":
        """The sketch `serialize()` wrote, of any format up to SKETCH_FORMAT (SketchMismatch
        for a newer format, which a later ldpfleet wrote, or bytes that are no sketch)."""
        from . import mechanism_from_description
        if data[:4] != SKETCH_MAGIC or len(data) < 8:
            raise SketchMismatch("magic", "not a serialized ldpfleet sketch")
        (hlen,) = struct.unpack_from("<I", data, 4)
        meta = json.loads(data[8:8 + hlen])
        fmt = meta.get("format", 0)
        if type(fmt) is not int or not 0 <= fmt <= SKETCH_FORMAT:
            raise SketchMismatch("format", "sketch format %r: this ldpfleet reads formats 0..%d "
                                 "(a newer ldpfleet wrote it?)" % (fmt, SKETCH_FORMAT))
        mech = mechanism_from_description(meta["mechanism"])
        sketch = mech.new_sketch()
        pos = 8 + hlen
        state = {}
        for name, dtype, shape in meta["arrays"]:
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if pos + size > len(data):
                raise SketchMismatch(name, "serialized sketch is truncated")
            state[name] = np.frombuffer(data[pos:pos + size], dtype).reshape(shape).copy()
            pos += size
        if pos != len(data):
            raise SketchMismatch("arrays", "serialized sketch has %d trailing bytes"
                                 % (len(data) - pos))
        sketch._set_state(state)
        sketch.n = meta["n"]
        return sketch

    def estimate(self, keys) -> np.ndarray:
        """Unbiased estimated counts (float64) for the given item keys."""
        raise NotImplementedError

    def frequencies(self, keys) -> np.ndarray:
        """Estimated fractions of users."""
        return self.estimate(keys) / max(self.n, 1)


class IntStateSketch(Sketch):
    """A sketch whose linear state is the int64 arrays named in STATE (attributes).

    Subclasses implement `_fold(arr)`: add a non-empty, validated, C-contiguous
    (n, report_size) report array into the state (one C call per batch)."""

    STATE = ()

    def _fold(self, arr: np.ndarray):
        raise NotImplementedError

    def update(self, reports) -> int:
        arr = contiguous_bodies(self.mechanism, reports)
        if arr.shape[0]:
            self._fold(arr)
        self.n += arr.shape[0]
        return arr.shape[0]

    def _state(self) -> dict:
        return {name: getattr(self, name) for name in self.STATE}

    def _set_state(self, state: dict):
        for name in self.STATE:
            arr = np.asarray(state.get(name))
            current = getattr(self, name)
            if arr.shape != current.shape:
                raise SketchMismatch(name, "state shape %s, expected %s"
                                     % (arr.shape, current.shape))
            setattr(self, name, np.array(arr, dtype=np.int64))

    def merge(self, other: "Sketch") -> "Sketch":
        self.compatible(other)
        for name in self.STATE:
            getattr(self, name)[...] += getattr(other, name)
        self.n += other.n
        return self
