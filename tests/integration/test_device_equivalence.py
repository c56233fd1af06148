"""Observational equivalence (spec §7.1): nothing a device does may depend on its value.

Each client (the real MicroPython interpreter and the C client) runs once per value of a small
domain, plus out-of-domain values (too large, negative, wrong type, no value, a list) and, for
set-valued campaigns, sets of every size 0..64 (the set capacity), sets entirely or partly out
of the domain, with repeats, longer than the capacity, and every overlap with the phase-2
candidate list (none, one, all, a subset, a superset), for every mechanism and phase (one-phase campaigns, LDPMiner's sampling SH then sampling RAPPOR /
SH, SVIM's padding-and-sampling GRR / OLH over the candidates, LDPLCM's learned-sketch phase 2,
`shc`'s correlated phases). Every run gets the SAME "OS randomness" (a test-only seam:
a driver script on MicroPython, LDPC_TEST_RANDOM_SEED in the C client's test build), so the
runs may differ only where the value legitimately goes: the report body. The test asserts that
everything else is identical across values: the exit code, every log line, every MQTT packet
the device sends as the broker logs it (type, QoS, retain, message id, topic, length), every
header field of every report, and the ledger's spend.

`shc` phase 2 (spec §3.1) reads its phase-1 memo and ledger bit, never the value: devices with
the same ledger and the same randomness send the SAME phase-2 bytes whatever their values (both
clients), and the MicroPython device makes its phase-2 report with a value that raises on any
use.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from support.brokers import PrivateMosquitto
from support.c_client import build_client, client_cmd, client_env, metric_program
from support.devices import SIGNING_KEY, ReportCollector, config_doc
from support.mp_stream import STREAM_SOURCE
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger
from ldpfleet.core import protocol, strings_domain
from ldpfleet.core.protocols import ldplcm, ldpminer

HERE = Path(__file__).resolve().parent
DEVICE_ID = "eq-dev"
PARALLEL = 16  # device processes at a time

DRIVER = r'''
import sys
import ldp.device as D

''' + STREAM_SOURCE + r'''
_init = D.Device.__init__
def init(self, *args, **kw):
    _init(self, *args, **kw)
    self.rand = Stream(12345)
D.Device.__init__ = init

from ldp.app import main
sys.exit(main(sys.argv[1:]))
'''

AGENT_DRIVER = DRIVER.replace("""from ldp.app import main
sys.exit(main(sys.argv[1:]))""", r"""import json
from ldp.agent import Agent
state, port, run_for = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(state + "/identity.json") as f:
    identity = json.load(f)
with open(state + "/value.json") as f:
    value = json.load(f)["value"]
calls = [0]

def read():
    # the application's provider: "RAISE" raises, "LIVE" changes on every call
    calls[0] += 1
    if value == "RAISE":
        raise OSError(5, "sensor gone")
    if value == "LIVE":
        return 20.0 + 0.25 * calls[0]
    return value

