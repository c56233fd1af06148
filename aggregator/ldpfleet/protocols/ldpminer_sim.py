"""LDPMiner simulated in process (evaluation: `simulate --protocol`, tools/reproduce_twophase.py):
the campaign runs exactly as `ldpminer` runs it for a real fleet (phase-1 mechanism, candidate
list, trimmed phase-2 sets, final top-k); only the devices are simulated, with the C kernels.
Scored with §5.1.3's relative error and NDCG (Qin et al., "Heavy Hitter Estimation over
Set-Valued Data with Local Differential Privacy", CCS 2016).
"""
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from .. import config, datasets, metrics, protocol
from ..mechanisms.cms import as_keys
from .ldpminer import (DEFAULT_M, DEFAULT_SHARE, SINGLE_MECHANISM, _combined, _frequencies,
                       campaign_phases, candidates_from_phase1, check_protocol, phase1_mechanism,
                       phase2_length, phase2_mechanism, trim_sets)

CHUNK_USERS = 1 << 16
SIM_SALT_BITS = 32


@dataclass(frozen=True)
class MinerTuning:
    """LDPMiner's knobs: `l` the padded set length (default: the sets' width), `k_max`
    candidates (default k_max_factor * k, §4.1's O(k)), phase 1's share of ε (§5.1.2), `m` SH
    projection rows, `combine` ("phase2" or "ivw") and `phase2_pad` ("kmax" or "l")."""

    l: int = None
    k_max: int = None
    k_max_factor: int = 2
    phase1_share: float = DEFAULT_SHARE
    m: int = DEFAULT_M
    combine: str = "phase2"
    phase2_pad: str = "kmax"


Answer = namedtuple("Answer", "top_index top_freq order estimates")
Answer.__doc__ = ("A simulated run's answer over an int domain 0..d-1: the top-k indices and "
                  "frequencies; `order`, the whole domain ranked (for NDCG); `estimates`, the "
                  "collector's best frequency estimate of every item (final estimate for "
                  "candidates, phase-1 estimate otherwise).")


def draw_sets(n: int, set_size: int, d: int, dist: str, rng) -> np.ndarray:
    """(n, set_size) item sets (datasets.draw_sets), drawn chunk by chunk to bound memory;
    uint16 when d <= 2^16 (the simulation's int domain 0..d-1: index == key)."""
    dtype = np.uint16 if d <= 1 << 16 else np.uint32
    out = np.empty((int(n), int(set_size)), dtype)
    for start in range(0, int(n), CHUNK_USERS):
        stop = min(int(n), start + CHUNK_USERS)
        out[start:stop] = datasets.draw_sets(stop - start, set_size, d, dist, rng)
    return out


def _run_phase(mech, sets, rng, candidates=None):
    """All users through `mech` (C kernels), chunk by chunk; phase-2 sets trimmed first."""
    sketch = mech.new_sketch()
    for start in range(0, sets.shape[0], CHUNK_USERS):
        chunk = as_keys(sets[start:start + CHUNK_USERS]).reshape(-1, sets.shape[1])
        values = chunk if candidates is None else trim_sets(chunk, candidates)
        sketch.update(mech.perturb_batch(values, rng))
    return sketch


def _ranked(first, rest_scores, rest_index):
    """Whole-domain ranking: `first` (already ordered), then `rest_index` by `rest_scores`."""
    tail = rest_index[np.argsort(-rest_scores, kind="stable")]
    return np.concatenate([first, tail])


