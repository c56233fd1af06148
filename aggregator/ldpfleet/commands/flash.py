"""`ldpfleet flash` (one board), `ldpfleet provision` (the bundles of a whole fleet) and
`ldpfleet device-cert` (a C client's certificate). What a bundle holds: ldpfleet.provision.boards.

flash: stages the board's bundle (device/ldp compiled with `mpy-cross -march=<arch>`,
identity.json naming its broker, ledger.init, the broker's CA, value.json) and copies it with
one `mpremote connect PORT fs cp ...` chain; `--bundle DIR` copies a bundle `provision` wrote;
`--dry-run` prints the files and the commands without touching a board.
With `--ack-key` (the fleet's ack root key) every board gets its own acknowledgement key
(identity.json `ack_key`, spec §6), never the root key.
"""
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..provision import boards
from ..provision.boards import BOARD_MARCHES, BoardOptions, Login
from ..core.config import NAME_RE
from ..configfile import command_line_only
from ..core.errors import ConfigError
from . import tcp_port


def _board_args(p):
    """The options every board of a fleet shares (boards.BoardOptions)."""
    p.add_argument("--trusted-keys", default=None, metavar="FILE",
                   help="the public key(s) the board trusts: PATH.pub from `campaign keygen PATH` "
                        "(a JSON list of up to 8 keys is taken too)")
    p.add_argument("--march", default="xtensawin", choices=BOARD_MARCHES,
                   help="mpy-cross architecture: xtensawin (ESP32), armv6m (RP2040), "
                        "armv7emsp (Cortex-M4F/M7 boards), x64 (unix port); default xtensawin")
    p.add_argument("--eps-cap", type=float, default=4.0,
                   help="the device's own per-report ε cap (nats, multiple of 0.001; default 4)")
    p.add_argument("--budget", type=float, default=40.0,
                   help="the device's lifetime ε budget (nats; default 40)")
    p.add_argument("--broker-host", default=None,
                   help="the broker the board connects to (required: identity.json names it)")
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
    p.add_argument("--ack-key", default=None, metavar="FILE",
                   help="the fleet's ack root key (`ldpfleet ack-key init FILE`): the board gets its "
                        "own acknowledgement key (identity.json ack_key, spec §6) and accepts only "
                        "acks MAC'd under it (serve --ack-key); never the root key itself")
    p.add_argument("--wifi-ssid", default=None)
    p.add_argument("--wifi-password-file", default=None, metavar="FILE",
                   help="the Wi-Fi password, first line of FILE")


