"""The code of a strings campaign's value and its keys on the device (spec §3.5): the value's
path, kept apart from the config rules (ldp/strings.py) so that `pem` imports little on a
small board.

Constant work (spec §3.5, §7.1): the code of a value is built by visiting exactly `max_len`
byte slots, reading the string's own UTF-8 buffer in place (MicroPython's str exposes it:
no encode, no copy whose size follows the string); the phase-2 key H(code without its
trailing NULs, KEY_SEED) is computed by a MurmurHash3 that walks every block of the code and
selects the finalised state of the code's own length, so neither time nor heap depends on the
string. Everything on the value's path runs under viper and keeps 32-bit words unboxed (a
hash >= 2^30 is a heap object on 31-bit-smallint boards: it is stored in an array slot).
"""
from array import array

import micropython
from micropython import const

from .errors import ConfigError
from .hash import KEY_SEED, bucket, murmur3

LEVELS_MAX = const(64)
_NUL = b"\0"


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


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
    (its length from a memoryview: a fixed-size object whatever the string)."""
    is_str = isinstance(value, str)
    src = (_NUL, value)[is_str]
    n = (0, len(memoryview(src)))[is_str]
    src = (src, _NUL)[n == 0]
    _fill(src, min(n, max_len), code, max_len + 4)
    return code


@micropython.viper
def _prefix_key(code: ptr8, bits: int, buf: ptr8, seed: uint, out: ptr32, salt: uint, row: uint,
                g: uint) -> int:
    """out[0] = key_λ = H(le16(λ) || the first ceil(λ/8) bytes of the code with the bits past
    λ zeroed, seed) (spec §3.5); returns FLH's v = bucket(Hs(key_λ, (salt + row) mod 2^32), g),
    g <= 2^16, the key never boxed. λ is public (the device's group): the bytes hashed are too."""
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
    k = (h * c1) & mask
    k = ((k << 15) | (k >> 17)) & mask
    k = (k * c2) & mask
    h = ((salt + row) & mask) ^ k
    h = ((h << 13) | (h >> 19)) & mask
    h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
    h ^= uint(4)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    return int(((h >> 16) * g + (((h & uint(0xFFFF)) * g) >> 16)) >> 16)


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

    def prefix_key(self, bits, salt=0, row=0, g=1):
        """key_λ into self.key[0]; returns bucket(Hs(key_λ, salt + row), g) (FLH's v)."""
        if not 1 <= bits <= 8 * self.max_len:
            raise ConfigError("params.levels", "prefix of %d bits of a %d-byte code"
                              % (bits, self.max_len))
        return _prefix_key(self.code, bits, self.buf, KEY_SEED, self.key, salt, row, g)


