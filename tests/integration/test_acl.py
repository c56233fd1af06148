"""`ldpfleet broker-config` against a real private mosquitto running the generated config:
devices publish only to their own report topic, only the aggregator publishes configs and
reads reports. Refused publishes are silent in MQTT 3.1.1, so each check publishes a legit
sentinel after the forbidden message from the same client: the broker keeps per-client order,
so once the aggregator sees the sentinel it would already have seen the forbidden message."""
import base64
import csv
import getpass
import os
import queue
import shutil
import subprocess
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from ldpfleet.broker.embedded import MosquittoProcess, free_port
from ldpfleet.broker import secured as broker
from ldpfleet import cli
from ldpfleet.core.errors import ConfigError
from support.devices import read_ledger, run_device

DEVICES = ["dev-a", "dev-b", "dev_c"]


class Client:
    """A paho client that records every message it receives."""

    def __init__(self, port, username, password, client_id=None, tls_ca=None):
        self.messages = queue.Queue()
        self.connected = threading.Event()
        self.reason = None
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or username,
                                  protocol=mqtt.MQTTv311)
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls_ca is not None:
            self.client.tls_set(ca_certs=tls_ca)
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload, m.retain))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        self.reason = reason_code
        self.connected.set()

    def wait_connected(self):
        assert self.connected.wait(10), "no CONNACK"
        return not self.reason.is_failure

    def subscribe(self, topic):
        done = threading.Event()
        self.client.on_subscribe = lambda *a: done.set()
        self.client.subscribe(topic, qos=1)
        assert done.wait(10)

    def publish(self, topic, payload, retain=False):
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)

    def wait_for(self, topic, payload, timeout=10):
        """Messages received up to and including (topic, payload)."""
        seen = []
        while True:
            item = self.messages.get(timeout=timeout)
            seen.append(item)
            if item[:2] == (topic, payload):
                return seen

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def secured(tmp_path):
    """The generated config, run by a real mosquitto on a free loopback port."""
    devices_file = tmp_path / "devices.txt"
    devices_file.write_text("# fleet\n" + "\n".join(DEVICES) + "\n")
    port = free_port()
    out = tmp_path / "broker"
    assert cli.main(["broker-config", "--out", str(out), "--aggregator-user", "agg",
                     "--devices-file", str(devices_file), "--campaigns", "c1",
                     "--loadgen-user", "loadgen", "--port", str(port), "--bind", "127.0.0.1",
                     "--insecure-plaintext", "--run-as", getpass.getuser(),
                     "--log-file", str(tmp_path / "mosquitto.log")]) == 0
    with open(out / "credentials.csv") as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    proc = MosquittoProcess(str(out / "mosquitto.conf"), port,
                            log_path=str(tmp_path / "mosquitto.log")).start()
    clients = []

    def connect(user, password=None, client_id=None):
        c = Client(port, user, creds.get(user) if password is None else password, client_id)
        clients.append(c)
        return c

    connect.port = port
    yield connect, out, creds
    for c in clients:
        c.close()
    proc.stop()


def test_oversized_publish_never_reaches_the_aggregator(secured):
    """broker-config's max_packet_size: a device's 16 MiB "report" is refused by the broker
    (the device is disconnected); the aggregator only ever sees real-sized messages."""
    connect, out, _ = secured
    assert "max_packet_size %d" % (1 << 20) in (out / "mosquitto.conf").read_text()
    agg = connect("agg")
    assert agg.wait_connected()
    agg.subscribe("ldp/c1/r/+")
    dev = connect("dev-a")
    assert dev.wait_connected()
    dev.client.publish("ldp/c1/r/dev-a", bytes(16 << 20), qos=1)
    other = connect("dev-b")
    assert other.wait_connected()
    time.sleep(1.0)  # the 16 MiB packet has reached the broker (loopback) and been refused
    other.publish("ldp/c1/r/dev-b", b"legit report")
    seen = agg.wait_for("ldp/c1/r/dev-b", b"legit report", timeout=20)
    assert seen == [("ldp/c1/r/dev-b", b"legit report", False)]
    time.sleep(1.0)
    assert agg.messages.empty()


