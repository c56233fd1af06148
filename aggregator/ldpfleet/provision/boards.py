"""What goes onto a MicroPython board: a **bundle**, one directory per board holding the
files of its filesystem root — `ldp/*.mpy` (the device client compiled by `mpy-cross` for the
board's architecture: viper code is architecture specific), `main.py`, `identity.json` (its id,
the public keys it trusts, its own ε cap and lifetime budget, its broker and login, Wi-Fi),
`ledger.init` (generation 0 of its ledger, adopted only by a board that has none), the broker's
CA as `ca.der`, its client certificate, and `value.json` — plus `bundle.json`, the list of
those files (not copied to the board). `ldpfleet flash` stages and copies one board,
`ldpfleet provision` writes the bundles of a whole fleet from broker-config's credentials.csv,
and `ldpfleet flash --bundle DIR` copies a bundle with one `mpremote` command.

Secrets never come from a command line: the board's MQTT password from credentials.csv (or a
file), the Wi-Fi password from a file; identity.json is written 0600."""
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import device_runner
from ..core import protocol
from ..core.config import NAME_RE
from ..core.errors import ConfigError

MANIFEST = "bundle.json"
BOARD_MARCHES = ("xtensawin", "xtensa", "armv6m", "armv7m", "armv7emsp", "armv7emdp", "rv32imc",
                 "x64")


@dataclass
class BoardOptions:
    """What every board of a fleet shares (the options of `flash` and `provision`)."""

    trusted_keys: list
    broker_host: str
    march: str = "xtensawin"
    eps_cap: float = 4.0
    budget: float = 40.0
    broker_port: int = None
    broker_ca: str = None
    client_ca: str = None
    client_ca_key: str = None
    wifi_ssid: str = None
    wifi_password: str = None
    credentials: str = None
    """broker-config's credentials.csv: a client certificate only for its device rows."""
    ack_root: bytes = None
    """The fleet's ack root key: each board gets its own ack key from it (ackkeys.py)."""

    def check(self):
        if not self.broker_host:
            raise ConfigError("broker_host", "a board needs its broker: --broker-host HOST "
                              "(and --broker-ca ca.pem for TLS); identity.json names it")
        if self.march not in BOARD_MARCHES:
            raise ConfigError("march", "one of %s" % ", ".join(BOARD_MARCHES))
        if (self.client_ca is None) != (self.client_ca_key is None) or (
                self.client_ca and not self.broker_ca):
            raise ConfigError("client_ca", "--client-ca needs --client-ca-key and --broker-ca (TLS)")
        if self.wifi_password is not None and not self.wifi_ssid:
            raise ConfigError("wifi_password_file", "a Wi-Fi password needs --wifi-ssid")
        budget_milli(self.budget)
        try:
            protocol.eps_to_milli(self.eps_cap)
        except ValueError as exc:
            raise ConfigError("eps_cap", str(exc)) from None
        return self


@dataclass
class Login:
    """A board's broker login (broker-config: username = device id, password in
    credentials.csv)."""

    username: str
    password: str


def read_secret_file(path: str, field: str) -> str:
    """The first line of a secret file (ConfigError naming `field` if unreadable or empty)."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(field, "cannot read %s: %s" % (path, exc.strerror or exc)) from None
    if not line:
        raise ConfigError(field, "%s is empty" % path)
    return line


def budget_milli(budget: float) -> int:
    """The lifetime budget in milli-nats (not capped like a per-report ε)."""
    if not (math.isfinite(budget) and budget > 0):
        raise ConfigError("budget", "must be a positive number, got %r" % budget)
    return int(round(budget * 1000))


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


def board_identity(device_id: str, options: BoardOptions, login: Login = None,
                   tls: dict = None) -> dict:
    """THE identity.json of a board (device/README.md): id, trusted public keys, ε cap and
    lifetime budget, broker (host, port, login, TLS files), Wi-Fi and its own ack key."""
    port = options.broker_port or (8883 if options.broker_ca else 1883)
    broker = {"host": options.broker_host, "port": port}
    if login is not None:
        broker.update(user=login.username, password=login.password)
    if tls:
        broker["tls"] = dict(tls)
    wifi = ({"ssid": options.wifi_ssid, "password": options.wifi_password or ""}
            if options.wifi_ssid else None)
    return device_runner.identity_doc(device_id, options.trusted_keys,
                                      protocol.eps_to_milli(options.eps_cap),
                                      budget_milli(options.budget), broker, wifi, options.ack_root)


def _client_certificate(out: Path, device_id: str, options: BoardOptions) -> dict:
    """Issue the board's certificate from the fleet CA into `out` (the key 0600); returns the
    identity's tls entries."""
    from ..broker import certs
    ca_cert, ca_key = certs.load_ca(options.client_ca, options.client_ca_key)
    cert, key = certs.issue_device_certificate(ca_cert, ca_key, device_id,
                                               credentials=options.credentials)
    cert_der, key_der = certs.encode(cert, key, der=True)
    (out / "client.der").write_bytes(cert_der)
    _write_private(out / "client.key.der", key_der)
    return {"cert_file": "client.der", "key_file": "client.key.der"}


