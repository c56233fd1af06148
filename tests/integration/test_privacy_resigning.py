"""Exact privacy across config re-signing (spec §7.2-§7.3): whatever sequence of signed messages
a device receives -- ids re-signed with other ε, parameters or sample rates, replays, phase-2
messages, closes of its own and of other ids -- what it publishes for one campaign id is
bounded by e^(what its ledger charged for that id).

Both clients' real device code is driven through the same sequences: the MicroPython `Device`
(its message handlers, ledger and mechanisms; no broker) and the C client's `ldp_client replay`
(device.c fed the same [topic, payload] list). Both draw their "OS randomness" from the same
xorshift32 stream (a test-only seam), so every fresh report is predictable. For every sequence
and campaign id the test checks that:

1. the ledger binds the id to one config body B (one of the configs of the sequence);
2. every report published for the id is byte for byte B's channel on the stream's words (the
   aggregator's reference mechanisms of B's phases: ε, thresholds -- shc phase 2 at B's eps1 and
   eps2, with phase 1's bit x --, parameters, the candidates of the phase-2 message): no other
   config of the id was ever used;
3. only phases B assigns this device were published (one phase of a sampled campaign), and the
   ledger charged exactly their ε (spent_milli = the sum over memos);
4. both clients published the same bytes and wrote the same ledger;

and B's channel for those phases is exactly enumerated (the helpers of tests/unit/test_privacy_shc.py,
test_privacy_sketches.py, test_privacy_psfo.py, at B's ε and parameters): its worst ratio over
all inputs is <= e^(the charge). Together: the published reports of an id are bounded by
e^(its charge). On the code before bindings existed, sequences that re-sign an id between its
phases publish under two configs and fail check 2 or 3.
"""
import hashlib
import json
import subprocess
from functools import lru_cache

import numpy as np
import pytest

from support.c_client import assert_no_sanitizer_report, build_client, client_env
from support.devices import SIGNING_KEY, config_doc
from support.mp_stream import STREAM_SOURCE
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger
from ldpfleet.core import protocol
from ldpfleet.core.protocols import ldplcm

CAMPAIGN = "rs"
SEQUENCES_PER_FAMILY = 28
DRIVER = r'''
import json
import sys

import ldp.device as D


''' + STREAM_SOURCE + r'''

class Sink:
    """Where the device's publishes go (no broker: the test reads the outbox itself)."""
    def publish(self, topic, msg, qos=0, retain=False):
        pass


results = []
for job in json.load(open(sys.argv[1])):
    lines = []
    dev = D.Device(job["state"], job["identity"], job["campaign"], job["value"],
                   log=lambda event, detail="": lines.append("%s %s" % (event, detail)))
    dev.rand = Stream(job["seed"])
    sink = Sink()
    reports = []
    for topic, payload in job["messages"]:
        dev.on_message(topic, payload.encode())
        dev.process_inbox()
        for phase, report, _due in dev.outbox:
            reports.append([phase, "".join("%02x" % b for b in report)])
        dev.flush(sink)
    results.append({"log": lines, "reports": reports})
with open(sys.argv[2], "w") as f:
    json.dump(results, f)
'''


def stream_words(seed):
    s = seed | 1
    while True:
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        yield s


def digest(doc):
    return hashlib.sha256(campaign_config.canonical(doc).encode()).digest()[:16].hex()


def split_rates(device_id, salt):
    """(rate putting the device in phase 1, rate putting it in phase 2)."""
    h = protocol.murmur3_32(device_id.encode(), salt) % ldplcm.PPM
    return h + 1, h


# --- the message alphabets --------------------------------------------------------------------

def msg(kind, doc):
    topic = "ldp/%s/%s" % (CAMPAIGN, "phase2" if kind == "phase2" else "config")
    return topic, campaign_config.sign(doc, SIGNING_KEY).decode()


def cfg(cid, phases, domain, salt, not_before=None):
    kw = {"campaign_id": cid}
    if not_before is not None:
        kw["not_before"] = not_before
    return config_doc(CAMPAIGN, phases=phases, domain=domain, salt=salt, **kw)


