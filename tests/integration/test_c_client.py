"""The C device client for Linux boards (device/c_client), built with its own build script.

* Every shared report vector (protocol_spec/v2/vectors/reports_*.json) reproduced byte for
  byte by `ldp_client vector` (the shared c_kernels code behind the client's config parsing),
  also in an AddressSanitizer + UBSan build; thresholds equal vectors/thresholds.json with the
  native 128-bit path and the portable fallback.
* Envelope and config rules: the same tables the MicroPython device is held to
  (tests/test_device_config.py), answered with the aggregator's field.
* Real processes against a private Mosquitto: reports published at QoS 1, ledgered before they
  leave and memoised; every refusal (unsigned, wrong key, flipped byte, expired, malformed,
  other protocol, eps above the cap, budget exhausted) publishes nothing and leaves the ledger
  unchanged; two-phase campaigns (LDPMiner, LDPLCM sampling); string domains.
"""
import json
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from support.c_client import (assert_no_sanitizer_report, build_client, client_cmd, client_env,
                              metric_program, run_client)
from support.devices import SIGNING_KEY, ReportCollector, config_doc, envelope
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger
from ldpfleet.core import protocol, strings_domain
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import MODULES
from ldpfleet.core.protocols import ldplcm
from test_device_config import PRIOR_GEN, PRIOR_LEDGER, envelopes, mutated_configs, refusal_cases

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "protocol_spec" / "v2" / "vectors"
CLIENT_MECHANISMS = {"grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm", "psgrr",
                     "psolh", "shc", "duchi", "pm", "hm", "sw"}
CLIENT_MECHANISMS |= {"losue", "lsue", "lgrr", "loloha", "lbitmean"}  # memoised, spec §3.2
CLIENT_MECHANISMS |= {"pem"}  # strings domains, spec §3.5


def pem_value(value):
    """A pem vector's {"device", "value"}, plus "value_hex" (the UTF-8 bytes) for a string
    with an embedded NUL, which JSON text through cJSON cannot carry (the client's strings are
    C strings: a NUL ends them)."""
    out = dict(value)
    if isinstance(value["value"], str) and "\0" in value["value"]:
        out["value_hex"] = value["value"].encode().hex()
    return out


def report_cases(name):
    return json.loads((VECTORS / ("reports_%s.json" % name)).read_text())


def vector_argv(binary, case, words=None):
    words = case["words"] if words is None else words
    desc = {k: v for k, v in case.items() if k not in ("words", "report_hex")}
    if case["mechanism"] == "pem":
        desc["value"] = pem_value(case["value"])
    return [str(binary), "vector", "--case", json.dumps(desc),
            "--words-hex", struct.pack("<%dI" % len(words), *words).hex()]


def run_vectors(binary, names):
    """(case, stdout, stderr, returncode) for every report vector of `names`."""
    out = []
    for name in names:
        for case in report_cases(name):
            proc = subprocess.run(vector_argv(binary, case), capture_output=True, text=True,
                                  env=client_env(), timeout=60)
            out.append((case, proc.stdout.strip(), proc.stderr, proc.returncode))
    return out


# --- vectors and thresholds ------------------------------------------------------------------

def test_client_covers_every_mechanism_with_vectors():
    with_vectors = {p.name[len("reports_"):-len(".json")] for p in VECTORS.glob("reports_*.json")}
    assert with_vectors == set(MODULES) == set(protocol.MECHANISM_IDS)
    assert with_vectors <= CLIENT_MECHANISMS


@pytest.mark.parametrize("name", sorted(CLIENT_MECHANISMS))
def test_vectors_byte_for_byte(name):
    binary = build_client()
    results = run_vectors(binary, [name])
    assert results, "no vectors for %s" % name
    for case, out, err, rc in results:
        assert rc == 0 and out == case["report_hex"], (case, out, err)


def test_strings_codes_keys_and_groups():
    """Spec §3.5, strings.json through the client's own code (`pem-code`): every value's code
    (cut multi-byte UTF-8, non-strings all-NUL), its phase-2 key and element, every group."""
    binary = build_client()
    vec = json.loads((VECTORS / "strings.json").read_text())

    def run(case):
        proc = subprocess.run([str(binary), "pem-code", "--case", json.dumps(case)],
                              capture_output=True, text=True, env=client_env(), timeout=30)
        assert proc.returncode == 0, proc.stderr
        code, key, live, group = proc.stdout.split()
        return code, int(key), int(live), int(group)

    for c in vec["codes"]:
        case = dict(pem_value({"device": "d", "value": c["value"]}), max_len=c["max_len"], salt=0,
                    groups=1)
        assert run(case)[:3] == (c["code_hex"], c["key"], int(bool(c["phase2_set"]))), c
    for c in vec["groups"]:
        case = {"device": c["device"], "value": None, "max_len": 1, "salt": c["salt"],
                "groups": c["groups"]}
        assert run(case)[3] == c["group"], c


