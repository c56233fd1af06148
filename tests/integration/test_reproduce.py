"""tools/reproduce.py --quick writes a CSV, a PNG and a Markdown summary per family."""
import csv
import importlib.util
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tools", "reproduce.py")


def run(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(REPO, "aggregator"), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("family,users", [("fig5", "200000"), ("calibrate", "1000000")])
def test_quick_run_writes_finite_results_and_summary(tmp_path, family, users):
    result = run(family, "--out", str(tmp_path), "--quick", "--users", users)
    assert result.returncode == 0, result.stderr
    csv_path, png_path, md_path = (tmp_path / (family + ext) for ext in (".csv", ".png", ".md"))
    assert png_path.stat().st_size > 1000
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) > 10
    assert all(math.isfinite(float(row["mean"])) and math.isfinite(float(row["std"])) for row in rows)
    assert all(int(row["repeats"]) >= 2 for row in rows)
    summary = md_path.read_text()
    assert "## Comparison with the paper" in summary
    assert "paper:" in summary and "Measured:" in summary
    assert "shape checks reproduced" in result.stdout


def test_fig5_csv_covers_every_method_and_k(tmp_path):
    result = run("fig5", "--out", str(tmp_path), "--quick", "--users", "100000", "--repeats", "2")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "fig5.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    sys.path.insert(0, os.path.join(REPO, "aggregator"))
    from ldpfleet.core import post
    assert {row["method"] for row in rows} == set(post.METHODS)
    assert {int(float(row["x"])) for row in rows} == set(range(2, 33, 2))


def load_tool():
    spec = importlib.util.spec_from_file_location("reproduce_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv", [["fig9", "--out", "x"], ["fig5", "--out", "x", "--users", "0"],
                                  ["fig5", "--out", "x", "--repeats", "0"], ["fig5"]])
def test_bad_arguments_fail(argv):
    with pytest.raises(SystemExit) as info:
        load_tool().main(argv)
    assert info.value.code != 0


def test_kosarak_like_dataset_has_the_papers_shape():
    tool = load_tool()
    counts = tool.kosarak_like_counts(tool.KOSARAK_USERS)
    assert counts.size == 41_270 and counts.min() >= 1
    assert abs(counts.sum() - tool.KOSARAK_USERS) <= 0.01 * tool.KOSARAK_USERS
    top = tool.KOSARAK_TOP_SHARE * tool.KOSARAK_USERS
    assert abs(counts.max() - top) <= 0.1 * top