def _write_private(path: Path, data: bytes):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def compile_library(out_dir, march: str) -> list:
    """The device client compiled for `march` into `out_dir` (ldp/*.mpy, main.py); returns the
    files relative to it."""
    out = Path(out_dir)
    device_runner.compile_mpy(out, march=march)
    return sorted(str(p.relative_to(out)) for p in (out / "ldp").glob("*.mpy")) + ["main.py"]


def _link_library(lib_dir: Path, out: Path, files: list):
    """The compiled library into a bundle: hard links where the filesystem allows (5,000
    bundles then take the space of one), copies elsewhere."""
    (out / "ldp").mkdir(parents=True, exist_ok=True)
    for rel in files:
        dst = out / rel
        if dst.exists():
            dst.unlink()
        try:
            os.link(lib_dir / rel, dst)
        except OSError:
            shutil.copyfile(lib_dir / rel, dst)


def stage_board(out_dir, device_id: str, options: BoardOptions, login: Login = None,
                value: dict = None, library: tuple = None) -> list:
    """Write the bundle of one board into `out_dir`; returns its files (relative paths, in
    the order they are copied). `library`: (directory, files) of `compile_library` to link
    from; without it the client is compiled here. `value`: value.json's document, if any."""
    if not NAME_RE.match(device_id or ""):
        raise ConfigError("device_id", "%r must match [A-Za-z0-9_-]{1,64}" % (device_id,))
    options.check()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if library is None:
        files = compile_library(out, options.march)
    else:
        _link_library(Path(library[0]), out, library[1])
        files = list(library[1])
    tls = None
    if options.broker_ca:
        (out / "ca.der").write_bytes(ca_der(options.broker_ca))
        tls = {"ca_file": "ca.der"}
        files.append("ca.der")
        if options.client_ca:
            tls.update(_client_certificate(out, device_id, options))
            files += ["client.der", "client.key.der"]
    identity = board_identity(device_id, options, login, tls)
    _write_private(out / "identity.json", json.dumps(identity).encode())
    # generation 0 of the ledger (spec §7.4) as ledger.init: the board adopts it only when it
    # has no ledger yet, so flashing a board again never resets the budget it has spent
    device_runner.write_ledger(out, device_runner.EMPTY_LEDGER, 0, name="ledger.init")
    files += ["identity.json", "ledger.init"]
    if value is not None:
        (out / "value.json").write_text(json.dumps(value))
        files.append("value.json")
    (out / MANIFEST).write_text(json.dumps({"device_id": device_id, "march": options.march,
                                            "files": files}, indent=1) + "\n")
    return files


def read_bundle(bundle_dir) -> dict:
    """A bundle's manifest ({device_id, march, files}), every file checked to be there."""
    path = Path(bundle_dir) / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("bundle", "%s is not a board bundle (`ldpfleet provision` or `flash "
                          "--stage-dir` writes one): %s" % (bundle_dir, exc)) from None
    missing = [f for f in doc.get("files", []) if not (Path(bundle_dir) / f).is_file()]
    if not doc.get("files") or missing:
        raise ConfigError("bundle", "bundle %s lacks %s" % (bundle_dir, ", ".join(missing[:5])
                                                            or "its file list"))
    return doc


def mpremote_commands(mpremote, port, staged_dir, files) -> list:
    """[mkdir :ldp (may fail: the directory exists), copy every file + reset]."""
    mkdir = [mpremote, "connect", port, "fs", "mkdir", ":ldp"]
    copy = [mpremote, "connect", port]
    for rel in files:
        copy += ["fs", "cp", str(Path(staged_dir) / rel), ":" + rel, "+"]
    return [mkdir, copy + ["reset"]]


def mpy_cross_commands(march: str, out_dir) -> list:
    """The mpy-cross command lines `compile_library` runs (device_runner.compile_mpy)."""
    cross = device_runner.mpy_cross_binary()
    return [[cross, "-march=" + march, "-s", str(rel), "-o", str(Path(out_dir) / rel.with_suffix(".mpy")),
             str(src)] for rel, src in device_runner.device_sources() if rel.name != "main.py"]