def register(subparsers):
    p = subparsers.add_parser(
        "flash", help="install the MicroPython device client on a board (mpy-cross + mpremote)",
        description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--port", required=True, help="serial port of the board, e.g. /dev/ttyUSB0")
    p.add_argument("--bundle", default=None, metavar="DIR",
                   help="copy this bundle of `ldpfleet provision` (every other board option "
                        "comes from it)")
    p.add_argument("--device-id", default=None, help="device id ([A-Za-z0-9_-]{1,64})")
    _board_args(p)
    p.add_argument("--credentials", default=None, metavar="CSV",
                   help="broker-config's credentials.csv: the board logs in as its device id "
                        "with the password of that row")
    p.add_argument("--username", default=None,
                   help="MQTT username (default with --password-file: the device id)")
    command_line_only(p.add_argument(
        "--password-file", dest="board_password_file", default=None, metavar="FILE",
        help="the board's MQTT password, first line of FILE (the board's own login: never read "
             "from the config file or the environment)"))
    command_line_only(p.add_argument(
        "--password", dest="board_password", default=None,
        help="deprecated: the board's MQTT password on the command line, where every local "
             "user sees it (`ps`); use --credentials or --password-file"))
    command_line_only(p.add_argument(
        "--wifi-password", default=None,
        help="deprecated: the Wi-Fi password on the command line; use --wifi-password-file"))
    p.add_argument("--campaign", default=None, help="campaign this device reports to (value.json)")
    p.add_argument("--value", default=None,
                   help="the device's item as JSON (5, \"cpu\", [1, 2]) or a bare string")
    p.add_argument("--mpremote", default="mpremote", help="mpremote executable")
    p.add_argument("--stage-dir", default=None,
                   help="stage the bundle here and keep it (default: a temp dir, removed)")
    p.add_argument("--dry-run", action="store_true", help="print files and commands only")
    p.set_defaults(func=run_flash_command)

    pv = subparsers.add_parser(
        "provision", help="write one complete bundle per board of a fleet (credentials.csv)",
        description="For every device row of broker-config's credentials.csv, OUT/<device id>/ "
                    "gets what `flash` puts on that board: the client compiled for --march "
                    "(compiled once, hard-linked into every bundle), identity.json (0600: its "
                    "login and password from credentials.csv, its broker, the trusted keys, "
                    "Wi-Fi from --wifi-password-file), ledger.init and the broker's CA. Then "
                    "`ldpfleet flash --bundle OUT/<id> --port /dev/ttyUSB0` puts one on a board. "
                    "Secrets only come from files.")
    pv.add_argument("--credentials", required=True, metavar="CSV",
                    help="broker-config's credentials.csv (the rows of role device)")
    pv.add_argument("--out", required=True, metavar="DIR",
                    help="output directory (made 0700: the bundles hold passwords)")
    _board_args(pv)
    pv.add_argument("--json", action="store_true")
    pv.set_defaults(func=run_provision_command)

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


def _warn(text: str):
    print("ldpfleet: warning: %s" % text, file=sys.stderr)


def board_options(args) -> BoardOptions:
    """The shared board options of `flash` / `provision` (trusted keys read, secrets from files)."""
    from ..core.ackkeys import read_key_file
    from ..core.signing import read_public_keys
    if not args.trusted_keys:
        raise ConfigError("trusted_keys", "--trusted-keys PATH.pub is required (the keys the "
                          "board trusts)")
    wifi_password = None
    if args.wifi_password_file:
        wifi_password = boards.read_secret_file(args.wifi_password_file, "wifi_password_file")
    elif getattr(args, "wifi_password", None) is not None:
        _warn("--wifi-password is visible in the process list; use --wifi-password-file")
        wifi_password = args.wifi_password
    return BoardOptions(trusted_keys=read_public_keys(args.trusted_keys),
                        broker_host=args.broker_host, march=args.march, eps_cap=args.eps_cap,
                        budget=args.budget, broker_port=args.broker_port,
                        broker_ca=args.broker_ca, client_ca=args.client_ca,
                        client_ca_key=args.client_ca_key, wifi_ssid=args.wifi_ssid,
                        wifi_password=wifi_password,
                        credentials=getattr(args, "credentials", None),
                        ack_root=read_key_file(args.ack_key) if getattr(args, "ack_key", None)
                        else None).check()


def device_logins(path: str) -> dict:
    """{device id: Login} of the device rows of a credentials.csv."""
    from ..broker.secured import read_device_logins
    logins = {}
    for user, password in read_device_logins(path, field="credentials"):
        if not NAME_RE.match(user):
            raise ConfigError("credentials", "%s: device %r is not a device id "
                              "([A-Za-z0-9_-]{1,64})" % (path, user))
        logins[user] = Login(user, password)
    return logins


def _flash_login(args):
    """The board's login for `flash`: from --credentials, --password-file or (deprecated)
    --password; None without any."""
    given = [f for f, v in (("credentials", args.credentials),
                            ("password_file", args.board_password_file),
                            ("password", args.board_password)) if v]
    if len(given) > 1:
        raise ConfigError(given[1], "give one of --credentials, --password-file, --password")
    if args.credentials:
        login = device_logins(args.credentials).get(args.device_id)
        if login is None:
            raise ConfigError("credentials", "%s has no device row for %s (broker-config "
                              "--devices-file lists the fleet)" % (args.credentials, args.device_id))
        if args.username and args.username != login.username:
            raise ConfigError("username", "--credentials logs the board in as %s" % login.username)
        return login
    if args.board_password_file:
        return Login(args.username or args.device_id,
                     boards.read_secret_file(args.board_password_file, "password_file"))
    if args.board_password is not None:
        _warn("--password is visible in the process list; use --credentials or --password-file")
        return Login(args.username or args.device_id, args.board_password)
    return None


def _stage_single(staged, args) -> list:
    if not NAME_RE.match(args.device_id or ""):
        raise ConfigError("device_id", "--device-id must match [A-Za-z0-9_-]{1,64}")
    if args.campaign is not None and not NAME_RE.match(args.campaign):
        raise ConfigError("campaign", "must match [A-Za-z0-9_-]{1,64}")
    options = board_options(args)
    value = None
    if args.campaign is not None or args.value is not None:
        value = {"campaign": args.campaign, "value": boards.parse_value(args.value)}
    return boards.stage_board(staged, args.device_id, options, _flash_login(args), value=value)


def run_flash_command(args):
    if args.bundle:
        used = [f for f in ("device_id", "credentials", "board_password_file", "board_password",
                            "campaign", "value", "stage_dir")
                if getattr(args, f)]
        if used:
            raise ConfigError(used[0], "--bundle takes everything from the bundle; --%s is not "
                              "used with it" % used[0].replace("board_", "").replace("_", "-"))
        staged, keep = args.bundle, True
        files = boards.read_bundle(staged)["files"]
    else:
        staged = args.stage_dir or tempfile.mkdtemp(prefix="ldpfleet-flash-")
        keep = bool(args.stage_dir) or args.dry_run  # a dry run's commands point into the stage
        files = None
    try:
        if files is None:
            files = _stage_single(staged, args)
        mkdir, copy = boards.mpremote_commands(args.mpremote, args.port, staged, files)
        if args.dry_run:
            _print_plan(args, staged, files, (mkdir, copy))
            return 0
        if shutil.which(args.mpremote) is None:
            print("ldpfleet flash: %s not found (pip install mpremote)" % args.mpremote, file=sys.stderr)
            return 2
        subprocess.run(mkdir, check=False)
        return subprocess.run(copy).returncode
    finally:
        if not keep:
            shutil.rmtree(staged, ignore_errors=True)


def _print_plan(args, staged, files, commands):
    if args.bundle:
        print("files (bundle %s):" % staged)
    else:
        print("files (staged in %s, kept so the commands below can run; it holds the "
              "device's identity: delete it afterwards):" % staged)
    for rel in files:
        print("  %-22s %6d bytes" % (rel, (Path(staged) / rel).stat().st_size))
    if not args.bundle:
        print("compiled with:")
        for cmd in boards.mpy_cross_commands(args.march, staged):
            print("  " + " ".join(shlex.quote(c) for c in cmd))
    print("copy to the board with:")
    for cmd in commands:
        print("  " + " ".join(shlex.quote(c) for c in cmd))


def run_provision_command(args):
    import json
    import os
    options = board_options(args)
    logins = device_logins(args.credentials)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    lib_dir = out / (".lib-" + options.march)
    library = (lib_dir, boards.compile_library(lib_dir, options.march))
    for device_id, login in logins.items():
        boards.stage_board(out / device_id, device_id, options,
                           None if options.client_ca else login, library=library)
    first = next(iter(logins))
    summary = {"bundles": len(logins), "out": str(out), "march": options.march,
               "broker": {"host": options.broker_host,
                          "port": options.broker_port or (8883 if options.broker_ca else 1883),
                          "tls": bool(options.broker_ca),
                          "login": "certificate" if options.client_ca else "password"},
               "flash": "ldpfleet flash --bundle %s --port /dev/ttyUSB0"
                        % shlex.quote(str(out / first))}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print("wrote %d board bundles into %s (client compiled for %s; broker %s:%d%s, login by "
              "%s); each holds its board's password: keep the directory private" % (
                  len(logins), out, options.march, options.broker_host, summary["broker"]["port"],
                  " over TLS" if options.broker_ca else "", summary["broker"]["login"]))
        print("flash a board: %s" % summary["flash"])
    return 0


def run_device_cert_command(args):
    from ..broker import certs
    ca_cert, ca_key = certs.load_ca(args.client_ca, args.client_ca_key)
    cert, key = certs.issue_device_certificate(ca_cert, ca_key, args.device_id,
                                               credentials=args.credentials)
    cert_pem, key_pem = certs.encode(cert, key, der=False)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "client.crt").write_bytes(cert_pem)
    import os
    fd = os.open(out / "client.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    print("wrote %s and %s (CN %s, signed by %s)" % (out / "client.crt", out / "client.key",
                                                     args.device_id, args.client_ca))
    return 0
