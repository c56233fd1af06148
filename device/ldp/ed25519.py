"""Ed25519 signature verification (RFC 8032, section 5.1.7), pure Python for MicroPython.

Cofactorless "pure" Ed25519: A and R must decode (section 5.1.3), S < L, and
[S]B == R + [k]A with k = SHA-512(R || A || M) mod L. The structure follows the reference
code of RFC 8032, section 6 (extended homogeneous coordinates (X, Y, Z, T), x = X/Z,
y = Y/Z, x*y = T/Z). [S]B + [k](-A) is computed once by a joint (Straus/Shamir)
double-and-add and compared projectively with R.

Only verification: there is no secret here, so nothing needs to run in constant time.
Field elements are big ints (on MicroPython too): viper cannot help with those.
"""
from .sha512 import sha512

P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
D2 = 2 * D % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
_MASK255 = (1 << 255) - 1
_BYTES = (bytes, bytearray, memoryview)

_GY = 4 * pow(5, P - 2, P) % P


def _recover_x(y, sign):
    """x from y and its sign bit, or None (RFC 8032, section 5.1.3): the square root of
    u/v = (y^2 - 1)/(d y^2 + 1) as u v^3 (u v^7)^((p-5)/8), one exponentiation in all."""
    if y >= P:
        return None
    yy = y * y % P
    u = (yy - 1) % P
    v = (D * yy + 1) % P
    v3 = v * v * v % P
    x = u * v3 * pow(u * v3 * v3 * v % P, (P - 5) // 8, P) % P
    vxx = v * x * x % P
    if vxx != u:
        if vxx != P - u:
            return None
        x = x * SQRT_M1 % P
    if x == 0 and sign:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


def _decompress(s):
    """The point encoded by 32 bytes `s` as (X, Y, Z, T), or None (section 5.1.3)."""
    y = int.from_bytes(s, "little")
    sign = y >> 255
    y &= _MASK255
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


_GX = _recover_x(_GY, 0)
BASE = (_GX, _GY, 1, _GX * _GY % P)


def _add(p1, p2):
    """P1 + P2 in extended coordinates (section 6, point_add; a = -1, complete)."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * D2 * t2 % P
    d = 2 * z1 * z2 % P
    e = b - a
    f = d - c
    g = d + c
    h = b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _cached(p1):
    """(Y-X, Y+X, 2dT, 2Z) of a point: the second operand of the additions in the loop."""
    x, y, z, t = p1
    return ((y - x) % P, (y + x) % P, t * D2 % P, 2 * z % P)


def _neg(p1):
    x, y, z, t = p1
    return ((P - x) % P, y, z, (P - t) % P)


def _double_scalar_mul(s, pt_b, k, pt_a):
    """[s]pt_b + [k]pt_a by one joint double-and-add over the bits of s and k (Straus).

    The loop body is the doubling of RFC 8032, section 5.1.4 and _add with the second
    operand's products precomputed (_cached), inlined on local variables (no tuple per step,
    no global look-ups): the hot path, about 250 doublings and 190 additions."""
    table = (None, _cached(pt_b), _cached(pt_a), _cached(_add(pt_b, pt_a)))
    p = P
    x, y, z, t = 0, 1, 1, 0
    i = 255  # s < L and k < L are below 2^253; leading zero bits only double the identity
    while i >= 0 and not ((s | k) >> i):
        i -= 1
    while i >= 0:
        # double (RFC 8032, section 5.1.4)
        a = x * x % p
        b = y * y % p
        c = 2 * z * z % p
        h = a + b
        e = x + y
        e = h - e * e
        g = a - b
        f = c + g
        x = e * f % p
        y = g * h % p
        z = f * g % p
        j = ((s >> i) & 1) | (((k >> i) & 1) << 1)
        if j:
            t = e * h % p
            ymx, ypx, t2d, z2 = table[j]
            a = (y - x) * ymx % p
            b = (y + x) * ypx % p
            c = t * t2d % p
            d = z * z2 % p
            e = b - a
            f = d - c
            g = d + c
            h = b + a
            x = e * f % p
            y = g * h % p
            z = f * g % p
        i -= 1
    return x, y, z


def verify(pub, msg, sig):
    """True iff `sig` is a valid Ed25519 signature of `msg` under public key `pub`
    (RFC 8032, section 5.1.7, cofactorless). False for any malformed input; never raises."""
    for v in (pub, msg, sig):
        if not isinstance(v, _BYTES):
            return False
    if len(pub) != 32 or len(sig) != 64:
        return False
    pub = bytes(pub)
    sig = bytes(sig)
    a = _decompress(pub)
    if a is None:
        return False
    r_bytes = sig[:32]
    r = _decompress(r_bytes)
    if r is None:
        return False
    s = int.from_bytes(sig[32:], "little")
    if s >= L:
        return False
    k = int.from_bytes(sha512(r_bytes + pub + bytes(msg)), "little") % L
    q = _double_scalar_mul(s, BASE, k, _neg(a))
    # projective comparison with R (Z_R = 1): X/Z == x_R and Y/Z == y_R
    x, y, z = q
    return (x - r[0] * z) % P == 0 and (y - r[1] * z) % P == 0
