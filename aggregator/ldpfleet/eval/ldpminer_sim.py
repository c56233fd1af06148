"""LDPMiner simulated in process (evaluation: `simulate --protocol`, tools/reproduce_twophase.py):
the campaign runs exactly as `ldpminer` runs it for a real fleet (phase-1 mechanism, candidate
list, trimmed phase-2 sets, final top-k); only the devices are simulated, with the C kernels.
The correlated protocol (`lm-sho`, spec §3.1) keeps every simulated device's phase-1 (t, y1, x)
and the same devices re-report from it in phase 2, untrimmed.
Scored with §5.1.3's relative error and NDCG (Qin et al., "Heavy Hitter Estimation over
Set-Valued Data with Local Differential Privacy", CCS 2016).
"""
from dataclasses import dataclass

import numpy as np

from ..core import config, protocol
from . import datasets, accuracy as metrics
from ..core.mechanisms.sh import KeySets
from ..core.protocols.ldpminer import (
    CORRELATED,
    DEFAULT_M,
    DEFAULT_SHARE,
    SINGLE_MECHANISM,
    campaign_phases,
    candidates_from_phase1,
    check_protocol,
    combined,
    frequencies,
    phase1_mechanism,
    phase2_length,
    phase2_mechanism)
from . import svim_sim
from .twophase import (CHUNK_USERS, SIM_SALT_BITS, Answer, chunk_of, default_l, ranked,
                       run_phase, set_sizes, users_of)

@dataclass(frozen=True)
class MinerTuning:
    """LDPMiner's knobs: `l` the padded set length (default `default_l`: the sets' width, or
    the 90th percentile of variable set sizes), `k_max`
    candidates (default k_max_factor * k, §4.1's O(k)), phase 1's share of ε (§5.1.2), `m` SH
    projection rows, `combine` ("phase2" or "ivw") and `phase2_pad` ("kmax" or "l")."""

    l: int = None
    k_max: int = None
    k_max_factor: int = 2
    phase1_share: float = DEFAULT_SHARE
    m: int = DEFAULT_M
    combine: str = "phase2"
    phase2_pad: str = "kmax"


def draw_sets(n: int, set_size: int, d: int, dist: str, rng) -> np.ndarray:
    """(n, set_size) item sets (datasets.draw_sets), drawn chunk by chunk to bound memory;
    uint16 when d <= 2^16 (the simulation's int domain 0..d-1: index == key)."""
    dtype = np.uint16 if d <= 1 << 16 else np.uint32
    out = np.empty((int(n), int(set_size)), dtype)
    for start in range(0, int(n), CHUNK_USERS):
        stop = min(int(n), start + CHUNK_USERS)
        out[start:stop] = datasets.draw_sets(stop - start, set_size, d, dist, rng)
    return out


def _run_correlated_phase1(mech, sets, rng):
    """`shc` phase 1 for all users, chunk by chunk: (sketch, every user's ShcMemo (t, y1, x),
    what its device keeps for phase 2, spec §3.1)."""
    from ..core.mechanisms.shc import ShcMemo, memo_from_reports
    sketch = mech.new_sketch()
    n = users_of(sets)
    memo = ShcMemo(np.zeros(n, np.uint32), np.zeros(n, np.uint8), np.zeros(n, np.uint8))
    for start in range(0, n, CHUNK_USERS):
        stop = min(n, start + CHUNK_USERS)
        reports, x = mech.perturb_phase1(chunk_of(sets, start, stop), rng)
        sketch.update(reports)
        part = memo_from_reports(reports, x)
        for whole, piece in zip(memo, part):
            whole[start:stop] = piece
    return sketch, memo


def _run_correlated_phase2(mech, memo, rng):
    """`shc` phase 2: the same users re-report from their memos (no trimming, spec §3.1)."""
    from ..core.mechanisms.shc import ShcMemo
    sketch = mech.new_sketch()
    n = memo.t.size
    for start in range(0, n, CHUNK_USERS):
        part = ShcMemo(*(a[start:start + CHUNK_USERS] for a in memo))
        sketch.update(mech.perturb_phase2(part, rng))
    return sketch


