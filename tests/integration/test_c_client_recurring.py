"""The C client in recurring campaigns (protocol_spec/v2 §3.4, §5.4 `schedule`, §7.4 `enrol` and
`rounds`).

* vectors/recurring.json through the client's own code: every `configs` case accepted or refused
  with the reference's field (`verify-config`, plain and ASan/UBSan builds), every `rounds` case
  (`rounds`), and every round-header report byte for byte (`vector` with the case's round).
* Real processes against a private Mosquitto: a campaign of 3 rounds of 10 s that opened 2 s
  ago. Two flashed clients (`--value`, constant values 1 and 3, the same seeded randomness),
  a `--metric` agent whose provider prints another value at every call, an ASan/UBSan client,
  and a client started in round 2. Each sends exactly one report per round it takes part in,
  with the round header; each ledger's lifetime spend is the enrolment charge
  min(classes, R)·ε∞ whatever its values did; the two constant clients' logs, ledger keys and
  report headers are identical (spec §7.1); a device whose budget is below the charge is
  refused `lifetime_budget` and spends and publishes nothing.
"""
import json
import struct
import subprocess
import tempfile
import time

import pytest

from ldpfleet.core import config as campaign_config
from ldpfleet.core import schedule
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.provision import device_runner
from support.brokers import PrivateMosquitto
from support.c_client import assert_no_sanitizer_report, build_client, client_cmd, client_env, metric_program
from support.devices import SIGNING_KEY, ReportCollector, config_doc, read_ledger, stop_processes
from test_c_client import verify_config

from pathlib import Path

VECTORS = Path(__file__).resolve().parents[2] / "protocol_spec" / "v2" / "vectors"


def recurring():
    return json.loads((VECTORS / "recurring.json").read_text())


# --- vectors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_config_cases_match_the_reference(sanitize):
    """Every `configs` case: the aggregator's check_config and the C client's give the same
    field (None: accepted), the vector's."""
    binary = build_client(sanitize=sanitize)
    fields = []
    for case in recurring()["configs"]:
        try:
            campaign_config.check_config(case["body"], case["now"])
            want = None
        except ConfigError as exc:
            want = exc.field
        assert want == case["error"], case["name"]
        payload = campaign_config.sign(case["body"], SIGNING_KEY)
        assert verify_config(binary, payload, SIGNING_KEY, case["now"]) == want, case["name"]
        fields.append(want)
    assert {None, "schedule", "phases", "phases.mechanism"} <= set(fields)


