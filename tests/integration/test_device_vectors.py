"""The MicroPython device client reproduces every shared vector byte for byte, run by the real
`micropython` interpreter from the `.py` sources and from `.mpy` files (mpy-cross -march=x64):
hash.json, thresholds.json, acks.json, signatures.json and reports_<mech>.json of every mechanism
(protocol_spec/v2); for `shc` also the ledger bit x of every phase-1 case and thresholds_shc.json;
numeric_grid.json (the grid point of a reading, spec §1.1)."""
import json
import subprocess
from pathlib import Path

import pytest

from ldpfleet.provision import device_runner
from support.devices import report_cycle_script

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "protocol_spec" / "v2" / "vectors"
RUNNER = ROOT / "device" / "tests" / "vectors.py"
DEVICE_MECHANISMS = ["grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm", "psgrr",
                     "psolh", "shc", "duchi", "pm", "hm", "sw"]
DEVICE_MECHANISMS += ["losue", "lsue", "lgrr", "loloha", "lbitmean"]  # memoised, spec §3.2
DEVICE_MECHANISMS += ["pem"]  # strings domains, spec §3.5


def load(name):
    return json.loads((VECTORS / name).read_text())


@pytest.fixture(scope="module")
def mpy_dir(tmp_path_factory):
    return device_runner.compile_mpy(tmp_path_factory.mktemp("mpy"), march="x64")


