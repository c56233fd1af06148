"""The planner's predicted error matches a simulated run; its choices follow the theory."""
import json
import subprocess
import sys

import numpy as np
import pytest

from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.planner import plan


def simulated_mse(name, params, eps, d, n, repeats, seed):
    """Full-domain MSE (fractions) of `repeats` rounds with uniform true values."""
    rng = np.random.default_rng(seed)
    mech = make_mechanism(name, int(round(eps * 1000)), d, **params)
    errs = []
    for _ in range(repeats):
        keys = rng.integers(0, d, size=n).astype(np.uint32)
        truth = np.bincount(keys, minlength=d) / n
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(keys, rng))
        est = sketch.estimate(np.arange(d, dtype=np.uint32)) / n
        errs.append(np.mean((est - truth) ** 2))
    return float(np.mean(errs)), mech


@pytest.mark.parametrize("eps,d", [(1.0, 4), (2.0, 256)])
def test_predicted_mse_matches_simulation(eps, d):
    n, repeats = 20000, max(20, 4000 // d)
    result = plan(eps, d, users=n)
    name = result["recommended"]
    row = next(r for r in result["candidates"] if r["mechanism"] == name)
    got, mech = simulated_mse(name, row["params"], eps, d, n, repeats, seed=7)
    truth_var = mech.variance(n, np.full(d, 1.0 / d))
    # The MSE over d items and R repeats has relative sd about sqrt(2/((d-1) R)) (chi-square;
    # the errors of GRR's d estimates sum to zero, hence d-1); allow 5 sd. R grows for small d
    # so that the bound stays near 10 %.
    tol = 5 * np.sqrt(2.0 / ((d - 1) * repeats))
    assert abs(got / truth_var - 1) < tol
    assert abs(row["expected_mse"] / truth_var - 1) < 0.2


def test_small_domain_prefers_grr_and_large_domain_does_not():
    assert plan(2.0, 4, users=10000)["recommended"] == "grr"
    big = plan(2.0, 42178, users=10 ** 6)
    assert big["recommended"] in ("olh", "flh", "hcms", "oue", "cms")
    assert big["recommended"] != "grr"


def test_byte_limit_excludes_unary_encoding():
    result = plan(2.0, 1024, users=10 ** 5, report_bytes_max=20)
    rows = {r["mechanism"]: r for r in result["candidates"]}
    assert rows["oue"]["feasible"] is False
    assert result["recommended"] != "oue"


def test_users_needed_for_target_reaches_it():
    result = plan(1.0, 1024, target_mse=1e-6)
    row = next(r for r in result["candidates"] if r["mechanism"] == result["recommended"])
    mech = make_mechanism(result["recommended"], 1000, 1024, **row["params"])
    n = row["users_needed"]
    assert mech.variance(n) <= 1e-6 < mech.variance(n - 1)


def test_cli_json_and_bad_args():
    out = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "plan", "--epsilon", "2",
                          "--domain", "1024", "--users", "100000", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["recommended"] and doc["candidates"]
    bad = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "plan", "--epsilon", "2",
                          "--domain", "1024"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--users" in bad.stderr
