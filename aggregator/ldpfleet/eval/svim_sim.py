"""SVIM-style protocols simulated in process (`simulate --protocol svim|psfo|auto`,
tools/reproduce_twophase.py): the campaign runs as `protocols.svim` prescribes for a real fleet
(public device split, PSFO phases, candidate list, trimmed phase-2 sets), devices simulated
with the C kernels. Returns the same `Answer`s (twophase.py) as `ldpminer_sim.run_ldpminer`.

One step beyond campaigns (docs/design/svim.md, "Size estimation"; svim_sizes.py): a size
group of svim.SIZE_SHARE of the phase-2 devices (Wang, Li, Jha, S&P 2018, §5.2) in the
candidate branch, when svim_sizes.size_estimation_pays: it reports trimmed sizes and phase 2
runs at svim_sizes.choose_l2 of them; in the flat branch a group of svim.FLAT_SIZE_SHARE
reports one size bit each and the phase-1 scale is svim_sizes.size_bits_ratio of them.
Campaigns do neither yet (their phase-2 l is fixed at creation and their flat branch scales by
svim.ratio_of_sums). Tuning `svim_size` = False turns it off.
"""
import numpy as np

from ..core import config
from ..core.errors import ConfigError
from ..core.mechanisms.sh import key_sets, take_sets
from ..core.protocols import svim
from . import svim_sizes
from ..core.protocols.ldpminer import candidates_from_phase1, trim_sets
from .twophase import SIM_SALT_BITS, Answer, default_l, frequencies, ranked, run_phase

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
        f = frequencies(run_phase(config.mechanism_for_phase(cfg, 1), sets, rng), keys)
        order = np.argsort(-f, kind="stable")
        return {k: Answer(order[:k], f[order[:k]], order, f) for k in ks}
    if name != "svim":
        raise ConfigError("protocol", "unknown protocol %r" % name)
    share = getattr(tuning, "svim_share", svim.DEFAULT_PHASE1_SHARE)
    in1 = rng.random(n) < share  # the public split of spec §5, as a draw per simulated device
    group1, group2 = take_sets(sets, np.flatnonzero(in1)), take_sets(sets, np.flatnonzero(~in1))
    z = getattr(tuning, "svim_z", svim.SEPARATION_Z)
    adaptive = getattr(tuning, "svim_adaptive", True)
    sketch1 = f1 = v1 = flat = None
    out = {}
    for k in ks:
        kc = int(tuning.k_max) if tuning.k_max is not None \
            else min(d, svim.DEFAULT_K_MAX_FACTOR * int(k))
        cfg = _campaign(svim.campaign_phases(eps_milli, d, l, kc, share,
                                             getattr(tuning, "svim_l2", None)), d, salt)
        if sketch1 is None:
            sketch1 = run_phase(config.mechanism_for_phase(cfg, 1), group1, rng)
            f1 = frequencies(sketch1, keys)
            v1 = sketch1.mechanism.item_variances(max(sketch1.n, 1), np.clip(f1, 0.0, 1.0))
        sep = svim.separation(f1, v1, k, kc, z)
        if adaptive and not sep["separable"]:
            if flat is None:
                flat = _flat_phase2(sketch1, group2, (eps_milli, d, l, salt), rng,
                                    getattr(tuning, "svim_size", True))
            order = np.argsort(-flat, kind="stable")
            out[k] = _answer(order[:k], flat[order[:k]], order, flat, "flat", sep)
            continue
        cand = candidates_from_phase1(sketch1, kc, keys)
        est_group = group2
        if getattr(tuning, "svim_size", True) and getattr(tuning, "svim_l2", None) is None \
                and svim_sizes.size_estimation_pays(f1[cand], l, min(l, kc)):
            est_group, l2 = _size_phase(group2, cand, min(l, kc), eps_milli, rng)
            cfg = _campaign(svim.campaign_phases(eps_milli, d, l, kc, share, l2), d, salt)
        mech2 = config.mechanism_for_phase(cfg, 2, candidates=[int(c) for c in cand])
        sketch2 = run_phase(mech2, est_group, rng, candidates=cand)
        f = frequencies(sketch2, cand)
        scale = svim.phase1_scale(f1[cand], f)
        if tuning.combine == "ivw":
            v2 = mech2.item_variances(max(sketch2.n, 1), np.clip(f, 0, 1))
            f = svim.combined(f1[cand], f, v1[cand], v2, scale)
        by_final = np.argsort(-f, kind="stable")
        rest = np.setdiff1d(keys, cand).astype(np.int64)
        order = ranked(cand[by_final].astype(np.int64), f1[rest], rest)
        estimates = scale * f1
        estimates[cand] = f
        out[k] = _answer(cand[by_final[:k]].astype(np.int64), f[by_final[:k]], order, estimates,
                         "candidates", sep)
    return out


