"""Every shared vector reproduced by the Python reference, the C kernels through the Python API,
and every parse vector raising the stated typed error (protocol_spec/v2/vectors)."""
import json
from pathlib import Path

import mmh3
import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.core.errors import ReportFormatError
from ldpfleet.core.mechanisms import MODULES, mechanism_from_description

VECTORS = Path(__file__).resolve().parents[2] / "protocol_spec" / "v2" / "vectors"


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
    from ldpfleet.core import config, signing
    from ldpfleet.core.errors import ConfigError
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
        if doc["type"] == "config":  # every config vector passes the rules (spec §5.4)
            config.check_config(doc, doc["not_before"])
        kinds.add(case["kind"])
    assert kinds == {"config", "phase2", "close", "keys", "status"}
    assert any(json.loads(c["body"]).get("delivery", {}).get("spread_s") for c in vec["signed"])
    assert {c["error"] for c in vec["verify"]} == {None, "envelope", "kid", "sig", "body"}
    for case in vec["verify"]:
        trusted = [signing.PublicKey.from_doc(d) for d in case["trusted"]]
        try:
            config.verify(case["payload"].encode(), trusted)
            got = None
        except ConfigError as exc:
            got = exc.field
        assert got == case["error"], case["case"]


# --- shc (spec §3 id 12, §3.1): the phase-1 bit x, coverage, thresholds ---------------------

def shc_phase1_facts(case, mech):
    """(set size, L, dummy?, y1 == x?) of a phase-1 shc case."""
    s = len(case["value"])
    big = max(mech.l, s)
    dummy = protocol.bucket(case["words"][0], big) >= s
    y1 = bytes.fromhex(case["report_hex"])[-1]
    return s, dummy, y1 == case["x"]


def test_shc_vectors_give_x_and_cover_the_cases():
    """Phase 1: the kept bit x from the reference and the C kernel; sets of size 0, < l, = l,
    > l; the dummy with x = +1 and -1; y1 == x and y1 != x; w2 at T1 - 1 and T1, w3 at 2^31 - 1
    and 2^31. Phase 2: y1 == x and y1 != x, w0 at A - 1, A, B - 1, B."""
    import numpy as np
    from ldpfleet.core.mechanisms.sh import key_sets
    cases = load("reports_shc.json")
    assert {c["phase"] for c in cases} == {1, 2}
    seen = set()
    for case in cases:
        mech = mechanism_from_description(case)
        assert mech.eps1_milli == case["eps1_milli"]
        if case["phase"] == 2:
            assert case["eps_milli"] == case["eps2_milli"]
            v, w0 = case["value"], case["words"][0]
            th = case["thresholds"]
            assert (th["T1"], th["T_shc_a"], th["T_shc_b"]) == (mech.t_rr, mech.t_a, mech.t_b)
            seen.add(("p2", v["y1"] == v["x"]))
            seen.update(("p2w", w0 - t) for t in (mech.t_a, mech.t_b) if w0 - t in (-1, 0))
            continue
        report, x = mech.reference_phase1(case["value"], case["words"], case["nonce"])
        assert report.hex() == case["report_hex"] and x == case["x"]
        out = np.zeros((1, mech.report_size), np.uint8)
        xs = np.full(1, 7, np.uint8)
        mech._kernel(key_sets([case["value"]]), 0, 1, np.array(case["words"], np.uint32), out, xs)
        assert int(xs[0]) == case["x"]
        s, dummy, same = shc_phase1_facts(case, mech)
        seen.add(("size", (s > mech.l) - (s < mech.l) if s else "empty"))
        seen.add(("p1", same))
        seen.add(("w2", case["words"][2] - mech.t_rr))
        if dummy:
            seen.add(("dummy", case["x"]))
            seen.add(("w3", case["words"][3] - (1 << 31)))
    for fact in [("size", "empty"), ("size", -1), ("size", 0), ("size", 1), ("dummy", 0),
                 ("dummy", 1), ("p1", True), ("p1", False), ("w2", -1), ("w2", 0), ("w3", -1),
                 ("w3", 0), ("p2", True), ("p2", False), ("p2w", -1), ("p2w", 0)]:
        assert fact in seen, fact


