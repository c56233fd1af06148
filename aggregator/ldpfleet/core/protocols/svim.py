"""SVIM-style two-phase heavy hitters over set-valued data with padding-and-sampling oracles.

Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining" (IEEE S&P 2018) §5
(SVIM) improves on LDPMiner (Qin et al., CCS 2016) in three ways, all kept here:

* users, not the budget, are split between the phases (a public split of the device ids,
  spec §5 `sample_rate_ppm`): every device reports once, at the full eps. For the oracles used
  here the variance at eps/2 over all n users is (e^(eps/4) + e^(-eps/4))^2 >= 4 times the
  variance at eps over n users, while halving the users only doubles it;
* phase 1 finds candidates with the padding-and-sampling oracle (`mechanisms.psfo`, GRR or OLH
  by domain size) at l1 = 1: each device reports one of its own items, so the noise is not
  scaled by l; the phase-1 score is sum over users of 1{v in set}/|set|, which ranks the head
  of real data like the frequencies do (§5.1: "it suffices to identify the candidates");
* phase 2 estimates the 2k candidates with the same kind of oracle over the candidate list
  (LDPMiner §4.4's trimming), padded to l2 = min(l, 2k) (no truncation for sets of at most l
  items, hence unbiased); the answer is the top k by phase-2 estimate.

Size estimation (§5.2), in simulation only (svim_sim; a campaign's phase-2 length is public
before it starts, min(l, k_max), until the phase-2 message can carry l2): after phase 1, when
`size_estimation_pays` (short trimmed sets expected from the phase-1 scores), a share
SIZE_SHARE of the phase-2 devices report the size m = |set & candidates| (capped at
min(l, k_max)) through GRR/OLH at eps (`size_oracle`), and the others run phase 2 at
l2 = `choose_l2` of the estimated size distribution: the 90th percentile of the non-empty
trimmed sizes (SVIM takes the 90th percentile of the sizes; with the empty sets counted it would
be 1 on short sets, where 1/3 of a head item's holders hold two candidates). PSFO samples L of a
longer set, so the items of longer sets are under-counted by L/m: measured on the real dataset
(true top-2k candidates) 3-6% of their occurrences. §5.2's correction by the estimated share
E[m] / E[min(m, L)] is not applied: the size group's long-size cells are noisy and weighted by m,
which made it about as noisy as the bias it removes (+9% at eps 2 with clipped cells).
On short real sets (headlines:
m is 0-2 for the top 2k words) L is 2 instead of min(l, k_max) = 9, which cuts the phase-2
variance, ~L^2, twentyfold.

Adaptive phase 2 (issue 16). On flat data (no clear head: the seed's normal/Laplace settings)
phase 1 cannot separate the top k from the rest, the k_max candidates miss most of the true
top k, and those items keep only a phase-1 estimate from half of the devices. So at the end of
phase 1 the collector tests separability (`separation`, a pure function of the phase-1
estimates and the mechanisms' exact variance formulas evaluated at those estimates, hence
post-processing at no privacy cost; a heuristic threshold, not a calibrated test: the selected
order statistics are treated as fixed items, which biases the gap upward):

    z = (s^_(j) - s^_(k_max+1)) / sqrt(Var s^_(j) + Var s^_(k_max+1)) > SEPARATION_Z,
    j = ceil(k / 2),

s^_(i) the i-th largest phase-1 score. Why the ceil(k/2)-th: the RE of issue 16 is the median
over the true top k, and the candidate branch gives a captured item the phase-2 precision
(variance ~ l2^2 over the k_max candidates instead of l^2 over the domain) but leaves a missed
one with the phase-1 estimate of half of the devices (twice the variance of the flat branch
below); so it is the better branch when at least half of the true top k are captured, i.e. when
the upper half of the phase-1 top k stands clear of the first item left off the list. On flat
data the statistic is an order-statistic spacing of the noise among near-tied items: for D tied
items about (Phi^-1(1 - j/D) - Phi^-1(1 - (k_max+1)/D)) / sqrt(2), below 0.8 for D = 100 and
k <= 20 (measured 0.26-0.77 on the seed's normal data at n = 10^6, eps 1-4); SEPARATION_Z = 1
asks for a spacing beyond what ties produce. If the test fails ("flat" branch), phase 2 runs the
padding-and-sampling oracle listless over the whole integer domain at the full l
(`fallback_phase`: PSGRR or PSOLH by domain size), and every item's final estimate pools both
phases by inverse variance (`ratio_of_sums`, `pooled`): phase 1 (l1 = 1) estimates
s(v) = sum over holders of 1/|set| / n, phase 2 estimates f(v) (padded/sampled to l), and the
phase-1 score is scaled to a frequency by r^ = sum_v f^2(v) / sum_v s^1(v) over the domain.
That ratio is E[min(|set|, l)] / P(set non-empty), which is exactly each item's f(v) / s(v)
when an item's presence in a set of size m is proportional to m (items drawn independently of
the set size), truncation at l included; for fixed-size sets of l items it is l. Its variance
(delta method, the two phases are disjoint device groups) enters the pooled weights. For
fixed-size sets the per-device variance of l * s^1 at l1 = 1 is the one of PSFO at length l,
so the pooled estimate has the variance of one-phase PSFO over all n devices.

The flat branch's size group (svim_sim only): the domain-wide ratio of sums carries the noise
of every item (sd ~2 on r ~ 6.7 on the real dataset at eps 1), so in simulation a public share
FLAT_SIZE_SHARE of the phase-2 devices report one bit each instead of an item, through binary
randomized response at eps (GRR over {0, 1}), split by a public draw into two halves: a "fill"
bit, 1 with probability min(|set|, l) / l (stochastic rounding: its mean is E[min(|set|, l)] /
l), and a "held" bit, |set| > 0. r^ = l * fill / held (`size_bits_ratio`). A bit's mean has
variance ~ (e^eps / (e^eps - 1)^2 + x (1 - x)) / n over a half of n devices (x the bit's mean;
x (1 - x) is 0 when every set holds l or more items), so 2.5% of the devices give r to ~1-1.5% at eps 1 on 10^6,
where the first version's histogram of min(|set|, l) through OLH (SVIM §5.2's size report,
r's numerator weighting cell m by m) needed 10% of the devices for ~2.5% and cost flat data
4% in sd (measured on the seed's normal setting at eps 4 over the top 200 items: 0.0913 vs
one-phase PSFO's 0.0878).
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
"""Phase 1 separates the head when the ceil(k/2)-th score exceeds the (k_max+1)-th by more than this
many standard deviations of their difference (module docstring; measured in
tools/twophase_auto.py)."""


SIZE_SHARE = 0.2
"""Share of the phase-2 devices in the candidate branch's size group (svim_sim; SVIM §5.2)."""
FLAT_SIZE_SHARE = 0.05
"""Share of the phase-2 devices in the flat branch's size group (svim_sim): one bit each
(module docstring), so r is known to about 1% at eps 1 with 2.5% of the devices."""
SIZE_QUANTILE = 0.9


