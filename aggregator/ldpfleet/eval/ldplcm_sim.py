"""LDPLCM and its sketch baselines simulated in process (evaluation: `simulate --protocol`,
tools/reproduce_twophase.py). The campaign runs exactly as `ldplcm` runs it for a real fleet
(public sampling rule, phase-1 CMS, trained integer model, phase-2 `lcm`, Alg. 4); only the
devices are simulated, with the C kernels.
"""
from dataclasses import dataclass

import numpy as np

from ..core import config, protocol
from . import datasets, accuracy as metrics
from ..core.errors import ConfigError
from ..core.mechanisms import make_mechanism
from ..core.protocols.ldplcm import (
    DEFAULT_SAMPLE_RATE,
    DEFAULT_SKETCH_K,
    DEFAULT_SKETCH_M,
    DEFAULT_THETA,
    campaign_phases,
    estimate_frequencies,
    high_mask,
    model_to_json,
    phase1_mask,
    phase1_mechanism,
    phase2_mechanism,
    rate_ppm,
    train_model)

REPORT_CHUNK_BYTES = 1 << 25
"""Simulated reports are perturbed and folded in chunks of about this many bytes."""
SIM_SALT_BITS = 32
BASELINE_FLH_KP = 128
"""FLH's k' public seeds as an LDPLCM baseline (the reproduction's setting)."""


@dataclass(frozen=True)
class LcmTuning:
    """LDPLCM's knobs: the CMS (k, m), sample rate r, θ (Alg. 3), and how the simulation runs:
    theta_mode "alg3" passes Training.theta_measured to Alg. 4, "sketch" lets the lcm sketch
    estimate the low users itself; train_items, gbr_params, total_mass go to `train_model`."""

    k: int = DEFAULT_SKETCH_K
    m: int = DEFAULT_SKETCH_M
    sample_rate: float = DEFAULT_SAMPLE_RATE
    theta: float = DEFAULT_THETA
    theta_mode: str = "alg3"
    train_items: int = None
    gbr_params: dict = None
    total_mass: str = "known"


def _fold(mech, values, rng, high=None):
    sketch = mech.new_sketch()
    rows = max(1, REPORT_CHUNK_BYTES // mech.report_size)
    for start in range(0, values.size, rows):
        part = values[start:start + rows]
        if high is None:
            reports = mech.perturb_batch(part, rng)
        else:
            reports = mech.perturb_batch(part, rng, high=high[start:start + rows])
        sketch.update(reports)
    return sketch


def _errors(f_true, est):
    return {"sse": metrics.sse(f_true, est), "mse": metrics.mse(f_true, est)}


def _dataset(pop: datasets.Population):
    data_rng, noise_rng = pop.generators()
    values = datasets.draw_values(pop.users, pop.domain, pop.dist, data_rng)
    return values, datasets.true_counts(values, pop.domain) / pop.users, noise_rng


def simulate_ldplcm(pop: datasets.Population, tuning: LcmTuning = LcmTuning(),
                    return_estimates: bool = False) -> dict:
    """One LDPLCM campaign over pop.users simulated devices (ids "dev-<i>", sampled by the
    public rule). Returns {"sse", "mse", ...} over the whole domain (frequencies as fractions),
    split into high and low items (`sse_other_theta_mode`: the other theta mode on the same
    reports); with return_estimates also "estimates", "high_mask" and "truth" (arrays over the
    domain). The same seed gives the same dataset as `simulate_baseline`."""
    t = tuning
    if t.theta_mode not in ("alg3", "sketch"):
        raise ConfigError("theta_mode", "must be 'alg3' or 'sketch', got %r" % (t.theta_mode,))
    n, d = pop.users, pop.domain
    values, f_true, rng = _dataset(pop)
    salt = int(rng.integers(0, 1 << SIM_SALT_BITS))
    ppm = rate_ppm(t.sample_rate)
    cfg = config.make_config("sim-ldplcm", campaign_phases(protocol.eps_to_milli(pop.eps), t.k,
                                                           t.m, ppm),
                             {"type": "int", "size": int(d)}, salt, campaign_id=1)
    sampled = phase1_mask(("dev-%d" % i for i in range(n)), salt, ppm)
    keys = np.arange(d, dtype=np.uint32)
    sketch1 = _fold(phase1_mechanism(cfg), values[sampled], rng)
    training = train_model(sketch1, keys, t.theta, t.train_items, pop.seed, t.gbr_params,
                           t.total_mass)
    model = training.model
    rest = values[~sampled]
    rest_high = high_mask(model, rest)
    sketch2 = _fold(phase2_mechanism(cfg), rest, rng, high=rest_high)
    theta_used = training.theta_measured if t.theta_mode == "alg3" else None
    est, high = estimate_frequencies(sketch2, model, keys, theta_used)
    other, _ = estimate_frequencies(sketch2, model, keys,
                                    None if t.theta_mode == "alg3" else training.theta_measured)
    out = _errors(f_true, est)
    out["sse_other_theta_mode"] = metrics.sse(f_true, other)
    out.update({
        "protocol": "ldplcm", "epsilon": pop.eps, "users": n, "domain": d, "dist": pop.dist,
        "k": t.k, "m": t.m, "sample_rate": t.sample_rate, "theta": t.theta,
        "theta_mode": t.theta_mode, "seed": pop.seed, "phase1_users": int(sampled.sum()),
        "phase2_users": int(rest.size), "high_items": int(high.sum()),
        "theta_measured": training.theta_measured,
        "theta_true": float(rest_high.mean()) if rest.size else 0.0,
        "sse_high": metrics.sse(f_true[high], est[high]) if high.any() else 0.0,
        "sse_low": metrics.sse(f_true[~high], est[~high]) if (~high).any() else 0.0,
        "model_nodes": len(model.split), "model_json_bytes": len(model_to_json(model)),
    })
    if return_estimates:
        out.update({"estimates": est, "high_mask": high, "truth": f_true})
    return out


def simulate_baseline(mechanism: str, pop: datasets.Population, params: dict = None,
                      return_estimates: bool = False) -> dict:
    """Apple-CMS (`cms`), Apple-HCMS (`hcms`; params k, m) or FLH (`flh`; params kp, default
    BASELINE_FLH_KP, and g) over all users of the same dataset as simulate_ldplcm."""
    if mechanism not in ("cms", "hcms", "flh"):
        raise ConfigError("mechanism", "baseline must be cms, hcms or flh, got %r" % (mechanism,))
    params = {k: v for k, v in (params or {}).items() if v is not None}
    if mechanism == "flh":
        params.setdefault("kp", BASELINE_FLH_KP)
    values, f_true, rng = _dataset(pop)
    salt = int(rng.integers(0, 1 << SIM_SALT_BITS))
    mech = make_mechanism(mechanism, protocol.eps_to_milli(pop.eps), pop.domain, salt=salt,
                          campaign_id=1, **params)
    sketch = _fold(mech, values, rng)
    est = np.asarray(sketch.estimate(np.arange(pop.domain, dtype=np.uint32)), np.float64) / pop.users
    out = _errors(f_true, est)
    out.update({"protocol": mechanism, "epsilon": pop.eps, "users": pop.users,
                "domain": pop.domain, "dist": pop.dist, "k": params.get("k"),
                "m": params.get("m"), "kp": params.get("kp"), "seed": pop.seed})
    if return_estimates:
        out.update({"estimates": est, "truth": f_true})
    return out