def test_round_cases_use_64_bit_integers(tmp_path):
    cases = recurring()["rounds"]
    path = tmp_path / "rounds.json"
    path.write_text(json.dumps(cases))
    proc = subprocess.run([str(build_client()), "rounds", "--cases-file", str(path)], capture_output=True,
                          text=True, env=client_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == [{"rounds": c["rounds"], "round": c["round"]} for c in cases]
    assert any(c["round"] is None for c in cases) and max(c["round"] or 0 for c in cases) >= 3


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_round_header_reports_byte_for_byte(sanitize):
    """`report_hex` of every round-header case from the state, words, nonce and round; the
    same case without its round gives the one-shot form (so the round is what changed it)."""
    binary = build_client(sanitize=sanitize)
    cases = recurring()["reports"]
    assert {c["mechanism"] for c in cases} == set(schedule.MEMOISED)
    for case in cases:
        words = struct.pack("<%dI" % len(case["words"]), *case["words"]).hex()
        for c, want in ((case, case["report_hex"]),
                        ({k: v for k, v in case.items() if k != "round"}, case["one_shot_hex"])):
            proc = subprocess.run([str(binary), "vector", "--case", json.dumps(c), "--words-hex", words],
                                  capture_output=True, text=True, env=client_env(), timeout=60)
            assert_no_sanitizer_report(proc.stderr)
            assert proc.returncode == 0 and proc.stdout.strip() == want, (case, proc.stdout, proc.stderr)
    zero = dict(cases[0], round=0)
    proc = subprocess.run([str(binary), "vector", "--case", json.dumps(zero), "--words-hex",
                           struct.pack("<%dI" % len(cases[0]["words"]), *cases[0]["words"]).hex()],
                          capture_output=True, text=True, env=client_env(), timeout=60)
    assert proc.returncode != 0 and proc.stdout == ""


# --- real processes ----------------------------------------------------------------------------

EVERY_S, ROUNDS, EPS, EPS1, D = 10, 3, 2000, 1000, 4
SEED_ENV = {"LDPC_TEST_RANDOM_SEED": "4242"}


def campaign_body(name, start):
    """lgrr over d = 4 items (n = 5 classes with ⊥): the charge is min(5, 3)·ε∞ = 6000."""
    return config_doc(name, mechanism="lgrr", eps_milli=EPS, params={"eps1_milli": EPS1},
                      domain={"type": "int", "size": D}, metric="fw_version",
                      delivery={"ack": False, "retry_s": 30, "retry_max_s": 60, "spread_s": 1},
                      recurring={"start": start, "every_s": EVERY_S, "rounds": ROUNDS})


def counter_program(path):
    """A provider whose reading changes at every call: 1, 2, 3, 0, 1, ... (its count kept in
    PATH.n, so the test can tell how often it ran)."""
    path.write_text('#!/bin/sh\nn=$(cat "$0.n" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$0.n"\n'
                    'echo $((n % 4))\n')
    path.chmod(0o755)
    return path


def rounds_of(reports, campaign, device):
    """(round, nonce) of every report the device published, in arrival order, checking the
    round header (spec §3.4) on each."""
    out = []
    for topic, payload in reports:
        if topic != "ldp/%s/r/%s" % (campaign, device):
            continue
        one, rnd = schedule.split_round(payload)
        assert rnd is not None and payload[3] == schedule.ROUND_FLAG and len(payload) == 16 + 4, payload.hex()
        assert len(one) == 12 + 4 and one[3] == 0
        out.append((rnd, struct.unpack("<I", one[8:12])[0]))
    return out


def test_rounds_enrolment_and_equivalence(tmp_path):
    charge = make_mechanism("lgrr", EPS, D + 1, eps1_milli=EPS1).enrolment_charge_milli(ROUNDS)
    assert charge == 3 * EPS
    plain, asan = build_client(), build_client(sanitize=True)
    with PrivateMosquitto() as broker:
        start = int(time.time()) - 2  # round 1 is open at once; 2 and 3 open 8 s and 18 s from now
        doc = campaign_body("fw-daily", start)
        cid = doc["campaign_id"]
        collector = ReportCollector(broker.port)
        procs, logs = {}, {}

        def launch(name, argv, env, budget=100000):
            state = device_runner.prepare_device(tmp_path / name, "rc-" + name, SIGNING_KEY,
                                                 eps_cap_milli=8000, lifetime_budget_milli=budget)
            argv = argv(state)
            logs[name] = tmp_path / (name + ".log")
            with open(logs[name], "w") as log:
                procs[name] = (state, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                       env=dict(client_env(), **env)))

        try:
            collector.publish("ldp/fw-daily/config", campaign_config.sign(doc, SIGNING_KEY))
            for name, value in (("const1", 1), ("const3", 3)):
                launch(name, lambda s, v=value: client_cmd(plain, s, broker.port, "fw-daily", v, once=True,
                                                           timeout=40), SEED_ENV)
            launch("asan", lambda s: client_cmd(asan, s, broker.port, "fw-daily", 2, once=True, timeout=40), {})
            launch("poor", lambda s: client_cmd(plain, s, broker.port, "fw-daily", 1, once=True, timeout=20), {},
                   budget=charge - 1)
            agent_until = start + 2 * EVERY_S + 4
            for name, program in (("agent", counter_program), ("agent1", lambda p: metric_program(p, 1))):
                launch(name, lambda s, prog=program: [
                    str(plain), "--host", "127.0.0.1", "--port", str(broker.port), "--state-dir", str(s),
                    "--metric", "fw_version=%s" % prog(Path(s) / "read_fw"),
                    "--timeout", str(agent_until - int(time.time()))], SEED_ENV)
            time.sleep(max(0.0, start + EVERY_S + 1 - time.time()))  # into round 2
            launch("late", lambda s: client_cmd(plain, s, broker.port, "fw-daily", 2, once=True, timeout=30), {})
            for name, (state, proc) in procs.items():
                proc.wait(60)
            reports = collector.barrier()
        finally:
            stop_processes([p for _, p in procs.values()])
            collector.close()
    text = {name: path.read_text() for name, path in logs.items()}
    for name in ("const1", "const3", "asan", "late"):
        assert procs[name][1].returncode == 0, (name, text[name])
    assert_no_sanitizer_report(text["asan"])
    # one report per round with the round header; a late device joins the round open then
    for name, want in (("const1", [1, 2, 3]), ("const3", [1, 2, 3]), ("asan", [1, 2, 3]),
                       ("agent", [1, 2, 3]), ("agent1", [1, 2, 3]), ("late", [2, 3])):
        got = rounds_of(reports, "fw-daily", "rc-" + name)
        assert [r for r, _ in got] == want, (name, got, text[name])
        assert len({n for _, n in got}) == len(want), "a fresh nonce every round"
        assert "rounds-done campaign_id=%d" % cid in text[name] and "undelivered" not in text[name], text[name]
        assert text[name].count("enrolled campaign_id=%d charge_milli=%d" % (cid, charge)) == 1, text[name]
    # the lifetime spend is the enrolment charge, whatever the values did (constant, changing)
    for name in ("const1", "const3", "asan", "agent", "agent1", "late"):
        ledger = read_ledger(procs[name][0])
        assert ledger["spent_milli"] == charge, (name, ledger)
        assert ledger["enrol"][str(cid)]["charge_milli"] == charge
        assert len(ledger["enrol"][str(cid)]["state"]) == 2 * (D + 1)  # lgrr: n bytes
        assert ledger["rounds"][str(cid)][0] == ROUNDS and str(cid) in ledger["bound"]
        assert ledger["reports"] == {}
    agent_counter = Path(procs["agent"][0]) / "read_fw.n"
    assert agent_counter.read_text().strip() == "3", "the provider runs once per round"
    # a budget below the charge: refused before anything is drawn, nothing spent or sent
    assert procs["poor"][1].returncode == 2 and "refused config lifetime_budget" in text["poor"], text["poor"]
    assert read_ledger(procs["poor"][0]) is None and not rounds_of(reports, "fw-daily", "rc-poor")
    # observational equivalence (spec §7.1), the same randomness each: flashed values 1 and 3;
    # an agent whose provider prints 1 every round and one whose provider changes every round
    for pair in (("const1", "const3"), ("agent1", "agent")):
        equivalent(pair, text, procs, reports, cid)


