"""Strings nobody listed on the device (spec §3.5): the `strings` domain's config rules (the
aggregator's core/strings_domain.py), the code of a value, its phase-2 key and a device's
public group.

Constant work (spec §3.5, §7.1): the code of a value is built by visiting exactly `max_len`
byte slots, reading the string's own UTF-8 buffer in place (MicroPython's str exposes it:
no encode, no copy whose size follows the string); the phase-2 key H(code without its
trailing NULs, KEY_SEED) is computed by a MurmurHash3 that walks every block of the code and
selects the finalised state of the code's own length, so neither time nor heap depends on the
string. Everything on the value's path runs under viper and keeps 32-bit words unboxed (a
hash >= 2^30 is a heap object on 31-bit-smallint boards: it is stored in an array slot).

Prefix extending (PEM): Wang, Li, Jha et al., "Locally differentially private heavy hitter
identification", IEEE TDSC 2019, §4.
"""
from array import array

import micropython
from micropython import const

from .errors import ConfigError
from .hash import KEY_SEED, bucket, murmur3
from .sets import KeySet
from .thresholds import grr_ok

STRINGS = "strings"
MAX_LEN = const(64)
LEVELS_MAX = const(64)
KP_MAX = const(65536)
G_MAX = const(65536)
CANDIDATES_MAX = const(1024)
PEM_PARAMS = ("g", "kp", "levels")
_NUL = b"\0"


def is_strings(domain):
    return isinstance(domain, dict) and domain.get("type") == STRINGS


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_strings_domain(domain):
    """`{"type": "strings", "max_len": L}`, 1 <= L <= 64 (else `domain.max_len`); returns L."""
    L = domain.get("max_len")
    if not _int(L) or not 1 <= L <= MAX_LEN:
        raise ConfigError("domain.max_len", "max_len must be an integer in 1..%d, got %r"
                          % (MAX_LEN, L))
    return L


def check_levels(levels, max_len):
    ok = isinstance(levels, list) and 1 <= len(levels) <= LEVELS_MAX \
        and all(_int(b) for b in levels)
    if ok:
        ok = levels[0] >= 1 and levels[-1] == 8 * max_len
        for i in range(1, len(levels)):
            ok = ok and levels[i - 1] < levels[i]
    if not ok:
        raise ConfigError("params.levels", "levels must be 1..%d strictly increasing bit lengths "
                          ">= 1 ending at 8 * max_len = %d" % (LEVELS_MAX, 8 * max_len))
    return levels


def check_pem_params(params, eps_milli, max_len):
    if not isinstance(params, dict) or len(params) != len(PEM_PARAMS) \
            or any(k not in params for k in PEM_PARAMS):
        raise ConfigError("phases.params", "pem takes exactly g, kp and levels (spec §3.5)")
    g, kp = params["g"], params["kp"]
    if not _int(g) or not 2 <= g <= G_MAX:
        raise ConfigError("params.g", "g must be an integer in 2..%d, got %r" % (G_MAX, g))
    if not grr_ok(eps_milli, g):
        raise ConfigError("params.g", "GRR over %d outputs is not exactly eps-LDP at eps_milli %d "
                          "(spec §2)" % (g, eps_milli))
    if not _int(kp) or not 1 <= kp <= KP_MAX:
        raise ConfigError("params.kp", "kp must be an integer in 1..%d, got %r" % (KP_MAX, kp))
    check_levels(params["levels"], max_len)
    return params


def check_strings_phases(doc):
    """`pem` only on a strings domain; a strings domain takes exactly `pem` then `psgrr` with
    params {"l": 1}, both with `sample_rate_ppm` (the aggregator's check_strings_phases)."""
    names = [ph["mechanism"] for ph in doc["phases"]]
    if not is_strings(doc["domain"]):
        if "pem" in names:
            raise ConfigError("phases.mechanism", "pem runs only on a strings domain (spec §3.5)")
        return
    if names != ["pem", "psgrr"]:
        raise ConfigError("phases.mechanism", "a strings domain takes pem in phase 1 and psgrr "
                          "in phase 2 (spec §3.5)")
    first, second = doc["phases"]
    for ph in doc["phases"]:
        if "sample_rate_ppm" not in ph:
            raise ConfigError("phases.sample_rate_ppm", "a PEM campaign splits its devices "
                              "between the phases by sample_rate_ppm (spec §3.5, §5.4)")
    L = check_strings_domain(doc["domain"])
    check_pem_params(first.get("params", {}), first["eps_milli"], L)
    p2 = second.get("params", {})
    if not isinstance(p2, dict) or len(p2) != 1 or p2.get("l") != 1 or not _int(p2.get("l")):
        raise ConfigError("params.l", "a PEM campaign's phase 2 is psgrr with params {\"l\": 1}")


