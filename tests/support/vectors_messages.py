"""The message vectors (protocol_spec/v2/vectors/acks.json and signatures.json), written by
tools/gen_vectors.py: acknowledgements (spec §6) and Ed25519 envelopes (spec §5.1), with
RFC 8032's own test vectors."""
from ldpfleet.core import protocol

from .vectors import word_stream

RFC8032_TESTS = [
    # RFC 8032 section 7.1, TEST 1-3: (secret key, public key, message, signature), hex
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]
ED25519_L = 2 ** 252 + 27742317777372353535851937790883648493
"""The order of Ed25519's base point (RFC 8032 section 5.1)."""


def ack_cases() -> dict:
    """acks.json (spec §6): the acknowledgement of a report for each status, and acks a device
    must accept or ignore for a report it re-sends."""
    from ldpfleet.core.mechanisms import make_mechanism
    reports = []
    for phase, cid, nonce in ((1, 0x12345678, 0x9ABCDEF0), (2, 0xFFFFFFFF, 0), (1, 7, 1)):
        mech = make_mechanism("olh", 2000, 64, salt=5, campaign_id=cid, phase=phase)
        reports.append(mech.reference_report(3, word_stream(phase, mech.random_words), nonce))
    acks = [{"report_hex": r.hex(), "status": s, "ack_hex": protocol.ack_for(r, s).hex()}
            for r in reports for s in (protocol.ACK_ACCEPTED, protocol.ACK_DUPLICATE,
                                       protocol.ACK_REJECTED)]
    good = protocol.ack_for(reports[0], protocol.ACK_ACCEPTED)

    def edit(pos, value):
        out = bytearray(good)
        out[pos] = value
        return bytes(out)

    matching = [(good, True), (protocol.ack_for(reports[0], protocol.ACK_REJECTED), True),
                (good[:11], False), (good + b"\0", False), (edit(0, 1), False),
                (edit(1, 0x42), False), (edit(2, 2), False), (edit(4, good[4] ^ 1), False),
                (edit(11, good[11] ^ 0x80), False), (protocol.ack_for(reports[1], 0), False),
                (b"", False)]
    return {"acks": acks,
            "matching": [{"report_hex": reports[0].hex(), "ack_hex": a.hex(), "matches": m}
                         for a, m in matching],
            "mac": mac_ack_cases(reports)}


def mac_ack_cases(reports) -> dict:
    """acks.json "mac" (spec §6): the key derivations from a fleet root key (a device id, and a
    load generator's "L/id" under its login's key), the 28-byte MAC'd ack of each report, and
    what a device with its key, or without one, does with MAC'd, plain and forged acks."""
    from ldpfleet.core import ackkeys
    root = bytes(range(100, 132))
    devices = ["dev-7", "gen1/sim-3", "a"]
    keys = [{"device": d, "key_hex": ackkeys.device_key(root, d).hex()} for d in devices]
    keys[1]["login_key_hex"] = ackkeys.login_key(root, "gen1").hex()
    key = ackkeys.device_key(root, "dev-7")
    other = ackkeys.device_key(root, "dev-8")
    signed = [{"device": d, "ack_hex": protocol.ack_for(r, s).hex(),
               "mac_ack_hex": ackkeys.mac_ack(ackkeys.device_key(root, d),
                                              protocol.ack_for(r, s)).hex()}
              for d, r, s in zip(devices, reports, (0, 1, 2))]
    report = reports[0]
    plain = protocol.ack_for(report, protocol.ACK_ACCEPTED)
    good = ackkeys.mac_ack(key, plain)

    def flip(data, pos):
        out = bytearray(data)
        out[pos] ^= 1
        return bytes(out)

    cases = [  # (case, ack, the device's key or None, counts)
        ("mac, right key", good, key, True),
        ("mac of status rejected", ackkeys.mac_ack(key, protocol.ack_for(report, 2)), key, True),
        ("plain 12 bytes to a keyed device", plain, key, False),
        ("first tag byte flipped", flip(good, 12), key, False),
        ("last tag byte flipped", flip(good, 27), key, False),
        ("another device's key", ackkeys.mac_ack(other, plain), key, False),
        ("tag of the ack, nonce changed", good[:11] + bytes([good[11] ^ 1]) + good[12:], key, False),
        ("another report, rightly tagged", ackkeys.mac_ack(key, protocol.ack_for(reports[1], 0)),
         key, False),
        ("27 bytes", good[:27], key, False),
        ("29 bytes", good + b"\0", key, False),
        ("zero tag", plain + bytes(16), key, False),
        ("mac to a device without a key", good, None, True),
        ("forged tag to a device without a key", plain + bytes(16), None, True),
        ("plain to a device without a key", plain, None, True),
        ("27 bytes to a device without a key", good[:27], None, False),
        ("29 bytes to a device without a key", good + b"\0", None, False),
    ]
    return {"root_hex": root.hex(), "keys": keys, "acks": signed,
            "matching": [{"case": c, "report_hex": report.hex(), "ack_hex": a.hex(),
                          "key_hex": k.hex() if k is not None else None, "matches": m}
                         for c, a, k, m in cases]}


