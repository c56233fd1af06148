"""`ldpfleet campaign keygen` and `ldpfleet campaign rotate-keys` (protocol_spec/v2 §5.2-§5.3)."""
import json

from ..core.errors import ConfigError
from .common import broker_args, command_broker, open_store, state_arg


def register(csub):
    kg = csub.add_parser("keygen", help="write a fresh Ed25519 signing key: PATH (private, PKCS#8 "
                         "PEM, mode 0600) and PATH.pub (the public key devices trust)")
    kg.add_argument("path")
    kg.set_defaults(func=run_keygen)

    rk = csub.add_parser(
        "rotate-keys", help="retire the signing key: publish a new trusted set, re-sign campaigns",
        description="Publishes, retained on ldpfleet/keys and signed with --signing-key (a key "
                    "the devices trust now), the devices' whole new trusted set: --new-key's "
                    "public key plus every --also-trust file. Every other key is retired: "
                    "devices refuse its signatures from then on. Then every campaign's retained "
                    "config, phase-2 message or close is signed again with --new-key and "
                    "re-published, and later commands sign with it.")
    state_arg(rk)
    broker_args(rk)
    rk.add_argument("--signing-key", dest="signing_key_file", required=True, metavar="FILE",
                    help="a private key the devices trust now (signs the rotation)")
    rk.add_argument("--new-key", required=True, metavar="FILE",
                    help="the private key that signs from now on (`campaign keygen FILE`)")
    rk.add_argument("--also-trust", action="append", default=[], metavar="FILE.pub",
                    help="another public key the devices keep trusting (repeatable; e.g. a "
                         "standby key kept offline)")
    rk.add_argument("--json", action="store_true")
    rk.set_defaults(func=run_rotate_keys)


def run_keygen(args):
    from ..core.signing import write_signing_key
    try:
        key = write_signing_key(args.path)
    except FileExistsError:
        raise ConfigError("path", "%s exists; not overwriting a signing key" % args.path) from None
    print("wrote the Ed25519 signing key %s (private, mode 0600: keep it on the aggregator) and "
          "%s.pub (kid %s: the public key that `flash --trusted-keys` puts on devices and "
          "`fleet --trusted-keys` verifies with)" % (args.path, args.path, key.kid))
    return 0


def run_rotate_keys(args):
    from ..service.campaigns.keys import rotate_keys
    from ..core.signing import read_public_keys
    also = [k for path in args.also_trust for k in read_public_keys(path)]
    with open_store(args) as store:
        out = rotate_keys(store, command_broker(args, store), args.signing_key_file, args.new_key,
                          also)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print("key rotation %d signed by %s: devices now trust %s; %d campaign(s) signed again "
              "and re-published" % (out["serial"], out["signed_by"], ", ".join(out["trusted"]),
                                    len(out["campaigns_resigned"])))
    return 0
