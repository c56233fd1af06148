"""Strings domains and PEM's device face (protocol_spec/v2 §3.5): strings.json's config cases,
codes, phase-2 keys, groups and prefix keys reproduced by the reference rules (and the C prefix
kernel); reports_pem.json's shown steps (group, code, λ, key_λ) consistent with its reports."""
import json
from pathlib import Path

import numpy as np
import pytest

from ldpfleet.core import config, protocol
from ldpfleet.core import strings_domain as sd
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import mechanism_from_description
from ldpfleet.core.protocols import pem as pem_protocol

VECTORS = Path(__file__).resolve().parents[2] / "protocol_spec" / "v2" / "vectors"


def load(name):
    return json.loads((VECTORS / name).read_text())


def test_config_cases_accept_and_refuse_with_their_field():
    cases = load("strings.json")["configs"]
    fields = {c["error"] for c in cases}
    assert None in fields
    assert {"domain.max_len", "phases.mechanism", "params.levels", "params.g", "params.kp",
            "params.l", "phases.params", "phases.sample_rate_ppm", "domain.type"} <= fields
    for case in cases:
        try:
            config.check_config(case["body"], now=case["now"])
            got = None
        except ConfigError as exc:
            got = exc.field
        assert got == case["error"], case["name"]


def test_phase2_bodies():
    cases = load("strings.json")["phase2"]
    assert {c["error"] for c in cases} == {None, "candidates"}
    for case in cases:
        try:
            sd.check_pem_phase2(case["body"])
            got = None
        except ConfigError as exc:
            got = exc.field
        assert got == case["error"], case["name"]


def test_codes_keys_and_phase2_sets():
    cases = load("strings.json")["codes"]
    assert any(c["string"].endswith("\ufffd") for c in cases)  # a cut multi-byte character
    assert any(c["phase2_set"] == [] for c in cases)
    for case in cases:
        code = sd.code_of(case["value"], case["max_len"])
        assert code.hex() == case["code_hex"]
        assert len(code) == case["max_len"]
        assert sd.code_key(code) == case["key"]
        assert sd.code_string(code) == case["string"]
        assert sd.phase2_element(code) == case["phase2_set"]
        if isinstance(case["value"], str) and len(case["value"].encode()) <= case["max_len"] \
                and case["value"] and not case["value"].endswith("\0"):
            assert case["key"] == protocol.item_key(case["value"])  # a `str` domain's key
    empty = [c for c in cases if c["code_hex"].strip("0") == ""]
    assert empty and all(c["key"] == protocol.EMPTY_KEY for c in empty)  # key(⊥)


def test_groups_are_the_public_bucket_rule():
    cases = load("strings.json")["groups"]
    for case in cases:
        assert sd.group_of(case["device"], case["salt"], case["groups"]) == case["group"]
        word = protocol.murmur3_32(case["device"].encode(), (case["salt"] + 1) % protocol.WORD)
        assert case["group"] == (word * case["groups"]) >> 32
    assert len({c["group"] for c in cases if c["groups"] == 8}) > 4


def test_prefix_keys_python_and_c():
    for case in load("strings.json")["prefix_keys"]:
        code = bytes.fromhex(case["code_hex"])
        assert sd.prefix_key(code, case["bits"]) == case["key"]
        assert pem_protocol.prefix_key(code, case["bits"]) == case["key"]
        arr = np.frombuffer(code, np.uint8).reshape(1, -1)
        assert int(pem_protocol.prefix_keys(arr, case["bits"])[0]) == case["key"]


def test_report_vectors_show_their_steps():
    cases = load("reports_pem.json")
    assert {c["group"] for c in cases} >= set(range(4))
    for case in cases:
        mech = mechanism_from_description(case)
        assert case["value"]["device"] == case["device"]
        assert mech.group(case["device"]) == case["group"]
        code = sd.code_of(case["value"]["value"], mech.max_len)
        assert code.hex() == case["code_hex"]
        assert case["lambda"] == case["params"]["levels"][case["group"]]
        assert sd.prefix_key(code, case["lambda"]) == case["key_lambda"]
        # exactly flh's report over key_λ (spec §3.5)
        flh = mechanism_from_description(dict(case, mechanism="flh", params={
            "g": case["params"]["g"], "kp": case["params"]["kp"]}))
        got = flh.reference_report(case["key_lambda"], case["words"], case["nonce"])
        assert got[12:] == bytes.fromhex(case["report_hex"])[12:]


def test_code_work_is_the_same_for_every_value():
    """The code is always max_len bytes, whatever the value (spec §3.5, §7.1)."""
    for value in ["", "a", "x" * 100, None, 7, ["a"], "é" * 40]:
        assert len(sd.code_of(value, 16)) == 16


@pytest.mark.parametrize("levels,field", [([8, 8], "params.levels"), ([], "params.levels")])
def test_mechanism_refuses_bad_levels(levels, field):
    from ldpfleet.core.mechanisms import make_mechanism
    with pytest.raises(ConfigError) as info:
        make_mechanism("pem", 1000, protocol.WORD - 1, g=3, kp=4, levels=levels)
    assert info.value.field == field


@pytest.mark.parametrize("params", [{"l": True}, {"l": 1.0}, {"l": 1, "g": 2}])
def test_phase2_l_must_be_the_integer_1(params):
    """`{"l": true}` equals `{"l": 1}` in Python but is refused by both clients (a bool is
    not an integer): the aggregator must refuse it too, with the same field (`params.l`)."""
    doc = next(c for c in load("strings.json")["configs"] if c["name"] == "valid")
    body = json.loads(json.dumps(doc["body"]))
    body["phases"][1]["params"] = params
    with pytest.raises(ConfigError) as exc:
        config.check_config(body, now=doc["now"])
    assert exc.value.field == "params.l"