def test_strings_phase2_bodies():
    """Spec §3.5, strings.json's phase-2 bodies through the client's own phase-2 path (the
    harness's device vector at the case's clock): 1..1024 distinct u32 keys accepted and the
    report is the reference psgrr over the code's key, anything else refused `candidates`."""
    binary = build_client()
    words = [123456789, 987654321, 55555]
    for c in json.loads((VECTORS / "strings.json").read_text())["phase2"]:
        case = {"config": c["config"], "phase2": c["body"], "value": "hello", "nonce": 9,
                "now": c["config"]["not_before"] + 1}
        proc = subprocess.run([str(binary), "vector", "--case", json.dumps(case), "--words-hex",
                               struct.pack("<3I", *words).hex()], capture_output=True, text=True,
                              env=client_env(), timeout=30)
        if c["error"] is None:
            mech = campaign_config.mechanism_for_phase(c["config"], 2,
                                                       candidates=c["body"]["candidates"])
            code = strings_domain.code_of("hello", c["config"]["domain"]["max_len"])
            want = mech.reference_report(strings_domain.phase2_element(code), words, 9).hex()
            assert proc.returncode == 0 and proc.stdout.strip() == want, (c["name"], proc.stderr)
        else:
            assert proc.returncode == 2 and proc.stdout.startswith("refused %s:" % c["error"]), (
                c["name"], proc.stdout, proc.stderr)


def test_vectors_under_asan_and_ubsan():
    binary = build_client(sanitize=True)
    results = run_vectors(binary, sorted(CLIENT_MECHANISMS))
    assert len(results) >= 9
    for case, out, err, rc in results:
        assert_no_sanitizer_report(err)
        assert rc == 0 and out == case["report_hex"], (case, out, err)


def test_vector_mode_takes_exactly_the_declared_words():
    binary = build_client()
    case = report_cases("olh")[0]
    for words in (case["words"][:-1], case["words"] + [7]):
        proc = subprocess.run(vector_argv(binary, case, words), capture_output=True, text=True)
        assert proc.returncode != 0 and proc.stdout == "" and "exactly 3" in proc.stderr


