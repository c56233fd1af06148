"""Reproduce the shared protocol vectors on MicroPython (run by tests/integration/test_device_vectors.py).

  micropython vectors.py VECTORS_DIR OUT_JSON [MECH ...]

Writes {"hash": {...}, "thresholds": [...], "module_file": where ldp.hash came from,
"acks": [does the ack match the report, per acks.json "matching" case],
"mac_acks": [does a device with the case's ack_key (or none) accept it, per "mac" "matching" case],
"signatures": {"rfc8032": [verifies?], "signed": [body type], "body_digests": [binding digest],
"verify": [refusal field or null]},
"reports": {mech: [report hex | "error: ..."]}, "enrol": [per enrol_longitudinal.json case (run
with losue): {state_hex, thresholds, state_bytes, charge_milli} | "error: ..."], "numeric_grid": [grid point per case], "shc_x": [x bit of each shc phase-1 case, None for
phase 2], "thresholds_shc": [{eps1_milli, eps2_milli, shc_ok[, E2, T1, T_shc_a, T_shc_b]}]}.
Random words come from the vector through the mechanisms' one `rand` parameter; a report
that consumes a different number of words than the vector holds is an error.
"""
import gc
import json
import sys
from binascii import unhexlify

import ldp.hash
from ldp import thresholds
from ldp.hash import bucket, item_key, keyed_hash, murmur3
from ldp.mechanisms import make
from ldp.config import check_config, check_keys
from ldp.ed25519 import verify as ed25519_verify
from ldp.envelope import Verifier, trusted_keys
from ldp.errors import ConfigError
from ldp.numeric_domain import check_numeric_domain, domain_metrics, grid_point
from ldp.ack import ack_accepts, ack_pads
from word_source import WordSource
from ldp.pemcode import Code, group_of
from ldp.pemkey import element
from ldp.strings import check_pem_phase2, join_surrogates
from ldp.sets import KeySet




def hash_results(vec):
    out = {"murmur3": [], "keyed": [], "bucket_g5": [], "bucket_m1024": [], "item_keys": []}
    for c in vec["murmur3_x86_32"]:
        data = unhexlify(c["data_hex"])
        out["murmur3"].append(murmur3(data, len(data), c["seed"]))
    for c in vec["keyed"]:
        out["keyed"].append(keyed_hash(c["key"], c["seed"]))
        out["bucket_g5"].append(bucket(c["hash"], 5))
        out["bucket_m1024"].append(bucket(c["hash"], 1024))
    for c in vec["item_keys"]:
        out["item_keys"].append(item_key(c["item"]))
    return out


def threshold_results(rows):
    out = []
    for r in rows:
        e = r["eps_milli"]
        out.append({"eps_milli": e, "E_full": thresholds.exp_lower(e, 1000),
                    "E_half": thresholds.exp_lower(e, 2000), "T_rr": thresholds.t_rr(e),
                    "T_oue_q": thresholds.t_oue_q(e), "T_flip": thresholds.t_flip(e),
                    "T_grr": dict((n, thresholds.t_grr(e, int(n))) for n in r["T_grr"])})
    return out


def shc_threshold_results(rows):
    """thresholds_shc.json (spec §3.1): shc_ok for every pair, the thresholds where it has them."""
    out = []
    for r in rows:
        e1, e2 = r["eps1_milli"], r["eps2_milli"]
        mine = {"eps1_milli": e1, "eps2_milli": e2, "shc_ok": thresholds.shc_ok(e1, e2)}
        if "T1" in r:
            t1, a, b, big_e2 = thresholds.shc_thresholds(e1, e2)
            mine.update({"E2": big_e2, "T1": t1, "T_shc_a": a, "T_shc_b": b})
        out.append(mine)
    return out


def memo_input(value):
    """A memoised mechanism's input {"value", "state": hex} with the state as bytes."""
    if isinstance(value, dict) and "state" in value:
        return {"value": value["value"], "state": unhexlify(value["state"])}
    return value


