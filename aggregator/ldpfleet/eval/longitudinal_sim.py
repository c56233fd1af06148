"""Repeated collection with memoisation, simulated in process (protocol_spec/v2 §3.2): n devices
over R rounds whose values evolve, each reporting every round through the shipped C kernels
from a permanent state that persists across rounds; the per-round estimates, their analytic
variance; the planner's per-round error and lifetime ε per protocol are core.longitudinal_plan's
(re-exported here: PROTOCOLS, protocol_mechanism, plan_longitudinal).

Protocols: L-OSUE, L-SUE, L-GRR (Arcolezi et al., "Improving the utility of locally
differentially private protocols for longitudinal and multidimensional frequency estimates",
DCN 2022), OLOLOHA and BiLOLOHA (Arcolezi et al., "Frequency estimation of evolving data under
local differential privacy", EDBT 2023); `every-round-oue` (a fresh one-shot OUE report at ε1
every round, no memoisation) is the baseline whose lifetime ε grows with the rounds.

Simulation draws from a seeded numpy Generator (aggregator side only). A device's permanent
state is what it draws at enrolment (`enrol_batch`, the real kernel) for L-GRR, LOLOHA and the
one-bit mean; for L-OSUE / L-SUE, whose state is n^2 bits, each (device, value) row is drawn
the first time the device holds the value and kept for the rest of the run — the same
distribution, since the rows are independent and a row is only ever seen once it is used.
"""
from dataclasses import dataclass, field

import numpy as np

from . import datasets
from ..core import kernels
from ..core.errors import ConfigError
from ..core.longitudinal_plan import (BASELINE, PROTOCOLS, plan_longitudinal,  # noqa: F401
                                      protocol_mechanism)
from ..core.mechanisms.base import body_ptr, report_array, run_chunks

REPLICATIONS = {"l-osue": 6, "l-sue": 8, "l-grr": 6, "ololoha": 16, "biloloha": 16}
"""Independent runs per protocol that bring the standard error of the MSE / variance ratio to
about 1.5 % at n = 10^5, k = 100, 30 rounds, change rate 0.1: the rounds of one run share their
permanent responses (and LOLOHA's hash collisions), so a run's rounds are far from independent."""


@dataclass
class Evolution:
    """Values of n devices over rounds: round 0 drawn from `probabilities`; afterwards each
    device, independently with probability `change_rate`, draws a new value from the same
    distribution (which may equal its old one)."""

    n: int
    rounds: int
    change_rate: float
    probabilities: np.ndarray

    def __post_init__(self):
        if self.n < 1 or self.rounds < 1:
            raise ConfigError("rounds", "need n >= 1 and rounds >= 1")
        if not 0.0 <= self.change_rate <= 1.0:
            raise ConfigError("change_rate", "change rate must be in [0, 1], got %r"
                              % (self.change_rate,))

    def __call__(self, rng):
        """Yields (round, values) with values a uint32 array of n items."""
        def draw(k, g):
            return datasets.draw_from(self.probabilities, k, g)
        values = draw(self.n, rng)
        for t in range(self.rounds):
            if t:
                values, _ = evolve(values, self.change_rate, draw, rng)
            yield t, values


def evolve(values: np.ndarray, change_rate: float, draw, rng):
    """One round of evolution, THE rule the simulations and the load generator share: each
    device independently, with probability `change_rate`, draws a new value `draw(k, rng)`
    from the distribution (which may equal its old one). Returns (the new values, the
    indices of the devices that drew)."""
    redrawn = np.flatnonzero(rng.random(len(values)) < change_rate)
    values = values.copy()
    values[redrawn] = draw(redrawn.size, rng)
    return values, redrawn


class MemoRows:
    """L-OSUE / L-SUE permanent rows kept per (device, value): the row of a pair is drawn (the
    OUE kernel with the permanent thresholds: row v of `ldp_lue_enrol`) the first time it is
    needed and reused ever after. Only devices whose value changed are looked up."""

    def __init__(self, mech, n_devices: int):
        self.mech = mech
        self.keys = np.zeros(0, np.int64)      # sorted device * n + value
        self.where = np.zeros(0, np.int64)     # row index of each key
        self.rows = np.zeros((0, mech.row_bytes), np.uint8)
        self.current_row = None                # row index of every device's current value
        self.values = None

    def current(self, values: np.ndarray, rng) -> np.ndarray:
        """(n, row_bytes) rows of every device's current value."""
        if self.values is None:
            moved = np.arange(values.size)
            self.current_row = np.zeros(values.size, np.int64)
        else:
            moved = np.flatnonzero(values != self.values)
        self.values = values.copy()
        if moved.size:
            self.current_row[moved] = self._lookup(moved, values[moved], rng)
        return self.rows[self.current_row]

    def _lookup(self, devices, values, rng):
        n_items = self.mech.domain_size
        keys = devices.astype(np.int64) * n_items + values.astype(np.int64)
        pos = np.searchsorted(self.keys, keys)
        found = np.zeros(keys.size, bool)
        inside = pos < self.keys.size
        found[inside] = self.keys[pos[inside]] == keys[inside]
        missing = keys[~found]  # distinct: one key per device
        if missing.size:
            first = self.rows.shape[0]
            self.rows = np.concatenate([self.rows, self._draw(missing % n_items, rng)])
            all_keys = np.concatenate([self.keys, missing])
            all_where = np.concatenate([self.where, first + np.arange(missing.size)])
            order = np.argsort(all_keys, kind="stable")
            self.keys, self.where = all_keys[order], all_where[order]
            pos = np.searchsorted(self.keys, keys)
        return self.where[pos]

    def _draw(self, values: np.ndarray, rng) -> np.ndarray:
        mech = self.mech
        n = values.size
        out = np.zeros((n, mech.row_bytes), np.uint8)
        x = np.ascontiguousarray(values, np.uint32)
        for start, stop in kernels.spans(n, kernels.chunk_rows(mech.domain_size)):
            words = kernels.random_words(rng, stop - start, mech.domain_size)
            kernels.lib.ldp_oue_perturb(kernels.ptr(x, 4 * start), stop - start, mech.domain_size,
                                        mech.t_p, mech.t_q, kernels.ptr(words),
                                        kernels.byte_ptr(out, start * mech.row_bytes), mech.row_bytes)
        return out