def test_device_publishes_only_its_own_report_topic(secured):
    connect, _, _ = secured
    agg = connect("agg")
    assert agg.wait_connected()
    agg.subscribe("ldp/#")
    dev = connect("dev-a")
    assert dev.wait_connected()

    forbidden = [("ldp/c1/r/dev-b", b"impersonation"), ("ldp/c1/config", b"forged config"),
                 ("ldp/c1/phase2", b"forged phase2"), ("ldp/c1/status", b"forged status"),
                 ("ldp/c2/r/dev-a", b"other campaign"), ("ldp/c1/r/dev-a/x", b"deeper topic")]
    for topic, payload in forbidden:
        dev.publish(topic, payload)
    dev.publish("ldp/c1/r/dev-a", b"legit report")
    seen = agg.wait_for("ldp/c1/r/dev-a", b"legit report")
    assert seen == [("ldp/c1/r/dev-a", b"legit report", False)]


def test_devices_read_campaign_topics_but_not_reports(secured):
    connect, _, _ = secured
    agg = connect("agg")
    assert agg.wait_connected()
    agg.subscribe("ldp/#")
    agg.publish("ldp/c1/config", b"signed config", retain=True)
    agg.publish("ldp/c1/phase2", b"signed phase2", retain=True)
    agg.wait_for("ldp/c1/phase2", b"signed phase2")

    dev_a = connect("dev-a")
    assert dev_a.wait_connected()
    dev_a.subscribe("ldp/c1/config")
    dev_a.subscribe("ldp/c1/phase2")
    dev_a.subscribe("ldp/c1/status")
    dev_a.subscribe("ldp/c1/r/+")  # refused by the ACL: reads of reports are never delivered
    got = {t: p for t, p, _ in (dev_a.messages.get(timeout=10) for _ in range(2))}
    assert got == {"ldp/c1/config": b"signed config", "ldp/c1/phase2": b"signed phase2"}

    dev_b = connect("dev-b")
    assert dev_b.wait_connected()
    dev_b.publish("ldp/c1/r/dev-b", b"report of b")
    agg.wait_for("ldp/c1/r/dev-b", b"report of b")
    agg.publish("ldp/c1/status", b"status after b")
    seen = dev_a.wait_for("ldp/c1/status", b"status after b")
    assert seen == [("ldp/c1/status", b"status after b", False)]


def test_broker_starts_without_acl_warnings_and_every_login_reads_key_rotations(secured, tmp_path):
    """The generated ACL loads without Mosquitto's "ACL pattern ... does not contain '%c' or
    '%u'" warnings (four at every start before), and devices and the load generator still read
    the retained key rotation (spec §5.3) and their campaigns' topics; a device may not write
    the rotation."""
    connect, _, _ = secured
    log = (tmp_path / "mosquitto.log").read_text()
    assert "Config loaded" in log and "Warning" not in log, log
    agg = connect("agg")
    assert agg.wait_connected()
    agg.subscribe("ldpfleet/keys")
    agg.publish("ldpfleet/keys", b"signed rotation", retain=True)
    agg.wait_for("ldpfleet/keys", b"signed rotation")
    for user in ("dev-a", "dev_c", "loadgen"):
        reader = connect(user)
        assert reader.wait_connected()
        reader.subscribe("ldpfleet/keys")
        assert reader.wait_for("ldpfleet/keys", b"signed rotation")[-1][2]  # retained
    forger = connect("dev-b")
    assert forger.wait_connected()
    forger.publish("ldpfleet/keys", b"forged rotation", retain=True)
    forger.subscribe("ldpfleet/keys")
    assert forger.wait_for("ldpfleet/keys", b"signed rotation")


