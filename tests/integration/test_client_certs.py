"""Device identity by client certificate, against broker-config's broker on a real
Mosquitto: `--client-ca` adds a TLS listener that requires a certificate from the fleet CA and
takes its CN as the login. A board flashed with `flash --client-ca` (MicroPython, over TLS) and a
C client with `device-cert`'s certificate report without any password; a device without a
certificate, or with one from another CA, is refused and publishes nothing; a certificate's CN
is held to that device's ACL (another device's id with it reports nothing)."""
import csv
import getpass
import json
import shutil
import subprocess
import sys

import pytest

from support.c_client import build_client, run_client
from support.devices import SIGNING_KEY, config_doc, write_key_files
from ldpfleet.broker.embedded import MosquittoProcess, free_port
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import run_device
from test_acl import Client
from test_tls import make_ca, make_server_cert


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture
def fleet(tmp_path):
    """broker-config's broker with a password TLS listener and a client-certificate one."""
    from cryptography import x509
    pki = tmp_path / "pki"
    pki.mkdir()
    server_ca, ca_cert, ca_key = make_ca(pki, "server-ca")
    server = make_server_cert(pki, "server", ca_cert, ca_key,
                              [x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))])
    fleet_ca, _, fleet_key = make_ca(pki, "fleet-ca")
    rogue_ca, _, rogue_key = make_ca(pki, "rogue-ca")
    for path, key in ((pki / "fleet-ca.key", fleet_key), (pki / "rogue-ca.key", rogue_key)):
        from test_tls import _write_key
        _write_key(path, key)
    devices = tmp_path / "devices.txt"
    devices.write_text("board-1\nc-dev-1\nbare\nrogue\n")
    port, device_port = free_port(), free_port()
    out = tmp_path / "broker"
    made = cli("broker-config", "--out", out, "--aggregator-user", "agg", "--devices-file", devices,
               "--port", port, "--device-port", device_port, "--bind", "127.0.0.1",
               "--certfile", server[0], "--keyfile", server[1], "--cafile", server_ca,
               "--client-ca", fleet_ca, "--run-as", getpass.getuser(),
               "--log-file", tmp_path / "mosquitto.log")
    assert made.returncode == 0, made.stderr
    conf = (out / "mosquitto.conf").read_text()
    assert "require_certificate true" in conf and "use_identity_as_username true" in conf
    with open(out / "credentials.csv") as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    proc = MosquittoProcess(str(out / "mosquitto.conf"), port,
                            log_path=str(tmp_path / "mosquitto.log")).start()
    agg = Client(port, "agg", creds["agg"], tls_ca=str(server_ca))
    assert agg.wait_connected()
    agg.subscribe("ldp/#")
    agg.publish("ldp/certs/config", campaign_config.sign(config_doc("certs"), SIGNING_KEY),
                retain=True)
    yield {"pki": pki, "server_ca": server_ca, "fleet_ca": fleet_ca, "rogue_ca": rogue_ca,
           "device_port": device_port, "agg": agg}
    agg.close()
    proc.stop()


def reports(agg, timeout=5):
    seen = []
    try:
        while True:
            topic, payload, _ = agg.messages.get(timeout=timeout)
            if "/r/" in topic:
                seen.append(topic)
    except Exception:  # queue.Empty: nothing more
        return seen


def test_devices_log_in_with_certificates_from_the_fleet_ca(fleet, tmp_path):
    key_file = tmp_path / "signing.key"
    write_key_files(key_file)
    stage = tmp_path / "stage"
    out = cli("flash", "--port", "/dev/ttyACM0", "--device-id", "board-1", "--trusted-keys",
              str(key_file) + ".pub", "--stage-dir", stage, "--dry-run", "--march", "x64",
              "--broker-host", "127.0.0.1", "--broker-port", fleet["device_port"],
              "--broker-ca", fleet["server_ca"], "--client-ca", fleet["fleet_ca"],
              "--client-ca-key", fleet["pki"] / "fleet-ca.key", "--campaign", "certs",
              "--value", "5")
    assert out.returncode == 0, out.stderr
    identity = json.loads((stage / "identity.json").read_text())
    assert identity["broker"]["tls"] == {"ca_file": "ca.der", "cert_file": "client.der",
                                         "key_file": "client.key.der"}
    assert "user" not in identity["broker"] and "password" not in identity["broker"]
    board = subprocess.run([device_runner.micropython_binary(), "main.py", "--once", "--timeout",
                            "30"], cwd=stage, env=device_runner.micropython_env(stage),
                           capture_output=True, text=True, timeout=60)
    assert board.returncode == 0, board.stdout + board.stderr

    state = device_runner.prepare_device(tmp_path / "c", "c-dev-1", SIGNING_KEY, broker={
        "host": "127.0.0.1", "port": fleet["device_port"],
        "tls": {"ca_file": str(fleet["server_ca"]), "cert_file": "client.crt",
                "key_file": "client.key"}})
    made = cli("device-cert", "--client-ca", fleet["fleet_ca"], "--client-ca-key",
               fleet["pki"] / "fleet-ca.key", "--device-id", "c-dev-1", "--out", state)
    assert made.returncode == 0, made.stderr
    c = run_client(build_client(), state, None, "certs", 3, wait=30)
    assert c.returncode == 0, c.stdout + c.stderr
    # c-dev-1's certificate used by a device claiming another id: the broker's login is the
    # certificate's CN, so the ACL drops its report for "bare"
    impostor = device_runner.prepare_device(tmp_path / "impostor", "bare", SIGNING_KEY, broker={
        "host": "127.0.0.1", "port": fleet["device_port"],
        "tls": {"ca_file": str(fleet["server_ca"]), "cert_file": str(state / "client.crt"),
                "key_file": str(state / "client.key")}})
    sent = run_client(build_client(), impostor, None, "certs", 3, wait=15)
    assert "published" in sent.stdout + sent.stderr  # the broker took it (QoS 1) ...
    assert sorted(reports(fleet["agg"])) == ["ldp/certs/r/board-1", "ldp/certs/r/c-dev-1"]  # ... and dropped it


