"""PEM, the prefix extending method: heavy hitters over strings nobody listed in advance.

Wang, Li, Jha, "Locally Differentially Private Heavy Hitter Identification" (IEEE TDSC 2019;
arXiv 1708.06674), §4 "Prefix Extending Method": every value is a string of m bits; devices are
split by a public draw into groups, group i reports the prefix of its value of length
lambda_i = lambda_1 + (i-1) * eta with a frequency oracle at the full epsilon; the aggregator
takes the 2^lambda_1 prefixes of group 1, keeps the `keep` best, extends each by every eta-bit
segment and estimates those candidates with group 2's reports, and so on up to m bits.

Here:

* Encoding (`encode`): a string's UTF-8 bytes cut or padded with NUL to the campaign's
  `max_len` bytes, so m = 8 * max_len bits, most significant bit of byte 0 first. The cut is
  on bytes (a cut multi-byte character decodes with a replacement character) and `decode`
  strips trailing NULs, so a string ending in NUL is not told from its shorter self. The
  device's work is the same for every value: it always encodes max_len bytes and hashes its
  group's ceil(lambda/8) + 2 bytes.
* Report: the shipped OLH mechanism (mechanisms/olh.py, Wang et al. USENIX Security 2017 §4.4)
  over the 32-bit key of the prefix, `prefix_key` = murmur3_32(le16(lambda) || the first
  ceil(lambda/8) bytes with the bits past lambda zeroed, KEY_SEED) (C: ldp_pem_prefix_keys).
  OLH's seeds are fresh per report, so one report can be evaluated later on any candidate keys.
* Groups (`group_of`): a public, value-independent draw; a device's group is bucket(word) over
  the cumulative group shares, `word` a public 32-bit draw (e.g. murmur3 of its device id
  with the campaign salt, `device_word`). One group per level plus, when `validate_share` > 0,
  a validation group reporting its full string (prefix length m): the final `keep` candidates
  are re-estimated on it alone and ranked by those estimates (the candidates were chosen on
  other reports, so their estimates there carry no winner's-curse bias). The default is the
  paper's §4 answer, the last group's top k (`validate_share = 0`): on 10-character Zipf
  strings the devices a validation group takes from the levels cost more recall than its
  unbiased ranking gains (tools/bench_heavy_hitters.py).
* Candidate extension (`grow`, `identify`): the paper's top-k per level is widened to `keep`
  prefixes (with k = 10 a heavy prefix is too often pushed out by the noise of the
  k * 2^eta empty candidates); a candidate never continues after NUL padding; with a public
  `alphabet` a level appends one of its bytes (or NUL) instead of any eta bits. Each level's
  candidate estimate is one C decode (olh.olh_support) over all candidate keys.
* What limits recall: when empty candidates dominate a level, the kept ones are about the top
  1/(extensions per prefix) of them, so a true prefix survives a level when its estimate
  clears that noise quantile (1.8 standard deviations for 28 extensions); `keep` changes
  little. A string at 2.5 standard deviations of one group's noise (the 10th of Zipf 1.1 over
  1,000 strings at 10^6 devices, eps = 1, 9 levels) is lost at some level about 4 times in 5.
"""
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from ..mechanisms.olh import OlhMechanism, olh_support

MAX_LEN = 255
"""Longest code in bytes (the C kernel's bound; lambda is sent as 16 bits)."""
DEFAULT_STEP = 8
"""eta: one byte per level (2^8 extensions of each kept prefix)."""
DEFAULT_KEEP = 128
DEFAULT_VALIDATE_SHARE = 0.0
MAX_CANDIDATES = 1 << 22

PemAnswer = namedtuple("PemAnswer", "strings codes frequencies candidates levels")
PemAnswer.__doc__ = ("The heavy hitters best first: decoded `strings`, their `codes` (rows of "
                     "max_len bytes) and estimated `frequencies` (fractions of the group that "
                     "ranked them); `candidates` the final candidate codes; `levels`, per level "
                     "(bits, users, candidates).")