def test_vector_words_change_the_report():
    """The injected words are what the report is made of (the vector test has teeth)."""
    binary = build_client()
    case = report_cases("grr")[0]
    assert case["words"][0] < protocol.t_grr(case["eps_milli"], case["domain_size"])  # kept
    other = [2 ** 32 - 1] + case["words"][1:]  # never kept: another output
    proc = subprocess.run(vector_argv(binary, case, other), capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() != case["report_hex"]


@pytest.mark.parametrize("no_int128", [False, True], ids=["int128", "portable"])
def test_thresholds_match_vectors(no_int128):
    binary = build_client(no_int128=no_int128)
    for row in json.loads((VECTORS / "thresholds.json").read_text()):
        argv = [str(binary), "thresholds", "--eps-milli", str(row["eps_milli"])]
        for n in row["T_grr"]:
            argv += ["--n", n]
        got = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        for key in ("E_full", "E_half", "T_rr", "T_oue_q", "T_flip", "T_grr"):
            assert got[key] == row[key], (row["eps_milli"], key)
        assert got["T_oue_p"] == protocol.T_OUE_P and got["T_half"] == protocol.T_HALF
    ns = [2, 3, 7, 65537, (1 << 31) + 1, 1 << 32]
    for e in [2, 999, 4321, 12000, 20000, 33000, 44000]:  # E_full fits 128 bits up to eps ~ 44.36
        argv = [str(binary), "thresholds", "--eps-milli", str(e)]
        for n in ns:
            argv += ["--n", str(n)]
        got = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        assert got["E_full"] == protocol.exp_lower(e, 1000) and got["E_half"] == protocol.exp_lower(e, 2000)
        assert (got["T_rr"], got["T_oue_q"], got["T_flip"]) == (protocol.t_rr(e), protocol.t_oue_q(e),
                                                               protocol.t_flip(e))
        assert got["T_grr"] == {str(n): protocol.t_grr(e, n) for n in ns}
    over = subprocess.run([str(binary), "thresholds", "--eps-milli", str(protocol.MAX_EPS_MILLI + 1)],
                          capture_output=True, text=True)
    assert over.returncode == 2 and over.stdout.startswith("refused phases.eps_milli:")


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_shc_ledger_bit_and_thresholds_match_vectors(sanitize):
    """Spec §3.1: the bit x the client ledgers with an shc phase-1 report (`vector --print-x`)
    is every phase-1 vector's; phase 2 prints none. thresholds_shc.json: shc_ok of every pair and
    T1, T_shc_a, T_shc_b where the vector has them, from the kernel the client links."""
    binary = build_client(sanitize=sanitize)
    cases = report_cases("shc")
    assert {c["phase"] for c in cases} == {1, 2}
    for case in cases:
        proc = subprocess.run(vector_argv(binary, case) + ["--print-x"], capture_output=True, text=True,
                              env=client_env(), timeout=60)
        assert_no_sanitizer_report(proc.stderr)
        want = [case["report_hex"]] + (["x=%d" % case["x"]] if case["phase"] == 1 else [])
        assert proc.returncode == 0 and proc.stdout.split() == want, (case, proc.stdout, proc.stderr)
    rows = json.loads((VECTORS / "thresholds_shc.json").read_text())
    assert any(not r["shc_ok"] for r in rows)
    for row in rows:
        proc = subprocess.run([str(binary), "shc-thresholds", "--eps1", str(row["eps1_milli"]),
                               "--eps2", str(row["eps2_milli"])], capture_output=True, text=True,
                              env=client_env(), timeout=60)
        assert_no_sanitizer_report(proc.stderr)
        got = json.loads(proc.stdout)
        assert got["shc_ok"] == row["shc_ok"], row
        for key in ("T1", "T_shc_a", "T_shc_b"):
            assert got.get(key) == row.get(key), (row, key)


# --- envelope and config rules ---------------------------------------------------------------

def verify_config(binary, payload: bytes, keys, now=None, envelope_only=False):
    """`ldp_client verify-config` with `keys` (signing.trusted_set's forms) as --trusted-keys."""
    import tempfile
    from ldpfleet.core.signing import trusted_set
    with tempfile.NamedTemporaryFile("w", suffix=".pub", delete=False) as f:
        json.dump([k.to_doc() for k in trusted_set(keys).values()], f)
    argv = [str(binary), "verify-config", "--trusted-keys", f.name]
    if now is not None:
        argv += ["--now", str(now)]
    if envelope_only:
        argv.append("--envelope-only")
    try:
        proc = subprocess.run(argv, input=payload, capture_output=True, timeout=30)
    finally:
        os.unlink(f.name)
    out = proc.stdout.decode().strip()
    if proc.returncode == 0:
        assert out == "accepted"
        return None
    assert proc.returncode == 2 and out.startswith("refused "), out
    return out[len("refused "):].split(":", 1)[0]


def aggregator_field(fn, *args):
    try:
        fn(*args)
    except ConfigError as exc:
        return exc.field
    return None


def aggregator_verify_and_check(payload, key):
    return campaign_config.check_config(campaign_config.verify(payload, key))


def test_envelope_rules_match_the_aggregator():
    """verify-config = the aggregator's verify, then check_config on the body."""
    binary = build_client()
    fields = []
    for payload, key, field in envelopes():
        assert aggregator_field(campaign_config.verify, payload, key) == field
        assert verify_config(binary, payload, key, envelope_only=True) == field, payload
        want = aggregator_field(aggregator_verify_and_check, payload, key)
        assert verify_config(binary, payload, key) == want, payload
        fields.append(field)
    assert {None, "sig", "envelope", "body", "kid"} <= set(fields)


def test_config_rules_match_the_aggregator():
    binary = build_client()
    fields = []
    for doc, now in mutated_configs():
        payload = envelope(campaign_config.canonical(doc))
        want = aggregator_field(campaign_config.check_config, doc, now)
        assert verify_config(binary, payload, SIGNING_KEY, now) == want, (doc, now)
        fields.append(want)
    assert None in fields and len(set(fields)) > 10


# --- real processes against a private broker -------------------------------------------------

def make_state(tmp_path, name="dev", device_id="c-dev-1", eps_cap_milli=2000, budget=50000, ledger=None):
    state = device_runner.prepare_device(tmp_path / name, device_id, SIGNING_KEY,
                                         eps_cap_milli=eps_cap_milli, lifetime_budget_milli=budget)
    if ledger is not None:
        device_runner.write_ledger(state, ledger, PRIOR_GEN)
    return state


def ledger_bytes(state):
    """Both generation files (spec §7.4), as bytes."""
    return {n: (Path(state) / n).read_bytes() for n in device_runner.LEDGER_FILES
            if (Path(state) / n).exists()}


def c_refusal_cases():
    cases = dict(refusal_cases())
    exhausted = campaign_config.sign(config_doc("cpu-load", eps_milli=1500), SIGNING_KEY)
    cases["ledger-exhausted"] = (exhausted, "lifetime_budget")
    return cases


@pytest.mark.parametrize("case", sorted(c_refusal_cases()))
def test_refused_config_publishes_nothing_and_spends_nothing(mosquitto, tmp_path, case):
    payload, field = c_refusal_cases()[case]
    budget = 2900 if case == "ledger-exhausted" else 50000  # PRIOR_LEDGER spent 1500
    state = make_state(tmp_path, budget=budget, ledger=PRIOR_LEDGER)
    before = ledger_bytes(state)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", payload)
        proc = run_client(build_client(), state, mosquitto.port, "cpu-load", 5)
        assert proc.returncode == device_runner.EXIT_REFUSED, proc.stdout + proc.stderr
        assert "ldp c-dev-1 refused config %s:" % field in proc.stdout, proc.stdout
        assert "spent" not in proc.stdout and "published" not in proc.stdout
        assert collector.barrier() == []
    finally:
        collector.close()
    assert ledger_bytes(state) == before


def test_report_ledgered_before_publishing_and_memoised(mosquitto, tmp_path):
    doc = config_doc("cpu-load", mechanism="olh", eps_milli=1500, params={"g": 8})
    state = make_state(tmp_path, ledger=PRIOR_LEDGER)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", campaign_config.sign(doc, SIGNING_KEY))
        first = run_client(build_client(), state, mosquitto.port, "cpu-load", 5)
        assert first.returncode == 0, first.stdout + first.stderr
        ledger = read_ledger(state)
        reports = collector.barrier()
        assert [t for t, _ in reports] == ["ldp/cpu-load/r/c-dev-1"]
        report = reports[0][1]
        campaign_config.mechanism_for_phase(doc, 1).check(report)
        nonce = int.from_bytes(report[8:12], "little")  # from the OS RNG (spec §3)
        assert ledger["spent_milli"] == PRIOR_LEDGER["spent_milli"] + 1500
        assert ledger["reports"]["%d:1" % doc["campaign_id"]] == [nonce, 1500, report.hex()]
        assert max(g for g, _ in device_runner.ledger_generations(state)) == PRIOR_GEN + 1
        assert ledger["reports"]["7:1"] == PRIOR_LEDGER["reports"]["7:1"]
        assert "memo" not in first.stdout and "spent phase=1" in first.stdout

        second = run_client(build_client(), state, mosquitto.port, "cpu-load", 5)
        assert second.returncode == 0 and "memo phase=1" in second.stdout and "spent" not in second.stdout
        again = collector.barrier()
        assert [p for _, p in again] == [report, report]
        assert read_ledger(state) == ledger
    finally:
        collector.close()


def test_crash_after_commit_resends_the_committed_report(mosquitto, tmp_path):
    doc = config_doc("cpu-load", mechanism="cms", eps_milli=1000, params={"k": 4, "m": 40})
    state = make_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", campaign_config.sign(doc, SIGNING_KEY))
        crashed = run_client(build_client(), state, mosquitto.port, "cpu-load", 9,
                             extra=["--crash-point", "after-commit"])
        assert crashed.returncode == device_runner.EXIT_CRASH_POINT, crashed.stdout + crashed.stderr
        assert collector.barrier() == []
        committed = read_ledger(state)
        memo = bytes.fromhex(committed["reports"]["%d:1" % doc["campaign_id"]][2])
        resumed = run_client(build_client(), state, mosquitto.port, "cpu-load", 9)
        assert resumed.returncode == 0 and "memo phase=1" in resumed.stdout
        assert [p for _, p in collector.barrier()] == [memo]
        campaign_config.mechanism_for_phase(doc, 1).check(memo)
        assert read_ledger(state) == committed
    finally:
        collector.close()


@pytest.mark.parametrize("damage", ["torn-newest", "both-corrupt", "missing"])
def test_ledger_fails_closed(mosquitto, tmp_path, damage):
    """A torn newest generation falls back to the previous one (nothing lost, spend not
    lowered); no valid generation at all, or no ledger, stops the client (exit 1) and nothing is
    rewritten (spec §7.4)."""
    state = make_state(tmp_path, ledger=PRIOR_LEDGER)  # generation PRIOR_GEN in ledger.1
    newer = dict(PRIOR_LEDGER, spent_milli=PRIOR_LEDGER["spent_milli"] + 1)
    device_runner.write_ledger(state, newer, PRIOR_GEN + 1)  # ledger.0
    torn = (state / "ledger.0").read_text()[:40]
    if damage == "torn-newest":
        (state / "ledger.0").write_text(torn)
    elif damage == "both-corrupt":
        for name in device_runner.LEDGER_FILES:
            (state / name).write_text(torn)
    else:
        for name in device_runner.LEDGER_FILES:
            (state / name).unlink()
    before = ledger_bytes(state)
    collector = ReportCollector(mosquitto.port)
    try:
        doc = config_doc("cpu-load", eps_milli=1000)
        collector.publish("ldp/cpu-load/config", campaign_config.sign(doc, SIGNING_KEY))
        proc = run_client(build_client(), state, mosquitto.port, "cpu-load", 5, wait=20)
        reports = collector.barrier()
    finally:
        collector.close()
    if damage == "torn-newest":
        assert proc.returncode == 0, proc.stdout + proc.stderr
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == PRIOR_LEDGER["spent_milli"] + 1000
        assert ledger["reports"]["7:1"] == PRIOR_LEDGER["reports"]["7:1"]
        assert len(reports) == 1
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("no valid generation" if damage == "both-corrupt" else "no ledger") in proc.stderr
    assert reports == [] and ledger_bytes(state) == before


PHASE2_LISTED = {"srappor": {"l": 2}, "psgrr": {"l": 2}, "psolh": {"l": 2, "g": 4}}
"""Phase-2 mechanisms that take the signed candidate list as their items."""


@pytest.mark.parametrize("phase2", sorted(PHASE2_LISTED))
@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_ldpminer_two_phases(mosquitto, tmp_path, sanitize, phase2):
    phases = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": {"m": 64, "l": 2}},
              {"phase": 2, "mechanism": phase2, "eps_milli": 1000, "params": PHASE2_LISTED[phase2]}]
    doc = config_doc("miner", phases=phases, domain={"type": "int", "size": 1000})
    candidates = [5, 17, 400]
    p2 = campaign_config.make_phase2(doc, candidates=candidates)
    state = make_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/miner/config", campaign_config.sign(doc, SIGNING_KEY))
        collector.publish("ldp/miner/phase2", campaign_config.sign(p2, SIGNING_KEY))
        proc = run_client(build_client(sanitize=sanitize), state, mosquitto.port, "miner", [17, 5, 999])
        assert_no_sanitizer_report(proc.stderr)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports = sorted((p[2], p) for _, p in collector.barrier())
        assert [phase for phase, _ in reports] == [1, 2]
        campaign_config.mechanism_for_phase(doc, 1).check(reports[0][1])
        campaign_config.mechanism_for_phase(doc, 2, candidates=candidates).check(reports[1][1])
        assert read_ledger(state)["spent_milli"] == 2000
    finally:
        collector.close()