def test_aggregator_config_survives_forged_retained_publish(secured):
    connect, _, _ = secured
    agg = connect("agg")
    assert agg.wait_connected()
    agg.publish("ldp/c1/config", b"genuine", retain=True)
    dev = connect("dev_c")
    assert dev.wait_connected()
    dev.publish("ldp/c1/config", b"forged", retain=True)
    dev.publish("ldp/c1/r/dev_c", b"sentinel")
    agg.subscribe("ldp/c1/r/dev_c")
    late = connect("dev-b")
    assert late.wait_connected()
    late.subscribe("ldp/c1/config")
    assert late.messages.get(timeout=10) == ("ldp/c1/config", b"genuine", True)


def test_load_generator_is_confined_to_its_own_prefix(secured):
    """The --loadgen-user L publishes only ldp/<c>/r/L/<id> of its campaigns and reads the
    campaign topics: it can neither report as a provisioned device nor forge configs, phase-2,
    status or key rotations, read reports or leave its campaigns."""
    connect, _, _ = secured
    agg = connect("agg")
    assert agg.wait_connected()
    agg.subscribe("ldp/#")
    gen = connect("loadgen")
    assert gen.wait_connected()
    gen.subscribe("ldp/c1/r/#")  # refused by the ACL: never delivered
    for topic, payload in [("ldp/c1/config", b"forged config"), ("ldp/c1/phase2", b"forged"),
                           ("ldp/c1/status", b"forged"), ("ldpfleet/keys", b"forged rotation"),
                           ("ldp/c2/r/loadgen/sim-1", b"other campaign"),
                           ("ldp/c1/r/dev-a", b"report as a provisioned device"),
                           ("ldp/c1/r/sim-1", b"report outside its prefix"),
                           ("ldp/c1/r/agg/sim-1", b"someone else's prefix"),
                           ("ldp/c1/a/loadgen/sim-1", b"forged ack")]:
        gen.publish(topic, payload)
    gen.publish("ldp/c1/r/loadgen/sim-1", b"simulated report")
    seen = agg.wait_for("ldp/c1/r/loadgen/sim-1", b"simulated report")
    assert seen == [("ldp/c1/r/loadgen/sim-1", b"simulated report", False)]
    assert gen.messages.empty()


def _persistent(port, user, password):
    """The aggregator's persistent session (clean session off), as serve keeps it."""
    got, connected = queue.Queue(), queue.Queue()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="ldpfleet-aggregator",
                         protocol=mqtt.MQTTv311, clean_session=False)
    client.username_pw_set(user, password)
    client.on_connect = lambda c, u, flags, rc, p: connected.put((rc, flags.session_present))
    client.on_message = lambda c, u, m: got.put((m.topic, m.payload))
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client, connected.get(timeout=10), got


def test_nobody_takes_over_the_aggregators_session_or_kicks_a_device(secured):
    """use_username_as_clientid: a device logging in with its own password but the aggregator's
    client id (or another device's) gets its own login as client id: the aggregator's queued
    reports stay queued for it (session_present, every one delivered), and the device whose id
    was used stays connected."""
    connect, _, creds = secured
    assert "\nuse_username_as_clientid true" in (secured[1] / "mosquitto.conf").read_text()
    agg, _, _ = _persistent(connect.port, "agg", creds["agg"])
    done = threading.Event()
    agg.on_subscribe = lambda *a: done.set()
    agg.subscribe("ldp/c1/r/+", qos=1)
    assert done.wait(10)
    agg.disconnect()
    agg.loop_stop()
    dev_a = connect("dev-a")
    assert dev_a.wait_connected()
    dev_a.publish("ldp/c1/r/dev-a", b"queued while the aggregator is away")
    hijacker = connect("dev-b", client_id="ldpfleet-aggregator")  # clean session: would wipe it
    assert hijacker.wait_connected()
    hijacker.subscribe("ldp/c1/r/+")  # and would receive the queue if it had the session
    kicker = connect("dev_c", client_id="dev-a")
    assert kicker.wait_connected()
    time.sleep(0.5)
    dev_a.publish("ldp/c1/r/dev-a", b"sent after the impostors logged in")  # still connected
    agg, (rc, session_present), got = _persistent(connect.port, "agg", creds["agg"])
    try:
        assert not rc.is_failure and session_present
        assert [got.get(timeout=10) for _ in range(2)] == [
            ("ldp/c1/r/dev-a", b"queued while the aggregator is away"),
            ("ldp/c1/r/dev-a", b"sent after the impostors logged in")]
    finally:
        agg.disconnect()
        agg.loop_stop()
    assert hijacker.messages.empty() and kicker.messages.empty()