def run_ldpminer(name: str, sets, d: int, eps_milli: int, ks, rng,
                 tuning: MinerTuning = MinerTuning()) -> dict:
    """One simulated campaign per k of `ks` over the given sets (int domain 0..d-1): an (n, l)
    array or KeySets (variable sizes, empty sets allowed; l defaults to `default_l`); the
    two-phase protocols share one phase-1 run across the ks. Returns {k: Answer}. The salt of
    the hash functions is drawn from `rng`, so repeated runs average over hash functions too.
    `name` may also be one of svim_sim.PROTOCOLS ("svim", "psfo") or "auto" (`run_auto`)."""
    if name == "auto":
        return run_auto(sets, d, eps_milli, ks, rng, tuning)
    if name in svim_sim.PROTOCOLS:
        return svim_sim.run_svim(name, sets, d, eps_milli, ks, rng, tuning)
    check_protocol(name)
    t = tuning
    l = default_l(sets) if t.l is None else int(t.l)
    keys = np.arange(d, dtype=np.uint32)
    salt = int(rng.integers(0, 1 << SIM_SALT_BITS))

    def campaign(kc):
        return config.make_config("sim-ldpminer", campaign_phases(
            name, eps_milli, l, kc, t.m, t.phase1_share, t.phase2_pad),
            {"type": "int", "size": int(d)}, salt, campaign_id=1)

    out = {}
    if name in SINGLE_MECHANISM:
        sketch = run_phase(config.mechanism_for_phase(campaign(None), 1), sets, rng)
        f = frequencies(sketch, keys)
        order = np.argsort(-f, kind="stable")
        for k in ks:
            out[k] = Answer(order[:k], f[order[:k]], order, f)
        return out
    sketch1 = memo = None
    for k in ks:
        kc = int(t.k_max) if t.k_max is not None else min(d, t.k_max_factor * int(k))
        cfg = campaign(kc)
        if sketch1 is None and name in CORRELATED:
            sketch1, memo = _run_correlated_phase1(phase1_mechanism(cfg), sets, rng)
            f1 = frequencies(sketch1, keys)
        elif sketch1 is None:
            sketch1 = run_phase(phase1_mechanism(cfg), sets, rng)
            f1 = frequencies(sketch1, keys)
        cand = candidates_from_phase1(sketch1, kc, keys)
        if name in CORRELATED:
            sketch2 = _run_correlated_phase2(phase2_mechanism(cfg, cand), memo, rng)
        else:
            sketch2 = run_phase(phase2_mechanism(cfg, cand), sets, rng, candidates=cand)
        f = combined(sketch1, sketch2, cand, t.combine)
        by_final = np.argsort(-f, kind="stable")
        rest = np.setdiff1d(keys, cand).astype(np.int64)
        order = ranked(cand[by_final].astype(np.int64), f1[rest], rest)
        estimates = f1.copy()
        estimates[cand] = f
        out[k] = Answer(cand[by_final[:k]].astype(np.int64), f[by_final[:k]], order, estimates)
    return out


def auto_choice(sets, d: int, eps_milli: int, k: int, tuning: MinerTuning) -> dict:
    """protocols.auto's choice for these (n, eps, d, l, k): {"chosen", "predicted_error", ...},
    with svim's flat-branch ratio r = E[min(|set|, l)] / P(set non-empty) of the same sets the
    default l is read from (protocols.auto)."""
    from ..core.protocols import auto
    l = default_l(sets) if tuning.l is None else int(tuning.l)
    ratio = None  # an (n, l) array: every set holds l items, r = l
    if isinstance(sets, KeySets):
        sizes = set_sizes(sets)
        held = int(np.count_nonzero(sizes))
        ratio = float(np.minimum(sizes, l).sum()) / held if held else None
    return auto.choose(users_of(sets), eps_milli, d, l, k, tuning.k_max, size_ratio=ratio)


def run_auto(sets, d: int, eps_milli: int, ks, rng, tuning: MinerTuning) -> dict:
    """`--protocol auto`: per k the protocol protocols.auto predicts best, run as itself (the
    ks that chose the same protocol share its run, so auto's answer IS that protocol's)."""
    chosen = {k: auto_choice(sets, d, eps_milli, k, tuning)["chosen"] for k in ks}
    out = {}
    for name in dict.fromkeys(chosen.values()):
        out.update(run_ldpminer(name, sets, d, eps_milli, [k for k in ks if chosen[k] == name],
                                rng, tuning))
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


