"""Key rotations on the device (spec §5.3), for a Device or an Agent (ldp/agent.py) alike."""
import hashlib
from binascii import hexlify

from . import config as cfg
from .errors import ConfigError


def apply_keys(dev, payload):
    """A key rotation (spec §5.3) for `dev` (a Device, or an Agent: ledger, verifier, log,
    kid_refused, inbox): signed by a key trusted now, a higher serial than the
    one held; persisted in the ledger before use. Messages refused for their key id are
    tried again under the new set."""
    digest = hexlify(hashlib.sha256(payload).digest()).decode()
    if dev.ledger.keys and dev.ledger.keys["sha256"] == digest:  # verified when applied
        dev.log("keys", "skip serial=%d" % dev.ledger.keys_serial)
        return
    try:
        doc = dev.verifier.open(payload)
        trusted = cfg.check_keys(doc)
    except ConfigError as exc:
        dev.log("refused", "keys %s" % exc)  # fleet-wide: never ends a --once run
        return
    if doc["serial"] <= dev.ledger.keys_serial:
        dev.log("keys", "skip serial=%d" % doc["serial"])
        return
    dev.ledger.set_keys(doc["serial"], doc["keys"], digest)
    dev.verifier.set_trusted(trusted)
    dev.log("keys", "serial=%d trusted=%d" % (doc["serial"], len(trusted)))
    for what, msg in dev.kid_refused.items():
        dev.inbox.setdefault(what, msg)
    dev.kid_refused = {}
