"""Live metrics and discovery end to end (spec §5.4 `metric`), through the product's CLI: a
private Mosquitto and `serve`; 3 MicroPython agents (`ldp.agent.Agent` providing `temp`, a
reading that changes on every call) and 2 C clients (`--metric temp=PROGRAM`, a program that
prints a float) are started BEFORE the campaigns exist; then two numeric campaigns are created
with `campaign create --metric temp` (pm over -40.0..85.0 by 0.1), and 2,000 simulated devices
(`ldpfleet fleet`) report into the first one. The agents discover both on `ldp/+/config` and
report into each, their provider read once per campaign (the MicroPython one gives 20.25 to the
first campaign it reports into and 20.5 to the second). A MicroPython agent and a C client that
provide only `humidity` skip both campaigns and spend nothing.

Every report is accepted; `estimate`'s mean interval holds the true mean of the readings' grid
values (with the margin of test_numeric_e2e.py: the real devices draw from their OS RNG).
"""
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from support.brokers import PrivateMosquitto
from support.c_client import build_client, client_env, metric_program
from support.devices import SIGNING_KEY, read_ledger, stop_processes, write_key_files
from support.service import ServeProcess
from ldpfleet.provision import device_runner
from ldpfleet.service import Store
from ldpfleet.service.campaigns.numeric import worst_report_variance

SIMULATED, MICROPYTHON, C_CLIENTS = 2000, 3, 2
REAL = MICROPYTHON + C_CLIENTS
C_READING = 21.5
RUN_S = 150

DRIVER = r'''
import sys
import json
from ldp.agent import Agent
state, port, run_for, metric = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
with open(state + "/identity.json") as f:
    identity = json.load(f)
calls = [0]

def read_temp():
    calls[0] += 1
    return 20.0 + 0.25 * calls[0]

agent = Agent(identity, state)
agent.metric(metric, read_temp)
sys.exit(agent.run("127.0.0.1", port, run_for=run_for))
'''


def cli(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *args], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def start_agents(work, port):
    """(name, kind, metric, state, process, log path) of every real device."""
    driver = work / "agent_driver.py"
    driver.write_text(DRIVER)
    out = []
    specs = ([("mp%d" % i, "mp", "temp") for i in range(MICROPYTHON)]
             + [("c%d" % i, "c", "temp") for i in range(C_CLIENTS)]
             + [("mp-hum", "mp", "humidity"), ("c-hum", "c", "humidity")])
    for name, kind, metric in specs:
        state = device_runner.prepare_device(work / name, "live-" + name, SIGNING_KEY,
                                             eps_cap_milli=8000, lifetime_budget_milli=100000)
        log = work / (name + ".log")
        if kind == "mp":
            argv = [device_runner.micropython_binary(), str(driver), str(state), str(port),
                    str(RUN_S), metric]
            env = device_runner.micropython_env()
        else:
            prog = metric_program(state / "read", C_READING)
            argv = [str(build_client()), "--host", "127.0.0.1", "--port", str(port),
                    "--state-dir", str(state), "--metric", "%s=%s" % (metric, prog),
                    "--timeout", str(RUN_S)]
            env = client_env()
        f = open(log, "w")
        proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
        out.append((name, kind, metric, state, proc, log))
    deadline = time.monotonic() + 60
    for entry in out:  # every device is connected (and subscribed) before a campaign exists
        while "connected" not in entry[5].read_text():
            assert entry[4].poll() is None and time.monotonic() < deadline, entry[5].read_text()
            time.sleep(0.2)
    return out


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    work = tmp_path_factory.mktemp("live-e2e")
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    key = work / "k.pem"
    write_key_files(key)
    state = "sqlite:///" + str(work / "state.db")
    with PrivateMosquitto() as broker:
        url = "mqtt://127.0.0.1:%d" % broker.port
        serve = ServeProcess(url, state, log_path=str(work / "serve.log")).start()
        devices = start_agents(work, broker.port)
        try:
            created = {}
            for name in ("temp-live", "temp-live2"):
                created[name] = json.loads(cli(
                    "campaign", "create", "--broker", url, "--state", state, "--signing-key",
                    str(key), "--name", name, "--mechanism", "pm", "--epsilon", "1",
                    "--domain=-40.0..85.0:0.1", "--salt", "7", "--metric", "temp", "--json"))
                serve.wait_counts(name, lambda c: c.get("accepted", 0) >= REAL, timeout=120)
            cli("fleet", "--broker", url, "--campaign", "temp-live", "--trusted-keys",
                str(key) + ".pub", "--devices", str(SIMULATED), "--seed", "11",
                "--dist", "beta:2,5", "--true-counts", str(work / "truth.json"),
                "--ack-wait", "30", "--json", env=env)
            serve.wait_counts("temp-live", lambda c: c.get("accepted", 0) >= SIMULATED + REAL,
                              timeout=120)
            time.sleep(1)  # anything more a device would send arrives (it must not)
        finally:
            stop_processes([d[4] for d in devices])
            serve.stop()
    return work, state, created, devices


