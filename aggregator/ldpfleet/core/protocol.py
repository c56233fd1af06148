"""Protocol v2 primitives shared by every mechanism (protocol_spec/v2/README.md).

Item keys and the reserved item ⊥ (spec §1), the MurmurHash3 reference, integer thresholds and
the GRR pairwise bound (spec §2), the 12-byte report header (spec §3) and typed errors. Hot
paths live in the C kernels; this module is the readable reference and the place the
thresholds are computed.
"""
import math
import struct
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, ReportFormatError
from .schedule import ROUND_FLAG, ROUND_HEADER
from .mechanism_table import (  # noqa: F401 - generated from registry.json
    MECHANISM_IDS, MECHANISM_NAMES, PROTOCOL_VERSION)

KEY_SEED = 0x6C647066
WORD = 1 << 32
SCALE = 1 << 64
MAX_EPS_MILLI = 64000
"""Largest ε (milli-nats) any side accepts (spec §2)."""
HEADER = struct.Struct("<BBBBII")
HEADER_SIZE = HEADER.size  # 12
ACK = struct.Struct("<BBBBII")
ACK_SIZE = ACK.size  # 12
ACK_KIND = 0x41
ACK_ACCEPTED, ACK_DUPLICATE, ACK_REJECTED = 0, 1, 2



def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 (reference implementation; the C kernel is the fast one)."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & mask
    n = len(data)
    nblocks = n // 4
    for i in range(nblocks):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[4 * nblocks:]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


def item_key(item) -> int:
    """Spec §1: the 32-bit key of an integer or string item."""
    if isinstance(item, bool):
        raise TypeError("item must be int or str, not bool")
    if isinstance(item, int):
        if not 0 <= item < WORD:
            raise ConfigError("item", "integer item out of range [0, 2^32): %d" % item)
        return item
    if isinstance(item, (bytes, bytearray)):
        return murmur3_32(bytes(item), KEY_SEED)
    if isinstance(item, str):
        return murmur3_32(item.encode("utf-8"), KEY_SEED)
    raise TypeError("item must be int or str, got %s" % type(item).__name__)


OTHER_LABEL = "other"
"""How the reserved item ⊥ (spec §1) is shown in estimates."""
EMPTY_KEY = None  # filled below: H(b"", KEY_SEED), key(⊥) of a string domain


def other_key(domain: dict) -> int:
    """key(⊥) of a config domain (spec §1): d for an int domain, H(b"", KEY_SEED) for str."""
    if domain["type"] == "int":
        return int(domain["size"])
    return EMPTY_KEY


def item_index(domain: dict, value) -> int:
    """index(v) of spec §1: the value's domain index, d (⊥) for anything else. Never raises.
    (The reference mapping; devices do the same with constant work, spec §7.1.)"""
    if domain["type"] == "int":
        d = int(domain["size"])
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < d:
            return value
        return d
    items = domain["items"]
    if isinstance(value, str):
        try:
            return items.index(value)
        except ValueError:
            pass
    return len(items)


def keyed_hash(key: int, seed: int) -> int:
    """Hs(key, seed) = H(le32(key), seed)."""
    return murmur3_32(struct.pack("<I", key), seed)


def bucket(h: int, n: int) -> int:
    """Spec §1: (h * n) >> 32."""
    return (h * n) >> 32


def row_seed(salt: int, i: int) -> int:
    return (salt + i) % WORD


# --- spec §2: integer thresholds --------------------------------------------------------

def exp_lower(a: int, b: int) -> int:
    """Fixed-point lower bound of SCALE * e^(a/b): every Taylor term rounded down."""
    if a < 0 or b <= 0:
        raise ValueError("exp_lower needs a >= 0, b > 0")
    term = total = SCALE
    i = 1
    while term > 0:
        term = (term * a) // (b * i)
        total += term
        i += 1
    return total


def cmin(n: int) -> int:
    """Fewest 32-bit words any bucket of bucket(., n) receives."""
    return WORD // n


def cmax(n: int) -> int:
    """Most 32-bit words any bucket of bucket(., n) receives."""
    return WORD // n + (1 if WORD % n else 0)


def grr_ok(eps_milli: int, n: int) -> bool:
    """Spec §2 "every pair of outputs": GRR over n outputs is exactly ε-LDP iff n == 2, or
    the non-kept outputs' buckets are all equal, or cmax(n-1)/cmin(n-1) <= E_full/S."""
    _check_eps(eps_milli)
    if n < 2:
        raise ValueError("GRR needs at least 2 outputs, got %d" % n)
    if n == 2 or WORD % (n - 1) == 0:
        return True
    return cmax(n - 1) * SCALE <= exp_lower(eps_milli, 1000) * cmin(n - 1)


