"""MurmurHash3_x86_32 (Appleby), item keys, the bucket map and word helpers (spec §1, §2).

Everything runs under `@micropython.viper` and allocates nothing. Constants are built
from 16-bit halves (a literal >= 2^30 is a heap object on 31-bit-smallint boards, which
viper cannot mix with `uint`) and every product is masked to 32 bits (viper's `uint` is
the machine word: 64 bits on the unix port, 32 on microcontrollers). Functions that
return a bucket reduce inside viper, so their result is a small int on every board.

Random words are read from a bytes buffer (`os.urandom(4*R)`) as little-endian u32s.
"""
import sys
import micropython

KEY_SEED = 0x6C647066
# Viper's uint holds h * n for any n <= 2^32 on 64-bit machines; 32-bit boards use the
# exact 16-bit split of spec §1, valid for n <= 2^16, and plain ints above that.
WIDE = sys.maxsize > 0xFFFFFFFF


@micropython.viper
def murmur3(data: ptr8, n: int, seed: uint) -> uint:
    """H(data[:n], seed): MurmurHash3_x86_32 of a buffer."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    c1 = (uint(0xCC9E) << 16) | uint(0x2D51)
    c2 = (uint(0x1B87) << 16) | uint(0x3593)
    h = seed & mask
    i = 0
    nb = n - (n & 3)
    while i < nb:
        k = uint(data[i]) | (uint(data[i + 1]) << 8) | (uint(data[i + 2]) << 16) | (uint(data[i + 3]) << 24)
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
        i += 4
    tail = n - nb
    if tail > 0:
        k = uint(data[i])
        if tail > 1:
            k |= uint(data[i + 1]) << 8
        if tail > 2:
            k |= uint(data[i + 2]) << 16
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
    return h


# The MurmurHash3 rounds and finaliser are written out in murmur3, _hs, hash_bucket and
# hash_bucket_w on purpose. A call from one viper function to another is an ordinary Python
# call: a global lookup, the generic call path, and arguments and result passed as objects. A
# full 32-bit hash >= 2^30 is no small int on 31-bit-smallint boards (the microcontrollers), so
# a shared finaliser returning h would allocate a big int for three keys in four (h >= 2^30):
# heap use and time that depend on the item, hence on the device's value. Each copy keeps h a machine
# word until it is reduced to a bucket (a small int) inside the same function.
@micropython.viper
def _hs(key: uint, seed: uint) -> uint:
    """Hs(key, seed) = H(le32(key), seed): the one-block murmur3, unrolled."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    k = (key & mask) * ((uint(0xCC9E) << 16) | uint(0x2D51)) & mask
    k = ((k << 15) | (k >> 17)) & mask
    k = (k * ((uint(0x1B87) << 16) | uint(0x3593))) & mask
    h = (seed & mask) ^ k
    h = ((h << 13) | (h >> 19)) & mask
    h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
    h ^= uint(4)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    return h


@micropython.viper
def _bucket16(h: uint, n: uint) -> uint:
    """(h * n) >> 32 as (hi16(h)*n + ((lo16(h)*n) >> 16)) >> 16: exact for n <= 2^16 in
    32-bit arithmetic, and for any n <= 2^32 in 64-bit arithmetic."""
    return ((h >> 16) * n + (((h & uint(0xFFFF)) * n) >> 16)) >> 16


def keyed_hash(key, seed):
    """Hs(key, seed) as an int (allocates on 31-bit boards when >= 2^30; not a hot path)."""
    return _hs(key, seed)


def item_key(item):
    """Spec §1: int item -> itself; str item -> H(utf8(item), KEY_SEED)."""
    if isinstance(item, str):
        data = item.encode()
        return murmur3(data, len(data), KEY_SEED)
    if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 0xFFFFFFFF:
        return item
    raise ValueError("item must be a str or an int in [0, 2^32)")


