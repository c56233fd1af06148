"""Run the device's config rules on MicroPython (used by tests/integration/test_device_config.py).

  micropython config_rules.py IN_JSON OUT_JSON

IN: {"verify": [[payload_hex, [{"kid", "pub"}, ...]], ...], "check": [[doc, now], ...]}
OUT: {"verify": [field or null, ...], "check": [field or null, ...]}
"""
import json
import sys
from binascii import unhexlify

from ldp.config import check_config
from ldp.envelope import Verifier, trusted_keys
from ldp.errors import ConfigError


def field_of(fn, *args):
    try:
        fn(*args)
    except ConfigError as exc:
        return exc.field
    return None


def main(argv):
    with open(argv[0]) as f:
        cases = json.load(f)
    out = {"verify": [field_of(Verifier(trusted_keys(k)).open, unhexlify(p)) for p, k in cases["verify"]],
           "check": [field_of(check_config, doc, now) for doc, now in cases["check"]]}
    with open(argv[1], "w") as f:
        json.dump(out, f)


main(sys.argv[1:])
