"""Reproduce the shared protocol vectors on MicroPython (run by tests/test_device_vectors.py).

  micropython vectors.py VECTORS_DIR OUT_JSON [MECH ...]

Writes {"hash": {...}, "thresholds": [...], "module_file": where ldp.hash came from,
"acks": [does the ack match the report, per acks.json "matching" case],
"reports": {mech: [report hex | "error: ..."]}}.
Random words come from the vector through the mechanisms' one `rand` parameter; a report
that consumes a different number of words than the vector holds is an error.
"""
import json
import sys
from binascii import unhexlify

import ldp.hash
from ldp import thresholds
from ldp.hash import bucket, item_key, keyed_hash, murmur3
from ldp.mechanisms import make
from ldp.report import ack_matches
from word_source import WordSource




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


def report_results(cases):
    out = []
    for c in cases:
        try:
            mech = make(c["mechanism"], c["eps_milli"], c["domain_size"], c["salt"],
                        c["campaign_id"], c["phase"], c["params"])
            src = WordSource(c["words"])
            report = mech.report(c["value"], c["nonce"], src)
            if src.pos != len(src.data):
                raise ValueError("consumed %d of %d random words" % (src.pos // 4, len(c["words"])))
            out.append("".join("%02x" % b for b in report))
        except Exception as exc:
            out.append("error: %r" % (exc,))
    return out


def main(argv):
    vdir, out_path = argv[0], argv[1]
    with open(vdir + "/hash.json") as f:
        result = {"hash": hash_results(json.load(f))}
    with open(vdir + "/thresholds.json") as f:
        result["thresholds"] = threshold_results(json.load(f))
    result["module_file"] = ldp.hash.__file__
    with open(vdir + "/acks.json") as f:
        result["acks"] = [ack_matches(unhexlify(c["ack_hex"]), unhexlify(c["report_hex"]))
                          for c in json.load(f)["matching"]]
    result["reports"] = {}
    for name in argv[2:]:
        with open(vdir + "/reports_%s.json" % name) as f:
            result["reports"][name] = report_results(json.load(f))
    with open(out_path, "w") as f:
        json.dump(result, f)


main(sys.argv[1:])
