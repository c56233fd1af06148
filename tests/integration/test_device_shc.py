"""`shc` (spec §3 id 12, §3.1: LDPMiner-SH with correlated phases) on the real `micropython`
device and the real C client (device/c_client), against the aggregator's own functions.

* Config rules: both clients refuse exactly the `shc` configs the aggregator refuses, with its
  field: phases whose m or l differ (`params.m`, `params.l`), shc in one phase only
  (`phases.mechanism`), and a pair failing `shc_ok` (`phases.eps_milli`: every pair in range
  passes it, see thresholds_shc.json, so the failing pairs are those with eps1 + eps2 > 64000);
  live, such a config publishes nothing and leaves the ledger bytes unchanged.
* Phase 2 through each client's own device code (MicroPython `Device.phase2_input`, C
  `ldpc_shc_phase2_input` via `ldp_client vector`), from a phase-1 memo and ledger bit x: the
  report equals the aggregator's `ShcMechanism.reference_phase2` byte for byte at every
  threshold edge, whatever the device's value and whatever the candidate list (validated, not
  used); no memo, no bit, or a memo that is not an shc phase-1 report: no report ("skip phase
  2"); a bad candidate list is refused (`candidates`).
* Live, against a private Mosquitto: both phases reported with mechanism 12, the phase-2 row is
  the phase-1 row, eps1 + eps2 spent, x in the ledger; a re-run re-sends both memos and spends
  nothing; a device whose ledger has the phase-1 memo but no `shc` entry skips phase 2
  (logged, nothing published, nothing spent, exit 0).
(The ledger rules -- x committed in the memo's generation, restarts between phases, across
clients -- are in tests/test_device_ledger.py; behaviour per value in test_device_equivalence.py.)
"""
import copy
import json
import shutil
import struct
import subprocess

import pytest

from support.c_client import assert_no_sanitizer_report, build_client, client_env, run_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc, envelope
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core import protocol
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.protocols import ldpminer

W = 1 << 32
CLIENTS = ["micropython", "c"]
RULES = device_runner.DEVICE_DIR / "tests" / "config_rules.py"


def shc_config(name="shc-dev", eps_milli=3000, l=2, k_max=3, m=64, domain=None):
    """An `ldpminer-sh-opt` campaign config, phases exactly as the aggregator writes them."""
    return config_doc(name, phases=ldpminer.campaign_phases("lm-sho", eps_milli, l, k_max, m),
                      domain=domain or {"type": "int", "size": 40})


# --- config rules ------------------------------------------------------------------------------

def rule_cases():
    """(label, doc, now): valid shc configs and every shc-specific way to break one."""
    base = shc_config("shc-rules")
    now = base["not_before"] + 10
    out = [("valid", base, now)]

    def variant(label, fn):
        doc = copy.deepcopy(base)
        fn(doc)
        out.append((label, doc, now))

    def phase_params(i, **kw):
        return lambda doc: doc["phases"][i]["params"].update(kw)

    def drop(i, key):
        return lambda doc: doc["phases"][i]["params"].pop(key)

    variant("m-differs", phase_params(1, m=128))
    variant("l-differs", phase_params(0, l=3))
    variant("m-and-l-differ", lambda doc: (phase_params(1, m=32)(doc), phase_params(1, l=1)(doc)))
    variant("m-float", phase_params(1, m=64.5))
    variant("m-string", lambda doc: (phase_params(0, m="64")(doc), phase_params(1, m="64")(doc)))
    variant("m-missing-one", drop(0, "m"))
    variant("l-missing-both", lambda doc: (drop(0, "l")(doc), drop(1, "l")(doc)))
    variant("l-missing-one-default", lambda doc: (drop(0, "l")(doc), phase_params(1, l=1)(doc)))
    variant("phase2-sh", lambda doc: doc["phases"][1].update(mechanism="sh"))
    variant("phase1-sh", lambda doc: doc["phases"][0].update(mechanism="sh"))
    variant("phase2-srappor", lambda doc: doc["phases"][1].update(mechanism="srappor",
                                                                  params={"l": 2}))
    variant("one-phase", lambda doc: doc.update(phases=doc["phases"][:1]))
    for e1, e2 in [(32000, 32001), (64000, 1), (1, 64000), (40000, 30000), (32000, 32000),
                   (1, 1), (1, 63999), (63999, 1)]:
        def eps(doc, e1=e1, e2=e2):
            doc["phases"][0]["eps_milli"] = e1
            doc["phases"][1]["eps_milli"] = e2
        variant("eps-%d-%d" % (e1, e2), eps)
    return out