class DeviceStates:
    """Every device's permanent state for the whole run: the enrolment kernel (`enrol_batch`)
    for the small states, `MemoRows` for the unary encodings."""

    def __init__(self, mech, n: int, rng):
        self.mech = mech
        self.rows = MemoRows(mech, n) if hasattr(mech, "row_bytes") else None
        self.states = None if self.rows is not None else mech.enrol_batch(n, rng)

    def reports(self, values: np.ndarray, rng) -> np.ndarray:
        """One round's reports of all devices."""
        mech = self.mech
        if self.rows is None:
            return mech.report_batch(values, self.states, rng)
        rows = self.rows.current(values, rng)
        out = report_array(mech, values.size, 0)
        zeros = np.zeros(values.size, np.uint32)

        def write(start, stop, words):
            kernels.lib.ldp_lue_perturb(kernels.ptr(zeros, 4 * start), stop - start, mech.domain_size,
                                        mech.t_flip, kernels.byte_ptr(rows, start * mech.row_bytes),
                                        mech.row_bytes, kernels.ptr(words), body_ptr(out, start),
                                        out.shape[1])

        run_chunks(mech, rng, values.size, write)
        return out


@dataclass
class RoundsResult:
    """Per-round estimated and true frequencies (fractions, rounds x items), the analytic
    per-item variance averaged over items, and the squared error averaged over items."""

    estimates: np.ndarray
    truth: np.ndarray
    variance: np.ndarray
    mse: np.ndarray
    changes: np.ndarray = field(default=None)

    def summary(self) -> dict:
        return {"rounds": int(self.mse.size), "mse": float(self.mse.mean()),
                "variance": float(self.variance.mean()),
                "mse_over_variance": float(self.mse.mean() / self.variance.mean())}


def simulate_rounds(mech, evolution: Evolution, rng) -> RoundsResult:
    """Run every round of `evolution` through `mech` with real memoisation: one state per
    device for the whole run, one report per device per round, a fresh sketch per round."""
    d = mech.domain_size
    states = DeviceStates(mech, evolution.n, rng)
    est, truth, var, mse, changes = [], [], [], [], []
    previous = None
    for _, values in evolution(rng):
        reports = states.reports(values, rng)
        sketch = mech.new_sketch()
        sketch.update(reports)
        f_hat = sketch.estimate_all() / evolution.n
        f = np.bincount(values, minlength=d)[:d] / evolution.n
        est.append(f_hat)
        truth.append(f)
        var.append(float(np.mean(mech.item_variances(evolution.n, f))))
        mse.append(float(np.mean((f_hat - f) ** 2)))
        changes.append(0 if previous is None else int(np.count_nonzero(values != previous)))
        previous = values
    return RoundsResult(np.array(est), np.array(truth), np.array(var), np.array(mse),
                        np.array(changes))


def simulate_protocols(protocols, eps_milli: int, eps1_milli: int, evolution: Evolution,
                       seed: int, replications=1) -> dict:
    """Every protocol on the same seeded evolution and noise streams: {protocol: {mse,
    variance, mse_over_variance, ratio_se (the standard error of the ratio across
    replications, None for one), lifetime_eps, params, mse_per_round, variance_per_round,
    changes_per_round (means over the replications)}}. `replications`: runs per protocol, an
    int or a {protocol: runs} dict (e.g. REPLICATIONS)."""
    out = {}
    for name in protocols:
        mech = protocol_mechanism(name, eps_milli, eps1_milli, len(evolution.probabilities))
        runs = replications[name] if isinstance(replications, dict) else replications
        ratios, mses, variances, per_round = [], [], [], []
        for rep in range(runs):
            rng = np.random.default_rng([seed, rep])
            res = simulate_rounds(mech, evolution, rng)
            mses.append(res.mse.mean())
            variances.append(res.variance.mean())
            ratios.append(res.mse.mean() / res.variance.mean())
            per_round.append((res.mse, res.variance, res.changes))
        mse_r, var_r, changes_r = (np.mean([p[i] for p in per_round], axis=0) for i in range(3))
        out[name] = {
            "mechanism": mech.name, "params": mech.config_params(),
            "mse": float(np.mean(mses)), "variance": float(np.mean(variances)),
            "mse_over_variance": float(np.mean(mses) / np.mean(variances)),
            "ratio_se": float(np.std(ratios, ddof=1) / np.sqrt(runs)) if runs > 1 else None,
            "lifetime_eps": mech.enrolment_charge_milli(evolution.rounds) / 1000.0,
            "replications": runs,
            "mse_per_round": [float(v) for v in mse_r],
            "variance_per_round": [float(v) for v in var_r],
            "changes_per_round": [float(v) for v in changes_r],
        }
    return out