def test_admin_login_runs_commands_beside_serve(secured):
    """broker-config's admin login has the aggregator's rights (configs, key rotations, the
    broker-check topics) under its own client id."""
    connect, _, creds = secured
    assert creds["agg-admin"] and creds["agg-admin"] != creds["agg"]
    agg = connect("agg")
    assert agg.wait_connected()
    agg.subscribe("ldp/#")
    admin = connect("agg-admin")
    assert admin.wait_connected()
    admin.publish("ldp/c1/config", b"signed config", retain=True)
    admin.publish("ldpfleet/keys", b"signed rotation", retain=True)
    agg.wait_for("ldp/c1/config", b"signed config")
    assert agg.wait_connected()


def test_fleet_runs_as_the_load_generator_on_a_secured_broker(secured):
    """`ldpfleet fleet` with the load generator's login: it reads the signed config and
    delivers every simulated device's report under its own prefix and the MicroPython device's
    with that device's own login (--device-logins); without device logins it refuses."""
    from support.devices import SIGNING_KEY, config_doc
    from ldpfleet.core import config as campaign_config
    from ldpfleet.loadgen import FleetOptions, run_fleet
    from ldpfleet.mqtt.client import BrokerSettings

    connect, _, creds = secured
    agg = connect("agg")
    assert agg.wait_connected()
    agg.publish("ldp/c1/config", campaign_config.sign(config_doc("c1"), SIGNING_KEY), retain=True)
    agg.subscribe("ldp/c1/r/#")
    login = BrokerSettings.from_url("mqtt://127.0.0.1:%d" % connect.port, username="loadgen",
                                    password=creds["loadgen"])
    with pytest.raises(ConfigError) as err:
        run_fleet(login, "c1", SIGNING_KEY, FleetOptions(devices=40, micropython=1, seed=3))
    assert err.value.field == "device_logins"
    result = run_fleet(login, "c1", SIGNING_KEY, FleetOptions(
        devices=40, micropython=1, seed=3, device_logins=[("dev-a", creds["dev-a"])]))
    assert result.sent == 41 and result.failed == 0
    assert result.device_ids["micropython"] == ["dev-a"]
    assert all(d.startswith("loadgen/sim3-") for d in result.device_ids["simulated"])
    topics = set()
    while len(topics) < 41:
        topic, _, _ = agg.messages.get(timeout=20)
        topics.add(topic)
    assert topics == {"ldp/c1/r/%s" % d for ids in result.device_ids.values() for d in ids}


def test_unknown_users_and_wrong_passwords_are_refused(secured):
    connect, _, _ = secured
    assert not connect("dev-a", password="wrong", client_id="x1").wait_connected()
    assert not connect("intruder", password="anything", client_id="x2").wait_connected()
    assert not connect(None, client_id="x3").wait_connected()


def test_rerun_keeps_passwords_and_adds_devices(secured, tmp_path):
    _, out, creds = secured
    more = tmp_path / "more.txt"
    more.write_text("\n".join(DEVICES + ["dev-d"]) + "\n")
    assert cli.main(["broker-config", "--out", str(out), "--aggregator-user", "agg",
                     "--devices-file", str(more), "--loadgen-user", "loadgen",
                     "--insecure-plaintext"]) == 0
    with open(out / "credentials.csv") as f:
        again = {row["username"]: row["password"] for row in csv.DictReader(f)}
    assert set(again) == set(creds) | {"dev-d"}
    assert all(again[u] == creds[u] for u in creds)
    assert os.stat(out / "credentials.csv").st_mode & 0o077 == 0
    assert os.stat(out / "passwd").st_mode & 0o077 == 0


