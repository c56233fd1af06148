"""Every shared vector reproduced by the Python reference, the C kernels through the Python API,
and every parse vector raising the stated typed error (protocol_spec/v2/vectors)."""
import json
from pathlib import Path

import mmh3
import pytest

from ldpfleet import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.errors import ReportFormatError
from ldpfleet.mechanisms import MODULES, mechanism_from_description

VECTORS = Path(__file__).resolve().parents[1] / "protocol_spec" / "v2" / "vectors"


def load(name):
    return json.loads((VECTORS / name).read_text())


def test_hash_vectors_against_mmh3_python_and_c():
    vec = load("hash.json")
    assert len(vec["murmur3_x86_32"]) >= 30
    for case in vec["murmur3_x86_32"]:
        data = bytes.fromhex(case["data_hex"])
        expected = mmh3.hash(data, case["seed"], signed=False)
        assert case["hash"] == expected
        assert protocol.murmur3_32(data, case["seed"]) == expected
        assert lib.ldp_murmur3_32(ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL,
                                  len(data), case["seed"]) == expected
    for case in vec["keyed"]:
        expected = mmh3.hash(case["key"].to_bytes(4, "little"), case["seed"], signed=False)
        assert case["hash"] == expected == lib.ldp_hash_key(case["key"], case["seed"])
        assert lib.ldp_bucket(expected, 5) == case["bucket_g5"] == (expected * 5) >> 32
    for case in vec["item_keys"]:
        assert protocol.item_key(case["item"]) == case["key"]
        if isinstance(case["item"], str):
            assert case["key"] == mmh3.hash(case["item"].encode(), protocol.KEY_SEED, signed=False)


def test_threshold_vectors():
    for row in load("thresholds.json"):
        e = row["eps_milli"]
        assert protocol.exp_lower(e, 1000) == row["E_full"]
        assert protocol.t_rr(e) == row["T_rr"]
        assert protocol.t_oue_q(e) == row["T_oue_q"]
        assert protocol.t_flip(e) == row["T_flip"]
        for n, t in row["T_grr"].items():
            assert protocol.t_grr(e, int(n)) == t


def test_exp_lower_is_a_tight_lower_bound():
    import math
    for e in [1, 250, 1000, 2000, 4000, 8000, 12000]:
        approx = protocol.exp_lower(e, 1000) / protocol.SCALE
        exact = math.exp(e / 1000)
        assert approx <= exact * (1 + 1e-15)
        assert approx >= exact * (1 - 1e-12)


def mechanism_files():
    return sorted(p.name for p in VECTORS.glob("reports_*.json"))


def test_every_mechanism_has_vectors():
    present = {p[len("reports_"):-len(".json")] for p in mechanism_files()}
    assert present == set(MODULES), "missing vectors for %s" % sorted(set(MODULES) - present)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_report_vectors(name):
    path = VECTORS / ("reports_%s.json" % name)
    if not path.exists():
        pytest.fail("no vectors for %s" % name)
    cases = json.loads(path.read_text())
    assert cases, "empty vector file"
    for case in cases:
        mech = mechanism_from_description(case)
        expected = bytes.fromhex(case["report_hex"])
        assert len(expected) == mech.report_size
        assert mech.reference_report(case["value"], case["words"], case["nonce"]) == expected
        assert mech.c_report(case["value"], case["words"], case["nonce"]) == expected
        mech.check(expected)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_parse_vectors(name):
    path = VECTORS / ("parse_%s.json" % name)
    if not path.exists():
        pytest.fail("no parse vectors for %s" % name)
    cases = json.loads(path.read_text())
    assert any(c["error"] for c in cases) and any(c["error"] is None for c in cases)
    for case in cases:
        mech = mechanism_from_description(case)
        report = bytes.fromhex(case["report_hex"])
        if case["error"] is None:
            mech.check(report)
        else:
            with pytest.raises(ReportFormatError) as info:
                mech.check(report)
            assert info.value.field == case["error"]


def test_ack_vectors():
    """Spec §6: the aggregator's acknowledgement of a report for each status, and the device's
    matching rule (the reference both clients follow; tests/test_device_vectors.py runs it on
    MicroPython, tests/test_delivery.py end to end on both clients)."""
    vec = load("acks.json")
    for case in vec["acks"]:
        report = bytes.fromhex(case["report_hex"])
        ack = protocol.ack_for(report, case["status"])
        assert ack.hex() == case["ack_hex"]
        phase, status, cid, nonce = protocol.parse_ack(ack)
        assert (phase, status) == (report[2], case["status"])
        assert (cid, nonce) == protocol.parse_header(report)[4:]
        assert protocol.ack_matches(ack, report)
    assert {c["matches"] for c in vec["matching"]} == {True, False}
    for case in vec["matching"]:
        assert protocol.ack_matches(bytes.fromhex(case["ack_hex"]),
                                    bytes.fromhex(case["report_hex"])) is case["matches"], case


def test_signature_vectors():
    """Spec §5.1: RFC 8032's own vectors hold for the `cryptography` package; the vector key's
    envelopes of every message kind verify; every refusal case is refused with its field."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from ldpfleet import config, signing
    from ldpfleet.errors import ConfigError
    vec = load("signatures.json")
    for case in vec["rfc8032"]:
        key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(case["secret_hex"]))
        pub = signing.SigningKey(key).public
        assert pub.pub.hex() == case["public_hex"]
        assert key.sign(bytes.fromhex(case["message_hex"])).hex() == case["signature_hex"]
        assert pub.verify(bytes.fromhex(case["signature_hex"]), bytes.fromhex(case["message_hex"]))
    key = signing.SigningKey.from_seed(bytes.fromhex(vec["keys"]["signing_seed_hex"]))
    assert key.public.to_doc() == vec["keys"]["trusted"]
    kinds = set()
    for case in vec["signed"]:
        assert signing.signed_message(case["body"].encode()).hex() == case["signed_message_hex"]
        doc = config.verify(case["payload"].encode(), key)
        assert config.canonical(doc) == case["body"] and doc["type"] == case["kind"]
        assert config.sign(doc, key).decode() == case["payload"]  # Ed25519 is deterministic
        kinds.add(case["kind"])
    assert kinds == {"config", "phase2", "close", "keys", "status"}
    assert {c["error"] for c in vec["verify"]} == {None, "envelope", "kid", "sig", "body"}
    for case in vec["verify"]:
        trusted = [signing.PublicKey.from_doc(d) for d in case["trusted"]]
        try:
            config.verify(case["payload"].encode(), trusted)
            got = None
        except ConfigError as exc:
            got = exc.field
        assert got == case["error"], case["case"]
