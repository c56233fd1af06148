"""TLS end to end on a private Mosquitto with TLS listeners (certificates made here).

* `campaign create`, `serve` and `fleet` over mqtts:// with a CA file: simulated, MicroPython
  and C devices all deliver over TLS and the aggregator accepts every report once.
* A device that does not trust the broker's certificate (another CA), or whose broker
  certificate names another host, never sends anything: no report reaches the broker and
  its ledger stays empty. Both clients, MicroPython and C.
"""
import datetime
import ipaddress
import json
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.brokers import PrivateMosquitto, free_port
from support.c_client import build_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc, write_key_files
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from support.service import ServeProcess


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path, key):
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_ca(directory, cn):
    """(cert path, cert, key) of a self-signed CA valid for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    path = directory / ("%s.pem" % cn)
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def make_server_cert(directory, stem, ca_cert, ca_key, san):
    """(cert path, key path) of a server certificate for the names in `san`, signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("ldpfleet test broker"))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / ("%s.pem" % stem), directory / ("%s.key" % stem)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca_path, ca_cert, ca_key = make_ca(d, "ldpfleet-test-ca")
    rogue_path, _, _ = make_ca(d, "rogue-ca")
    server = make_server_cert(d, "server", ca_cert, ca_key,
                              [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    misnamed = make_server_cert(d, "misnamed", ca_cert, ca_key, [x509.DNSName("broker.invalid")])
    return {"ca": ca_path, "rogue_ca": rogue_path, "server": server, "misnamed": misnamed}


@pytest.fixture
def tls_broker(pki):
    """A private Mosquitto with its plain listener plus two TLS listeners: `tls_port` (a
    certificate for 127.0.0.1 from the test CA) and `misnamed_port` (same CA, certificate for
    broker.invalid)."""
    tls_port, misnamed_port = free_port(), free_port()
    extra = "\n".join([
        "listener %d 127.0.0.1" % tls_port,
        "certfile %s" % pki["server"][0], "keyfile %s" % pki["server"][1],
        "listener %d 127.0.0.1" % misnamed_port,
        "certfile %s" % pki["misnamed"][0], "keyfile %s" % pki["misnamed"][1], ""])
    broker = PrivateMosquitto(extra_conf=extra).start()
    broker.tls_port, broker.misnamed_port = tls_port, misnamed_port
    yield broker
    broker.stop()


def cli(*args, timeout=180):
    out = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_service_and_fleet_over_tls(tmp_path, tls_broker, pki):
    url = "mqtts://127.0.0.1:%d" % tls_broker.tls_port
    state = "sqlite:///%s" % (tmp_path / "state.db")
    key_file = tmp_path / "fleet.key"
    cli("campaign", "keygen", key_file)
    cli("campaign", "create", "--broker", url, "--cafile", pki["ca"], "--state", state,
        "--signing-key", key_file, "--name", "tlsdemo", "--mechanism", "olh",
        "--epsilon", "2", "--domain", "0-63")
    serve = ServeProcess(url, state, batch_ms=50, extra_args=("--cafile", str(pki["ca"]))).start()
    try:
        sent = json.loads(cli(
            "fleet", "--broker", url, "--cafile", pki["ca"], "--campaign", "tlsdemo",
            "--trusted-keys", key_file, "--devices", 400, "--micropython", 3, "--c-clients", 2,
            "--c-client", build_client(), "--seed", 5, "--json"))
        assert sent["sent"] == 405
        assert sent["sent_by_kind"] == {"simulated": 400, "micropython": 3, "c": 2}
        counters = serve.wait_counts("tlsdemo", lambda c: c.get("accepted", 0) >= 405)
    finally:
        serve.stop()
    assert counters.get("accepted") == 405 and counters.get("received") == 405


def _identity(state, port, ca_file):
    return device_runner.prepare_device(
        state, state.name, SIGNING_KEY, value=3, campaign="tlsneg",
        broker={"host": "127.0.0.1", "port": port, "tls": {"ca_file": str(ca_file)}})


REFUSAL_REASONS = {  # what each client logs when the handshake fails (mbedTLS / OpenSSL)
    "untrusted_ca": ("not correctly signed by the trusted CA", "certificate verify failed"),
    "wrong_name": ("does not match with the expected CN", "host name verification failed"),
}


def run_c_device(state, timeout):
    return subprocess.run([str(build_client()), "--campaign", "tlsneg", "--state-dir", str(state),
                           "--value", "3", "--once", "--timeout", str(timeout), "--backoff-max", "0.5"],
                          capture_output=True, text=True, timeout=timeout + 25)


@pytest.mark.parametrize("case", sorted(REFUSAL_REASONS))
def test_devices_refuse_an_unverified_broker(tmp_path, tls_broker, pki, case):
    """Nothing leaves a device whose broker fails verification; its budget is untouched. The
    same devices with the right CA and broker name deliver (the refusal is the certificate's)."""
    doc = config_doc("tlsneg")
    collector = ReportCollector(tls_broker.port)
    collector.publish("ldp/tlsneg/config", campaign_config.sign(doc, SIGNING_KEY))
    port = tls_broker.tls_port if case == "untrusted_ca" else tls_broker.misnamed_port
    ca = pki["rogue_ca"] if case == "untrusted_ca" else pki["ca"]
    mp_state = _identity(tmp_path / "mp-dev", port, ca)
    c_state = _identity(tmp_path / "c-dev", port, ca)
    try:
        mp = run_device(mp_state, "127.0.0.1", port, "tlsneg", timeout=4,
                                      backoff_max=0.5, wait=30)
        c = run_c_device(c_state, 4)
        collector.barrier()
        assert collector.reports() == []
        assert mp.returncode == device_runner.EXIT_TIMEOUT, mp.stdout
        assert c.returncode == device_runner.EXIT_TIMEOUT, c.stdout + c.stderr
        mp_reason, c_reason = REFUSAL_REASONS[case]
        assert mp_reason in mp.stdout and c_reason in c.stdout, (mp.stdout[-500:], c.stdout[-500:])
        for out in (mp.stdout, c.stdout):
            assert " connected " not in out and " spent " not in out
        for state in (mp_state, c_state):
            assert read_ledger(state) is None

        good = tls_broker.tls_port
        _identity(mp_state, good, pki["ca"])
        _identity(c_state, good, pki["ca"])
        ok = run_device(mp_state, "127.0.0.1", good, "tlsneg", timeout=20, wait=40)
        assert ok.returncode == 0, ok.stdout
        c_ok = run_c_device(c_state, 20)
        assert c_ok.returncode == 0, c_ok.stdout + c_ok.stderr
        reports = collector.wait_for(lambda r: len(r) >= 2, 20)
        assert sorted(t for t, _ in reports) == ["ldp/tlsneg/r/c-dev", "ldp/tlsneg/r/mp-dev"]
        for state in (mp_state, c_state):
            assert read_ledger(state) is not None
    finally:
        collector.close()


def test_flashed_board_filesystem_reports_over_tls(tmp_path, tls_broker, pki):
    """`ldpfleet flash --broker-ca` stages ca.der and identity.json's broker.tls; the x64
    staging, run as a board's filesystem root, verifies the broker and delivers over TLS."""
    key_file = tmp_path / "signing.key"
    write_key_files(key_file)
    stage = tmp_path / "stage"
    out = cli("flash", "--port", "/dev/ttyACM0", "--device-id", "board-tls", "--trusted-keys",
              key_file, "--stage-dir", stage, "--dry-run", "--march", "x64", "--broker-host",
              "127.0.0.1", "--broker-ca", pki["ca"], "--campaign", "boardtls", "--value", "5")
    identity = json.loads((stage / "identity.json").read_text())
    assert identity["broker"] == {"host": "127.0.0.1", "port": 8883, "tls": {"ca_file": "ca.der"}}
    assert (stage / "ca.der").read_bytes() == x509.load_pem_x509_certificate(
        pki["ca"].read_bytes()).public_bytes(serialization.Encoding.DER)
    assert "%s :ca.der" % (stage / "ca.der") in out
    collector = ReportCollector(tls_broker.port)
    try:
        collector.publish("ldp/boardtls/config",
                          campaign_config.sign(config_doc("boardtls"), SIGNING_KEY))
        proc = subprocess.run([device_runner.micropython_binary(), "main.py", "--once", "--timeout",
                               "30", "--port", str(tls_broker.tls_port)],
                              cwd=stage, env=device_runner.micropython_env(stage),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports = collector.barrier()
    finally:
        collector.close()
    assert [t for t, _ in reports] == ["ldp/boardtls/r/board-tls"]
