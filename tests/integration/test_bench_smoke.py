"""tools/bench.py and its pure-ldp worker run and print the documented JSON (no timing
assertions: speed is reported, not tested)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "tools" / "bench.py"
WORKER = ROOT / "tools" / "bench_pureldp_worker.py"
CORE = ["grr", "olh", "flh", "oue", "cms", "hcms", "sh"]
OURS_KEYS = {"setup_seconds", "client_sample_n", "client_seconds", "client_reports_per_second",
             "update_seconds", "estimate_seconds", "aggregate_seconds", "pool_reports"}


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_quick_without_pureldp(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--no-pureldp", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result
    assert result["config"]["quick"] is True and result["config"]["pureldp"] is False
    assert result["missing_mechanisms"] == []
    assert result["pureldp_error"] is None
    rows = result["results"]
    assert sorted(r["mechanism"] for r in rows) == sorted(CORE)
    for r in rows:
        assert (r["n"], r["d"], r["epsilon"]) == (100000, 1024, 2.0)
        assert OURS_KEYS <= set(r["ours"])
        for key in ("client_seconds", "client_reports_per_second", "aggregate_seconds"):
            assert positive(r["ours"][key]), (r["mechanism"], key)
        assert r["ours"]["aggregate_seconds"] == pytest.approx(
            r["ours"]["update_seconds"] + r["ours"]["estimate_seconds"])
        assert 1 <= r["ours"]["client_sample_n"] <= r["n"]
        assert positive(r["report_bytes"]) and isinstance(r["params"], dict)
        assert r["pureldp"] is None and r["speed_ratio"] is None
        if r["mechanism"] in ("olh", "flh", "sh"):
            assert positive(r["ours"]["hash_evals_per_second"])
    olh = next(r for r in rows if r["mechanism"] == "olh")
    assert olh["ours"]["hash_evals"] == 100000 * 1024
    assert set(result["summary"]) == set(CORE)
    assert result["summary"]["olh"]["targets"]["aggregate_speed_ratio"] == 100


def test_filters_and_bad_arguments():
    proc = subprocess.run([sys.executable, str(BENCH), "--no-pureldp", "--mechanisms", "grr,hcms",
                           "--n", "3000", "--d", "64,128", "--eps", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["results"]
    assert sorted((r["mechanism"], r["d"]) for r in rows) == [
        ("grr", 64), ("grr", 128), ("hcms", 64), ("hcms", 128)]
    assert all(r["n"] == 3000 and r["epsilon"] == 1.0 for r in rows)
    bad = subprocess.run([sys.executable, str(BENCH), "--mechanisms", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "nope" in bad.stderr


@pytest.fixture(scope="module")
def pureldp_python():
    """tools/.venv-pureldp's python: pure-ldp 1.2.0 with the pins it runs with, created by
    tools/bench.py's own helper on first use (about 25 s, from the package index)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench
    finally:
        sys.path.remove(str(BENCH.parent))
    return bench.venv_python()


def test_pureldp_worker_shape(pureldp_python):
    jobs = [{"mechanism": m, "n": 3000, "d": 64, "eps": 2.0, "params": p, "budget": 0.5, "seed": 1}
            for m, p in [("grr", {}), ("oue", {}), ("olh", {"g": 8}), ("flh", {"g": 8, "kp": 50}),
                         ("cms", {"k": 8, "m": 64}), ("hcms", {"k": 8, "m": 64}), ("hr", {})]]
    proc = subprocess.run([str(pureldp_python), str(WORKER)], input=json.dumps(jobs), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert [r["mechanism"] for r in results] == [j["mechanism"] for j in jobs]
    for r in results:
        assert "error" not in r, r
        for key in ("setup_seconds", "client_seconds", "update_seconds", "estimate_seconds",
                    "aggregate_seconds"):
            assert r[key] >= 0, (r["mechanism"], key)
        assert isinstance(r["extrapolated"], bool) and 1 <= r["sample_n"] <= 3000
        assert r["extrapolated"] == bool(r["scaled"])
    assert positive(results[2]["hash_evals_per_second"])


def test_bench_acks_prints_its_json():
    """tools/bench_acks.py (MAC'd acknowledgements, spec §6): the documented keys, positive."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_acks.py"), "--acks", "300",
                           "--repeat", "1", "--device-acks", "20"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["acks"] == 300 and result["packet_bytes_mac"] > result["packet_bytes_plain"]
    for key in ("c_tags_per_second", "c_us_per_ack", "python_reference_seconds_estimated"):
        assert positive(result[key]), key
    assert positive(result["micropython"]["keyed_us_per_ack"])
