"""PEM with real devices end to end (protocol_spec/v2 §3.5, §5.4 `metric`): a private
mosquitto and `ldpfleet serve`; 3 MicroPython agents (`ldp.agent.Agent` providing `crash_sig`)
and 2 C clients (`--metric crash_sig=PROGRAM`) whose providers return strings -- a frequent
one of the simulated fleet, a multi-byte one cut at max_len, one longer than max_len, and one
no simulated device holds (never seen when the campaign was created) -- are started BEFORE
the campaign exists. `campaign create --domain strings:max_len=8 --metric crash_sig`, then
`ldpfleet fleet` (12,000 simulated devices over a strings file) in phase 1; `campaign advance`
publishes the candidates' keys and the fleet's phase 2 follows. The real devices take part in
the phase the public split puts them in (the ids are chosen so that both clients have a
device in each phase): phase-1 devices report their prefix at their group's level as soon as
they discover the campaign, phase-2 devices the psgrr report over the candidates once the
phase-2 message is published. Every report is accepted (nothing rejected but duplicates), each
real device spent exactly its phase's eps once, and the campaign's answer finds the simulated
top strings."""
import json
import os
import subprocess
import sys
import time

import pytest

from ldpfleet.core.protocols import ldplcm
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.provision import device_runner
from support.brokers import PrivateMosquitto
from support.c_client import build_client, client_env, metric_program
from support.devices import SIGNING_KEY, read_ledger, stop_processes, write_key_files
from support.service import ServeProcess

SIMULATED = 12000
SALT = 12345
PPM = 900000  # campaign create's public split: 90 % in phase 1
EPS_MILLI = 3000
RUN_S = 60
# the simulated fleet's strings (a strings FILE: `string weight`)
FLEET = [("oom-kill", 40), ("watchdog", 25), ("panic", 15), ("bus-error", 10),
         ("dépassé", 6), ("segv", 4)]
TOP = ["oom-kill", "watchdog", "panic"]
NEVER_SEEN = "gpu hang"  # no simulated device holds it
# (kind, provider's string): MicroPython agents and C clients
REAL = [("mp", "oom-kill"), ("mp", "日本語テキスト"), ("mp", NEVER_SEEN),
        ("c", "watchdog timeout after 30 s"), ("c", NEVER_SEEN)]

DRIVER = r'''
import sys
import json
from ldp.agent import Agent
state, port, run_for, value = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
with open(state + "/identity.json") as f:
    identity = json.load(f)
with open(state + "/value.json") as f:
    value = json.load(f)["value"]
agent = Agent(identity, state)
agent.metric("crash_sig", lambda: value)
sys.exit(agent.run("127.0.0.1", port, run_for=run_for))
'''


def cli(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *args], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def device_names():
    """Ids for REAL: the first MicroPython agent and the first C client in phase 2, the others
    in phase 1 (the public split H(id, salt) mod 10^6 < sample_rate_ppm, spec §5.4)."""
    names, i = [], 0
    for j, (kind, _) in enumerate(REAL):
        want_phase2 = j in (0, 3)
        while True:
            name = "pem-%s%d" % (kind, i)
            i += 1
            if ldplcm.in_phase1(name, SALT, PPM) != want_phase2:
                names.append(name)
                break
    return names


def start_devices(work, port):
    """(name, kind, value, phase, state, process, log path) of every real device."""
    driver = work / "agent_driver.py"
    driver.write_text(DRIVER)
    out = []
    for name, (kind, value) in zip(device_names(), REAL):
        state = device_runner.prepare_device(work / name, name, SIGNING_KEY, eps_cap_milli=8000,
                                             lifetime_budget_milli=100000)
        log = work / (name + ".log")
        if kind == "mp":  # the value through a file: the unix port's argv is bytes-limited
            (state / "value.json").write_text(json.dumps({"value": value}))
            argv = [device_runner.micropython_binary(), str(driver), str(state), str(port),
                    str(RUN_S), "-"]
            env = device_runner.micropython_env()
        else:
            prog = metric_program(state / "read_sig", value)
            argv = [str(build_client()), "--host", "127.0.0.1", "--port", str(port),
                    "--state-dir", str(state), "--metric", "crash_sig=%s" % prog,
                    "--timeout", str(RUN_S)]
            env = client_env()
        f = open(log, "w")
        proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
        phase = 1 if ldplcm.in_phase1(name, SALT, PPM) else 2
        out.append((name, kind, value, phase, state, proc, log))
    deadline = time.monotonic() + 30
    for entry in out:  # every device is connected (and subscribed) before the campaign exists
        while "connected" not in entry[6].read_text():
            assert entry[5].poll() is None and time.monotonic() < deadline, entry[6].read_text()
            time.sleep(0.1)
    return out