def test_phase2_without_candidates_is_refused(mosquitto, tmp_path):
    phases = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": {"m": 64, "l": 2}},
              {"phase": 2, "mechanism": "srappor", "eps_milli": 1000, "params": {"l": 2}}]
    doc = config_doc("miner", phases=phases, domain={"type": "int", "size": 1000})
    state = make_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/miner/config", campaign_config.sign(doc, SIGNING_KEY))
        collector.publish("ldp/miner/phase2", campaign_config.sign(campaign_config.make_phase2(doc), SIGNING_KEY))
        proc = run_client(build_client(), state, mosquitto.port, "miner", [3])
        assert proc.returncode == device_runner.EXIT_REFUSED
        assert "refused phase2 candidates:" in proc.stdout
        assert [p[2] for _, p in collector.barrier()] == [1]  # phase 1 went out, phase 2 did not
        assert read_ledger(state)["spent_milli"] == 1000
    finally:
        collector.close()


def sampled_ids(doc, want_phase1: bool, count: int):
    found, i = [], 0
    while len(found) < count:
        dev = "lcm-%d" % i
        if bool(ldplcm.reports_in_phase([dev], doc, 1)[0]) == want_phase1:
            found.append(dev)
        i += 1
    return found


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_ldplcm_sampling_splits_devices_between_phases(mosquitto, tmp_path, sanitize):
    phases = [{"phase": 1, "mechanism": "cms", "eps_milli": 1000, "params": {"k": 8, "m": 32},
               "sample_rate_ppm": 300000},
              {"phase": 2, "mechanism": "lcm", "eps_milli": 1000, "params": {"k": 8, "m": 32}}]
    doc = config_doc("learned", phases=phases)
    # a valid model (ldplcm-model.md): item 7 reaches the leaf 5 = P, high-frequent
    model = {"format": "ldplcm-gbr", "version": 1, "scale_bits": 0, "init": 0, "boundary": 5,
             "roots": [0], "split": [7, 5, 0], "right": [2, -1, -1]}
    p2 = campaign_config.make_phase2(doc, model=model)
    first, = sampled_ids(doc, True, 1)
    second, = sampled_ids(doc, False, 1)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/learned/config", campaign_config.sign(doc, SIGNING_KEY))
        collector.publish("ldp/learned/phase2", campaign_config.sign(p2, SIGNING_KEY))
        for dev, high in ((first, False), (second, True)):
            state = make_state(tmp_path, name=dev, device_id=dev)
            proc = run_client(build_client(sanitize=sanitize), state, mosquitto.port, "learned", 7, high=high)
            assert_no_sanitizer_report(proc.stderr)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert read_ledger(state)["spent_milli"] == 1000
        by_topic = dict(collector.barrier())
        assert set(by_topic) == {"ldp/learned/r/%s" % first, "ldp/learned/r/%s" % second}
        one, two = by_topic["ldp/learned/r/%s" % first], by_topic["ldp/learned/r/%s" % second]
        assert (one[1], one[2]) == (protocol.MECHANISM_IDS["cms"], 1)
        assert (two[1], two[2]) == (protocol.MECHANISM_IDS["lcm"], 2)
        campaign_config.mechanism_for_phase(doc, 1).check(one)
        campaign_config.mechanism_for_phase(doc, 2).check(two)
    finally:
        collector.close()