def enrol_results(cases):
    """enrol_longitudinal.json (spec §3.2): per case the state hex from the words, the
    thresholds, the state size and the charge for each round count."""
    out = []
    for c in cases:
        try:
            mech = make(c["mechanism"], c["eps_milli"], c["domain_size"], c["salt"],
                        c["campaign_id"], c["phase"], c["params"])
            src = WordSource(c["words"])
            state = mech.enrol(src)
            if src.pos != len(src.data):
                raise ValueError("consumed %d of %d random words" % (src.pos // 4, len(c["words"])))
            out.append({"state_hex": "".join("%02x" % b for b in state),
                        "thresholds": dict((k, getattr(mech, k)) for k in c["thresholds"]),
                        "state_bytes": mech.state_size,
                        "charge_milli": [[r, mech.charge_milli(r)] for r, _ in c["charge_milli"]]})
        except Exception as exc:
            out.append("error: %r" % (exc,))
    return out


def report_results(cases, xs=None):
    """Report hex per case; `xs` (a list) collects an shc phase-1 report's ledger bit x."""
    out = []
    for c in cases:
        try:
            mech = make(c["mechanism"], c["eps_milli"], c["domain_size"], c["salt"],
                        c["campaign_id"], c["phase"], c["params"])
            src = WordSource(c["words"])
            value = memo_input(c["value"])
            if c["mechanism"] == "pem":  # MicroPython's json keeps surrogate pairs apart
                value = {"device": value["device"], "value": join_surrogates(value["value"])}
            report = mech.report(value, c["nonce"], src)
            if src.pos != len(src.data):
                raise ValueError("consumed %d of %d random words" % (src.pos // 4, len(c["words"])))
            out.append("".join("%02x" % b for b in report))
            if xs is not None:
                xs.append(mech.x)
        except Exception as exc:
            out.append("error: %r" % (exc,))
            if xs is not None:
                xs.append("error")
    return out


def numeric_grid_results(cases):
    """numeric_grid.json (spec §1.1): grid_point of every reading ("float": nan/inf/-inf)."""
    out = []
    for c in cases:
        metric = domain_metrics(c["domain"])[c["metric"]]
        reading = float(c["float"]) if "float" in c else c["reading"]
        out.append(grid_point(reading, metric[0], metric[1], metric[2],
                              check_numeric_domain(c["domain"])))
    return out


def signature_results(vec):
    """signatures.json: RFC 8032's vectors through ed25519.verify; every envelope through the
    device's Verifier (spec §5.1) with its trusted keys."""
    def field(keys, payload):
        try:
            Verifier(trusted_keys(keys)).open(payload.encode())
        except ConfigError as exc:
            return exc.field
        return None
    mine = [vec["keys"]["trusted"]]
    signed, digests = [], []
    for c in vec["signed"]:
        verifier = Verifier(trusted_keys(mine))
        doc = verifier.open(c["payload"].encode())
        if doc["type"] == "keys":
            check_keys(doc)
        elif doc["type"] == "config":
            check_config(doc, doc["not_before"])
        signed.append(doc["type"])
        digests.append(verifier.body_digest)
    return {"rfc8032": [ed25519_verify(unhexlify(c["public_hex"]), unhexlify(c["message_hex"]),
                                       unhexlify(c["signature_hex"])) for c in vec["rfc8032"]],
            "signed": signed, "body_digests": digests,
            "verify": [field(c["trusted"], c["payload"]) for c in vec["verify"]]}


def strings_results(vec):
    """strings.json (spec §3.5): each config case's refusal field, each value's code, key and
    phase-2 set, each device's group, each prefix key, each phase-2 body's refusal field."""
    def field(fn, *args):
        try:
            fn(*args)
        except ConfigError as exc:
            return exc.field
        return None

    def phase2(case):
        from ldp.config import check_phase2
        check_config(case["config"], case["config"]["not_before"])
        check_pem_phase2(check_phase2(case["body"], case["config"]))

    codes = []
    for c in vec["codes"]:
        code = Code(c["max_len"]).fill(join_surrogates(c["value"]))
        ks = element(code, KeySet(1))
        codes.append({"code_hex": "".join("%02x" % b for b in code.code[:c["max_len"]]),
                      "key": ks.keys[0], "phase2_set": ks.as_list()})
    prefix = []
    for c in vec["prefix_keys"]:
        raw = unhexlify(c["code_hex"])
        code = Code(len(raw))
        code.code[:len(raw)] = raw
        code.prefix_key(c["bits"])
        prefix.append(code.key[0])
    return {"configs": [field(check_config, c["body"], c["now"]) for c in vec["configs"]],
            "codes": codes,
            "groups": [group_of(c["device"], c["salt"], c["groups"]) for c in vec["groups"]],
            "prefix_keys": prefix,
            "phase2": [field(phase2, c) for c in vec["phase2"]]}


def main(argv):
    vdir, out_path = argv[0], argv[1]
    result = {}
    if "pem" in argv[2:]:  # first: strings.json is the largest file read
        with open(vdir + "/strings.json") as f:
            result["strings"] = strings_results(json.load(f))
        gc.collect()
    with open(vdir + "/hash.json") as f:
        result["hash"] = hash_results(json.load(f))
    with open(vdir + "/thresholds.json") as f:
        result["thresholds"] = threshold_results(json.load(f))
    result["module_file"] = ldp.hash.__file__
    with open(vdir + "/acks.json") as f:
        acks = json.load(f)
    result["acks"] = [ack_accepts(unhexlify(c["ack_hex"]), unhexlify(c["report_hex"]), None)
                      for c in acks["matching"]]
    result["mac_acks"] = [ack_accepts(unhexlify(c["ack_hex"]), unhexlify(c["report_hex"]),
                                      ack_pads(c["key_hex"])) for c in acks["mac"]["matching"]]
    with open(vdir + "/signatures.json") as f:
        result["signatures"] = signature_results(json.load(f))
    if "losue" in argv[2:]:
        with open(vdir + "/enrol_longitudinal.json") as f:
            result["enrol"] = enrol_results(json.load(f))
    gc.collect()
    result["reports"] = {}
    result["shc_x"] = []
    for name in argv[2:]:
        with open(vdir + "/reports_%s.json" % name) as f:
            result["reports"][name] = report_results(json.load(f),
                                                     result["shc_x"] if name == "shc" else None)
    with open(vdir + "/numeric_grid.json") as f:
        result["numeric_grid"] = numeric_grid_results(json.load(f))
    if "shc" in argv[2:]:
        with open(vdir + "/thresholds_shc.json") as f:
            result["thresholds_shc"] = shc_threshold_results(json.load(f))
    with open(out_path, "w") as f:
        json.dump(result, f)


main(sys.argv[1:])