def check_pem_phase2(body):
    """A PEM phase-2 body carries 1..1024 distinct u32 `candidates` (`candidates`)."""
    cand = body.get("candidates")
    if not isinstance(cand, list) or not 1 <= len(cand) <= CANDIDATES_MAX:
        raise ConfigError("candidates", "a PEM phase 2 carries 1..%d keys" % CANDIDATES_MAX)
    for c in cand:
        if not _int(c) or not 0 <= c <= 0xFFFFFFFF:
            raise ConfigError("candidates", "candidate keys must be u32")
    if len(set(cand)) != len(cand):
        raise ConfigError("candidates", "candidate keys must be distinct")
    return body


def group_of(device, salt, groups):
    """A device's public group: bucket(H(utf8(device), (salt + 1) mod 2^32), G) (spec §3.5).
    The device id is public: this may allocate."""
    data = device.encode()
    return bucket(murmur3(data, len(data), (salt + 1) & 0xFFFFFFFF), groups)


# --- the code of a value and its keys (the value's path: viper, constant work) --------------

@micropython.viper
def _fill(src: ptr8, n: int, out: ptr8, size: int):
    """out[i] = src[i] for i < n, else 0, for every i < size: `size` slots whatever n is (a
    slot past n reads src[0] and keeps 0)."""
    i = 0
    while i < size:
        inside = int(i < n)
        out[i] = src[i * inside] * inside
        i += 1


def fill_code(value, code, max_len):
    """The code of `value` into `code` (a bytearray of max_len + 4: the 4 last slots stay 0):
    a str's UTF-8 bytes cut to max_len (a cut may split a character), NUL-padded; anything
    else (None, a number, bytes, a list) the all-NUL code. The string's buffer is read in place
    (memoryview: a fixed-size object whatever the string)."""
    is_str = isinstance(value, str)
    src = (_NUL, value)[is_str]
    n = (0, len(memoryview(src)))[is_str]
    src = (src, _NUL)[n == 0]
    _fill(src, min(n, max_len), code, max_len + 4)
    return code