def settled(total):
    return lambda c: sum(v for k, v in c.items() if k not in ("received", "duplicate")) >= total


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("pem-devices")
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    key_file = work / "k.pem"
    key = write_key_files(key_file)
    fleet_file = work / "sigs.txt"
    fleet_file.write_text("".join("%s %d\n" % (s, w) for s, w in FLEET))
    state = "sqlite:///" + str(work / "state.db")
    out = {"work": work, "state": state}
    with PrivateMosquitto() as broker:
        url = "mqtt://127.0.0.1:%d" % broker.port
        serve = ServeProcess(url, state, log_path=str(work / "serve.log")).start()
        devices = start_devices(work, broker.port)
        out["devices"] = devices
        real1 = sum(d[3] == 1 for d in devices)
        try:
            out["created"] = json.loads(cli(
                "campaign", "create", "--broker", url, "--state", state, "--signing-key",
                str(key_file), "--name", "sigs", "--domain", "strings:max_len=8", "--epsilon",
                "3", "--top", "5", "--salt", str(SALT), "--metric", "crash_sig", "--json"))
            serve.wait_counts("sigs", settled(real1), timeout=30)
            opts = dict(devices=SIMULATED, dist=str(fleet_file), seed=5)
            first = run_fleet(url, "sigs", key, FleetOptions(phase=1, **opts))
            serve.wait_counts("sigs", settled(real1 + first.sent), timeout=30)
            out["advanced"] = json.loads(cli("campaign", "advance", "sigs", "--state", state,
                                             "--broker", url, "--json"))
            serve.wait_counts("sigs", settled(len(devices) + first.sent), timeout=30)
            second = run_fleet(url, "sigs", key, FleetOptions(phase=2, **opts))
            total = len(devices) + first.sent + second.sent
            serve.wait_counts("sigs", settled(total), timeout=30)
            time.sleep(0.5)  # anything more a device would send arrives (it must not)
            out.update(first=first, second=second, total=total)
        finally:
            stop_processes([d[5] for d in devices])
            serve.stop()
    out["status"] = json.loads(cli("campaign", "status", "sigs", "--state", state, "--json"))
    out["answer"] = json.loads(cli("estimate", "sigs", "--state", state, "--json"))
    return out


def test_every_report_accepted(run):
    status = run["status"]
    assert status["accepted"] == run["total"], status
    assert status["rejected_total"] - status["rejected"].get("duplicate", 0) == 0, status
    real2 = sum(d[3] == 2 for d in run["devices"])
    assert [p["reports"] for p in status["phases"]] == [
        run["first"].sent + len(run["devices"]) - real2, run["second"].sent + real2]


def test_real_devices_report_in_their_phase_once(run):
    cid = run["created"]["config"]["campaign_id"]
    phases = {d[3] for d in run["devices"]}
    assert phases == {1, 2} and {(d[1], d[3]) for d in run["devices"]} >= {("mp", 2), ("c", 2)}
    for name, kind, value, phase, state, _, log in run["devices"]:
        text = log.read_text()
        assert "joined campaign sigs metric crash_sig" in text, text
        assert "published phase=%d" % phase in text, text
        assert "published phase=%d" % (3 - phase) not in text, text
        ledger = read_ledger(state)
        assert sorted(ledger["reports"]) == ["%d:%d" % (cid, phase)], ledger
        assert ledger["spent_milli"] == EPS_MILLI, ledger
        if phase == 2:
            assert "accepted phase2 campaign_id=%d candidates=" % cid in text, text


def test_the_answer_finds_the_top_strings(run):
    answer = run["answer"]
    assert answer["protocol"] == "pem" and answer["n"] == run["second"].sent + sum(
        d[3] == 2 for d in run["devices"])  # the validated phase-2 answer
    rows = {r["item"]: r for r in answer["items"]}
    for s in TOP:
        assert s in rows and not rows[s]["noise"], (s, answer["items"])
    assert [r["item"] for r in answer["items"][:2]] == TOP[:2]
    assert NEVER_SEEN not in rows  # 2 devices of 12,005: nowhere near the noise