def _flip_hex(text: str, i: int) -> str:
    return text[:i] + ("1" if text[i] != "1" else "2") + text[i + 1:]


def signature_cases() -> dict:
    """signatures.json (spec §5.1): RFC 8032's own vectors, the vector keys, one signed envelope
    of every message kind, and envelopes every party must refuse with the given field."""
    import hashlib
    import hmac
    import json
    from ldpfleet.core import config
    from ldpfleet.core.signing import SigningKey
    key, other = SigningKey.from_seed(bytes(range(32))), SigningKey.from_seed(bytes(range(1, 33)))
    cfg = config.make_config("cpu-load", [{"phase": 1, "mechanism": "olh", "eps_milli": 2000,
                                           "params": {"g": 8}}], {"type": "int", "size": 1024},
                             0xABCDEF01, campaign_id=0x12345678, not_before=1790000000,
                             not_after=1800000000, delivery=dict(config.DEFAULT_DELIVERY))
    miner = config.make_config("hh", [{"phase": 1, "mechanism": "sh", "eps_milli": 1000,
                                       "params": {"m": 64, "l": 4}},
                                      {"phase": 2, "mechanism": "srappor", "eps_milli": 1000,
                                       "params": {"l": 4}}], {"type": "int", "size": 1024},
                               7, campaign_id=99, not_before=1790000000, not_after=1800000000)
    from ldpfleet.core.protocols import svim
    flat = config.make_config("flat", svim.campaign_phases(2000, 1000, 8, 10),
                              {"type": "int", "size": 1000}, 9, campaign_id=100,
                              not_before=1790000000, not_after=1800000000)
    spread = config.make_config("fleet-wide", [{"phase": 1, "mechanism": "grr", "eps_milli": 1000,
                                                "params": {}}], {"type": "int", "size": 16},
                                11, campaign_id=101, not_before=1790000000, not_after=1800000000,
                                delivery=dict(config.DEFAULT_DELIVERY, spread_s=600))
    temp = config.make_config("temperature", [{"phase": 1, "mechanism": "pm", "eps_milli": 1000,
                                                "params": {}}],
                              {"type": "range", "lo": -400, "hi": 850, "resolution": 1, "decimals": 1}, 13,
                              campaign_id=102, not_before=1790000000, not_after=1800000000,
                              delivery=dict(config.DEFAULT_DELIVERY), metric="temp")
    elsewhere = dict(cfg, campaign="elsewhere", campaign_id=5)
    messages = [("config", cfg), ("phase2", config.make_phase2(miner, candidates=[3, 5, 700])),
                ("config", flat),  # svim: phase 2 with its signed fallback (spec §3, §5.4)
                ("phase2", config.make_phase2(flat, fallback=True)),  # svim's flat branch
                ("close", config.make_close(cfg)),
                ("keys", {"type": "keys", "protocol": protocol.PROTOCOL_VERSION, "serial": 1,
                          "keys": [other.public.to_doc(), key.public.to_doc()]}),
                ("status", {"type": "status", "protocol": protocol.PROTOCOL_VERSION,
                            "campaign": "cpu-load", "campaign_id": 0x12345678, "state": "open",
                            "phase": 1, "phases": 1, "time": 1790000100,
                            "counters": {"received": 10, "accepted": 9, "rejected": 1}}),
                ("config", spread),  # delivery.spread_s: the first-publish spread (spec §5.4, §6)
                ("config", temp)]  # metric: devices providing "temp" take part (spec §5.4)
    signed = []
    for kind, doc in messages:
        payload = config.sign(doc, key)
        body = json.loads(payload)["body"]
        signed.append({"kind": kind, "body": body, "signed_message_hex":
                       (b"ldpfleet-v2\x00" + hashlib.sha256(body.encode()).digest()).hex(),
                       # what a device binds a campaign id to (spec §7.2)
                       "body_digest_hex": hashlib.sha256(body.encode()).digest()[:16].hex(),
                       "payload": payload.decode()})
    good = json.loads(signed[0]["payload"])
    there = json.loads(config.sign(elsewhere, key))
    sig = bytes.fromhex(good["sig"])
    s_plus_l = (int.from_bytes(sig[32:], "little") + ED25519_L).to_bytes(32, "little")
    mine, both = [key.public.to_doc()], [other.public.to_doc(), key.public.to_doc()]

    def env(**kw):
        return json.dumps(dict(good, **kw), separators=(",", ":"))

    def raw(body, signer=key):
        s = signer.sign(b"ldpfleet-v2\x00" + hashlib.sha256(body.encode()).digest())
        return json.dumps({"body": body, "kid": signer.kid, "sig": s.hex()}, separators=(",", ":"))

    hmac_v1 = json.dumps({"body": good["body"], "sig": hmac.new(bytes(range(32)), good["body"].encode(),
                                                              hashlib.sha256).hexdigest()})
    cases = [
        ("valid", signed[0]["payload"], mine, None),
        ("valid, second trusted key", signed[0]["payload"], both, None),
        ("unknown key", signed[0]["payload"], [other.public.to_doc()], "kid"),
        ("signed by an untrusted key", raw(good["body"], other), mine, "kid"),
        ("HMAC envelope (v1)", hmac_v1, mine, "envelope"),
        ("kid of another trusted key", env(kid=other.kid), both, "sig"),
        ("flipped byte in the body", env(body=good["body"].replace('"salt":', '"salt":1', 1)), mine, "sig"),
        ("another campaign's body, this signature", env(body=there["body"]), mine, "sig"),
        ("this body, another campaign's signature", env(sig=there["sig"]), mine, "sig"),
        ("flipped R", env(sig=_flip_hex(good["sig"], 0)), mine, "sig"),
        ("flipped S", env(sig=_flip_hex(good["sig"], 100)), mine, "sig"),
        ("S + L (not reduced)", env(sig=(sig[:32] + s_plus_l).hex()), mine, "sig"),
        ("short signature", env(sig=good["sig"][:-2]), mine, "sig"),
        ("signature not hex", env(sig="zz" + good["sig"][2:]), mine, "sig"),
        ("upper-case hex", env(sig=good["sig"].upper()), mine, None),
        ("extra key", env(extra=1), mine, "envelope"),
        ("kid not a string", env(kid=5), mine, "envelope"),
        ("body only", good["body"], mine, "envelope"),
        ("not JSON", "{not json", mine, "envelope"),
        ("a list", "[1, 2]", mine, "envelope"),
        ("no sig", json.dumps({"body": good["body"], "kid": good["kid"]}), mine, "envelope"),
        ("body not a string", json.dumps({"body": {"a": 1}, "kid": good["kid"], "sig": good["sig"]}),
         mine, "envelope"),
        ("signed body not JSON", raw("{broken"), mine, "body"),
        ("signed body a list", raw("[1,2]"), mine, "body"),
        ("signed body with non-ASCII", raw('{"x":"h\u00e9llo"}'), mine, None),
    ]
    return {
        "rfc8032": [{"secret_hex": s, "public_hex": p, "message_hex": m, "signature_hex": g}
                    for s, p, m, g in RFC8032_TESTS],
        "keys": {"signing_seed_hex": bytes(range(32)).hex(), "trusted": key.public.to_doc(),
                 "other_seed_hex": bytes(range(1, 33)).hex(), "other": other.public.to_doc()},
        "signed": signed,
        "verify": [{"case": c, "payload": p, "trusted": t, "error": e} for c, p, t, e in cases],
    }
