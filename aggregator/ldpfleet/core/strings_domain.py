"""Strings nobody listed (protocol_spec/v2 §3.5): the `strings` domain, the code of a value, its
phase-2 key, a device's public group and the rules of a PEM campaign's phases.

The one place these rules live on the aggregator side: `config.check_config` calls
`check_strings_domain` / `check_strings_phases`, the `pem` mechanism (mechanisms/pem.py) takes
codes, groups and levels from here, and the vectors (protocol_spec/v2/vectors/strings.json,
reports_pem.json) are generated from these functions. Every refusal is a ConfigError naming the
spec's field.

Prefix extending (PEM): Wang, Li, Jha et al., "Locally differentially private heavy hitter
identification", IEEE TDSC 2019, §4.
"""
from . import protocol
from .errors import ConfigError

STRINGS = "strings"
MAX_LEN = 64
"""`max_len` of a strings domain: 1..64 bytes (spec §3.5)."""
LEVELS_MAX = 64
KP_MAX = 65536
G_MAX = 65536
CANDIDATES_MAX = 1024
"""At most this many keys in a PEM campaign's phase-2 `candidates` (spec §3.5)."""
PEM_PARAMS = ("g", "kp", "levels")


def is_strings(domain) -> bool:
    return isinstance(domain, dict) and domain.get("type") == STRINGS


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_strings_domain(domain: dict) -> int:
    """`{"type": "strings", "max_len": L}`, 1 <= L <= 64 (else `domain.max_len`); returns L."""
    L = domain.get("max_len")
    if not _int(L) or not 1 <= L <= MAX_LEN:
        raise ConfigError("domain.max_len", "max_len must be an integer in 1..%d, got %r"
                          % (MAX_LEN, L))
    return L


def check_levels(levels, max_len: int) -> list:
    """Spec §3.5 `params.levels`: 1..64 prefix lengths in bits, strictly increasing, each >= 1,
    the last equal to 8 * max_len."""
    ok = isinstance(levels, list) and 1 <= len(levels) <= LEVELS_MAX \
        and all(_int(b) for b in levels)
    if ok:
        ok = levels[0] >= 1 and all(a < b for a, b in zip(levels, levels[1:])) \
            and levels[-1] == 8 * max_len
    if not ok:
        raise ConfigError("params.levels", "levels must be 1..%d strictly increasing bit lengths "
                          ">= 1 ending at 8 * max_len = %d, got %r"
                          % (LEVELS_MAX, 8 * max_len, levels))
    return levels


def check_pem_params(params, eps_milli: int, max_len: int) -> dict:
    """A `pem` phase's params, every one spelled out (devices compute no defaults): `g`
    2..65536 passing grr_ok (`params.g`), `kp` 1..65536 (`params.kp`), `levels` as
    `check_levels`; any other key refuses (`phases.params`)."""
    if not isinstance(params, dict) or set(params) != set(PEM_PARAMS):
        raise ConfigError("phases.params", "pem takes exactly g, kp and levels (spec §3.5), got %s"
                          % (sorted(params) if isinstance(params, dict) else params,))
    g, kp = params["g"], params["kp"]
    if not _int(g) or not 2 <= g <= G_MAX:
        raise ConfigError("params.g", "g must be an integer in 2..%d, got %r" % (G_MAX, g))
    if not protocol.grr_ok(eps_milli, g):
        raise ConfigError("params.g", "GRR over %d outputs is not exactly eps-LDP at eps_milli %d "
                          "(spec §2)" % (g, eps_milli))
    if not _int(kp) or not 1 <= kp <= KP_MAX:
        raise ConfigError("params.kp", "kp must be an integer in 1..%d, got %r" % (KP_MAX, kp))
    check_levels(params["levels"], max_len)
    return params


