"""Recurring campaigns end to end (spec §3.4), through the product's CLI: a private Mosquitto
with its packaged limits and `serve`; 5 MicroPython agents (`ldp.agent.Agent` providing
`fw_bucket`, a reading that changes every time it is read) and 2 C clients (`--metric
fw_bucket=PROGRAM`, a program whose output changes on every call) start BEFORE the campaign
exists; then `campaign create --every 20s --rounds 3 --metric fw_bucket` (OLOLOHA: loloha at
ε∞ = 2, ε1 = 1) and 10,000 simulated devices (`ldpfleet fleet`, values changing with
probability 0.1 per round) report in every round. One more MicroPython agent is provisioned
and started only after round 1 has closed: it discovers the campaign and joins round 2.

Checked: every report accepted, none counted twice, each round's count is the devices that
reported in it; each round's estimates hold that round's true frequencies within their
intervals (the simulated devices' truth from `fleet --truth`; the 8 real devices' readings,
which the test does not track per round, as a margin of 8 reports); every real device's ledger
spent exactly the campaign's enrolment charge, min(g, R)·ε∞, once, although its reading
changed every round.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from support.brokers import PrivateMosquitto
from support.c_client import build_client, client_env
from support.devices import SIGNING_KEY, read_ledger, stop_processes, write_key_files
from support.service import ServeProcess
from ldpfleet.provision import device_runner
from ldpfleet.service import Store

SIMULATED, MICROPYTHON, C_CLIENTS = 10000, 5, 2
EVERY, ROUNDS, ITEMS = 20, 3, 20
LEAD_S = 12
"""Round 1 opens this long after `campaign create`: every device holds the config by then."""
RUN_S = LEAD_S + EVERY * ROUNDS + 40

DRIVER = r'''
import sys
import json
from ldp.agent import Agent
state, port, run_for, offset = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
with open(state + "/identity.json") as f:
    identity = json.load(f)
calls = [0]

def read_bucket():
    calls[0] += 1
    return (offset + 7 * calls[0]) % %(items)d

agent = Agent(identity, state)
agent.metric("fw_bucket", read_bucket)
sys.exit(agent.run("127.0.0.1", port, run_for=run_for))
'''.replace("%(items)d", str(ITEMS))

COUNTER = ('n=$(cat "$0.n" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$0.n"\n'
           'echo $(( (n * 3) %% %d ))\n' % ITEMS)
"""The C clients' provider: 3, 6, 9, ... (mod ITEMS), one step per call."""


def cli(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *args], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def start_device(work, name, kind, port, run_s, offset=0):
    state = device_runner.prepare_device(work / name, "rec-" + name, SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=100000)
    log = work / (name + ".log")
    if kind == "mp":
        driver = work / "agent_driver.py"
        if not driver.exists():
            driver.write_text(DRIVER)
        argv = [device_runner.micropython_binary(), str(driver), str(state), str(port),
                str(run_s), str(offset)]
        env = device_runner.micropython_env()
    else:
        prog = state / "read_bucket"
        prog.write_text("#!/bin/sh\n" + COUNTER)
        prog.chmod(0o755)
        argv = [str(build_client()), "--host", "127.0.0.1", "--port", str(port),
                "--state-dir", str(state), "--metric", "fw_bucket=%s" % prog,
                "--timeout", str(run_s)]
        env = client_env()
    f = open(log, "w")
    proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
    return {"name": name, "kind": kind, "state": state, "proc": proc, "log": log}


def wait_connected(devices, timeout=60):
    deadline = time.monotonic() + timeout
    for d in devices:
        while "connected" not in d["log"].read_text():
            assert d["proc"].poll() is None and time.monotonic() < deadline, d["log"].read_text()
            time.sleep(0.2)


