"""Regenerate protocol_spec/v2/vectors/*.json from the plain-Python reference implementations.

tests/support/vectors.py holds the cases: `CASES[name]() -> (report_cases, parse_cases)`:
report case: {"mechanism", "eps_milli", "domain_size", "salt", "campaign_id", "phase",
              "params", "value" (key, list of keys for set-valued, or {"key":..,"high":bool}
              for lcm), "nonce" (the header field), "words", "report_hex"};
parse case:  {... same mechanism description ..., "report_hex", "error": field or null}.
thresholds_shc.json: `shc`'s T1, T_shc_a, T_shc_b, p2 and shc_ok per (eps1, eps2) (spec §3.1).
enrol_longitudinal.json: the memoised mechanisms' enrolment words -> state, thresholds and
enrolment charges (spec §3.2; tests/support/vectors_longitudinal.py).
numeric_grid.json: the grid point of readings in numeric domains (spec §1.1).
recurring.json: schedule config cases, the round open at a time, round-header reports (spec §3.4).
strings.json: strings-domain configs, codes of values, phase-2 keys, groups, prefix keys (spec §3.5;
tests/support/vectors_pem.py; reports_pem.json's cases also name device, group, code, lambda, key_lambda).
Run: python tools/gen_vectors.py
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))
sys.path.insert(0, str(ROOT / "tests"))

from ldpfleet.core import protocol  # noqa: E402
from support.vectors import CASES  # noqa: E402
from support.vectors_messages import ack_cases, signature_cases  # noqa: E402
from support.vectors_numeric import grid_vectors  # noqa: E402
from support.vectors_shc import shc_threshold_vectors  # noqa: E402
from support.vectors_longitudinal import enrol_vectors  # noqa: E402
from support.vectors_recurring import recurring_vectors  # noqa: E402
from support.vectors_pem import strings_vectors  # noqa: E402

OUT = ROOT / "protocol_spec" / "v2" / "vectors"


def hash_vectors():
    cases = []
    for data in [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", "héllo wörld".encode(), bytes(range(37))]:
        for seed in [0, 1, 0x6C647066, 0xFFFFFFFF]:
            cases.append({"data_hex": data.hex(), "seed": seed, "hash": protocol.murmur3_32(data, seed)})
    keys = []
    for item in [0, 1, 1023, 4294967295, "", "cpu", "héllo"]:
        keys.append({"item": item, "key": protocol.item_key(item)})
    keyed = []
    for key in [0, 7, 123456, 4294967295]:
        for seed in [0, 99, 0xDEADBEEF]:
            h = protocol.keyed_hash(key, seed)
            keyed.append({"key": key, "seed": seed, "hash": h,
                          "bucket_g5": protocol.bucket(h, 5), "bucket_m1024": protocol.bucket(h, 1024)})
    return {"murmur3_x86_32": cases, "item_keys": keys, "keyed": keyed}


def threshold_vectors():
    out = []
    for eps_milli in [1, 100, 500, 1000, 1234, 2000, 4000, 8000]:
        row = {"eps_milli": eps_milli,
               "E_full": protocol.exp_lower(eps_milli, 1000),
               "E_half": protocol.exp_lower(eps_milli, 2000),
               "T_rr": protocol.t_rr(eps_milli), "T_oue_q": protocol.t_oue_q(eps_milli),
               "T_flip": protocol.t_flip(eps_milli),
               "T_grr": {str(n): protocol.t_grr(eps_milli, n) for n in [2, 3, 5, 8, 1024, 42178]}}
        out.append(row)
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hash.json").write_text(json.dumps(hash_vectors(), indent=1) + "\n")
    (OUT / "thresholds.json").write_text(json.dumps(threshold_vectors(), indent=1) + "\n")
    (OUT / "thresholds_shc.json").write_text(json.dumps(shc_threshold_vectors(), indent=1) + "\n")
    (OUT / "acks.json").write_text(json.dumps(ack_cases(), indent=1) + "\n")
    (OUT / "enrol_longitudinal.json").write_text(json.dumps(enrol_vectors(), indent=1) + "\n")
    (OUT / "numeric_grid.json").write_text(json.dumps(grid_vectors(), indent=1) + "\n")
    (OUT / "recurring.json").write_text(json.dumps(recurring_vectors(), indent=1) + "\n")
    (OUT / "strings.json").write_text(json.dumps(strings_vectors(), indent=1, ensure_ascii=False) + "\n")
    (OUT / "signatures.json").write_text(json.dumps(signature_cases(), indent=1, ensure_ascii=False) + "\n")
    for name, cases in sorted(CASES.items()):
        reports, parses = cases()
        (OUT / ("reports_%s.json" % name)).write_text(json.dumps(reports, indent=1) + "\n")
        (OUT / ("parse_%s.json" % name)).write_text(json.dumps(parses, indent=1) + "\n")
        print("%s: %d report vectors, %d parse vectors" % (name, len(reports), len(parses)))


if __name__ == "__main__":
    main()
