"""The phase-2 element of a strings campaign's value on the device (spec §3.5): the key of its
code, H(the code without its trailing NULs, KEY_SEED), by a MurmurHash3 that mixes every block
of the code and selects (by masks) the state finalised at the code's own length: the same
work whatever the code. Apart from pemcode.py so phase 1 does not load it."""
import micropython

from .hash import KEY_SEED
from .pemcode import Code
from .sets import KeySet


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


def element(code, keyset):
    """The phase-2 set (spec §3.5) of a filled Code into a 1-slot KeySet: [the code's key],
    live iff the code is not all NUL (else the dummy)."""
    live = _code_key(code.code, code.max_len, KEY_SEED, keyset.keys)
    keyset.live[0] = live
    keyset.kinds[0] = live
    return keyset


def phase2_keyset(value, max_len):
    """A device's phase-2 input of a PEM campaign: a 1-slot KeySet holding its code's key
    (live) or nothing (the dummy). The same allocations for every value."""
    return element(Code(max_len).fill(value), KeySet(1))
