"""Strings nobody listed on the device (spec §3.5): the `strings` domain's config rules (the
aggregator's core/strings_domain.py); the code of a value, its phase-2 key and a device's
public group are ldp/pemcode.py's (the value's path).

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
from micropython import const

from .errors import ConfigError
from .pemcode import check_levels
from .thresholds import grr_ok

STRINGS = "strings"
MAX_LEN = const(64)
KP_MAX = const(65536)
G_MAX = const(65536)
CANDIDATES_MAX = const(1024)
PEM_PARAMS = ("g", "kp", "levels")


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
