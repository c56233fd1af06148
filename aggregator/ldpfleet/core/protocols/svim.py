"""SVIM-style two-phase heavy hitters over set-valued data with padding-and-sampling oracles:
Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining" (IEEE S&P 2018) §5.

Users, not the budget, are split between the phases (spec §5 `sample_rate_ppm`); phase 1 finds
candidates with PSFO at l1 = 1 (§5.1), phase 2 estimates the k_max candidates with PSFO at
l2 = min(l, k_max) over the trimmed sets. At the end of phase 1 a separability test
(`separation`) chooses between that candidate branch and the flat branch (spec §5.4: phase 2
listless over the domain, pooled with phase 1 by inverse variance: `flat_estimates`).
Reasoning and measurements: docs/design/svim.md. The simulation (with §5.2's size estimation,
simulation only) is eval/svim_sim.py.
"""
import numpy as np

from ..errors import ConfigError
from ..mechanisms.psfo import choose_oracle
from .ldpminer import MAX_CANDIDATES

DEFAULT_PHASE1_SHARE = 0.5
"""Share of the devices in phase 1 (SVIM §6.1 splits the users evenly between finding and
estimating candidates)."""
DEFAULT_K_MAX_FACTOR = 2
PPM = 1000000
SEPARATION_Z = 1.0
"""Phase 1 separates the head when the ceil(k/2)-th score exceeds the (k_max+1)-th by more than
this many standard deviations of their difference (docs/design/svim.md, tools/twophase_auto.py)."""


SIZE_SHARE = 0.2
"""Share of the phase-2 devices in the candidate branch's size group (SVIM §5.2; simulated in
eval/svim_sim.py, and protocols.auto predicts svim's error with it)."""
FLAT_SIZE_SHARE = 0.05
"""Share of the phase-2 devices in the flat branch's size group (one bit each; as SIZE_SHARE)."""
def phase2_length(l: int, k_max: int) -> int:
    return min(int(l), int(k_max))


def phase1_rate_ppm(share: float) -> int:
    ppm = int(round(float(share) * PPM))
    if not 0 < ppm < PPM:
        raise ConfigError("phase1_share", "must be in (0, 1), got %r" % (share,))
    return ppm


def campaign_phases(eps_milli: int, domain_size: int, l: int, k_max: int,
                    phase1_share: float = DEFAULT_PHASE1_SHARE, l2: int = None) -> list:
    """A campaign config's phases: phase 1 PSFO over the domain at l = 1 on the devices below the
    public split, phase 2 PSFO over the k_max candidates at l2 = min(l, k_max) on the others;
    both at the full eps (each device reports in one phase only). Phase 2 carries the flat
    branch's `fallback` (spec §5.4, `fallback_phase`), used if the phase-2 message says so."""
    if not 1 <= int(k_max) <= min(int(domain_size), MAX_CANDIDATES):
        raise ConfigError("k_max", "must be in [1, %d], got %r"
                          % (min(int(domain_size), MAX_CANDIDATES), k_max))
    ppm = phase1_rate_ppm(phase1_share)
    return [{"phase": 1, "mechanism": choose_oracle(eps_milli, int(domain_size)),
             "eps_milli": int(eps_milli), "sample_rate_ppm": ppm, "params": {"l": 1}},
            {"phase": 2, "mechanism": choose_oracle(eps_milli, int(k_max)),
             "eps_milli": int(eps_milli), "sample_rate_ppm": ppm,
             "params": {"l": phase2_length(l, k_max) if l2 is None else int(l2)},
             "fallback": fallback_phase(eps_milli, domain_size, l)}]


def single_phase(eps_milli: int, domain_size: int, l: int) -> list:
    """One-phase PSFO over the whole domain at length l (Wang et al. §4's PSFO on its own)."""
    return [{"phase": 1, "mechanism": choose_oracle(eps_milli, int(domain_size)),
             "eps_milli": int(eps_milli), "params": {"l": int(l)}}]


def phase1_scale(f1_cand, f2_cand) -> float:
    """Phase-1 scores (sum of 1/|set| over holders, l1 = 1) to frequencies: the ratio of the
    candidates' phase-2 estimates to their phase-1 scores (least squares through the origin
    would weight the head more; the ratio of sums is the same for a common mean set size), at
    least 1 (a holder's set has at least one item). Used for the items phase 2 did not measure."""
    f1 = float(np.sum(np.clip(f1_cand, 0.0, None)))
    f2 = float(np.sum(np.clip(f2_cand, 0.0, None)))
    return max(f2 / f1, 1.0) if f1 > 0 else 1.0


def combined(f1_cand, f2_cand, var1, var2, scale: float) -> np.ndarray:
    """Inverse-variance mean of a candidate's phase-2 estimate and its scaled phase-1 score."""
    a, b = 1.0 / (scale * scale * np.asarray(var1)), 1.0 / np.asarray(var2)
    return (a * scale * np.asarray(f1_cand) + b * np.asarray(f2_cand)) / (a + b)


