"""ldpfleet.core.post: consistency post-processing ([NH] §3, [CAL] §III).

Reference solutions come from generic solvers (scipy SLSQP) and brute-force summation over
every possible true count; tolerances are derived from the solver and interpolation errors.
"""
import math

import numpy as np
import pytest
from scipy import optimize, stats

from ldpfleet.eval import fastsim
from ldpfleet.core import post

CONSISTENT = ["norm-mul", "norm-sub", "norm-hyb", "mle-apx", "power-ns"]
"""[NH] Table 1 (and [NA] Table I for PowerNS): non-negative and summing to 1."""

NON_NEGATIVE = ["base-pos", "base-cut", "norm-cut", "power", "calibrate-gauss"] + CONSISTENT
IDEMPOTENT = ["base", "base-pos", "post-pos", "base-cut", "norm", "norm-mul", "norm-sub", "norm-cut", "norm-hyb",
              "mle-apx"]
"""Projections (clip, cut, shift onto sum 1, [NH] §3.5's CLS, the KKT optimum of Eq. 13):
applying them to their own output changes nothing. Power/Calibrate are Bayesian shrinkage
and are not idempotent."""


def zipf_oue(seed, eps, users=200_000, domain=256, exponent=1.5):
    rng = np.random.default_rng(seed)
    weights = np.arange(1, domain + 1, dtype=np.float64) ** -exponent
    counts = rng.multinomial(users, weights / weights.sum())
    est, var = fastsim.fast_oue(counts, eps, rng)
    return counts, est, var, users


def options(method, eps):
    if method == "mle-apx":
        p, q = fastsim.oue_pq(eps)
        return {"p": p, "q": q}
    return {}


CASES = [(seed, eps) for seed in (1, 2) for eps in (0.5, 2.0)]


# --- invariants -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed,eps", CASES)
@pytest.mark.parametrize("method", CONSISTENT)
def test_consistent_methods_are_nonnegative_and_sum_to_one(method, seed, eps):
    _, est, var, n = zipf_oue(seed, eps)
    out = post.postprocess(method, est, var, n, **options(method, eps))
    assert out.min() >= 0
    assert out.sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("seed,eps", CASES)
def test_norm_sums_to_one_and_norm_cut_at_most_one(seed, eps):
    _, est, var, n = zipf_oue(seed, eps)
    assert post.postprocess("norm", est, var, n).sum() == pytest.approx(1.0, abs=1e-12)
    cut = post.postprocess("norm-cut", est, var, n)
    assert cut.min() >= 0 and cut.sum() <= 1.0 + 1e-12


@pytest.mark.parametrize("seed,eps", CASES)
@pytest.mark.parametrize("method", NON_NEGATIVE)
def test_nonnegative_methods(method, seed, eps):
    _, est, var, n = zipf_oue(seed, eps)
    assert post.postprocess(method, est, var, n, **options(method, eps)).min() >= 0


@pytest.mark.parametrize("seed,eps", CASES)
@pytest.mark.parametrize("method", list(post.METHODS))
def test_every_method_preserves_order(method, seed, eps):
    """[NH] §3.6: f'_a <= f'_b whenever est_a <= est_b."""
    _, est, var, n = zipf_oue(seed, eps)
    out = post.postprocess(method, est, var, n, **options(method, eps))
    ordered = out[np.argsort(est, kind="stable")]
    assert np.all(np.diff(ordered) >= -1e-15 * max(1.0, abs(ordered).max()))


@pytest.mark.parametrize("seed,eps", CASES)
@pytest.mark.parametrize("method", IDEMPOTENT)
def test_projection_methods_are_idempotent(method, seed, eps):
    _, est, var, n = zipf_oue(seed, eps)
    once = post.postprocess(method, est, var, n, **options(method, eps))
    twice = post.postprocess(method, once, var, n, **options(method, eps))
    np.testing.assert_allclose(twice, once, rtol=0, atol=1e-14)


def test_power_is_not_a_projection_but_shrinks_small_estimates():
    _, est, var, n = zipf_oue(3, 1.0)
    once = post.postprocess("power", est, var, n)
    assert np.max(np.abs(post.postprocess("power", once, var, n) - once)) > 1e-6
    small = est < 0
    assert np.all(once[small] > est[small])


