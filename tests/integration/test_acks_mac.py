"""Acknowledgements only the aggregator can make (spec §6): 28-byte acks MAC'd under a per-device
key derived from the fleet's ack root key, which only the aggregator side holds.

* Keys and tags: the reference (ackkeys.py) reproduces acks.json; the C kernel's derivation and
  its one-call batch tagging (what `serve` publishes) equal the reference; `AckBatch.tagged`
  tags each ack under its own topic's device key ("L/id" under the login's key).
* The device rule on every acks.json case, both clients (MicroPython in test_device_vectors.py;
  the C client's own `ldpc_ack_accepts` here).
* Live, both clients: a device provisioned with its key ignores a forged ack (the 12-byte ack
  with the nonce copied from its report, a 28-byte one with a wrong tag) and keeps re-sending;
  `serve --ack-key` acknowledges it and it stops. Without --ack-key serve warns once.
* The load generator checks tags with the root key or its login's key (forged ones count as
  ignored); `ldpfleet ack-key` writes keys 0600 and never over a file; `flash --ack-key` puts
  the board's own key, never the root, in identity.json.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from support.c_client import build_client, client_env
from support.devices import SIGNING_KEY, ReportCollector, config_doc, stop_processes, write_key_files
from support.live import CLIENTS, read_log, start, wait_log
from support.service import ServeProcess
from ldpfleet.core import ackkeys, protocol
from ldpfleet.provision import device_runner
from ldpfleet.core import config as campaign_config
from ldpfleet.loadgen.acks import AckTracker
from ldpfleet.service.ingest.batch import AckBatch

VECTORS = device_runner.ROOT / "protocol_spec" / "v2" / "vectors"
FAST = {"ack": True, "retry_s": 1, "retry_max_s": 2}
ROOT_KEY = bytes(range(50, 82))


def mac_vectors():
    return json.loads((VECTORS / "acks.json").read_text())["mac"]


def c_key(root, device):
    from ldpfleet._kernels import ffi, lib
    out = ffi.new("uint8_t[32]")
    data = device.encode()
    lib.ldp_ack_device_key(root, data, len(data), out)
    return bytes(out)


# --- keys and tags -------------------------------------------------------------------------------

def test_reference_and_c_reproduce_the_vectors():
    vec = mac_vectors()
    root = bytes.fromhex(vec["root_hex"])
    for k in vec["keys"]:
        assert ackkeys.device_key(root, k["device"]).hex() == k["key_hex"] == c_key(root, k["device"]).hex()
        if "login_key_hex" in k:
            login, _, rest = k["device"].partition("/")
            assert ackkeys.login_key(root, login).hex() == k["login_key_hex"]
            assert ackkeys.device_key_under_login(bytes.fromhex(k["login_key_hex"]), rest).hex() == k["key_hex"]
    for a in vec["acks"]:
        assert ackkeys.mac_ack(bytes.fromhex(vec["keys"][[k["device"] for k in vec["keys"]].index(
            a["device"])]["key_hex"]), bytes.fromhex(a["ack_hex"])).hex() == a["mac_ack_hex"]
    for c in vec["matching"]:
        key = bytes.fromhex(c["key_hex"]) if c["key_hex"] else None
        assert ackkeys.accepts(key, bytes.fromhex(c["ack_hex"]), bytes.fromhex(c["report_hex"])) \
            == c["matches"], c["case"]


def test_batch_tags_equal_the_reference():
    """AckBatch.tagged (one C call) == ackkeys.mac_ack per ack, for plain device ids and load
    generator ids, several campaigns, repeated logins and ids of every length."""
    rng = np.random.default_rng(3)
    devices = ["d", "dev-1", "gen/sim-1", "gen/sim-2", "other/x", "gen/sim-1", "z" * 64,
               "g" * 64 + "/" + "i" * 64]
    parts = []
    for campaign in ("c1", "camp-two"):
        acks = rng.integers(0, 256, size=(len(devices), 12), dtype=np.uint8)
        topics = ["ldp/%s/a/%s" % (campaign, d) for d in devices]
        width = max(len(t) for t in topics)
        rows = np.zeros((len(topics), width), np.uint8)
        for i, t in enumerate(topics):
            rows[i, :len(t)] = np.frombuffer(t.encode(), np.uint8)
        plen = len("ldp/%s/a/" % campaign)
        off = np.arange(len(topics), dtype=np.uint32) * np.uint32(width)
        parts.append(AckBatch(rows.ravel(), off, np.array([len(t) for t in topics], np.uint32),
                              acks, off + np.uint32(plen)))
    batch = AckBatch.concat(parts).tagged(ROOT_KEY)
    pairs = batch.pairs()
    assert len(pairs) == 2 * len(devices)
    for topic, payload in pairs:
        device = topic.split("/", 3)[3]
        assert len(payload) == 28
        assert payload == ackkeys.mac_ack(ackkeys.device_key(ROOT_KEY, device), payload[:12]), topic
    packets = batch.packets(4)
    assert packets.count(pairs[0][1]) == 1  # the PUBLISH packets carry the 28 bytes


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_c_client_ack_rule_on_the_vectors(sanitize):
    binary = build_client(sanitize=sanitize)
    vec = json.loads((VECTORS / "acks.json").read_text())
    cases = [dict(c, key_hex=None) for c in vec["matching"]] + vec["mac"]["matching"]
    for c in cases:
        argv = [str(binary), "ack-check", "--report-hex", c["report_hex"], "--ack-hex", c["ack_hex"]]
        if c["key_hex"]:
            argv += ["--ack-key", c["key_hex"]]
        proc = subprocess.run(argv, capture_output=True, text=True, env=client_env(), timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == ("accepted" if c["matches"] else "ignored"), c.get("case", c)


# --- live: forged acks are ignored, the aggregator's are taken -------------------------------------

def keyed_state(tmp_path, device_id):
    return device_runner.prepare_device(tmp_path / device_id, device_id, SIGNING_KEY,
                                        ack_root=ROOT_KEY)


@pytest.mark.parametrize("client", CLIENTS)
def test_forged_acks_do_not_stop_a_keyed_device(mosquitto, tmp_path, client):
    """The audit's forgery: a 12-byte ack with the nonce copied from the device's report, then
    a 28-byte one with a wrong tag, and one MAC'd under another device's key, on the device's
    own ack topic: all ignored, re-sends go on; the ack MAC'd under its key ends the run."""
    name, device = "mac-" + client, "mac-dev-" + client
    state = keyed_state(tmp_path, device)
    assert json.loads((state / "identity.json").read_text())["ack_key"] == \
        ackkeys.device_key(ROOT_KEY, device).hex()
    log = tmp_path / "dev.log"
    topic, ack_topic = "ldp/%s/r/%s" % (name, device), "ldp/%s/a/%s" % (name, device)
    collector = ReportCollector(mosquitto.port)
    proc = None
    try:
        collector.publish("ldp/%s/config" % name, campaign_config.sign(config_doc(name, delivery=FAST),
                                                                        SIGNING_KEY))
        proc = start(client, state, mosquitto.port, name, log, once=True)
        report = collector.wait_for(lambda r: any(t == topic for t, _ in r), 20)[0][1]
        plain = protocol.ack_for(report, protocol.ACK_ACCEPTED)
        forged = [plain, plain + bytes(16),
                  ackkeys.mac_ack(ackkeys.device_key(ROOT_KEY, "someone-else"), plain)]
        for n, ack in enumerate(forged, 1):
            collector.publish(ack_topic, ack, retain=False)
            out = wait_log(log, "ack-ignored", count=n)
        resent = out.count("resent phase=1")
        wait_log(log, "resent phase=1", count=resent + 2)
        assert proc.poll() is None
        collector.publish(ack_topic, ackkeys.mac_ack(ackkeys.device_key(ROOT_KEY, device), plain),
                          retain=False)
        assert proc.wait(15) == 0
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()
    out = read_log(log)
    assert out.count("acked phase=1 status=0") == 1 and out.count("ack-ignored") == 3, out