def bucket_count(r: int, n: int) -> int:
    """Exact number of 32-bit words w with bucket(w, n) == r."""
    return -((-(r + 1) * WORD) // n) + ((-r * WORD) // n)


def _check_eps(eps_milli):
    if (not isinstance(eps_milli, int) or isinstance(eps_milli, bool)
            or not 0 < eps_milli <= MAX_EPS_MILLI):
        raise ConfigError("epsilon", "eps_milli must be an integer in 1..%d, got %r" % (MAX_EPS_MILLI, eps_milli))


def t_rr(eps_milli: int) -> int:
    """Binary randomized response keep threshold: T/(W-T) <= e^eps."""
    _check_eps(eps_milli)
    e = exp_lower(eps_milli, 1000)
    return min((e * WORD) // (SCALE + e), WORD - 1)


def t_grr(eps_milli: int, n: int) -> int:
    """GRR over n outputs: keep iff w0 < T, else bucket(w1, n-1) among the others."""
    _check_eps(eps_milli)
    if n < 2:
        raise ValueError("GRR needs at least 2 outputs, got %d" % n)
    if n == 2:
        return t_rr(eps_milli)
    e = exp_lower(eps_milli, 1000)
    c = cmin(n - 1)
    return min((e * WORD * c) // (WORD * SCALE + e * c), WORD - 1)


def t_oue_q(eps_milli: int) -> int:
    """OUE: a non-true bit is 1 iff w < T (q ~ 1/(e^eps+1), rounded up)."""
    _check_eps(eps_milli)
    e = exp_lower(eps_milli, 1000)
    return -((-WORD * SCALE) // (SCALE + e))


T_OUE_P = 1 << 31
T_HALF = 1 << 31


def t_flip(eps_milli: int) -> int:
    """Per-bit flip threshold for CMS/LDPLCM/sampling RAPPOR: ((W-T)/T)^2 <= e^eps."""
    _check_eps(eps_milli)
    e = exp_lower(eps_milli, 2000)
    return -((-WORD * SCALE) // (SCALE + e))


def shc_thresholds(eps1_milli: int, eps2_milli: int):
    """(T1, T_shc_a, T_shc_b) of `shc` (spec §3.1, LDPMiner §4.4's correlated phases):
    T1 = T_rr(eps1) keeps the phase-1 sign; phase 2 keeps x iff w0 < (A if y1 == x else B).
    The formula's integers as they are (shc_ok says whether they are usable); ValueError for
    an eps outside 1..64000 or eps1 + eps2 > 64000."""
    _check_eps(eps1_milli)
    _check_eps(eps2_milli)
    if eps1_milli + eps2_milli > MAX_EPS_MILLI:
        raise ConfigError("epsilon", "eps1 + eps2 must be at most %d milli, got %d"
                         % (MAX_EPS_MILLI, eps1_milli + eps2_milli))
    e2 = exp_lower(eps1_milli + eps2_milli, 1000)
    g = e2 - (e2 >> 16)
    t1 = t_rr(eps1_milli)
    s, w = SCALE, WORD
    a = (w * g * (t1 * (s + g) - w * s)) // ((s + g) * (g - s) * t1)
    b = (w * g * (g * w - t1 * (s + g))) // ((s + g) * (g - s) * (w - t1))
    return t1, a, b


def t_shc_a(eps1_milli: int, eps2_milli: int) -> int:
    """`shc` phase 2: P(y2 = x | y1 = x) = T_shc_a / 2^32 (spec §3.1)."""
    return shc_thresholds(eps1_milli, eps2_milli)[1]


def t_shc_b(eps1_milli: int, eps2_milli: int) -> int:
    """`shc` phase 2: P(y2 = x | y1 = -x) = T_shc_b / 2^32 (spec §3.1)."""
    return shc_thresholds(eps1_milli, eps2_milli)[2]


def shc_ok(eps1_milli, eps2_milli) -> bool:
    """Spec §3.1 `shc_ok`: both eps >= 1 milli with eps1 + eps2 <= 64000, 0 < A, B < 2^32, and
    every output pair (y1, y2) of the joint counts T1 A, T1 (W-A), (W-T1) B, (W-T1)(W-B) within
    E(eps1 + eps2)/S between x = +1 and x = -1. False (never an error) otherwise."""
    try:
        t1, a, b = shc_thresholds(eps1_milli, eps2_milli)
    except ValueError:
        return False
    w, s = WORD, SCALE
    if not (0 < a < w and 0 < b < w):
        return False
    e2 = exp_lower(eps1_milli + eps2_milli, 1000)
    return (t1 * a * s <= e2 * (w - t1) * (w - b) and (w - t1) * (w - b) * s <= e2 * t1 * a
            and t1 * (w - a) * s <= e2 * (w - t1) * b and (w - t1) * b * s <= e2 * t1 * (w - a))


def shc_keep_probability(eps1_milli: int, eps2_milli: int):
    """p2 = (T1 A + (W - T1) B) / W^2 as a Fraction: the phase-2 sign's keep probability given
    x, whatever y1 was (spec §3.1 "Estimation")."""
    from fractions import Fraction
    t1, a, b = shc_thresholds(eps1_milli, eps2_milli)
    return Fraction(t1 * a + (WORD - t1) * b, WORD * WORD)


def eps_from_milli(eps_milli: int) -> float:
    return eps_milli / 1000.0


def eps_to_milli(eps: float) -> int:
    if not math.isfinite(eps) or not 0 < eps <= MAX_EPS_MILLI / 1000:
        raise ConfigError("epsilon", "epsilon must be in (0, %g], got %r" % (MAX_EPS_MILLI / 1000, eps))
    m = round(eps * 1000)
    if m <= 0 or abs(m - eps * 1000) > 1e-6:
        raise ConfigError("epsilon", "epsilon must be a positive multiple of 0.001, got %r" % (eps,))
    return int(m)


# --- spec §3: header ------------------------------------------------------------------------

def pack_header(mechanism: str, phase: int, campaign_id: int, nonce: int) -> bytes:
    """Spec §3: version 2, mechanism id, phase, flags 0, campaign id, nonce (the dedupe field,
    drawn from the OS RNG once per (campaign, phase) report)."""
    return HEADER.pack(PROTOCOL_VERSION, MECHANISM_IDS[mechanism], phase, 0, campaign_id, nonce)


def ack_topic(campaign: str, device: str) -> str:
    """Spec §4: the one device's acknowledgement topic of a campaign."""
    return "ldp/%s/a/%s" % (campaign, device)


def ack_for(report: bytes, status: int) -> bytes:
    """Spec §6: the acknowledgement of a report (at least a header long): version, kind "A",
    the report's phase byte, `status`, and the report's campaign_id and nonce."""
    return bytes((PROTOCOL_VERSION, ACK_KIND, report[2], status)) + bytes(report[4:12])


def ack_matches(ack: bytes, report: bytes) -> bool:
    """Spec §6, the device's rule: `ack` (received on its own ack topic) names `report`: 12
    bytes, version 2, kind "A", the report's phase, campaign_id and nonce."""
    return (len(ack) == ACK_SIZE and len(report) >= HEADER_SIZE and ack[0] == PROTOCOL_VERSION
            and ack[1] == ACK_KIND and ack[2] == report[2] and bytes(ack[4:12]) == bytes(report[4:12]))


def parse_ack(payload: bytes):
    """(phase, status, campaign_id, nonce) of a well-formed acknowledgement, else None."""
    if len(payload) != ACK_SIZE:
        return None
    version, kind, phase, status, campaign_id, nonce = ACK.unpack(payload)
    if version != PROTOCOL_VERSION or kind != ACK_KIND or status > ACK_REJECTED:
        return None
    return phase, status, campaign_id, nonce


def parse_header(report: bytes):
    """(version, mechanism_id, phase, flags, campaign_id, nonce) of a report, unchecked (the
    rule is `header_faults`); a report shorter than the header is a `size` ReportFormatError."""
    if len(report) < HEADER_SIZE:
        raise ReportFormatError("size", "report of %d bytes is shorter than the %d-byte header"
                                % (len(report), HEADER_SIZE))
    return HEADER.unpack_from(report, 0)


HEADER_FAULTS = ("size", "version", "phase", "phase_not_open", "mechanism", "flags",
                 "campaign_id", "round")
"""What `header_faults` can find wrong with a report, by name (`phase_not_open`: a phase the
campaign has not opened yet; the others are the registry's error fields)."""
ROUND_HEADER_SIZE = ROUND_HEADER
"""A recurring campaign's header: the 12 bytes and `round:u32` (spec §3.4, core/schedule.py)."""


@dataclass(frozen=True)
class HeaderRule:
    """What a report's header and length must say to count for one campaign (spec §3).

    `mechanism_ids[p - 1]` and `report_sizes[p - 1]` belong to phase p; phases below
    `first_phase` or above `len(mechanism_ids)` are a `phase` fault, phases above
    `open_phase` a `phase_not_open` one (a phase-2 report before the phase-2 message).

    A recurring campaign (spec §3.4) has `rounds` = R > 0: its reports carry flags 1 and
    `round:u32` at offset 12 (`report_sizes` count those 4 bytes), and a round outside
    1..`max_round` (core.schedule.highest_round at the aggregator's clock) is a `round`
    fault. `rounds` = 0: a one-shot campaign, flags 0."""

    campaign_id: int
    mechanism_ids: tuple
    report_sizes: tuple
    first_phase: int = 1
    open_phase: int = None
    rounds: int = 0
    max_round: int = 0

    @property
    def header_size(self) -> int:
        """Bytes `header_checks` reads of each report: 16 with the round header, else 12."""
        return ROUND_HEADER_SIZE if self.rounds else HEADER_SIZE


def header_faults(reports, rule: HeaderRule):
    """THE header rule, for a batch: (first fault of every report as an index into
    HEADER_FAULTS, -1 for none; the phase byte of every report), both numpy arrays.

    The checks run in this order and the first that fails names the fault: size (shorter than
    the header), version, phase, phase_not_open, mechanism, flags (not 1 in a recurring
    campaign, not 0 in another), campaign_id, size (not the report size of its phase), round
    (a recurring campaign's: 0, above R or above `max_round`). `reports`: a list of bytes, or
    an (n, size) uint8 array (all of one length). The body fields are the mechanism's
    (`Mechanism.validate`)."""
    width = rule.header_size
    if isinstance(reports, np.ndarray):
        hdr = reports[:, :width]
        lengths = np.full(reports.shape[0], reports.shape[1], np.int64)
        if reports.shape[1] < width:
            hdr = np.zeros((reports.shape[0], width), np.uint8)
            hdr[:, :reports.shape[1]] = reports
    else:
        lengths = np.fromiter(map(len, reports), np.int64, len(reports))
        hdr = np.frombuffer(b"".join(bytes(r[:width]).ljust(width, b"\0")
                                     for r in reports), np.uint8).reshape(-1, width)
    return header_checks(hdr, lengths, rule)


def header_rounds(hdr: np.ndarray) -> np.ndarray:
    """The `round` field (u32 at offset 12, spec §3.4) of (n, 16) header bytes, as int64."""
    return np.ascontiguousarray(hdr[:, HEADER_SIZE:ROUND_HEADER_SIZE]).view("<u4").ravel() \
        .astype(np.int64)


def header_checks(hdr: np.ndarray, lengths: np.ndarray, rule: HeaderRule):
    """`header_faults` of (n, rule.header_size) header bytes (zero-padded when a report is
    shorter) and the reports' lengths."""
    n = lengths.shape[0]
    phases = hdr[:, 2].astype(np.int64)
    last = len(rule.mechanism_ids)
    in_range = (phases >= rule.first_phase) & (phases <= last)
    at = np.where(in_range, phases - 1, 0)
    mids = np.asarray(rule.mechanism_ids, np.int64)[at] if last else np.zeros(n, np.int64)
    sizes = np.asarray(rule.report_sizes, np.int64)[at] if last else np.zeros(n, np.int64)
    open_phase = last if rule.open_phase is None else rule.open_phase
    cid = np.ascontiguousarray(hdr[:, 4:8]).view("<u4").ravel()
    checks = (
        ("size", lengths < HEADER_SIZE),
        ("version", hdr[:, 0] != PROTOCOL_VERSION),
        ("phase", ~in_range),
        ("phase_not_open", phases > open_phase),
        ("mechanism", hdr[:, 1] != mids),
        ("flags", hdr[:, 3] != (ROUND_FLAG if rule.rounds else 0)),
        ("campaign_id", cid != rule.campaign_id),
        ("size", lengths != sizes),
    )
    if rule.rounds:
        if hdr.shape[1] < ROUND_HEADER_SIZE:
            raise ValueError("a recurring campaign's rule needs %d header bytes, got %d"
                             % (ROUND_HEADER_SIZE, hdr.shape[1]))
        rounds = header_rounds(hdr)
        checks += (("round", (rounds < 1) | (rounds > min(rule.max_round, rule.rounds))),)
    faults = np.full(n, -1, np.int16)
    for name, bad in checks:
        faults[(faults < 0) & bad] = HEADER_FAULTS.index(name)
    return faults, phases


EMPTY_KEY = murmur3_32(b"", KEY_SEED)
