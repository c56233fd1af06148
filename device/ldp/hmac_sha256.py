"""HMAC-SHA256 (RFC 2104) on `hashlib.sha256`, and a constant-time comparison."""
import hashlib
from binascii import hexlify
from micropython import const

BLOCK = const(64)


def hmac_sha256(key, msg):
    """HMAC-SHA256(key, msg) digest (32 bytes)."""
    if len(key) > BLOCK:
        key = hashlib.sha256(key).digest()
    inner = bytearray(BLOCK)
    outer = bytearray(BLOCK)
    for i in range(BLOCK):
        b = key[i] if i < len(key) else 0
        inner[i] = b ^ 0x36
        outer[i] = b ^ 0x5C
    h = hashlib.sha256(inner)
    h.update(msg)
    o = hashlib.sha256(outer)
    o.update(h.digest())
    return o.digest()


def hmac_sha256_hex(key, msg):
    return hexlify(hmac_sha256(key, msg)).decode()


def equal(a, b):
    """a == b for two str/bytes, in time independent of where they differ."""
    if isinstance(a, str):
        a = a.encode()
    if isinstance(b, str):
        b = b.encode()
    if len(a) != len(b):
        return False
    diff = 0
    for i in range(len(a)):
        diff |= a[i] ^ b[i]
    return diff == 0