def bucket(h, n):
    """Spec §1: (h * n) >> 32 for 0 <= h < 2^32, 0 < n <= 2^32 - 1."""
    if WIDE or n <= 0x10000:
        return _bucket16(h, n)
    return (h * n) >> 32


@micropython.viper
def hash_bucket(key: uint, salt: uint, row: uint, n: uint) -> int:
    """bucket(Hs(key, (salt + row) mod 2^32), n) for n <= 2^16 (row seeds, spec §1)."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    seed = (salt + row) & mask
    k = (key & mask) * ((uint(0xCC9E) << 16) | uint(0x2D51)) & mask
    k = ((k << 15) | (k >> 17)) & mask
    k = (k * ((uint(0x1B87) << 16) | uint(0x3593))) & mask
    h = seed ^ k
    h = ((h << 13) | (h >> 19)) & mask
    h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
    h ^= uint(4)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    return int(((h >> 16) * n + (((h & uint(0xFFFF)) * n) >> 16)) >> 16)


@micropython.viper
def hash_bucket_w(key: uint, w: ptr8, i: int, n: uint) -> int:
    """bucket(Hs(key, seed), n) with seed = random word i of `w` (OLH), n <= 2^16."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    o = 4 * i
    seed = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
    k = (key & mask) * ((uint(0xCC9E) << 16) | uint(0x2D51)) & mask
    k = ((k << 15) | (k >> 17)) & mask
    k = (k * ((uint(0x1B87) << 16) | uint(0x3593))) & mask
    h = (seed & mask) ^ k
    h = ((h << 13) | (h >> 19)) & mask
    h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
    h ^= uint(4)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    return int(((h >> 16) * n + (((h & uint(0xFFFF)) * n) >> 16)) >> 16)


@micropython.viper
def word(w: ptr8, i: int) -> uint:
    """Random word i of `w` (little-endian u32)."""
    o = 4 * i
    return uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)


@micropython.viper
def below(w: ptr8, i: int, t: uint) -> int:
    """1 iff random word i < t: a Bernoulli(t / 2^32) event (spec §2)."""
    o = 4 * i
    x = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
    if x < t:
        return 1
    return 0


@micropython.viper
def _word_bucket16(w: ptr8, i: int, n: uint) -> int:
    o = 4 * i
    h = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
    return int(((h >> 16) * n + (((h & uint(0xFFFF)) * n) >> 16)) >> 16)


def word_bucket(w, i, n):
    """bucket(random word i, n): a uniform choice in [0, n) (spec §2), 0 < n < 2^32."""
    if WIDE or n <= 0x10000:
        return _word_bucket16(w, i, n)
    return (word(w, i) * n) >> 32


@micropython.viper
def copy_word(out: ptr8, at: int, w: ptr8, i: int):
    """out[at:at+4] = the bytes of random word i (its little-endian encoding)."""
    o = 4 * i
    out[at] = w[o]
    out[at + 1] = w[o + 1]
    out[at + 2] = w[o + 2]
    out[at + 3] = w[o + 3]


@micropython.viper
def parity(x: uint) -> int:
    """popcount(x) mod 2."""
    x ^= x >> 16
    x ^= x >> 8
    x ^= x >> 4
    x ^= x >> 2
    x ^= x >> 1
    return int(x & 1)


@micropython.viper
def flip_bits(out: ptr8, off: int, bit0: int, nbits: int, w: ptr8, i: int, t: uint):
    """For b in [0, nbits): toggle bitmap bit bit0 + b (LSB first, bitmap at out[off:])
    iff random word i + b < t."""
    b = 0
    o = 4 * i
    while b < nbits:
        x = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
        if x < t:
            p = bit0 + b
            out[off + (p >> 3)] ^= 1 << (p & 7)
        b += 1
        o += 4


@micropython.viper
def zero(out: ptr8, off: int, n: int):
    """out[off:off+n] = 0 without allocating."""
    i = 0
    while i < n:
        out[off + i] = 0
        i += 1
