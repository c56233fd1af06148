"""Signed envelopes on the device (protocol_spec/v2 §5.1-§5.2): Ed25519 with key ids.

`Verifier(trusted).open(payload)` checks, in the spec's order, the envelope's shape
(`envelope`: exactly body, kid, sig; v1 HMAC envelopes are refused), the key id (`kid`), the
Ed25519 signature (RFC 8032, section 5.1.7; ed25519.py) over
`b"ldpfleet-v2\\x00" || SHA-256(body)` (`sig`), then parses the body (`body`). The device holds
only public keys. The SHA-256 of envelopes that verified is cached (a few entries), so a
retained re-delivery costs one hash instead of a signature check; the cache belongs to the
trusted set and is dropped with it. `body_digest` is the hex of the first 16 bytes of SHA-256 of
the last body opened: what a device binds a campaign id to (spec §7.2).
"""
import hashlib
import json
from binascii import hexlify, unhexlify

from .ed25519 import verify as ed25519_verify
from .errors import ConfigError

TAG = b"ldpfleet-v2\x00"
KEYS_TOPIC = "ldpfleet/keys"  # retained key rotations (spec §5.3)
MAX_TRUSTED = 8
CACHE = 4


def kid_of(pub):
    """Key id: hex of the first 8 bytes of SHA-256(public key) (spec §5.1)."""
    return hexlify(hashlib.sha256(pub).digest()[:8]).decode()


def trusted_keys(entries):
    """{kid: pub bytes} from identity.json's `trusted_keys` (1 to 8 {kid, pub}), each kid
    checked against its key (spec §5.2); ConfigError("trusted_keys") otherwise."""
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_TRUSTED:
        raise ConfigError("trusted_keys", "1 to %d {kid, pub} entries" % MAX_TRUSTED)
    out = {}
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("kid"), str) or not isinstance(e.get("pub"), str):
            raise ConfigError("trusted_keys", "an entry is {kid: str, pub: str}")
        try:
            pub = unhexlify(e["pub"])
        except ValueError:
            raise ConfigError("trusted_keys", "pub is not hex")
        if len(pub) != 32 or kid_of(pub) != e["kid"]:
            raise ConfigError("trusted_keys", "kid %s does not match its key" % e["kid"][:16])
        out[e["kid"]] = pub
    return out


class Verifier:
    def __init__(self, trusted):
        self.trusted = trusted
        self.cache = []  # SHA-256 digests of envelopes that verified under `trusted`
        self.body_digest = None  # hex of SHA-256(body)[:16] of the last envelope opened

    def set_trusted(self, trusted):
        self.trusted = trusted
        self.cache = []

    def open(self, payload):
        """The body document of an envelope signed by a trusted key, else ConfigError."""
        digest = hashlib.sha256(payload).digest()
        try:
            env = json.loads(payload)
        except (ValueError, UnicodeError) as exc:
            raise ConfigError("envelope", "not JSON: %s" % exc)
        if (not isinstance(env, dict) or len(env) != 3 or not isinstance(env.get("body"), str)
                or not isinstance(env.get("kid"), str) or not isinstance(env.get("sig"), str)):
            raise ConfigError("envelope", 'expected exactly {"body": str, "kid": str, "sig": str}')
        pub = self.trusted.get(env["kid"])
        if pub is None:
            raise ConfigError("kid", "signed by a key this device does not trust")
        body = env["body"]
        body_hash = hashlib.sha256(body.encode()).digest()
        if digest not in self.cache:
            try:
                sig = unhexlify(env["sig"])
            except ValueError:
                sig = b""
            message = TAG + body_hash
            if len(sig) != 64 or not ed25519_verify(pub, message, sig):
                raise ConfigError("sig", "signature does not verify")
            self.cache.append(digest)
            if len(self.cache) > CACHE:
                self.cache.pop(0)
        self.body_digest = hexlify(body_hash[:16]).decode()
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise ConfigError("body", "not JSON: %s" % exc)
        if not isinstance(doc, dict):
            raise ConfigError("body", "body must be a JSON object")
        return doc