def closes(*docs):
    return {"X%d" % d["campaign_id"]: msg("close", campaign_config.make_close(d)) for d in docs}


def family_shc(device_id):
    dom = {"type": "int", "size": 16}

    def shc(cid, e1, e2, m=3, l=1):
        p = {"m": m, "l": l}
        return cfg(cid, [{"phase": 1, "mechanism": "shc", "eps_milli": e1, "params": dict(p)},
                         {"phase": 2, "mechanism": "shc", "eps_milli": e2, "params": dict(p)}],
                   dom, 0x51)
    a, a_eps, a_m = shc(101, 1000, 1000), shc(101, 3000, 1000), shc(101, 1000, 1000, m=2)
    a_e2 = shc(101, 1000, 2500)
    c = shc(202, 2000, 1000)
    old = shc(55, 1000, 1000)
    alphabet = {"A": msg("config", a), "A_eps": msg("config", a_eps), "A_m": msg("config", a_m),
                "A_e2": msg("config", a_e2), "C": msg("config", c),
                "P_A": msg("phase2", campaign_config.make_phase2(a, candidates=[1, 2, 3])),
                "P_C": msg("phase2", campaign_config.make_phase2(c, candidates=[5, 1]))}
    alphabet.update(closes(a, c, old))
    cands = {101: [1, 2, 3], 202: [5, 1]}
    fixed = [["A", "A_eps", "P_A"], ["A", "P_A", "A_eps", "P_A"], ["A_eps", "A", "P_A"],
             ["A", "A_m", "P_A", "A"], ["A", "X55", "P_A"], ["A", "C", "X101", "P_C", "A"],
             ["A", "A_e2", "P_A"], ["P_A", "A_e2", "A"]]
    return alphabet, cands, fixed, [1, 5]


def family_ldplcm(device_id):
    dom, salt = {"type": "int", "size": 8}, 77
    in1, in2 = split_rates(device_id, salt)

    def lcm(cid, rate, e1=1000, e2=1000):
        return cfg(cid, [{"phase": 1, "mechanism": "cms", "eps_milli": e1, "sample_rate_ppm": rate,
                          "params": {"k": 2, "m": 4}},
                         {"phase": 2, "mechanism": "lcm", "eps_milli": e2, "sample_rate_ppm": rate,
                          "params": {"k": 2, "m": 4}}], dom, salt)
    l1, l2, l3, n = lcm(301, in1), lcm(301, in2), lcm(301, in1, e1=3000), lcm(302, in2)
    alphabet = {"L1": msg("config", l1), "L2": msg("config", l2), "L3": msg("config", l3),
                "N": msg("config", n), "P_L": msg("phase2", campaign_config.make_phase2(l1)),
                "P_N": msg("phase2", campaign_config.make_phase2(n))}
    alphabet.update(closes(l1, n, lcm(55, in1)))
    fixed = [["L1", "L2", "P_L"], ["L2", "L1", "P_L"], ["L1", "P_L", "L2", "P_L"],
             ["L3", "L1", "P_L", "L2"], ["L1", "X55", "N", "P_N", "L2", "P_L"]]
    return alphabet, {}, fixed, 3


def family_ldpminer(device_id):
    dom = {"type": "int", "size": 8}

    def miner(cid, e1, e2, l2=2):
        return cfg(cid, [{"phase": 1, "mechanism": "sh", "eps_milli": e1, "params": {"m": 4, "l": 2}},
                         {"phase": 2, "mechanism": "srappor", "eps_milli": e2, "params": {"l": l2}}],
                   dom, 0x33)
    m, m_eps, m_l = miner(401, 1000, 1000), miner(401, 1000, 3000), miner(401, 1000, 1000, l2=1)
    alphabet = {"M": msg("config", m), "M_eps": msg("config", m_eps), "M_l": msg("config", m_l),
                "P_M": msg("phase2", campaign_config.make_phase2(m, candidates=[1, 2, 5]))}
    alphabet.update(closes(m, miner(55, 1000, 1000)))
    fixed = [["M", "M_eps", "P_M"], ["M_l", "M", "P_M", "M_eps"], ["M", "X401", "M", "P_M"]]
    return alphabet, {401: [1, 2, 5]}, fixed, [1, 2]


