"""Which rows of a list of estimates stand out of the noise of everything that was estimated.

Picking the top k of d noisy estimates is a selection: among d items nobody holds, the largest
noise wins, and a 95 % interval per item says nothing about the list. So every list (one
phase's estimates, a two-phase protocol's answer) is tested as a family:

- for each tested item i, H0: count_i = 0, against count_i > 0. The statistic is
  z_i = f^_i / s_i, with s_i the exact standard deviation of an item *at frequency 0*
  (`mech.item_variances` at 0: the noise of an item nobody holds, Wang et al. 2017 §3 /
  [NH] Eq. 7; for the sketches it includes the collisions with the other items, taken at
  their estimates, `null_stddevs`) and the one-sided p-value p_i = P(Z > z_i) (normal
  approximation: an estimate is a sum over n independent reports);
- the family is every item the estimate covers: the whole domain and ⊥ ("other") for
  single-item mechanisms (d + 1), the k_max candidates of a two-phase answer, or exactly the
  items a query names (`--items`: chosen before looking, so no selection);
- the rows that stand out are the discoveries of the Benjamini-Hochberg step-up procedure at
  false-discovery rate q (default 5 %): the largest r with p_(r) <= q r / m, all p <= q r / m.
  It controls E[V / max(R, 1)] <= q m0 / m <= q, V the listed items nobody holds, when the
  estimates of the items nobody holds are independent (or positively dependent, PRDS:
  Benjamini & Yekutieli 2001, Thm 1.2). Where that is not shown, the Benjamini-Yekutieli
  procedure (the same with q / (1 + 1/2 + ... + 1/m)) controls the rate under any dependence
  (ibid., Thm 1.3).

The dependence, per mechanism (`Mechanism.estimate_dependence`), given the fleet's data (the
true items are fixed, the randomness is the devices' perturbation):
- OUE: every bit of every report is flipped independently, so the support counts of two
  items are sums of independent bits: independent estimates (BH).
- OLH: a report supports i iff H_s(i) = y, with a fresh seed s per report. For a device
  holding v not in {i, j}: P(H(i) = H(j) = y) = 1/g^2 = P(supports i) P(supports j); for one
  holding i: P(y = H(i) = H(j)) = p/g = P(supports i) P(supports j). So the counts are
  uncorrelated report by report, and jointly normal over n reports: independent (BH), as far
  as the hash behaves as a random function of the seed (tests/unit/test_significance.py measures
  the correlation of the items nobody holds).
- GRR: a report names exactly one item, so two items' counts are negatively correlated
  (rho = -q/(1 - q) between items nobody holds, -0.047 at d = 16, eps 2); FLH reuses a fixed
  set of hash functions, the sketches (CMS, HCMS, LDPLCM) share cells, the set mechanisms
  sample one item of a set: dependence of either sign (BY).

What the literature reports: Bassily & Smith ("Local, private, efficient protocols for
succinct histograms", STOC 2015, the succinct histogram and its lower bound) list only the
items whose estimate exceeds a threshold eta ~ sqrt(log(d / beta) / (eps^2 n)) chosen so that,
with probability 1 - beta, no estimate of the d items is off by more than eta / 2 (a union
bound: a family-wise guarantee). Wang et al. ("Locally differentially private protocols for
frequency estimation", USENIX Security 2017; [NH] §3.1) use the Bonferroni threshold
Phi^-1(1 - alpha / d) sigma with alpha = 5 %, and [NH] (Eq. 9, Base-Cut) relaxes it to alpha = 2
expected false items per list. LDPMiner (Qin et al., CCS 2016) reports the top k of its
candidates with no test. BH keeps the 5 % level of the first two while its threshold falls as
more items stand out: one item needs Phi^-1(1 - q / m) (Bonferroni's), the r-th
Phi^-1(1 - q r / m).
"""
import math
from dataclasses import dataclass

import numpy as np

from ...core.errors import ConfigError
from .display import shown

DEFAULT_FDR = 0.05
"""The false-discovery rate of a list unless the query names another (`--fdr`)."""

PROCEDURES = {"independent": "benjamini-hochberg", "any": "benjamini-yekutieli"}
"""The procedure for a mechanism's `estimate_dependence` (module docstring)."""


FDR_MIN = 1e-12
"""The smallest false-discovery rate taken: below it level / m (m up to 2^32 items) comes near
float underflow and the z cutoff is infinite, which no count of reports reaches."""


def check_level(level) -> float:
    """A false-discovery rate in [FDR_MIN, 1); ConfigError naming `fdr`."""
    try:
        value = float(level)
    except (TypeError, ValueError):
        value = float("nan")
    if not FDR_MIN <= value < 1:
        raise ConfigError("fdr", "a false-discovery rate in (0, 1) and at least %g, e.g. 0.05, "
                          "got %r" % (FDR_MIN, level))
    return value


@dataclass
class Significance:
    """How a list was tested (module docstring): the procedure, its level, the items tested,
    how many stand out, and the z above which an item stands out in this list (with none
    standing out: the z one item would need)."""

    procedure: str
    level: float
    tested: int
    discoveries: int
    z_cutoff: float
    dependence: str

    def to_json(self) -> dict:
        return {"procedure": self.procedure, "fdr": self.level, "tested": self.tested,
                "discoveries": self.discoveries,
                "z_cutoff": self.z_cutoff if math.isfinite(self.z_cutoff) else None,
                "dependence": self.dependence}

    def describe(self) -> str:
        """e.g. "Benjamini-Hochberg at a 5 % false-discovery rate over 1025 items"."""
        return "%s at a %g %% false-discovery rate over %d items" % (
            "-".join(w.capitalize() for w in self.procedure.split("-")), 100 * self.level,
            self.tested)


