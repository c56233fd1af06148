"""`tools/bench.py --longitudinal` and its multi-freq-ldpy worker run and print the documented
JSON (no timing assertions: speed is reported, not tested)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "tools" / "bench.py"
WORKER = ROOT / "tools" / "bench_mfldpy_worker.py"
PROTOCOLS = ["l-osue", "l-sue", "l-grr", "ololoha", "biloloha"]


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_longitudinal_without_mfldpy(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--longitudinal", "--no-mfldpy", "--n", "3000",
                           "--d", "40", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result and result["mfldpy_error"] is None
    rows = result["longitudinal"]
    assert [r["protocol"] for r in rows] == PROTOCOLS
    for r in rows:
        assert (r["n"], r["k"], r["eps_inf"], r["eps1"]) == (3000, 40, 2.0, 1.0)
        ours = r["ours"]
        for key in ("aggregate_seconds", "validate_seconds", "fold_estimate_seconds",
                    "client_reports_per_second"):
            assert positive(ours[key]), (r["protocol"], key)
        assert ours["aggregate_seconds"] == pytest.approx(ours["update_seconds"] + ours["estimate_seconds"])
        assert r["mfldpy"] is None and r["speed_ratio"] is None
    assert {r["protocol"]: r["params"].get("g") for r in rows}["biloloha"] == 2


@pytest.fixture(scope="module")
def mfldpy_python():
    """tools/.venv-mfldpy's python (multi-freq-ldpy 0.2.5, xxhash<4), created by tools/bench.py's
    own helper on first use (from the package index)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench
    finally:
        sys.path.remove(str(BENCH.parent))
    return bench.mfldpy_python()


def test_mfldpy_worker_shape(mfldpy_python):
    jobs = [{"protocol": p, "n": 600, "k": 20, "eps_perm": 2.0, "eps_1": 1.0, "budget": 2.0, "seed": 1}
            for p in PROTOCOLS]
    proc = subprocess.run([str(mfldpy_python), str(WORKER)], input=json.dumps(jobs), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert [r["protocol"] for r in results] == PROTOCOLS
    for r in results:
        assert "error" not in r, r
        assert positive(r["aggregate_seconds"]) and positive(r["client_seconds"])
        assert 1 <= r["sample_n"] <= 600 and r["extrapolated"] == bool(r["scaled"])
