"""Device-side phase 2 of the two-phase protocols, on the real `micropython` device and the
real C client (device/c_client), against the aggregator's own functions.

* LDPMiner (sh -> srappor, sh -> sh) and SVIM (psolh -> psgrr, psolh -> psolh): a device trims
  its set to the signed candidates (`ldpminer.trim_to_candidates`) and reports it with the
  phase-2 `l` (= min(l, k_max) from `ldpminer.campaign_phases` / `svim.campaign_phases`). Both
  clients' phase-2 reports, built by the devices' own phase-2 code (MicroPython
  `Device.phase2_input`, C `ldpc_phase2_input` through `ldp_client vector`) from injected words,
  equal the aggregator's phase-2 mechanism's `reference_report(trimmed, words, seq)` byte for
  byte, for every sampled slot of every set. SVIM's public split (`sample_rate_ppm`, spec §5)
  is LDPLCM's, unchanged: a device reports in phase 1 or in phase 2, never both.
* LDPLCM: the signed model decides high/low; both clients' reports equal the lcm reference with
  `ldplcm.is_high`, for items at, just above and just below the boundary, and the C evaluator
  gives the aggregator's `evaluate_int` for every item of trained models and refuses exactly the
  invalid models (field `model`).
* Live, against a private Mosquitto: a tampered (flipped byte, wrong key) or invalid candidate
  list or model is refused by both clients -- nothing published for phase 2, the ledger
  unchanged for phase 2; accepted phase-2 messages are ledgered with eps1 and eps2 (LDPMiner,
  every device in both phases) or with the one phase a device is sampled into (LDPLCM), and a
  campaign whose eps1 + eps2 exceeds the remaining budget is refused at config acceptance.
"""
import json
import shutil
import struct
import subprocess

import numpy as np
import pytest

from support.c_client import assert_no_sanitizer_report, build_client, client_env, run_client
from support.devices import (OTHER_KEY, SIGNING_KEY, ReportCollector, config_doc, hmac_envelope,
                             write_key_files)
from ldpfleet.core import config as campaign_config
from ldpfleet.eval import datasets
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core import protocol
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.olh import default_g
from ldpfleet.core.protocols import ldplcm, ldpminer, svim
from test_device_config import PRIOR_LEDGER
from support.ldplcm_docs import BAD_DOCS, small_doc

W = 1 << 32
CLIENTS = ["micropython", "c"]
STR_ITEMS = ["idle", "busy", "io", "net", "gpu", "swap", "irq", "dma", "tmr", "usb", "i2c", "spi"]

