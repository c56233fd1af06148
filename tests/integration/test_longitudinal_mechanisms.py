"""The memoised mechanisms' contract beyond the report vectors (spec §3.2): the enrolment vectors
(words -> state, thresholds, charges) on the aggregator's reference, the C kernels and the C
client; the thresholds on every side; the refusals; the sketches' round trip; and the
enrolment charge of both device faces, which never depends on what the values do.

(The MicroPython client's enrolment vectors: tests/test_device_vectors.py.)"""
import json
import random
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ldpfleet.provision import device_runner
from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism, mechanism_from_description
from ldpfleet.core.mechanisms.base import Sketch
from ldpfleet.core.mechanisms.longitudinal import enrolment_charge_milli
from support.c_client import build_client, client_env

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "protocol_spec" / "v2" / "vectors"
NAMES = ["losue", "lsue", "lgrr", "loloha", "lbitmean"]
W = protocol.WORD


def enrol_cases():
    return json.loads((VECTORS / "enrol_longitudinal.json").read_text())


def mech_thresholds(mech):
    if mech.name in ("losue", "lsue"):
        return {"t_p": mech.t_p, "t_q": mech.t_q, "t_flip": mech.t_flip}
    if mech.name == "lbitmean":
        return {"t0": mech.t0, "t_flip": mech.t_flip}
    return {"t_perm": mech.t_perm, "t_inst": mech.t_inst}


def test_enrolment_vectors_reference_and_kernels():
    cases = enrol_cases()
    assert {c["mechanism"] for c in cases} == set(NAMES)
    for c in cases:
        mech = mechanism_from_description(c)
        assert mech.reference_enrol(c["words"]).hex() == c["state_hex"]
        assert mech.c_enrol(c["words"]).hex() == c["state_hex"]
        assert mech_thresholds(mech) == c["thresholds"] and mech.state_size == c["state_bytes"]
        assert [[r, mech.enrolment_charge_milli(r)] for r, _ in c["charge_milli"]] == c["charge_milli"]
        with pytest.raises(ValueError):
            mech.reference_enrol(c["words"][:-1])


def test_enrolment_vectors_c_client():
    binary = build_client()
    for c in enrol_cases():
        desc = {k: v for k, v in c.items() if k not in ("words", "state_hex")}
        desc.update(enrol=True, nonce=0)
        proc = subprocess.run([str(binary), "vector", "--case", json.dumps(desc), "--words-hex",
                               struct.pack("<%dI" % len(c["words"]), *c["words"]).hex()],
                              capture_output=True, text=True, env=client_env(), timeout=60)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        assert got == {"state_hex": c["state_hex"], "state_bytes": c["state_bytes"],
                       "thresholds": c["thresholds"], "charge_milli": c["charge_milli"]}, c["mechanism"]


def test_thresholds_python_and_c_agree():
    out = ffi.new("uint32_t *")
    rnd = random.Random(5)
    pairs = [(2, 1), (64000, 1), (64000, 63999), (2000, 1000)] + [
        tuple(sorted(rnd.sample(range(1, 20001), 2), reverse=True)) for _ in range(12)]
    for eps, eps1 in pairs:
        for name in ("losue", "lsue"):
            m = make_mechanism(name, eps, 9, eps1_milli=eps1)
            assert lib.ldp_t_lue_inst(m.t_p, m.t_q, eps1, out) == 0 and out[0] == m.t_flip
        m = make_mechanism("lbitmean", eps, 9, eps1_milli=eps1)
        assert lib.ldp_t_bit_inst(m.t0, eps1, out) == 0 and out[0] == m.t_flip
        for n in (2, 3, 4, 101, 256):
            m = make_mechanism("lgrr", eps, n, eps1_milli=eps1)
            assert lib.ldp_t_grr_inst(n, m.t_perm, eps1, out) == 0 and out[0] == m.t_inst, (eps, eps1, n)


def test_simulator_rows_are_the_enrolment_rows():
    """protocols.longitudinal_sim draws an L-OSUE / L-SUE row with the OUE kernel at the
    permanent thresholds: the same bits as row v of the enrolment kernel for the same words."""
    rng = np.random.default_rng(3)
    for name in ("losue", "lsue"):
        mech = make_mechanism(name, 2000, 13, eps1_milli=900)
        words = rng.integers(0, W, mech.enrol_words, dtype=np.uint64).astype(np.uint32)
        state = mech.c_enrol(words.tolist())
        for v in range(13):
            row = np.zeros(mech.row_bytes, np.uint8)
            x = np.array([v], np.uint32)
            w = np.ascontiguousarray(words[v * 13:(v + 1) * 13])
            lib.ldp_oue_perturb(ffi.cast("uint32_t *", x.ctypes.data), 1, 13, mech.t_p, mech.t_q,
                                ffi.cast("uint32_t *", w.ctypes.data),
                                ffi.cast("uint8_t *", row.ctypes.data), mech.row_bytes)
            assert row.tobytes() == state[v * mech.row_bytes:(v + 1) * mech.row_bytes]