# --- individual definitions -----------------------------------------------------------------

def test_base_cut_threshold_is_equation_9():
    d, var, alpha = 100, 1e-4, 2.0
    threshold = stats.norm.ppf(1 - alpha / d) * math.sqrt(var)
    est = np.full(d, 0.001)
    est[:2] = [threshold * (1 + 1e-9), threshold * (1 - 1e-9)]
    out = post.postprocess("base-cut", est, var, 10_000, alpha=alpha)
    assert out[0] == est[0] and out[1] == 0 and np.all(out[2:] == 0)
    out = post.postprocess("base-cut", est, var, 10_000, alpha=0.05)
    assert out[0] == 0


def test_norm_mul_scales_positive_part():
    est = np.array([0.6, 0.3, -0.1, 0.3])
    np.testing.assert_allclose(post.postprocess("norm-mul", est, 1e-3, 100), [0.5, 0.25, 0, 0.25])


def test_norm_cut_keeps_the_largest_prefix_not_exceeding_one():
    est = np.array([0.5, 0.3, 0.15, 0.1, 0.05, -0.2])
    out = post.postprocess("norm-cut", est, 1e-3, 100)
    np.testing.assert_array_equal(out, [0.5, 0.3, 0.15, 0, 0, 0])
    np.testing.assert_array_equal(post.postprocess("norm-cut", np.array([0.4, 0.3, -0.1]), 1e-3, 100), [0.4, 0.3, 0])


def test_norm_cut_never_splits_equal_estimates():
    out = post.postprocess("norm-cut", np.array([0.6, 0.3, 0.3, 0.1]), 1e-3, 100)
    np.testing.assert_array_equal(out, [0.6, 0, 0, 0])


def test_norm_hyb_keeps_estimates_above_t_and_norm_subs_the_rest():
    _, est, var, n = zipf_oue(4, 1.0)
    threshold = stats.norm.isf(2.0 / est.size) * math.sqrt(var)
    out = post.postprocess("norm-hyb", est, var, n)
    above = est > threshold
    assert 0 < above.sum() < est.size
    np.testing.assert_array_equal(out[above], est[above])
    expected_rest = post.project_to_simplex(est[~above], 1.0 - est[above].sum())
    np.testing.assert_allclose(out[~above], expected_rest, atol=1e-15)


def test_norm_hyb_when_estimates_above_t_exceed_one():
    est = np.array([0.7, 0.25, 0.2, 0.01, -0.01])
    out = post.postprocess("norm-hyb", est, 1e-6, 10_000)
    np.testing.assert_allclose(out, [0.7, 0.25, 0.05, 0, 0], atol=1e-15)


def cls_by_slsqp(est):
    d = est.size
    found = optimize.minimize(lambda f: np.sum((f - est) ** 2), np.full(d, 1.0 / d), jac=lambda f: 2 * (f - est),
                              method="SLSQP", bounds=[(0, None)] * d,
                              constraints=[{"type": "eq", "fun": lambda f: f.sum() - 1, "jac": lambda f: np.ones(d)}],
                              options={"ftol": 1e-15, "maxiter": 1000})
    assert found.success
    return found.x


@pytest.mark.parametrize("seed", range(5))
def test_norm_sub_equals_constrained_least_squares(seed):
    """[NH] §3.5 / App. B: Norm-Sub is the CLS solution. SLSQP is stopped at ftol 1e-15 on a
    strongly convex objective (Hessian 2I), so its point is within ~sqrt(1e-15) of the optimum."""
    rng = np.random.default_rng(seed)
    est = rng.normal(0.02, 0.05, 40)
    ours = post.postprocess("norm-sub", est, 1e-3, 1000)
    reference = cls_by_slsqp(est)
    np.testing.assert_allclose(ours, reference, atol=1e-6)
    assert np.sum((ours - est) ** 2) <= np.sum((reference - est) ** 2) + 1e-12


