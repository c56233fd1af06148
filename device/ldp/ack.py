"""Acknowledgements on the device (spec §6): plain 12-byte acks, or 28-byte acks MAC'd under
the device's own key (identity.json `ack_key`, 64 hex digits, derived by the aggregator from the
fleet's ack root key; it forges acks for this device alone).

With a key, only a 28-byte ack whose tag HMAC-SHA256(key, ack[0:12])[0:16] verifies (every
byte compared, in the same time whatever differs) and whose 12 bytes name the report counts;
without one (a device provisioned before keys existed), a 12-byte ack or the first 12 bytes of
a 28-byte one. MicroPython has hashlib.sha256 but no hmac: RFC 2104 over it, the key's pads
prepared once."""
import hashlib
from binascii import unhexlify
from micropython import const

from .report import ACK_SIZE, ack_matches

ACK_TAG_SIZE = const(16)
ACK_MAC_SIZE = const(28)


def ack_pads(hex_key):
    """(inner pad, outer pad) of the identity's `ack_key`, or None without one; ValueError
    unless it is 64 hex digits."""
    if hex_key is None:
        return None
    try:
        if not isinstance(hex_key, str) or len(hex_key) != 64:
            raise ValueError
        block = unhexlify(hex_key) + bytes(32)
    except ValueError:
        raise ValueError("ack_key must be 64 hex digits")
    return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)


def hmac_sha256(pads, msg):
    inner = hashlib.sha256(pads[0] + msg).digest()
    return hashlib.sha256(pads[1] + inner).digest()


def ack_accepts(ack, report, pads):
    """Spec §6: `ack` (from the device's own ack topic) acknowledges `report`."""
    if pads is not None:
        if len(ack) != ACK_MAC_SIZE:
            return False
        tag = hmac_sha256(pads, bytes(ack[:ACK_SIZE]))
        diff = 0
        for i in range(ACK_TAG_SIZE):
            diff |= tag[i] ^ ack[ACK_SIZE + i]
        return diff == 0 and ack_matches(ack[:ACK_SIZE], report)
    if len(ack) == ACK_MAC_SIZE:
        ack = ack[:ACK_SIZE]
    return ack_matches(ack, report)
