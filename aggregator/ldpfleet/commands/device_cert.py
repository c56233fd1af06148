"""`ldpfleet device-cert`: a device's TLS client certificate from the fleet CA (the C client's
login on broker-config's --client-ca listener; broker/certs.py)."""
import os
from pathlib import Path


def register(subparsers):
    dc = subparsers.add_parser(
        "device-cert", help="issue a device's TLS client certificate from the fleet CA (C client)",
        description="Writes OUT/client.crt and OUT/client.key (PEM, the key 0600): a P-256 key and "
                    "a certificate whose CN is the device id, signed by the fleet CA. The C "
                    "client's identity names them in broker.tls.cert_file/key_file; a broker "
                    "listener with require_certificate and use_identity_as_username (broker-config "
                    "--client-ca) then takes the CN as the device's login.")
    dc.add_argument("--client-ca", required=True, metavar="PEM", help="the fleet CA certificate")
    dc.add_argument("--client-ca-key", required=True, metavar="PEM", help="the fleet CA's key")
    dc.add_argument("--device-id", required=True,
                    help="the device's id (the certificate's CN); aggregator-side logins (agg, "
                         "admin, *-admin, ldpfleet-*, ...) are refused")
    dc.add_argument("--credentials", default=None, metavar="CSV",
                    help="broker-config's credentials.csv: the id must be a device row there")
    dc.add_argument("--out", required=True, help="directory (the device's state directory)")
    dc.set_defaults(func=run_device_cert_command)


def run_device_cert_command(args):
    from ..broker import certs
    ca_cert, ca_key = certs.load_ca(args.client_ca, args.client_ca_key)
    cert, key = certs.issue_device_certificate(ca_cert, ca_key, args.device_id,
                                               credentials=args.credentials)
    cert_pem, key_pem = certs.encode(cert, key, der=False)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "client.crt").write_bytes(cert_pem)
    fd = os.open(out / "client.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    print("wrote %s and %s (CN %s, signed by %s)" % (out / "client.crt", out / "client.key",
                                                     args.device_id, args.client_ca))
    return 0
