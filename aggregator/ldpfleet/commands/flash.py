"""`ldpfleet flash`: one board. What a bundle holds: ldpfleet.provision.boards; the options
shared with `provision`: commands/board_options.py.

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
from ..provision.boards import Login
from ..core.config import NAME_RE
from ..configfile import command_line_only
from ..core.errors import ConfigError
from .board_options import add_board_args, board_options, device_logins, warn


def register(subparsers):
    p = subparsers.add_parser(
        "flash", help="install the MicroPython device client on a board (mpy-cross + mpremote)",
        description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--port", required=True, help="serial port of the board, e.g. /dev/ttyUSB0")
    p.add_argument("--bundle", default=None, metavar="DIR",
                   help="copy this bundle of `ldpfleet provision` (every other board option "
                        "comes from it)")
    p.add_argument("--device-id", default=None, help="device id ([A-Za-z0-9_-]{1,64})")
    add_board_args(p)
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
                   help="the device's item as JSON (5, \"cpu\", [1, 2]) or a bare string; for a "
                        "numeric campaign its reading (3.7; a list [3.7, 21.5] of one reading "
                        "per metric for hm)")
    p.add_argument("--mpremote", default="mpremote", help="mpremote executable")
    p.add_argument("--stage-dir", default=None,
                   help="stage the bundle here and keep it (default: a temp dir, removed)")
    p.add_argument("--dry-run", action="store_true", help="print files and commands only")
    p.set_defaults(func=run_flash_command)


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
        warn("--password is visible in the process list; use --credentials or --password-file")
        return Login(args.username or args.device_id, args.board_password)
    return None


def parse_value(text):
    """--value: a reading (a finite JSON number, or a list of them: one per metric of an hm
    campaign) for numeric campaigns, else the item(s) of `boards.parse_value`."""
    import json
    import math
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        value = None
    readings = value if isinstance(value, list) and value else [value]
    if any(isinstance(v, float) for v in readings):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                   for v in readings):
            raise ConfigError("value", "a reading is a finite number (a list of them for "
                              "several metrics), got %r" % text)
        return value
    return boards.parse_value(text)


def _stage_single(staged, args) -> list:
    if not NAME_RE.match(args.device_id or ""):
        raise ConfigError("device_id", "--device-id must match [A-Za-z0-9_-]{1,64}")
    if args.campaign is not None and not NAME_RE.match(args.campaign):
        raise ConfigError("campaign", "must match [A-Za-z0-9_-]{1,64}")
    options = board_options(args)
    value = None
    if args.campaign is not None or args.value is not None:
        value = {"campaign": args.campaign, "value": parse_value(args.value)}
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
