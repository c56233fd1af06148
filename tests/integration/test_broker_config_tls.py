"""`ldpfleet broker-config --certfile/--keyfile`: the TLS listener is on 8883
by default (what the README, `flash --broker-ca` and the C client expect), the printed
`mosquitto -c ...` works as root — Mosquitto drops to its own user and must still read the key,
so broker-config copies certificate and key into the output directory and hands them to that
user — and the output says which login and password file serve/campaign/fleet need and what
devices.txt is."""
import csv
import os
import pwd
import ssl
import stat
import time

import paho.mqtt.client as mqtt
import pytest

from ldpfleet.broker.embedded import MosquittoProcess, free_port
from ldpfleet import cli
from test_tls import make_ca, make_server_cert
from cryptography import x509
import ipaddress


@pytest.fixture
def open_dir():
    """A directory the 'mosquitto' user can traverse (pytest's tmp_path is 0700 root)."""
    import shutil
    import tempfile
    path = tempfile.mkdtemp(prefix="ldpfleet-bc-")
    os.chmod(path, 0o755)
    yield __import__("pathlib").Path(path)
    shutil.rmtree(path, ignore_errors=True)


def test_tls_listener_on_8883_with_a_key_the_broker_user_can_read(open_dir, capsys):
    tmp_path = open_dir
    if os.geteuid() != 0:
        pytest.skip("the privilege drop only happens when mosquitto starts as root")
    try:
        pwd.getpwnam("mosquitto")
    except KeyError:
        pytest.fail("Debian's mosquitto package creates the 'mosquitto' user; it is missing")
    ca_path, ca_cert, ca_key = make_ca(tmp_path, "bc-ca")
    cert, key = make_server_cert(tmp_path, "srv", ca_cert, ca_key,
                                 [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    os.chmod(key, 0o600)  # a root-only key, as a user would have it
    devices = tmp_path / "devices.txt"
    devices.write_text("dev-1\n")
    out = tmp_path / "broker"
    args = ["broker-config", "--out", str(out), "--aggregator-user", "agg", "--devices-file",
            str(devices), "--certfile", str(cert), "--keyfile", str(key), "--cafile", str(ca_path),
            "--run-as", "mosquitto", "--bind", "127.0.0.1"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    conf = (out / "mosquitto.conf").read_text()
    assert "listener 8883 127.0.0.1" in conf
    assert "keyfile %s" % (out / "tls" / "srv.key") in conf
    copied = out / "tls" / "srv.key"
    assert stat.S_IMODE(copied.stat().st_mode) == 0o600
    assert pwd.getpwuid(copied.stat().st_uid).pw_name == "mosquitto"
    # the next steps a newcomer needs
    assert "mosquitto -c %s" % (out / "mosquitto.conf") in printed
    assert "--username agg --password-file agg.pw" in printed and "mqtts://HOST:8883" in printed
    assert str(devices) in printed and "role device" in printed
    # the printed command works as root on a free port: mosquitto drops to its user, reads the key
    port = free_port()
    conf_path = tmp_path / "on-free-port.conf"
    conf_path.write_text(conf.replace("listener 8883", "listener %d" % port))
    proc = MosquittoProcess(str(conf_path), port).start()
    try:
        with open(out / "credentials.csv") as f:
            password = {r["username"]: r["password"] for r in csv.DictReader(f)}["agg"]
        connected = []
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bc-agg")
        c.tls_set(ca_certs=str(ca_path), cert_reqs=ssl.CERT_REQUIRED)
        c.username_pw_set("agg", password)
        c.on_connect = lambda cl, u, f, rc, p: connected.append(rc)
        c.connect("127.0.0.1", port)
        c.loop_start()
        deadline = time.monotonic() + 10
        while not connected and time.monotonic() < deadline:
            time.sleep(0.05)
        c.disconnect()
        c.loop_stop()
        assert connected and not connected[0].is_failure, connected
    finally:
        proc.stop()


def test_plaintext_default_port_stays_1883(tmp_path, capsys):
    devices = tmp_path / "devices.txt"
    devices.write_text("dev-1\n")
    out = tmp_path / "b"
    base = ["broker-config", "--out", str(out), "--aggregator-user", "agg",
            "--devices-file", str(devices), "--run-as", "root"]
    assert cli.main(base) == 2  # TLS is the default: plaintext only when asked for by name
    assert "--insecure-plaintext" in capsys.readouterr().err
    assert cli.main(base + ["--insecure-plaintext"]) == 0
    assert "listener 1883" in (out / "mosquitto.conf").read_text()
    captured = capsys.readouterr()
    assert "mqtt://HOST:1883" in captured.out and "PLAINTEXT" in captured.err
