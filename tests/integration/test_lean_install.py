"""`pip install ldpfleet` without extras is the broker-side service: serve,
campaign, estimate and broker-config work without matplotlib, scikit-learn or tqdm, which are
the `eval` and `ldplcm` extras. The service's processes run here with those packages made
unimportable (a sitecustomize on PYTHONPATH), so a stray top-level import would fail them."""
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from ldpfleet.service import Store

from support.service import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ("matplotlib", "sklearn", "tqdm")
BLOCKER = '''
import sys
class _NoExtras:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in %r:
            raise ImportError("%%s is an extra, not installed in this lean environment" %% name)
        return None
sys.meta_path.insert(0, _NoExtras())
''' % (EXTRAS_ONLY,)


def test_the_service_dependencies_leave_the_extras_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in project["dependencies"]}
    assert not names & {"matplotlib", "scikit-learn", "tqdm"}, names
    assert "matplotlib" in str(project["optional-dependencies"]["eval"])
    assert "scikit-learn" in str(project["optional-dependencies"]["ldplcm"])


def test_serve_campaign_estimate_broker_config_run_without_the_extras(mosquitto, tmp_path):
    blocker = tmp_path / "lean"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]))
    probe = subprocess.run([sys.executable, "-c", "import matplotlib"], env=env, capture_output=True,
                           text=True)
    assert probe.returncode != 0 and "lean environment" in probe.stderr  # the blocker works

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "failed to load" not in proc.stderr, proc.stderr
        return proc.stdout

    cli("--help")
    devices = tmp_path / "devices.txt"
    devices.write_text("dev-1\n")
    cli("broker-config", "--out", tmp_path / "broker", "--aggregator-user", "agg",
        "--devices-file", devices, "--run-as", "root", "--insecure-plaintext")
    key = tmp_path / "fleet.key"
    cli("campaign", "keygen", key)
    state = "sqlite:///%s" % (tmp_path / "lean.db")
    cli("campaign", "create", "--broker", mosquitto.url, "--state", state, "--signing-key", key,
        "--name", "lean", "--mechanism", "olh", "--epsilon", "2", "--domain", "16")
    serve = ServeProcess(mosquitto.url, state, env=env).start()
    try:
        cli("fleet", "--broker", mosquitto.url, "--campaign", "lean", "--trusted-keys", key,
            "--devices", "200", "--json")
        serve.wait_counts("lean", lambda c: c.get("accepted", 0) >= 200, timeout=60)
    finally:
        assert serve.stop() == 0, serve.log()
    assert "lean environment" not in serve.log()
    out = cli("estimate", "lean", "--state", state, "--top", "3")
    assert "n = 200 reports" in out
    with Store(state) as store:
        assert store.counters("lean")["accepted"] == 200