def test_string_domain_index_and_key(mosquitto, tmp_path):
    """A string item reaches the mechanisms as its domain index (GRR reports y = 2 for
    "héllo") and as its spec key murmur3(utf8) (OLH reports y = bucket(Hs(key, seed), g)).
    At ε = 8 a device keeps the true value with probability > 0.995, so at least 6 of 8
    devices show it (P(fail) < 1e-5); a wrong index or key would match only 1/4 or 1/16 of
    the time. A value outside the domain is not refused: it reports ⊥ (index 4, spec §1)."""
    items = ["idle", "busy", "héllo", "overloaded"]
    domain = {"type": "str", "items": items}
    docs = {"strings": config_doc("strings", mechanism="grr", eps_milli=8000, params={}, domain=domain),
            "strkeys": config_doc("strkeys", mechanism="olh", eps_milli=8000, params={"g": 16},
                                  domain=domain)}
    devices = 8
    collector = ReportCollector(mosquitto.port)
    try:
        for name, doc in docs.items():
            collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
            for i in range(devices):
                state = make_state(tmp_path, "%s-%d" % (name, i), "%s-%d" % (name, i), eps_cap_milli=8000)
                ok = run_client(build_client(), state, mosquitto.port, name, "héllo")
                assert ok.returncode == 0, ok.stdout + ok.stderr
        outside = run_client(build_client(), make_state(tmp_path, "b", "b", eps_cap_milli=8000),
                             mosquitto.port, "strings", "nope")
        assert outside.returncode == 0 and "refused" not in outside.stdout, outside.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    (stray,) = [p for t, p in reports if t == "ldp/strings/r/b"]
    reports = [(t, p) for t, p in reports if t != "ldp/strings/r/b"]
    # ⊥ is index d = 4 of the GRR domain of 5; kept with probability > 0.995
    assert int.from_bytes(stray[protocol.HEADER_SIZE:protocol.HEADER_SIZE + 4], "little") == len(items)
    by_campaign = {name: [p for t, p in reports if t.startswith("ldp/%s/r/" % name)] for name in docs}
    assert {name: len(r) for name, r in by_campaign.items()} == {"strings": devices, "strkeys": devices}
    for name, doc in docs.items():
        for report in by_campaign[name]:
            campaign_config.mechanism_for_phase(doc, 1).check(report)
    body = protocol.HEADER_SIZE
    grr_y = [int.from_bytes(r[body:body + 4], "little") for r in by_campaign["strings"]]
    assert sum(y == items.index("héllo") for y in grr_y) >= 6, grr_y
    key = protocol.item_key("héllo")
    olh_hits = [int.from_bytes(r[body + 4:body + 6], "little")
                == protocol.bucket(protocol.keyed_hash(key, int.from_bytes(r[body:body + 4], "little")), 16)
                for r in by_campaign["strkeys"]]
    assert sum(olh_hits) >= 6, olh_hits


