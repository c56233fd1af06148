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
* Report (spec §3.5): FLH (mechanisms/flh.py; Cormode, Maddock, Maple, "Frequency Estimation
  under Local Differential Privacy", VLDB 2021 §4) with k' public seeds salt + j over the 32-bit
  key of the prefix, `prefix_key` = murmur3_32(le16(lambda) || the first ceil(lambda/8) bytes
  with the bits past lambda zeroed, KEY_SEED) (C: ldp_pem_prefix_keys). The aggregator keeps
  one k' x g count table per group (`flh_counts`) and estimates any candidate keys from it
  (`flh_estimate`: one C kernel, ldp_flh_support, O(k') per candidate whatever the number of
  reports). OLH (`oracle="olh"`, fresh seeds per report, O(reports) per candidate) stays
  selectable for comparison.
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
  `alphabet` a level appends its bytes (or NUL) instead of any eta bits, and a level may
  append several characters (`levels`). Each level's candidate estimate is one C decode over
  all candidate keys.
* What limits recall: a true prefix survives a level when its estimate clears the noise of
  that level's empty candidates (the kept ones are about their top keep/candidates), and the
  final top k is ranked on one group's estimates, where the 10th and 11th of Zipf 1.1 over
  1,000 strings are 0.6 standard deviations apart at 10^6 devices, eps = 1. Fewer, longer
  levels (`PemPlan.for_fleet`: 3 characters a level) leave more devices per group, and the
  pooled ranking (`pooled`) lets the earlier groups' prefix estimates join the last group's
  for the final candidates.
"""
import math
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from ..mechanisms.base import body_ptr
from ..mechanisms.flh import TABLE_MAX, FlhMechanism
from ..mechanisms.olh import OlhMechanism, default_g, item_spans, olh_support

MAX_LEN = 255
"""Longest code in bytes (the C kernel's bound; lambda is sent as 16 bits)."""
DEFAULT_STEP = 8
"""eta: one byte per level (2^8 extensions of each kept prefix)."""
DEFAULT_KEEP = 128
DEFAULT_VALIDATE_SHARE = 0.0
DEFAULT_KP = 4096
"""FLH's public seeds k' (spec §3.5 `kp`): see `PemPlan`."""
ORACLES = ("flh", "olh")
FLEET_KEEP = 32
"""`for_fleet`: prefixes kept per level."""
POOL_FINAL = 4
"""With `pool`, the last level keeps POOL_FINAL * keep candidates for the pooled ranking."""
COLLISION_RATIO = 4
"""`for_fleet`: k' keeps the collision term below 1/COLLISION_RATIO of OLH's variance."""
LEVEL_CANDIDATES = 1 << 20
"""`for_fleet`: at most this many candidates per level (keep x extensions of one step)."""
COLLISION_F2 = 0.05
"""`for_fleet`: the sum of squared frequencies k' is sized for (a top string near 20 %)."""
MAX_CANDIDATES = 1 << 22

PemAnswer = namedtuple("PemAnswer", "strings codes frequencies candidates levels")
PemAnswer.__doc__ = ("The heavy hitters best first: decoded `strings`, their `codes` (rows of "
                     "max_len bytes) and estimated `frequencies` (fractions of the group that "
                     "ranked them); `candidates` the final candidate codes; `levels`, per level "
                     "(bits, users, candidates).")


@dataclass(frozen=True)
class PemPlan:
    """The public parameters of one PEM campaign: `max_len` bytes; the prefix lengths in bits
    `levels` (spec §3.5; default: `first` bits, then eta = `step` bits per level); `keep`
    prefixes kept per level; `top` k; `validate_share` of the devices in the validation group;
    the `oracle` the groups report with, FLH (spec §3.5) with `kp` public seeds or OLH; its `g`
    (None: round(e^eps) + 1); `alphabet` (optional, public: the characters the campaign looks
    for; the aggregator then extends with only their UTF-8 bytes and NUL, devices are
    unchanged). `for_fleet` chooses them from the fleet size and epsilon."""

    eps_milli: int
    max_len: int = 16
    top: int = 10
    step: int = DEFAULT_STEP
    first: int = None
    keep: int = DEFAULT_KEEP
    validate_share: float = DEFAULT_VALIDATE_SHARE
    g: int = None
    alphabet: str = None
    oracle: str = "flh"
    kp: int = DEFAULT_KP
    levels: tuple = None
    pool: bool = False

    def __post_init__(self):
        if self.oracle not in ORACLES:
            raise ConfigError("oracle", "oracle must be one of %s, got %r" % (ORACLES, self.oracle))
        protocol._check_eps(self.eps_milli)
        for name, lo, hi in (("max_len", 1, MAX_LEN), ("top", 1, 1 << 16), ("step", 1, 64),
                             ("keep", 1, 1 << 20), ("kp", 1, 1 << 16)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(name, "%s must be an integer in %d..%d, got %r"
                                  % (name, lo, hi, value))
        if self.levels is not None:
            lv = list(self.levels) if isinstance(self.levels, (list, tuple)) else []
            if (not 1 <= len(lv) <= 64 or any(isinstance(x, bool) or not isinstance(x, int)
                                              for x in lv)
                    or lv[0] < 1 or lv[-1] != self.bits or any(b <= a for a, b in zip(lv, lv[1:]))):
                raise ConfigError("levels", "levels must be 1..64 strictly increasing bit "
                                  "lengths ending at %d, got %r" % (self.bits, self.levels))
            object.__setattr__(self, "levels", tuple(lv))
        first = self.first_bits
        if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= self.bits:
            raise ConfigError("first", "first must be an integer in 1..%d, got %r"
                              % (self.bits, self.first))
        if self.keep < self.top:
            raise ConfigError("keep", "keep (%d) must be at least top (%d)" % (self.keep, self.top))
        steps = np.diff([0] + self.level_bits())
        if self.alphabet is not None and any(int(x) % 8 for x in steps):
            raise ConfigError("alphabet", "an alphabet needs levels of whole bytes")
        for i, width in enumerate(self.extensions(int(x)) for x in steps):
            if width * (self.keep if i else 1) > MAX_CANDIDATES:
                raise ConfigError("levels" if self.levels is not None else
                                  ("keep" if i else "first"),
                                  "level %d would have %d candidates (at most %d)"
                                  % (i + 1, width * (self.keep if i else 1), MAX_CANDIDATES))
        v = self.validate_share
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < 1.0:
            raise ConfigError("validate_share", "validate_share must be in [0, 1), got %r" % (v,))

    @classmethod
    def for_fleet(cls, n: int, eps_milli: int, max_len: int, alphabet: str = None,
                  top: int = 10, **kw) -> "PemPlan":
        """The public parameters a campaign of about `n` devices uses (FLH, spec §3.5).

        * Levels (PEM §4-§5, Wang, Li, Jha, "Locally Differentially Private Heavy Hitter
          Identification", TDSC 2019): every level takes a group of the devices, so fewer,
          longer steps leave more devices per group; the limit is the decode, `keep` times the
          extensions of one step, estimated at k' hash evaluations each. A step is the most
          characters c with `keep` * A^c < LEVEL_CANDIDATES (A: the alphabet's bytes and NUL,
          else 256): 3 characters over a 27-letter alphabet, 1 byte without one; the
          `max_len` characters are spread over ceil(max_len / c) levels as evenly as possible
          (longer steps first: 6 -> 3+3, 10 -> 3+3+2+2). `keep` = FLEET_KEEP; the final
          ranking is `pooled` (`pool=True`).
        * k' (FLH, Cormode, Maddock, Maple, "Frequency Estimation under Local Differential
          Privacy", VLDB 2021 §4.2; `FlhMechanism.item_variances`): a candidate's estimate
          carries, besides OLH's variance V_g / n_group, a public-seed collision term
          sum_x f_x^2 / ((g - 1) k'). k' is the power of two that keeps it below 1/COLLISION_RATIO
          (a quarter) of the former for sum f^2 = COLLISION_F2 (a top string near 20 % of the fleet), within
          1024..65536, and lowered (a power of two) until the G x k' x g table fits TABLE_MAX.
        * Measured (tools/bench_heavy_hitters.py --seeds 10, 6-character strings over 27
          symbols, Zipf 1.1 over 1,000 words, README "Heavy hitters over strings"): recall@10
          0.95 (sd 0.05, 0.9-1.0) at n = 10^5, eps = 3 and 0.92 (sd 0.06, 0.8-1.0) at
          n = 10^6, eps = 1 over 10 data draws, where the paper's eta = 8 bits (1 character a
          level, 128 kept) reaches 0.91 and 0.83-0.85; with 16 kept instead of 32 (0.94,
          0.8-1.0, at 10^6, eps = 1) the 8th-10th strings were lost at a level in some runs. Decode at 10^6 devices,
          10 characters: 5-8 s.
        """
        segs = 256 if alphabet is None else len(set(alphabet.encode("utf-8")) | {0})
        keep = kw.pop("keep", None)
        keep = max(FLEET_KEEP, top) if keep is None else keep
        c = 1
        while c < max_len and keep * segs ** (c + 1) < LEVEL_CANDIDATES:
            c += 1
        groups = -(-max_len // c)
        chars = [max_len // groups + (1 if i < max_len % groups else 0) for i in range(groups)]
        levels = tuple(8 * int(x) for x in np.cumsum(chars))
        g = kw.get("g") or default_g(eps_milli)
        t_keep = protocol.t_grr(eps_milli, g)
        p, q = t_keep / protocol.WORD, 1.0 / g
        v_g = q * (1 - q) / (p - q) ** 2
        need = COLLISION_RATIO * COLLISION_F2 * (n / groups) / ((g - 1) * v_g)
        kp = int(min(max(1 << max(0, math.ceil(math.log2(max(need, 1.0)))), 1024), 1 << 16))
        # the aggregator's sketch holds G x k' x g counts (mechanisms/pem.py): at most TABLE_MAX
        fits = max(TABLE_MAX // (groups * g), 1)
        kp = min(kp, 1 << (fits.bit_length() - 1))
        kw.setdefault("kp", kp)
        kw.setdefault("pool", True)
        return cls(eps_milli, max_len=max_len, top=top, keep=keep, alphabet=alphabet,
                   levels=levels, **kw)

    @property
    def bits(self) -> int:
        return 8 * self.max_len

    @property
    def first_bits(self) -> int:
        if self.levels is not None:
            return int(self.levels[0])
        return self.step if self.first is None else self.first

    def level_bits(self) -> list:
        """lambda_1 < lambda_2 < ... = m: `levels`, or the paper's §4 schedule (`first`, then
        `step` bits; the last step may be short)."""
        if self.levels is not None:
            return [int(x) for x in self.levels]
        out = [min(self.first_bits, self.bits)]
        while out[-1] < self.bits:
            out.append(min(out[-1] + self.step, self.bits))
        return out

    def extensions(self, bits: int) -> int:
        """Continuations of one prefix by `bits` bits (with an alphabet: its bytes and NUL)."""
        if self.alphabet is None:
            return 2 ** bits
        return len(self.segments()) ** (bits // 8)

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

    def mechanism(self, salt: int = 0):
        """The frequency oracle every group reports with (the domain size is not used by PEM):
        FLH with `kp` public seeds from the campaign `salt` (spec §3.5), or OLH."""
        params = {} if self.g is None else {"g": self.g}
        if self.oracle == "olh":
            return OlhMechanism(self.eps_milli, 1 << 31, **params)
        return FlhMechanism(self.eps_milli, 1 << 31, salt=salt, kp=self.kp, **params)


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


def flh_counts(mech: FlhMechanism, reports: np.ndarray) -> np.ndarray:
    """One group's (kp, g) int64 table from validated FLH reports: report (j, y) adds 1 at
    [j][y] (spec §3.5; one C call, `ldp_flh_count`)."""
    counts = np.zeros((mech.kp, mech.g), np.int64)
    arr = np.ascontiguousarray(reports, dtype=np.uint8)
    if arr.shape[0]:
        bad = kernels.lib.ldp_flh_count(body_ptr(arr), arr.shape[0], arr.shape[1], mech.kp,
                                        mech.g, kernels.ptr(counts))
        if bad:
            raise ValueError("%d FLH reports out of range (validate them first)" % bad)
    return counts


def flh_estimate(mech: FlhMechanism, counts: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Frequencies (fractions of the group's n = counts.sum() reports) of the candidate `keys`
    from one group's (kp, g) FLH count table (spec §3.5; Cormode, Maddock, Maple, "Frequency
    Estimation under Local Differential Privacy", VLDB 2021, §4.2):
    support(c) = sum_j counts[j][bucket(Hs(c, salt + j), g)], f(c) = (support - n/g) /
    (n (p* - 1/g)). The support of all keys is one C kernel (`ldp_flh_support`), split over
    the decoder threads by key range. This is the product's PEM estimator: a group's sketch
    (core/mechanisms/pem.py) calls it on its table."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if counts.shape != (mech.kp, mech.g):
        raise ValueError("counts of shape %s for kp=%d, g=%d" % (counts.shape, mech.kp, mech.g))
    keys = np.ascontiguousarray(keys, dtype=np.uint32)
    n = int(counts.sum())
    support = np.zeros(keys.size, np.int64)
    if n == 0 or keys.size == 0:
        return support.astype(np.float64)

    def run(part):
        a, b = part
        kernels.lib.ldp_flh_support(kernels.ptr(counts), mech.kp, mech.g, mech.salt,
                                    kernels.ptr(keys, 4 * a), b - a, kernels.ptr(support, 8 * a))

    kernels.parallel_map(run, item_spans(keys.size, mech.kp * keys.size))
    p = float(mech.support_pq()[0])
    return (support - n / mech.g) / (n * (p - 1.0 / mech.g))


def flh_groups(mech: FlhMechanism, counts_by_group: list):
    """`group_estimate` over one (kp, g) FLH count table per group (`counts_by_group[i]`)."""
    def group_estimate(i: int, keys: np.ndarray) -> np.ndarray:
        return flh_estimate(mech, counts_by_group[i], keys)
    group_estimate.sizes = [int(np.sum(c)) for c in counts_by_group]
    return group_estimate


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


def noise_threshold(freqs: np.ndarray) -> float:
    """A level's significance threshold: its noise standard deviation, robustly 1.4826 times
    the median absolute deviation of all its candidates' estimates (nearly all candidates are
    empty), times sqrt(2 ln candidates) (the union bound: no empty candidate's estimate is
    expected above it)."""
    freqs = np.asarray(freqs, np.float64)
    if freqs.size < 2:
        return float("inf")
    sd = 1.4826 * float(np.median(np.abs(freqs - np.median(freqs))))
    return sd * math.sqrt(2.0 * math.log(freqs.size))


def pooled(plan: PemPlan, group_estimate, codes: np.ndarray, last: np.ndarray,
           threshold: float) -> np.ndarray:
    """The final candidates' estimates pooled over the groups (`PemPlan.pool`): each earlier
    group i also estimates candidate c through its prefix of lambda_i bits, which holds c's
    frequency plus that of every other string with that prefix. A group's estimate joins c's,
    weighted by its number of reports (the groups' variances are in proportion), unless another
    final candidate with that prefix is significant (its last-level estimate above
    `threshold`): heavy strings sharing a prefix are then ranked on the last group alone, and a
    noise sibling of a heavy string never borrows its prefix. What remains biased upwards is a
    candidate whose prefix is shared with strings below the threshold (none of the final
    candidates' estimates changes the candidate set, only its order)."""
    sizes = group_estimate.sizes
    schedule = plan.level_bits()
    weight = np.full(codes.shape[0], float(sizes[len(schedule) - 1]))
    acc = last * weight
    significant = (last > threshold).astype(np.float64)
    for i, bits in enumerate(schedule[:-1]):
        if sizes[i] == 0:
            continue
        keys = prefix_keys(codes, bits)
        uniq, inv = np.unique(keys, return_inverse=True)
        others = np.bincount(inv, weights=significant, minlength=uniq.size)[inv] - significant
        use = others < 0.5
        est = group_estimate(i, uniq)[inv]
        acc[use] += sizes[i] * est[use]
        weight[use] += sizes[i]
    return acc / np.maximum(weight, 1.0)


def identify(plan: PemPlan, reports_by_group, mech=None) -> PemAnswer:
    """The aggregator's side of §4. `reports_by_group`: a list whose item i holds the validated
    reports (the plan's oracle, `mech`) of group i (levels in order, then validation when the plan has it), or a
    `group_estimate(i, keys) -> frequencies` callable with a `sizes` attribute (reports per
    group) — any frequency oracle's sketch per group (the product's FLH sketches, spec §3.5)."""
    mech = mech or plan.mechanism()
    if callable(reports_by_group):
        group_estimate = reports_by_group
    elif isinstance(mech, FlhMechanism):
        group_estimate = flh_groups(mech, [flh_counts(mech, r) for r in reports_by_group])
    else:
        group_estimate = olh_groups(mech, reports_by_group)
    sizes = group_estimate.sizes
    schedule = plan.level_bits()
    if len(sizes) != len(plan.shares()):
        raise ConfigError("groups", "%d report groups for a plan of %d"
                          % (len(sizes), len(plan.shares())))
    levels = []
    codes = np.zeros((1, plan.max_len), np.uint8)
    pool = plan.pool and plan.validate_share == 0 and len(schedule) > 1
    for i, bits in enumerate(schedule):
        codes = grow(plan, codes, schedule[i - 1] if i else 0, bits)
        freqs = group_estimate(i, prefix_keys(codes, bits))
        levels.append((bits, sizes[i], int(codes.shape[0])))
        last = i == len(schedule) - 1
        if pool and last:
            threshold = noise_threshold(freqs)
        best = top_rows(freqs, plan.keep * (POOL_FINAL if pool and last else 1))
        codes, freqs = codes[best], freqs[best]
    if plan.validate_share > 0:
        freqs = group_estimate(len(sizes) - 1, prefix_keys(codes, plan.bits))
    elif pool:
        freqs = pooled(plan, group_estimate, codes, freqs, threshold)
    best = top_rows(freqs, plan.top)
    return PemAnswer([decode(c) for c in codes[best]], codes[best], freqs[best], codes, levels)