def check_strings_phases(doc: dict):
    """`pem` only on a strings domain; a strings domain takes exactly `pem` in phase 1 and
    `psgrr` with `l = 1` in phase 2 (`phases.mechanism`, `params.l`), both with the public
    split `sample_rate_ppm` (`phases.sample_rate_ppm`); pem's params as `check_pem_params`."""
    names = [ph["mechanism"] for ph in doc["phases"]]
    if not is_strings(doc["domain"]):
        if "pem" in names:
            raise ConfigError("phases.mechanism", "pem runs only on a strings domain (spec §3.5)")
        return
    if names != ["pem", "psgrr"]:
        raise ConfigError("phases.mechanism", "a strings domain takes pem in phase 1 and psgrr in "
                          "phase 2 (spec §3.5), got %s" % names)
    first, second = doc["phases"]
    for ph in doc["phases"]:
        if "sample_rate_ppm" not in ph:
            raise ConfigError("phases.sample_rate_ppm", "a PEM campaign splits its devices between "
                              "the phases by sample_rate_ppm (spec §3.5, §5.4)")
    L = check_strings_domain(doc["domain"])
    check_pem_params(first.get("params", {}), first["eps_milli"], L)
    p2 = second.get("params", {})
    if not isinstance(p2, dict) or set(p2) != {"l"} or not _int(p2["l"]) or p2["l"] != 1:
        # not `p2 != {"l": 1}`: True and 1.0 equal 1 in Python, and both clients refuse them
        raise ConfigError("params.l", "a PEM campaign's phase 2 is psgrr with params "
                          "{\"l\": 1} (spec §3.5), got %r" % (second.get("params"),))


def check_pem_phase2(body: dict) -> dict:
    """A PEM campaign's phase-2 body carries 1..1024 distinct u32 `candidates` (`candidates`)."""
    cand = body.get("candidates")
    if not isinstance(cand, list) or not 1 <= len(cand) <= CANDIDATES_MAX \
            or not all(_int(c) and 0 <= c < protocol.WORD for c in cand) \
            or len(set(cand)) != len(cand):
        raise ConfigError("candidates", "a PEM phase 2 carries 1..%d distinct u32 keys"
                          % CANDIDATES_MAX)
    return body


# --- codes, keys, groups --------------------------------------------------------------------

def code_of(value, max_len: int) -> bytes:
    """Spec §3.5: a string's UTF-8 bytes cut to `max_len` (a cut may split a character) and
    NUL-padded to exactly `max_len`; anything else (missing, a number, a list, bytes) is the
    all-NUL code (the empty string). Visits exactly max_len byte slots."""
    raw = value.encode("utf-8") if isinstance(value, str) else b""
    out = bytearray(max_len)
    for i in range(max_len):
        out[i] = raw[i] if i < len(raw) else 0
    return bytes(out)


def code_key(code: bytes) -> int:
    """The key of a code: H(the code without its trailing NULs, KEY_SEED) -- a `str` domain's
    key of the string when it was not cut; the empty code's is key(⊥) of a string domain."""
    return protocol.murmur3_32(bytes(code).rstrip(b"\0"), protocol.KEY_SEED)


def phase2_element(code: bytes) -> list:
    """A device's phase-2 set: [its code's key], or [] (the dummy) for the empty code."""
    return [code_key(code)] if any(code) else []


def code_string(code: bytes) -> str:
    """The string a code shows: trailing NULs stripped, a cut character replaced."""
    return bytes(code).rstrip(b"\0").decode("utf-8", errors="replace")


def group_of(device: str, salt: int, groups: int) -> int:
    """A device's public group: bucket(H(utf8(device), (salt + 1) mod 2^32), G) (spec §3.5)."""
    word = protocol.murmur3_32(device.encode("utf-8"), (int(salt) + 1) % protocol.WORD)
    return protocol.bucket(word, groups)


def prefix_key(code: bytes, bits: int) -> int:
    """key_λ: H(le16(λ) || the first ceil(λ/8) bytes of the code, bits past λ zeroed (most
    significant bit first), KEY_SEED) (spec §3.5; C ldp_pem_prefix_keys)."""
    nbytes = (bits + 7) // 8
    if not 1 <= bits or nbytes > len(code):
        raise ConfigError("params.levels", "prefix of %d bits of a %d-byte code" % (bits, len(code)))
    head = bytearray(code[:nbytes])
    if bits % 8:
        head[-1] &= (0xFF << (8 - bits % 8)) & 0xFF
    return protocol.murmur3_32(bits.to_bytes(2, "little") + bytes(head), protocol.KEY_SEED)