DRIVER = r'''
import json
import sys

from ldp import config as cfg
from ldp.device import Device
from ldp.errors import ConfigError
from word_source import WordSource




identity = {"device_id": "p2-driver", "eps_cap_milli": 1000000,
            "trusted_keys": [{"kid": "56475aa75463474c",  # support.devices.SIGNING_KEY
                              "pub": "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"}],
            "lifetime_budget_milli": 10000000}
with open(sys.argv[1]) as f:
    jobs = json.load(f)
out = []
for job in jobs:
    doc = cfg.check_config(job["config"])
    dev = Device(sys.argv[3], identity, doc["campaign"], job["value"],
                 high=job.get("high", False))
    try:
        p2 = cfg.check_phase2(job["phase2"], doc)
        mech, value = dev.phase2_input(doc, p2)
    except ConfigError as exc:
        out.append({"refused": exc.field})
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


# --- campaigns ------------------------------------------------------------------------------

def miner_config(protocol_name, domain, l, k_max, eps_milli=3000, m=1024):
    """An LDPMiner campaign config, phases exactly as the aggregator writes them."""
    tag = protocol_name.replace("lm-", "") + "-" + domain["type"]
    return config_doc("miner-" + tag, phases=ldpminer.campaign_phases(
        protocol_name, eps_milli, l, k_max, m), domain=domain)


def miner_campaigns():
    """(config, candidate keys, device values): int and str domains, l2 < l and l2 = l."""
    out = []
    for name in ("lm-rp", "lm-sh"):
        cfg = miner_config(name, {"type": "int", "size": 200}, l=4, k_max=3)
        values = [[5, 9, 17, 130, 120], [9, 11], [120], [17, 5, 17, 44], [3, 120, 5, 17], []]
        out.append((cfg, [17, 5, 120], values))
        cfg = miner_config(name, {"type": "str", "items": STR_ITEMS}, l=2, k_max=3)
        cands = [protocol.item_key(x) for x in ("io", "idle", "gpu")]
        values = [["idle", "busy", "io", "gpu"], ["busy"], ["gpu", "io"], ["idle", "io", "idle"]]
        out.append((cfg, cands, values))
    return out


def svim_config(domain, l, k_max, eps_milli):
    """An SVIM campaign config (protocols.svim.campaign_phases: the public device split, psgrr or
    psolh by domain size, phase-2 l = min(l, k_max)), psolh's g spelled out as the aggregator
    writes it."""
    size = domain["size"] if domain["type"] == "int" else len(domain["items"])
    phases = svim.campaign_phases(eps_milli, size, l, k_max)
    for ph in phases:
        if ph["mechanism"] == "psolh":
            ph["params"]["g"] = default_g(eps_milli)
    return config_doc("svim-%s-%d" % (domain["type"], eps_milli), phases=phases, domain=domain)


def svim_campaigns():
    """(config, candidate keys, device values): phase 2 psgrr (eps 3, k_max 3) and psolh
    (eps 0.5, k_max 6), int domains (a listless phase 1 refuses a string domain)."""
    cfg = svim_config({"type": "int", "size": 200}, l=2, k_max=3, eps_milli=3000)
    values = [[5, 9, 17, 130, 120], [9, 11], [120], [17, 5, 17, 44], [3, 120, 5, 17], []]
    out = [(cfg, [17, 5, 120], values)]
    cfg = svim_config({"type": "int", "size": 400}, l=3, k_max=6, eps_milli=500)
    cands = [250, 1, 3, 99, 12, 33]  # psgrr/psolh without a list need an int domain (spec §3)
    values = [[1, 7, 3, 300, 250], [7], [3, 250], [1, 250, 1], [33, 12, 99, 250, 301]]
    out.append((cfg, cands, values))
    assert [c["phases"][1]["mechanism"] for c, _, _ in out] == ["psgrr", "psolh"]
    return out


def phase2_mechanism(cfg, cands):
    """The aggregator's phase-2 mechanism of an LDPMiner or SVIM campaign."""
    if cfg["phases"][1]["mechanism"] in ("psgrr", "psolh"):
        return campaign_config.mechanism_for_phase(cfg, 2, candidates=[int(c) for c in cands])
    return ldpminer.phase2_mechanism(cfg, cands)


def distinct(keys):
    out = []
    for k in keys:
        if k not in out:
            out.append(k)
    return out


def slot_words(count, slot, size, rng):
    """`count` random words whose first one samples slot `slot` of `size` (bucket's first
    word for even slots, last for odd ones)."""
    words = [int(w) for w in rng.integers(0, W, size=count, dtype=np.uint64)]
    first, after = -(-slot * W // size), -(-(slot + 1) * W // size)
    words[0] = first if slot % 2 == 0 else after - 1
    assert protocol.bucket(words[0], size) == slot
    return words


def miner_jobs():
    """Phase-2 jobs with the aggregator's expected report bytes and the untrimmed control."""
    rng = np.random.default_rng(20240607)
    jobs, seq = [], 0
    for cfg, cands, values in miner_campaigns() + svim_campaigns():
        p2 = ldpminer.phase2_message(cfg, cands)
        mech = phase2_mechanism(cfg, cands)
        if mech.name in ("srappor", "sh"):
            assert mech.l == min(cfg["phases"][0]["params"]["l"], len(cands))
        for value in values:
            keys = distinct([protocol.item_key(v) for v in value])
            trimmed = ldpminer.trim_to_candidates(keys, cands)
            size = max(mech.l, len(trimmed))
            for slot in range(size):
                words = slot_words(mech.random_words, slot, size, rng)
                seq += 1
                jobs.append({"config": cfg, "phase2": p2, "value": value, "nonce": seq,
                             "words": words, "mechanism": mech.name, "trimmed": trimmed,
                             "want": mech.reference_report(trimmed, words, seq).hex(),
                             "untrimmed": mech.reference_report(keys, words, seq).hex()})
    return jobs


def fallback_jobs():
    """svim's flat branch (spec §5.4 `fallback`): the phase-2 message says `"fallback": true`;
    a device reports its whole (untrimmed) set with the config's fallback over the integer
    domain at the full l, phase byte 2, the fallback's mechanism id."""
    rng = np.random.default_rng(20261125)
    jobs, seq = [], 500
    grr = svim_config({"type": "int", "size": 100}, l=5, k_max=4, eps_milli=4000)  # psgrr fallback
    values = [[3, 50, 7, 99, 1, 2, 60], [50], [], [99, 98, 3], [0, 1, 2, 3, 4]]
    for cfg, cands, values in svim_campaigns() + [(grr, [3, 50, 7, 99], values)]:
        p2 = campaign_config.make_phase2(cfg, fallback=True)
        mech = campaign_config.mechanism_for_phase(cfg, 2, fallback=True)
        assert mech.name == cfg["phases"][1]["fallback"]["mechanism"] and mech.phase == 2
        assert mech.l == cfg["phases"][1]["fallback"]["params"]["l"]
        for value in values:
            keys = distinct([protocol.item_key(v) for v in value])
            size = max(mech.l, len(keys))
            for slot in range(size):
                words = slot_words(mech.random_words, slot, size, rng)
                seq += 1
                want = mech.reference_report(keys, words, seq)
                assert want[1] == protocol.MECHANISM_IDS[mech.name] and want[2] == 2
                trimmed = ldpminer.trim_to_candidates(keys, cands)
                jobs.append({"config": cfg, "phase2": p2, "value": value, "nonce": seq,
                             "words": words, "mechanism": mech.name, "keys": keys,
                             "want": want.hex(),
                             "trimmed_fallback": mech.reference_report(trimmed, words, seq).hex()})
    return jobs


def lcm_config(domain, eps_milli=2000, k=4, m=32):
    tag = domain["type"]
    return config_doc("learned-" + tag, phases=ldplcm.campaign_phases(eps_milli, k, m, 300000),
                      domain=domain)


def hand_model():
    """g(0..2) = 2, g(3..7) = 5 = P (high at equality), g(8..) = 4 = P - 1."""
    return ldplcm.check_model({"format": "ldplcm-gbr", "version": 1, "scale_bits": 0, "init": 0,
                               "boundary": 5, "roots": [0, 3], "split": [7, 5, 4, 2, -3, 0],
                               "right": [2, -1, -1, 5, -1, -1]})


@pytest.fixture(scope="module")
def trained():
    """A GBR model trained on a CMS phase-1 sketch (ldplcm.train_model), D = 600 items."""
    d = 600
    rng = np.random.default_rng(5)
    values = datasets.draw_values(30000, d, "zipf:1.1", rng)
    mech = make_mechanism("cms", 3000, d, salt=5, campaign_id=1, k=16, m=256)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(values, rng))
    model = ldplcm.train_model(sketch, np.arange(d), theta=0.4, seed=5,
                               gbr_params={"n_estimators": 40, "max_depth": 3}).model
    high = ldplcm.high_mask(model, np.arange(d))
    assert 0 < high.sum() < d
    return model, d


def boundary_items(model, d):
    """Indices on both sides of P: the lowest-g high ones, the highest-g low ones, the ends."""
    g = ldplcm.evaluate_int_array(model, np.arange(d))
    high = np.flatnonzero(g >= model.boundary)
    low = np.flatnonzero(g < model.boundary)
    picks = list(high[np.argsort(g[high], kind="stable")[:3]])
    picks += list(low[np.argsort(-g[low], kind="stable")[:3]])
    return sorted({int(x) for x in picks} | {0, d - 1})


def lcm_jobs(trained):
    """LDPLCM phase-2 jobs: the caller's --high always says the opposite of the model (the model
    must win); a phase-2 body without a model falls back to the caller."""
    rng = np.random.default_rng(77)
    model, d = trained
    cases = [(lcm_config({"type": "int", "size": d}), model, boundary_items(model, d), None),
             (lcm_config({"type": "str", "items": STR_ITEMS}), hand_model(), [0, 2, 3, 7, 8, 11],
              STR_ITEMS)]
    jobs, seq = [], 100
    for cfg, mdl, indices, items in cases:
        mech = ldplcm.phase2_mechanism(cfg)
        for with_model in (True, False):
            p2 = ldplcm.phase2_message(cfg, mdl) if with_model else campaign_config.make_phase2(cfg)
            for x in indices:
                value = items[x] if items else x
                key = protocol.item_key(value)
                high = ldplcm.is_high(mdl, x)
                caller = (not high) if with_model else bool(x % 2)
                expect = high if with_model else caller
                words = [int(w) for w in rng.integers(0, W, size=mech.random_words, dtype=np.uint64)]
                seq += 1
                jobs.append({"config": cfg, "phase2": p2, "value": value, "high": caller, "nonce": seq,
                             "words": words, "expect_high": expect, "model": with_model,
                             "want": mech.reference_report({"key": key, "high": expect}, words, seq).hex(),
                             "other": mech.reference_report({"key": key, "high": not expect}, words,
                                                            seq).hex()})
    return jobs


def refusal_jobs():
    """Signed but unusable phase-2 bodies: (job, field) -- candidates and models."""
    jobs = []
    for cfg, cands, values in miner_campaigns()[::2] + svim_campaigns():  # int domain, srappor,
        # sh; psgrr and psolh
        for bad in ("missing", None, [], [5, 5], ["5"], [W], [True], [1.5], 17):
            p2 = campaign_config.make_phase2(cfg)
            if bad != "missing":
                p2["candidates"] = bad
            jobs.append(({"config": cfg, "phase2": p2, "value": values[0], "nonce": 1, "words": []},
                         "candidates"))
    # svim's flat branch (spec §5.4): exactly one of candidates and "fallback": true
    for cfg, cands, values in svim_campaigns():
        for extra in ({"fallback": True, "candidates": cands}, {"fallback": False},
                      {"fallback": 1}, {"fallback": "true"}, {"fallback": None},
                      {"fallback": False, "candidates": cands}):
            p2 = dict(campaign_config.make_phase2(cfg), **extra)
            jobs.append(({"config": cfg, "phase2": p2, "value": values[0], "nonce": 1,
                          "words": []}, "candidates"))
    cfg, cands, values = miner_campaigns()[0]  # no fallback in an LDPMiner config
    jobs.append(({"config": cfg, "phase2": campaign_config.make_phase2(cfg, fallback=True),
                  "value": values[0], "nonce": 1, "words": []}, "candidates"))
    cfg = lcm_config({"type": "int", "size": 64})
    for _, doc in BAD_DOCS + [("null", None)]:
        p2 = campaign_config.make_phase2(cfg)
        p2["model"] = doc
        jobs.append(({"config": cfg, "phase2": p2, "value": 3, "nonce": 1, "words": []}, "model"))
    return jobs


# --- running the clients ------------------------------------------------------------------------

def run_micropython(jobs, work):
    job_file, out_file, state = work / "jobs.json", work / "out.json", work / "state"
    state.mkdir(exist_ok=True)
    device_runner.provision_ledger(state)
    provisioned = {n: (state / n).read_bytes() for n in device_runner.LEDGER_FILES if (state / n).exists()}
    (work / "driver.py").write_text(DRIVER)
    shutil.copy(device_runner.DEVICE_DIR / "tests" / "word_source.py", work / "word_source.py")
    job_file.write_text(json.dumps([{k: j[k] for k in ("config", "phase2", "value", "high", "nonce", "words")
                                     if k in j} for j in jobs]))
    proc = subprocess.run([device_runner.micropython_binary(), str(work / "driver.py"), str(job_file),
                           str(out_file), str(state)], env=device_runner.micropython_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # building a report never touches the ledger
    assert {n: (state / n).read_bytes() for n in device_runner.LEDGER_FILES
            if (state / n).exists()} == provisioned
    return json.loads(out_file.read_text())


def run_c(jobs, sanitize=False):
    """The C client's device path (`ldp_client vector` with config + phase2) per job."""
    binary = build_client(sanitize=sanitize)
    out = []
    for job in jobs:
        case = {k: job[k] for k in ("config", "phase2", "value", "high", "nonce") if k in job}
        words = job["words"]
        proc = subprocess.run([str(binary), "vector", "--case", json.dumps(case), "--words-hex",
                               struct.pack("<%dI" % len(words), *words).hex()],
                              capture_output=True, text=True, env=client_env(), timeout=60)
        assert_no_sanitizer_report(proc.stderr)
        text = proc.stdout.strip()
        if proc.returncode == device_runner.EXIT_REFUSED and text.startswith("refused "):
            out.append({"refused": text[len("refused "):].split(":", 1)[0]})
        else:
            assert proc.returncode == 0, (case, proc.stdout, proc.stderr)
            out.append({"report": text})
    return out


@pytest.fixture(scope="module")
def phase2_jobs(trained):
    return {"miner": miner_jobs(), "lcm": lcm_jobs(trained), "fallback": fallback_jobs()}


@pytest.fixture(scope="module", params=CLIENTS)
def client_results(request, phase2_jobs, tmp_path_factory):
    jobs = (phase2_jobs["miner"] + phase2_jobs["lcm"] + phase2_jobs["fallback"]
            + [j for j, _ in refusal_jobs()])
    if request.param == "micropython":
        out = run_micropython(jobs, tmp_path_factory.mktemp("mp"))
    else:
        out = run_c(jobs)
    n_miner, n_lcm = len(phase2_jobs["miner"]), len(phase2_jobs["lcm"])
    n_fb = len(phase2_jobs["fallback"])
    return {"client": request.param, "miner": out[:n_miner], "lcm": out[n_miner:n_miner + n_lcm],
            "fallback": out[n_miner + n_lcm:n_miner + n_lcm + n_fb],
            "refused": out[n_miner + n_lcm + n_fb:]}


# --- (b) LDPMiner phase-2 reports --------------------------------------------------------------

def test_jobs_cover_both_phase2_mechanisms_and_trimming_matters(phase2_jobs):
    jobs = phase2_jobs["miner"]
    assert {j["mechanism"] for j in jobs} == {"srappor", "sh", "psgrr", "psolh"}
    for name in ("srappor", "sh", "psgrr", "psolh"):
        mine = [j for j in jobs if j["mechanism"] == name]
        # a device that skipped trimming would send other bytes: the comparison has teeth
        assert any(j["want"] != j["untrimmed"] for j in mine)
        assert any(j["trimmed"] == [] for j in mine)  # a device with no candidate: the dummy
        assert any(len(j["trimmed"]) > j["config"]["phases"][1]["params"]["l"] for j in mine)


def test_ldpminer_phase2_reports_equal_the_aggregator_reference(client_results, phase2_jobs):
    for job, got in zip(phase2_jobs["miner"], client_results["miner"]):
        assert got.get("report") == job["want"], (client_results["client"], job["value"], job["nonce"], got)
        if "input" in got:  # MicroPython shows the set it reported: the trimmed one
            assert got["input"] == job["trimmed"]


def test_fallback_jobs_cover_both_oracles_and_the_set_is_not_trimmed(phase2_jobs):
    jobs = phase2_jobs["fallback"]
    assert {j["mechanism"] for j in jobs} == {"psgrr", "psolh"}
    # a device that trimmed to candidates it never got, or used the listed mechanism, would differ
    assert any(j["want"] != j["trimmed_fallback"] for j in jobs)
    assert any(len(j["keys"]) > j["config"]["phases"][1]["params"]["l"] for j in jobs)


def test_fallback_phase2_reports_equal_the_aggregator_reference(client_results, phase2_jobs):
    """svim's flat branch on both clients: the fallback over the whole integer domain, untrimmed,
    byte for byte the aggregator's fallback mechanism (header: the fallback's id, phase 2)."""
    for job, got in zip(phase2_jobs["fallback"], client_results["fallback"]):
        assert got.get("report") == job["want"], (client_results["client"], job["value"], job["nonce"], got)
        if "input" in got:
            assert got["input"] == job["keys"]


def test_phase2_device_path_under_asan_and_ubsan(phase2_jobs):
    jobs = phase2_jobs["miner"][::3] + phase2_jobs["lcm"][::3] + phase2_jobs["fallback"][::3]
    for job, got in zip(jobs, run_c(jobs, sanitize=True)):
        assert got.get("report") == job["want"], (job["value"], got)
    refused = run_c([j for j, _ in refusal_jobs()], sanitize=True)
    assert [r.get("refused") for r in refused] == [f for _, f in refusal_jobs()]


# --- (c) LDPLCM high/low -------------------------------------------------------------------------

def test_lcm_jobs_straddle_the_boundary(phase2_jobs):
    jobs = [j for j in phase2_jobs["lcm"] if j["model"]]
    assert {j["expect_high"] for j in jobs} == {True, False}
    model = hand_model()
    assert [ldplcm.evaluate_int(model, x) for x in (2, 3, 7, 8)] == [2, 5, 5, 4]
    assert all(j["want"] != j["other"] for j in phase2_jobs["lcm"])  # the decision shows


def test_ldplcm_decision_equals_is_high(client_results, phase2_jobs):
    for job, got in zip(phase2_jobs["lcm"], client_results["lcm"]):
        assert got.get("report") == job["want"], (client_results["client"], job["value"], job["model"], got)
        if "input" in got:
            assert got["input"]["high"] == job["expect_high"]


def test_unusable_phase2_bodies_are_refused_with_the_field(client_results):
    want = [field for _, field in refusal_jobs()]
    assert [r.get("refused") for r in client_results["refused"]] == want


def test_aggregator_refuses_the_same_models():
    for _, doc in BAD_DOCS + [("null", None)]:
        with pytest.raises(ConfigError) as err:
            ldplcm.check_model(doc)
        assert err.value.field == "model"


def check_model_c(model_doc, d, sanitize=False):
    proc = subprocess.run([str(build_client(sanitize=sanitize)), "check-model", "--d", str(d)],
                          input=json.dumps(model_doc), capture_output=True, text=True,
                          env=client_env(), timeout=60)
    assert_no_sanitizer_report(proc.stderr)
    return proc


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_c_model_evaluator_is_bit_identical(trained, sanitize):
    model, d = trained
    for mdl, size in ((model, d), (hand_model(), 12), (ldplcm.check_model(small_doc()), 10),
                      (ldplcm.check_model(small_doc(boundary=-(1 << 30), init=-(1 << 29))), 10)):
        proc = check_model_c(ldplcm.model_to_doc(mdl), size, sanitize)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = json.loads(proc.stdout)
        assert got["values"] == [ldplcm.evaluate_int(mdl, x) for x in range(size)]
        assert got["high"] == [int(ldplcm.is_high(mdl, x)) for x in range(size)]


def test_c_model_checks_equal_the_aggregator():
    for why, doc in BAD_DOCS + [("null", None)]:
        proc = check_model_c(doc, 4)
        assert proc.returncode == device_runner.EXIT_REFUSED and proc.stdout.startswith("refused model:"), why
    edge = (1 << 30) - 2 - 100 - 2  # |init| + the largest leaves, exactly at the bound
    assert check_model_c(small_doc(split=[5, 10, -edge, 7, 1, 2]), 4).returncode == 0
    assert check_model_c(small_doc(split=[5, 10, -edge - 1, 7, 1, 2]), 4).returncode == 2


# --- phase membership: the sampling-rate rules of spec §5 -----------------------------------------

def rate_configs():
    """LDPLCM configs with `sample_rate_ppm` variants, and the time to check them at."""
    import copy
    base = lcm_live_config()
    now = base["not_before"] + 60
    out = []
    for first, second in [(0, 0), (10 ** 6, 10 ** 6), (-5, -5), (True, True), (1.5, 1.5),
                          ("300000", "300000"), (None, None), (300000, 200000), (1, 1),
                          (999999, 999999), (300000, "absent"), ("absent", 250000)]:
        doc = copy.deepcopy(base)
        for ph, rate in zip(doc["phases"], (first, second)):
            ph.pop("sample_rate_ppm")
            if rate != "absent":
                ph["sample_rate_ppm"] = rate
        out.append((doc, now))
    single = copy.deepcopy(base)
    single["phases"] = single["phases"][:1]
    out.append((single, now))
    return out


def aggregator_check_field(doc, now):
    try:
        campaign_config.check_config(doc, now)
    except ConfigError as exc:
        return exc.field
    return None


@pytest.mark.parametrize("client", CLIENTS)
def test_sampling_rate_rules_match_the_aggregator(client, tmp_path):
    """`sample_rate_ppm`: an integer in (0, 10^6), the same on every phase carrying it; both
    clients refuse exactly the configs the aggregator refuses, with its field."""
    cases = rate_configs()
    want = [aggregator_check_field(doc, now) for doc, now in cases]
    assert None in want and set(want) == {None, "phases.sample_rate_ppm"}
    if client == "micropython":
        rules = device_runner.DEVICE_DIR / "tests" / "config_rules.py"
        (tmp_path / "in.json").write_text(json.dumps({"verify": [], "check": cases}))
        proc = subprocess.run([device_runner.micropython_binary(), str(rules), str(tmp_path / "in.json"),
                               str(tmp_path / "out.json")], env=device_runner.micropython_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = json.loads((tmp_path / "out.json").read_text())["check"]
    else:
        got = []
        write_key_files(tmp_path / "signing.key")
        for doc, now in cases:
            proc = subprocess.run([str(build_client()), "verify-config", "--trusted-keys",
                                   str(tmp_path / "signing.key.pub"), "--now",
                                   str(now)], input=campaign_config.sign(doc, SIGNING_KEY), capture_output=True,
                                  timeout=30)
            out = proc.stdout.decode().strip()
            got.append(None if out == "accepted" else out[len("refused "):].split(":", 1)[0])
    assert got == want


# --- live runs against a private broker ------------------------------------------------------------

def make_state(tmp_path, device_id, budget=100000, cap=8000, ledger=None):
    state = device_runner.prepare_device(tmp_path / device_id, device_id, SIGNING_KEY,
                                         eps_cap_milli=cap, lifetime_budget_milli=budget)
    if ledger is not None:
        device_runner.write_ledger(state, ledger, 1)
    return state


def run_live(client, state, port, campaign, value, high=False):
    """One --once run of either client; (exit code, output)."""
    if client == "c":
        proc = run_client(build_client(), state, port, campaign, value, high=high)
        return proc.returncode, proc.stdout + proc.stderr
    proc = run_device(state, "127.0.0.1", port, campaign, value=value, high=high, wait=40)
    return proc.returncode, proc.stdout


def ledger_bytes(state):
    """Both generation files (spec §7.4), as bytes."""
    return {n: (state / n).read_bytes() for n in device_runner.LEDGER_FILES if (state / n).exists()}


def tampered(p2, old: str, new: str):
    """(name, payload, field) of phase-2 messages no device may use: one byte of the signed
    body changed under its original signature (still valid JSON, so only the signature can
    tell), the body signed with a key the device does not trust, and a v1 HMAC envelope."""
    body = campaign_config.canonical(p2)
    assert body.count(old) == 1 and len(old) == len(new)
    env = json.loads(campaign_config.sign(p2, SIGNING_KEY))
    flipped = json.dumps(dict(env, body=body.replace(old, new)), separators=(",", ":")).encode()
    return [("flipped-byte", flipped, "sig"),
            ("unknown-key", campaign_config.sign(p2, OTHER_KEY), "kid"),
            ("hmac-v1", hmac_envelope(body), "envelope")]


def sampled_ids(doc, in_phase1, count):
    found, i = [], 0
    while len(found) < count:
        dev = "d2-%d" % i
        if bool(ldplcm.reports_in_phase([dev], doc, 1)[0]) == in_phase1:
            found.append(dev)
        i += 1
    return found


MINER_CFG = miner_config("lm-rp", {"type": "int", "size": 200}, l=4, k_max=3, eps_milli=3000)
MINER_CANDS = [17, 5, 120]


def miner_bad_messages():
    p2 = ldpminer.phase2_message(MINER_CFG, MINER_CANDS)
    out = tampered(p2, "[17,", "[18,")
    dup = campaign_config.make_phase2(MINER_CFG, candidates=[17, 17])
    out.append(("duplicate", campaign_config.sign(dup, SIGNING_KEY), "candidates"))
    out.append(("missing", campaign_config.sign(campaign_config.make_phase2(MINER_CFG), SIGNING_KEY),
                "candidates"))
    return out


@pytest.mark.parametrize("case", [c[0] for c in miner_bad_messages()])
@pytest.mark.parametrize("client", CLIENTS)
def test_bad_candidates_refused_live(mosquitto, tmp_path, client, case):
    """Phase 1 goes out (every LDPMiner device is in both phases); the bad phase-2 message is
    refused: nothing published for phase 2 and no phase-2 entry or spend in the ledger."""
    _, payload, field = next(c for c in miner_bad_messages() if c[0] == case)
    campaign, cid = MINER_CFG["campaign"], MINER_CFG["campaign_id"]
    eps1 = MINER_CFG["phases"][0]["eps_milli"]
    state = make_state(tmp_path, "m-bad")
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % campaign, campaign_config.sign(MINER_CFG, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % campaign, payload)
        code, out = run_live(client, state, mosquitto.port, campaign, [5, 9, 17])
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == device_runner.EXIT_REFUSED, out
    assert "ldp m-bad refused phase2 %s:" % field in out, out
    assert [p[2] for _, p in reports] == [1]
    ledger = read_ledger(state)
    assert set(ledger["reports"]) == {"%d:1" % cid}
    assert ledger["spent_milli"] == eps1


def lcm_live_config():
    return lcm_config({"type": "int", "size": 12}, eps_milli=1500)


def lcm_bad_messages():
    cfg = lcm_live_config()
    p2 = ldplcm.phase2_message(cfg, hand_model())
    out = tampered(p2, '"boundary":5', '"boundary":4')
    broken = campaign_config.make_phase2(cfg, model=dict(ldplcm.model_to_doc(hand_model()),
                                                         right=[5, -1, -1, 5, -1, -1]))
    out.append(("invalid-model", campaign_config.sign(broken, SIGNING_KEY), "model"))
    return out


@pytest.mark.parametrize("case", [c[0] for c in lcm_bad_messages()])
@pytest.mark.parametrize("client", CLIENTS)
def test_bad_model_refused_live(mosquitto, tmp_path, client, case):
    """A phase-2-only LDPLCM device refuses the message: nothing published, ledger bytes kept."""
    _, payload, field = next(c for c in lcm_bad_messages() if c[0] == case)
    cfg = lcm_live_config()
    dev, = sampled_ids(cfg, False, 1)
    state = make_state(tmp_path, dev, ledger=PRIOR_LEDGER)
    before = ledger_bytes(state)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % cfg["campaign"], campaign_config.sign(cfg, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % cfg["campaign"], payload)
        code, out = run_live(client, state, mosquitto.port, cfg["campaign"], 7)
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == device_runner.EXIT_REFUSED, out
    assert "ldp %s refused phase2 %s:" % (dev, field) in out, out
    assert "spent" not in out and reports == []
    assert ledger_bytes(state) == before


@pytest.mark.parametrize("protocol_name", ["lm-rp", "lm-sh"])
@pytest.mark.parametrize("client", CLIENTS)
def test_ldpminer_live_both_phases_ledgered(mosquitto, tmp_path, client, protocol_name):
    """Every device reports in both phases; the ledger records eps1 and eps2; the phase-2
    report is the trimmed set's (logged count), a valid report of `phase2_mechanism`, and
    its memo; a re-run re-sends both memos and spends nothing."""
    cfg = miner_config(protocol_name, {"type": "str", "items": STR_ITEMS}, l=3, k_max=2,
                       eps_milli=2500)
    cands = [protocol.item_key(x) for x in ("gpu", "io")]
    campaign, cid = cfg["campaign"], cfg["campaign_id"]
    eps1, eps2 = cfg["phases"][0]["eps_milli"], cfg["phases"][1]["eps_milli"]
    value = ["io", "busy", "gpu", "idle"]
    trimmed = ldpminer.trim_to_candidates([protocol.item_key(v) for v in value], cands)
    state = make_state(tmp_path, "m-live")
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % campaign, campaign_config.sign(cfg, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % campaign,
                          campaign_config.sign(ldpminer.phase2_message(cfg, cands), SIGNING_KEY))
        code, out = run_live(client, state, mosquitto.port, campaign, value)
        first = collector.barrier()
        again, out2 = run_live(client, state, mosquitto.port, campaign, value)
        second = collector.barrier()[len(first):]
    finally:
        collector.close()
    assert code == 0 and again == 0, out + out2
    assert "phase2 campaign_id=%d candidates=2\n" % cid in out, out
    assert "kept=" not in out  # how many of its items are candidates is value-derived (spec §7.1)
    ledger = read_ledger(state)
    assert ledger["spent_milli"] == eps1 + eps2 == 2500
    assert sorted(ledger["reports"]) == ["%d:1" % cid, "%d:2" % cid]
    assert [ledger["reports"]["%d:%d" % (cid, p)][1] for p in (1, 2)] == [eps1, eps2]
    by_phase = {p[2]: p for _, p in first}
    assert sorted(by_phase) == [1, 2] and len(first) == 2
    ldpminer.phase1_mechanism(cfg).check(by_phase[1])
    ldpminer.phase2_mechanism(cfg, cands).check(by_phase[2])
    assert by_phase[2].hex() == ledger["reports"]["%d:2" % cid][2]
    assert sorted(p for _, p in second) == sorted(p for _, p in first)
    assert "memo phase=2" in out2 and "spent" not in out2
    assert read_ledger(state) == ledger


@pytest.mark.parametrize("client", CLIENTS)
def test_ldplcm_live_model_decides_and_phase_membership(mosquitto, tmp_path, client):
    """Phase-2 devices follow the signed model whatever --high says (logged decision equals
    `is_high`) and spend eps for phase 2 only; a sampled device reports phase 1 only and
    skips the phase-2 message."""
    cfg = lcm_live_config()
    campaign, cid, eps = cfg["campaign"], cfg["campaign_id"], cfg["phases"][0]["eps_milli"]
    model = hand_model()
    outside = sampled_ids(cfg, False, 2)
    inside, = sampled_ids(cfg, True, 1)
    items = {outside[0]: 7, outside[1]: 8, inside: 3}  # g = P (high), g = P - 1 (low)
    collector = ReportCollector(mosquitto.port)
    runs = {}
    try:
        collector.publish("ldp/%s/config" % campaign, campaign_config.sign(cfg, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % campaign,
                          campaign_config.sign(ldplcm.phase2_message(cfg, model), SIGNING_KEY))
        for dev, x in items.items():
            state = make_state(tmp_path, dev)
            runs[dev] = (state,) + run_live(client, state, mosquitto.port, campaign, x,
                                            high=not ldplcm.is_high(model, x))
        got = dict(collector.barrier())
    finally:
        collector.close()
    for dev, (state, code, out) in runs.items():
        assert code == 0, out
        ledger = read_ledger(state)
        phase = 1 if dev == inside else 2
        assert list(ledger["reports"]) == ["%d:%d" % (cid, phase)] and ledger["spent_milli"] == eps
        report = got["ldp/%s/r/%s" % (campaign, dev)]
        assert report[2] == phase and report.hex() == ledger["reports"]["%d:%d" % (cid, phase)][2]
        if dev == inside:
            ldplcm.phase1_mechanism(cfg).check(report)
            assert "skip phase 2" in out
        else:
            ldplcm.phase2_mechanism(cfg).check(report)
            # the decision is not logged (value-derived, spec §7.1); that the signed model and
            # not the caller's flag decides is checked bit-exactly by
            # test_ldplcm_decision_equals_is_high through the same phase-2 input path
            assert "high=" not in out, out
    assert [ldplcm.is_high(model, items[d]) for d in outside] == [True, False]


@pytest.mark.parametrize("which", [0, 1], ids=["psolh-psgrr", "psolh-psolh"])
@pytest.mark.parametrize("client", CLIENTS)
def test_svim_live_public_split_between_phases(mosquitto, tmp_path, client, which):
    """SVIM (spec §3, §5): the same `sample_rate_ppm` split as LDPLCM, unchanged. A device below
    the split reports phase 1 only (PSFO over the int domain, no list) and skips the phase-2
    message; the others report phase 2 only (the set trimmed to the signed candidates); each
    spends eps once, and every report is valid for the aggregator's mechanism of its phase."""
    cfg, cands, values = svim_campaigns()[which]
    campaign, cid, eps = cfg["campaign"], cfg["campaign_id"], cfg["phases"][0]["eps_milli"]
    assert cfg["phases"][0]["sample_rate_ppm"] == cfg["phases"][1]["sample_rate_ppm"]
    outside = sampled_ids(cfg, False, 2)
    inside = sampled_ids(cfg, True, 2)
    value = {dev: values[i % len(values)] for i, dev in enumerate(outside + inside)}
    collector = ReportCollector(mosquitto.port)
    runs = {}
    try:
        collector.publish("ldp/%s/config" % campaign, campaign_config.sign(cfg, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % campaign,
                          campaign_config.sign(ldpminer.phase2_message(cfg, cands), SIGNING_KEY))
        for dev in outside + inside:
            state = make_state(tmp_path, dev)
            runs[dev] = (state,) + run_live(client, state, mosquitto.port, campaign, value[dev])
        got = dict(collector.barrier())
    finally:
        collector.close()
    assert len(got) == len(runs)
    for dev, (state, code, out) in runs.items():
        assert code == 0, out
        ledger = read_ledger(state)
        phase = 1 if dev in inside else 2
        assert list(ledger["reports"]) == ["%d:%d" % (cid, phase)] and ledger["spent_milli"] == eps
        report = got["ldp/%s/r/%s" % (campaign, dev)]
        assert report[1] == protocol.MECHANISM_IDS[cfg["phases"][phase - 1]["mechanism"]]
        assert report[2] == phase and report.hex() == ledger["reports"]["%d:%d" % (cid, phase)][2]
        if phase == 1:
            campaign_config.mechanism_for_phase(cfg, 1).check(report)
            assert "skip phase 2" in out
        else:
            phase2_mechanism(cfg, cands).check(report)
            assert "phase2 campaign_id=%d candidates=%d\n" % (cid, len(cands)) in out, out


@pytest.mark.parametrize("client", CLIENTS)
def test_budget_counts_only_the_phases_a_device_is_in(mosquitto, tmp_path, client):
    """Budget 2000 milli: an LDPMiner campaign of eps1 + eps2 = 2500 (each below the cap) is
    refused at config acceptance; an LDPLCM campaign of 1500 per phase is accepted by a
    phase-2-only device (it spends 1500 once)."""
    miner = miner_config("lm-sh", {"type": "int", "size": 200}, l=4, k_max=3, eps_milli=2500)
    lcm = lcm_live_config()
    dev, = sampled_ids(lcm, False, 1)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % miner["campaign"], campaign_config.sign(miner, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % miner["campaign"],
                          campaign_config.sign(ldpminer.phase2_message(miner, MINER_CANDS), SIGNING_KEY))
        refused_state = make_state(tmp_path, "m-poor", budget=2000)
        code, out = run_live(client, refused_state, mosquitto.port, miner["campaign"], [5, 17])
        assert code == device_runner.EXIT_REFUSED and "refused config lifetime_budget:" in out, out
        assert collector.barrier() == [] and read_ledger(refused_state) is None

        collector.publish("ldp/%s/config" % lcm["campaign"], campaign_config.sign(lcm, SIGNING_KEY))
        collector.publish("ldp/%s/phase2" % lcm["campaign"],
                          campaign_config.sign(ldplcm.phase2_message(lcm, hand_model()), SIGNING_KEY))
        state = make_state(tmp_path, dev, budget=2000)
        code, out = run_live(client, state, mosquitto.port, lcm["campaign"], 4)
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == 0, out
    assert [(t, p[2]) for t, p in reports] == [("ldp/%s/r/%s" % (lcm["campaign"], dev), 2)]
    assert read_ledger(state)["spent_milli"] == 1500
