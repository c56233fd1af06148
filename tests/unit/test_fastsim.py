"""ldpfleet.eval.fastsim: exact aggregate GRR/OUE simulation against theory and a per-user simulation.

Statistical bounds are z = 4.5 standard errors of the quantity compared (per-test false-alarm
rate below 1e-5 for a Gaussian statistic; the seeds are fixed, so the tests are deterministic).
"""
import math

import numpy as np
import pytest

from ldpfleet.eval import fastsim

Z = 4.5


def power_law_counts(d, n, exponent, rng):
    weights = np.arange(1, d + 1, dtype=np.float64) ** -exponent
    return rng.multinomial(n, weights / weights.sum())


# --- theory helpers -------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("f", [0.0, 0.02, 0.5])
def test_closed_forms_equal_the_general_variance(eps, f):
    """[NH] Eq. 3 and 6 are Eq. 2/5 with GRR's and OUE's p, q."""
    d, n = 37, 12345
    general_grr = fastsim.pure_variance(*fastsim.grr_pq(eps, d), n, f)
    general_oue = fastsim.pure_variance(*fastsim.oue_pq(eps), n, f)
    assert fastsim.grr_variance(eps, d, n, f) == pytest.approx(general_grr, rel=1e-12)
    assert fastsim.oue_variance(eps, n, f) == pytest.approx(general_oue, rel=1e-12)


def test_returned_variance_is_the_f_free_equation_7():
    rng = np.random.default_rng(0)
    counts = power_law_counts(50, 10_000, 1.2, rng)
    _, var = fastsim.fast_oue(counts, 1.5, rng)
    assert var == pytest.approx(fastsim.oue_variance(1.5, 10_000))
    _, var = fastsim.fast_grr(counts, 1.5, rng)
    assert var == pytest.approx(fastsim.grr_variance(1.5, 50, 10_000))


# --- against theory -------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["grr", "oue"])
def test_mse_matches_theory_variance(mechanism):
    """E[SSE] = sum_v Var(est_v) (unbiased estimates, exact per-item variance with the f-term).
    The bound is Z standard errors of the mean SSE over R repeats (from the SSE's sample sd)."""
    rng = np.random.default_rng(1)
    d, n, eps, repeats = 64, 20_000, 1.0, 3000
    counts = power_law_counts(d, n, 1.3, rng)
    truth = counts / n
    simulate = fastsim.FAST_MECHANISMS[mechanism]
    sse = np.array([np.sum((simulate(counts, eps, rng)[0] - truth) ** 2) for _ in range(repeats)])
    if mechanism == "grr":
        expected = float(np.sum(fastsim.grr_variance(eps, d, n, truth)))
    else:
        expected = float(np.sum(fastsim.oue_variance(eps, n, truth)))
    assert abs(sse.mean() - expected) <= Z * sse.std(ddof=1) / math.sqrt(repeats)