agent = Agent(identity, state)
agent.metric("temp", read)
agent.metric("unused_metric", read)
sys.exit(agent.run("127.0.0.1", port, run_for=run_for))""")
"""The same seam for an `ldp.agent.Agent` whose provider of metric `temp` returns the value
(spec §5.4: discovery through `ldp/+/config`, the reading taken at report time); it runs for
AGENT_RUN_S seconds."""
AGENT_RUN_S = 8
INT_VALUES = [0, 1, 2, 3, 4, 1000, 2 ** 32 - 1, -1, "x", None, [1, 2], 2.5, True]
STR_ITEMS = ["idle", "busy", "hot"]
STR_VALUES = STR_ITEMS + ["cold", "", 3, None, ["idle"]]
SET_CAPACITY = 64  # identity set_capacity default (spec §7.1)
SET_DOMAIN = 2 * SET_CAPACITY
SET_CANDIDATES = [1, 2, 5]  # the phase-2 list of the set campaigns
SET_VALUES = ([list(range(k)) for k in range(SET_CAPACITY + 1)]  # every size, in the domain
              + [list(range(SET_DOMAIN, SET_DOMAIN + SET_CAPACITY)), [SET_DOMAIN + 71],  # outside
                 [7, 9, 1000, 1, 99], [2, 2], [2] * SET_CAPACITY, [1, 2] * 32,  # repeats
                 None, 4, ["a", 1], [True, -1, 2.5, "", [1]],  # not sets / wrong types
                 list(range(70)) + [1, 2], [99] * 64 + [1, 2],  # longer than the capacity
                 # overlaps with the candidates: none, one, all (exactly), a subset, a superset
                 [10, 11, 12], [99, 5], [5, 2, 1], [2], [9, 1, 8, 2, 7, 5, 6]])
PEM_MAX_LEN = 8
# strings campaigns (spec §3.5): shorter and longer than max_len, ASCII and multi-byte (a cut
# inside a character, an astral one), empty, and values that are not strings
PEM_VALUES = ["hello", "a string far longer than max_len, so it is cut", "", "exactly8", "héllo wörld",
              "日本語テキスト", "\U0001F600 smile", None, 42, ["hello"]]
PEM_CANDIDATES = ["hello", "exactly8", "héllo w"]
LCM_MODEL = ldplcm.IntModel(scale_bits=0, init=0, boundary=5, roots=(0, 3), split=(1, 5, 4, 2, -3, 0),
                            right=(2, -1, -1, 5, -1, -1))


def one_phase(mechanism, params, domain):
    return config_doc("eq-" + mechanism, mechanism=mechanism, eps_milli=2000, params=params,
                      domain=domain)


def campaigns():
    """(name, config, phase-2 body or None, values)."""
    int4 = {"type": "int", "size": 4}
    strd = {"type": "str", "items": STR_ITEMS}
    out = []
    for mech, params in [("grr", {}), ("olh", {"g": 4}), ("flh", {"g": 4, "kp": 8}), ("oue", {}),
                         ("cms", {"k": 4, "m": 16}), ("hcms", {"k": 4, "m": 16})]:
        out.append((mech + "-int", one_phase(mech, params, int4), None, INT_VALUES))
    out.append(("grr-str", config_doc("eq-grr-str", mechanism="grr", eps_milli=2000, params={},
                                      domain=strd), None, STR_VALUES))
    out.append(("olh-str", config_doc("eq-olh-str", mechanism="olh", eps_milli=2000,
                                      params={"g": 4}, domain=strd), None, STR_VALUES))
    sets = {"type": "int", "size": SET_DOMAIN}
    for phase2 in ("srappor", "sh"):
        phases = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": {"m": 8, "l": 2}},
                  {"phase": 2, "mechanism": phase2, "eps_milli": 1000,
                   "params": {"l": 2} if phase2 == "srappor" else {"m": 8, "l": 2}}]
        doc = config_doc("eq-miner-" + phase2, phases=phases, domain=sets)
        p2 = campaign_config.make_phase2(doc, candidates=SET_CANDIDATES)
        out.append(("miner-" + phase2, doc, p2, SET_VALUES))
    # padding-and-sampling oracles: one phase over the int domain (no list), and SVIM's public
    # split (device_ids picks phase-2 devices: the set trimmed to the signed candidates)
    out.append(("psgrr-int", one_phase("psgrr", {"l": 2}, sets), None, SET_VALUES))
    out.append(("psolh-int", one_phase("psolh", {"l": 2, "g": 4}, sets), None, SET_VALUES))
    for first, second in (("psolh", "psgrr"), ("psgrr", "psolh")):
        params = {"psgrr": {}, "psolh": {"g": 4}}
        phases = [{"phase": 1, "mechanism": first, "eps_milli": 1000, "sample_rate_ppm": 500000,
                   "params": dict(params[first], l=1)},
                  {"phase": 2, "mechanism": second, "eps_milli": 1000, "sample_rate_ppm": 500000,
                   "params": dict(params[second], l=2)}]
        doc = config_doc("eq-svim-" + second, phases=phases, domain=sets)
        p2 = campaign_config.make_phase2(doc, candidates=SET_CANDIDATES)
        out.append(("svim-" + second, doc, p2, SET_VALUES))
    # shc (spec §3.1): both phases in one run, phase 2 from the ledger (ldpminer-sh-opt)
    doc = config_doc("eq-miner-shc", phases=ldpminer.campaign_phases("lm-sho", 2000, 2, 3, 8),
                     domain=sets)
    p2 = campaign_config.make_phase2(doc, candidates=SET_CANDIDATES)
    out.append(("miner-shc", doc, p2, SET_VALUES))
    ppm = 500000
    phases = [{"phase": 1, "mechanism": "cms", "eps_milli": 1000, "sample_rate_ppm": ppm,
               "params": {"k": 4, "m": 16}},
              {"phase": 2, "mechanism": "lcm", "eps_milli": 1000, "sample_rate_ppm": ppm,
               "params": {"k": 4, "m": 16}}]
    doc = config_doc("eq-lcm", phases=phases, domain=int4)
    p2 = campaign_config.make_phase2(doc, model=ldplcm.model_to_doc(LCM_MODEL))
    out.append(("ldplcm", doc, p2, INT_VALUES))
    # PEM over a strings domain (spec §3.5): phase 1 (pem: FLH over the prefix key of the
    # device's public group) and phase 2 (psgrr l = 1 over the candidates' keys), each observed
    # on devices the public split puts there (device_ids: a campaign name ending -p1 / -p2)
    for phase in (1, 2):
        pem = [{"phase": 1, "mechanism": "pem", "eps_milli": 2000, "sample_rate_ppm": 500000,
                "params": {"g": 8, "kp": 16, "levels": [8, 24, 40, 64]}},
               {"phase": 2, "mechanism": "psgrr", "eps_milli": 2000, "sample_rate_ppm": 500000,
                "params": {"l": 1}}]
        doc = config_doc("eq-pem-p%d" % phase, phases=pem,
                         domain={"type": "strings", "max_len": PEM_MAX_LEN})
        keys = [strings_domain.code_key(strings_domain.code_of(v, PEM_MAX_LEN))
                for v in PEM_CANDIDATES]
        out.append(("pem-p%d" % phase, doc, campaign_config.make_phase2(doc, candidates=keys),
                    PEM_VALUES))
    # the first-publish spread (spec §6): its wait is drawn from the OS RNG after the report is
    # made, logged with its length, and must be the same for every value
    spread = {"ack": False, "retry_s": 30, "retry_max_s": 3600, "spread_s": 2}
    out.append(("olh-spread", config_doc("eq-spread", mechanism="olh", eps_milli=2000,
                                         params={"g": 4}, domain=int4, delivery=spread),
                None, INT_VALUES))
    return out


def device_ids(doc, count):
    """Device ids that the campaign's public sampling rule (if any) puts in phase 2, so that
    the LDPLCM runs observe the model path; ids differ per value only to run in parallel, and
    are normalised out of every observation."""
    ppm = next((ph["sample_rate_ppm"] for ph in doc["phases"] if "sample_rate_ppm" in ph), None)
    phase1 = doc["campaign"].endswith("-p1")  # PEM's phase-1 campaign: phase-1 devices
    out, i = [], 0
    while len(out) < count:
        name = "eq%d" % i
        i += 1
        if ppm is None or ldplcm.in_phase1(name, doc["salt"], ppm) == phase1:
            out.append(name)
    return out


def micropython_cmd(work, state, port, campaign, value):
    """The value goes through the state's value.json, as on a board: this MicroPython unix
    build aborts ("uncaught NLR") on a command-line argument of 256 bytes or more."""
    driver = work / "eq_driver.py"
    if not driver.exists():
        driver.write_text(DRIVER)
    (Path(state) / "value.json").write_text(json.dumps({"campaign": campaign, "value": value}))
    argv = [device_runner.micropython_binary(), str(driver), "--state", str(state), "--host",
            "127.0.0.1", "--port", str(port), "--campaign", campaign, "--once", "--timeout", "30"]
    return argv, device_runner.micropython_env()


def agent_cmd(work, state, port, campaign, value):
    """An Agent providing metric `temp` (the campaign's config must name it)."""
    driver = work / "eq_agent_driver.py"
    if not driver.exists():
        driver.write_text(AGENT_DRIVER)
    (Path(state) / "value.json").write_text(json.dumps({"value": value}))
    argv = [device_runner.micropython_binary(), str(driver), str(state), str(port), str(AGENT_RUN_S)]
    return argv, device_runner.micropython_env()


def c_agent_cmd(work, state, port, campaign, value):
    """The C client with `--metric temp=PROGRAM` (and one metric no campaign asks for), PROGRAM
    printing the value; it runs for AGENT_RUN_S seconds."""
    prog = metric_program(Path(state) / "read_temp", value)
    argv = [str(build_client()), "--host", "127.0.0.1", "--port", str(port), "--state-dir", str(state),
            "--metric", "temp=%s" % prog, "--metric", "unused_metric=/bin/false",
            "--timeout", str(AGENT_RUN_S)]
    return argv, dict(client_env(), LDPC_TEST_RANDOM_SEED="12345")


def c_cmd(work, state, port, campaign, value):
    argv = client_cmd(build_client(), state, port, campaign, value, once=True, timeout=30)
    return argv, dict(client_env(), LDPC_TEST_RANDOM_SEED="12345")


class AckingCollector(ReportCollector):
    """A collector that answers every report as a forger and then as the aggregator would
    (spec §6): first the 12-byte ack with the report's nonce (what anyone who read the report
    can publish), then the ack MAC'd under the reporting device's key."""

    def __init__(self, port, ack_root):
        self.ack_root = ack_root
        super().__init__(port)

    def _on_message(self, client, userdata, msg):
        super()._on_message(client, userdata, msg)
        parts = msg.topic.split("/")
        if len(parts) == 4 and parts[2] == "r" and parts[1] != "sentinel":
            from ldpfleet.core import ackkeys
            plain = protocol.ack_for(bytes(msg.payload), protocol.ACK_ACCEPTED)
            topic = protocol.ack_topic(parts[1], parts[3])
            client.publish(topic, plain, qos=0)
            client.publish(topic, ackkeys.mac_ack(ackkeys.device_key(self.ack_root, parts[3]), plain),
                           qos=0)


def observe(client, broker, work, name, doc, p2, values, prior=None, bodies=False, ack_root=None):
    """Run every value of one campaign in parallel; per value, what is observable. `prior`: a
    ledger document every device starts from (generation 1); `bodies`: keep whole reports;
    `ack_root`: devices provisioned with their ack keys, and every report answered by a forged
    and then a MAC'd acknowledgement (AckingCollector)."""
    campaign = doc["campaign"]
    ids = device_ids(doc, len(values))
    collector = ReportCollector(broker.port) if ack_root is None else AckingCollector(broker.port,
                                                                                     ack_root)
    try:
        collector.publish("ldp/%s/config" % campaign, campaign_config.sign(doc, SIGNING_KEY))
        if p2 is not None:
            collector.publish("ldp/%s/phase2" % campaign, campaign_config.sign(p2, SIGNING_KEY))
        make = {"micropython": micropython_cmd, "agent": agent_cmd,
                "c-agent": c_agent_cmd}.get(client, c_cmd)
        results = {}
        runs = list(zip(ids, values))
        for start in range(0, len(runs), PARALLEL):  # a bounded number of devices at a time
            procs = []
            for dev, value in runs[start:start + PARALLEL]:
                state = device_runner.prepare_device(work / client / name / dev, dev, SIGNING_KEY,
                                                     eps_cap_milli=8000, lifetime_budget_milli=100000,
                                                     ack_root=ack_root)
                if prior is not None:
                    device_runner.write_ledger(state, prior, 1)
                argv, env = make(work, state, broker.port, campaign, value)
                procs.append((dev, value, state, subprocess.Popen(
                    argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
            for dev, value, state, proc in procs:
                try:
                    out, _ = proc.communicate(timeout=60)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                ledger = read_ledger(state) or {"spent_milli": 0, "reports": {}}
                results[json.dumps(value)] = {"dev": dev, "code": proc.returncode,
                                              "log": out.replace(dev, "DEV").splitlines(),
                                              "spent": ledger["spent_milli"],
                                              "memos": sorted(k.split(":")[1] for k in ledger["reports"]),
                                              "bound": ledger.get("bound"), "closed": ledger.get("closed")}
        reports = collector.barrier()  # every report the broker acknowledged has arrived
    finally:
        collector.close()
    packets = broker_packets(broker)
    for r in results.values():
        dev = r.pop("dev")
        r["reports"] = [p.hex() if bodies else (len(p), protocol.parse_header(p)) for t, p in reports
                        if t.rsplit("/", 1)[-1] == dev]
        r["packets"] = packets.get(dev, [])
    return results


PACKET = re.compile(r"^(Received|Sending) (\w+) (?:from|to) (\S+)(.*)$")


def broker_packets(broker):
    """device id -> the packets the broker logged from/to it (log_type all), id normalised."""
    out = {}
    with open(os.path.join(broker.dir, "mosquitto.log")) as f:
        for line in f:
            m = PACKET.match(line.strip())
            if m and m.group(3).startswith("eq"):
                dev = m.group(3)
                rest = m.group(4).replace(dev, "DEV")
                out.setdefault(dev, []).append("%s %s%s" % (m.group(1), m.group(2), rest))
    return out


@pytest.fixture
def broker():
    """One private broker per test: its packet log holds only this test's runs."""
    conf = "log_type all\nlog_timestamp false\nconnection_messages false\n"
    with PrivateMosquitto(extra_conf=conf) as b:
        yield b


@pytest.mark.parametrize("client", ["micropython", "c"])
@pytest.mark.parametrize("case", [c[0] for c in campaigns()])
def test_device_behaviour_does_not_depend_on_the_value(broker, tmp_path, client, case):
    name, doc, p2, values = next(c for c in campaigns() if c[0] == case)
    results = observe(client, broker, tmp_path, name, doc, p2, values)
    reference = results[json.dumps(values[0])]
    # the runs did something worth comparing: the device reported (every phase it is in)
    assert reference["code"] == 0, reference["log"]
    assert reference["reports"] and reference["spent"] > 0, reference
    assert any(p.startswith("Received PUBLISH") for p in reference["packets"]), reference["packets"]
    if campaign_config.spread_s(doc):  # the wait was drawn (and logged with its length)
        assert any(re.search(r" wait phase=1 ms=\d+$", line) for line in reference["log"]), \
            reference["log"]
    for value, got in results.items():
        assert got == reference, "value %s behaves differently from %r" % (value, values[0])


def shc_prior(doc):
    """A ledger holding an shc phase-1 memo and its bit x (the aggregator's reference report)."""
    mech1 = ldpminer.phase1_mechanism(doc)
    report, x = mech1.reference_phase1([1, 2], [5, 6, 7, 8], 77)
    cid = doc["campaign_id"]
    return {"spent_milli": doc["phases"][0]["eps_milli"], "closed": [],
            "reports": {"%d:1" % cid: [77, doc["phases"][0]["eps_milli"], report.hex()]},
            "shc": {str(cid): x}}


@pytest.mark.parametrize("client", ["micropython", "c"])
def test_shc_phase2_is_the_same_for_every_value(broker, tmp_path, client):
    """Devices whose ledgers hold the same shc phase-1 memo and bit, with the same randomness:
    phase 2 is computed from the ledger alone, so every value gives the same bytes (not only the
    same header), the same log and the same packets."""
    name, doc, p2, values = next(c for c in campaigns() if c[0] == "miner-shc")
    results = observe(client, broker, tmp_path, name, doc, p2, values, prior=shc_prior(doc),
                      bodies=True)
    reference = results[json.dumps(values[0])]
    assert reference["code"] == 0, reference["log"]
    assert any("memo phase=1" in line for line in reference["log"])
    assert len(reference["reports"]) == 2 and reference["reports"][1][4:6] == "02"  # phase 2 byte
    for value, got in results.items():
        assert got == reference, "value %s behaves differently from %r" % (value, values[0])


POISON_DRIVER = r'''
import json
import sys

from ldp.device import Device


class Poison:
    """A value that raises on any use: phase 2 of shc must not touch it."""
    def __getattr__(self, name):
        raise RuntimeError("the value was read (%s)" % name)

    def __iter__(self):
        raise RuntimeError("the value was iterated")

    def __len__(self):
        raise RuntimeError("the value was measured")


job = json.load(open(sys.argv[1]))
identity = {"device_id": "poison", "eps_cap_milli": 8000, "trusted_keys": job["keys"],
            "lifetime_budget_milli": 100000}
dev = Device(sys.argv[2], identity, job["campaign"], [1, 2])
dev.value = Poison()
dev.on_config(job["config"].encode())
dev.on_phase2(job["phase2"].encode())
print(json.dumps([[p, "".join("%02x" % b for b in r)] for p, r, _due in dev.outbox]))
'''


def test_micropython_shc_phase2_never_reads_the_value(tmp_path):
    """The real device code, given a value that raises on any use once the phase-1 memo is in its
    ledger: the config trigger re-sends the memo and the phase-2 trigger makes the phase-2 report
    (the value is never read, only the ledger)."""
    name, doc, p2, _ = next(c for c in campaigns() if c[0] == "miner-shc")
    prior = shc_prior(doc)
    state = device_runner.prepare_device(tmp_path / "poison", "poison", SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=100000)
    device_runner.write_ledger(state, prior, 1)
    job = {"campaign": doc["campaign"], "keys": [SIGNING_KEY.public.to_doc()],
           "config": campaign_config.sign(doc, SIGNING_KEY).decode(),
           "phase2": campaign_config.sign(p2, SIGNING_KEY).decode()}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "poison.py").write_text(POISON_DRIVER)
    proc = subprocess.run([device_runner.micropython_binary(), str(tmp_path / "poison.py"),
                           str(tmp_path / "job.json"), str(state)],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outbox = json.loads(proc.stdout.strip().splitlines()[-1])
    cid = doc["campaign_id"]
    memo = prior["reports"]["%d:1" % cid][2]
    assert [p for p, _ in outbox] == [1, 2] and outbox[0][1] == memo
    assert outbox[1][1][24:32] == memo[24:32]  # phase 2 repeats the phase-1 row
    ledger = read_ledger(state)
    assert ledger["reports"]["%d:2" % cid][2] == outbox[1][1] and ledger["shc"] == prior["shc"]


def eq_config(name, **kw):
    return config_doc(name, mechanism="olh", eps_milli=2000, params={"g": 4},
                      domain={"type": "int", "size": 4}, **kw)


@pytest.mark.parametrize("client", ["micropython", "c"])
def test_mac_acks_do_not_depend_on_the_value(broker, tmp_path, client):
    """Spec §6 with keys: every device (each value) is provisioned with its own ack key; its
    report is answered by a forged 12-byte ack (ignored) and the MAC'd one (acked, the --once run
    ends). Log lines, packets (the 28-byte acks included), headers and the ledger are the same
    for every value."""
    doc = eq_config("eq-macs", delivery={"ack": True, "retry_s": 30, "retry_max_s": 60})
    results = observe(client, broker, tmp_path, "macs", doc, None, INT_VALUES,
                      ack_root=bytes(range(7, 39)))
    reference = results[json.dumps(INT_VALUES[0])]
    assert reference["code"] == 0, reference["log"]
    log = "\n".join(reference["log"])
    assert "ack-ignored bytes=12" in log and "acked phase=1 status=0" in log, log
    assert any(p.startswith("Sending PUBLISH") and "(28 bytes)" in p for p in reference["packets"]), \
        reference["packets"]
    for value, got in results.items():
        assert got == reference, "value %s behaves differently from %r" % (value, INT_VALUES[0])


@pytest.mark.parametrize("client", ["micropython", "c"])
def test_binding_and_closed_refusals_do_not_depend_on_the_value(broker, tmp_path, client):
    """Spec §7.2-§7.3: devices whose ledgers bound the campaign id to another config body are
    refused (`bound`); devices whose ledgers closed the id, or whose closed_floor is above the
    config's not_before, are refused (`closed`): the same exit code, log, packets and ledger for
    every value; nothing published, nothing spent."""
    doc = eq_config("eq-bound")
    cid = str(doc["campaign_id"])
    priors = {"bound": {"spent_milli": 0, "reports": {}, "closed": [], "bound": {cid: "ab" * 16}},
              "closed": {"spent_milli": 0, "reports": {}, "closed": [[doc["campaign_id"], 5]]},
              "floor": {"spent_milli": 0, "reports": {}, "closed": [],
                        "closed_floor": doc["not_before"]}}
    for label, prior in priors.items():
        results = observe(client, broker, tmp_path / label, label, doc, None, INT_VALUES, prior=prior)
        reference = results[json.dumps(INT_VALUES[0])]
        field = "bound" if label == "bound" else "closed"
        assert reference["code"] == device_runner.EXIT_REFUSED, reference["log"]
        assert any(("refused config %s:" % field) in line for line in reference["log"]), reference
        assert reference["reports"] == [] and reference["spent"] == 0
        for value, got in results.items():
            assert got == reference, "%s: value %s behaves differently from %r" % (label, value,
                                                                                 INT_VALUES[0])


AGENT_CASES = ("grr-str", "olh-int", "miner-sh", "ldplcm", "pem-p1", "pem-p2")


@pytest.mark.parametrize("client", ["agent", "c-agent"])
@pytest.mark.parametrize("case", AGENT_CASES)
def test_agent_behaviour_does_not_depend_on_the_provider(broker, tmp_path, client, case):
    """ldp.agent.Agent (spec §5.4 `metric`): a campaign discovered on `ldp/+/config` whose
    metric the agent provides; the provider's readings (every value of the case, one that
    raises, one that changes on every call) change nothing but the report bodies."""
    name, doc, p2, values = next(c for c in campaigns() if c[0] == case)
    doc = dict(doc, metric="temp")
    if p2 is not None:
        p2 = dict(p2)
    # a program that never answers is killed after its timeout (5 s, one phase within the run)
    slow = client == "c-agent" and len(doc["phases"]) == 1
    extra = ["RAISE", "LIVE"] + (["SLOW"] if slow else [])
    results = observe(client, broker, tmp_path, name, doc, p2, list(values) + extra)
    reference = results[json.dumps(values[0])]
    assert reference["code"] == 0, reference["log"]
    assert reference["reports"] and reference["spent"] > 0, reference
    assert any("joined campaign %s metric temp" % doc["campaign"] in line
               for line in reference["log"]), reference["log"]
    for value, got in results.items():
        assert got == reference, "provider value %s behaves differently from %r" % (value, values[0])

