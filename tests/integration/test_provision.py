"""Provisioning a fleet: `ldpfleet provision` writes one complete bundle per device row of
broker-config's credentials.csv (identity naming the broker, the board's own login, trusted
keys, ledger.init, the client compiled once), secrets only from files; `ldpfleet flash
--bundle` copies one with a single mpremote command; an x64 bundle runs as a board against
broker-config's real broker with the login it was given. `flash` refuses an identity without a
broker and takes the board's password from credentials.csv or a file."""
import csv
import getpass
import json
import os
import queue
import subprocess
import sys

import paho.mqtt.client as mqtt
import pytest

from ldpfleet.broker.embedded import MosquittoProcess, free_port
from ldpfleet import cli
from ldpfleet.provision import device_runner
from ldpfleet.core import config as campaign_config

from support.devices import SIGNING_KEY, config_doc, write_key_files

DEVICES = ["board-a", "board-b", "board_c"]


def run(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fleet(tmp_path):
    """broker-config's files for DEVICES (plaintext, a free port), the signing key, a Wi-Fi
    password file."""
    devices = tmp_path / "devices.txt"
    devices.write_text("\n".join(DEVICES) + "\n")
    port = free_port()
    out = tmp_path / "broker"
    assert cli.main(["broker-config", "--out", str(out), "--aggregator-user", "agg",
                     "--devices-file", str(devices), "--campaigns", "cpu", "--port", str(port),
                     "--bind", "127.0.0.1", "--insecure-plaintext", "--run-as", getpass.getuser(),
                     "--log-file", str(tmp_path / "mosquitto.log")]) == 0
    with open(out / "credentials.csv") as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    key = tmp_path / "signing.key"
    write_key_files(key)
    wifi = tmp_path / "wifi.pw"
    wifi.write_text("lab-wifi-secret\n")
    return {"out": out, "port": port, "creds": creds, "key": key, "wifi": wifi, "tmp": tmp_path}


def provision(fleet, march="x64", wifi=True):
    bundles = fleet["tmp"] / "bundles"
    extra = ["--wifi-ssid", "lab", "--wifi-password-file", fleet["wifi"]] if wifi else []
    proc = run("provision", "--credentials", fleet["out"] / "credentials.csv", "--out", bundles,
               "--trusted-keys", str(fleet["key"]) + ".pub", "--broker-host", "127.0.0.1",
               "--broker-port", fleet["port"], "--march", march, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bundles, proc.stdout


def test_provision_writes_one_complete_bundle_per_device_with_secrets_from_files(fleet):
    bundles, out = provision(fleet, "xtensawin")
    for secret in list(fleet["creds"].values()) + ["lab-wifi-secret"]:
        assert secret not in out  # nothing secret is printed
    assert "wrote 3 board bundles" in out and "ldpfleet flash --bundle" in out
    assert os.stat(bundles).st_mode & 0o077 == 0
    sources = sorted(p.name for p in (device_runner.DEVICE_DIR / "ldp").glob("*.py"))
    inodes = set()
    for device in DEVICES:
        bundle = bundles / device
        manifest = json.loads((bundle / "bundle.json").read_text())
        assert manifest["device_id"] == device and manifest["march"] == "xtensawin"
        assert sorted(manifest["files"]) == sorted(
            ["ldp/%s.mpy" % name[:-3] for name in sources]
            + ["main.py", "identity.json", "ledger.init"])
        for rel in manifest["files"]:
            assert (bundle / rel).is_file(), rel
        identity = json.loads((bundle / "identity.json").read_text())
        assert identity == {
            "device_id": device, "trusted_keys": [SIGNING_KEY.public.to_doc()],
            "eps_cap_milli": 4000, "lifetime_budget_milli": 40000,
            "broker": {"host": "127.0.0.1", "port": fleet["port"], "user": device,
                       "password": fleet["creds"][device]},
            "wifi": {"ssid": "lab", "password": "lab-wifi-secret"}}
        assert os.stat(bundle / "identity.json").st_mode & 0o077 == 0
        assert json.loads((bundle / "ledger.init").read_text())["gen"] == 0
        assert (bundle / "ldp" / "hash.mpy").read_bytes()[2] >> 2 == 10  # xtensawin
        inodes.add(os.stat(bundle / "ldp" / "hash.mpy").st_ino)
    assert len(inodes) == 1  # compiled once, hard-linked into every bundle
    assert not (bundles / "agg").exists()  # only the device rows

    proc = run("flash", "--bundle", bundles / "board-b", "--port", "/dev/ttyUSB3", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    copy = next(line for line in proc.stdout.splitlines() if " fs cp " in line)
    for rel in manifest["files"]:
        assert "%s :%s" % (bundles / "board-b" / rel, rel) in copy
    assert "bundle.json" not in copy and copy.rstrip().endswith("+ reset")
    assert "mpremote connect /dev/ttyUSB3 fs mkdir :ldp" in proc.stdout


def test_a_provisioned_x64_bundle_reports_through_broker_configs_broker(fleet):
    """The bundle is all a board needs: run as the unix port's filesystem root it logs in to
    the secured broker with its own credentials.csv password and reports."""
    bundles, _ = provision(fleet, wifi=False)  # the unix port has no Wi-Fi (`network`)
    proc = MosquittoProcess(str(fleet["out"] / "mosquitto.conf"), fleet["port"],
                            log_path=str(fleet["tmp"] / "mosquitto.log")).start()
    got = queue.Queue()
    agg = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="agg", protocol=mqtt.MQTTv311)
    agg.username_pw_set("agg", fleet["creds"]["agg"])
    agg.on_message = lambda c, u, m: got.put((m.topic, bytes(m.payload)))
    agg.connect("127.0.0.1", fleet["port"])
    agg.loop_start()
    try:
        agg.subscribe("ldp/cpu/r/+", qos=1)
        agg.publish("ldp/cpu/config", campaign_config.sign(config_doc("cpu"), SIGNING_KEY),
                    qos=1, retain=True).wait_for_publish(10)
        bundle = bundles / "board-b"
        (bundle / "value.json").write_text(json.dumps({"campaign": "cpu", "value": 3}))
        dev = subprocess.run([device_runner.micropython_binary(), "main.py", "--once",
                              "--timeout", "30"], cwd=bundle,
                             env=device_runner.micropython_env(bundle), capture_output=True,
                             text=True, timeout=60)
        assert dev.returncode == 0, dev.stdout + dev.stderr
        topic, payload = got.get(timeout=10)
        assert topic == "ldp/cpu/r/board-b" and len(payload) == 18
    finally:
        agg.loop_stop()
        agg.disconnect()
        proc.stop()
    assert "not authorised" not in (fleet["tmp"] / "mosquitto.log").read_text().lower()


def test_flash_needs_a_broker_and_takes_the_password_from_credentials_or_a_file(fleet, tmp_path):
    base = ["flash", "--port", "/dev/ttyACM0", "--trusted-keys", str(fleet["key"]) + ".pub",
            "--dry-run", "--march", "x64"]
    proc = run(*base, "--device-id", "board-a")
    assert proc.returncode == 2 and "broker_host" in proc.stderr, proc.stderr
    assert "--broker-host" in proc.stderr

    stage = tmp_path / "one"
    proc = run(*base, "--device-id", "board-a", "--broker-host", "10.0.0.2", "--credentials",
               fleet["out"] / "credentials.csv", "--stage-dir", stage)
    assert proc.returncode == 0, proc.stderr
    assert fleet["creds"]["board-a"] not in proc.stdout + proc.stderr
    identity = json.loads((stage / "identity.json").read_text())
    assert identity["broker"] == {"host": "10.0.0.2", "port": 1883, "user": "board-a",
                                  "password": fleet["creds"]["board-a"]}

    pw = tmp_path / "board.pw"
    pw.write_text("from-a-file\n")
    proc = run(*base, "--device-id", "board-z", "--broker-host", "10.0.0.2",
               "--password-file", pw, "--wifi-ssid", "lab", "--wifi-password-file", fleet["wifi"],
               "--stage-dir", tmp_path / "two")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    identity = json.loads((tmp_path / "two" / "identity.json").read_text())
    assert identity["broker"]["user"] == "board-z"
    assert identity["broker"]["password"] == "from-a-file"
    assert identity["wifi"] == {"ssid": "lab", "password": "lab-wifi-secret"}

    proc = run(*base, "--device-id", "board-a", "--broker-host", "10.0.0.2", "--credentials",
               fleet["out"] / "credentials.csv", "--password-file", pw)
    assert proc.returncode == 2 and "one of --credentials" in proc.stderr, proc.stderr
    proc = run(*base, "--device-id", "nobody", "--broker-host", "10.0.0.2", "--credentials",
               fleet["out"] / "credentials.csv")
    assert proc.returncode == 2 and "no device row for nobody" in proc.stderr, proc.stderr
    # the old command-line secrets still work, with a warning
    proc = run(*base, "--device-id", "board-a", "--broker-host", "10.0.0.2", "--password", "x",
               "--wifi-ssid", "lab", "--wifi-password", "y", "--stage-dir", tmp_path / "three")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("visible in the process list") == 2, proc.stderr


def test_the_operators_password_settings_never_reach_a_board(fleet, tmp_path):
    """LDPFLEET_PASSWORD_FILE and a config file's password_file are the operator's broker
    login: flash's --password-file is the board's own, command line only."""
    secret = tmp_path / "agg.pw"
    secret.write_text("the-aggregators-password\n")
    conf = tmp_path / "ldpfleet.toml"
    conf.write_text('password_file = "%s"\n' % secret)
    env = dict(os.environ, LDPFLEET_PASSWORD_FILE=str(secret),
               LDPFLEET_PASSWORD="the-aggregators-password")
    stage = tmp_path / "stage"
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "--config", str(conf), "flash",
                           "--port", "x", "--device-id", "board-a", "--trusted-keys",
                           str(fleet["key"]) + ".pub", "--broker-host", "10.0.0.2", "--march",
                           "x64", "--stage-dir", str(stage), "--dry-run"],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    identity = json.loads((stage / "identity.json").read_text())
    assert "user" not in identity["broker"] and "password" not in identity["broker"]
    assert "the-aggregators-password" not in json.dumps(identity)