@pytest.fixture(scope="module")
def recurring(tmp_path_factory):
    work = tmp_path_factory.mktemp("recurring-e2e")
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    key = work / "k.pem"
    write_key_files(key)
    state = "sqlite:///" + str(work / "state.db")
    with PrivateMosquitto() as broker:
        url = "mqtt://127.0.0.1:%d" % broker.port
        serve = ServeProcess(url, state, log_path=str(work / "serve.log")).start()
        devices, fleet = [], None
        try:  # everything started is stopped below, even if a device fails to start
            for i in range(MICROPYTHON):
                devices.append(start_device(work, "mp%d" % i, "mp", broker.port, RUN_S, offset=i))
            for i in range(C_CLIENTS):
                devices.append(start_device(work, "c%d" % i, "c", broker.port, RUN_S))
            wait_connected(devices)
            start = int(time.time()) + LEAD_S
            created = json.loads(cli(
                "campaign", "create", "--broker", url, "--state", state, "--signing-key",
                str(key), "--name", "fw-daily", "--mechanism", "loloha", "--epsilon", "2",
                "--eps1", "1", "--domain", str(ITEMS), "--metric", "fw_bucket",
                "--every", "%ds" % EVERY, "--rounds", str(ROUNDS), "--start", str(start),
                "--json"))
            fleet = subprocess.Popen(
                [sys.executable, "-m", "ldpfleet.cli", "fleet", "--broker", url, "--campaign",
                 "fw-daily", "--trusted-keys", str(key) + ".pub", "--devices", str(SIMULATED),
                 "--seed", "23", "--change-rate", "0.1", "--truth", str(work / "truth.json"),
                 "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # a board provisioned after round 1 closed discovers the campaign and joins round 2
            time.sleep(max(0.0, start + EVERY + 1 - time.time()))
            late = start_device(work, "late", "mp", broker.port, RUN_S - EVERY, offset=11)
            devices.append(late)
            out, err = fleet.communicate(timeout=LEAD_S + EVERY * ROUNDS + 120)
            assert fleet.returncode == 0, out + err
            fleet_result = json.loads(out)
            total = SIMULATED + MICROPYTHON + C_CLIENTS
            serve.wait_counts("fw-daily", lambda c: c.get("accepted", 0) >= ROUNDS * total + 2,
                              timeout=60)
            time.sleep(1)  # anything more a device would send arrives (it must not)
        finally:
            if fleet is not None and fleet.poll() is None:
                fleet.kill()
            stop_processes([d["proc"] for d in devices])
            serve.stop()
    return work, state, created, devices, fleet_result


def round_counts(state):
    status = json.loads(cli("campaign", "status", "fw-daily", "--state", state, "--json"))
    return status, {r["round"]: r["reports"] for r in status["schedule"]["per_round"]}


def test_every_report_accepted_once_per_round(recurring):
    work, state, created, devices, fleet_result = recurring
    status, per_round = round_counts(state)
    real = MICROPYTHON + C_CLIENTS
    assert per_round[1] == SIMULATED + real, per_round  # the late board was not there yet
    assert per_round[2] == per_round[3] == SIMULATED + real + 1, per_round
    assert status["accepted"] == sum(per_round.values()), status
    rejected = {k: v for k, v in status["rejected"].items() if k != "duplicate"}
    assert not rejected, status["rejected"]
    assert [r["acknowledged"] for r in fleet_result["rounds"]] == [SIMULATED] * ROUNDS


def test_late_board_joins_the_next_round(recurring):
    work, state, created, devices, _ = recurring
    late = [d for d in devices if d["name"] == "late"][0]
    text = late["log"].read_text()
    assert "joined campaign fw-daily" in text, text
    ledger = read_ledger(late["state"])
    cid = str(created["campaign_id"])
    assert ledger["rounds"][cid][0] == ROUNDS, ledger  # its latest round memo is round 3


def test_spend_is_the_enrolment_charge(recurring):
    """Each real device's reading changed every round; its ledger charged min(g, R)·ε∞ once."""
    work, state, created, devices, _ = recurring
    with Store(state) as store:
        mech = store.require_campaign("fw-daily").mechanism(1)
    charge = mech.enrolment_charge_milli(ROUNDS)
    assert charge == min(mech.g, ROUNDS) * 2000
    cid = str(created["campaign_id"])
    for d in devices:
        ledger = read_ledger(d["state"])
        assert ledger["spent_milli"] == charge, (d["name"], ledger)
        assert ledger["enrol"][cid]["charge_milli"] == charge, (d["name"], ledger)


def test_each_round_within_its_intervals(recurring):
    """Every item of every round: the estimate's interval (99.9 %: 63 intervals) holds the
    simulated devices' true frequency once the 8 real devices' unknown readings are allowed
    for (at most 8 reports of any item)."""
    work, state, _, _, _ = recurring
    truth = json.load(open(work / "truth.json"))
    status, per_round = round_counts(state)
    for r in range(1, ROUNDS + 1):
        est = json.loads(cli("estimate", "fw-daily", "--state", state, "--round", str(r),
                             "--confidence", "0.999", "--json"))
        assert est["n"] == per_round[r], est
        counts = {int(k): v for k, v in truth[str(r)].items()}
        assert sum(counts.values()) == SIMULATED
        n = est["n"]
        margin = (n - SIMULATED) / n
        rows = est["items"]
        assert len(rows) >= ITEMS, est
        for row in rows:
            if row["item"] == "other":
                continue
            f = counts.get(int(row["item"]), 0) / n
            assert row["ci_low"] - margin <= f <= row["ci_high"] + margin, (r, row, f)