@pytest.mark.parametrize("mechanism,eps", [("grr", 2.0), ("oue", 3.0)])
def test_heavy_item_variance_includes_the_f_term(mechanism, eps):
    """One item holds half the users, so the f-term dominates its variance. The sample
    variance of R normal draws has standard error var * sqrt(2/(R-1)); the exact variance is
    inside Z of them and the f-free variance of Eq. 7 is outside."""
    rng = np.random.default_rng(2)
    d, n, repeats = 64, 20_000, 3000
    counts = np.full(d, n // (2 * (d - 1)))
    counts[0] = n - counts[1:].sum()
    f_heavy = counts[0] / n
    simulate = fastsim.FAST_MECHANISMS[mechanism]
    draws = np.array([simulate(counts, eps, rng)[0][0] for _ in range(repeats)])
    p, q = fastsim.mechanism_pq(mechanism, eps, d)
    exact = float(fastsim.pure_variance(p, q, n, f_heavy))
    f_free = float(fastsim.pure_variance(p, q, n))
    standard_error = exact * math.sqrt(2 / (repeats - 1))
    assert abs(draws.var(ddof=1) - exact) <= Z * standard_error
    assert abs(draws.var(ddof=1) - f_free) > Z * standard_error
    assert abs(draws.mean() - f_heavy) <= Z * math.sqrt(exact / repeats)


@pytest.mark.parametrize("mechanism", ["grr", "oue"])
def test_estimates_are_unbiased_per_item(mechanism):
    rng = np.random.default_rng(3)
    d, n, eps, repeats = 32, 5000, 1.0, 2000
    counts = power_law_counts(d, n, 1.0, rng)
    truth = counts / n
    simulate = fastsim.FAST_MECHANISMS[mechanism]
    mean = np.mean([simulate(counts, eps, rng)[0] for _ in range(repeats)], axis=0)
    p, q = fastsim.mechanism_pq(mechanism, eps, d)
    assert np.all(np.abs(mean - truth) <= Z * np.sqrt(fastsim.pure_variance(p, q, n, truth) / repeats))


def test_grr_reports_sum_to_n_and_estimates_to_one():
    """[NH] §3.1: under GRR the sum of all estimates is 1."""
    rng = np.random.default_rng(4)
    counts = power_law_counts(100, 7000, 1.1, rng)
    assert fastsim.grr_support_counts(counts, 0.7, rng).sum() == 7000
    est, _ = fastsim.fast_grr(counts, 0.7, rng)
    assert est.sum() == pytest.approx(1.0, abs=1e-12)


# --- against a per-user simulation ----------------------------------------------------------

def per_user_grr(values, d, eps, rng):
    """Each user keeps her value w.p. p, else reports one of the d-1 others uniformly."""
    p, _ = fastsim.grr_pq(eps, d)
    keep = rng.random(values.size) < p
    other = (values + rng.integers(1, d, values.size)) % d
    return np.bincount(np.where(keep, values, other), minlength=d)


def per_user_oue(values, d, eps, rng):
    """Each user's one-hot bit vector: the 1 stays w.p. 1/2, each 0 flips w.p. q."""
    p, q = fastsim.oue_pq(eps)
    one_hot = np.zeros((values.size, d), dtype=bool)
    one_hot[np.arange(values.size), values] = True
    bits = np.where(one_hot, rng.random((values.size, d)) < p, rng.random((values.size, d)) < q)
    return bits.sum(axis=0)


@pytest.mark.parametrize("mechanism", ["grr", "oue"])
def test_fast_counts_match_per_user_simulation(mechanism):
    """Same mechanism, two samplers: compare per-item mean and variance of the support counts
    and (GRR) the covariance of two items' counts, each within Z two-sample standard errors
    (the standard error of a sample variance or covariance is estimated from the 4th moments)."""
    rng = np.random.default_rng(5)
    d, n, eps, repeats = 8, 2000, 1.0, 1500
    counts = power_law_counts(d, n, 1.0, rng)
    values = np.repeat(np.arange(d), counts)
    per_user = per_user_grr if mechanism == "grr" else per_user_oue
    fast = fastsim.grr_support_counts if mechanism == "grr" else fastsim.oue_support_counts
    slow_draws = np.array([per_user(values, d, eps, rng) for _ in range(repeats)], dtype=np.float64)
    fast_draws = np.array([fast(counts, eps, rng) for _ in range(repeats)], dtype=np.float64)

    def moment_and_error(samples):
        centred = samples - samples.mean(axis=0)
        second = centred ** 2
        return second.mean(axis=0), second.std(axis=0, ddof=1) / math.sqrt(repeats)

    mean_gap = np.abs(slow_draws.mean(axis=0) - fast_draws.mean(axis=0))
    mean_error = np.sqrt((slow_draws.var(axis=0, ddof=1) + fast_draws.var(axis=0, ddof=1)) / repeats)
    assert np.all(mean_gap <= Z * mean_error)
    slow_var, slow_err = moment_and_error(slow_draws)
    fast_var, fast_err = moment_and_error(fast_draws)
    assert np.all(np.abs(slow_var - fast_var) <= Z * np.sqrt(slow_err ** 2 + fast_err ** 2))
    if mechanism == "grr":
        cross = lambda s: (s[:, 0] - s[:, 0].mean()) * (s[:, 1] - s[:, 1].mean())
        gap = abs(cross(slow_draws).mean() - cross(fast_draws).mean())
        error = math.sqrt((cross(slow_draws).var(ddof=1) + cross(fast_draws).var(ddof=1)) / repeats)
        assert gap <= Z * error
        assert cross(fast_draws).mean() < 0


# --- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("call,param", [
    (lambda: fastsim.fast_oue([1, 2, 3], 0, np.random.default_rng(0)), "eps"),
    (lambda: fastsim.fast_oue([1, 2, 3], float("nan"), np.random.default_rng(0)), "eps"),
    (lambda: fastsim.fast_grr([1, -2, 3], 1.0, np.random.default_rng(0)), "counts"),
    (lambda: fastsim.fast_grr([1.5, 2, 3], 1.0, np.random.default_rng(0)), "counts"),
    (lambda: fastsim.fast_grr([[1, 2]], 1.0, np.random.default_rng(0)), "counts"),
    (lambda: fastsim.fast_grr([0, 0, 0], 1.0, np.random.default_rng(0)), "counts"),
    (lambda: fastsim.mechanism_pq("olh", 1.0, 4), "mechanism"),
])
def test_bad_input_raises_typed_error(call, param):
    with pytest.raises(fastsim.SimulationError) as info:
        call()
    assert info.value.param == param