def test_credentials_csv_quotes_ids_a_spreadsheet_would_run(tmp_path):
    """A device id may start with "-": credentials.csv writes it '-probe (a spreadsheet shows
    text, not a formula), and every reader of the file gets -probe back."""
    out = tmp_path / "out"
    plan = broker.SecuredBroker("agg", ["-probe", "dev-a"], insecure_plaintext=True,
                                run_as=getpass.getuser())
    broker.write_secured_config(str(out), plan)
    text = (out / "credentials.csv").read_text()
    assert "\ndevice,'-probe," in text and "\ndevice,dev-a," in text
    logins = broker.read_device_logins(str(out / "credentials.csv"))
    assert [user for user, _pw in logins] == ["-probe", "dev-a"]
    assert (out / "passwd").read_text().startswith("agg:") and "\n-probe:" in (out / "passwd").read_text()
    broker.write_secured_config(str(out), plan)  # a re-run keeps the password
    assert broker.read_device_logins(str(out / "credentials.csv")) == logins


def test_bad_device_ids_are_refused(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("dev-a\ndev/b\n")
    with pytest.raises(ConfigError) as err:
        broker.read_device_ids(str(bad))
    assert err.value.field == "device_id"
    dup = tmp_path / "dup.txt"
    dup.write_text("dev-a\ndev-a\n")
    with pytest.raises(ConfigError):
        broker.read_device_ids(str(dup))


@pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="mosquitto_passwd not installed")
def test_password_hash_matches_mosquitto_passwd(tmp_path):
    path = tmp_path / "pw"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(path), "user", "s3cret"], check=True)
    line = path.read_text().strip()
    stored = line.split(":", 1)[1]
    _, kind, iterations, salt, _ = stored.split("$")
    assert kind == "7"
    assert broker.password_hash("s3cret", base64.b64decode(salt), int(iterations)) == stored
    assert broker.password_hash("s3creT", base64.b64decode(salt), int(iterations)) != stored


@pytest.mark.skipif(shutil.which("micropython") is None, reason="micropython binary not installed")
def test_service_and_real_devices_work_under_the_acl(secured, tmp_path):
    """The generated ACL with the real parts: `serve` and `campaign create` log in as the
    aggregator user; MicroPython devices log in as themselves and get their report accepted;
    a device logging in as dev-a but reporting as dev-b is dropped by the broker."""
    from ldpfleet.provision import device_runner
    from ldpfleet.service import BrokerSettings, Store, create_campaign
    from support.service import ServeProcess
    from ldpfleet.core.signing import write_signing_key

    connect, out, creds = secured
    conf = (out / "mosquitto.conf").read_text()
    port = int(next(line.split()[1] for line in conf.splitlines() if line.startswith("listener")))
    url = "mqtt://127.0.0.1:%d" % port
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    key_file = str(tmp_path / "fleet.key")
    key = write_signing_key(key_file)
    serve = ServeProcess(url, state, log_path=str(tmp_path / "serve.log"),
                         extra_args=["--username", "agg", "--password=" + creds["agg"]]).start()
    try:
        with Store(state) as store:
            create_campaign(store, BrokerSettings.from_url(url, "agg", creds["agg"]), key_file, "c1",
                            "grr", 2.0, "8")

        def run(device_id, user, wait=40, code=device_runner.EXIT_DONE):
            st = device_runner.prepare_device(tmp_path / device_id, device_id, key, value=3,
                                              campaign="c1",
                                              broker={"host": "127.0.0.1", "port": port, "user": user,
                                                      "password": creds[user]})
            done = run_device(st, "127.0.0.1", port, "c1", wait=wait)
            assert done.returncode == code, done.stdout[-2000:]
            return done.stdout

        assert "acked phase=1 status=0" in run("dev-a", "dev-a")
        serve.wait_counts("c1", lambda c: c.get("accepted", 0) >= 1, timeout=30)
        # impostor: its publish to ldp/c1/r/dev-b is refused by the broker, so no acknowledgement
        # ever comes (spec §6) and the device does not count it as delivered
        out = run("dev-b", "dev-a", wait=10, code=device_runner.EXIT_TIMEOUT)
        assert "published phase=1" in out and "acked" not in out
        run("dev_c", "dev_c")
        counters = serve.wait_counts("c1", lambda c: c.get("accepted", 0) >= 2, timeout=30)
        assert counters == {"received": 2, "accepted": 2}
        with Store(state) as store:  # the second accepted report is dev_c's, not the impostor's
            assert store.reported("c1", 1, ["dev-a", "dev-b", "dev_c"]) == {"dev-a", "dev_c"}
    finally:
        serve.stop()