def test_live_session_under_asan_and_ubsan(mosquitto, tmp_path):
    binary = build_client(sanitize=True)
    doc = config_doc("cpu-load", mechanism="oue", eps_milli=1000, params={})
    state = make_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", campaign_config.sign(doc, SIGNING_KEY))
        runs = [run_client(binary, state, mosquitto.port, "cpu-load", 3) for _ in range(2)]
        refused = run_client(binary, make_state(tmp_path, "other", eps_cap_milli=500), mosquitto.port,
                             "cpu-load", 3)
        for proc in runs + [refused]:
            assert_no_sanitizer_report(proc.stderr)
        assert [p.returncode for p in runs] == [0, 0] and refused.returncode == 2
        reports = [p for _, p in collector.barrier()]
        assert len(reports) == 2 and reports[0] == reports[1]
        campaign_config.mechanism_for_phase(doc, 1).check(reports[0])
    finally:
        collector.close()


def test_waits_for_a_broker_that_is_not_up_yet(mosquitto, tmp_path):
    """Started while the broker is down: connects with backoff once it is up, then reports."""
    doc = config_doc("late", mechanism="hcms", eps_milli=1000, params={"k": 16, "m": 64})
    state = make_state(tmp_path)
    mosquitto.stop()
    argv = [str(build_client()), "--host", "127.0.0.1", "--port", str(mosquitto.port), "--campaign", "late",
            "--state-dir", str(state), "--value", "11", "--once", "--timeout", "40", "--backoff-max", "0.5"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert "connection-lost connect:" in first, first
        mosquitto.start()
        collector = ReportCollector(mosquitto.port)
        try:
            collector.publish("ldp/late/config", campaign_config.sign(doc, SIGNING_KEY))
            # Not communicate(): with a timeout it reads the raw pipe and would skip lines
            # readline() already buffered. The output is far below the pipe's capacity.
            proc.wait(timeout=45)
            out = proc.stdout.read()
            assert proc.returncode == 0, first + out
            assert "backoff" in out and "connected" in out and "published phase=1" in out
            reports = collector.barrier()
        finally:
            collector.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ledger = read_ledger(state)
    assert [p for _, p in reports] == [bytes.fromhex(ledger["reports"]["%d:1" % doc["campaign_id"]][2])]
    campaign_config.mechanism_for_phase(doc, 1).check(reports[0][1])


@pytest.mark.parametrize("step", ["before-write", "mid-write", "after-write"])
def test_reset_at_every_step_of_a_ledger_commit_loses_nothing(mosquitto, tmp_path, step):
    """The C client's test build aborts (as a power cut would) at each step of writing the next
    ledger generation: before the file is opened, with half of it written, and after it is
    written and synced. Then the client runs again. The spend never goes below what was
    committed, the older generation's memo survives, and a generation that was fully written
    counts (its report is re-sent from the memo, not drawn again). Nothing is ever renamed or
    deleted, so FAT's delete-then-rename cannot lose the only copy (spec §7.4)."""
    doc = config_doc("cpu-load", mechanism="olh", eps_milli=1500, params={"g": 8})
    state = make_state(tmp_path, ledger=PRIOR_LEDGER)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", campaign_config.sign(doc, SIGNING_KEY))
        argv = client_cmd(build_client(), state, mosquitto.port, "cpu-load", 5, once=True, timeout=15)
        crashed = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                 env=dict(client_env(), LDPC_LEDGER_CRASH=step))
        assert crashed.returncode == device_runner.EXIT_CRASH_POINT, crashed.stdout + crashed.stderr
        assert collector.barrier() == []  # nothing left before the commit finished
        after_crash = read_ledger(state)
        assert after_crash["spent_milli"] >= PRIOR_LEDGER["spent_milli"]
        assert after_crash["reports"]["7:1"] == PRIOR_LEDGER["reports"]["7:1"]
        resumed = run_client(build_client(), state, mosquitto.port, "cpu-load", 5)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        reports = collector.barrier()
    finally:
        collector.close()
    final = read_ledger(state)
    assert final["spent_milli"] == PRIOR_LEDGER["spent_milli"] + 1500  # spent exactly once
    assert final["reports"]["7:1"] == PRIOR_LEDGER["reports"]["7:1"]
    (report,) = [p for _, p in reports]
    assert final["reports"]["%d:1" % doc["campaign_id"]][2] == report.hex()
    if step == "after-write":  # the generation was complete: the memo goes out, no new draw
        assert after_crash == final and "memo phase=1" in resumed.stdout
    else:
        assert after_crash["spent_milli"] == PRIOR_LEDGER["spent_milli"]
        assert "spent phase=1" in resumed.stdout