def test_shc_threshold_vectors_python_and_c():
    """thresholds_shc.json == protocol.shc_thresholds / shc_ok == ldp_t_shc / ldp_shc_ok, including
    eps = 1 and eps1 + eps2 = 64000, and the pairs outside the ranges (not ok, no thresholds)."""
    rows = load("thresholds_shc.json")
    assert any(r["eps1_milli"] + r["eps2_milli"] == protocol.MAX_EPS_MILLI and r["shc_ok"]
               for r in rows)
    assert any(r["eps1_milli"] == 1 and r["eps2_milli"] == 1 for r in rows)
    assert any(not r["shc_ok"] for r in rows)
    out = [ffi.new("uint32_t *") for _ in range(3)]
    for r in rows:
        e1, e2 = r["eps1_milli"], r["eps2_milli"]
        assert protocol.shc_ok(e1, e2) is r["shc_ok"]
        assert lib.ldp_shc_ok(e1, e2) == int(r["shc_ok"]), (e1, e2)
        if "T1" not in r:
            assert lib.ldp_t_shc(e1, e2, *out) < 0
            continue
        assert protocol.exp_lower(e1 + e2, 1000) == r["E2"]
        assert protocol.shc_thresholds(e1, e2) == (r["T1"], r["T_shc_a"], r["T_shc_b"])
        assert protocol.t_shc_a(e1, e2) == r["T_shc_a"] and protocol.t_shc_b(e1, e2) == r["T_shc_b"]
        assert lib.ldp_t_shc(e1, e2, *out) == 0
        assert [o[0] for o in out] == [r["T1"], r["T_shc_a"], r["T_shc_b"]]
        w = protocol.WORD
        assert r["p2_num"] == r["T1"] * r["T_shc_a"] + (w - r["T1"]) * r["T_shc_b"]
        assert protocol.shc_keep_probability(e1, e2) * w * w == r["p2_num"]


# --- numeric domains (spec §1.1) ---------------------------------------------------------------

def test_numeric_grid_vectors_python_numpy_and_c():
    """numeric_grid.json: the reference `grid_point`, the vectorised `grid_points` (numbers only)
    and the C kernel `ldp_grid_point` (the C client's) map every reading to the vector's point:
    in-range values, half points, both ends, outside the range, ±inf, NaN, huge ints, and
    non-numbers (None, strings, bools, lists) at the midpoint."""
    import math
    from ldpfleet.core.mechanisms.numeric import NumericDomain, grid_points
    cases = load("numeric_grid.json")
    kinds = set()
    for case in cases:
        dom = NumericDomain(case["domain"])
        lo, hi, dec = dom.metrics[case["metric"]]
        reading = float(case["float"]) if "float" in case else case["reading"]
        assert dom.grid_point(reading, case["metric"]) == case["x"], case
        number = isinstance(reading, (int, float)) and not isinstance(reading, bool)
        if number:
            v = float(reading) if isinstance(reading, float) or abs(reading) < 1e308 \
                else (math.inf if reading > 0 else -math.inf)
            assert grid_points([v], lo, hi, dec, dom.points)[0] == case["x"], case
            assert lib.ldp_grid_point(v, 1, lo, hi, dec, dom.points) == case["x"], case
            kinds.add("nan" if v != v else "inf" if math.isinf(v) else
                      "low" if case["x"] == 0 else "high" if case["x"] == dom.points - 1 else "in")
        else:
            assert case["x"] == (dom.points - 1) // 2
            assert lib.ldp_grid_point(0.0, 0, lo, hi, dec, dom.points) == case["x"]
            kinds.add("not a number")
    assert kinds == {"nan", "inf", "low", "high", "in", "not a number"}


def test_numeric_vectors_cover_every_decision():
    """reports_{duchi,pm,sw,hm}.json: every decision of the numeric mechanisms (spec §3.2) on
    both sides of its threshold: Duchi's w0 at T(x) - 1 and T(x); the window's w0 at T_win - 1
    and T_win and w1 in the window and outside it on both sides of the position (r < p, r >= p);
    hm with both kinds, a Duchi-only config (eps < 0.611), several metrics sampled (k > 1), a
    one-metric value given as an int; grid points at both ends."""
    seen = set()
    for name in ("duchi", "pm", "sw", "hm"):
        for case in load("reports_%s.json" % name):
            mech = mechanism_from_description(case)
            body = bytes.fromhex(case["report_hex"])[12:]
            w = case["words"]
            if name == "duchi":
                seen.add(("duchi", w[0] - mech.threshold(case["value"])))
                seen.add(("duchi end", case["value"] in (0, mech.domain_size - 1)))
                continue
            if name == "hm":
                k = mech.sampled
                seen.add(("hm k>1", k > 1))
                seen.add(("hm duchi-only", mech.t_choice == 0))
                seen.add(("hm int value", isinstance(case["value"], int)))
                for i in range(k):
                    wc, w0 = w[k + 3 * i], w[k + 3 * i + 1]
                    seen.add(("hm kind", body[6 * i + 1]))
                    if mech.t_choice:
                        seen.add(("hm choice", wc - mech.t_choice))
                continue
            p = case["value"] * mech.mul // mech.div
            inside = w[0] < mech.t_in
            seen.add((name + " w0", w[0] - mech.t_in))
            if not inside:
                r = protocol.bucket(w[1], mech.span)
                seen.add((name + " outside", "before" if r < p else "after"))
            seen.add((name + " end", case["value"] in (0, mech.domain_size - 1)))
    want = {("duchi", -1), ("duchi", 0), ("duchi end", True), ("hm k>1", True),
            ("hm duchi-only", True), ("hm int value", True), ("hm kind", 0), ("hm kind", 1),
            ("hm choice", -1), ("hm choice", 0)}
    for name in ("pm", "sw"):
        want |= {(name + " w0", -1), (name + " w0", 0), (name + " outside", "before"),
                 (name + " outside", "after"), (name + " end", True)}
    assert want <= seen, want - seen