def test_serve_with_an_ack_key_acknowledges_keyed_devices(mosquitto, tmp_path):
    """serve --ack-key: both clients, provisioned with their keys, get MAC'd acks that verify
    under their keys (seen on the wire: 28 bytes) and end their --once runs on them."""
    from ldpfleet.service import Store, create_campaign
    from ldpfleet.mqtt.client import BrokerSettings
    key = tmp_path / "signing.key"
    write_key_files(key)
    root = tmp_path / "ack.key"
    ackkeys.write_key_file(str(root), ROOT_KEY)
    state_url = "sqlite:///%s" % (tmp_path / "agg.db")
    with Store(state_url) as store:
        create_campaign(store, BrokerSettings.from_url(mosquitto.url), str(key), "macs", "olh", 2.0,
                        "16")
    serve = ServeProcess(mosquitto.url, state_url, batch_ms=20,
                         extra_args=["--ack-key", str(root)]).start()
    acks = ReportCollector(mosquitto.port, topic="ldp/+/a/+")
    procs = []
    try:
        for client in CLIENTS:
            device = "served-" + client
            log = tmp_path / (device + ".log")
            procs.append((device, log, start(client, keyed_state(tmp_path, device), mosquitto.port,
                                             "macs", log, once=True)))
        for device, log, proc in procs:
            assert proc.wait(40) == 0, read_log(log)
            assert "acked phase=1 status=0" in read_log(log)
        seen = acks.wait_for(lambda r: len(r) >= len(procs), 10)
    finally:
        stop_processes([p for _, _, p in procs])
        acks.close()
        serve.stop()
    assert {t.rsplit("/", 1)[1] for t, _ in seen} == {d for d, _, _ in procs}
    for topic, payload in seen:
        device = topic.rsplit("/", 1)[1]
        assert len(payload) == 28
        assert payload[12:] == ackkeys.tag(ackkeys.device_key(ROOT_KEY, device), payload[:12])
    assert "no --ack-key" not in open(serve.log_path).read()


