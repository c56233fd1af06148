"""The MicroPython client in recurring campaigns (protocol_spec/v2 §3.4, §5.4 `schedule`, §7),
on the real interpreter.

* Shared vectors (recurring.json): every `configs` case refused with the aggregator's field (or
  accepted), every `rounds` case's R and open round, every `reports` case's round-header bytes.
* A simulated clock (device/tests/recurring_sim.py, the device code in-process on MicroPython):
  for each memoised mechanism, an ldp.Agent whose provider returns a constant, alternating or
  always-new reading, and the flashed one-campaign Device, over 5 rounds with a re-delivered
  config and a reset mid-round: the same log, the same publish times, the same header bytes,
  the same ledger key set and enrolment state, and a lifetime spend equal to the enrolment charge
  (issue "Telemetry, not surveys", Done when); the provider is called once per round; a device
  started mid-campaign joins the round open then; a budget too small refuses before anything is
  drawn; a close drops the enrolment and the round memo.
* Real time against a private Mosquitto (test_recurring_devices_over_mqtt): Agents with
  different providers (one changing every round) and one-campaign Devices with different fixed
  values join a 10 s campaign mid-way, report round after round and behave identically.
"""
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ldpfleet.core import config as campaign_config
from ldpfleet.core import protocol, schedule
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.provision import device_runner
from support.brokers import PrivateMosquitto
from support.devices import SIGNING_KEY, ReportCollector, config_doc, read_ledger
from support.mp_stream import STREAM_SOURCE

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "protocol_spec" / "v2" / "vectors"
DEVICE_TESTS = ROOT / "device" / "tests"
MECHANISMS = {"loloha": {"eps1_milli": 1000, "g": 2}, "lgrr": {"eps1_milli": 1000},
              "losue": {"eps1_milli": 1000}, "lsue": {"eps1_milli": 1000},
              "lbitmean": {"eps1_milli": 1000, "s": 2}}
DOMAIN = {"type": "int", "size": 10}
EPS = 2000
# readings a provider returns, round after round (cycled): constant, alternating, a new one
# every round (out-of-domain and malformed ones included: they report ⊥ / 0, never refuse)
PATTERNS = {"constant": [3], "alternating": [3, 7], "always-new": [0, 1, 2, 3, 4, 5, 6, 8, 9],
            "junk": ["x", None, 1000, -1, 2.5]}


