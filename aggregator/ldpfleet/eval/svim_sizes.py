"""SVIM's size estimation, in simulation only (svim_sim): Wang, Li, Jha, "Locally
Differentially Private Frequent Itemset Mining", IEEE S&P 2018, §5.2. A campaign's phase-2
length is public before phase 2 starts, so campaigns do not run it (docs/design/svim.md,
"Size estimation"). The shares of the size groups (`SIZE_SHARE`, `FLAT_SIZE_SHARE`) stay in
core.protocols.svim: protocols.auto predicts svim's error with them."""
import numpy as np

from ..core.protocols.svim import FLAT_SIZE_SHARE, SIZE_SHARE  # noqa: F401 (the group shares)

SIZE_QUANTILE = 0.9
"""SVIM §5.2 takes the 90th percentile of the sizes as phase 2's length."""


def size_oracle(eps_milli: int, cap: int) -> str:
    """GRR or OLH over the sizes 0..cap (the rule of `choose_oracle`, no dummy)."""
    return "grr" if cap + 1 < 3 * np.exp(eps_milli / 1000.0) + 2 else "olh"


def choose_l2(size_freqs, cap: int, q: float = SIZE_QUANTILE) -> int:
    """Phase 2's length from the estimated distribution x_0..x_cap of the trimmed sizes
    (docs/design/svim.md): the q-quantile of the non-empty sizes, the smallest L in [1, cap] with
    x_1 + ... + x_L >= q (x_1 + ... + x_cap). Sums of the unclipped estimates over the first
    cells, so the noise of the rare long sizes barely moves it."""
    x = np.asarray(size_freqs, np.float64)
    cum = np.cumsum(x[1:int(cap) + 1])
    if cum.size == 0 or cum[-1] <= 0:
        return 1
    # the first L reaching the quantile (noisy cells can be negative: cum need not be sorted)
    return int(min(int(np.argmax(cum >= q * cum[-1])) + 1, cap))


def size_estimation_pays(s1_cand, l: int, cap: int) -> bool:
    """Whether to spend SIZE_SHARE of the phase-2 devices on size estimation
    (docs/design/svim.md), from phase 1 (post-processing): E[m] <= about l * sum of the candidates'
    phase-1 scores (each score sums 1/|set| over holders; sets are mostly at most l long), and
    the 90th percentile of m is taken to be at most 2 E[m] + 1; the group pays when that is at
    most half of cap = min(l, k_max) (phase-2 variance ~ l2^2: a quarter or less, against 1 /
    (1 - SIZE_SHARE) for the devices it takes). Zipf(1) sets of mean 30 (m ~ 9 of 10
    candidates) skip it, headlines (m ~ 0.5) take it."""
    mean_m = float(l) * float(np.sum(np.clip(np.asarray(s1_cand, np.float64), 0.0, None)))
    return 2.0 * mean_m + 1.0 <= 0.5 * float(cap)


def size_bits_ratio(fill, held, l: int) -> tuple:
    """(r^, Var r^) of the flat branch from its size group (svim_sim): r = E[min(|set|, l)] /
    P(set non-empty) = l * E[fill bit] / E[held bit], each mean (estimate, variance) from one
    half of the group (docs/design/svim.md), clipped to [1, l]; delta method, the halves are
    disjoint devices."""
    (a, var_a), (b, var_b) = fill, held
    if a <= 0 or b <= 0:
        return float(l), float(l) ** 2
    r = min(max(float(l) * a / b, 1.0), float(l))
    return r, r * r * (var_a / (a * a) + var_b / (b * b))
