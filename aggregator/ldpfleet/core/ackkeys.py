"""Keys of the MAC'd acknowledgements (protocol_spec/v2 §6).

Only the aggregator side holds the fleet's **ack root key** (a file of 32 random bytes, hex,
mode 0600: `ldpfleet ack-key init PATH`). Each device holds only its own key, derived from it
(`ack_key` in identity.json, written by `ldpfleet flash --ack-key`, the device runner and
`ldpfleet ack-key device`), so a key extracted from one board forges acks for that board alone:

    K_dev(id)     = HMAC-SHA256(root, b"ldpfleet-ack-device\\x00" + utf8(id))
    K_login(L)    = HMAC-SHA256(root, b"ldpfleet-ack-login\\x00" + utf8(L))
    K_dev("L/id") = HMAC-SHA256(K_login(L), b"ldpfleet-ack-device\\x00" + utf8(id))
    tag(ack12)    = HMAC-SHA256(K_dev, ack12)[:16]        MAC'd ack = ack12 + tag (28 bytes)

A load generator logging in as L (simulated devices "L/<id>", spec §4) can be given K_login(L)
alone (`ldpfleet ack-key login`). This module is the reference; `serve` tags a whole batch in
C (`c_kernels/ldp_sha256.c`, `sign_batch`).
"""
import hashlib
import hmac
import os

import numpy as np

from . import protocol
from .errors import ConfigError

KEY_SIZE = 32
TAG_SIZE = 16
MAC_ACK_SIZE = protocol.ACK_SIZE + TAG_SIZE  # 28
DEVICE_LABEL = b"ldpfleet-ack-device\x00"
LOGIN_LABEL = b"ldpfleet-ack-login\x00"


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def login_key(root: bytes, login: str) -> bytes:
    """K_login(L): what a load generator logging in as L needs to check its devices' acks."""
    return _hmac(root, LOGIN_LABEL + login.encode("utf-8"))


def device_key(root: bytes, device_id: str) -> bytes:
    """K_dev of a device id; "L/id" (a load generator's device) under K_login(L)."""
    login, slash, rest = device_id.partition("/")
    if slash:
        return device_key_under_login(login_key(root, login), rest)
    return _hmac(root, DEVICE_LABEL + device_id.encode("utf-8"))


def device_key_under_login(key_of_login: bytes, device_id: str) -> bytes:
    """K_dev("L/<device_id>") from K_login(L)."""
    return _hmac(key_of_login, DEVICE_LABEL + device_id.encode("utf-8"))


def tag(key: bytes, ack: bytes) -> bytes:
    return _hmac(key, bytes(ack[:protocol.ACK_SIZE]))[:TAG_SIZE]


def mac_ack(key: bytes, ack: bytes) -> bytes:
    """The 28-byte MAC'd acknowledgement of a 12-byte one under a device's key."""
    return bytes(ack) + tag(key, ack)


def accepts(key, ack: bytes, report: bytes) -> bool:
    """What a device does with an ack on its own topic (spec §6): with a key (bytes), only a
    28-byte ack whose tag verifies (constant-time compare) and whose 12 bytes name the report;
    without one (None), a 12-byte ack or the first 12 bytes of a 28-byte one."""
    ack = bytes(ack)
    if key is not None:
        return (len(ack) == MAC_ACK_SIZE and hmac.compare_digest(ack[protocol.ACK_SIZE:], tag(key, ack))
                and protocol.ack_matches(ack[:protocol.ACK_SIZE], report))
    if len(ack) == MAC_ACK_SIZE:
        ack = ack[:protocol.ACK_SIZE]
    return protocol.ack_matches(ack, report)


def sign_batch(root: bytes, buf: np.ndarray, dev_off: np.ndarray, dev_len: np.ndarray,
               acks: np.ndarray) -> np.ndarray:
    """(n, 28) MAC'd acks of (n, 12) `acks`, ack i for the device id buf[dev_off[i]:+dev_len[i]]:
    one C call for the whole batch."""
    from .._kernels import ffi, lib
    n = int(acks.shape[0])
    out = np.empty((n, MAC_ACK_SIZE), np.uint8)
    if n:
        acks = np.ascontiguousarray(acks, np.uint8)
        lib.ldp_ack_sign_batch(root, ffi.from_buffer("uint8_t[]", np.ascontiguousarray(buf, np.uint8)),
                               ffi.from_buffer("uint32_t[]", np.ascontiguousarray(dev_off, np.uint32)),
                               ffi.from_buffer("uint32_t[]", np.ascontiguousarray(dev_len, np.uint32)),
                               ffi.from_buffer("uint8_t[]", acks), n,
                               ffi.from_buffer("uint8_t[]", out))
    return out


# --- key files -------------------------------------------------------------------------------

def write_key_file(path: str, key: bytes = None) -> bytes:
    """Write a key (default: 32 fresh random bytes) as one hex line, mode 0600; never over an
    existing file (FileExistsError)."""
    key = os.urandom(KEY_SIZE) if key is None else bytes(key)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return key


def read_key_file(path: str, field: str = "ack_key") -> bytes:
    """The 32-byte key of a file written by write_key_file; ConfigError(field) otherwise."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError as exc:
        raise ConfigError(field, "cannot read %s: %s" % (path, exc.strerror)) from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_SIZE:
        raise ConfigError(field, "%s must hold a 32-byte key as 64 hex digits (`ldpfleet ack-key "
                          "init`)" % path)
    return key


def parse_device_key(text, field: str = "ack_key") -> bytes:
    """An identity's `ack_key` (64 hex digits) as bytes."""
    try:
        key = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        key = b""
    if len(key) != KEY_SIZE:
        raise ConfigError(field, "ack_key must be 64 hex digits (32 bytes)")
    return key