# --- refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("name,eps,n,params,field", [
    ("losue", 2000, 10, {"eps1_milli": 2000}, "params.eps1_milli"),
    ("lgrr", 1000, 10, {"eps1_milli": 1500}, "params.eps1_milli"),
    ("loloha", 1000, 10, {"eps1_milli": 1000, "g": 4}, "params.eps1_milli"),
    ("lbitmean", 1, 10, {}, "params.eps1_milli"),
    ("losue", 2000, 129, {}, "domain.size"),
    ("lsue", 2000, 200, {}, "domain.size"),
    ("lgrr", 2000, 257, {}, "domain.size"),
    ("loloha", 2000, 10, {"g": 257}, "g"),
    ("lbitmean", 2000, 4, {"s": 4}, "params.s"),
    ("lbitmean", 2000, 4, {"s": 0}, "s"),
])
def test_refused_configurations(name, eps, n, params, field):
    with pytest.raises(ConfigError) as info:
        make_mechanism(name, eps, n, **params)
    assert info.value.field == field


def test_device_faces_refuse_what_the_aggregator_refuses(tmp_path):
    """The same configurations on MicroPython and the C client: refused (field phases.params
    or domain.size, the devices' names), and a valid one accepted."""
    cases = [("losue", 2000, 10, {"eps1_milli": 2000}, "phases.params"),
             ("lgrr", 1000, 10, {"eps1_milli": 1500}, "phases.params"),
             ("loloha", 1000, 10, {"eps1_milli": 999, "g": 257}, "phases.params"),
             ("losue", 2000, 129, {"eps1_milli": 1000}, "domain.size"),
             ("lgrr", 2000, 257, {"eps1_milli": 1000}, "domain.size"),
             ("lbitmean", 2000, 4, {"eps1_milli": 1000, "s": 4}, "phases.params"),
             ("loloha", 2000, 10, {"eps1_milli": 1000, "g": 3}, None)]
    script = tmp_path / "refuse.py"
    script.write_text(
        "import json, sys\nfrom ldp.mechanisms import make\nfrom ldp.errors import ConfigError\n"
        "out = []\nfor name, eps, n, params in json.load(open(sys.argv[1])):\n"
        "    try:\n        make(name, eps, n, 1, 1, 1, params)\n        out.append(None)\n"
        "    except ConfigError as exc:\n        out.append(exc.field)\nprint(json.dumps(out))\n")
    (tmp_path / "cases.json").write_text(json.dumps([c[:4] for c in cases]))
    proc = subprocess.run([device_runner.micropython_binary(), str(script),
                           str(tmp_path / "cases.json")], env=device_runner.micropython_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [c[4] for c in cases]
    binary = build_client()
    for name, eps, n, params, field in cases:
        desc = {"mechanism": name, "eps_milli": eps, "domain_size": n, "salt": 1, "campaign_id": 1,
                "phase": 1, "params": params, "enrol": True, "nonce": 0, "charge_milli": [[None, 0]]}
        words = "00" * 4 * 7  # loloha g = 3: 1 + 2g enrolment words (the others are refused first)
        proc = subprocess.run([str(binary), "vector", "--case", json.dumps(desc), "--words-hex", words],
                              capture_output=True, text=True, env=client_env(), timeout=60)
        if field is None:
            assert proc.returncode == 0, proc.stderr
        else:
            assert proc.returncode == 2 and ("ldp_client: %s:" % field) in proc.stderr, proc.stderr


# --- sketches -----------------------------------------------------------------------------

@pytest.mark.parametrize("name,params", [("losue", {}), ("lsue", {}), ("lgrr", {}), ("loloha", {}),
                                         ("loloha", {"g": 2}), ("lbitmean", {"s": 3})])
def test_sketch_merge_and_serialize(name, params):
    mech = make_mechanism(name, 2000, 20, campaign_id=9, eps1_milli=1000, **params)
    rng = np.random.default_rng(11)
    values = rng.integers(0, 20, 3000)
    states = mech.enrol_batch(3000, rng)
    reports = mech.report_batch(values, states, rng)
    whole, a, b = mech.new_sketch(), mech.new_sketch(), mech.new_sketch()
    whole.update(reports)
    a.update(reports[:1000])
    b.update(reports[1000:])
    a.merge(b)
    back = Sketch.deserialize(a.serialize())
    if name == "lbitmean":
        assert whole.mean() == a.mean() == back.mean()
    else:
        assert np.array_equal(whole.estimate_all(), back.estimate_all())
        assert np.array_equal(whole.estimate_all(), a.estimate_all())
    assert back.n == 3000 and back.mechanism.describe() == mech.describe()


# --- the enrolment charge: one place, both device faces -----------------------------------

SEQUENCE_ROUNDS = 12


def sequences(mech):
    """Constant, alternating and always-new values (always-new: each round a value (a bucket,
    a grid point) the device has not held before, while there are such)."""
    if mech.name == "loloha":  # keys in distinct buckets of the enrolled seed, then any
        return None
    n = mech.domain_size
    if mech.name == "lbitmean":  # the grid points themselves (α-point rounding keeps them)
        points = [j * mech.m // mech.s for j in range(mech.s + 1)]
        return {"constant": [points[1]] * SEQUENCE_ROUNDS,
                "alternating": [points[t % 2] for t in range(SEQUENCE_ROUNDS)],
                "always_new": [points[t % len(points)] for t in range(SEQUENCE_ROUNDS)]}
    return {"constant": [3 % n] * SEQUENCE_ROUNDS,
            "alternating": [(1 + (t % 2)) % n for t in range(SEQUENCE_ROUNDS)],
            "always_new": [t % n for t in range(SEQUENCE_ROUNDS)]}


def loloha_sequences(mech, state):
    seed = int.from_bytes(state[:4], "little")
    by_bucket = {}
    key = 0
    while len(by_bucket) < mech.g:
        by_bucket.setdefault(protocol.bucket(protocol.keyed_hash(key, seed), mech.g), key)
        key += 1
    keys = [by_bucket[b] for b in range(mech.g)]
    return {"constant": [keys[0]] * SEQUENCE_ROUNDS,
            "alternating": [keys[t % 2] for t in range(SEQUENCE_ROUNDS)],
            "always_new": [keys[t % mech.g] for t in range(SEQUENCE_ROUNDS)]}


CHARGE_CASES = [("losue", 2000, 6, {"eps1_milli": 1000}), ("lsue", 1500, 20, {"eps1_milli": 700}),
                ("lgrr", 2000, 5, {"eps1_milli": 1000}), ("loloha", 2000, 100, {"eps1_milli": 1000, "g": 3}),
                ("lbitmean", 2000, 101, {"eps1_milli": 1000, "s": 4})]


def classes_touched(mech, state, values):
    """How many permanent responses the values actually use (the realised lifetime classes)."""
    if mech.name == "loloha":
        seed = int.from_bytes(state[:4], "little")
        return len({protocol.bucket(protocol.keyed_hash(v, seed), mech.g) for v in values})
    if mech.name == "lbitmean":
        alpha = int.from_bytes(state[:4], "little")
        return len({mech.grid_point(mech.clamp(v), alpha) for v in values})
    return len(set(values))


DEVICE_SCRIPT = """
import gc, json, sys
from os import urandom
from ldp.mechanisms import make
cases = json.load(open(sys.argv[1]))  # a file: this unix build aborts on a long argv
out = []
for c in cases:
    mech = make(c["mechanism"], c["eps_milli"], c["domain_size"], 1, 7, 1, c["params"])
    charge = mech.charge_milli(c["rounds"])
    state = bytearray(mech.enrol(urandom))
    before = bytes(state)
    attrs = sorted(k for k in dir(mech) if not k.startswith("_"))
    row = {"charge": charge, "state_hex": "".join("%02x" % b for b in before), "runs": {}}
    for kind, values in c["sequences"].items():
        allocs = []
        for t, v in enumerate(values):
            gc.collect()
            a0 = gc.mem_alloc()
            mech.report({"value": v, "state": state}, t)
            allocs.append(gc.mem_alloc() - a0)
        row["runs"][kind] = {"charge": mech.charge_milli(c["rounds"]), "same_state": bytes(state) == before,
                             "same_attrs": sorted(k for k in dir(mech) if not k.startswith("_")) == attrs,
                             "allocs": allocs}
    out.append(row)
print(json.dumps(out))
"""


def test_enrolment_charge_is_the_worst_case_whatever_the_values_do(tmp_path):
    """Both device faces: the charge is computed from the config before any value exists and
    equals the aggregator's enrolment_charge_milli, i.e. min(classes, rounds)·ε∞ — what the
    always-new sequence actually reaches, and what the constant one is charged all the same.
    Reporting any sequence (constant, alternating, always new) leaves the state untouched,
    charges nothing more, and (MicroPython) allocates the same per report."""
    binary = build_client()
    rng = random.Random(2)
    device_cases = []
    for name, eps, n, params in CHARGE_CASES:
        mech = make_mechanism(name, eps, n, **params)
        for rounds in (SEQUENCE_ROUNDS, 2, None):
            expected = enrolment_charge_milli(mech.classes, eps, rounds)
            assert expected == eps * (mech.classes if rounds is None else min(mech.classes, rounds))
            assert mech.enrolment_charge_milli(rounds) == expected
        state = mech.c_enrol([rng.randrange(W) for _ in range(mech.enrol_words)])
        seqs = loloha_sequences(mech, state) if name == "loloha" else sequences(mech)
        # the always-new sequence reaches the bound; the constant one uses one class
        assert classes_touched(mech, state, seqs["always_new"]) == min(mech.classes, SEQUENCE_ROUNDS)
        assert classes_touched(mech, state, seqs["constant"]) == 1
        # C client: enrol from words, report every sequence, compare with the reference
        words = [rng.randrange(W) for _ in range(mech.enrol_words)]
        state = mech.reference_enrol(words)
        seqs = loloha_sequences(mech, state) if name == "loloha" else sequences(mech)
        charges = set()
        for kind, values in seqs.items():
            report_words = [[rng.randrange(W) for _ in range(mech.random_words)] for _ in values]
            desc = dict(mech.describe(), sequence=values, report_words=report_words, nonce=0,
                        charge_milli=[[SEQUENCE_ROUNDS, 0], [None, 0]])
            proc = subprocess.run([str(binary), "vector", "--case", json.dumps(desc), "--words-hex",
                                   struct.pack("<%dI" % len(words), *words).hex()],
                                  capture_output=True, text=True, env=client_env(), timeout=60)
            assert proc.returncode == 0, proc.stderr
            got = json.loads(proc.stdout)
            assert got["state_hex"] == got["state_after_hex"] == state.hex()
            assert got["reports"] == [mech.reference_report({"value": v, "state": state}, w, 0).hex()
                                      for v, w in zip(values, report_words)], (name, kind)
            charges.add(json.dumps(got["charge_milli"]))
            assert got["charge_milli"] == [[SEQUENCE_ROUNDS, mech.enrolment_charge_milli(SEQUENCE_ROUNDS)],
                                           [None, mech.enrolment_charge_milli(None)]]
        assert len(charges) == 1
        if name != "loloha":
            device_cases.append({"mechanism": name, "eps_milli": eps, "domain_size": n, "params": params,
                                 "rounds": SEQUENCE_ROUNDS, "sequences": seqs,
                                 "expected": mech.enrolment_charge_milli(SEQUENCE_ROUNDS)})
    # MicroPython: enrols from the OS RNG; LOLOHA's always-new keys depend on its seed, so its
    # sequences are every bucket's key for the state it drew (a second pass below)
    script = tmp_path / "charge.py"
    script.write_text(DEVICE_SCRIPT)
    (tmp_path / "cases.json").write_text(json.dumps(device_cases))
    proc = subprocess.run([device_runner.micropython_binary(), str(script), str(tmp_path / "cases.json")],
                          env=device_runner.micropython_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for case, row in zip(device_cases, json.loads(proc.stdout)):
        assert row["charge"] == case["expected"]
        allocs = set()
        for kind, run in row["runs"].items():
            assert run["charge"] == case["expected"] and run["same_state"] and run["same_attrs"], kind
            allocs.update(run["allocs"])
        assert len(allocs) == 1, (case["mechanism"], row["runs"])
    _loloha_on_micropython(tmp_path)


def _loloha_on_micropython(tmp_path):
    """LOLOHA on MicroPython with keys chosen for the state it enrolled: the state is drawn on
    the device, its seed read back, then the three sequences run against that state."""
    name, eps, n, params = CHARGE_CASES[3]
    mech = make_mechanism(name, eps, n, **params)
    first = tmp_path / "enrol.py"
    first.write_text("import json\nfrom os import urandom\nfrom ldp.mechanisms import make\n"
                     "m = make('loloha', %d, %d, 1, 7, 1, %s)\n"
                     "print(json.dumps({'charge': m.charge_milli(%d), 'state': ''.join('%%02x' %% b for b in "
                     "m.enrol(urandom))}))\n" % (eps, n, json.dumps(params), SEQUENCE_ROUNDS))
    proc = subprocess.run([device_runner.micropython_binary(), str(first)], env=device_runner.micropython_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["charge"] == mech.enrolment_charge_milli(SEQUENCE_ROUNDS) == 3 * eps
    state = bytes.fromhex(got["state"])
    seqs = loloha_sequences(mech, state)
    script = tmp_path / "loloha.py"
    script.write_text(DEVICE_SCRIPT.replace("state = bytearray(mech.enrol(urandom))",
                                            "state = bytearray(bytes.fromhex(c['state']))"))
    case = {"mechanism": name, "eps_milli": eps, "domain_size": n, "params": params,
            "rounds": SEQUENCE_ROUNDS, "sequences": seqs, "state": got["state"]}
    (tmp_path / "loloha.json").write_text(json.dumps([case]))
    proc = subprocess.run([device_runner.micropython_binary(), str(script), str(tmp_path / "loloha.json")],
                          env=device_runner.micropython_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    allocs = set()
    for kind, run in row["runs"].items():
        assert run["charge"] == 3 * eps and run["same_state"] and run["same_attrs"], kind
        allocs.update(run["allocs"])
    assert len(allocs) == 1
    assert classes_touched(mech, state, seqs["always_new"]) == 3


# --- the planner --------------------------------------------------------------------------

def test_plan_per_round_error_and_lifetime_eps():
    """`plan --every 1d --rounds 365`'s figures: per-round error from each mechanism's variance,
    lifetime ε = the enrolment charge; the every-round baseline pays 365·ε1; a domain too large
    for a state is infeasible with the reason."""
    from ldpfleet.eval.longitudinal_sim import plan_longitudinal
    rows = {r["protocol"]: r for r in plan_longitudinal(2000, 1000, 100, 100_000, 365)}
    assert {p: rows[p]["lifetime_eps"] for p in rows} == {
        "l-osue": 200.0, "l-sue": 200.0, "l-grr": 200.0, "ololoha": 6.0, "biloloha": 4.0,
        "every-round-oue": 365.0}
    osue = make_mechanism("losue", 2000, 100, eps1_milli=1000)
    assert rows["l-osue"]["per_round_variance"] == pytest.approx(osue.variance(100_000))
    assert rows["l-osue"]["per_round_variance"] == pytest.approx(rows["every-round-oue"]["per_round_variance"],
                                                                 rel=1e-6)  # L-OSUE = OUE at ε1
    assert rows["ololoha"]["per_round_variance"] < rows["biloloha"]["per_round_variance"]
    assert rows["ololoha"]["params"]["g"] == 3 and rows["ololoha"]["state_bytes"] == 7
    unbounded = {r["protocol"]: r for r in plan_longitudinal(2000, 1000, 100, 100_000, None)}
    assert unbounded["biloloha"]["lifetime_eps"] == 4.0 and unbounded["every-round-oue"]["lifetime_eps"] is None
    big = {r["protocol"]: r for r in plan_longitudinal(2000, 1000, 300, 100_000, 365)}
    assert not big["l-osue"]["feasible"] and "n <= 128" in big["l-osue"]["reason"]
    assert not big["l-grr"]["feasible"] and big["ololoha"]["feasible"]


@pytest.mark.parametrize("name", NAMES)
def test_one_shot_campaigns_refuse_memoised_mechanisms(name):
    """Until a config carries a recurring schedule, a memoised mechanism has no enrolment to
    charge and no state to report from: the aggregator refuses it (phases.mechanism), and the
    devices answer the same (tests/test_device_config.py's parity cases)."""
    from ldpfleet.core import config as campaign_config
    from support.devices import config_doc
    good = config_doc("memo", mechanism="olh")
    doc = dict(good, phases=[{"phase": 1, "mechanism": name, "eps_milli": 2000,
                              "params": {"eps1_milli": 1000}}])
    with pytest.raises(ConfigError) as info:
        campaign_config.check_config(doc, good["not_before"] + 1)
    assert info.value.field == "phases.mechanism" and "recurring" in str(info.value)