def fallback_phase(eps_milli: int, domain_size: int, l: int) -> dict:
    """The flat branch's phase 2: the listless padding-and-sampling oracle over the integer
    domain at the full length l, at the same eps (spec §5.4 `fallback`), every parameter
    spelled out as the config writes it (psolh's g)."""
    from ..mechanisms import make_mechanism
    name = choose_oracle(eps_milli, int(domain_size))
    mech = make_mechanism(name, int(eps_milli), int(domain_size), salt=0, campaign_id=0, phase=2,
                          l=int(l))
    return {"mechanism": name, "params": mech.config_params()}


def separation(scores, variances, k: int, k_max: int, z: float = SEPARATION_Z) -> dict:
    """The separability test at the end of phase 1 (docs/design/svim.md): the ceil(k/2)-th
    score against the (k_max+1)-th, {"separable", "z", "gap", "sd"}. `scores`, `variances`:
    phase-1 estimates of every domain item and their exact variances. A candidate list that
    holds the whole domain is always separable."""
    scores = np.asarray(scores, np.float64)
    if int(k_max) >= scores.size:
        return {"separable": True, "z": float("inf"), "gap": None, "sd": None}
    order = np.argsort(-scores, kind="stable")
    a, b = order[(int(k) + 1) // 2 - 1], order[int(k_max)]
    var = np.asarray(variances, np.float64)
    gap, sd = float(scores[a] - scores[b]), float(np.sqrt(var[a] + var[b]))
    stat = gap / sd if sd > 0 else float("inf")
    return {"separable": bool(stat > z), "z": stat, "gap": gap, "sd": sd}


def ratio_of_sums(s1, var1, f2, var2, l: int):
    """(r^, Var r^): the scale of phase-1 scores to frequencies, sum f^2 / sum s^1 over the
    domain, clipped to [1, l]; delta-method variance (docs/design/svim.md, "Adaptive phase 2")."""
    a, b = float(np.sum(f2)), float(np.sum(s1))
    if b <= 0:
        return float(l), float(l) ** 2
    r = min(max(a / b, 1.0), float(l))
    return r, (float(np.sum(var2)) + r * r * float(np.sum(var1))) / (b * b)


def pooled(s1, var1, f2, var2, ratio, s_plug=None) -> tuple:
    """(f^, Var f^): inverse-variance mean of r^ s^1 (variance r^2 Var s^1 + s^2 Var r^) and
    f^2 per item. `ratio`: (r^, Var r^) from `ratio_of_sums` or the simulation's size group;
    `s_plug`: the score at which s^2 Var r^ is taken (default s^1; pass a value common to both phases,
    like the variances, so the weights do not follow one phase's noise)."""
    r, var_r = ratio
    s1, f2 = np.asarray(s1, np.float64), np.asarray(f2, np.float64)
    sp = s1 if s_plug is None else np.asarray(s_plug, np.float64)
    v1 = r * r * np.asarray(var1, np.float64) + sp * sp * var_r
    w1, w2 = 1.0 / v1, 1.0 / np.asarray(var2, np.float64)
    return (w1 * r * s1 + w2 * f2) / (w1 + w2), 1.0 / (w1 + w2)


def phase1_scores(sketch1, keys) -> tuple:
    """(scores, exact variances) of phase 1 over `keys` (the domain): the frequencies of the
    l1 = 1 sketch and `item_variances` at each score clipped to [0, 1] (what `separation`
    takes)."""
    f1 = np.asarray(sketch1.estimate(keys), np.float64) / max(sketch1.n, 1)
    return f1, sketch1.mechanism.item_variances(max(sketch1.n, 1), np.clip(f1, 0.0, 1.0))


def separation_doc(sep: dict) -> dict:
    """`separation`'s diagnostics as JSON (an infinite z as None)."""
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in sep.items()}


def flat_estimates(sketch1, sketch2, keys, l: int, ratio=None) -> tuple:
    """The flat branch's answer over `keys` (the whole integer domain): phase 1's scores scaled
    by `ratio_of_sums` (or the given `ratio`: the simulation's size group) and pooled with
    phase 2's listless estimates (`pooled`, weights at one plug-in frequency common to both
    phases): (f^, Var f^, (r^, Var r^)). Simulation and campaigns share it."""
    mech1, mech2 = sketch1.mechanism, sketch2.mechanism
    n1, n2 = max(sketch1.n, 1), max(sketch2.n, 1)
    f1 = np.asarray(sketch1.estimate(keys), np.float64) / n1
    f2 = np.asarray(sketch2.estimate(keys), np.float64) / n2
    if ratio is None:
        ratio = ratio_of_sums(f1, mech1.item_variances(n1, np.clip(f1, 0, 1)),
                              f2, mech2.item_variances(n2, np.clip(f2, 0, 1)), l)
    f_plug = np.clip(0.5 * (ratio[0] * f1 + f2), 0.0, 1.0)
    s_plug = f_plug / ratio[0]
    f, var = pooled(f1, mech1.item_variances(n1, s_plug), f2, mech2.item_variances(n2, f_plug),
                    ratio, s_plug)
    return f, var, ratio
