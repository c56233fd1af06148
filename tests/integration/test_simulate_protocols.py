"""`ldpfleet simulate --protocol`: the two-phase protocols and their baselines through the CLI
(in process, `ldpfleet.cli.main`, except one real subprocess), JSON shapes and statistics with
fixed aggregator-side seeds.

LDPMiner family (RE, NDCG; LDPMiner §5.1.3): on a strongly planted dataset (Zipf 2 over 100
items, sets of 4, n = 200,000) the true frequencies are known (the run's data seed), and each
protocol's final estimates are unbiased with the item standard deviations sigma of the
mechanism that produces them (`SrapporMechanism.item_variances` / `ShMechanism.item_variances`:
the exact variances for sets of at most l items; two-phase protocols: the phase-2 mechanism with
eps2 and l2 = min(l, 2k) over the trimmed sets). With z = Phi^-1(1 - alpha/(2d)), alpha = 1e-4,
every item's error is within z sigma except with probability <= alpha (Bonferroni, normal
approximation). The test first checks that the data make that event decisive: the true top-k
lead every other item by more than 2 z sigma_1 in phase 1 (so they are among the 2k
candidates) and consecutive true frequencies of the top k+1 differ by more than 2 z sigma.
Then recall = 1, NDCG = 1 exactly (every estimated rank is the true one), and RE (a median over
the top k) is at most max_v z_k sigma_v / f_v with z_k = Phi^-1(1 - alpha/(2k)) (below 0.1
here; a wrongly scaled or biased estimator would exceed it).

LDPLCM vs Apple-CMS (LDPLCM §5.2, Fig. 4: eps = 4, (k, m) = (64, 1024), r = 0.1, theta = 0.5,
Zipf): for R = 6 fixed seeds, each giving both protocols the same dataset, the paired
differences D_s = SSE_cms - SSE_ldplcm have a one-sided Student-t lower confidence bound
mean(D) - t_{R-1, 1-alpha} sd(D)/sqrt(R) > 0 with alpha = 1e-3 (SSE is a sum over d = 5,000
items, so close to normal by the CLT). The CMS side is checked against theory as well: its
mean SSE lies within the two-sided t interval of sum_v Var(f^_v), the CMS estimator's exact
per-item variances (`CmsMechanism.item_variances`, Apple-CMS variance after LDPLCM Thm 3).
"""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from ldpfleet import cli
from ldpfleet.eval import datasets
from ldpfleet.core import protocol
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.protocols import ldpminer
from ldpfleet.eval import ldpminer_sim

LDPMINER = {"ldpminer-rappor": "lm-rp", "ldpminer-sh": "lm-sh", "ldpminer-sh-opt": "lm-sho",
            "sampling-rappor": "rp", "sampling-sh": "sh"}
LDPLCM = ("ldplcm", "cms", "hcms", "flh")
ALPHA = 1e-4


@pytest.fixture
def run(capsys):
    """`ldpfleet simulate ...` in this process: (exit status, stdout, stderr)."""
    def call(*args):
        capsys.readouterr()
        try:
            status = cli.main(["simulate", *map(str, args)])
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
        out, err = capsys.readouterr()
        return status, out, err
    return call


@pytest.fixture
def run_json(run):
    def call(*args):
        status, out, err = run(*args, "--json")
        assert status == 0, err
        return json.loads(out)
    return call


# --- shapes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(LDPMINER))
def test_ldpminer_family_json_shape(run_json, name):
    r = run_json("--protocol", name, "--epsilon", 4, "--users", 3000, "--domain", 50,
                 "--set-size", 3, "--dist", "normal:20,4", "--top", 3, "--seed", 5)
    for key, kind in [("protocol", str), ("core_protocol", str), ("epsilon", float),
                      ("eps_milli", int), ("users", int), ("domain", int), ("dist", str),
                      ("set_size", int), ("k", int), ("seed", int), ("re", float),
                      ("re_list", float), ("ndcg", float), ("recall", float)]:
        assert isinstance(r[key], kind), (key, r[key])
    assert (r["protocol"], r["core_protocol"]) == (name, LDPMINER[name])
    assert (r["users"], r["domain"], r["set_size"], r["k"], r["eps_milli"]) == (3000, 50, 3, 3, 4000)
    assert r["re"] >= 0 and 0 < r["ndcg"] <= 1 and 0 <= r["recall"] <= 1
    if LDPMINER[name].startswith("lm-"):
        assert (r["k_max"], r["l2"]) == (6, 3)
    else:
        assert r["k_max"] is None and r["l2"] is None