def test_serve_without_an_ack_key_warns_once(mosquitto, tmp_path):
    serve = ServeProcess(mosquitto.url, "sqlite:///%s" % (tmp_path / "agg.db")).start()
    serve.stop()
    text = open(serve.log_path).read()
    assert text.count("no --ack-key: acknowledgements are not authenticated") == 1, text


# --- the load generator -----------------------------------------------------------------------------

def tracker(prefix, **keys):
    reports = np.zeros((3, 18), np.uint8)
    for i in range(3):
        reports[i, :12] = np.frombuffer(protocol.pack_header("olh", 1, 9, 100 + i), np.uint8)
    t = AckTracker("camp", prefix, reports, np.arange(3), **keys)
    return t, [reports[i].tobytes() for i in range(3)]


@pytest.mark.parametrize("keys", ["root", "login"])
def test_load_generator_checks_tags(keys):
    """A generator logged in as `gen` with the root key or only its login's key: MAC'd acks of
    its simulated devices count; plain ones, forged tags and another device's tag do not."""
    login_key = ackkeys.login_key(ROOT_KEY, "gen")
    t, reports = tracker("gen/sim", **({"ack_root": ROOT_KEY} if keys == "root"
                                        else {"ack_login_key": login_key}))
    dev = ["gen/sim-%d" % i for i in range(3)]
    plain = [protocol.ack_for(r, 0) for r in reports]
    t.on_message("ldp/camp/a/" + dev[0], plain[0])                                    # plain
    t.on_message("ldp/camp/a/" + dev[1], plain[1] + bytes(16))                        # forged tag
    t.on_message("ldp/camp/a/" + dev[2],
                 ackkeys.mac_ack(ackkeys.device_key(ROOT_KEY, dev[0]), plain[2]))     # wrong key
    assert t.ignored == 3 and t.pending().tolist() == [0, 1, 2]
    for i in range(3):
        t.on_message("ldp/camp/a/" + dev[i], ackkeys.mac_ack(ackkeys.device_key(ROOT_KEY, dev[i]),
                                                              plain[i]))
    assert t.pending().size == 0 and t.ignored == 3


def test_load_generator_without_a_key_takes_the_prefix():
    t, reports = tracker("sim")
    t.on_message("ldp/camp/a/sim-0", protocol.ack_for(reports[0], 0))
    t.on_message("ldp/camp/a/sim-1", protocol.ack_for(reports[1], 0) + bytes(16))
    assert t.pending().tolist() == [2] and t.ignored == 0


# --- keys on the command line -------------------------------------------------------------------------

def cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=120)


def test_ack_key_commands(tmp_path):
    root = tmp_path / "ack.key"
    assert cli("ack-key", "init", root).returncode == 0
    assert os.stat(root).st_mode & 0o777 == 0o600
    key = ackkeys.read_key_file(str(root))
    again = cli("ack-key", "init", root)
    assert again.returncode == 2 and "exists" in again.stderr
    assert ackkeys.read_key_file(str(root)) == key
    out = cli("ack-key", "device", "--root", root, "--device-id", "dev-9")
    assert out.returncode == 0 and out.stdout.strip() == ackkeys.device_key(key, "dev-9").hex()
    login = tmp_path / "gen.key"
    assert cli("ack-key", "login", "--root", root, "--login", "gen", login).returncode == 0
    assert ackkeys.read_key_file(str(login)) == ackkeys.login_key(key, "gen")
    assert os.stat(login).st_mode & 0o777 == 0o600
    bad = cli("ack-key", "device", "--root", root, "--device-id", "a/b")
    assert bad.returncode == 2 and "device_id" in bad.stderr


def test_flash_writes_the_boards_own_key(tmp_path):
    write_key_files(tmp_path / "k")
    root = tmp_path / "ack.key"
    ackkeys.write_key_file(str(root), ROOT_KEY)
    stage = tmp_path / "stage"
    proc = cli("flash", "--port", "/dev/null", "--device-id", "board-1", "--trusted-keys",
               str(tmp_path / "k") + ".pub", "--march", "x64", "--ack-key", root,
               "--broker-host", "broker.example",
               "--stage-dir", stage, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    identity = json.loads((stage / "identity.json").read_text())
    assert identity["ack_key"] == ackkeys.device_key(ROOT_KEY, "board-1").hex()
    assert ROOT_KEY.hex() not in (stage / "identity.json").read_text()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_malformed_ack_key_stops_the_device(tmp_path, client):
    state = device_runner.prepare_device(tmp_path / "bad", "bad-key", SIGNING_KEY)
    doc = json.loads((state / "identity.json").read_text())
    doc["ack_key"] = "zz" * 32
    (state / "identity.json").write_text(json.dumps(doc))
    log = tmp_path / "bad.log"
    proc = start(client, state, 1, "c", log, once=True, timeout=5)
    code = proc.wait(20)
    assert code in (1, 2) and "ack_key must be 64 hex digits" in read_log(log), read_log(log)
