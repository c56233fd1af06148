"""Build and run the C device client (device/c_client) for the tests.

The client is built with its own build script (device/c_client/build.sh -> Makefile, the
command CI and a board owner run) into a temporary directory, once per test session and flag
set (plain, SANITIZE=1, NO_INT128=1), always with TEST_MODES=1: the test harness's subcommands
(test_harness.c: vector, replay, ...), the crash points and the deterministic-randomness seam.
Runs use the same state-directory layout as the MicroPython device (identity.json, ledger.0 and
ledger.1), so `ldpfleet.provision.device_runner.prepare_device` and
`support.devices.read_ledger` serve both clients.
"""
import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / "device" / "c_client"
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=66",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=67",
}
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")


@functools.lru_cache(maxsize=None)
def build_client(sanitize: bool = False, no_int128: bool = False) -> Path:
    """Path of an ldp_client binary built with the given flags (cached for the session)."""
    out = Path(tempfile.mkdtemp(prefix="ldpc-build-"))
    atexit.register(shutil.rmtree, str(out), True)
    argv = ["bash", str(CLIENT_DIR / "build.sh"), "BUILD=%s" % out, "-j2", "TEST_MODES=1"]
    if sanitize:
        argv.append("SANITIZE=1")
    if no_int128:
        argv.append("NO_INT128=1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("C client build failed (%s):\n%s\n%s" % (" ".join(argv), proc.stdout[-4000:],
                                                                   proc.stderr[-4000:]))
    return out / "ldp_client"


def client_env():
    return dict(os.environ, **SANITIZER_ENV)


def client_cmd(binary, state_dir, port, campaign, value, once=False, timeout=None, backoff_max=None,
               keepalive=None, high=False, extra=()):
    """argv of a device run: `value` is passed as JSON (int, str or list), like the
    MicroPython device's --value."""
    import json
    argv = [str(binary), "--host", "127.0.0.1", "--campaign", campaign,
            "--state-dir", str(state_dir), "--value", json.dumps(value)]
    if port is not None:  # None: the identity's broker.port
        argv += ["--port", str(port)]
    if once:
        argv.append("--once")
    if high:
        argv.append("--high")
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    if backoff_max is not None:
        argv += ["--backoff-max", str(backoff_max)]
    if keepalive is not None:
        argv += ["--keepalive", str(keepalive)]
    return argv + list(extra)


def run_client(binary, state_dir, port, campaign, value, wait=40, **kw):
    """One --once run to completion (the client's own --timeout is `wait` - 5 s)."""
    kw.setdefault("timeout", max(1, wait - 5))
    argv = client_cmd(binary, state_dir, port, campaign, value, once=True, **kw)
    return subprocess.run(argv, capture_output=True, text=True, timeout=wait, env=client_env())


def start_client(binary, state_dir, port, campaign, value, log_path, **kw):
    """A long-running client; stdout and stderr appended to `log_path`."""
    argv = client_cmd(binary, state_dir, port, campaign, value, **kw)
    with open(log_path, "a") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=client_env())


def assert_no_sanitizer_report(text):
    for mark in SANITIZER_MARKS:
        assert mark not in text, text[-4000:]


def metric_program(path, value):
    """An executable that prints `value` as JSON on its first line (what `--metric
    NAME=PROGRAM` reads, spec §5.4): "RAISE" exits 1 with nothing printed, "LIVE" prints a
    reading that changes on every call (20.25, 20.5, ...), "SLOW" never answers."""
    import json
    import os
    from pathlib import Path
    path = Path(path)
    if value == "RAISE":
        body = "exit 1\n"
    elif value == "LIVE":
        body = ('n=$(cat "$0.n" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$0.n"\n'
                'echo "20.$((25 * n))"\n')
    elif value == "SLOW":
        body = "sleep 60\n"
    else:
        body = "cat <<'LDP_EOF'\n%s\nLDP_EOF\n" % json.dumps(value)
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path