def equivalent(pair, text, procs, reports, cid):
    norm = [text[name].replace("rc-" + name, "DEV").splitlines() for name in pair]
    assert norm[0] == norm[1], pair
    ledgers = [read_ledger(procs[n][0]) for n in pair]
    assert [sorted(lg) for lg in ledgers][0] == sorted(ledgers[1])
    assert [(lg["spent_milli"], sorted(lg["enrol"]), sorted(lg["rounds"]), lg["rounds"][str(cid)][:2],
             len(lg["rounds"][str(cid)][2])) for lg in ledgers].count(
        (ledgers[0]["spent_milli"], [str(cid)], [str(cid)], ledgers[0]["rounds"][str(cid)][:2],
         len(ledgers[0]["rounds"][str(cid)][2]))) == 2
    heads = [[p[:4] + p[8:16] for t, p in reports if t.endswith("/rc-" + n)] for n in pair]
    assert heads[0] == heads[1] and len(heads[0]) == ROUNDS


def test_memo_first_undelivered_round_and_close(tmp_path):
    """A device restarted in round 1 with that round's memo (a ledger the Python side wrote:
    the same canonical form) re-sends the memoised bytes untouched, never enrols again; nobody
    acknowledges them, so at round 2's opening it logs `undelivered round=1`; round 2's report
    is acknowledged and the device is done. A close then drops `enrol` and `rounds` of the id
    (its spend stays charged). ASan/UBSan build."""
    import hashlib
    binary = build_client(sanitize=True)
    charge = make_mechanism("lgrr", EPS, D + 1, eps1_milli=EPS1).enrolment_charge_milli(2)
    assert charge == 2 * EPS
    with PrivateMosquitto() as broker:
        start = int(time.time()) - EVERY_S + 3  # round 1 closes 3 s from now
        doc = config_doc("fw-memo", mechanism="lgrr", eps_milli=EPS, params={"eps1_milli": EPS1},
                         domain={"type": "int", "size": D}, metric="fw_version",
                         delivery={"ack": True, "retry_s": 1, "retry_max_s": 2},
                         recurring={"start": start, "every_s": EVERY_S, "rounds": 2})
        cid, key = doc["campaign_id"], str(doc["campaign_id"])
        memo = schedule.with_round(struct.pack("<BBBBII", 2, 19, 1, 0, cid, 777) + struct.pack("<I", 3), 1)
        state = device_runner.prepare_device(tmp_path / "memo", "rc-memo", SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        digest = hashlib.sha256(campaign_config.canonical(doc).encode()).digest()[:16].hex()
        device_runner.write_ledger(state, {"spent_milli": charge, "reports": {}, "closed": [],
                                           "bound": {key: digest},
                                           "enrol": {key: {"state": "0001020304", "charge_milli": charge}},
                                           "rounds": {key: [1, 777, memo.hex()]}}, 1)
        collector = ReportCollector(broker.port)
        try:
            collector.publish("ldp/fw-memo/config", campaign_config.sign(doc, SIGNING_KEY))
            proc = subprocess.Popen(client_cmd(binary, state, broker.port, "fw-memo", 3, once=True, timeout=25),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=client_env())
            got = collector.wait_for(lambda rs: any(schedule.split_round(p)[1] == 2 for _, p in rs), timeout=20)
            fresh = next(p for _, p in got if schedule.split_round(p)[1] == 2)
            collector.publish("ldp/fw-memo/a/rc-memo", bytes((2, 0x41, fresh[2], 0)) + fresh[4:12], retain=False)
            out, _ = proc.communicate(timeout=30)
            sent = collector.barrier()
        finally:
            collector.close()
        assert_no_sanitizer_report(out)
        assert proc.returncode == 0, out
        first = [p for _, p in sent if schedule.split_round(p)[1] == 1]
        assert first and set(first) == {memo}, "round 1: the memo's bytes, re-sent until round 2 opened"
        assert {p for _, p in sent if schedule.split_round(p)[1] == 2} == {fresh}
        assert "memo round=1" in out and "undelivered round=1" in out and "enrolled" not in out, out
        assert "round round=2 of 2" in out and "acked phase=1" in out and "rounds-done" in out, out
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == charge and ledger["rounds"][key][:1] == [2]
        assert ledger["rounds"][key][2] == fresh.hex() and ledger["enrol"][key]["charge_milli"] == charge
        # the close (retained on the config topic) drops the enrolment and the round memo
        close = campaign_config.make_close(doc)
        from support.devices import publish
        publish(broker.port, "ldp/fw-memo/config", campaign_config.sign(close, SIGNING_KEY))
        proc = subprocess.run(client_cmd(binary, state, broker.port, "fw-memo", 3, once=True, timeout=15),
                              capture_output=True, text=True, env=client_env(), timeout=30)
        assert_no_sanitizer_report(proc.stdout + proc.stderr)
        assert proc.returncode == 0 and "closed campaign_id=%d" % cid in proc.stdout, proc.stdout
        ledger = read_ledger(state)
        assert key not in ledger.get("enrol", {}) and key not in ledger.get("rounds", {})
        assert ledger["spent_milli"] == charge and [cid, doc["not_before"]] in ledger["closed"]


def test_last_round_is_resent_until_not_after(tmp_path):
    """Round R has no next opening: with nobody acknowledging, its report is re-sent after its
    window closed, until not_after (spec §3.4, §6); then `undelivered round=1` and
    `rounds-done` (exit 0 with --once). Its spend is the enrolment charge min(classes, R)·ε∞."""
    binary = build_client()
    with PrivateMosquitto() as broker:
        now = int(time.time())
        start = now - EVERY_S + 3  # the only round's window closes 3 s from now, not_after 8 s
        doc = config_doc("fw-last", mechanism="loloha", eps_milli=EPS, params={"eps1_milli": EPS1, "g": 2},
                         domain={"type": "int", "size": D}, not_before=now - 60, not_after=start + EVERY_S + 5,
                         delivery={"ack": True, "retry_s": 1, "retry_max_s": 1},
                         recurring={"start": start, "every_s": EVERY_S, "rounds": 1})
        state = device_runner.prepare_device(tmp_path / "last", "rc-last", SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        collector = ReportCollector(broker.port)
        arrivals = []
        try:
            collector.publish("ldp/fw-last/config", campaign_config.sign(doc, SIGNING_KEY))
            proc = subprocess.Popen(client_cmd(binary, state, broker.port, "fw-last", 1, once=True, timeout=25),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=client_env())
            seen = 0
            while proc.poll() is None:
                got = collector.reports()
                arrivals += [time.time()] * (len(got) - seen)
                seen = len(got)
                time.sleep(0.05)
            out = proc.stdout.read()
            sent = collector.barrier()
        finally:
            collector.close()
    assert proc.returncode == 0, out
    assert len(set(p for _, p in sent)) == 1 and all(schedule.split_round(p)[1] == 1 for _, p in sent)
    assert any(t > start + EVERY_S + 1 for t in arrivals), (arrivals, start + EVERY_S)
    assert out.index("undelivered round=1") < out.index("rounds-done"), out
    ledger = read_ledger(state)
    # BiLOLOHA (g = 2) over R = 1 round: min(2, 1)·ε∞
    assert ledger["spent_milli"] == EPS == ledger["enrol"][str(doc["campaign_id"])]["charge_milli"]


@pytest.mark.parametrize("step", ["mid-write", "after-write"])
def test_a_crash_in_the_enrolment_commit_never_charges_twice(tmp_path, step):
    """A power cut inside the enrolment's commit (spec §7.4): mid-write leaves the previous
    generation (nothing spent, the device enrols again on restart); after-write leaves the
    enrolment (the restart reports from it without enrolling again). Either way the spend is
    the charge, once, and nothing was published before the commit."""
    binary = build_client()
    charge = make_mechanism("lgrr", EPS, D + 1, eps1_milli=EPS1).enrolment_charge_milli(ROUNDS)
    with PrivateMosquitto() as broker:
        start = int(time.time()) - 2
        doc = campaign_body("fw-crash", start)
        state = device_runner.prepare_device(tmp_path / "crash", "rc-crash", SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        collector = ReportCollector(broker.port)
        try:
            collector.publish("ldp/fw-crash/config", campaign_config.sign(doc, SIGNING_KEY))
            argv = client_cmd(binary, state, broker.port, "fw-crash", 1, timeout=15)
            crashed = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                     env=dict(client_env(), LDPC_LEDGER_CRASH=step))
            assert crashed.returncode == 75, crashed.stdout + crashed.stderr
            assert not collector.barrier()
            again = subprocess.Popen(argv + ["--once"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=client_env())
            collector.wait_for(lambda rs: len(rs) >= 1, timeout=15)
            again.terminate()
            out, _ = again.communicate(timeout=15)
            sent = collector.barrier()
        finally:
            collector.close()
    assert ("enrolled" in out) == (step == "mid-write"), out
    assert len({p for _, p in sent}) == 1 and schedule.split_round(sent[0][1])[1] == 1
    ledger = read_ledger(state)
    assert ledger["spent_milli"] == charge == ledger["enrol"][str(doc["campaign_id"])]["charge_milli"]


def _enrolled_ledger(doc, charge, rounds=None, enrol=True):
    """A ledger the Python side writes (the same canonical form): `doc`'s id bound and charged,
    enrolled with a real lgrr state unless `enrol` is False, and the round memo `rounds`."""
    import hashlib
    key = str(doc["campaign_id"])
    digest = hashlib.sha256(campaign_config.canonical(doc).encode()).digest()[:16].hex()
    ledger = {"spent_milli": charge, "reports": {}, "closed": [], "bound": {key: digest}}
    if enrol:
        state = make_mechanism("lgrr", EPS, D + 1, eps1_milli=EPS1).enrol()
        ledger["enrol"] = {key: {"state": state.hex(), "charge_milli": charge}}
    if rounds is not None:
        ledger["rounds"] = {key: rounds}
    return ledger


def _run_once_on(binary, broker, state, doc, seconds=6):
    """The config published retained, then one `--once` client run of `seconds`: (its output,
    the reports it sent)."""
    name = doc["campaign"]
    collector = ReportCollector(broker.port)
    try:
        collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
        proc = subprocess.run(client_cmd(binary, state, broker.port, name, 3, once=True, timeout=seconds),
                              capture_output=True, text=True, env=client_env(), timeout=30)
        return proc, collector.barrier()
    finally:
        collector.close()


def test_a_clock_gone_back_skips_rounds_the_memo_is_past(tmp_path):
    """The ledger's round memo is of round 2 while the clock reads round 1 (the clock went
    back): round 1 may already have its report, so nothing is made for it (another nonce in
    the round would be the aggregator's second_report); at round 2's opening the memo is
    re-sent untouched (spec §3.4, §7.1)."""
    binary = build_client()
    charge = make_mechanism("lgrr", EPS, D + 1, eps1_milli=EPS1).enrolment_charge_milli(ROUNDS)
    with PrivateMosquitto() as broker:
        start = int(time.time()) - EVERY_S + 3  # round 1 closes 3 s from now
        doc = campaign_body("fw-back", start)
        cid = doc["campaign_id"]
        memo = schedule.with_round(struct.pack("<BBBBII", 2, 19, 1, 0, cid, 777) + struct.pack("<I", 3), 2)
        state = device_runner.prepare_device(tmp_path / "back", "rc-back", SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        device_runner.write_ledger(state, _enrolled_ledger(doc, charge, [2, 777, memo.hex()]), 1)
        proc, sent = _run_once_on(binary, broker, state, doc)
    out = proc.stdout + proc.stderr
    assert "skip round=1" in out and "undelivered round=1" not in out, out
    assert [schedule.split_round(p)[1] for _, p in sent] and {p for _, p in sent} == {memo}, out
    ledger = read_ledger(state)
    assert ledger["spent_milli"] == charge and ledger["rounds"][str(cid)][:2] == [2, 777]


def test_a_replay_after_the_close_left_the_closed_list_never_enrols_again(tmp_path):
    """Enrolled, closed (the close dropped `enrol` and `rounds`, the binding stays), the closed
    entry evicted by later closes (closed_floor = its not_before, spec §7.3): a replay of the
    same signed config passes the binding and the floor, and must still not enrol (spend)."""
    binary = build_client()
    charge = make_mechanism("lgrr", EPS, D + 1, eps1_milli=EPS1).enrolment_charge_milli(ROUNDS)
    with PrivateMosquitto() as broker:
        doc = campaign_body("fw-replay", int(time.time()) - 2)
        state = device_runner.prepare_device(tmp_path / "replay", "rc-replay", SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        ledger = dict(_enrolled_ledger(doc, charge, enrol=False), closed_floor=doc["not_before"])
        device_runner.write_ledger(state, ledger, 1)
        proc, sent = _run_once_on(binary, broker, state, doc)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "refused config closed:" in out and "enrolled campaign_id" not in out, out
    assert sent == []
    assert read_ledger(state) == ledger


def test_a_config_whose_rounds_are_all_over_is_done_at_once(tmp_path):
    """A config held after round R's window closed but before not_after (a schedule with
    `rounds` ending early): no round is open or will be, so the device neither enrols nor
    sends, logs `rounds-done` and `--once` exits 0 (spec §3.4), as the MicroPython client."""
    binary = build_client()
    with PrivateMosquitto() as broker:
        now = int(time.time())
        doc = config_doc("fw-over", mechanism="lgrr", eps_milli=EPS, params={"eps1_milli": EPS1},
                         domain={"type": "int", "size": D}, not_before=now - 60, not_after=now + 60,
                         recurring={"start": now - 2 * EVERY_S, "every_s": EVERY_S, "rounds": 1})
        state = device_runner.prepare_device(tmp_path / "over", "rc-over", SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        proc, sent = _run_once_on(binary, broker, state, doc)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "rounds-done" in out and "enrolled" not in out, out
    assert sent == [] and read_ledger(state) is None