@dataclass(frozen=True)
class SetData:
    """One simulated dataset, the same for every protocol of a seed (paired comparisons):
    `sets` an (n, l) array (fixed size) or KeySets (variable sizes) over the int domain
    0..domain-1, `f_true` the fraction of users holding each item, `labels` the items of a
    data file (None: the indices are the items), `l_p90` the default padded length
    (`default_l`: the 90th percentile of the sizes, LDPMiner §3)."""

    sets: object
    domain: int
    f_true: np.ndarray
    labels: list = None
    l_p90: int = 1

    @property
    def users(self) -> int:
        return users_of(self.sets)

    @property
    def fixed_size(self):
        """The common set size of an (n, l) array, else None."""
        return None if isinstance(self.sets, KeySets) else int(self.sets.shape[1])

    def label(self, index) -> list:
        if self.labels is None:
            return [int(i) for i in index]
        return [self.labels[int(i)] for i in index]


def set_data(sets, domain: int, labels=None) -> SetData:
    """SetData of given sets: true frequencies (users holding each item / n) and l_p90."""
    n = users_of(sets)
    keys = sets.keys if isinstance(sets, KeySets) else sets
    f_true = datasets.true_counts(keys, int(domain)) / max(n, 1)
    return SetData(sets, int(domain), f_true, labels, default_l(sets))


def set_data_synthetic(n: int, sizes_spec, d: int, dist: str, rng) -> SetData:
    """n users' sets over 0..d-1 from `dist`: "fixed:L" as an (n, L) array (`draw_sets`),
    "geometric:MEAN" as KeySets (`datasets.draw_variable_sets`)."""
    sizes = datasets.parse_sizes(sizes_spec)
    if sizes.kind == "fixed":
        return set_data(draw_sets(n, int(sizes.value), d, dist, rng), d)
    return set_data(datasets.draw_variable_sets(n, sizes, d, dist, rng), d)


def set_data_from_file(data, users, rng) -> SetData:
    """A loaded data file (`datafile.ItemData`): its devices as they are (users None), or
    `users` devices resampled with replacement with `rng`."""
    sets = data.sets if users is None else data.resample(users, rng)
    return set_data(sets, data.domain, data.labels)


def simulate_ldpminer(protocol_name: str, pop: datasets.Population, data, k: int,
                      tuning: MinerTuning = MinerTuning(), repeat: int = 0) -> dict:
    """Run one protocol on `data` (SetData; an int L: fixed-size sets of L items drawn from
    pop.dist with pop's data stream) with the noise stream of `repeat` (Population.generators)
    and score its top-k: {"re", "re_list", "ndcg", "recall", ...}. The same seed and repeat
    give the same dataset and streams to every protocol (paired comparisons)."""
    if protocol_name not in ("auto", "svim", "psfo"):
        check_protocol(protocol_name)
    data_rng, noise_rng = pop.generators(repeat)
    if not isinstance(data, SetData):
        data = set_data_synthetic(pop.users, "fixed:%d" % int(data), pop.domain, pop.dist,
                                  data_rng)
    t, n, d = tuning, data.users, data.domain
    answers = run_ldpminer(protocol_name, data.sets, d, protocol.eps_to_milli(pop.eps), [k],
                           noise_rng, tuning)
    plan = auto_choice(data.sets, d, protocol.eps_to_milli(pop.eps), k, t) \
        if protocol_name == "auto" else None
    ran = plan["chosen"] if plan else protocol_name
    two = ran not in SINGLE_MECHANISM and ran != "psfo"
    kc = (t.k_max if t.k_max is not None else min(d, t.k_max_factor * k)) if two else None
    l = data.l_p90 if t.l is None else t.l
    result = score(data.f_true, answers[k], k)
    if plan:
        result.update({"chosen_protocol": plan["chosen_protocol"],
                       "predicted_error": plan["predicted_error"], "plan": plan["rows"]})
    result.update({"protocol": protocol_name, "epsilon": pop.eps, "users": n, "domain": d,
                   "set_size": data.fixed_size, "l": l, "set_size_p90": data.l_p90,
                   "set_size_mean": float(np.mean(set_sizes(data.sets))) if n else 0.0,
                   "dist": pop.dist, "k": k, "k_max": kc,
                   "l2": (min(l, kc) if ran == "svim" else phase2_length(l, kc, t.phase2_pad,
                                                                         ran))
                   if two else None,
                   "phase1_share": t.phase1_share, "combine": t.combine, "seed": pop.seed,
                   "top_items": data.label(answers[k].top_index),
                   "true_top_items": data.label(metrics.top_indices(data.f_true, k))})
    return result
