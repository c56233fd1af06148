"""Key rotation (protocol_spec/v2 §5.3): `rotate_keys` publishes, signed by a key devices trust
now, the whole new trusted set retained on `ldpfleet/keys`, then signs every campaign's retained
messages again with the new key and re-publishes them (a device that applied the rotation
refuses signatures by a retired key, including retained configs signed before it).

The state keeps the rotation's serial, the trusted set and the signed message (meta
`keys.serial`, `keys.trusted`, `keys.payload`); `current_trusted` lets `campaign create` refuse a
retired signing key before devices do.
"""
import json
import os

from ...core import config as cfgmod
from ...mqtt import client as mqtt
from ...core import signing
from ...core.errors import ConfigError
from ..state.store import Store

KEYS_TOPIC = "ldpfleet/keys"


def current_trusted(store: Store):
    """(serial, {kid: PublicKey}) of the last rotation, or (0, None) if there was none."""
    serial = int(store.meta("keys.serial") or 0)
    if not serial:
        return 0, None
    return serial, signing.trusted_set([signing.PublicKey.from_doc(d)
                                        for d in json.loads(store.meta("keys.trusted"))])


def require_trusted(store: Store, key: signing.SigningKey, path: str):
    """Refuse a signing key that a rotation has retired (devices would refuse its messages)."""
    serial, trusted = current_trusted(store)
    if trusted is not None and key.kid not in trusted:
        raise ConfigError("signing_key", "%s (kid %s) was retired by key rotation %d; sign with "
                          "one of %s" % (path, key.kid, serial, ", ".join(sorted(trusted))))


def rotate_keys(store: Store, broker: mqtt.BrokerSettings, signing_key_file: str,
                new_key_file: str, also_trusted=()) -> dict:
    """Rotate to the key in `new_key_file`: the new trusted set is its public key plus
    `also_trusted` (signing.PublicKey); every other key is retired. Returns a summary."""
    old = signing.read_signing_key(signing_key_file)
    new = signing.read_signing_key(new_key_file)
    require_trusted(store, old, signing_key_file)
    serial = int(store.meta("keys.serial") or 0) + 1
    keys = list(signing.trusted_set([new.public] + list(also_trusted)).values())
    payload = cfgmod.sign(cfgmod.make_keys(serial, keys), old)
    mqtt.publish(broker, KEYS_TOPIC, payload, retain=True)
    store.set_metas({"keys.serial": str(serial),
                     "keys.trusted": json.dumps([k.to_doc() for k in keys]),
                     "keys.payload": payload.decode("ascii")})
    resigned = []
    ref = os.path.abspath(new_key_file)
    for camp in store.campaigns():
        if camp.open:
            config_payload = cfgmod.sign(camp.config, new)
            phase2 = cfgmod.sign(camp.phase2, new) if camp.phase2 is not None else None
        else:
            config_payload, phase2 = camp.config_payload, None
        store.resign(camp.name, config_payload, phase2, ref)
        if camp.open:
            mqtt.publish(broker, "ldp/%s/config" % camp.name, config_payload, retain=True)
            if phase2:
                mqtt.publish(broker, "ldp/%s/phase2" % camp.name, phase2, retain=True)
        else:  # the retained close replaces the config (spec §5.4): sign it again too
            mqtt.publish(broker, "ldp/%s/config" % camp.name,
                         cfgmod.sign(cfgmod.make_close(camp.config), new), retain=True)
        resigned.append(camp.name)
    return {"serial": serial, "trusted": [k.kid for k in keys], "signed_by": old.kid,
            "campaigns_resigned": resigned}