def aggregator_field(doc, now):
    try:
        campaign_config.check_config(doc, now)
    except ConfigError as exc:
        return exc.field
    return None


def micropython_fields(cases, tmp_path):
    (tmp_path / "in.json").write_text(json.dumps({"verify": [], "check": [[d, n] for _, d, n in cases]}))
    proc = subprocess.run([device_runner.micropython_binary(), str(RULES), str(tmp_path / "in.json"),
                           str(tmp_path / "out.json")], env=device_runner.micropython_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "out.json").read_text())["check"]


def c_fields(cases, tmp_path):
    from support.devices import write_key_files
    write_key_files(tmp_path / "signing.key")
    out = []
    for _, doc, now in cases:
        proc = subprocess.run([str(build_client()), "verify-config", "--trusted-keys",
                               str(tmp_path / "signing.key.pub"), "--now", str(now)],
                              input=envelope(campaign_config.canonical(doc)), capture_output=True,
                              timeout=30)
        text = proc.stdout.decode().strip()
        out.append(None if text == "accepted" else text[len("refused "):].split(":", 1)[0])
    return out


def test_rule_cases_cover_every_refusal():
    fields = {label: aggregator_field(doc, now) for label, doc, now in rule_cases()}
    assert fields["valid"] is None and fields["eps-1-1"] is None and fields["eps-32000-32000"] is None
    assert fields["m-differs"] == "params.m" and fields["l-differs"] == "params.l"
    assert fields["phase2-sh"] == fields["one-phase"] == "phases.mechanism"
    assert fields["eps-32000-32001"] == fields["eps-40000-30000"] == "phases.eps_milli"
    # every pair in range passes shc_ok (thresholds_shc.json's grid): only the sum can fail it
    assert not protocol.shc_ok(32000, 32001) and protocol.shc_ok(32000, 32000)


@pytest.mark.parametrize("client", CLIENTS)
def test_config_rules_match_the_aggregator(client, tmp_path):
    cases = rule_cases()
    want = [aggregator_field(doc, now) for _, doc, now in cases]
    if client == "c":
        # cJSON has one number type: 64.5 is caught (not an integer), but the C client cannot
        # tell a JSON "64" string pair from a number pair -- no such case is listed above
        got = c_fields(cases, tmp_path)
    else:
        got = micropython_fields(cases, tmp_path)
    assert dict(zip([c[0] for c in cases], got)) == dict(zip([c[0] for c in cases], want))


def make_state(tmp_path, device_id, budget=100000, cap=64000):
    return device_runner.prepare_device(tmp_path / device_id, device_id, SIGNING_KEY,
                                        eps_cap_milli=cap, lifetime_budget_milli=budget)


def run_live(client, state, port, campaign, value):
    """One --once run of either client; (exit code, output)."""
    if client == "c":
        proc = run_client(build_client(), state, port, campaign, value)
        return proc.returncode, proc.stdout + proc.stderr
    proc = run_device(state, "127.0.0.1", port, campaign, value=value, wait=40)
    return proc.returncode, proc.stdout


def ledger_bytes(state):
    return {n: (state / n).read_bytes() for n in device_runner.LEDGER_FILES if (state / n).exists()}


@pytest.mark.parametrize("label,field", [("m-differs", "params.m"), ("l-differs", "params.l"),
                                         ("eps-40000-30000", "phases.eps_milli"),
                                         ("phase2-sh", "phases.mechanism")])
@pytest.mark.parametrize("client", CLIENTS)
def test_refused_shc_config_live(mosquitto, tmp_path, client, label, field):
    """A signed shc config with unequal m or l, or failing shc_ok: refused with the field,
    nothing published, the ledger's bytes unchanged."""
    _, doc, _ = next(c for c in rule_cases() if c[0] == label)
    campaign = doc["campaign"]
    state = make_state(tmp_path, "shc-bad")
    before = ledger_bytes(state)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % campaign, envelope(campaign_config.canonical(doc)))
        code, out = run_live(client, state, mosquitto.port, campaign, [1, 2])
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == device_runner.EXIT_REFUSED, out
    assert "refused config %s:" % field in out, out
    assert "spent" not in out and reports == []
    assert ledger_bytes(state) == before


# --- phase 2 through each client's device code ----------------------------------------------------

