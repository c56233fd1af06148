"""Simulation of numeric campaigns (spec §3.3): n devices' values perturbed by the C kernels,
aggregated by the mechanism's sketch, estimated with an interval; and the analytic variance of
each mechanism's mean, for planning. Seeds are the aggregator's (a seeded numpy Generator);
devices never use one.

    simulate_mean("hm", readings, 1000, domain, rng)       -> {"mean", "low", "high", ...}
    simulate_distribution(readings, 1000, domain, rng)     -> {"histogram", "quantiles", ...}
    mean_variance("pm", 1.0, n, t)                         -> analytic variance of the mean
"""
import numpy as np

from ..core.errors import ConfigError
from ..core.mechanisms import make_mechanism
from ..core.mechanisms import numeric

MEAN_MECHANISMS = ("duchi", "pm", "hm")


def _grid(readings, domain, metric: int = 0) -> np.ndarray:
    """Grid points of readings (domain: a config domain dict or a NumericDomain); integer
    arrays pass through as grid points when `domain` is None."""
    if domain is None:
        return np.asarray(readings, dtype=np.int64)
    if isinstance(domain, dict):
        domain = numeric.NumericDomain(domain)
    return domain.grid_points(readings, metric)


def simulate_mean(mechanism: str, readings, eps_milli: int, domain, rng, level: float = 0.95,
                  points: int = None, **params) -> dict:
    """Perturb n devices' readings (shape (n,), or (n, d) for hm with d metrics) at eps_milli
    and estimate the mean(s). `domain`: a config domain (readings are values) or None with
    `points` (readings are already grid points). Returns means in the domain's units (grid
    points when domain is None) with their `level` intervals, and the analytic standard error."""
    if mechanism not in MEAN_MECHANISMS:
        raise ConfigError("mechanism", "simulate_mean runs %s, not %r"
                          % (", ".join(MEAN_MECHANISMS), mechanism))
    dom = numeric.NumericDomain(domain) if isinstance(domain, dict) else domain
    n_points = dom.points if dom is not None else points
    values = np.asarray(readings)
    d = values.shape[1] if values.ndim == 2 else 1
    x = np.stack([_grid(values[:, a] if values.ndim == 2 else values, dom, a)
                  for a in range(d)], axis=1)
    if mechanism == "hm":
        params.setdefault("metrics", d)
    elif d != 1:
        raise ConfigError("mechanism", "%s reports one metric; use hm for %d" % (mechanism, d))
    mech = make_mechanism(mechanism, eps_milli, n_points, **params)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(x if mechanism == "hm" else x[:, 0], rng))
    estimates = sketch.means(level) if mechanism == "hm" else [sketch.mean(level)]
    out = []
    for a, est in enumerate(estimates):
        grid = est.grid(n_points)
        conv = (lambda v: float(dom.value(v, a))) if dom is not None else float
        out.append({"mean": conv(grid[0]), "low": conv(grid[1]), "high": conv(grid[2]),
                    "t": est.t, "se": est.se, "reports": est.n,
                    "analytic_se": float(np.sqrt(mech.mean_variance(x.shape[0], x[:, a])))})
    return {"mechanism": mechanism, "eps_milli": eps_milli, "n": int(x.shape[0]),
            "metrics": out}


def simulate_distribution(readings, eps_milli: int, domain, rng, quantiles=(0.25, 0.5, 0.75),
                          level: float = 0.95, points: int = None, replicates: int = 200,
                          **params) -> dict:
    """Square Wave + EMS over n devices' readings: the histogram over the bins, quantiles and
    the mean with bootstrap intervals (in the domain's units, grid points without a domain)."""
    dom = numeric.NumericDomain(domain) if isinstance(domain, dict) else domain
    n_points = dom.points if dom is not None else points
    x = _grid(readings, dom)
    mech = make_mechanism("sw", eps_milli, n_points, **params)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(x, rng))
    conv = (lambda v: float(dom.value(v))) if dom is not None else float
    qs = sketch.quantiles(quantiles, level, replicates)
    mean = sketch.mean(level, replicates)
    edges = mech.bin_edges()
    return {"mechanism": "sw", "eps_milli": eps_milli, "n": int(x.size), "bins": mech.bins,
            "edges": [conv(e) for e in edges], "histogram": sketch.histogram().tolist(),
            "quantiles": [{"q": q, "value": conv(v), "low": conv(lo), "high": conv(hi)}
                          for q, v, lo, hi in qs],
            "mean": {"value": conv(mean[0]), "low": conv(mean[1]), "high": conv(mean[2])}}


def mean_variance(mechanism: str, eps: float, n: int, t=0.0, metrics: int = 1) -> float:
    """Analytic variance of the estimated mean of t in [-1, 1] (the paper formulas: Duchi et
    al. JASA 2018; Wang et al. ICDE 2019 Lemma 1 and §IV) over n devices whose values are `t`
    (a scalar, or an array of the population's values)."""
    t = np.asarray(t, dtype=np.float64)
    if mechanism == "duchi":
        return float(np.mean(numeric.duchi_variance(eps, t))) / n
    if mechanism == "pm":
        return float(np.mean(numeric.pm_variance(eps, t))) / n
    if mechanism == "hm":
        return numeric.hm_mean_variance(eps, metrics, n, np.atleast_1d(t))
    raise ConfigError("mechanism", "no analytic mean variance for %r" % mechanism)