def mle_by_slsqp(est, p, q):
    d = est.size
    found = optimize.minimize(post.mle_apx_objective, np.full(d, 1.0 / d), args=(est, p, q), method="SLSQP",
                              bounds=[(0, 1)] * d,
                              constraints=[{"type": "eq", "fun": lambda f: f.sum() - 1, "jac": lambda f: np.ones(d)}],
                              options={"ftol": 1e-15, "maxiter": 2000})
    assert found.success
    return found.x


@pytest.mark.parametrize("mechanism,seed", [("oue", 0), ("oue", 1), ("grr", 2), ("grr", 3)])
def test_mle_apx_matches_numerical_optimum_of_equation_13(mechanism, seed):
    rng = np.random.default_rng(seed)
    d, n, eps = 30, 2000, 1.0
    weights = np.arange(1, d + 1, dtype=np.float64) ** -1.2
    counts = rng.multinomial(n, weights / weights.sum())
    est, var = fastsim.FAST_MECHANISMS[mechanism](counts, eps, rng)
    p, q = fastsim.mechanism_pq(mechanism, eps, d)
    ours = post.postprocess("mle-apx", est, var, n, p=p, q=q)
    reference = mle_by_slsqp(est, p, q)
    assert post.mle_apx_objective(ours, est, p, q) <= post.mle_apx_objective(reference, est, p, q) + 1e-10
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    assert np.sum(ours == 0) > 0


def test_mle_apx_equals_the_papers_iterative_procedure():
    """[NH] §3.4: start with D1 = D, move items with negative f' to D0, repeat."""
    _, est, var, n = zipf_oue(5, 0.5)
    p, q = fastsim.oue_pq(0.5)
    a = (p - q) * est
    support = np.ones(est.size, dtype=bool)
    while True:
        x = (a[support].sum() - (p - q)) / ((p - q) * (1 - p - q) + support.sum() * q * (1 - q))
        f = (a - q * (1 - q) * x) / (p - q + (p * (1 - p) - q * (1 - q)) * x)
        negative = support & (f < 0)
        if not negative.any():
            break
        support &= ~negative
    expected = np.where(support, f, 0.0)
    np.testing.assert_allclose(post.postprocess("mle-apx", est, var, n, p=p, q=q), expected, atol=1e-15)


# --- Calibrate / Power ----------------------------------------------------------------------

def brute_force_posterior(x, sigma, prior):
    """[CAL] Eq. 11-12 summed over every possible true count (no window, no FFT)."""
    counts = np.arange(prior.lo, prior.hi + 1, dtype=np.float64)
    log_terms = prior.log_weight(counts)[None, :] - 0.5 * ((x[:, None] - counts[None, :]) / sigma) ** 2
    weights = np.exp(log_terms - log_terms.max(axis=1, keepdims=True))
    return (weights * counts).sum(axis=1) / weights.sum(axis=1)


def interpolation_bound(sigma, prior, x):
    """Linear interpolation between the integers around x errs by at most max|P''|/8 (unit
    spacing); P'' is bounded by second differences (step 1/4) of the brute-force posterior
    mean over [floor(x) - 1/4, floor(x) + 5/4] for every x."""
    step = 0.25
    grid = (np.floor(x)[:, None] + np.arange(-1, 6)[None, :] * step).ravel()
    values = brute_force_posterior(grid, sigma, prior).reshape(x.size, -1)
    return float(np.max(np.abs(np.diff(values, 2, axis=1))) / step ** 2 / 8)


@pytest.mark.parametrize("prior_kind", ["power", "gauss"])
@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_calibrate_equals_brute_force_posterior_mean(prior_kind, eps):
    rng = np.random.default_rng(11)
    n = 6000
    counts = np.minimum(n, np.floor(rng.pareto(0.9, 400) * 5).astype(np.int64) + 1)
    p, q = fastsim.oue_pq(eps)
    var = float(fastsim.pure_variance(p, q, n))
    sigma = math.sqrt(var) * n
    x = counts + rng.normal(0, sigma, counts.size)
    x[:4] = [-12 * sigma, -30 * sigma, n + 15 * sigma, 0.5]
    prior = post.PowerLawPrior(1.8, n) if prior_kind == "power" else post.GaussianPrior(40.0, 3 * sigma, n)
    ours = post.calibrate(x / n, var, n, prior) * n
    reference = brute_force_posterior(x, sigma, prior)
    tolerance = interpolation_bound(sigma, prior, x) + 1e-9 * n
    assert np.max(np.abs(ours - reference)) <= tolerance


