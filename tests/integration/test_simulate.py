"""`ldpfleet simulate` end to end (real CLI in a subprocess, real C kernels) and the
true-value generators in ldpfleet.eval.datasets.

Accuracy bound: with a uniform distribution every item's estimate has the same variance s2,
and for an unbiased oracle with near-Gaussian errors the full-domain MSE averaged over R
repeats has mean s2 and standard deviation s2 * sqrt(2 / (R d)) (each squared error has
variance 2 s2^2). The tests accept |mse / theory_variance - 1| <= 5 of those standard
deviations. Seeds are fixed (aggregator-side simulation only).
"""
import json
import math
import os
import pty
import subprocess
import sys

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.eval import datasets

CORE = ["grr", "olh", "flh", "oue", "cms", "hcms", "sh"]
USERS, DOMAIN, REPEAT = 20000, 256, 6
SIGMAS = 5.0
REL_SD = math.sqrt(2.0 / (REPEAT * DOMAIN))


def simulate(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "simulate", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def simulate_json(*args):
    proc = simulate(*args, "--json")
    assert "%|" not in proc.stderr  # no tqdm progress bar when stderr is not a terminal
    return json.loads(proc.stdout)


def check_shape(r, mechanism):
    for key, kind in [("mechanism", str), ("epsilon", float), ("eps_milli", int), ("users", int),
                      ("domain", int), ("report_bytes", int), ("mse", float),
                      ("theory_variance", float), ("mse_ratio", float),
                      ("aggregate_seconds", float), ("params", dict), ("dist", str),
                      ("mse_per_repeat", list)]:
        assert isinstance(r[key], kind), (key, r[key])
    assert r["mechanism"] == mechanism
    assert r["mse"] > 0 and r["theory_variance"] > 0
    assert r["mse_ratio"] == pytest.approx(r["mse"] / r["theory_variance"])
    assert r["mse"] == pytest.approx(float(np.mean(r["mse_per_repeat"])))


@pytest.mark.parametrize("mechanism", CORE)
def test_mse_matches_theory_variance(mechanism):
    r = simulate_json("--mechanism", mechanism, "--epsilon", 2, "--users", USERS, "--domain",
                      DOMAIN, "--dist", "uniform", "--repeat", REPEAT, "--seed", 11)
    check_shape(r, mechanism)
    assert (r["users"], r["domain"], r["repeat"], r["epsilon"]) == (USERS, DOMAIN, REPEAT, 2.0)
    assert r["fast"] is False
    assert isinstance(r["client_seconds"], float) and r["client_seconds"] >= 0
    assert abs(r["mse_ratio"] - 1.0) <= SIGMAS * REL_SD, r


def test_same_seed_same_result_and_zipf_default():
    a = simulate_json("--mechanism", "olh", "--epsilon", 1.5, "--users", 5000, "--domain", 64,
                      "--seed", 3)
    b = simulate_json("--mechanism", "olh", "--epsilon", 1.5, "--users", 5000, "--domain", 64,
                      "--seed", 3)
    c = simulate_json("--mechanism", "olh", "--epsilon", 1.5, "--users", 5000, "--domain", 64,
                      "--seed", 4)
    assert a["dist"] == "zipf:1.1"
    assert a["mse"] == b["mse"] and a["theory_variance"] == b["theory_variance"]
    assert a["mse"] != c["mse"]
    assert a["params"] == {"g": 5}  # round(e^1.5) + 1


def test_param_reaches_mechanism():
    r = simulate_json("--mechanism", "cms", "--epsilon", 2, "--users", 2000, "--domain", 64,
                      "--param", "k=16", "--param", "m=128")
    assert r["params"] == {"k": 16, "m": 128}
    assert r["report_bytes"] == 12 + 2 + 16


def test_post_shape_and_base_unchanged():
    args = ["--mechanism", "grr", "--epsilon", 2, "--users", USERS, "--domain", DOMAIN,
            "--repeat", 2, "--seed", 5]
    plain = simulate_json(*args)
    r = simulate_json(*args, "--post", "norm-sub,base-cut,mle-apx")
    methods = {"base", "norm-sub", "base-cut", "mle-apx"}
    assert set(r["mse"]) == methods and set(r["post_seconds"]) == methods
    assert set(r["mse_ratio"]) == methods
    assert r["mse"]["base"] == plain["mse"]
    for m in methods:
        assert r["mse"][m] >= 0 and r["post_seconds"][m] >= 0
        assert r["mse_ratio"][m] == pytest.approx(r["mse"][m] / r["theory_variance"])


@pytest.mark.parametrize("mechanism", ["grr", "oue"])
def test_fast_shape_and_accuracy(mechanism):
    r = simulate_json("--mechanism", mechanism, "--epsilon", 2, "--users", 200000, "--domain",
                      DOMAIN, "--dist", "uniform", "--repeat", REPEAT, "--seed", 2, "--fast",
                      "--post", "norm")
    assert r["fast"] is True and r["client_seconds"] is None
    assert isinstance(r["aggregate_seconds"], float)
    assert set(r["mse"]) == {"base", "norm"}
    assert abs(r["mse_ratio"]["base"] - 1.0) <= SIGMAS * REL_SD, r


def test_progress_bar_only_on_a_terminal():
    """stderr on a pseudo-terminal (stdout too: pty.fork): a tqdm bar appears; the JSON line
    is still intact. (Without a terminal the other tests see no bar.)"""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(sys.executable, [sys.executable, "-m", "ldpfleet.cli", "simulate", "--mechanism",
                                   "grr", "--epsilon", "1", "--users", "600000", "--domain", "64",
                                   "--json"])
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    text = data.decode(errors="replace")
    assert "user/s" in text and "%|" in text
    line = next(x for x in text.replace("\r", "\n").split("\n") if x.startswith("{"))
    assert json.loads(line)["users"] == 600000


def test_readable_summary():
    out = simulate("--mechanism", "hcms", "--epsilon", 1, "--users", 3000, "--domain", 32).stdout
    assert "hcms" in out and "mse base" in out and "theory variance" in out
    assert not out.lstrip().startswith("{")


@pytest.mark.parametrize("args, needle", [
    (["--mechanism", "olh", "--fast"], "--fast"),
    (["--mechanism", "nope"], "--mechanism"),
    (["--mechanism", "grr", "--epsilon", "0"], "epsilon"),
    (["--mechanism", "grr", "--epsilon", "2.0005"], "epsilon"),
    (["--mechanism", "grr", "--dist", "zipf"], "zipf"),
    (["--mechanism", "grr", "--dist", "pareto:2"], "pareto"),
    (["--mechanism", "grr", "--domain", "1"], "domain"),
    (["--mechanism", "grr", "--users", "0"], "users"),
    (["--mechanism", "grr", "--post", "norm-sub,bogus"], "bogus"),
    (["--mechanism", "olh", "--post", "mle-apx"], "mle-apx"),
    (["--mechanism", "grr", "--param", "g=3"], "g"),
    (["--mechanism", "olh", "--param", "g=1"], "g"),
    (["--mechanism", "olh", "--param", "nonsense"], "k=v"),
])
def test_bad_arguments_exit_2(args, needle, capsys):
    """In process (the CLI's own main) to keep the suite fast; exit status and message."""
    base = {"--epsilon": "2", "--users": "100", "--domain": "16"}
    for i in range(0, len(args), 2):
        base.pop(args[i], None)
    extra = [x for kv in base.items() for x in kv]
    try:
        status = cli.main(["simulate", *args, *extra, "--json"])
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    out, err = capsys.readouterr()
    assert status == 2
    assert needle in err and "Traceback" not in err
    assert out == ""


def test_bad_arguments_exit_2_from_the_shell():
    proc = simulate("--mechanism", "grr", "--epsilon", 2, "--users", 10, "--domain", 8,
                    "--dist", "zipf:x", check=False)
    assert proc.returncode == 2 and "zipf:x" in proc.stderr and proc.stdout == ""


# --- datasets ------------------------------------------------------------------------------

def test_zipf_probabilities_are_ranked_by_index():
    p = datasets.probabilities("zipf:1.1", 100)
    assert p.sum() == pytest.approx(1.0)
    assert np.all(np.diff(p) < 0)
    assert p[0] / p[9] == pytest.approx(10 ** 1.1)
    assert np.allclose(datasets.probabilities("uniform", 7), 1 / 7)
    assert np.allclose(datasets.probabilities("zipf:0", 7), 1 / 7)


def test_discretised_normal_and_laplace():
    p = datasets.probabilities("normal:50,5", 101)
    assert int(np.argmax(p)) == 50 and p[45] == pytest.approx(p[55])
    assert p.sum() == pytest.approx(1.0)
    q = datasets.probabilities("laplace:10,2", 21)
    assert q[11] / q[13] == pytest.approx(math.exp(1.0))  # bins past MU: exact exponential


def test_draw_values_follow_the_distribution():
    n, d = 200000, 50
    rng = np.random.default_rng(8)
    counts = datasets.true_counts(datasets.draw_values(n, d, "zipf:1.1", rng), d)
    p = datasets.probabilities("zipf:1.1", d)
    z = (counts - n * p) / np.sqrt(n * p * (1 - p))
    assert counts.sum() == n and np.max(np.abs(z)) < 5


def test_draw_sets_distinct_and_successive_sampling():
    rng = np.random.default_rng(9)
    n, L, d = 100000, 2, 3
    spec = "zipf:1"
    sets = datasets.draw_sets(n, L, d, spec, rng)
    assert sets.shape == (n, L) and sets.dtype == np.uint32
    assert np.all(sets[:, 0] != sets[:, 1])
    p = datasets.probabilities(spec, d)
    # successive sampling: P(second = j) = sum_i p_i p_j / (1 - p_i) over i != j
    second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(d) if i != j) for j in range(d)])
    counts = np.bincount(sets[:, 1], minlength=d)
    z = (counts - n * second) / np.sqrt(n * second * (1 - second))
    assert np.max(np.abs(z)) < 5
    full = datasets.draw_sets(100, 10, 10, "zipf:3", rng)
    assert np.all(np.sort(full, axis=1) == np.arange(10))


def test_same_seed_same_values():
    a = datasets.draw_sets(1000, 3, 40, "normal:20,4", np.random.default_rng(1))
    b = datasets.draw_sets(1000, 3, 40, "normal:20,4", np.random.default_rng(1))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("spec", ["", "zipf", "zipf:-1", "normal:1", "normal:0,0", "laplace:a,1",
                                  "gauss:1,2", "uniform:3", "zipf:nan"])
def test_bad_dist_specs(spec):
    with pytest.raises(ValueError):
        datasets.parse_dist(spec)