@pytest.fixture(scope="module", params=["py", "mpy"])
def device_results(request, mpy_dir, tmp_path_factory):
    """The device's answers for every vector, from one interpreter run."""
    lib = device_runner.DEVICE_DIR if request.param == "py" else mpy_dir
    present = [m for m in DEVICE_MECHANISMS if (VECTORS / ("reports_%s.json" % m)).exists()]
    out = tmp_path_factory.mktemp("out") / "results.json"
    proc = subprocess.run([device_runner.micropython_binary(), str(RUNNER), str(VECTORS), str(out)]
                          + present, env=device_runner.micropython_env(lib),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    assert results["module_file"].endswith(".mpy" if request.param == "mpy" else ".py")
    return results


def test_pem_report_cycle_fits_a_24k_heap(mpy_dir, tmp_path):
    """Spec §3.5 on a small board: from .mpy, importing pem (pemcode: the value's path, not the
    config rules nor the phase-2 key), building it (max_len 16, 4 levels) and making 500 reports
    of a string value runs with `-X heapsize=24k` (pem's viper code holds ~13.5 kB resident,
    hcms's ~10 kB: 16k is not enough), each report allocating a few hundred bytes."""
    value = {"device": "board-1", "value": "héllo wörld, longer than max_len"}
    (tmp_path / "cycle.py").write_text(report_cycle_script(
        "pem", 2000, 2 ** 32, {"g": 8, "kp": 1024, "levels": [8, 32, 64, 128]}, value, 500))
    (tmp_path / "lib").symlink_to(mpy_dir, target_is_directory=True)
    ok = subprocess.run([device_runner.micropython_binary(), "-X", "heapsize=24k", "cycle.py"],
                        env=device_runner.micropython_env("lib"), cwd=tmp_path,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    base, resident, cycle, _ = (int(x) for x in ok.stdout.split())
    assert cycle <= 320, ok.stdout  # the report's bytes copy, the 12 random bytes, a memoryview


@pytest.mark.parametrize("march", ["armv6m", "armv7emsp", "xtensawin"])
def test_device_code_compiles_for_boards(tmp_path, march):
    """Viper on 32-bit targets: 31-bit small ints, so a literal >= 2^30 mixed with `uint` is a
    compile error there and not on x64; mpy-cross for the board's arch catches it."""
    out = device_runner.compile_mpy(tmp_path, march=march)
    mpys = sorted(out.glob("ldp/*.mpy"))
    assert len(mpys) == len(list((device_runner.DEVICE_DIR / "ldp").glob("*.py")))
    assert (out / "ldp" / "hash.mpy").read_bytes()[2] >> 2 == {"armv6m": 4, "armv7emsp": 7,
                                                               "xtensawin": 10}[march]


@pytest.mark.parametrize("name,params", [("olh", {"g": 8}), ("hcms", {"k": 1024, "m": 1024})])
def test_report_cycle_fits_a_16k_heap(mpy_dir, tmp_path, name, params):
    """From .mpy, importing the mechanism, building it (ε = 2, d = 1024) and making 500 reports
    runs with `-X heapsize=16k`; with 8k it does not (the limit is real)."""
    (tmp_path / "cycle.py").write_text(report_cycle_script(name, 2000, 1024, params,
                                                                          5, 500))
    # Short relative paths (the script and "lib" from the test's directory): the interpreter
    # keeps its argv and sys.path strings on the same heap, so a long temporary directory (a
    # pytest-xdist worker's, a long TMPDIR) would otherwise eat the margin being measured.
    (tmp_path / "lib").symlink_to(mpy_dir, target_is_directory=True)

    def run(heap):
        return subprocess.run([device_runner.micropython_binary(), "-X", "heapsize=%s" % heap,
                               "cycle.py"], env=device_runner.micropython_env("lib"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
    ok = run("16k")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert len(ok.stdout.split()) == 4
    small = run("8k")
    assert small.returncode != 0 and "MemoryError" in small.stdout + small.stderr


def test_hash_vectors(device_results):
    vec = load("hash.json")
    got = device_results["hash"]
    assert got["murmur3"] == [c["hash"] for c in vec["murmur3_x86_32"]]
    assert got["keyed"] == [c["hash"] for c in vec["keyed"]]
    assert got["bucket_g5"] == [c["bucket_g5"] for c in vec["keyed"]]
    assert got["bucket_m1024"] == [c["bucket_m1024"] for c in vec["keyed"]]
    assert got["item_keys"] == [c["key"] for c in vec["item_keys"]]


def test_threshold_vectors(device_results):
    rows = load("thresholds.json")
    got = device_results["thresholds"]
    assert len(got) == len(rows)
    for mine, row in zip(got, rows):
        assert mine == row, row["eps_milli"]


def test_ack_vectors(device_results):
    """Spec §6: the device accepts exactly the acks acks.json says name its report; with its
    ack_key only MAC'd ones whose tag verifies, without one plain acks and MAC'd acks' prefix."""
    vec = load("acks.json")
    assert device_results["acks"] == [c["matches"] for c in vec["matching"]]
    assert device_results["mac_acks"] == [c["matches"] for c in vec["mac"]["matching"]]


def test_signature_vectors(device_results):
    """Spec §5.1: RFC 8032's vectors verify with the device's own Ed25519; the envelope of every
    message kind opens; every refusal case is refused with the field the aggregator names."""
    vec = load("signatures.json")
    got = device_results["signatures"]
    assert got["rfc8032"] == [True] * len(vec["rfc8032"])
    assert got["signed"] == [c["kind"] for c in vec["signed"]]
    assert got["body_digests"] == [c["body_digest_hex"] for c in vec["signed"]]  # §7.2 binding
    assert got["verify"] == [c["error"] for c in vec["verify"]]


def test_every_device_mechanism_has_vectors():
    missing = [m for m in DEVICE_MECHANISMS if not (VECTORS / ("reports_%s.json" % m)).exists()]
    assert not missing, "no shared vectors yet for %s" % missing


@pytest.mark.parametrize("name", DEVICE_MECHANISMS)
def test_report_vectors(device_results, name):
    path = VECTORS / ("reports_%s.json" % name)
    if not path.exists():
        pytest.skip("reports_%s.json not generated yet" % name)
    cases = json.loads(path.read_text())
    got = device_results["reports"][name]
    assert len(got) == len(cases) > 0
    for case, mine in zip(cases, got):
        assert mine == case["report_hex"], (
            "%s eps_milli=%d params=%s value=%r seq=%d" % (name, case["eps_milli"], case["params"],
                                                       case["value"], case["nonce"]))


def test_shc_ledger_bits_and_thresholds(device_results):
    """Spec §3.1: every shc phase-1 vector's bit x (what the device commits to its ledger with
    the memo) is the device's; phase 2 keeps none. thresholds_shc.json: shc_ok of every pair
    (out-of-range ones false) and T1, T_shc_a, T_shc_b, E2 where the vector has them."""
    cases = load("reports_shc.json")
    assert {c["phase"] for c in cases} == {1, 2}
    assert device_results["shc_x"] == [c["x"] if c["phase"] == 1 else None for c in cases]
    rows = load("thresholds_shc.json")
    got = device_results["thresholds_shc"]
    assert len(got) == len(rows) and any(not r["shc_ok"] for r in rows)
    for mine, row in zip(got, rows):
        assert set(mine) == set(row) - {"p2_num"}, row
        assert mine == {k: row[k] for k in mine}, row


def test_longitudinal_enrolment_vectors(device_results):
    """Spec §3.2: every enrolment vector's state (from its words), thresholds, state size and
    enrolment charge for each round count, from the device's own code."""
    cases = load("enrol_longitudinal.json")
    got = device_results["enrol"]
    assert len(got) == len(cases) and {c["mechanism"] for c in cases} == {
        "losue", "lsue", "lgrr", "loloha", "lbitmean"}
    for case, mine in zip(cases, got):
        assert mine == {"state_hex": case["state_hex"], "thresholds": case["thresholds"],
                        "state_bytes": case["state_bytes"], "charge_milli": case["charge_milli"]}, \
            (case["mechanism"], case["eps_milli"], case["domain_size"], case["params"], mine)


def test_strings_vectors(device_results):
    """Spec §3.5, strings.json: every config case refused with the aggregator's field (or
    accepted), every value's code (cut multi-byte UTF-8, non-strings all-NUL), key and phase-2
    set, every device's group, every prefix key, every phase-2 body's refusal."""
    vec = load("strings.json")
    got = device_results["strings"]
    assert got["configs"] == [c["error"] for c in vec["configs"]]
    assert got["codes"] == [{k: c[k] for k in ("code_hex", "key", "phase2_set")}
                            for c in vec["codes"]]
    assert got["groups"] == [c["group"] for c in vec["groups"]]
    assert got["prefix_keys"] == [c["key"] for c in vec["prefix_keys"]]
    assert got["phase2"] == [c["error"] for c in vec["phase2"]]


def test_numeric_grid_vectors(device_results):
    """Spec §1.1: the device maps every reading of numeric_grid.json (numbers in and out of the
    range, ±inf, NaN, huge ints, None, strings, bools, lists) to the vector's grid point."""
    cases = load("numeric_grid.json")
    assert device_results["numeric_grid"] == [c["x"] for c in cases]
