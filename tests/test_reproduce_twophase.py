"""tools/reproduce_twophase.py --quick writes a CSV, a PNG and a Markdown summary per family,
with finite numbers for every protocol and sweep point."""
import csv
import math
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "tools", "reproduce_twophase.py")


def test_quick_run_of_both_families(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(REPO, "aggregator"),
                                                      env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, SCRIPT, "all", "--out", str(tmp_path), "--quick"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    expected = {
        "ldpminer": ({"lm-rp", "lm-sh", "lm-sho", "rp", "sh", "lm-rp pad-l"}, {"re", "re_list", "ndcg", "recall"}),
        "ldplcm": ({"ldplcm", "cms", "hcms", "flh"}, {"sse", "sse_high", "sse_low"}),
    }
    for family, (methods, metrics) in expected.items():
        assert "%s:" % family in proc.stdout and "checks reproduced" in proc.stdout
        assert (tmp_path / (family + ".png")).stat().st_size > 10000
        with open(tmp_path / (family + ".csv"), newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert {r["method"] for r in rows if r["sweep"] != "truth"} == methods
        assert metrics <= {r["metric"] for r in rows}
        assert all(math.isfinite(float(r["mean"])) and math.isfinite(float(r["std"])) for r in rows)
        assert all(int(r["repeats"]) == 2 for r in rows)
        summary = (tmp_path / (family + ".md")).read_text()
        assert "## Comparison with the paper" in summary and "## Analysis" in summary
        assert "paper:" in summary and "Measured:" in summary and "nan" not in summary
    # issue 10 #7: progress on stderr while it runs, and a summary naming every check
    assert "ldpminer: running" in proc.stderr and "done (" in proc.stderr
    listed = [line for line in proc.stdout.splitlines() if line.startswith("  [")]
    assert len(listed) == sum(int(line.split(" of ")[1].split()[0]) for line in proc.stdout.splitlines()
                              if " checks reproduced (" in line)
    failing = [line for line in listed if line.startswith("  [ ]")]
    assert all("NOT reproduced" in line for line in failing)
    sweeps = {(r["dataset"], r["sweep"]) for r in csv.DictReader(open(tmp_path / "ldpminer.csv"))}
    assert {("normal", "eps"), ("laplace", "k"), ("zipf-s10 (extra)", "eps")} <= sweeps


def test_summary_names_failed_checks_and_strict_exits_1(tmp_path, capsys):
    """The exit code contract: 0 once a run completed (the summary names what did not
    reproduce), 1 with --strict when any check did not reproduce."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("reproduce_twophase_under_test", SCRIPT)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)

    def fake(out_dir, users, repeats, seed, quick, workers):
        checks = tool.Checks()
        checks.add("claim that holds", "1.0", "> 0", True)
        checks.add("claim that fails", "0.2", "> 1", False)
        return checks

    tool.FAMILIES = {"fake": fake}
    assert tool.main(["fake", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fake: 1 of 2 checks reproduced" in out
    assert "  [x] claim that holds" in out and "  [ ] claim that fails -- NOT reproduced: 0.2" in out
    assert tool.main(["fake", "--out", str(tmp_path), "--strict"]) == 1
