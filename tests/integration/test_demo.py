"""`ldpfleet demo --json` as a user runs it: its own mosquitto, `serve`, a campaign, the fleet
(with real MicroPython devices when the binary is there), then the summary and the plot."""
import json
import math
import shutil
import subprocess
import sys

HAVE_MICROPYTHON = shutil.which("micropython") is not None


def test_demo_json_small(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "demo", "--json", "--devices", "3000",
                           "--domain", "32", "--seed", "11", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    for key in ("sent", "accepted", "rejected", "lost", "duplicates", "top", "mse"):
        assert key in result, key
    micropython = 3 if HAVE_MICROPYTHON else 0
    assert result["devices"] == {"simulated": 3000, "micropython": micropython}
    assert result["sent"] == 3000 + micropython
    assert result["lost"] == 0
    assert result["accepted"] == result["sent"]
    assert result["rejected"] == 0 and result["duplicates"] == 0
    # every report acknowledged end to end with a MAC'd ack (spec §6): serve ran with the demo's
    # ack root key, the simulated devices checked each tag, the MicroPython devices hold their
    # own keys (and only theirs)
    assert result["acks"] == {"acknowledged": result["sent"], "unacknowledged": 0,
                              "resent": result["acks"]["resent"], "mac": True}
    assert "no --ack-key" not in (out / "serve.log").read_text()
    for identity in out.glob("mp/*/identity.json"):
        doc = json.loads(identity.read_text())
        assert len(doc["ack_key"]) == 64
    assert len(result["top"]) == 10
    estimates = [row["estimate"] for row in result["top"]]
    assert estimates == sorted(estimates, reverse=True)
    assert all(set(row) == {"item", "true", "estimate"} and 0 <= row["item"] < 32
               for row in result["top"])
    assert math.isfinite(result["mse"]) and result["mse"] >= 0
    with open(result["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert str(out) in result["plot"]


def test_demo_text_output(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "demo", "--devices", "500",
                           "--micropython", "0", "--mechanism", "grr", "--epsilon", "3",
                           "--domain", "8", "--top", "3", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "top 3 heavy hitters" in proc.stdout
    assert "lost 0" in proc.stdout
    assert (tmp_path / "demo.png").exists()


def demo(tmp, *args, **kw):
    """`ldpfleet demo` with TMPDIR=tmp (where its temporary directory goes)."""
    import os
    env = dict(os.environ, TMPDIR=str(tmp))
    return subprocess.Popen([sys.executable, "-m", "ldpfleet.cli", "demo", "--devices", "400",
                             "--micropython", "0", "--domain", "16", "--seed", "3", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            **kw)


def demo_dirs(tmp):
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("ldpfleet-demo-"))


def test_demo_removes_its_temporary_directory_unless_kept(tmp_path):
    """Every demo left /tmp/ldpfleet-demo-* behind, the campaign's private signing key
    included. It now goes at the end; --keep keeps it (key, state, plot) and prints where."""
    proc = demo(tmp_path, "--json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["lost"] == 0 and result["out"] is None and result["plot"] is None
    assert demo_dirs(tmp_path) == []
    proc = demo(tmp_path, "--keep")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    [kept] = demo_dirs(tmp_path)
    assert str(tmp_path / kept / "demo.png") in out
    files = {p.name for p in (tmp_path / kept).iterdir()}
    assert "aggregator.db" in files and any(f.endswith(".key") for f in files)


def test_demo_removes_its_temporary_directory_on_ctrl_c_and_sigterm(tmp_path):
    """Interrupted while it runs (after the campaign is made, the key written), the demo stops
    its broker and serve and still removes its directory."""
    import signal
    import time
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = demo(tmp_path, "--devices", "200000")
        try:
            for line in proc.stdout:
                if line.startswith("campaign"):
                    break
            assert len(demo_dirs(tmp_path)) == 1
            time.sleep(0.3)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 130 and "demo interrupted" in err, err[-2000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert demo_dirs(tmp_path) == [], sig


def test_demo_whose_reader_leaves_stops_cleanly_not_as_a_broker_error(tmp_path):
    """`ldpfleet demo | head -3`: the demo's next line met a closed pipe and it died with
    "ldpfleet: broker: [Errno 32] Broken pipe", exit 3 (a BrokenPipeError is a
    ConnectionError: the exit table's broker line), in about one run in five where the reader
    left while the demo still printed. Now it stops its broker and serve, removes its
    directory and exits 141 (128 + SIGPIPE) without a word, as `yes | head` does."""
    import os
    import re
    for _ in range(3):
        proc = demo(tmp_path)
        first = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()  # the reader goes away
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 141, err[-2000:]
        assert "broker" not in err and "Broken pipe" not in err, err[-2000:]
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", "".join(first))]
        assert len(pids) == 2, first  # mosquitto and serve, both stopped
        for pid in pids:
            try:
                os.kill(pid, 0)
                with open("/proc/%d/stat" % pid) as f:
                    assert f.read().rsplit(")", 1)[1].split()[0] == "Z", pid
            except (ProcessLookupError, FileNotFoundError):
                pass
        assert demo_dirs(tmp_path) == []