def test_power_uses_the_fitted_prior():
    _, est, var, n = zipf_oue(6, 1.0)
    prior = post.fit_power_prior(est, var, n)
    np.testing.assert_array_equal(post.postprocess("power", est, var, n),
                                  post.calibrate(est, var, n, prior))
    np.testing.assert_array_equal(post.postprocess("power", est, var, n, exponent=prior.exponent),
                                  post.calibrate(est, var, n, prior))
    np.testing.assert_allclose(post.postprocess("power-ns", est, var, n),
                               post.project_to_simplex(post.calibrate(est, var, n, prior)), atol=1e-15)


def test_generalized_harmonic_matches_direct_sum():
    for n in (10, 5000, 300_000):
        for s in (-0.5, 0.0, 0.7, 1.0, 1.0 + 1e-13, 1.5, 3.0):
            direct = float(np.sum(np.arange(1, n + 1, dtype=np.float64) ** -s))
            assert post.generalized_harmonic(n, s) == pytest.approx(direct, rel=1e-12)


def simulated_power_law(exponent, support, items, sigma, seed):
    rng = np.random.default_rng(seed)
    pmf = np.arange(1, support + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(pmf / pmf.sum())
    counts = np.minimum(np.searchsorted(cdf, rng.random(items)), support - 1) + 1
    return counts, counts + rng.normal(0, sigma, items)


def test_mean_variance_fit_recovers_power_law_exponent():
    """[CAL] Eq. 17: alpha solves E_alpha[k] = mean(x). The sample mean of x has standard error
    sqrt((Var_alpha[k] + sigma^2)/d); by the delta method alpha-hat's is that divided by
    |dE_alpha[k]/d alpha|. Tolerance: 4 standard errors."""
    exponent, support, items, sigma = 3.0, 20_000, 400_000, 2.0
    _, x = simulated_power_law(exponent, support, items, sigma, seed=3)
    fitted = post.fit_power_prior(x / support, (sigma / support) ** 2, support).exponent
    h = lambda s: post.generalized_harmonic(support, s)
    mean = h(exponent - 1) / h(exponent)
    variance = h(exponent - 2) / h(exponent) - mean ** 2
    step = 1e-5
    prior_mean = lambda a: post.PowerLawPrior(a, support).mean()
    slope = (prior_mean(exponent + step) - prior_mean(exponent - step)) / (2 * step)
    standard_error = math.sqrt((variance + sigma ** 2) / items) / abs(slope)
    assert abs(fitted - exponent) <= 4 * standard_error
    assert standard_error < 0.02


def test_maximum_likelihood_fit_recovers_power_law_exponent():
    """[CAL] Eq. 16. Tolerance: 4 standard errors from the observed Fisher information (the
    curvature of the log-likelihood at the fit, by central differences)."""
    exponent, support, items, sigma = 1.8, 5000, 5000, 20.0
    _, x = simulated_power_law(exponent, support, items, sigma, seed=4)
    var = (sigma / support) ** 2
    fitted = post.fit_power_prior(x / support, var, support, fit="ml").exponent
    loglik = lambda a: post.priors._log_likelihood(x, sigma, post.PowerLawPrior(a, support), post.DEFAULT_WINDOW_SIGMAS)
    step = 1e-3
    curvature = -(loglik(fitted + step) - 2 * loglik(fitted) + loglik(fitted - step)) / step ** 2
    assert curvature > 0
    assert abs(fitted - exponent) <= 4 / math.sqrt(curvature)


def test_gaussian_mean_variance_fit_is_equations_17_and_18():
    rng = np.random.default_rng(8)
    n, sigma = 100_000, 50.0
    x = rng.normal(3000, 400, 5000) + rng.normal(0, sigma, 5000)
    prior = post.fit_gaussian_prior(x / n, (sigma / n) ** 2, n)
    assert prior.mean == pytest.approx(x.mean(), rel=1e-12)
    assert prior.std == pytest.approx(math.sqrt(x.var() - sigma ** 2), rel=1e-12)


def test_power_at_kosarak_size_beats_base():
    """Power at d=42,178, n=10^6 (its speed is measured in tools/bench_post.py, not here)."""
    rng = np.random.default_rng(9)
    d, n = 42_178, 1_000_000
    weights = np.arange(1, d + 1, dtype=np.float64) ** -1.1
    truth = rng.multinomial(n, weights / weights.sum())
    est, var = fastsim.fast_oue(truth, 1.0, rng)
    out = post.postprocess("power", est, var, n)
    assert np.all(np.isfinite(out)) and np.all(out >= 0)
    f = truth / n
    assert np.mean((out - f) ** 2) < 0.5 * np.mean((est - f) ** 2)


# --- query transform and errors -------------------------------------------------------------

def test_post_pos_clips_query_answers_only():
    est = np.array([0.6, -0.1, 0.5])
    np.testing.assert_array_equal(post.postprocess("post-pos", est, 1e-3, 100), est)
    assert post.query_transform("post-pos")(-0.2) == 0.0
    np.testing.assert_array_equal(post.query_transform("post-pos")(est), [0.6, 0, 0.5])
    np.testing.assert_array_equal(post.query_transform("norm-sub")(est), est)


@pytest.mark.parametrize("call,param", [
    (lambda: post.postprocess("base", [0.5, 0.5], 1e-3, -5), "n"),
    (lambda: post.postprocess("base", [0.5, 0.5], 1e-3, 0), "n"),
    (lambda: post.postprocess("base", [0.5, 0.5], 1e-3, 10.5), "n"),
    (lambda: post.postprocess("base", [0.5, 0.5], 1e-3, True), "n"),
    (lambda: post.postprocess("base", [[0.5, 0.5]], 1e-3, 10), "est"),
    (lambda: post.postprocess("base", [], 1e-3, 10), "est"),
    (lambda: post.postprocess("base", [0.5, np.nan], 1e-3, 10), "est"),
    (lambda: post.postprocess("base", [0.5, 0.5], [1e-3, 1e-3, 1e-3], 10), "var"),
    (lambda: post.postprocess("base", [0.5, 0.5], -1e-3, 10), "var"),
    (lambda: post.postprocess("nope", [0.5, 0.5], 1e-3, 10), "method"),
    (lambda: post.postprocess("norm-sub", [0.5, 0.5], 1e-3, 10, alpha=2), "alpha"),
    (lambda: post.postprocess("base-cut", [0.5, 0.5], 1e-3, 10, alpha=5), "alpha"),
    (lambda: post.postprocess("mle-apx", [0.5, 0.5], 1e-3, 10), "p"),
    (lambda: post.postprocess("mle-apx", [0.5, 0.5], 1e-3, 10, p=0.5), "q"),
    (lambda: post.postprocess("mle-apx", [0.5, 0.5], 1e-3, 10, p=0.2, q=0.4), "p"),
    (lambda: post.postprocess("power", [0.5, 0.5], [1e-3, 2e-3], 10), "var"),
    (lambda: post.postprocess("power", [0.5, 0.5], 1e-3, 10, fit="median"), "fit"),
    (lambda: post.postprocess("power", [0.5, 0.5], 1e-3, 10, window=0), "window"),
    (lambda: post.postprocess("calibrate-gauss", [0.5, 0.5], 1e-3, 10, mean=0.5), "std"),
])
def test_bad_input_raises_typed_error(call, param):
    with pytest.raises(post.PostProcessError) as info:
        call()
    assert info.value.param == param
    assert isinstance(info.value, ValueError)


def test_per_item_variance_gives_per_item_threshold():
    est = np.array([0.03, 0.03, 0.5, 0.44])
    var = np.array([1e-6, 1e-3, 1e-6, 1e-6])
    out = post.postprocess("base-cut", est, var, 1000, alpha=0.1)
    np.testing.assert_array_equal(out, [0.03, 0, 0.5, 0.44])