def _size_phase(group2, cand, cap: int, eps_milli: int, rng) -> tuple:
    """Size estimation for the candidate branch (SVIM §5.2): a public share svim.SIZE_SHARE of
    the phase-2 devices report min(m, cap), m = |set & cand|, through GRR/OLH at eps
    (svim_sizes.size_oracle). (the devices that run phase 2, l2 = svim_sizes.choose_l2 of the
    estimated sizes x_0..x_cap)."""
    from ..core.mechanisms import make_mechanism
    group2 = key_sets(group2)
    n2 = group2.offsets.size - 1
    in_size = rng.random(n2) < svim.SIZE_SHARE
    mine = take_sets(group2, np.flatnonzero(in_size))
    sizes = np.diff(trim_sets(mine, cand).offsets.astype(np.int64))
    mech = make_mechanism(svim_sizes.size_oracle(eps_milli, cap), int(eps_milli), int(cap) + 1)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(np.minimum(sizes, cap).astype(np.uint32), rng))
    n = max(sketch.n, 1)
    x = np.asarray(sketch.estimate(np.arange(cap + 1, dtype=np.uint32)), np.float64) / n
    return take_sets(group2, np.flatnonzero(~in_size)), svim_sizes.choose_l2(x, cap)


def _size_bits(group2, l: int, eps_milli: int, rng) -> tuple:
    """The flat branch's size group (docs/design/svim.md): a public share
    svim.FLAT_SIZE_SHARE of the phase-2 devices, split by a public draw into halves that report
    the fill bit (1 with probability min(|set|, l) / l) and the held bit (|set| > 0) through
    binary randomized response at eps. (the other devices, (r^, Var r^))."""
    from ..core.mechanisms import make_mechanism
    group2 = key_sets(group2)
    n2 = group2.offsets.size - 1
    in_size = rng.random(n2) < svim.FLAT_SIZE_SHARE
    sizes = np.diff(group2.offsets.astype(np.int64))[in_size]
    fill_half = rng.random(sizes.size) < 0.5
    fill = rng.random(sizes.size) * l < np.minimum(sizes, l)  # the device's own coin
    mech = make_mechanism("grr", int(eps_milli), 2)
    means = []
    for bits in (fill[fill_half], (sizes > 0)[~fill_half]):
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(bits.astype(np.uint32), rng))
        n = max(sketch.n, 1)
        x = float(np.asarray(sketch.estimate(np.array([1], np.uint32)), np.float64)[0]) / n
        x = min(max(x, 0.0), 1.0)
        # GRR's variance given the half's bits, plus the bits' own: each half is a random
        # draw of devices and the fill bit a coin, so their mean spreads by x (1 - x) / n
        means.append((x, float(mech.item_variances(n, [x])[0]) + x * (1.0 - x) / n))
    return take_sets(group2, np.flatnonzero(~in_size)), svim_sizes.size_bits_ratio(*means, l)


def _flat_phase2(sketch1, group2, setup, rng, sizes=True) -> np.ndarray:
    """The flat branch: phase 2 over the whole domain at length l (svim.fallback_phase), pooled
    with the scaled phase-1 scores by inverse variance. Frequencies of every domain item. With
    `sizes`, a share svim.FLAT_SIZE_SHARE of the phase-2 devices report a size bit instead
    (`_size_bits`) and the scale of phase 1 is svim_sizes.size_bits_ratio of them
    (svim.ratio_of_sums otherwise)."""
    eps_milli, d, l, salt = setup
    ratio = None
    if sizes:
        group2, ratio = _size_bits(group2, l, eps_milli, rng)
    fb = svim.fallback_phase(eps_milli, d, l)
    cfg = _campaign([{"phase": 1, "mechanism": fb["mechanism"], "eps_milli": int(eps_milli),
                      "params": fb["params"]}], d, salt)
    mech2 = config.mechanism_for_phase(cfg, 1)
    sketch2 = run_phase(mech2, group2, rng)
    f, _, _ = svim.flat_estimates(sketch1, sketch2, np.arange(d, dtype=np.uint32), l, ratio)
    return f
