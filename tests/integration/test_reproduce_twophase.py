"""tools/reproduce_twophase.py --quick writes a CSV, a PNG and a Markdown summary per family,
with finite numbers for every protocol and sweep point."""
import csv
import math
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    # progress on stderr while it runs, and a summary naming every check
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


def test_auto_flat_check_is_a_paired_family_wise_test():
    """twophase_auto.not_worse: auto fails a flat-setting cell only when its RE is above, or
    its recall below, either baseline's by more than z standard errors of the per-repeat
    (paired) differences; family_z is the one-sided Bonferroni quantile."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("reproduce_twophase_under_test", SCRIPT)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import twophase_auto as ta
    assert abs(ta.family_z(72) - 3.197) < 1e-3 and abs(ta.family_z(1) - 1.645) < 1e-3

    def acc_of(auto_re, other_re, auto_rec, other_rec):
        acc = tool.Accumulator()
        for i in range(len(auto_re)):  # one repeat's values of every method together
            for m, re_, rec in (("auto", auto_re[i], auto_rec[i]),
                                ("lm-rp", other_re[i], other_rec[i]),
                                ("rp", other_re[i], other_rec[i])):
                acc.add(("normal", "eps-k", "1/5", m, "re"), re_)
                acc.add(("normal", "eps-k", "1/5", m, "recall"), rec)
        return acc
    base = [0.30, 0.20, 0.40, 0.35, 0.25, 0.30]
    same_rec = [0.2] * 6
    # a paired shift of +0.05 with tiny spread: far beyond 3.2 se, though the means are close
    worse = acc_of([b + 0.05 + 0.001 * (i % 2) for i, b in enumerate(base)], base,
                   same_rec, same_rec)
    ok, text = ta.not_worse(worse, "normal", "1/5", 3.2)
    assert not ok and "RE +0.05" in text
    # noisy differences around 0: not significantly worse
    tie = acc_of([b + d for b, d in zip(base, [0.1, -0.1, 0.05, -0.05, 0.08, -0.02])], base,
                 same_rec, same_rec)
    assert ta.not_worse(tie, "normal", "1/5", 3.2)[0]
    # recall consistently lower: fails even with RE equal
    low = acc_of(base, base, [0.0] * 6, [0.2, 0.3, 0.2, 0.3, 0.2, 0.3])
    assert not ta.not_worse(low, "normal", "1/5", 3.2)[0]
    assert ta.not_worse(acc_of(base, base, same_rec, same_rec), "normal", "1/5", 3.2)[0]