def test_campaign_create_writes_the_metric(live):
    work, state, created, _ = live
    assert created["temp-live"]["config"]["metric"] == "temp"
    status = json.loads(cli("campaign", "status", "temp-live", "--state", state, "--json"))
    assert status["metric"] == "temp"
    assert "metric temp" in cli("campaign", "status", "temp-live", "--state", state)


def test_every_report_accepted(live):
    _, state, _, _ = live
    for name, n in (("temp-live", SIMULATED + REAL), ("temp-live2", REAL)):
        status = json.loads(cli("campaign", "status", name, "--state", state, "--json"))
        assert status["accepted"] == n, status
        assert status["rejected_total"] - status["rejected"].get("duplicate", 0) == 0, status


def test_agents_discover_both_campaigns_and_others_skip(live):
    _, _, created, devices = live
    ids = {c["campaign_id"] for c in created.values()}
    for name, kind, metric, state, _, log in devices:
        text = log.read_text()
        ledger = read_ledger(state) or {"spent_milli": 0, "reports": {}}  # None: never written
        if metric == "temp":
            assert text.count("joined campaign temp-live") == 2, text
            assert {int(k.split(":")[0]) for k in ledger["reports"]} == ids, ledger
            assert ledger["spent_milli"] == 2000, ledger
        else:  # no `temp` provider: never takes part, spends nothing
            assert "skip campaign temp-live (metric temp not provided)" in text, text
            assert "skip campaign temp-live2 (metric temp not provided)" in text, text
            assert "published" not in text and "spent" not in text, text
            assert ledger["spent_milli"] == 0 and not ledger["reports"], ledger


def test_mean_within_its_interval(live):
    work, state, _, devices = live
    est = json.loads(cli("estimate", "temp-live", "--state", state, "--json"))
    assert est["n"] == SIMULATED + REAL
    (m,) = est["numeric"]["means"]
    counts = json.load(open(work / "truth.json"))["true_counts"]
    total = sum(float(k) * v for k, v in counts.items())
    assert sum(counts.values()) == SIMULATED
    # the real devices' readings: the MicroPython provider's first or second call (which
    # campaign an agent reports into first is the order the configs arrived in), the C program's
    firsts = []
    for name, kind, metric, _, _, log in devices:
        if metric == "temp" and kind == "mp":
            lines = [ln for ln in log.read_text().splitlines() if "joined campaign" in ln]
            firsts.append(20.25 if lines[0].endswith("temp-live metric temp") else 20.5)
    total += sum(firsts) + C_CLIENTS * C_READING
    true_mean = total / (SIMULATED + REAL)
    with Store(state) as store:
        mech = store.require_campaign("temp-live").mechanism(1)
    half = 1.959964 * math.sqrt(worst_report_variance(mech) / (SIMULATED + REAL)) * 62.5
    assert (m["ci_high"] - m["ci_low"]) / 2 == pytest.approx(half, rel=1e-4)
    f = mech.estimates(np.array([0, mech.cells - 1]))
    margin = REAL * float(f[1] - f[0]) / (SIMULATED + REAL) * 62.5
    assert m["ci_low"] + margin <= true_mean <= m["ci_high"] - margin, (m, true_mean, margin)


HEAP = r'''
import gc, json, sys
from ldp.agent import Agent
state = sys.argv[1]
with open(state + "/identity.json") as f:
    identity = json.load(f)
agent = Agent(identity, state, log=lambda event, detail="": None)
agent.metric("temp", lambda: 21.5)

class Out:
    def publish(self, topic, payload, qos=1):
        pass

out = Out()
with open(state + "/config.bin", "rb") as f:
    agent.on_message("ldp/heap/config", f.read())
agent.process_inbox()
agent.flush(out)
agent.resend_due(out)
gc.collect()
gc.disable()
before = gc.mem_alloc()
for _ in range(1000):
    agent.process_inbox()
    agent.flush(out)
    agent.resend_due(out)
print(len(agent.joined), gc.mem_alloc() - before)
'''


def test_agent_loop_allocates_nothing(tmp_path):
    """The agent's share of the session loop (inbox, flush, re-sends over the joined
    campaigns) allocates nothing per iteration once a campaign is joined: 1,000 iterations grow
    the heap by less than 1,000 bytes (one small object per iteration would be >= 16,000)."""
    from ldpfleet.core import config as campaign_config
    from support.devices import config_doc
    state = device_runner.prepare_device(tmp_path / "s", "heap-dev", SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=50000)
    (state / "config.bin").write_bytes(
        campaign_config.sign(dict(config_doc("heap"), metric="temp"), SIGNING_KEY))
    script = tmp_path / "heap.py"
    script.write_text(HEAP)
    proc = subprocess.run([device_runner.micropython_binary(), str(script), str(state)],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    joined, grown = map(int, proc.stdout.split())
    assert joined == 1 and grown < 1000, proc.stdout