def run_ldpminer(name: str, sets: np.ndarray, d: int, eps_milli: int, ks, rng,
                 tuning: MinerTuning = MinerTuning()) -> dict:
    """One simulated campaign per k of `ks` over the given sets (int domain 0..d-1); the
    two-phase protocols share one phase-1 run across the ks. Returns {k: Answer}. The salt of
    the hash functions is drawn from `rng`, so repeated runs average over hash functions too."""
    check_protocol(name)
    t = tuning
    l = int(sets.shape[1]) if t.l is None else int(t.l)
    keys = np.arange(d, dtype=np.uint32)
    salt = int(rng.integers(0, 1 << SIM_SALT_BITS))

    def campaign(kc):
        return config.make_config("sim-ldpminer", campaign_phases(
            name, eps_milli, l, kc, t.m, t.phase1_share, t.phase2_pad),
            {"type": "int", "size": int(d)}, salt, campaign_id=1)

    out = {}
    if name in SINGLE_MECHANISM:
        sketch = _run_phase(config.mechanism_for_phase(campaign(None), 1), sets, rng)
        f = _frequencies(sketch, keys)
        order = np.argsort(-f, kind="stable")
        for k in ks:
            out[k] = Answer(order[:k], f[order[:k]], order, f)
        return out
    sketch1 = None
    for k in ks:
        kc = int(t.k_max) if t.k_max is not None else min(d, t.k_max_factor * int(k))
        cfg = campaign(kc)
        if sketch1 is None:
            sketch1 = _run_phase(phase1_mechanism(cfg), sets, rng)
            f1 = _frequencies(sketch1, keys)
        cand = candidates_from_phase1(sketch1, kc, keys)
        sketch2 = _run_phase(phase2_mechanism(cfg, cand), sets, rng, candidates=cand)
        f = _combined(sketch1, sketch2, cand, t.combine)
        by_final = np.argsort(-f, kind="stable")
        rest = np.setdiff1d(keys, cand).astype(np.int64)
        order = _ranked(cand[by_final].astype(np.int64), f1[rest], rest)
        estimates = f1.copy()
        estimates[cand] = f
        out[k] = Answer(cand[by_final[:k]].astype(np.int64), f[by_final[:k]], order, estimates)
    return out


def score(f_true: np.ndarray, answer: Answer, k: int) -> dict:
    """§5.1.3's RE and NDCG, plus two diagnostics.

    re: median over the true top-k of |f^ - f| / f with the collector's estimate of each item
        (§5.2 notes a missed heavy hitter still has an estimate);
    re_list: the same when only the reported top-k list counts (missed items estimated 0, the
        convention of Fig. 4's bars);
    ndcg: estimated ranks are positions in `answer.order` (top-k first, then the rest as the
        protocol ranks them);
    recall: share of the true top-k in the reported top-k."""
    d = f_true.size
    listed = np.zeros(d)
    listed[answer.top_index] = answer.top_freq
    rank_score = np.empty(d)
    rank_score[answer.order] = np.arange(d, 0, -1, dtype=np.float64)
    truth = metrics.top_indices(f_true, k)
    return {"re": metrics.relative_error(f_true, answer.estimates, k),
            "re_list": metrics.relative_error(f_true, listed, k),
            "ndcg": metrics.ndcg(f_true, rank_score, k),
            "recall": len(set(truth.tolist()) & set(np.asarray(answer.top_index).tolist())) / k}


def simulate_ldpminer(protocol_name: str, pop: datasets.Population, set_size: int, k: int,
                      tuning: MinerTuning = MinerTuning()) -> dict:
    """Draw pop.users sets of `set_size` items from pop.dist over pop.domain items, run one
    protocol, score its top-k: {"re", "re_list", "ndcg", "recall", ...}. The same seed gives
    the same dataset for every protocol (paired comparisons)."""
    check_protocol(protocol_name)
    t, n, d = tuning, pop.users, pop.domain
    data_rng, noise_rng = pop.generators()
    sets = draw_sets(n, set_size, d, pop.dist, data_rng)
    f_true = datasets.true_counts(sets, d) / n
    answers = run_ldpminer(protocol_name, sets, d, protocol.eps_to_milli(pop.eps), [k], noise_rng,
                           tuning)
    two = protocol_name not in SINGLE_MECHANISM
    kc = (t.k_max if t.k_max is not None else min(d, t.k_max_factor * k)) if two else None
    l = set_size if t.l is None else t.l
    result = score(f_true, answers[k], k)
    result.update({"protocol": protocol_name, "epsilon": pop.eps, "users": n, "domain": d,
                   "set_size": set_size, "l": l, "dist": pop.dist, "k": k, "k_max": kc,
                   "l2": phase2_length(l, kc, t.phase2_pad) if two else None,
                   "phase1_share": t.phase1_share, "combine": t.combine, "seed": pop.seed})
    return result