def size_oracle(eps_milli: int, cap: int) -> str:
    """GRR or OLH over the sizes 0..cap (the rule of `choose_oracle`, no dummy)."""
    return "grr" if cap + 1 < 3 * np.exp(eps_milli / 1000.0) + 2 else "olh"


def choose_l2(size_freqs, cap: int, q: float = SIZE_QUANTILE) -> int:
    """Phase 2's length from the estimated distribution x_0..x_cap of the trimmed sizes (module
    docstring): the q-quantile of the non-empty sizes, the smallest L in [1, cap] with
    x_1 + ... + x_L >= q (x_1 + ... + x_cap). Sums of the unclipped estimates over the first
    cells, so the noise of the rare long sizes barely moves it."""
    x = np.asarray(size_freqs, np.float64)
    cum = np.cumsum(x[1:int(cap) + 1])
    if cum.size == 0 or cum[-1] <= 0:
        return 1
    # the first L reaching the quantile (noisy cells can be negative: cum need not be sorted)
    return int(min(int(np.argmax(cum >= q * cum[-1])) + 1, cap))


def size_estimation_pays(s1_cand, l: int, cap: int) -> bool:
    """Whether to spend SIZE_SHARE of the phase-2 devices on size estimation (module
    docstring), from phase 1 (post-processing): E[m] <= about l * sum of the candidates'
    phase-1 scores (each score sums 1/|set| over holders; sets are mostly at most l long), and
    the 90th percentile of m is taken to be at most 2 E[m] + 1; the group pays when that is at
    most half of cap = min(l, k_max) (phase-2 variance ~ l2^2: a quarter or less, against 1 /
    (1 - SIZE_SHARE) for the devices it takes). Zipf(1) sets of mean 30 (m ~ 9 of 10
    candidates) skip it, headlines (m ~ 0.5) take it."""
    mean_m = float(l) * float(np.sum(np.clip(np.asarray(s1_cand, np.float64), 0.0, None)))
    return 2.0 * mean_m + 1.0 <= 0.5 * float(cap)


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
    """The separability test at the end of phase 1 (module docstring: the ceil(k/2)-th score
    against the (k_max+1)-th): {"separable", "z", "gap", "sd"}. `scores`, `variances`: phase-1 estimates of every domain item and their
    exact variances. A candidate list that holds the whole domain is always separable."""
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
    domain, clipped to [1, l] (a holder's set has at least one item; phase 2 counts at most l
    per set). Delta-method variance of a ratio of independent sums, each sum's variance the sum
    of the items' (exact for PSOLH in the random-hash model; an upper bound for PSGRR, whose
    item counts are negatively correlated)."""
    a, b = float(np.sum(f2)), float(np.sum(s1))
    if b <= 0:
        return float(l), float(l) ** 2
    r = min(max(a / b, 1.0), float(l))
    return r, (float(np.sum(var2)) + r * r * float(np.sum(var1))) / (b * b)


def pooled(s1, var1, f2, var2, ratio, s_plug=None) -> tuple:
    """(f^, Var f^): inverse-variance mean of r^ s^1 (variance r^2 Var s^1 + s^2 Var r^) and
    f^2 per item. `ratio`: (r^, Var r^) from `ratio_of_sums` or `size_bits_ratio`; `s_plug`:
    the score at which s^2 Var r^ is taken (default s^1; pass a value common to both phases,
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


def size_bits_ratio(fill, held, l: int) -> tuple:
    """(r^, Var r^) of the flat branch from its size group (svim_sim): r = E[min(|set|, l)] /
    P(set non-empty) = l * E[fill bit] / E[held bit], each mean (estimate, variance) from one
    half of the group (module docstring), clipped to [1, l]; delta method, the halves are
    disjoint devices."""
    (a, var_a), (b, var_b) = fill, held
    if a <= 0 or b <= 0:
        return float(l), float(l) ** 2
    r = min(max(float(l) * a / b, 1.0), float(l))
    return r, r * r * (var_a / (a * a) + var_b / (b * b))


def flat_estimates(sketch1, sketch2, keys, l: int, ratio=None) -> tuple:
    """The flat branch's answer over `keys` (the whole integer domain): phase 1's scores scaled
    by `ratio_of_sums` and pooled with phase 2's listless estimates (`pooled`): (f^, Var f^,
    (r^, Var r^)). The ratio from variances at each phase's own estimate (its sums are over the
    whole domain) unless `ratio` is given (svim_sim: `size_bits_ratio` of its size group), the
    pooled weights from variances at one plug-in frequency common to both phases. Simulation
    (svim_sim) and campaigns (`estimate`) share it."""
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