def test_c_client_logs_in_with_its_identity_credentials(secured, tmp_path):
    """The C client (device/c_client) under the generated ACL: with its broker credentials in
    identity.json it logs in as itself and its report reaches the aggregator on its own topic;
    with a wrong password the broker refuses the CONNACK, so it spends and publishes nothing;
    `--password` overrides the identity's password."""
    from support.c_client import build_client, run_client
    from support.devices import SIGNING_KEY, config_doc
    from ldpfleet.core import config as campaign_config
    from ldpfleet.provision import device_runner

    connect, out, creds = secured
    conf = (out / "mosquitto.conf").read_text()
    port = int(next(line.split()[1] for line in conf.splitlines() if line.startswith("listener")))
    binary = build_client()
    doc = config_doc("c1", mechanism="grr", eps_milli=1000)
    agg = connect("agg")
    assert agg.wait_connected()
    agg.publish("ldp/c1/config", campaign_config.sign(doc, SIGNING_KEY), retain=True)
    agg.subscribe("ldp/c1/r/+")

    def state_for(device_id, password):
        return device_runner.prepare_device(tmp_path / device_id, device_id, SIGNING_KEY,
                                            broker={"host": "127.0.0.1", "port": port,
                                                    "user": device_id, "password": password})

    def ledgered_report(state):
        return bytes.fromhex(read_ledger(state)["reports"]["%d:1" % doc["campaign_id"]][2])

    good = state_for("dev-a", creds["dev-a"])
    done = run_client(binary, good, port, "c1", 5)
    assert done.returncode == device_runner.EXIT_DONE, done.stdout + done.stderr
    assert "CONNACK refused" not in done.stdout
    report_a = ledgered_report(good)
    assert agg.wait_for("ldp/c1/r/dev-a", report_a) == [("ldp/c1/r/dev-a", report_a, False)]

    wrong = state_for("dev-b", creds["dev-b"] + "x")
    refused = run_client(binary, wrong, port, "c1", 5, wait=15, timeout=3, backoff_max=0.5)
    assert refused.returncode == device_runner.EXIT_TIMEOUT, refused.stdout + refused.stderr
    assert "ldp dev-b connection-lost CONNACK refused:" in refused.stdout, refused.stdout
    assert "spent" not in refused.stdout and "published" not in refused.stdout
    assert read_ledger(wrong) is None

    overridden = run_client(binary, wrong, port, "c1", 5, extra=["--password", creds["dev-b"]])
    assert overridden.returncode == device_runner.EXIT_DONE, overridden.stdout + overridden.stderr
    report_b = ledgered_report(wrong)
    # the only dev-b report the aggregator ever saw is the one sent with the right password
    assert agg.wait_for("ldp/c1/r/dev-b", report_b) == [("ldp/c1/r/dev-b", report_b, False)]


def test_load_generator_name_must_be_distinct(tmp_path):
    for name in ("agg", "dev-a", "bad/name"):
        with pytest.raises(ConfigError) as err:
            broker.write_secured_config(str(tmp_path / name.replace("/", "_")), broker.SecuredBroker(
                "agg", DEVICES, loadgen_user=name, run_as=getpass.getuser()))
        assert err.value.field == "loadgen_user"


