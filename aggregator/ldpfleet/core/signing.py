"""Ed25519 keys of the aggregator and the trusted key sets of devices (protocol_spec/v2 §5.1-§5.2).

Configs, phase-2 messages, closes and key rotations are signed with "pure" Ed25519 (RFC 8032,
section 5.1) over `M = b"ldpfleet-v2\\x00" || SHA-256(body)`; devices hold only public keys, so
an extracted board cannot sign for anyone. The `cryptography` package does the signing and
verifying here; the C client uses OpenSSL's EVP interface and the MicroPython client its own
verifier (device/ldp/ed25519.py).

Key files: `write_signing_key(PATH)` writes the private key as PKCS#8 PEM (mode 0600) and
`PATH.pub`, `{"kid": "<16 hex>", "pub": "<64 hex>"}`. A public-key file may also hold a JSON list
of such entries (a device's trusted set, 1 to 8 keys).
"""
import hashlib
import json
import os

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import ConfigError

DOMAIN_TAG = b"ldpfleet-v2\x00"
MAX_TRUSTED = 8
_RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def signed_message(body: bytes) -> bytes:
    """The 44 bytes Ed25519 signs for an envelope body (spec §5.1)."""
    return DOMAIN_TAG + hashlib.sha256(body).digest()


def kid_of(pub: bytes) -> str:
    """Key id: the first 8 bytes of SHA-256 of the 32-byte public key, hex (spec §5.1)."""
    return hashlib.sha256(bytes(pub)).digest()[:8].hex()


class PublicKey:
    """An Ed25519 public key and its key id."""

    def __init__(self, pub: bytes):
        pub = bytes(pub)
        if len(pub) != 32:
            raise ConfigError("pub", "an Ed25519 public key has 32 bytes, got %d" % len(pub))
        try:
            self._key = Ed25519PublicKey.from_public_bytes(pub)
        except ValueError:
            raise ConfigError("pub", "not an Ed25519 public key") from None
        self.pub = pub
        self.kid = kid_of(pub)

    def verify(self, sig: bytes, message: bytes) -> bool:
        try:
            self._key.verify(bytes(sig), bytes(message))
            return True
        except InvalidSignature:
            return False

    def to_doc(self) -> dict:
        return {"kid": self.kid, "pub": self.pub.hex()}

    @classmethod
    def from_doc(cls, doc) -> "PublicKey":
        """`{"kid", "pub"}` with the kid matching the key (spec §5.2)."""
        if not (isinstance(doc, dict) and isinstance(doc.get("kid"), str)
                and isinstance(doc.get("pub"), str)):
            raise ConfigError("keys", "a key entry is {\"kid\": str, \"pub\": str}, got %r" % (doc,))
        try:
            pub = bytes.fromhex(doc["pub"])
        except ValueError:
            raise ConfigError("pub", "pub is not hex: %r" % doc["pub"]) from None
        key = cls(pub)
        if key.kid != doc["kid"]:
            raise ConfigError("kid", "kid %s does not match its key (its kid is %s)"
                              % (doc["kid"], key.kid))
        return key

    def __eq__(self, other):
        return isinstance(other, PublicKey) and other.pub == self.pub

    def __hash__(self):
        return hash(self.pub)

    def __repr__(self):
        return "PublicKey(kid=%s)" % self.kid


class SigningKey:
    """The aggregator's Ed25519 private key."""

    def __init__(self, private: Ed25519PrivateKey):
        self._key = private
        self.public = PublicKey(private.public_key().public_bytes(*_RAW))
        self.kid = self.public.kid

    @classmethod
    def from_seed(cls, seed: bytes) -> "SigningKey":
        """From the 32-byte RFC 8032 secret (tests and vectors only)."""
        return cls(Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @classmethod
    def generate(cls) -> "SigningKey":
        return cls(Ed25519PrivateKey.generate())

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(bytes(message))

    def pem(self) -> bytes:
        return self._key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def __repr__(self):
        return "SigningKey(kid=%s)" % self.kid


def trusted_set(keys) -> dict:
    """{kid: PublicKey} from a PublicKey, a SigningKey (its public half) or a list of them."""
    if isinstance(keys, dict):
        return dict(keys)
    if isinstance(keys, (PublicKey, SigningKey)):
        keys = [keys]
    out = {}
    for key in keys:
        pub = key.public if isinstance(key, SigningKey) else key
        if not isinstance(pub, PublicKey):
            raise ConfigError("keys", "expected public keys, got %r" % (key,))
        out[pub.kid] = pub
    if not 1 <= len(out) <= MAX_TRUSTED:
        raise ConfigError("keys", "a trusted set holds 1 to %d keys, got %d" % (MAX_TRUSTED, len(out)))
    return out


def read_bytes(path: str, field: str) -> bytes:
    """The bytes of a key or certificate file; ConfigError(field) naming the path if unreadable."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(field, "cannot read %s: %s" % (path, exc.strerror)) from None


RETIRED_HMAC = ("%s holds a shared HMAC fleet key, which protocol v2 refuses (one extracted board "
                "could sign for the whole fleet): make an Ed25519 key with `ldpfleet campaign "
                "keygen PATH` and flash PATH.pub onto the devices")


def read_signing_key(path: str) -> SigningKey:
    """The private key in a PKCS#8 PEM file written by `campaign keygen`."""
    data = read_bytes(path, "signing_key")
    if b"PRIVATE KEY" not in data:
        if data.strip() and all(c in b"0123456789abcdefABCDEF\r\n" for c in data.strip()):
            raise ConfigError("signing_key", RETIRED_HMAC % path)
        raise ConfigError("signing_key", "%s is not a PEM private key (make one with "
                          "`ldpfleet campaign keygen PATH`)" % path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError("signing_key", "%s: %s" % (path, exc)) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("signing_key", "%s holds a %s key, not Ed25519"
                          % (path, type(key).__name__))
    return SigningKey(key)


def read_public_keys(path: str) -> list:
    """The public keys in a `.pub` file (one `{"kid", "pub"}` or a list of them). A private key
    file is also taken: its public half is used (nothing secret leaves this machine)."""
    data = read_bytes(path, "trusted_keys")
    if b"PRIVATE KEY" in data:
        return [read_signing_key(path).public]
    try:
        doc = json.loads(data)
    except ValueError:
        if data.strip() and all(c in b"0123456789abcdefABCDEF\r\n" for c in data.strip()):
            raise ConfigError("trusted_keys", RETIRED_HMAC % path) from None
        raise ConfigError("trusted_keys", "%s is not a public key file (JSON {\"kid\", \"pub\"}, "
                          "as `campaign keygen` writes in PATH.pub)" % path) from None
    keys = [PublicKey.from_doc(d) for d in (doc if isinstance(doc, list) else [doc])]
    trusted_set(keys)  # 1..8 keys
    return keys


def write_signing_key(path: str) -> SigningKey:
    """A fresh Ed25519 key: PATH (PKCS#8 PEM, 0600) and PATH.pub; refuses to overwrite either."""
    key = SigningKey.generate()
    pub_path = path + ".pub"
    if os.path.exists(pub_path):
        raise ConfigError("path", "%s exists already" % pub_path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.pem())
    with open(pub_path, "x") as f:
        f.write(json.dumps(key.public.to_doc()) + "\n")
    return key