@dataclass(frozen=True)
class PemPlan:
    """The public parameters of one PEM campaign: `max_len` bytes, eta = `step` bits per
    level, `first` bits at level 1 (default eta), `keep` prefixes kept per level, `top` k,
    `validate_share` of the devices in the validation group, OLH's `g` (None: its default),
    `alphabet` (optional, public: the characters the campaign looks for; the aggregator then
    extends byte by byte with only their UTF-8 bytes and NUL, devices are unchanged)."""

    eps_milli: int
    max_len: int = 16
    top: int = 10
    step: int = DEFAULT_STEP
    first: int = None
    keep: int = DEFAULT_KEEP
    validate_share: float = DEFAULT_VALIDATE_SHARE
    g: int = None
    alphabet: str = None

    def __post_init__(self):
        protocol._check_eps(self.eps_milli)
        for name, lo, hi in (("max_len", 1, MAX_LEN), ("top", 1, 1 << 16), ("step", 1, 20),
                             ("keep", 1, 1 << 20)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(name, "%s must be an integer in %d..%d, got %r"
                                  % (name, lo, hi, value))
        first = self.first_bits
        if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= self.bits:
            raise ConfigError("first", "first must be an integer in 1..%d, got %r"
                              % (self.bits, self.first))
        if self.keep < self.top:
            raise ConfigError("keep", "keep (%d) must be at least top (%d)" % (self.keep, self.top))
        if self.keep << self.step > MAX_CANDIDATES:
            raise ConfigError("keep", "keep * 2^step exceeds %d candidates" % MAX_CANDIDATES)
        if self.alphabet is not None and (self.step != 8 or self.first_bits % 8):
            raise ConfigError("alphabet", "an alphabet needs step 8 and first a multiple of 8")
        width = 2 ** first if self.alphabet is None else len(self.segments()) ** (first // 8)
        if width > MAX_CANDIDATES:
            raise ConfigError("first", "level 1 would have %d candidates (at most %d)"
                              % (width, MAX_CANDIDATES))
        v = self.validate_share
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < 1.0:
            raise ConfigError("validate_share", "validate_share must be in [0, 1), got %r" % (v,))

    @property
    def bits(self) -> int:
        return 8 * self.max_len

    @property
    def first_bits(self) -> int:
        return self.step if self.first is None else self.first

    def level_bits(self) -> list:
        """lambda_1 < lambda_2 < ... = m (the paper's §4 schedule; the last step may be short)."""
        out = [min(self.first_bits, self.bits)]
        while out[-1] < self.bits:
            out.append(min(out[-1] + self.step, self.bits))
        return out

    def shares(self) -> np.ndarray:
        """Public share of the devices in each group: the levels equally, then validation."""
        levels = len(self.level_bits())
        v = float(self.validate_share)
        out = [(1.0 - v) / levels] * levels
        return np.array(out + [v] if v > 0 else out)

    def segments(self):
        """The byte values a level may append (None: every eta-bit segment)."""
        if self.alphabet is None:
            return None
        return np.array(sorted(set(self.alphabet.encode("utf-8")) | {0}), np.uint8)

    def mechanism(self) -> OlhMechanism:
        """The OLH every group reports with (the domain size is not used by PEM)."""
        params = {} if self.g is None else {"g": self.g}
        return OlhMechanism(self.eps_milli, 1 << 31, **params)


# --- encoding -------------------------------------------------------------------------------

def encode(value, max_len: int) -> bytes:
    """The code of a string (or bytes): UTF-8, cut or NUL-padded to `max_len` bytes."""
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return raw[:max_len].ljust(max_len, b"\0")


def decode(code) -> str:
    """The string of a code: trailing NULs stripped, invalid UTF-8 replaced."""
    return bytes(code).rstrip(b"\0").decode("utf-8", errors="replace")


def encode_batch(values, max_len: int) -> np.ndarray:
    """(n, max_len) uint8 codes of strings."""
    out = np.zeros((len(values), max_len), np.uint8)
    for i, v in enumerate(values):
        out[i] = np.frombuffer(encode(v, max_len), np.uint8)
    return out


def prefix_key(code: bytes, bits: int) -> int:
    """Reference (pure Python) key of the first `bits` bits of `code`."""
    nbytes = (bits + 7) // 8
    if not 1 <= bits or nbytes > min(len(code), MAX_LEN):
        raise ConfigError("bits", "prefix of %d bits of a %d-byte code" % (bits, len(code)))
    head = bytearray(code[:nbytes])
    if bits % 8:
        head[-1] &= (0xFF << (8 - bits % 8)) & 0xFF
    return protocol.murmur3_32(bits.to_bytes(2, "little") + bytes(head), protocol.KEY_SEED)


def prefix_keys(codes: np.ndarray, bits: int) -> np.ndarray:
    """Keys of the `bits`-bit prefixes of every row of `codes` (one C call)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    if codes.ndim != 2:
        raise ValueError("codes must be a 2-D uint8 array")
    out = np.empty(codes.shape[0], np.uint32)
    if kernels.lib.ldp_pem_prefix_keys(kernels.byte_ptr(codes), codes.shape[0], codes.shape[1],
                                       bits, protocol.KEY_SEED, kernels.ptr(out)) != 0:
        raise ConfigError("bits", "prefix of %d bits of %d-byte codes" % (bits, codes.shape[1]))
    return out


# --- groups ---------------------------------------------------------------------------------

def device_word(device_id: str, salt: int) -> int:
    """A device's public 32-bit draw: murmur3 of its id with the campaign salt."""
    return protocol.murmur3_32(device_id.encode("utf-8"), salt)


def group_of(words, shares) -> np.ndarray:
    """Group index of each public word: the bucket of word / 2^32 in the cumulative shares.
    A function of public inputs only (never of a value)."""
    words = np.asarray(words, dtype=np.uint64)
    edges = np.floor(np.cumsum(np.asarray(shares, np.float64))[:-1] * protocol.WORD)
    return np.searchsorted(edges.astype(np.uint64), words, side="right").astype(np.int64)


# --- aggregator -----------------------------------------------------------------------------

def extend(codes: np.ndarray, start: int, step: int) -> np.ndarray:
    """Every code (rows) with bits [start, start + step) replaced by each of the 2^step
    segments: (rows * 2^step, max_len) codes, row-major (code, segment)."""
    codes = np.asarray(codes, np.uint8)
    bits = np.unpackbits(codes, axis=1)
    step = min(step, bits.shape[1] - start)
    seg = np.arange(1 << step, dtype=np.int64)
    seg_bits = ((seg[:, None] >> np.arange(step - 1, -1, -1)) & 1).astype(np.uint8)
    out = np.repeat(bits, 1 << step, axis=0)
    out[:, start:start + step] = np.tile(seg_bits, (codes.shape[0], 1))
    return np.packbits(out, axis=1)


def extend_bytes(codes: np.ndarray, start: int, stop: int, allowed: np.ndarray) -> np.ndarray:
    """Every code with bytes [start, stop) replaced by each sequence of `allowed` bytes."""
    out = np.asarray(codes, np.uint8)
    for pos in range(start, stop):
        out = np.repeat(out, allowed.size, axis=0)
        out[:, pos] = np.tile(allowed, out.shape[0] // allowed.size)
    return out


def padded_only(codes: np.ndarray, bits: int) -> np.ndarray:
    """Rows whose first `bits` bits could start a code: no non-NUL byte after a NUL (NUL is
    the padding; bits past the prefix are zero in a candidate)."""
    head = codes[:, :(bits + 7) // 8]
    bad = ((head[:, :-1] == 0) & (head[:, 1:] != 0)).any(axis=1)
    return codes[~bad]


def grow(plan: PemPlan, codes: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Candidates: `codes` extended from bit `start` to bit `stop`, padding after padding."""
    allowed = plan.segments()
    if allowed is None:
        return padded_only(extend(codes, start, stop - start), stop)
    return padded_only(extend_bytes(codes, start // 8, stop // 8, allowed), stop)


def estimate(mech: OlhMechanism, reports: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Frequencies (fractions of these reports) of `keys` from validated OLH `reports`
    (Wang et al. 2017 §3: (support - n q*) / (n (p* - q*)))."""
    n = reports.shape[0]
    support = np.zeros(keys.size, np.int64)
    if n == 0:
        return support.astype(np.float64)
    olh_support(np.ascontiguousarray(reports), mech.g, keys, support)
    p, q = (float(x) for x in mech.support_pq())
    return (support - n * q) / (n * (p - q))


def top_rows(freqs: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest, best first (ties by index)."""
    order = np.argsort(-freqs, kind="stable")
    return order[:count]


def olh_groups(mech: OlhMechanism, reports_by_group: list):
    """`group_estimate` over validated OLH reports per group (`reports_by_group[i]`)."""
    def group_estimate(i: int, keys: np.ndarray) -> np.ndarray:
        return estimate(mech, reports_by_group[i], keys)
    group_estimate.sizes = [int(r.shape[0]) for r in reports_by_group]
    return group_estimate


def identify(plan: PemPlan, reports_by_group, mech: OlhMechanism = None) -> PemAnswer:
    """The aggregator's side of §4. `reports_by_group`: a list whose item i holds the validated
    OLH reports of group i (levels in order, then validation when the plan has it), or a
    `group_estimate(i, keys) -> frequencies` callable with a `sizes` attribute (reports per
    group) — any frequency oracle's sketch per group (the product's FLH sketches, spec §3.5)."""
    if callable(reports_by_group):
        group_estimate = reports_by_group
    else:
        group_estimate = olh_groups(mech or plan.mechanism(), reports_by_group)
    sizes = group_estimate.sizes
    schedule = plan.level_bits()
    if len(sizes) != len(plan.shares()):
        raise ConfigError("groups", "%d report groups for a plan of %d"
                          % (len(sizes), len(plan.shares())))
    levels = []
    codes = np.zeros((1, plan.max_len), np.uint8)
    for i, bits in enumerate(schedule):
        codes = grow(plan, codes, schedule[i - 1] if i else 0, bits)
        freqs = group_estimate(i, prefix_keys(codes, bits))
        levels.append((bits, sizes[i], int(codes.shape[0])))
        best = top_rows(freqs, plan.keep)
        codes, freqs = codes[best], freqs[best]
    if plan.validate_share > 0:
        freqs = group_estimate(len(sizes) - 1, prefix_keys(codes, plan.bits))
    best = top_rows(freqs, plan.top)
    return PemAnswer([decode(c) for c in codes[best]], codes[best], freqs[best], codes, levels)