@pytest.mark.parametrize("name", LDPLCM)
def test_ldplcm_family_json_shape(run_json, name):
    r = run_json("--protocol", name, "--epsilon", 4, "--users", 5000, "--domain", 200,
                 "--dist", "zipf:1.1", "--sketch-k", 16, "--sketch-m", 128, "--sample-rate", 0.2,
                 "--theta", 0.5, "--seed", 2)
    for key, kind in [("protocol", str), ("epsilon", float), ("users", int), ("domain", int),
                      ("dist", str), ("seed", int), ("sse", float), ("mse", float)]:
        assert isinstance(r[key], kind), (key, r[key])
    assert r["protocol"] == name and r["sse"] > 0
    assert r["mse"] == pytest.approx(r["sse"] / 200)
    if name == "ldplcm":
        assert r["phase1_users"] + r["phase2_users"] == 5000
        assert (r["k"], r["m"], r["sample_rate"], r["theta"]) == (16, 128, 0.2, 0.5)
        assert r["sse"] == pytest.approx(r["sse_high"] + r["sse_low"])
    elif name == "flh":
        assert r["kp"] == 128
    else:
        assert (r["k"], r["m"]) == (16, 128)


def test_same_seed_same_dataset_same_answer(run_json):
    args = ["--protocol", "cms", "--epsilon", 2, "--users", 4000, "--domain", 100, "--seed", 9]
    assert run_json(*args) == run_json(*args)
    assert run_json(*args[:-1], 10)["sse"] != run_json(*args)["sse"]


def test_real_cli_and_readable_summary():
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "simulate", "--protocol",
                           "ldpminer-sh", "--epsilon", "3", "--users", "2000", "--domain", "40",
                           "--set-size", "2", "--top", "2", "--dist", "zipf:1.5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ldpminer-sh" in proc.stdout and "NDCG" in proc.stdout and "RE" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (["--protocol", "ldplcm", "--mechanism", "cms"], "not allowed with"),
    (["--protocol", "nope"], "--protocol"),
    (["--protocol", "ldpminer-rappor"], "top"),
    (["--protocol", "ldpminer-sh", "--top", "17"], "top"),
    (["--protocol", "ldplcm", "--theta", "1.5"], "theta"),
    (["--protocol", "ldplcm", "--sample-rate", "0"], "sample rate"),
    (["--protocol", "cms", "--repeat", "3"], "--repeat"),
    (["--protocol", "cms", "--param", "k=4"], "--param"),
    (["--mechanism", "cms", "--top", "3"], "--top"),
    (["--mechanism", "cms", "--sketch-m", "64"], "--sketch-m"),
    ([], "one of the arguments --mechanism --protocol is required"),
])
def test_bad_arguments_exit_2(run, args, needle):
    status, out, err = run(*args, "--epsilon", 2, "--users", 100, "--domain", 16, "--json")
    assert status == 2 and needle in err and "Traceback" not in err, err
    assert out == ""


# --- statistics --------------------------------------------------------------------------------

N, D, L, K, EPS, DIST, SEED = 200000, 100, 4, 3, 4.0, "zipf:2", 11


def final_mechanisms(name):
    """(phase-1 mechanism or None, mechanism of the final estimates) of an LDPMiner protocol."""
    eps_milli = protocol.eps_to_milli(EPS)
    core = LDPMINER[name]
    if core in ("rp", "sh"):
        mech = make_mechanism("srappor", eps_milli, D, l=L) if core == "rp" else \
            make_mechanism("sh", eps_milli, D, l=L, m=ldpminer.DEFAULT_M)
        return None, mech
    eps1, eps2 = ldpminer.split_budget(eps_milli)
    if core == "lm-sho":  # shc in both phases, l in both (spec §3.1)
        return (make_mechanism("shc", eps1, D, l=L, m=ldpminer.DEFAULT_M, phase=1),
                make_mechanism("shc", eps2, D, l=L, m=ldpminer.DEFAULT_M, phase=2,
                               eps1_milli=eps1))
    l2 = ldpminer.phase2_length(L, 2 * K)
    phase1 = make_mechanism("sh", eps1, D, l=L, m=ldpminer.DEFAULT_M)
    final = make_mechanism("srappor", eps2, D, l=l2, candidates=list(range(2 * K))) \
        if core == "lm-rp" else make_mechanism("sh", eps2, D, l=l2, m=ldpminer.DEFAULT_M)
    return phase1, final