def run_mp(script, args, extra_path=None, timeout=120):
    env = device_runner.micropython_env()
    if extra_path:
        env["MICROPYPATH"] += ":" + str(extra_path)
    proc = subprocess.run([device_runner.micropython_binary(), str(script)] + [str(a) for a in args],
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# --- shared vectors --------------------------------------------------------------------------

def test_recurring_vectors_on_micropython(tmp_path):
    vec = json.loads((VECTORS / "recurring.json").read_text())
    run_mp(DEVICE_TESTS / "recurring_vectors.py", [VECTORS, tmp_path / "out.json"])
    got = json.loads((tmp_path / "out.json").read_text())
    want = [c["error"] for c in vec["configs"]]
    assert None in want and "schedule" in want and "phases.mechanism" in want and "phases" in want
    assert got["configs"] == want
    assert got["rounds"] == [[c["rounds"], c["round"]] for c in vec["rounds"]]
    assert {c["mechanism"] for c in vec["reports"]} == set(schedule.MEMOISED)
    assert got["reports"] == [c["report_hex"] for c in vec["reports"]]


# --- a simulated clock -----------------------------------------------------------------------

def recurring_doc(name, mechanism="loloha", start=None, every_s=10, rounds=5, delivery=None,
                  metric="fw_version"):
    now = int(time.time())
    return config_doc(name, phases=[{"phase": 1, "mechanism": mechanism, "eps_milli": EPS,
                                     "params": dict(MECHANISMS[mechanism])}],
                      domain=DOMAIN, metric=metric, delivery=delivery, not_before=now - 60,
                      not_after=now + 3600,
                      recurring={"start": now if start is None else start, "every_s": every_s,
                                 "rounds": rounds})


def charge_of(doc):
    ph = doc["phases"][0]
    mech = make_mechanism(ph["mechanism"], ph["eps_milli"],
                          campaign_config.mechanism_domain_size(doc, ph["mechanism"]),
                          salt=doc["salt"], campaign_id=doc["campaign_id"], phase=1,
                          **ph["params"])
    return mech, mech.enrolment_charge_milli(schedule.round_count(doc))


def simulate(tmp_path, tag, doc, steps, values, entry="agent", budget=100000, seed=4242,
             ledger=None):
    """Run recurring_sim.py: `steps` [[t, [payload...]] or [t, [payload...], restart]]; the
    payloads go to the campaign's config topic; `ledger`: a generation-1 ledger document to
    start from. Returns (output, ledger doc, state dir)."""
    state = device_runner.prepare_device(tmp_path / tag, "sim-dev", SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=budget)
    if ledger is not None:
        device_runner.write_ledger(state, ledger, 1)
    (tmp_path / "stream.py").write_text(STREAM_SOURCE)
    topic = "ldp/%s/config" % doc["campaign"]
    job = {"state": str(state), "entry": entry, "campaign": doc["campaign"],
           "metric": doc.get("metric"), "values": values, "seed": seed,
           "identity": json.loads((state / "identity.json").read_text()),
           "steps": [[s[0], [[topic, p.decode()] for p in s[1]]] + list(s[2:]) for s in steps]}
    (tmp_path / (tag + ".json")).write_text(json.dumps(job))
    out = tmp_path / (tag + ".out.json")
    run_mp(DEVICE_TESTS / "recurring_sim.py", [tmp_path / (tag + ".json"), out], extra_path=tmp_path)
    return json.loads(out.read_text()), read_ledger(state), state


def five_rounds(doc):
    """Before the start; each round's opening (and a turn inside it); round 2's config again
    and a reset inside round 2 (memo first: re-sent, nothing drawn); after the last round."""
    start, every = doc["schedule"]["start"], doc["schedule"]["every_s"]
    payload = campaign_config.sign(doc, SIGNING_KEY)
    steps = [[start - 5, [payload]], [start - 1, []]]
    for r in range(5):
        opens = start + r * every
        steps += [[opens, []], [opens + 3, []]]
        if r == 1:
            steps += [[opens + 4, [payload]], [opens + 5, [payload], True], [opens + 6, []]]
    steps += [[start + 5 * every, []], [start + 5 * every + 1, []]]
    return steps


def observed(out):
    """What an observer of the device sees: log, publish times, topics and headers."""
    return {"log": out["log"],
            "published": [[t, topic, payload[:32], len(payload)] for t, topic, payload in out["published"]]}


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_rounds_spend_and_behaviour_do_not_depend_on_the_values(tmp_path, mechanism):
    doc = recurring_doc("rec-" + mechanism, mechanism)
    mech, charge = charge_of(doc)
    cid = doc["campaign_id"]
    runs = {}
    for name, values in PATTERNS.items():
        runs[name] = simulate(tmp_path, name, doc, five_rounds(doc), values)
    runs["device"] = simulate(tmp_path, "device", doc, five_rounds(doc), [4], entry="device")
    ref_out, ref_ledger, _ = runs["constant"]
    events = [e for _, e, _ in ref_out["log"]]
    assert events.count("enrolled") == 1 and events.count("round") == 5, ref_out["log"]
    assert events.count("memo") == 2 and events[-1] == "rounds-done", ref_out["log"]
    assert "refused" not in events and "spent" not in events
    start = doc["schedule"]["start"]
    fresh = [p for p in ref_out["published"]]
    assert [t for t, _, _ in fresh] == [start, start + 10, start + 14, start + 15, start + 20,
                                        start + 30, start + 40]
    for t, topic, payload in fresh:  # round header (spec §3.4), a report the aggregator accepts
        report = bytes.fromhex(payload)
        one, rnd = schedule.split_round(report)
        assert report[3] == 1 and rnd == (t - start) // 10 + 1
        assert int.from_bytes(report[4:8], "little") == cid
        mech.check(one)
    for name, (out, ledger, _) in runs.items():
        # the Done-when item: the lifetime spend is the enrolment charge, whatever the values did
        assert ledger["spent_milli"] == charge, name
        assert ledger["enrol"] == {str(cid): {"state": ref_ledger["enrol"][str(cid)]["state"],
                                              "charge_milli": charge}}, name
        assert sorted(ledger) == sorted(ref_ledger), name
        assert ledger["bound"] == ref_ledger["bound"] and ledger["reports"] == {}
        assert ledger["rounds"][str(cid)][:2] == ref_ledger["rounds"][str(cid)][:2]
        assert ledger["rounds"][str(cid)][0] == 5
        if name == "device":  # the flashed Device: --once exits 0 after rounds-done
            assert out["code"] == 0 and out["calls"] == 0
            assert observed(out)["log"] == [e for e in ref_out["log"] if e[1] != "joined"]
            assert observed(out)["published"] == observed(ref_out)["published"]
        else:  # the provider is read once per fresh round report, never for a memo
            assert out["calls"] == 5, name
            assert observed(out) == observed(ref_out), name
    # the constant device's reports differ from the always-new one's somewhere (the value is used)
    bodies = {name: [p for _, _, p in out["published"]] for name, (out, _, _) in runs.items()}
    assert len({json.dumps(b) for b in bodies.values()}) > 1


def test_device_started_mid_campaign_joins_the_round_open_then(tmp_path):
    doc = recurring_doc("rec-mid", "lgrr")
    _, charge = charge_of(doc)
    start = doc["schedule"]["start"]
    payload = campaign_config.sign(doc, SIGNING_KEY)
    steps = [[start + 25, [payload]], [start + 29, []], [start + 30, []], [start + 40, []],
             [start + 50, []]]
    out, ledger, _ = simulate(tmp_path, "mid", doc, steps, [1, 2])
    rounds = [d for _, e, d in out["log"] if e == "round"]
    assert [r.split()[0] for r in rounds] == ["round=3", "round=4", "round=5"]
    assert ledger["spent_milli"] == charge  # min(classes, R) · ε∞: R = 5 rounds, not 3
    assert out["calls"] == 3 and out["log"][-1][1] == "rounds-done"


def test_unacknowledged_rounds_are_logged_undelivered(tmp_path):
    """With acknowledgements asked for and none arriving: re-sends of a round end at the next
    round's opening (`undelivered round=<r>`), those of the last round at not_after; then
    rounds-done and --once exits 0."""
    doc = recurring_doc("rec-noack", "lgrr", rounds=3,
                        delivery={"ack": True, "retry_s": 30, "retry_max_s": 60})
    start = doc["schedule"]["start"]
    payload = campaign_config.sign(doc, SIGNING_KEY)
    steps = [[start, [payload]], [start + 10, []], [start + 20, []], [start + 30, []],
             [doc["not_after"] - 1, []], [doc["not_after"] + 1, []], [doc["not_after"] + 2, []]]
    out, ledger, _ = simulate(tmp_path, "noack", doc, steps, [2], entry="device")
    got = [(t - start, e, d) for t, e, d in out["log"] if e in ("undelivered", "rounds-done")]
    assert got == [(10, "undelivered", "round=1"), (20, "undelivered", "round=2"),
                   (doc["not_after"] + 1 - start, "undelivered",
                    "round=3 (campaign deadline passed)"),
                   (doc["not_after"] + 2 - start, "rounds-done",  # the loop's next turn
                    "campaign_id=%d rounds=3" % doc["campaign_id"])], out["log"]
    assert out["code"] == 0 and len(out["published"]) == 3


def test_enrolment_is_one_ledger_generation(tmp_path):
    """Spec §3.4: spend, enrol[id] = {state, charge_milli} and the binding in one generation,
    before the round's memo (the next generation) and before anything is published."""
    doc = recurring_doc("rec-gen", "losue")
    _, charge = charge_of(doc)
    cid = str(doc["campaign_id"])
    start = doc["schedule"]["start"]
    out, _, state = simulate(tmp_path, "gen", doc, [[start + 1, [campaign_config.sign(doc, SIGNING_KEY)]]],
                             [5])
    gens = dict(device_runner.ledger_generations(state))
    assert sorted(gens) == [1, 2]
    enrolled, memo = gens[1], gens[2]
    assert enrolled["spent_milli"] == charge and enrolled["bound"] and "rounds" not in enrolled
    assert enrolled["enrol"][cid]["charge_milli"] == charge
    assert len(bytes.fromhex(enrolled["enrol"][cid]["state"])) == 11 * 2  # n = d + 1 rows of 2 bytes
    assert memo["enrol"] == enrolled["enrol"] and memo["spent_milli"] == charge
    nonce = int.from_bytes(bytes.fromhex(out["published"][0][2])[8:12], "little")
    assert memo["rounds"][cid] == [1, nonce, out["published"][0][2]]


def test_budget_too_small_refuses_before_drawing(tmp_path):
    doc = recurring_doc("rec-poor", "loloha")
    _, charge = charge_of(doc)
    start = doc["schedule"]["start"]
    payload = campaign_config.sign(doc, SIGNING_KEY)
    out, ledger, state = simulate(tmp_path, "poor", doc, [[start + 1, [payload]], [start + 11, []]],
                                  [1], budget=charge - 1)
    assert any(e == "refused" and d.startswith("config lifetime_budget:") for _, e, d in out["log"])
    assert out["published"] == [] and out["calls"] == 0
    assert ledger is None  # generation 0 only: nothing spent, drawn or memoised
    assert max(g for g, _ in device_runner.ledger_generations(state)) == 0


def test_a_clock_going_back_never_reports_a_round_twice(tmp_path):
    """The clock steps back two rounds and forward again (NTP, a reset RTC): a round the ledger's
    memo is past is skipped, the memo's round is re-sent, never made again with another nonce
    (spec §3.4: one nonce per device and round; another would be the aggregator's
    second_report)."""
    doc = recurring_doc("rec-clock", "lgrr")
    start = doc["schedule"]["start"]
    payload = campaign_config.sign(doc, SIGNING_KEY)
    steps = [[start + 1, [payload]], [start + 21, []], [start + 11, []], [start + 1, []],
             [start + 22, []], [start + 31, []]]
    out, ledger, _ = simulate(tmp_path, "clock", doc, steps, [1, 2, 3])
    by_round = {}
    for _t, _topic, hexed in out["published"]:
        by_round.setdefault(schedule.split_round(bytes.fromhex(hexed))[1], set()).add(hexed)
    assert sorted(by_round) == [1, 3, 4], out["log"]
    assert all(len(v) == 1 for v in by_round.values()), out["log"]
    assert ledger["rounds"][str(doc["campaign_id"])][0] == 4


def test_a_replay_after_the_close_left_the_closed_list_never_enrols_again(tmp_path):
    """A device enrolled in a recurring campaign, then closed: the close dropped `enrol` and
    `rounds` but the binding stays; 64 later closes evicted the closed entry (closed_floor =
    its not_before, spec §7.3). A replay of the same signed config passes the binding (same
    digest) and the floor (bound ids pass): it must still not enrol, i.e. spend, again."""
    doc = recurring_doc("rec-replay", "loloha")
    _, charge = charge_of(doc)
    start, cid = doc["schedule"]["start"], str(doc["campaign_id"])
    import hashlib
    digest = hashlib.sha256(campaign_config.canonical(doc).encode()).digest()[:16].hex()
    ledger = {"spent_milli": charge, "reports": {}, "closed": [],
              "closed_floor": doc["not_before"], "bound": {cid: digest}}
    out, after, _ = simulate(tmp_path, "replay", doc,
                             [[start + 1, [campaign_config.sign(doc, SIGNING_KEY)]],
                              [start + 11, []]], [1], ledger=ledger)
    assert out["published"] == [] and out["calls"] == 0, out["log"]
    assert any(e == "refused" and d.startswith("config closed:") for _, e, d in out["log"])
    assert after["spent_milli"] == charge and cid not in after.get("enrol", {})


def test_close_drops_enrolment_and_round_memo(tmp_path):
    doc = recurring_doc("rec-close", "loloha")
    _, charge = charge_of(doc)
    start, cid = doc["schedule"]["start"], doc["campaign_id"]
    payload = campaign_config.sign(doc, SIGNING_KEY)
    close = campaign_config.sign(campaign_config.make_close(doc), SIGNING_KEY)
    steps = [[start + 1, [payload]], [start + 11, []], [start + 12, [close]], [start + 21, []],
             [start + 22, [payload]]]
    out, ledger, _ = simulate(tmp_path, "close", doc, steps, [1])
    events = [e for _, e, _ in out["log"]]
    assert events.count("round") == 2 and "closed" in events, out["log"]
    assert events[-1] == "refused" and out["log"][-1][2].startswith("config closed:")  # a replay
    assert len(out["published"]) == 2 and out["calls"] == 2
    assert ledger["spent_milli"] == charge  # the charge stays
    assert str(cid) not in ledger.get("enrol", {}) and str(cid) not in ledger.get("rounds", {})
    assert [cid, doc["not_before"]] in ledger["closed"]
    # the flashed Device in --once mode exits 0 at the close
    out, _, _ = simulate(tmp_path, "close-dev", doc, steps[:3], [1], entry="device")
    assert out["code"] == 0 and out["log"][-1][1] == "closed"


# --- real time, a private broker ---------------------------------------------------------------

DEVICE_DRIVER = r'''
import sys
import ldp.device as D

''' + STREAM_SOURCE + r'''
_init = D.Device.__init__
def init(self, *args, **kw):
    _init(self, *args, **kw)
    self.rand = Stream(12345)
D.Device.__init__ = init
'''
"""The test-only "OS randomness" seam (as test_device_equivalence.py): every run draws the same
words, so runs may differ only where the value goes, the report body."""

APP_DRIVER = DEVICE_DRIVER + r'''
from ldp.app import main
sys.exit(main(sys.argv[1:]))
'''

AGENT_DRIVER = DEVICE_DRIVER + r'''
import json
from ldp.agent import Agent
state, port, run_for = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(state + "/identity.json") as f:
    identity = json.load(f)
with open(state + "/value.json") as f:
    values = json.load(f)["values"]
calls = [0]

def read():  # the application's provider: the next reading of its list, round after round
    calls[0] += 1
    return values[(calls[0] - 1) % len(values)]

agent = Agent(identity, state)
agent.metric("fw_version", read)
agent.metric("unused_metric", read)
sys.exit(agent.run("127.0.0.1", port, run_for=run_for))
'''


class AckingCollector(ReportCollector):
    """Acknowledges every report as the aggregator would (a plain 12-byte ack, spec §6) and
    keeps each report's arrival time."""

    def __init__(self, port):
        self.arrivals = []
        super().__init__(port)

    def _on_message(self, client, userdata, msg):
        super()._on_message(client, userdata, msg)
        parts = msg.topic.split("/")
        if len(parts) == 4 and parts[2] == "r" and parts[1] != "sentinel":
            self.arrivals.append((time.time(), parts[3], bytes(msg.payload)))
            client.publish(protocol.ack_topic(parts[1], parts[3]),
                           protocol.ack_for(bytes(msg.payload), protocol.ACK_ACCEPTED), qos=0)


PACKET = re.compile(r"^(Received|Sending) (\w+) (?:from|to) (\S+)(.*)$")


def broker_packets(broker):
    """device id -> the packets the broker logged from/to it, the id normalised."""
    out = {}
    with open(os.path.join(broker.dir, "mosquitto.log")) as f:
        for line in f:
            m = PACKET.match(line.strip())
            if m and m.group(3).startswith("rt"):
                dev = m.group(3)
                out.setdefault(dev, []).append("%s %s%s" % (m.group(1), m.group(2),
                                                            m.group(4).replace(dev, "DEV")))
    return out


def run_measured(argv, env):
    """Run to the end; (exit code, output, CPU seconds, wall seconds) of the process."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    chunks = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()))
    reader.start()
    return proc, began, reader, chunks


def finish(run, timeout=60):
    proc, began, reader, chunks = run
    deadline = time.monotonic() + timeout
    while True:  # os.wait4: the child's own CPU time (Popen.wait would reap it first)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError("device did not finish")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(10)
    return (proc.returncode, "".join(chunks), usage.ru_utime + usage.ru_stime,
            time.monotonic() - began)


def test_recurring_devices_over_mqtt(tmp_path):
    """Rounds of 10 s, the device started in round 2 (5 s left): Agents whose provider returns a
    constant or a new reading every round, and --once Devices flashed with different values,
    report rounds 2 and 3 (each acknowledged), log rounds-done and behave identically: log,
    packets, publish times, header bytes, ledger keys and spend (the enrolment charge). Waiting
    for round 3 takes little CPU."""
    now = int(time.time())
    doc = recurring_doc("rec-live", "loloha", start=now - 15, rounds=3,
                        delivery={"ack": True, "retry_s": 30, "retry_max_s": 60, "spread_s": 2})
    _, charge = charge_of(doc)
    start, cid = doc["schedule"]["start"], doc["campaign_id"]
    (tmp_path / "app_driver.py").write_text(APP_DRIVER)
    (tmp_path / "agent_driver.py").write_text(AGENT_DRIVER)
    conf = "log_type all\nlog_timestamp false\nconnection_messages false\n"
    runs = {}
    with PrivateMosquitto(extra_conf=conf) as broker:
        collector = AckingCollector(broker.port)
        try:
            collector.publish("ldp/rec-live/config", campaign_config.sign(doc, SIGNING_KEY))
            run_for = start + 31.5 - time.time()  # round 3 closes at start + 30
            cases = {"agent-constant": ("agent", [3]), "agent-live": ("agent", [1, 4, 9, 0]),
                     "device-3": ("device", 3), "device-8": ("device", 8)}
            for i, (name, (kind, value)) in enumerate(sorted(cases.items())):
                dev = "rt%d" % i
                state = device_runner.prepare_device(tmp_path / name, dev, SIGNING_KEY,
                                                     eps_cap_milli=8000, lifetime_budget_milli=100000)
                if kind == "agent":
                    (state / "value.json").write_text(json.dumps({"values": value}))
                    argv = [device_runner.micropython_binary(), str(tmp_path / "agent_driver.py"),
                            str(state), str(broker.port), "%.1f" % run_for]
                else:
                    (state / "value.json").write_text(json.dumps({"campaign": "rec-live",
                                                                  "value": value}))
                    argv = [device_runner.micropython_binary(), str(tmp_path / "app_driver.py"),
                            "--state", str(state), "--host", "127.0.0.1", "--port",
                            str(broker.port), "--once", "--timeout", "40"]
                runs[name] = (dev, state, kind,
                              run_measured(argv, device_runner.micropython_env()))
            results = {}
            for name, (dev, state, kind, run) in runs.items():
                code, out, cpu, wall = finish(run)
                results[name] = {"dev": dev, "kind": kind, "code": code, "cpu": cpu, "wall": wall,
                                 "log": out.replace(dev, "DEV").splitlines(),
                                 "ledger": read_ledger(state)}
            collector.barrier()
        finally:
            collector.close()
        packets = broker_packets(broker)
    arrivals = collector.arrivals
    by_kind = {}
    for name, r in results.items():
        assert r["code"] == 0, (name, r["log"])
        events = [line.split()[2] for line in r["log"] if line.startswith("ldp DEV ")]
        assert events.count("enrolled") == 1 and events.count("acked") == 2, (name, r["log"])
        assert "rounds-done" in events and "refused" not in events, (name, r["log"])
        rounds = [line.split()[3] for line in r["log"] if " round round=" in line]
        assert rounds == ["round=2", "round=3"], (name, r["log"])
        ledger = r["ledger"]
        assert ledger["spent_milli"] == charge and sorted(ledger) == sorted(
            results["device-3"]["ledger"])
        assert ledger["enrol"][str(cid)]["charge_milli"] == charge
        assert ledger["rounds"][str(cid)][0] == 3
        mine = [(t, p) for t, d, p in arrivals if d == r["dev"]]
        assert [schedule.split_round(p)[1] for _, p in mine] == [2, 3], name
        # publish times: each round's report at the same offset from the round's opening
        r["times"] = [t - schedule.round_window(doc, schedule.split_round(p)[1])[0] for t, p in mine]
        r["headers"] = [p[:16].hex() for _, p in mine]
        r["packets"] = packets.get(r["dev"], [])
        assert any(p.startswith("Received PUBLISH") for p in r["packets"])
        # waiting for round 3 (over 5 s of the run) costs little CPU: the loop sleeps in poll
        assert r["cpu"] < 0.25 * r["wall"], (name, r["cpu"], r["wall"])
        by_kind.setdefault(r["kind"], []).append(r)
    for kind, group in by_kind.items():
        ref = group[0]
        for r in group[1:]:
            assert r["log"] == ref["log"], kind
            assert r["packets"] == ref["packets"], kind
            assert r["headers"] == ref["headers"], kind
            assert r["ledger"]["enrol"] == ref["ledger"]["enrol"]
            for a, b in zip(r["times"], ref["times"]):
                assert abs(a - b) < 1.0, (kind, r["times"], ref["times"])
    # the agent's log is the device's plus discovery (joined, the skipped metric-less configs)
    agent_log = [line for line in by_kind["agent"][0]["log"] if " joined " not in line]
    device_log = [line for line in by_kind["device"][0]["log"]]
    assert [l for l in agent_log if " round" in l or " enrolled " in l] == \
        [l for l in device_log if " round" in l or " enrolled " in l]


HEAP = r'''
import gc, json, sys
from ldp.agent import Agent
state = sys.argv[1]
with open(state + "/identity.json") as f:
    identity = json.load(f)
agent = Agent(identity, state, log=lambda event, detail="": None)
agent.metric("fw_version", lambda: 3)

class Out:
    def publish(self, topic, payload, qos=1):
        pass

out = Out()
with open(state + "/config.bin", "rb") as f:
    agent.on_message("ldp/rec-heap/config", f.read())
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
print(len(agent.joined), len(agent.joined[0].ledger.rounds), gc.mem_alloc() - before)
'''


def test_waiting_for_the_next_round_allocates_little(tmp_path):
    """Between rounds the loop reads the clock only when a boundary may have passed (a clock
    read allocates): 1,000 loop turns inside a round grow the heap by less than 1,000 bytes."""
    now = int(time.time())
    doc = recurring_doc("rec-heap", "loloha", start=now - 5, every_s=600)
    state = device_runner.prepare_device(tmp_path / "s", "heap-dev", SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=50000)
    (state / "config.bin").write_bytes(campaign_config.sign(doc, SIGNING_KEY))
    (tmp_path / "heap.py").write_text(HEAP)
    proc = run_mp(tmp_path / "heap.py", [state])
    joined, memos, grown = map(int, proc.stdout.split())
    assert joined == 1 and memos == 1 and grown < 1000, proc.stdout
