"""Device client certificates from a fleet CA: device identity on the broker.

A device may log in with a TLS client certificate instead of a password, as managed IoT
platforms do: the broker's device listener requires a certificate signed by the fleet CA
(`require_certificate true`) and takes its Common Name as the login (`use_identity_as_username
true`), so the ACL and the client-id binding apply to the CN, which is the device id.
`issue_device_certificate` makes a P-256 key and a certificate (CN = device id, client-auth
only, `valid_days`) signed by the CA; `ldpfleet flash --client-ca/--client-ca-key` puts them on
a board (DER), `ldpfleet device-cert` writes them for a C client (PEM).
"""
import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..core.errors import ConfigError
from ..core.signing import read_bytes

DEFAULT_VALID_DAYS = 3650


def load_ca(cert_path: str, key_path: str):
    """(certificate, private key) of the fleet CA, PEM files; ConfigError names the bad one."""
    try:
        cert = x509.load_pem_x509_certificate(read_bytes(cert_path, "client_ca"))
    except ValueError as exc:
        raise ConfigError("client_ca", "%s is not a PEM certificate: %s" % (cert_path, exc)) from None
    try:
        key = serialization.load_pem_private_key(read_bytes(key_path, "client_ca_key"), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError("client_ca_key", "%s: %s" % (key_path, exc)) from None
    if key.public_key().public_numbers() != cert.public_key().public_numbers():
        raise ConfigError("client_ca_key", "%s is not the key of %s" % (key_path, cert_path))
    return cert, key


def issue_device_certificate(ca_cert, ca_key, device_id: str, valid_days: int = DEFAULT_VALID_DAYS,
                             credentials: str = None):
    """(certificate, private key) objects for `device_id` (CN), signed by the fleet CA; refused
    for aggregator-side logins (`broker.check_device_login`; `credentials`: broker-config's
    credentials.csv, whose device rows alone may get one)."""
    from .secured import check_device_login
    check_device_login(device_id, credentials)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, device_id)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                         content_commitment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def encode(cert, key, der: bool) -> tuple:
    """(certificate bytes, key bytes): DER (boards) or PEM (C client), key as PKCS#8."""
    enc = serialization.Encoding.DER if der else serialization.Encoding.PEM
    return (cert.public_bytes(enc),
            key.private_bytes(enc, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