def test_pilot_on_the_secured_broker_end_to_end(secured, tmp_path):
    """broker-config's broker as a pilot runs it: serve with its own login, campaign commands
    with the admin login (serve's login is refused for them), the load generator under its
    prefix with acknowledgements back on ldp/<c>/a/loadgen/<id>, a MicroPython device with its
    own login: every report accepted once and acknowledged."""
    import json
    import sys
    from support.devices import write_key_files
    from support.service import ServeProcess

    connect, out, creds = secured
    url = "mqtt://127.0.0.1:%d" % connect.port
    pw = {}
    for user in ("agg", "agg-admin", "loadgen"):
        pw[user] = tmp_path / (user + ".pw")
        pw[user].write_text(creds[user] + "\n")
        os.chmod(pw[user], 0o600)
    key = tmp_path / "signing.key"
    write_key_files(key)
    state = "sqlite:///%s" % (tmp_path / "agg.db")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)],
                              capture_output=True, text=True, timeout=300)

    serve = ServeProcess(url, state, batch_ms=50, extra_args=(
        "--username", "agg", "--password-file", str(pw["agg"]))).start()
    try:
        create = ["campaign", "create", "--broker", url, "--state", state, "--signing-key", key,
                  "--name", "c1", "--mechanism", "olh", "--epsilon", 2, "--domain", 64,
                  "--retry-s", 2, "--retry-max-s", 4]
        refused = run(*create, "--username", "agg", "--password-file", pw["agg"])
        assert refused.returncode == 2 and "login `serve` uses" in refused.stderr, refused.stderr
        made = run(*create, "--username", "agg-admin", "--password-file", pw["agg-admin"])
        assert made.returncode == 0, made.stderr
        logins = tmp_path / "devices.csv"
        logins.write_text("role,username,password\ndevice,dev-a,%s\n" % creds["dev-a"])
        fleet = run("fleet", "--broker", url, "--campaign", "c1", "--trusted-keys",
                    str(key) + ".pub", "--devices", 300, "--micropython", 1, "--device-logins",
                    logins, "--username", "loadgen", "--password-file", pw["loadgen"],
                    "--seed", 4, "--ack-wait", 60, "--json")
        assert fleet.returncode == 0, fleet.stdout + fleet.stderr
        result = json.loads(fleet.stdout)
        assert result["sent"] == 301 and result["acks"]["unacknowledged"] == 0, result["acks"]
        counters = serve.wait_counts("c1", lambda c: c.get("accepted", 0) >= 301)
        rejected = {k: v for k, v in counters.items() if k not in ("received", "accepted", "duplicate")}
        assert counters.get("accepted") == 301 and rejected == {}, counters
        assert "broker-check not run at start" in serve.log()
    finally:
        serve.stop()


def test_live_metric_agents_subscribe_with_wildcards(secured):
    """A live-metric agent (spec §5.4) subscribes to `ldp/+/config` and `ldp/+/a/<login>`: the
    generated ACL delivers the campaigns' configs and the device's own acks, never another
    device's."""
    connect, _, _ = secured
    agg = connect("agg")
    assert agg.wait_connected()
    agg.publish("ldp/c1/config", b"signed config", retain=True)
    agg.subscribe("ldp/#")
    agg.wait_for("ldp/c1/config", b"signed config")
    dev_a = connect("dev-a")
    assert dev_a.wait_connected()
    dev_a.subscribe("ldp/+/config")
    dev_a.subscribe("ldp/+/a/dev-a")
    assert dev_a.messages.get(timeout=10)[:2] == ("ldp/c1/config", b"signed config")
    agg.publish("ldp/c1/a/dev-b", b"ack of b")
    agg.publish("ldp/c1/a/dev-a", b"ack of a")
    assert dev_a.wait_for("ldp/c1/a/dev-a", b"ack of a") == [("ldp/c1/a/dev-a", b"ack of a", False)]
