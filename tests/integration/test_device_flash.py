"""`ldpfleet flash`: the staged board filesystem (mpy-cross output, identity.json, value.json,
main.py) and the mpremote commands; the x64 staging runs unchanged on the unix port against a
private broker, exactly as laid out on a board's filesystem root."""
import json
import os
import subprocess
import sys

from support.devices import SIGNING_KEY, ReportCollector, config_doc, write_key_files
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger

# mpy header byte 2 = (arch << 2) | sub-version for files holding native (viper) code
MPY_ARCH = {"x64": 2, "armv6m": 4, "armv7emsp": 7, "xtensawin": 10}


def flash(tmp_path, *extra):
    key_file = tmp_path / "signing.key"
    write_key_files(key_file)
    stage = tmp_path / "stage"
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "flash", "--port", "/dev/ttyACM0",
                           "--device-id", "board-1", "--trusted-keys", str(key_file) + ".pub",
                           "--stage-dir", str(stage), "--dry-run"] + list(extra),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return stage, proc.stdout


def test_dry_run_stages_files_and_prints_mpremote_commands(tmp_path):
    stage, out = flash(tmp_path, "--march", "armv6m", "--eps-cap", "1.5", "--budget", "12",
                       "--broker-host", "10.1.2.3", "--campaign", "cpu", "--value", "42")
    assert (stage / "ldp" / "hash.mpy").read_bytes()[2] >> 2 == MPY_ARCH["armv6m"]
    assert not list(stage.glob("ldp/*.py"))
    identity = json.loads((stage / "identity.json").read_text())
    assert identity == {"device_id": "board-1", "trusted_keys": [SIGNING_KEY.public.to_doc()],
                        "eps_cap_milli": 1500, "lifetime_budget_milli": 12000,
                        "broker": {"host": "10.1.2.3", "port": 1883}}
    assert os.stat(stage / "identity.json").st_mode & 0o077 == 0
    assert json.loads((stage / "value.json").read_text()) == {"campaign": "cpu", "value": 42}
    lines = out.splitlines()
    assert "mpremote connect /dev/ttyACM0 fs mkdir :ldp" in out
    copy = next(line for line in lines if " fs cp " in line)
    for rel in ["ldp/hash.mpy", "ldp/device.mpy", "main.py", "identity.json", "value.json"]:
        assert "%s :%s" % (stage / rel, rel) in copy
    assert copy.rstrip().endswith("+ reset")


def test_flash_refuses_a_bad_device_id(tmp_path):
    key_file = tmp_path / "signing.key"
    write_key_files(key_file)
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "flash", "--port", "x",
                           "--device-id", "bad id", "--trusted-keys", str(key_file), "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "device_id" in proc.stderr


def test_x64_staging_runs_as_a_board_filesystem(mosquitto, tmp_path):
    stage, _ = flash(tmp_path, "--march", "x64", "--broker-host", "127.0.0.1", "--broker-port",
                     str(mosquitto.port), "--campaign", "boardy", "--value", "3")
    assert (stage / "ldp" / "hash.mpy").read_bytes()[2] >> 2 == MPY_ARCH["x64"]
    doc = config_doc("boardy")
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/boardy/config", campaign_config.sign(doc, SIGNING_KEY))
        proc = subprocess.run([device_runner.micropython_binary(), "main.py", "--once", "--timeout", "30"],
                              cwd=stage, env=device_runner.micropython_env(stage),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports = collector.barrier()
    finally:
        collector.close()
    assert [t for t, _ in reports] == ["ldp/boardy/r/board-1"]
    ledger = read_ledger(stage)  # adopted from ledger.init, then generation 1
    assert ledger["spent_milli"] == 2000
    # flashing the board again stages ledger.init anew: the board keeps the ledger it has
    (stage / "ledger.init").write_text((stage / "ledger.init").read_text())
    again = subprocess.run([device_runner.micropython_binary(), "main.py", "--once", "--timeout", "30"],
                           cwd=stage, env=device_runner.micropython_env(stage),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "memo phase=1" in again.stdout, again.stdout + again.stderr
    assert read_ledger(stage)["spent_milli"] == 2000


def test_dry_run_without_a_stage_dir_keeps_what_its_commands_name(tmp_path):
    """Without --stage-dir the dry run used to print mpremote commands into a
    staging directory it had already deleted, and no mpy-cross commands."""
    key_file = tmp_path / "signing.key"
    write_key_files(key_file)
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "flash", "--port", "/dev/ttyACM0",
                           "--device-id", "board-2", "--trusted-keys", str(key_file), "--dry-run",
                           "--march", "xtensawin", "--broker-host", "10.0.0.2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    staged = proc.stdout.split("staged in ", 1)[1].split(",", 1)[0]
    try:
        copy = next(line for line in proc.stdout.splitlines() if " fs cp " in line)
        for arg in copy.split():
            if arg.startswith(staged):
                assert os.path.exists(arg), arg  # every file the command copies exists
        crosses = [line for line in proc.stdout.splitlines() if "-march=xtensawin" in line]
        assert len(crosses) == len(list((device_runner.DEVICE_DIR / "ldp").glob("*.py")))
        assert all(line.strip().split()[0].endswith("mpy-cross") for line in crosses)
        assert "ledger.init" in copy  # generation 0 of the ledger, adopted only by a new board
    finally:
        import shutil
        shutil.rmtree(staged, ignore_errors=True)