DRIVER = r'''
import json
import sys

from ldp import config as cfg
from ldp.device import Device
from word_source import WordSource

identity = {"device_id": "shc-driver", "eps_cap_milli": 64000,
            "trusted_keys": [{"kid": "56475aa75463474c",  # support.devices.SIGNING_KEY
                              "pub": "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"}],
            "lifetime_budget_milli": 10000000}
with open(sys.argv[1]) as f:
    jobs = json.load(f)
out = []
for job in jobs:
    doc = cfg.check_config(job["config"])
    p2 = cfg.check_phase2(job["phase2"], doc)
    dev = Device(sys.argv[3], identity, doc["campaign"], job["value"])
    # the ledger as a restarted device finds it (in memory only: the driver writes no file)
    cid = doc["campaign_id"]
    if job.get("memo_hex") is not None:
        eps1 = job.get("memo_eps_milli") or doc["phases"][0]["eps_milli"]
        dev.ledger.reports = {"%d:1" % cid: [1, eps1, job["memo_hex"]]}
    if job.get("x", -1) >= 0:
        dev.ledger.shc = {"%d" % cid: job["x"]}
    try:
        mech, value = dev.phase2_input(doc, p2)
    except cfg.ConfigError as exc:
        out.append({"refused": exc.field})
        continue
    if mech is None:
        out.append({"skip": True})
        continue
    src = WordSource(job["words"])
    report = mech.report(value, job["nonce"], src)
    if src.pos != len(src.data):
        raise ValueError("consumed %d of %d words" % (src.pos // 4, len(job["words"])))
    shown = value.as_list() if hasattr(value, "as_list") else value  # a set: its live keys
    out.append({"report": "".join("%02x" % b for b in report), "input": shown})
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
'''


def phase1_memos(cfg, count, seed):
    """(memo report, x) of `count` phase-1 reports of the aggregator's reference, sets of every
    size around l, words at the sampling and dummy edges."""
    import numpy as np
    mech1 = ldpminer.phase1_mechanism(cfg)
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        keys = [int(k) for k in rng.choice(cfg["domain"]["size"], size=n % (mech1.l + 2), replace=False)]
        words = [int(w) for w in rng.integers(0, W, size=4, dtype=np.uint64)]
        words[2] = [mech1.t_rr - 1, mech1.t_rr, 0, W - 1][n % 4]
        report, x = mech1.reference_phase1(keys, words, 1000 + n)
        out.append((report, x))
    return out


def phase2_jobs():
    """Phase-2 jobs (both clients) with the aggregator's expected bytes, plus skips/refusals."""
    jobs, seq = [], 0
    values = [[1, 2], [], None, [5, 6, 7, 8, 9], 3, "x"]
    for cfg, cands in ((shc_config("shc-p2a", eps_milli=3000, l=2, m=64), [17, 5, 20]),
                       (shc_config("shc-p2b", eps_milli=1000, l=3, m=65536), [1, 2, 3, 4])):
        mech2 = ldpminer.phase2_mechanism(cfg, cands)
        other = campaign_config.make_phase2(cfg, candidates=[0, 39])  # another valid list
        a, b = mech2.t_a, mech2.t_b
        for n, (memo, x) in enumerate(phase1_memos(cfg, 8, len(cands))):
            t = int.from_bytes(memo[12:16], "little")
            for y1_eq in (True, False):
                body = bytearray(memo)
                body[16] = x if y1_eq else 1 - x  # both y1 == x and y1 != x for every memo
                for w0 in ([a - 1, a] if y1_eq else [b - 1, b]) + [0, W - 1]:
                    seq += 1
                    p2 = ldpminer.phase2_message(cfg, cands) if seq % 2 else other
                    want = mech2.reference_phase2({"t": t, "y1": body[16], "x": x}, [w0], seq)
                    jobs.append({"config": cfg, "phase2": p2, "value": values[seq % len(values)],
                                 "nonce": seq, "words": [w0], "memo_hex": bytes(body).hex(),
                                 "x": x, "want": {"report": want.hex()}})
        # a config whose eps1 is not the one the memo was made (and charged) with, e.g. an id
        # re-signed before bindings existed: phase 2's thresholds come from the memo's eps1
        eps1, eps2 = (ph["eps_milli"] for ph in cfg["phases"])
        resigned = copy.deepcopy(cfg)
        resigned["phases"][0]["eps_milli"] = 4 * eps1
        for n, (memo, x) in enumerate(phase1_memos(cfg, 4, 7)):
            t = int.from_bytes(memo[12:16], "little")
            for w0 in (a - 1, a, b - 1, b):
                seq += 1
                want = mech2.reference_phase2({"t": t, "y1": memo[16], "x": x}, [w0], seq)
                jobs.append({"config": resigned, "phase2": ldpminer.phase2_message(resigned, cands),
                             "value": [1], "nonce": seq, "words": [w0], "memo_hex": memo.hex(),
                             "x": x, "memo_eps_milli": eps1, "want": {"report": want.hex()}})
        memo, x = phase1_memos(cfg, 1, 99)[0]
        good = ldpminer.phase2_message(cfg, cands)
        sh_memo = bytearray(memo)
        sh_memo[1] = protocol.MECHANISM_IDS["sh"]
        p1_as_2 = bytearray(memo)
        p1_as_2[2] = 2
        for memo_hex, bit in [(None, x), (memo.hex(), -1), (None, -1), (bytes(sh_memo).hex(), x),
                              (bytes(p1_as_2).hex(), x), (memo.hex()[:-2], x)]:
            jobs.append({"config": cfg, "phase2": good, "value": [1], "nonce": 1, "words": [7],
                         "memo_hex": memo_hex, "x": bit, "want": {"skip": True}})
        for bad in ("missing", [], [5, 5], [W], ["5"]):
            p2 = campaign_config.make_phase2(cfg)
            if bad != "missing":
                p2["candidates"] = bad
            jobs.append({"config": cfg, "phase2": p2, "value": [1], "nonce": 1, "words": [7],
                         "memo_hex": memo.hex(), "x": x, "want": {"refused": "candidates"}})
    return jobs