def test_unknown_campaign_says_so_at_the_timeout(mosquitto, tmp_path):
    """With a campaign nobody created and --once, the client used to exit 3 at the
    timeout without a word; the usage text no longer marks identity-file options as required."""
    state = make_state(tmp_path)
    proc = run_client(build_client(), state, mosquitto.port, "no-such-campaign", 5, wait=8)
    assert proc.returncode == device_runner.EXIT_TIMEOUT
    assert "timeout no config received on ldp/no-such-campaign/config" in proc.stdout, proc.stdout
    usage = subprocess.run([str(build_client()), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "[--host H] [--port P]" in usage.stdout


def test_production_build_has_no_test_modes(tmp_path):
    """`make` (what a board owner runs) leaves out the vector/threshold/model/config
    test modes and the crash point; the tests build with TEST_MODES=1."""
    out = tmp_path / "prod"
    proc = subprocess.run(["make", "-C", str(ROOT / "device" / "c_client"), "BUILD=%s" % out, "-j2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    binary = out / "ldp_client"
    for mode in ("vector", "thresholds", "check-model", "verify-config", "shc-thresholds"):
        refused = subprocess.run([str(binary), mode], capture_output=True, text=True)
        assert refused.returncode == 1 and "production build" in refused.stderr, (mode, refused.stderr)
    assert subprocess.run([str(build_client()), "thresholds", "--eps-milli", "1000"],
                          capture_output=True, text=True).returncode == 0
    assert b"LDPC_TEST_RANDOM_SEED" not in binary.read_bytes()  # no deterministic-randomness seam


def test_value_file_keeps_the_value_off_the_command_line(mosquitto, tmp_path):
    """--value-file: the value never appears in /proc/PID/cmdline (readable by every local
    user), and the report carries it (GRR at ε 20: the true index with probability
    1 - 7/(e^20 + 7) > 1 - 1e-8)."""
    doc = config_doc("vf", mechanism="grr", eps_milli=20000, domain={"type": "int", "size": 8})
    state = make_state(tmp_path, eps_cap_milli=20000)
    value_file = tmp_path / "value.json"
    value_file.write_text("5\n")
    argv = [str(build_client()), "--host", "127.0.0.1", "--port", str(mosquitto.port),
            "--campaign", "vf", "--state-dir", str(state), "--value-file", str(value_file),
            "--once", "--timeout", "30"]
    collector = ReportCollector(mosquitto.port)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:  # until the child has exec'd the client (before, it is a copy of Python)
            cmdline = Path("/proc/%d/cmdline" % proc.pid).read_bytes().split(b"\0")
            if cmdline[0].endswith(b"ldp_client") or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert b"--value-file" in cmdline and b"5" not in cmdline  # the file's value is not
        collector.publish("ldp/vf/config", campaign_config.sign(doc, SIGNING_KEY))
        out, _ = proc.communicate(timeout=40)
        assert proc.returncode == 0, out
        reports = [p for _, p in collector.barrier()]
    finally:
        if proc.poll() is None:
            proc.kill()
        collector.close()
    campaign_config.mechanism_for_phase(doc, 1).check(reports[0])
    assert struct.unpack_from("<I", reports[0], protocol.HEADER_SIZE)[0] == 5  # GRR's y
    both = subprocess.run(argv[:-3] + ["--value", "5", "--once"], capture_output=True, text=True)
    assert both.returncode != 0 and "one of them" in both.stderr


def test_metric_agent_under_asan_and_ubsan(mosquitto, tmp_path):
    """`--metric NAME=PROGRAM` (spec §5.4): campaigns naming `temp` (numeric and categorical,
    published before and after the client starts) are joined, one naming no metric or another
    one is skipped; programs that fail, hang (killed after 5 s) or print a changing reading each
    give one valid report per campaign; bad --metric arguments are usage errors."""
    binary = build_client(sanitize=True)
    temp = {"type": "range", "lo": -400, "hi": 850, "resolution": 5, "decimals": 1}
    docs = {"t-num": dict(config_doc("t-num", mechanism="pm", eps_milli=1000, params={}, domain=temp),
                          metric="temp"),
            "t-cat": dict(config_doc("t-cat", mechanism="grr", eps_milli=1000, params={},
                                     domain={"type": "int", "size": 4}), metric="temp"),
            "t-none": config_doc("t-none", mechanism="grr", eps_milli=1000, params={},
                                 domain={"type": "int", "size": 4}),
            "t-hum": dict(config_doc("t-hum", mechanism="grr", eps_milli=1000, params={},
                                     domain={"type": "int", "size": 4}), metric="humidity")}
    for bad in (["--metric", "Temp=/bin/true"], ["--metric", "temp="], ["--metric", "temp"],
                ["--metric", "temp=/bin/true", "--metric", "temp=/bin/false"],
                ["--metric", "temp=/bin/true", "--campaign", "x"],
                ["--metric", "temp=/bin/true", "--once"]):
        proc = subprocess.run([str(binary), "--state-dir", str(make_state(tmp_path, "bad")), *bad],
                              capture_output=True, text=True, timeout=30, env=client_env())
        assert proc.returncode == 1 and "usage" in proc.stderr, (bad, proc.stderr)
        assert_no_sanitizer_report(proc.stderr)
    collector = ReportCollector(mosquitto.port)
    procs = []
    try:
        for name in ("t-num", "t-none"):
            collector.publish("ldp/%s/config" % name, campaign_config.sign(docs[name], SIGNING_KEY))
        for kind in ("RAISE", "SLOW", "LIVE", 2):
            state = make_state(tmp_path, "agent-%s" % kind, device_id="c-agent-%s" % kind)
            prog = metric_program(state / "read", kind)
            procs.append(subprocess.Popen(
                [str(binary), "--host", "127.0.0.1", "--port", str(mosquitto.port), "--state-dir",
                 str(state), "--metric", "temp=%s" % prog, "--metric", "humidity=/bin/false",
                 "--timeout", "25"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=client_env()))
        time.sleep(3)
        for name in ("t-cat", "t-hum"):  # created after the clients started: discovered
            collector.publish("ldp/%s/config" % name, campaign_config.sign(docs[name], SIGNING_KEY))
        outs = [p.communicate(timeout=60) for p in procs]
        reports = collector.barrier()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        collector.close()
    for (out, err), p in zip(outs, procs):
        assert_no_sanitizer_report(err)
        assert p.returncode == 0, out + err
        assert "joined campaign t-num metric temp" in out and "joined campaign t-cat metric temp" in out
        assert "skip campaign t-none (metric None not provided)" in out, out
        assert "joined campaign t-hum metric humidity" in out, out  # /bin/false: no value, ⊥
    by_campaign = {}
    for topic, payload in reports:
        by_campaign.setdefault(topic.split("/")[1], []).append(payload)
    assert sorted(by_campaign) == ["t-cat", "t-hum", "t-num"]
    for name, payloads in by_campaign.items():
        assert len(payloads) == 4, (name, len(payloads))
        for r in payloads:
            campaign_config.mechanism_for_phase(docs[name], 1).check(r)