@pytest.mark.parametrize("name", list(LDPMINER))
def test_planted_heavy_hitters_small_re_and_exact_ranks(run_json, name):
    r = run_json("--protocol", name, "--epsilon", EPS, "--users", N, "--domain", D,
                 "--set-size", L, "--dist", DIST, "--top", K, "--seed", SEED)
    data_seq, _ = np.random.SeedSequence(SEED).spawn(2)  # simulate_ldpminer's data stream
    f = datasets.true_counts(ldpminer_sim.draw_sets(N, L, D, DIST, np.random.default_rng(data_seq)),
                             D) / N
    order = np.argsort(-f, kind="stable")
    top = order[:K]
    z = stats.norm.ppf(1 - ALPHA / (2 * D))
    phase1, final = final_mechanisms(name)
    # SH's item variance includes the collision term over the other items' frequencies (the
    # whole domain here: after trimming only candidates remain, a negligible 1/m difference).
    sd = np.sqrt(final.item_variances(N, f))
    if phase1 is not None:
        sd1 = np.sqrt(phase1.item_variances(N, f))
        assert f[top[-1]] - f[order[2 * K]] > 2 * z * sd1.max()  # top-k become candidates
    gaps = f[order[:K]] - f[order[1:K + 1]]
    assert gaps.min() > 2 * z * sd[order[:K + 1]].max()  # estimates cannot swap ranks

    assert r["recall"] == 1.0
    assert r["ndcg"] == pytest.approx(1.0, abs=1e-12)
    z_top = stats.norm.ppf(1 - ALPHA / (2 * K))  # RE looks at the top k only
    bound = float(np.max(z_top * sd[top] / f[top]))
    assert bound < 0.1  # informative: a zero estimate has RE 1, one scaled by 1/l RE 0.75
    assert r["re"] <= bound


def test_ldpminer_sh_opt_beats_ldpminer_sh(run_json):
    """LDPMiner §4.4's correlated phases (spec §3.1): on a skewed synthetic dataset (Zipf 1.1
    over 200 items, sets of 2, eps = 2 split evenly) the phase-2 sign of ldpminer-sh-opt keeps x
    with p2 ~ e^2 / (1 + e^2) instead of e / (1 + e): a clearly smaller RE than ldpminer-sh
    with the same seed (same data), averaged over 5 repeats; theory says the phase-2 sd is
    (2 p_sh - 1) / (2 p2 - 1) ~ 0.61 of ldpminer-sh's."""
    common = ["--epsilon", 2, "--users", 100000, "--domain", 200, "--set-size", 2, "--top", 5,
              "--dist", "zipf:1.1", "--seed", 3, "--repeat", 5]
    opt = run_json("--protocol", "ldpminer-sh-opt", *common)
    sh = run_json("--protocol", "ldpminer-sh", *common)
    assert (opt["core_protocol"], opt["l2"], opt["k_max"]) == ("lm-sho", 2, 10)
    assert opt["re"] < 0.75 * sh["re"], (opt["re_per_repeat"], sh["re_per_repeat"])
    assert opt["recall"] >= sh["recall"]
    sd = [math.sqrt(make_mechanism(name, 1000, 200, l=2, m=65536, phase=2, **kw).variance(100000))
          for name, kw in (("shc", {"eps1_milli": 1000}), ("sh", {}))]
    assert sd[0] < 0.65 * sd[1]


def test_ldplcm_beats_cms_at_eps4_paper_setting(run_json):
    seeds = range(6)
    common = ["--epsilon", 4, "--users", 100000, "--domain", 5000, "--dist", "zipf:1.1",
              "--sketch-k", 64, "--sketch-m", 1024]
    lcm = np.array([run_json("--protocol", "ldplcm", *common, "--sample-rate", 0.1,
                             "--theta", 0.5, "--seed", s)["sse"] for s in seeds])
    cms = np.array([run_json("--protocol", "cms", *common, "--seed", s)["sse"] for s in seeds])
    diff = cms - lcm
    r = len(seeds)
    t_one = stats.t.ppf(1 - 1e-3, r - 1)
    assert diff.mean() - t_one * diff.std(ddof=1) / math.sqrt(r) > 0, (lcm, cms)

    from ldpfleet.eval.ldplcm_sim import _dataset
    mech = make_mechanism("cms", 4000, 5000, k=64, m=1024)
    expected = [float(np.sum(mech.item_variances(100000, _dataset(datasets.Population(
        4.0, 100000, 5000, "zipf:1.1", s))[1]))) for s in seeds]
    t_two = stats.t.ppf(1 - 1e-3 / 2, r - 1)
    assert abs(cms.mean() - np.mean(expected)) <= t_two * cms.std(ddof=1) / math.sqrt(r)