def null_stddevs(mech, n: int, freqs, **kw) -> np.ndarray:
    """The standard deviation (fraction of n) of an item nobody holds, for each of the items
    whose estimates are `freqs`: `mech.item_variances(n, .)` at frequency 0 for an extra item
    beside the estimated ones clipped to [0, 1] (the sketches' and SH's variances grow with the
    other items' frequencies: collisions; a plug-in from noisy estimates over-states them, so
    the test errs on the side of fewer rows standing out). `mech.variance(n)` where the
    mechanism has no per-item form. `kw`: LDPLCM's `high` mask (and `theta_known`)."""
    f = np.clip(np.asarray(freqs, np.float64).ravel(), 0.0, 1.0)
    extra = dict(kw)
    if extra.get("high") is not None:
        extra["high"] = np.append(np.asarray(extra["high"], bool).ravel(), False)
    try:
        var = np.asarray(mech.item_variances(max(int(n), 1), np.append(f, 0.0), **extra),
                         np.float64)
        if var.shape != (f.size + 1,):
            raise ValueError("per-item variances of another shape")
        null = float(var[-1])
    except (TypeError, ValueError, NotImplementedError):
        null = float(mech.variance(max(int(n), 1)))
    return np.full(f.size, math.sqrt(max(null, 0.0)))


def p_values(freq, null_sd) -> np.ndarray:
    """One-sided p-values of H0: count = 0 (NaN where the standard deviation is unknown)."""
    from scipy import stats
    f = np.asarray(freq, np.float64)
    sd = np.asarray(null_sd, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, f / sd, np.where(f > 0, np.inf, -np.inf))
    p = stats.norm.sf(z)
    return np.where(np.isfinite(sd), p, np.nan)


def discoveries(freq, null_sd, level: float = DEFAULT_FDR, dependence: str = "any"):
    """(noise mask, Significance): which of the estimates `freq` (fractions) do NOT stand out
    at false-discovery rate `level`, given each one's standard deviation at frequency 0.
    Items with an unknown (NaN) deviation are left out of the family and marked noise."""
    from scipy import stats
    level = check_level(level)
    procedure = PROCEDURES["independent" if dependence == "independent" else "any"]
    p = p_values(freq, null_sd)
    tested = np.flatnonzero(np.isfinite(p))
    m = int(tested.size)
    noise = np.ones(p.shape, bool)
    if m == 0:
        return noise, Significance(procedure, level, 0, 0, float("inf"), dependence)
    scale = level / m
    if procedure == "benjamini-yekutieli":
        scale /= float(np.sum(1.0 / np.arange(1, m + 1)))
    ordered = np.sort(p[tested])
    passed = np.flatnonzero(ordered <= scale * np.arange(1, m + 1))
    found = int(passed[-1]) + 1 if passed.size else 0
    if found:
        noise[tested[p[tested] <= scale * found]] = False
    z_cutoff = float(stats.norm.isf(scale * max(found, 1)))
    return noise, Significance(procedure, level, m, found, z_cutoff, dependence)


def noise_rows_warning(rows: list, sig: Significance) -> str:
    """The warning of a ranked list whose `rows` ({rank, item, noise}) include rows that do
    not stand out, or None."""
    flagged = [r for r in rows if r.get("noise")]
    if not flagged or sig.discoveries == 0:
        return None
    listed = ", ".join("%d (item %s)" % (r["rank"], shown(r["item"])) for r in flagged[:8])
    more = " and %d more" % (len(flagged) - 8) if len(flagged) > 8 else ""
    one = len(flagged) == 1
    return ("%s %s%s %s not stand out of the noise (%s; %d stand out): an estimate that large "
            "is what noise alone gives some of the items nobody holds. Treat %s as unknown, "
            "not as %s; `noise` marks %s." % (
                "rank" if one else "ranks", listed, more, "does" if one else "do",
                sig.describe(), sig.discoveries, "it" if one else "them",
                "a finding" if one else "findings", "it" if one else "them"))


def reports_needed(floor_sd: float, n: int, z: float, frequency: float) -> int:
    """Reports at which an item of `frequency` reaches z standard deviations (the deviation
    shrinks as 1/sqrt(n))."""
    return int(math.ceil(n * (z * floor_sd / frequency) ** 2))


def nothing_stands_out(largest: float, floor_sd: float, n: int, sig: Significance) -> str:
    """The warning when no estimate stands out at all, with the fleet sizes at which an item
    held by 5 % and by 1 % of the devices would (one item standing out needs z_cutoff)."""
    z = sig.z_cutoff
    return ("no estimate stands out of the noise (largest %.4g; one item needs about %.4g to "
            "stand out, %s; sigma %.4g as fractions of the %d reports): these numbers are "
            "mostly noise. At this epsilon about %d reports resolve an item held by 5 %% of the "
            "devices, %d one held by 1 %% (or raise epsilon, or pick a mechanism with less "
            "variance: `ldpfleet plan`)."
            % (largest, z * floor_sd, sig.describe(), floor_sd, n,
               reports_needed(floor_sd, n, z, 0.05), reports_needed(floor_sd, n, z, 0.01)))
