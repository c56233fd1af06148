"""`ldpfleet flash`: install the MicroPython device client on a board.

Precompiles device/ldp with `mpy-cross -march=<arch>` (viper code is architecture specific),
writes identity.json (device id, the public keys it trusts — no secret that signs —, its own ε cap and lifetime budget, broker,
with --ack-key its own acknowledgement key;
with --broker-ca the CA certificate goes to the board as ca.der and the device speaks TLS)
and optionally value.json, then copies everything with one `mpremote connect PORT fs cp ...`
chain. `--dry-run` prints the files and the command without touching a board.
"""
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import device_runner, protocol
from ..config import NAME_RE
from ..errors import ConfigError
from ..signing import read_public_keys
from . import tcp_port

BOARD_MARCHES = ("xtensawin", "xtensa", "armv6m", "armv7m", "armv7emsp", "armv7emdp", "rv32imc", "x64")


def register(subparsers):
    p = subparsers.add_parser(
        "flash", help="install the MicroPython device client on a board (mpy-cross + mpremote)",
        description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--port", required=True, help="serial port of the board, e.g. /dev/ttyUSB0")
    p.add_argument("--device-id", required=True, help="device id ([A-Za-z0-9_-]{1,64})")
    p.add_argument("--trusted-keys", required=True, metavar="FILE",
                   help="the public key(s) the board trusts: PATH.pub from `campaign keygen PATH` "
                        "(a JSON list of up to 8 keys is taken too)")
    p.add_argument("--march", default="xtensawin", choices=BOARD_MARCHES,
                   help="mpy-cross architecture: xtensawin (ESP32), armv6m (RP2040), "
                        "armv7emsp (Cortex-M4F/M7 boards), x64 (unix port); default xtensawin")
    p.add_argument("--eps-cap", type=float, default=4.0,
                   help="the device's own per-report ε cap (nats, multiple of 0.001; default 4)")
    p.add_argument("--budget", type=float, default=40.0,
                   help="the device's lifetime ε budget (nats; default 40)")
    p.add_argument("--broker-host", default=None, help="MQTT broker host written to identity.json")
    p.add_argument("--broker-port", type=tcp_port, default=None, help="default 1883, 8883 with --broker-ca")
    p.add_argument("--broker-ca", default=None, metavar="PEM",
                   help="CA certificate of the broker's TLS certificate: copied to the board as "
                        "ca.der; the device then connects over TLS and verifies the broker's "
                        "certificate and host name")
    p.add_argument("--client-ca", default=None, metavar="PEM",
                   help="the fleet CA: issue the board a client certificate (CN = device id) "
                        "and key, copied as client.der / client.key.der; the board logs in with "
                        "them instead of a password (needs --broker-ca and --client-ca-key)")
    p.add_argument("--client-ca-key", default=None, metavar="PEM", help="the fleet CA's key")
    p.add_argument("--username", default=None, help="MQTT username (broker-config ACLs)")
    p.add_argument("--password", default=None, help="MQTT password")
    p.add_argument("--ack-key", default=None, metavar="FILE",
                   help="the fleet's ack root key (`ldpfleet ack-key init FILE`): the board gets its "
                        "own acknowledgement key (identity.json ack_key, spec §6) and accepts only "
                        "acks MAC'd under it (serve --ack-key); never the root key itself")
    p.add_argument("--wifi-ssid", default=None)
    p.add_argument("--wifi-password", default=None)
    p.add_argument("--campaign", default=None, help="campaign this device reports to (value.json)")
    p.add_argument("--value", default=None,
                   help="the device's item as JSON (5, \"cpu\", [1, 2]) or a bare string")
    p.add_argument("--mpremote", default="mpremote", help="mpremote executable")
    p.add_argument("--stage-dir", default=None,
                   help="stage the files here and keep them (default: a temp dir, removed)")
    p.add_argument("--dry-run", action="store_true", help="print files and commands only")
    p.set_defaults(func=run_flash_command)

    dc = subparsers.add_parser(
        "device-cert", help="issue a device's TLS client certificate from the fleet CA (C client)",
        description="Writes OUT/client.crt and OUT/client.key (PEM, the key 0600): a P-256 key and "
                    "a certificate whose CN is the device id, signed by the fleet CA. The C "
                    "client's identity names them in broker.tls.cert_file/key_file; a broker "
                    "listener with require_certificate and use_identity_as_username (broker-config "
                    "--client-ca) then takes the CN as the device's login.")
    dc.add_argument("--client-ca", required=True, metavar="PEM", help="the fleet CA certificate")
    dc.add_argument("--client-ca-key", required=True, metavar="PEM", help="the fleet CA's key")
    dc.add_argument("--device-id", required=True)
    dc.add_argument("--out", required=True, help="directory (the device's state directory)")
    dc.set_defaults(func=run_device_cert_command)


def client_certificate(out: Path, args) -> dict:
    """Issue the board's certificate from the fleet CA into `out` (the key 0600); returns the
    identity's tls entries."""
    from .. import certs
    ca_cert, ca_key = certs.load_ca(args.client_ca, args.client_ca_key)
    cert, key = certs.issue_device_certificate(ca_cert, ca_key, args.device_id)
    cert_der, key_der = certs.encode(cert, key, der=True)
    (out / "client.der").write_bytes(cert_der)
    fd = os.open(out / "client.key.der", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_der)
    return {"cert_file": "client.der", "key_file": "client.key.der"}


def ca_der(path) -> bytes:
    """The CA certificate at `path` (PEM or DER) as DER, the form MicroPython's mbedTLS loads."""
    import ssl
    data = Path(path).read_bytes()
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            return ssl.PEM_cert_to_DER_cert(data.decode("ascii"))
        except ValueError as exc:
            raise ConfigError("broker_ca", "%s: %s" % (path, exc)) from None
    return data


def parse_value(text):
    """The device's item from --value: JSON int, string or list of them, else the bare text."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in items):
        raise ConfigError("value", "an int, a string or a list of them, got %r" % text)
    return value


def budget_milli(budget: float) -> int:
    """The lifetime budget in milli-nats (not capped like a per-report ε)."""
    if not (math.isfinite(budget) and budget > 0):
        raise ConfigError("budget", "must be a positive number, got %r" % budget)
    return int(round(budget * 1000))


def stage(out_dir, args, trusted_keys) -> list:
    """Write every file the board needs into `out_dir`; returns their paths relative to it."""
    if not NAME_RE.match(args.device_id):
        raise ConfigError("device_id", "must match [A-Za-z0-9_-]{1,64}")
    out = Path(out_dir)
    device_runner.compile_mpy(out, march=args.march)
    broker = None
    extra_files = []
    if args.campaign is not None and not NAME_RE.match(args.campaign):
        raise ConfigError("campaign", "must match [A-Za-z0-9_-]{1,64}")
    if args.broker_ca and not args.broker_host:
        raise ConfigError("broker_ca", "--broker-ca needs --broker-host")
    if (args.client_ca is None) != (args.client_ca_key is None) or (args.client_ca and not args.broker_ca):
        raise ConfigError("client_ca", "--client-ca needs --client-ca-key and --broker-ca (TLS)")
    if args.broker_host:
        default_port = 8883 if args.broker_ca else 1883
        broker = {"host": args.broker_host, "port": args.broker_port or default_port}
        if args.username is not None:
            broker.update(user=args.username, password=args.password)
        if args.broker_ca:
            (out / "ca.der").write_bytes(ca_der(args.broker_ca))
            broker["tls"] = {"ca_file": "ca.der"}
            extra_files.append("ca.der")
        if args.client_ca:
            broker["tls"].update(client_certificate(out, args))
            extra_files += ["client.der", "client.key.der"]
    wifi = {"ssid": args.wifi_ssid, "password": args.wifi_password or ""} if args.wifi_ssid else None
    ack_root = None
    if getattr(args, "ack_key", None):
        from ..ackkeys import read_key_file
        ack_root = read_key_file(args.ack_key)
    identity = device_runner.identity_doc(args.device_id, trusted_keys,
                                          protocol.eps_to_milli(args.eps_cap),
                                          budget_milli(args.budget), broker, wifi, ack_root)
    fd = os.open(out / "identity.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(identity, f)
    # generation 0 of the ledger (spec §7.4) as ledger.init: the board adopts it only when it
    # has no ledger yet, so flashing a board again never resets the budget it has spent
    device_runner.write_ledger(out, device_runner.EMPTY_LEDGER, 0, name="ledger.init")
    files = sorted(str(p.relative_to(out)) for p in (out / "ldp").glob("*.mpy"))
    files += ["main.py", "identity.json", "ledger.init"] + extra_files
    if args.campaign is not None or args.value is not None:
        (out / "value.json").write_text(json.dumps({"campaign": args.campaign,
                                                    "value": parse_value(args.value)}))
        files.append("value.json")
    return files


def mpremote_commands(mpremote, port, staged_dir, files) -> list:
    """[mkdir :ldp (may fail: the directory exists), copy every file + reset]."""
    mkdir = [mpremote, "connect", port, "fs", "mkdir", ":ldp"]
    copy = [mpremote, "connect", port]
    for rel in files:
        copy += ["fs", "cp", str(Path(staged_dir) / rel), ":" + rel, "+"]
    return [mkdir, copy + ["reset"]]


def mpy_cross_commands(march: str, out_dir) -> list:
    """The mpy-cross command lines `stage` runs (device_runner.compile_mpy), for --dry-run."""
    cross = device_runner.mpy_cross_binary()
    return [[cross, "-march=" + march, "-s", str(rel), "-o", str(Path(out_dir) / rel.with_suffix(".mpy")),
             str(src)] for rel, src in device_runner.device_sources() if rel.name != "main.py"]


def run_device_cert_command(args):
    from .. import certs
    ca_cert, ca_key = certs.load_ca(args.client_ca, args.client_ca_key)
    cert, key = certs.issue_device_certificate(ca_cert, ca_key, args.device_id)
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


def run_flash_command(args):
    trusted_keys = read_public_keys(args.trusted_keys)
    staged = args.stage_dir or tempfile.mkdtemp(prefix="ldpfleet-flash-")
    keep = bool(args.stage_dir) or args.dry_run  # a dry run's commands point into the stage
    try:
        files = stage(staged, args, trusted_keys)
        mkdir, copy = mpremote_commands(args.mpremote, args.port, staged, files)
        if args.dry_run:
            print("files (staged in %s, kept so the commands below can run; it holds the "
                  "device's identity: delete it afterwards):" % staged)
            for rel in files:
                print("  %-22s %6d bytes" % (rel, (Path(staged) / rel).stat().st_size))
            print("compiled with:")
            for cmd in mpy_cross_commands(args.march, staged):
                print("  " + " ".join(shlex.quote(c) for c in cmd))
            print("copy to the board with:")
            for cmd in (mkdir, copy):
                print("  " + " ".join(shlex.quote(c) for c in cmd))
            return 0
        if shutil.which(args.mpremote) is None:
            print("ldpfleet flash: %s not found (pip install mpremote)" % args.mpremote, file=sys.stderr)
            return 2
        subprocess.run(mkdir, check=False)
        return subprocess.run(copy).returncode
    finally:
        if not keep:
            shutil.rmtree(staged, ignore_errors=True)