def run_micropython(jobs, work):
    job_file, out_file, state = work / "jobs.json", work / "out.json", work / "state"
    state.mkdir(exist_ok=True)
    device_runner.provision_ledger(state)
    before = ledger_bytes(state)
    (work / "driver.py").write_text(DRIVER)
    shutil.copy(device_runner.DEVICE_DIR / "tests" / "word_source.py", work / "word_source.py")
    job_file.write_text(json.dumps([{k: j.get(k) for k in ("config", "phase2", "value", "nonce", "words",
                                                           "memo_hex", "x", "memo_eps_milli")}
                                    for j in jobs]))
    proc = subprocess.run([device_runner.micropython_binary(), str(work / "driver.py"), str(job_file),
                           str(out_file), str(state)], env=device_runner.micropython_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ledger_bytes(state) == before  # building a report never touches the ledger
    return json.loads(out_file.read_text())


def run_c(jobs, sanitize=False):
    binary = build_client(sanitize=sanitize)
    out = []
    for job in jobs:
        case = {k: job[k] for k in ("config", "phase2", "nonce", "memo_hex", "x", "memo_eps_milli")
                if job.get(k) is not None}
        proc = subprocess.run([str(binary), "vector", "--case", json.dumps(case), "--words-hex",
                               struct.pack("<%dI" % len(job["words"]), *job["words"]).hex()],
                              capture_output=True, text=True, env=client_env(), timeout=60)
        assert_no_sanitizer_report(proc.stderr)
        text = proc.stdout.strip()
        if proc.returncode == device_runner.EXIT_REFUSED and text.startswith("refused "):
            out.append({"refused": text[len("refused "):].split(":", 1)[0]})
        elif text == "skip phase 2":
            assert proc.returncode == 0
            out.append({"skip": True})
        else:
            assert proc.returncode == 0, (case, proc.stdout, proc.stderr)
            out.append({"report": text})
    return out


def test_phase2_jobs_have_teeth():
    jobs = [j for j in phase2_jobs() if "report" in j["want"]]
    signs = {(j["memo_hex"][-2:] == "01") == bool(j["x"]) for j in jobs}
    assert signs == {True, False}  # y1 == x and y1 != x
    reports = {j["want"]["report"][-2:] for j in jobs}
    assert reports == {"00", "01"}
    # the memo's row is what phase 2 reports (t repeated), for rows across the whole range
    assert all(j["want"]["report"][24:32] == j["memo_hex"][24:32] for j in jobs)
    assert len({j["memo_hex"][24:32] for j in jobs}) > 8
    # the re-signed configs' own eps1 would give other reports than the memo's eps1 does
    resigned = [j for j in jobs if j.get("memo_eps_milli")]
    differ = 0
    for j in resigned:
        own = ldpminer.phase2_mechanism(j["config"], j["phase2"]["candidates"])
        memo = bytes.fromhex(j["memo_hex"])
        value = {"t": int.from_bytes(memo[12:16], "little"), "y1": memo[16], "x": j["x"]}
        differ += own.reference_phase2(value, j["words"], j["nonce"]).hex() != j["want"]["report"]
    assert resigned and differ > 0


@pytest.mark.parametrize("client,sanitize", [("micropython", False), ("c", False), ("c", True)],
                         ids=["micropython", "c", "c-asan"])
def test_phase2_from_the_ledger_equals_the_aggregator_reference(client, sanitize, tmp_path):
    jobs = phase2_jobs()
    got = run_micropython(jobs, tmp_path) if client == "micropython" else run_c(jobs, sanitize)
    assert len(got) == len(jobs)
    for job, mine in zip(jobs, got):
        mine.pop("input", None)
        assert mine == job["want"], (client, job["memo_hex"], job["x"], job["words"], job["nonce"])


# --- live, against a private broker -------------------------------------------------------------

def publish_campaign(collector, cfg, cands=None):
    collector.publish("ldp/%s/config" % cfg["campaign"], campaign_config.sign(cfg, SIGNING_KEY))
    if cands is not None:
        collector.publish("ldp/%s/phase2" % cfg["campaign"],
                          campaign_config.sign(ldpminer.phase2_message(cfg, cands), SIGNING_KEY))


@pytest.mark.parametrize("client", CLIENTS)
def test_live_both_phases_then_memos(mosquitto, tmp_path, client):
    """Both phases go out with mechanism 12; phase 2 repeats phase 1's row; eps1 + eps2 spent;
    the ledger holds both memos and x; a second run re-sends both memos, spends nothing."""
    cfg = shc_config("shc-live", eps_milli=3000, l=2, m=256)
    cands = [17, 5, 20]
    cid = cfg["campaign_id"]
    eps1, eps2 = (ph["eps_milli"] for ph in cfg["phases"])
    state = make_state(tmp_path, "shc-live-dev")
    collector = ReportCollector(mosquitto.port)
    try:
        publish_campaign(collector, cfg, cands)
        code, out = run_live(client, state, mosquitto.port, cfg["campaign"], [5, 9, 17, 33])
        first = collector.barrier()
        ledger = read_ledger(state)
        again, out2 = run_live(client, state, mosquitto.port, cfg["campaign"], [5, 9, 17, 33])
        second = collector.barrier()[len(first):]
    finally:
        collector.close()
    assert code == 0 and again == 0, out + out2
    assert "phase2 campaign_id=%d candidates=3\n" % cid in out, out
    by_phase = {p[2]: p for _, p in first}
    assert sorted(by_phase) == [1, 2] and len(first) == 2
    assert {p[1] for p in by_phase.values()} == {protocol.MECHANISM_IDS["shc"]} == {12}
    ldpminer.phase1_mechanism(cfg).check(by_phase[1])
    ldpminer.phase2_mechanism(cfg, cands).check(by_phase[2])
    assert by_phase[1][12:16] == by_phase[2][12:16]  # the same row t
    assert ledger["spent_milli"] == eps1 + eps2 == 3000
    assert [ledger["reports"]["%d:%d" % (cid, p)] for p in (1, 2)] == [
        [int.from_bytes(by_phase[p][8:12], "little"), e, by_phase[p].hex()]
        for p, e in ((1, eps1), (2, eps2))]
    assert ledger["shc"] == {str(cid): ledger["shc"][str(cid)]} and ledger["shc"][str(cid)] in (0, 1)
    assert sorted(p for _, p in second) == sorted(p for _, p in first)
    assert "memo phase=1" in out2 and "memo phase=2" in out2 and "spent" not in out2
    assert read_ledger(state) == ledger


@pytest.mark.parametrize("client", CLIENTS)
def test_live_no_shc_entry_skips_phase_2(mosquitto, tmp_path, client):
    """A ledger with the campaign's phase-1 memo but no `shc` bit (e.g. written before the device
    knew shc): phase 1 is re-sent from the memo, phase 2 is skipped (logged, a function of the
    ledger), nothing spent, exit 0."""
    cfg = shc_config("shc-skip", eps_milli=2000, l=2, m=64)
    cid = cfg["campaign_id"]
    memo, _ = phase1_memos(cfg, 1, 5)[0]
    state = make_state(tmp_path, "shc-skip-dev")
    prior = {"spent_milli": 1000, "closed": [],
             "reports": {"%d:1" % cid: [int.from_bytes(memo[8:12], "little"), 1000, memo.hex()]}}
    device_runner.write_ledger(state, prior, 1)
    before = ledger_bytes(state)
    collector = ReportCollector(mosquitto.port)
    try:
        publish_campaign(collector, cfg, [1, 2, 3])
        code, out = run_live(client, state, mosquitto.port, cfg["campaign"], [1, 2])
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == 0, out
    assert "skip phase 2" in out and "memo phase=1" in out and "spent" not in out, out
    assert [p for _, p in reports] == [memo]
    assert ledger_bytes(state) == before