def family_svim(device_id):
    dom, salt = {"type": "int", "size": 8}, 91
    in1, in2 = split_rates(device_id, salt)

    def svim(cid, rate, e1=1000, e2=1000):
        return cfg(cid, [{"phase": 1, "mechanism": "psolh", "eps_milli": e1, "sample_rate_ppm": rate,
                          "params": {"l": 1, "g": 4}},
                         {"phase": 2, "mechanism": "psgrr", "eps_milli": e2, "sample_rate_ppm": rate,
                          "params": {"l": 2}}], dom, salt)
    s1, s2, s3 = svim(501, in1), svim(501, in2), svim(501, in2, e2=3000)
    alphabet = {"S1": msg("config", s1), "S2": msg("config", s2), "S3": msg("config", s3),
                "P_S": msg("phase2", campaign_config.make_phase2(s1, candidates=[1, 2, 5]))}
    alphabet.update(closes(s1, svim(55, in1)))
    fixed = [["S1", "S2", "P_S"], ["S2", "S1", "P_S"], ["S2", "P_S", "S3", "S1", "P_S"]]
    return alphabet, {501: [1, 2, 5]}, fixed, [1, 2]


BUILDERS = {"shc": family_shc, "ldplcm": family_ldplcm, "ldpminer": family_ldpminer,
            "svim": family_svim}
DEVICE = "rs-dev"


@lru_cache(maxsize=None)
def built(name):
    """The family's signed messages, made once (config bodies carry the time: every client
    must get the very same bytes)."""
    return BUILDERS[name](DEVICE)


FAMILIES = {name: (lambda _device, name=name: built(name)) for name in BUILDERS}


def sequences(name):
    alphabet, _, fixed, _ = FAMILIES[name](DEVICE)
    rng = np.random.default_rng(sum(map(ord, name)))  # aggregator side, fixed
    keys = sorted(alphabet)
    seqs = [list(s) for s in fixed]
    while len(seqs) < SEQUENCES_PER_FAMILY:
        seqs.append([keys[int(i)] for i in rng.integers(0, len(keys), int(rng.integers(3, 9)))])
    return seqs


# --- running both clients ----------------------------------------------------------------------

def jobs_for(name, work):
    alphabet, _, _, value = FAMILIES[name](DEVICE)
    identity = device_runner.identity_doc(DEVICE, SIGNING_KEY, eps_cap_milli=8000,
                                          lifetime_budget_milli=10 ** 6)
    jobs = []
    for n, seq in enumerate(sequences(name)):
        state = work / ("%s-%d" % (name, n))
        state.mkdir(parents=True)
        device_runner.provision_ledger(state)
        (state / "identity.json").write_text(json.dumps(identity))
        jobs.append({"state": str(state), "identity": identity, "campaign": CAMPAIGN,
                     "value": value, "seed": 1000 + n, "names": seq,
                     "messages": [list(alphabet[k]) for k in seq]})
    return jobs


