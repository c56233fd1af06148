"""SHA-512 (FIPS 180-4, section 6.4) in plain Python for MicroPython and CPython.

This MicroPython build's `hashlib` has md5/sha1/sha256 only; Ed25519 (ldp.ed25519) needs
SHA-512. Words are 64-bit, so on MicroPython (63-bit small ints) they are big ints: every
result is masked with MASK, the round constants are one tuple built at import, and the
message schedule is one preallocated list reused for every block.
"""
import struct

MASK = 0xFFFFFFFFFFFFFFFF

_K = (
    0x428a2f98d728ae22, 0x7137449123ef65cd, 0xb5c0fbcfec4d3b2f, 0xe9b5dba58189dbbc,
    0x3956c25bf348b538, 0x59f111f1b605d019, 0x923f82a4af194f9b, 0xab1c5ed5da6d8118,
    0xd807aa98a3030242, 0x12835b0145706fbe, 0x243185be4ee4b28c, 0x550c7dc3d5ffb4e2,
    0x72be5d74f27b896f, 0x80deb1fe3b1696b1, 0x9bdc06a725c71235, 0xc19bf174cf692694,
    0xe49b69c19ef14ad2, 0xefbe4786384f25e3, 0x0fc19dc68b8cd5b5, 0x240ca1cc77ac9c65,
    0x2de92c6f592b0275, 0x4a7484aa6ea6e483, 0x5cb0a9dcbd41fbd4, 0x76f988da831153b5,
    0x983e5152ee66dfab, 0xa831c66d2db43210, 0xb00327c898fb213f, 0xbf597fc7beef0ee4,
    0xc6e00bf33da88fc2, 0xd5a79147930aa725, 0x06ca6351e003826f, 0x142929670a0e6e70,
    0x27b70a8546d22ffc, 0x2e1b21385c26c926, 0x4d2c6dfc5ac42aed, 0x53380d139d95b3df,
    0x650a73548baf63de, 0x766a0abb3c77b2a8, 0x81c2c92e47edaee6, 0x92722c851482353b,
    0xa2bfe8a14cf10364, 0xa81a664bbc423001, 0xc24b8b70d0f89791, 0xc76c51a30654be30,
    0xd192e819d6ef5218, 0xd69906245565a910, 0xf40e35855771202a, 0x106aa07032bbd1b8,
    0x19a4c116b8d2d0c8, 0x1e376c085141ab53, 0x2748774cdf8eeb99, 0x34b0bcb5e19b48a8,
    0x391c0cb3c5c95a63, 0x4ed8aa4ae3418acb, 0x5b9cca4f7763e373, 0x682e6ff3d6b2b8a3,
    0x748f82ee5defb2fc, 0x78a5636f43172f60, 0x84c87814a1f0ab72, 0x8cc702081a6439ec,
    0x90befffa23631e28, 0xa4506cebde82bde9, 0xbef9a3f7b2c67915, 0xc67178f2e372532b,
    0xca273eceea26619c, 0xd186b8c721c0c207, 0xeada7dd6cde0eb1e, 0xf57d4f7fee6ed178,
    0x06f067aa72176fba, 0x0a637dc5a2c898a6, 0x113f9804bef90dae, 0x1b710b35131c471b,
    0x28db77f523047d84, 0x32caab7b40c72493, 0x3c9ebe0a15c9bebc, 0x431d67c49c100d4c,
    0x4cc5d4becb3e42b6, 0x597f299cfc657e2a, 0x5fcb6fab3ad6faec, 0x6c44198c4a475817,
)

_H0 = (
    0x6a09e667f3bcc908, 0xbb67ae8584caa73b, 0x3c6ef372fe94f82b, 0xa54ff53a5f1d36f1,
    0x510e527fade682d1, 0x9b05688c2b3e6c1f, 0x1f83d9abfb41bd6b, 0x5be0cd19137e2179,
)


def _compress(h, block, w):
    """One 128-byte block into the eight-word state `h` (a list), FIPS 180-4 section 6.4.2."""
    mask = MASK
    k = _K
    w[0:16] = struct.unpack(">16Q", block)
    for t in range(16, 80):
        x = w[t - 15]
        y = w[t - 2]
        s0 = ((x >> 1) | (x << 63)) ^ ((x >> 8) | (x << 56)) ^ (x >> 7)
        s1 = ((y >> 19) | (y << 45)) ^ ((y >> 61) | (y << 3)) ^ (y >> 6)
        w[t] = (w[t - 16] + (s0 & mask) + w[t - 7] + (s1 & mask)) & mask
    a, b, c, d, e, f, g, hh = h
    for t in range(80):
        s1 = ((e >> 14) | (e << 50)) ^ ((e >> 18) | (e << 46)) ^ ((e >> 41) | (e << 23))
        ch = (e & f) ^ (~e & g)
        t1 = hh + (s1 & mask) + (ch & mask) + k[t] + w[t]
        s0 = ((a >> 28) | (a << 36)) ^ ((a >> 34) | (a << 30)) ^ ((a >> 39) | (a << 25))
        maj = (a & b) ^ (a & c) ^ (b & c)
        hh = g
        g = f
        f = e
        e = (d + t1) & mask
        d = c
        c = b
        b = a
        a = (t1 + (s0 & mask) + maj) & mask
    h[0] = (h[0] + a) & mask
    h[1] = (h[1] + b) & mask
    h[2] = (h[2] + c) & mask
    h[3] = (h[3] + d) & mask
    h[4] = (h[4] + e) & mask
    h[5] = (h[5] + f) & mask
    h[6] = (h[6] + g) & mask
    h[7] = (h[7] + hh) & mask


def sha512(data):
    """The 64-byte SHA-512 digest of `data` (bytes-like), FIPS 180-4."""
    data = bytes(data)
    n = len(data)
    h = list(_H0)
    w = [0] * 80
    full = n - n % 128
    for off in range(0, full, 128):
        _compress(h, data[off:off + 128], w)
    # padding (section 5.1.2): 0x80, zeros, then the 128-bit big-endian bit length
    tail = data[full:] + b"\x80"
    tail += bytes((112 - len(tail)) % 128)
    tail += struct.pack(">QQ", (n >> 61) & MASK, (n << 3) & MASK)
    for off in range(0, len(tail), 128):
        _compress(h, tail[off:off + 128], w)
    return struct.pack(">8Q", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
