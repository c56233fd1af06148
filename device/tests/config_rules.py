"""Run the device's config rules on MicroPython (used by tests/test_device_config.py).

  micropython config_rules.py IN_JSON OUT_JSON

IN: {"hmac": [[key_hex, msg_hex], ...], "verify": [[payload_hex, key_hex], ...],
     "check": [[doc, now], ...]}
OUT: {"hmac": [hex digest, ...], "verify": [field or null, ...], "check": [field or null, ...]}
"""
import json
import sys
from binascii import hexlify, unhexlify

from ldp.config import check_config, verify
from ldp.errors import ConfigError
from ldp.hmac_sha256 import hmac_sha256


def field_of(fn, *args):
    try:
        fn(*args)
    except ConfigError as exc:
        return exc.field
    return None


def main(argv):
    with open(argv[0]) as f:
        cases = json.load(f)
    out = {"hmac": [hexlify(hmac_sha256(unhexlify(k), unhexlify(m))).decode() for k, m in cases["hmac"]],
           "verify": [field_of(verify, unhexlify(p), unhexlify(k)) for p, k in cases["verify"]],
           "check": [field_of(check_config, doc, now) for doc, now in cases["check"]]}
    with open(argv[1], "w") as f:
        json.dump(out, f)


main(sys.argv[1:])
