"""SVIM-style protocols simulated in process (`simulate --protocol svim|psfo|auto`,
tools/reproduce_twophase.py): the campaign runs as `protocols.svim` prescribes for a real fleet
(public device split, PSFO phases, candidate list, trimmed phase-2 sets), devices simulated
with the C kernels. Returns the same `Answer`s as `ldpminer_sim.run_ldpminer`.
"""
import numpy as np

from .. import config
from ..mechanisms.sh import key_sets, take_sets
from . import svim
from .ldpminer import _frequencies as _freqs
from .ldpminer import candidates_from_phase1
from .ldpminer_sim import SIM_SALT_BITS, Answer, _ranked, default_l
from .ldpminer_sim import _run_phase as run_phase

PROTOCOLS = ("svim", "psfo")


def _campaign(phases, d, salt):
    return config.make_config("sim-svim", phases, {"type": "int", "size": int(d)}, salt,
                              campaign_id=1)


class SvimAnswer(Answer):
    """An `Answer` of svim with the branch phase 2 took: `branch` "candidates" or "flat" and
    `separation` (svim.separation's diagnostics)."""

    branch = None
    separation = None


def _answer(top, top_f, order, estimates, branch, sep):
    out = SvimAnswer(top, top_f, order, estimates)
    out.branch, out.separation = branch, sep
    return out


def run_svim(name: str, sets, d: int, eps_milli: int, ks, rng, tuning) -> dict:
    """One simulated campaign per k (phase 1 shared across the ks, and the flat branch's phase 2
    too): {k: Answer}. `tuning`: ldpminer_sim.MinerTuning (l, k_max / k_max_factor,
    phase1_share, combine); an optional attribute `svim_z` overrides svim.SEPARATION_Z and
    `svim_adaptive` = False forces the candidate branch (the non-adaptive svim)."""
    sets = key_sets(sets)
    n = sets.offsets.size - 1
    l = int(tuning.l) if tuning.l is not None else default_l(sets)
    keys = np.arange(d, dtype=np.uint32)
    salt = int(rng.integers(0, 1 << SIM_SALT_BITS))
    if name == "psfo":
        cfg = _campaign(svim.single_phase(eps_milli, d, l), d, salt)
        f = _freqs(run_phase(config.mechanism_for_phase(cfg, 1), sets, rng), keys)
        order = np.argsort(-f, kind="stable")
        return {k: Answer(order[:k], f[order[:k]], order, f) for k in ks}
    if name != "svim":
        raise ValueError("unknown protocol %r" % name)
    share = svim.DEFAULT_PHASE1_SHARE
    in1 = rng.random(n) < share  # the public split of spec §5, as a draw per simulated device
    group1, group2 = take_sets(sets, np.flatnonzero(in1)), take_sets(sets, np.flatnonzero(~in1))
    z = getattr(tuning, "svim_z", svim.SEPARATION_Z)
    adaptive = getattr(tuning, "svim_adaptive", True)
    sketch1 = f1 = v1 = flat = None
    out = {}
    for k in ks:
        kc = int(tuning.k_max) if tuning.k_max is not None \
            else min(d, svim.DEFAULT_K_MAX_FACTOR * int(k))
        cfg = _campaign(svim.campaign_phases(eps_milli, d, l, kc, share), d, salt)
        if sketch1 is None:
            sketch1 = run_phase(config.mechanism_for_phase(cfg, 1), group1, rng)
            f1 = _freqs(sketch1, keys)
            v1 = sketch1.mechanism.item_variances(max(sketch1.n, 1), np.clip(f1, 0.0, 1.0))
        sep = svim.separation(f1, v1, k, kc, z)
        if adaptive and not sep["separable"]:
            if flat is None:
                flat = _flat_phase2(sketch1, group2, (eps_milli, d, l, salt), rng)
            order = np.argsort(-flat, kind="stable")
            out[k] = _answer(order[:k], flat[order[:k]], order, flat, "flat", sep)
            continue
        cand = candidates_from_phase1(sketch1, kc, keys)
        mech2 = config.mechanism_for_phase(cfg, 2, candidates=[int(c) for c in cand])
        sketch2 = run_phase(mech2, group2, rng, candidates=cand)
        f = _freqs(sketch2, cand)
        scale = svim.phase1_scale(f1[cand], f)
        if tuning.combine == "ivw":
            v2 = mech2.item_variances(max(sketch2.n, 1), np.clip(f, 0, 1))
            f = svim.combined(f1[cand], f, v1[cand], v2, scale)
        by_final = np.argsort(-f, kind="stable")
        rest = np.setdiff1d(keys, cand).astype(np.int64)
        order = _ranked(cand[by_final].astype(np.int64), f1[rest], rest)
        estimates = scale * f1
        estimates[cand] = f
        out[k] = _answer(cand[by_final[:k]].astype(np.int64), f[by_final[:k]], order, estimates,
                         "candidates", sep)
    return out


def _flat_phase2(sketch1, group2, setup, rng) -> np.ndarray:
    """The flat branch: phase 2 over the whole domain at length l (svim.fallback_phase), pooled
    with the scaled phase-1 scores by inverse variance. Frequencies of every domain item."""
    eps_milli, d, l, salt = setup
    fb = svim.fallback_phase(eps_milli, d, l)
    cfg = _campaign([{"phase": 1, "mechanism": fb["mechanism"], "eps_milli": int(eps_milli),
                      "params": fb["params"]}], d, salt)
    mech2 = config.mechanism_for_phase(cfg, 1)
    sketch2 = run_phase(mech2, group2, rng)
    f, _, _ = svim.flat_estimates(sketch1, sketch2, np.arange(d, dtype=np.uint32), l)
    return f
