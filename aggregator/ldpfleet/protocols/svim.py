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

Not kept: SVIM's third user group, which estimates the trimmed-set length to pick a smaller l2
and corrects the truncation bias (§5.2 "size estimation"); l2 here is min(l, k_max), public
before the campaign starts. Phase-1 scores are not combined with phase 2: at l1 = 1 they
estimate sum 1/|set|, not the frequency.
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


def phase2_length(l: int, k_max: int) -> int:
    return min(int(l), int(k_max))


def phase1_rate_ppm(share: float) -> int:
    ppm = int(round(float(share) * PPM))
    if not 0 < ppm < PPM:
        raise ConfigError("phase1_share", "must be in (0, 1), got %r" % (share,))
    return ppm


def campaign_phases(eps_milli: int, domain_size: int, l: int, k_max: int,
                    phase1_share: float = DEFAULT_PHASE1_SHARE) -> list:
    """A campaign config's phases: phase 1 PSFO over the domain at l = 1 on the devices below the
    public split, phase 2 PSFO over the k_max candidates at l2 = min(l, k_max) on the others;
    both at the full eps (each device reports in one phase only)."""
    if not 1 <= int(k_max) <= min(int(domain_size), MAX_CANDIDATES):
        raise ConfigError("k_max", "must be in [1, %d], got %r"
                          % (min(int(domain_size), MAX_CANDIDATES), k_max))
    ppm = phase1_rate_ppm(phase1_share)
    return [{"phase": 1, "mechanism": choose_oracle(eps_milli, int(domain_size)),
             "eps_milli": int(eps_milli), "sample_rate_ppm": ppm, "params": {"l": 1}},
            {"phase": 2, "mechanism": choose_oracle(eps_milli, int(k_max)),
             "eps_milli": int(eps_milli), "sample_rate_ppm": ppm,
             "params": {"l": phase2_length(l, k_max)}}]


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