def run_micropython(jobs, work):
    (work / "driver.py").write_text(DRIVER)
    (work / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run([device_runner.micropython_binary(), str(work / "driver.py"),
                           str(work / "jobs.json"), str(work / "out.json")],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads((work / "out.json").read_text())
    for job, res in zip(jobs, out):
        res["ledger"] = read_ledger(job["state"])
    return out


def run_c(jobs, work):
    binary = build_client()
    out = []
    for n, job in enumerate(jobs):
        path = work / ("messages-%d.json" % n)
        path.write_text(json.dumps(job["messages"]))
        proc = subprocess.run([str(binary), "replay", "--state-dir", job["state"], "--campaign",
                               job["campaign"], "--value", json.dumps(job["value"]), "--messages",
                               str(path)], capture_output=True, text=True, timeout=60,
                              env=dict(client_env(), LDPC_TEST_RANDOM_SEED=str(job["seed"])))
        assert_no_sanitizer_report(proc.stderr)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports, log = [], []
        for line in proc.stdout.splitlines():
            if line.startswith("report "):
                _, phase, hexed = line.split()
                reports.append([int(phase), hexed])
            elif line.startswith("ldp %s " % DEVICE):
                log.append(line[len("ldp %s " % DEVICE):])
        out.append({"log": log, "reports": reports, "ledger": read_ledger(job["state"])})
    return out


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def runs(family, tmp_path_factory):
    """{client: [result per sequence]} with each client on its own copy of fresh ledgers."""
    out = {}
    for client, run in (("micropython", run_micropython), ("c", run_c)):
        work = tmp_path_factory.mktemp("%s-%s" % (family, client))
        jobs = jobs_for(family, work)
        out[client] = run(jobs, work)
    return jobs_for(family, tmp_path_factory.mktemp("spec")), out


# --- what the reports must be ------------------------------------------------------------------

def participating(doc, device_id):
    rates = {ph.get("sample_rate_ppm") for ph in doc["phases"]} - {None}
    if not rates:
        return {ph["phase"] for ph in doc["phases"]}
    return {1} if ldplcm.in_phase1(device_id, doc["salt"], rates.pop()) else {2}


def device_keys(value, doc):
    """The device's set (distinct, in the domain, first occurrence order), or its item key."""
    size = doc["domain"]["size"]
    if isinstance(value, list):
        out = []
        for v in value:
            if 0 <= v < size and v not in out:
                out.append(v)
        return out
    return value if 0 <= value < size else size


def expected_report(doc, phase, value, cands, words, nonce, shc_state):
    """The aggregator's reference report of `doc`'s phase on explicit words (and, for shc, the
    bit x of phase 1 kept in `shc_state`)."""
    name = doc["phases"][phase - 1]["mechanism"]
    extra = {"candidates": cands} if name in ("srappor", "psgrr") and phase == 2 else {}
    mech = campaign_config.mechanism_for_phase(doc, phase, **extra)
    w = [next(words) for _ in range(mech.random_words)]
    keys = device_keys(value, doc)
    if name == "shc" and phase == 1:
        report, x = mech.reference_phase1(keys, w, nonce)
        shc_state[doc["campaign_id"]] = (report, x)
        return report
    if name == "shc":
        memo, x = shc_state[doc["campaign_id"]]
        return mech.reference_phase2({"t": int.from_bytes(memo[12:16], "little"), "y1": memo[16],
                                      "x": x}, w, nonce)
    if name == "lcm":
        return mech.reference_report({"key": keys, "high": False}, w, nonce)
    if phase == 2 and isinstance(keys, list):
        keys = [k for k in keys if k in cands]
    return mech.reference_report(keys, w, nonce)


def check_sequence(name, job, res):
    """Checks 1-3 of the module docstring for one run; returns {cid: (B, published phases)}."""
    alphabet, cands, _, value = FAMILIES[name](DEVICE)
    configs = {}
    for _, payload in job["messages"]:
        doc = json.loads(json.loads(payload)["body"])
        if doc["type"] == "config":
            configs[digest(doc)] = doc
    ledger = res["ledger"] or {"spent_milli": 0, "reports": {}, "bound": {}}
    bound = ledger.get("bound", {})
    words = stream_words(job["seed"])
    shc_state, seen, published = {}, set(), {}
    for phase, hexed in res["reports"]:
        report = bytes.fromhex(hexed)
        cid = protocol.parse_header(report)[4]
        published.setdefault(cid, set()).add(phase)
        if report in seen:
            continue  # a memo re-sent: the same bytes, nothing drawn
        seen.add(report)
        assert str(cid) in bound, (job["names"], cid)
        doc = configs[bound[str(cid)]]
        nonce = next(words)
        want = expected_report(doc, phase, value, cands.get(cid), words, nonce, shc_state)
        assert report == want, (job["names"], cid, phase, "not the bound config's channel")
    out = {}
    for cid_text, dig in bound.items():
        cid, doc = int(cid_text), configs[dig]
        phases = published.get(cid, set())
        assert phases <= participating(doc, DEVICE), (job["names"], cid, phases)
        memos = {int(k.split(":")[1]): v[1] for k, v in ledger["reports"].items()
                 if k.split(":")[0] == cid_text}
        assert set(memos) == phases, (job["names"], memos, phases)
        assert memos == {p: doc["phases"][p - 1]["eps_milli"] for p in phases}, job["names"]
        out[cid] = (doc, frozenset(phases))
    assert set(published) <= {int(c) for c in bound}
    assert ledger["spent_milli"] == sum(v[1] for v in ledger["reports"].values())
    return out


def test_sequences_have_teeth(family):
    """The alphabets re-sign ids with other ε, parameters and sample rates; the sequences mix
    them with replays, phase-2 messages and closes."""
    alphabet, _, _, _ = FAMILIES[family](DEVICE)
    by_cid = {}
    for kind, payload in alphabet.values():
        doc = json.loads(json.loads(payload)["body"])
        if doc["type"] == "config":
            by_cid.setdefault(doc["campaign_id"], set()).add(digest(doc))
    assert max(len(d) for d in by_cid.values()) >= 3
    seqs = sequences(family)
    assert len(seqs) == SEQUENCES_PER_FAMILY and any(any(k.startswith("X") for k in s) for s in seqs)


def test_each_id_publishes_only_its_bound_channel_on_both_clients(family, runs):
    jobs, out = runs
    bound_channels = set()
    refusals = 0
    for n, job in enumerate(jobs):
        mp, c = out["micropython"][n], out["c"][n]
        assert mp["reports"] == c["reports"], (family, job["names"])
        assert mp["ledger"] == c["ledger"], (family, job["names"])
        for cid, (doc, phases) in check_sequence(family, job, mp).items():
            if phases:
                bound_channels.add((json.dumps(doc, sort_keys=True), phases))
        refusals += sum("refused config bound:" in line for line in mp["log"])
        assert sum("refused config bound:" in line for line in c["log"]) == \
            sum("refused config bound:" in line for line in mp["log"]), job["names"]
    assert refusals > 0 and bound_channels
    for doc_text, phases in sorted(bound_channels):
        assert_channel_within_charge(json.loads(doc_text), phases)


# --- the bound channels, exactly enumerated ------------------------------------------------------

def assert_channel_within_charge(doc, phases):
    charge = sum(doc["phases"][p - 1]["eps_milli"] for p in phases)
    ratio = channel_ratio(json.dumps(doc, sort_keys=True), tuple(sorted(phases)))
    assert ratio <= protocol.exp_lower(charge, 1000) / protocol.SCALE + 1e-12, (doc, phases, ratio)


@lru_cache(maxsize=None)
def channel_ratio(doc_text, phases):
    """The worst ratio, over all inputs, of the joint output of `phases` of the config (its ε,
    thresholds and parameters), by the exact enumerations of the other privacy tests. Phases
    with independent words compose: the worst joint ratio is the product of each phase's."""
    doc = json.loads(doc_text)
    names = [doc["phases"][p - 1]["mechanism"] for p in phases]
    if names[0] == "shc":
        return shc_ratio(doc, phases)
    ratio = 1.0
    for p, name in zip(phases, names):
        ratio *= float(single_ratio(doc, p, name))
    return ratio


def shc_ratio(doc, phases):
    from test_privacy_shc import (SETS, c_params, joint_dists, marginal, mechanisms,
                                       worst_ratio)
    e1, e2 = (ph["eps_milli"] for ph in doc["phases"])
    params = doc["phases"][0]["params"]
    mech1, mech2 = mechanisms(e1, e2, params["l"], params["m"])
    dists = joint_dists(SETS, mech2, c_params(mech2))
    if phases == (1,):
        return float(worst_ratio([marginal(d, 0) for d in dists]))
    return float(worst_ratio(dists))


def single_ratio(doc, phase, name):
    from test_privacy_sketches import cms_dists, ordered_sets, sh_dists, srappor_dists, worst_ratio
    ph = doc["phases"][phase - 1]
    eps, params, d = ph["eps_milli"], ph["params"], doc["domain"]["size"]
    if name in ("cms", "lcm"):
        inputs = [(key, False) for key in list(range(d)) + [d]]
        if name == "lcm":
            inputs.append((0, True))
        return worst_ratio(cms_dists(inputs, params["k"], params["m"], protocol.t_flip(eps),
                                     doc["salt"]))
    if name == "sh":
        return worst_ratio(sh_dists(ordered_sets([0, 1, 2, 3], 2), params["l"], params["m"],
                                    protocol.t_rr(eps), doc["salt"]))
    if name == "srappor":
        cands = [1, 2, 5]
        return worst_ratio(srappor_dists(ordered_sets(cands + [7], 2), params["l"], cands,
                                         protocol.t_flip(eps)))
    from test_privacy_psfo import ordered_sets as ps_sets
    from test_privacy_psfo import psgrr_dists, psolh_dists
    from test_privacy_psfo import worst_ratio as ps_worst
    if name == "psolh":
        return ps_worst(psolh_dists(ps_sets(list(range(d)) + [d], 2), params["l"], None, d,
                                    params["g"], protocol.t_grr(eps, params["g"])))
    cands = [1, 2, 5]
    return ps_worst(psgrr_dists(ps_sets(cands + [7], 2), params["l"], cands, d,
                                protocol.t_grr(eps, len(cands) + 1)))


def test_channel_check_has_teeth():
    """The shc channel of an id re-signed with eps1 3 (A_eps) exceeds e^2, the charge of the
    config it re-signs (A: eps1 1, eps2 1), and fits its own charge e^4: the comparison with the
    charge can fail, and would have for a device that reported phase 1 under A and phase 2 under
    A_eps (the audit's case, with ε1 0.1 and 4)."""
    alphabet, _, _, _ = family_shc(DEVICE)
    a_eps = json.loads(json.loads(alphabet["A_eps"][1])["body"])
    ratio = channel_ratio(json.dumps(a_eps, sort_keys=True), (1, 2))
    assert ratio > protocol.exp_lower(2000, 1000) / protocol.SCALE
    assert_channel_within_charge(a_eps, {1, 2})


def test_byte_check_tells_the_configs_of_an_id_apart(family, runs):
    """Check 2 has teeth: for the sequences whose id was spent under one config, the reports
    expected under each other config of the same id (other ε, parameters, sample rate) differ
    from what was published, in at least one sequence per rival config."""
    jobs, out = runs
    alphabet, cands, _, value = FAMILIES[family](DEVICE)
    docs = [json.loads(json.loads(payload)["body"]) for _, payload in alphabet.values()]
    configs = [d for d in docs if d["type"] == "config"]
    told_apart = set()
    for job, res in zip(jobs, out["micropython"]):
        bound = (res["ledger"] or {}).get("bound", {})
        for rival in configs:
            dig = bound.get(str(rival["campaign_id"]))
            if dig is None or dig == digest(rival):
                continue
            words, shc_state, seen = stream_words(job["seed"]), {}, set()
            for phase, hexed in res["reports"]:
                report = bytes.fromhex(hexed)
                if report in seen:
                    continue
                seen.add(report)
                cid = protocol.parse_header(report)[4]
                doc = rival if cid == rival["campaign_id"] else next(
                    c for c in configs if digest(c) == bound[str(cid)])
                nonce = next(words)
                try:
                    want = expected_report(doc, phase, value, cands.get(cid), words, nonce, shc_state)
                except (KeyError, StopIteration):
                    want = None  # the rival has no such phase or input: told apart
                if want != report:
                    told_apart.add(digest(rival))
                    break
    rivals = {digest(c) for c in configs if sum(d["campaign_id"] == c["campaign_id"] for d in configs) > 1}
    assert rivals and rivals <= told_apart | {dig for r in out["micropython"]
                                              for dig in (r["ledger"] or {}).get("bound", {}).values()}
    assert told_apart
