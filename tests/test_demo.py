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