@pytest.mark.parametrize("client", ["micropython", "c"])
def test_devices_without_a_fleet_certificate_are_refused(fleet, tmp_path, client):
    """No certificate (only the broker's CA), or one signed by another CA: the TLS handshake
    fails, the device times out and nothing reaches the aggregator."""
    rogue_dir = tmp_path / "rogue-cert"
    assert cli("device-cert", "--client-ca", fleet["rogue_ca"], "--client-ca-key",
               fleet["pki"] / "rogue-ca.key", "--device-id", "rogue", "--out",
               rogue_dir).returncode == 0
    for name, extra in (("bare", {}), ("rogue", {"cert_file": str(rogue_dir / "client.crt"),
                                                "key_file": str(rogue_dir / "client.key")})):
        tls = dict({"ca_file": str(fleet["server_ca"])}, **extra)
        if client == "micropython" and extra:  # boards load DER
            from cryptography import x509
            from cryptography.hazmat.primitives import serialization
            der = tmp_path / "rogue.der"
            der.write_bytes(x509.load_pem_x509_certificate((rogue_dir / "client.crt").read_bytes())
                            .public_bytes(serialization.Encoding.DER))
            key = serialization.load_pem_private_key((rogue_dir / "client.key").read_bytes(), None)
            (tmp_path / "rogue.key.der").write_bytes(key.private_bytes(
                serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()))
            tls.update(cert_file=str(der), key_file=str(tmp_path / "rogue.key.der"))
        state = device_runner.prepare_device(
            tmp_path / ("%s-%s" % (client, name)), name, SIGNING_KEY, value=3, campaign="certs",
            broker={"host": "127.0.0.1", "port": fleet["device_port"], "tls": tls})
        if client == "c":
            proc = run_client(build_client(), state, None, "certs", 3, wait=8)
            out = proc.stdout + proc.stderr
        else:
            proc = run_device(state, "127.0.0.1", fleet["device_port"], "certs",
                                            wait=8, value=3)
            out = proc.stdout
        assert proc.returncode != 0 and "published" not in out, (name, out)
    assert reports(fleet["agg"], timeout=2) == []
    shutil.rmtree(rogue_dir)


def test_aggregator_side_logins_get_no_device_certificate(tmp_path):
    """On the certificate listener the CN is the login: a certificate for `agg` (or the admin,
    the load generator, a worker) would read every report. device-cert and flash --client-ca
    refuse those names, and with broker-config's credentials.csv every name not a device row."""
    pki = tmp_path / "pki"
    pki.mkdir()
    fleet_ca, _, fleet_key = make_ca(pki, "fleet-ca")
    from test_tls import _write_key
    _write_key(pki / "fleet-ca.key", fleet_key)
    devices = tmp_path / "devices.txt"
    devices.write_text("board-1\nsensor-admin-panel\n")
    made = cli("broker-config", "--out", tmp_path / "broker", "--aggregator-user", "collector",
               "--loadgen-user", "bulk", "--devices-file", devices, "--insecure-plaintext",
               "--run-as", getpass.getuser())
    assert made.returncode == 0, made.stderr
    creds = tmp_path / "broker" / "credentials.csv"

    def device_cert(device_id, *extra):
        return cli("device-cert", "--client-ca", fleet_ca, "--client-ca-key", pki / "fleet-ca.key",
                   "--device-id", device_id, "--out", tmp_path / ("out-" + device_id), *extra)

    for name in ("agg", "admin", "aggregator", "loadgen", "collector-admin", "ldpfleet-a1",
                 "LDP-Aggregator"):
        out = device_cert(name)
        assert out.returncode == 2 and "reserved for aggregator-side logins" in out.stderr, name
        assert not (tmp_path / ("out-" + name)).exists()
    for name, why in (("collector", "the aggregator login"), ("bulk", "the loadgen login"),
                      ("board-2", "not listed")):
        out = device_cert(name, "--credentials", creds)
        assert out.returncode == 2 and "%r is %s in" % (name, why) in out.stderr, out.stderr
    assert device_cert("collector").returncode == 0  # without the file only the names above
    assert device_cert("board-1", "--credentials", creds).returncode == 0
    assert device_cert("sensor-admin-panel", "--credentials", creds).returncode == 0
    key_file = tmp_path / "signing.key"
    write_key_files(key_file)
    flashed = cli("flash", "--port", "/dev/ttyACM0", "--device-id", "collector-admin",
                  "--trusted-keys", str(key_file) + ".pub", "--dry-run", "--march", "x64",
                  "--broker-host", "127.0.0.1", "--broker-ca", fleet_ca, "--client-ca", fleet_ca,
                  "--client-ca-key", pki / "fleet-ca.key")
    assert flashed.returncode == 2 and "reserved for aggregator-side logins" in flashed.stderr