@micropython.viper
def _code_key(code: ptr8, size: int, seed: uint, out: ptr32) -> int:
    """out[0] = H(code[:n], seed), n = the code without its trailing NULs (code has size + 4
    slots, the last 4 NUL): every block of the code is mixed and the state finalised at the
    one block where the tail of n starts is selected by masks. Returns n > 0 (a real element)."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    c1 = (uint(0xCC9E) << 16) | uint(0x2D51)
    c2 = (uint(0x1B87) << 16) | uint(0x3593)
    n = 0
    i = 0
    while i < size:
        nz = int(code[i] != 0)
        n = n * (1 - nz) + (i + 1) * nz
        i += 1
    h = seed & mask
    res = uint(0)
    blocks = (size >> 2) + 1
    b = 0
    while b < blocks:
        o = b << 2
        t = n - o
        sel = uint(0) - uint(int(t >= 0) & int(t < 4))
        k = uint(code[o]) | (uint(code[o + 1]) << 8) | (uint(code[o + 2]) << 16)
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        f = h ^ k ^ uint(n)
        f ^= f >> 16
        f = (f * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
        f ^= f >> 13
        f = (f * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
        f ^= f >> 16
        res |= f & sel
        k = uint(code[o]) | (uint(code[o + 1]) << 8) | (uint(code[o + 2]) << 16) | (uint(code[o + 3]) << 24)
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        hb = h ^ k
        hb = ((hb << 13) | (hb >> 19)) & mask
        hb = (hb * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
        full = uint(0) - uint(int(o + 4 <= n))
        h = (hb & full) | (h & (full ^ mask))
        b += 1
    out[0] = res
    return int(n > 0)


@micropython.viper
def _prefix_key(code: ptr8, bits: int, buf: ptr8, seed: uint, out: ptr32):
    """out[0] = key_λ = H(le16(λ) || the first ceil(λ/8) bytes of the code with the bits past
    λ zeroed, seed) (spec §3.5). λ is public (the device's group): the bytes hashed are too."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    c1 = (uint(0xCC9E) << 16) | uint(0x2D51)
    c2 = (uint(0x1B87) << 16) | uint(0x3593)
    nb = (bits + 7) >> 3
    buf[0] = bits & 0xFF
    buf[1] = (bits >> 8) & 0xFF
    i = 0
    while i < nb:
        buf[2 + i] = code[i]
        i += 1
    r = bits & 7
    if r:
        buf[1 + nb] = buf[1 + nb] & ((0xFF << (8 - r)) & 0xFF)
    n = nb + 2
    h = seed & mask
    i = 0
    end = n - (n & 3)
    while i < end:
        k = uint(buf[i]) | (uint(buf[i + 1]) << 8) | (uint(buf[i + 2]) << 16) | (uint(buf[i + 3]) << 24)
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
        i += 4
    tail = n - end
    if tail > 0:
        k = uint(buf[i])
        if tail > 1:
            k |= uint(buf[i + 1]) << 8
        if tail > 2:
            k |= uint(buf[i + 2]) << 16
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= uint(n)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    out[0] = h


class Code:
    """A code buffer of max_len (+4 NUL slots) and its key slot, allocated once per config."""

    def __init__(self, max_len):
        self.max_len = max_len
        self.code = bytearray(max_len + 4)
        self.buf = bytearray(max_len + 2)
        self.key = array("I", bytes(4))

    def fill(self, value):
        fill_code(value, self.code, self.max_len)
        return self

    def prefix_key(self, bits):
        """key_λ into self.key[0]."""
        if not 1 <= bits <= 8 * self.max_len:
            raise ConfigError("params.levels", "prefix of %d bits of a %d-byte code"
                              % (bits, self.max_len))
        _prefix_key(self.code, bits, self.buf, KEY_SEED, self.key)
        return self.key

    def element(self, keyset):
        """The phase-2 set (spec §3.5) into a 1-slot KeySet: [the code's key], live iff the
        code is not all NUL (else the dummy)."""
        live = _code_key(self.code, self.max_len, KEY_SEED, keyset.keys)
        keyset.live[0] = live
        keyset.kinds[0] = live
        return keyset


def phase2_keyset(value, max_len):
    """A device's phase-2 input of a PEM campaign: a 1-slot KeySet holding its code's key
    (live) or nothing (the dummy). The same allocations for every value."""
    return Code(max_len).fill(value).element(KeySet(1))


def join_surrogates(value):
    """`value` with every surrogate pair MicroPython's json left as two code points ("\\ud83d
    \\ude00" decodes to CESU-8 bytes ED A0 BD ED B8 80) joined into the one character it
    encodes (F0 9F 98 80), as CPython's json does; other values unchanged. Run once on a
    flashed value, at start (spec §3.5: the code is the string's UTF-8)."""
    if not isinstance(value, str):
        return value
    raw = value.encode()
    if b"\xed" not in raw:
        return value
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        if i + 5 < n and raw[i] == 0xED and 0xA0 <= raw[i + 1] <= 0xAF \
                and raw[i + 3] == 0xED and 0xB0 <= raw[i + 4] <= 0xBF:
            hi = ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F)
            lo = ((raw[i + 4] & 0x3F) << 6) | (raw[i + 5] & 0x3F)
            cp = 0x10000 + ((hi & 0x3FF) << 10) + (lo & 0x3FF)
            out.extend(bytes((0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F),
                              0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))))
            i += 6
        else:
            out.append(raw[i])
            i += 1
    return bytes(out).decode()
