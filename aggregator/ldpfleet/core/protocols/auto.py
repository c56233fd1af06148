"""`--protocol auto` and `ldpfleet plan --top K --set-size L`: choose a heavy-hitter protocol
for set-valued data from (n, eps, d, l, k) with the mechanisms' exact variance formulas.

The predicted error of a protocol is the standard deviation of its final frequency estimate of
a top-k item (a fraction of the devices; taken at f = 0, the usual small-f approximation, each
mechanism's `item_variances` with its realised integer thresholds):

* rp (sampling RAPPOR, one phase): srappor over the domain, length l, all n devices, eps;
* sh (sampling SH, one phase): sh (m = 65536 rows) over the domain, length l, n, eps -- the
  one-phase protocol for any domain size (rp needs d <= 65536, psfo d <= 2^24);
* psfo (padding-and-sampling, one phase): PSGRR/PSOLH over the domain, length l, n, eps;
* lm-rp (LDPMiner-RAPPOR): phase 2 srappor over k_max = 2k candidates, l2 = min(l, k_max), n
  devices at eps2 = eps/2 (sequential composition);
* lm-sh (LDPMiner-SH): phase 2 sh over the candidates, l2, n, eps2;
* lm-sho (LDPMiner-SH with §4.4's correlated phases, `shc`, spec §3.1): phase 2 re-reports the
  phase-1 element untrimmed (length l) with the sign as accurate as one report at eps1 + eps2;
* svim (protocols.svim): the bound of the better of its two phase-2 branches (the separation
  test, not auto, picks the branch after phase 1; the row says what svim can reach):
  - candidates: PSGRR/PSOLH over the k_max candidates at l2 = min(l, k_max) (size estimation,
    svim_sim, only lowers l2) on the (1 - share)(1 - SIZE_SHARE) n devices of phase 2, eps;
  - flat: the inverse-variance pool (svim.pooled) of phase 1 scaled to frequencies by
    r = E[min(|set|, l)] / P(set non-empty) <= l (sd r * phase1_sd) and PSFO over the domain at
    length l on the (1 - share)(1 - FLAT_SIZE_SHARE) n devices left after the size group. At
    f = 0 PSFO's variance is l^2 times its l = 1 variance, so at r = l (the default:
    (n, eps, d, l, k) do not give r) the pool has 1 / (share + (1 - share)(1 -
    FLAT_SIZE_SHARE)) = 1.026 times the variance of one-phase PSFO over all n devices, and psfo
    is chosen; the simulation passes r of the same data its default l comes from
    (`ldpminer_sim.auto_choice`), and on sets shorter than l svim wins.

Two-phase rows also carry `phase1_sd`: the standard deviation of the score the candidates are
chosen by (LDPMiner: sampling SH at eps1 and length l; svim: PSFO at eps and length 1 on the
share n devices of phase 1, whose score is the sum of 1/|set|, at most the frequency) -- what the
recall depends on. The choice: `choose`.
"""
import math

from ..errors import ConfigError
from ..mechanisms import make_mechanism
from ..mechanisms.psfo import MAX_DOMAIN, choose_oracle
from . import ldpminer, svim

CHOICES = ("rp", "sh", "psfo", "lm-rp", "lm-sh", "lm-sho", "svim")
CLI_NAMES = {"rp": "sampling-rappor", "sh": "sampling-sh", "psfo": "psfo",
             "lm-rp": "ldpminer-rappor", "lm-sh": "ldpminer-sh", "lm-sho": "ldpminer-sh-opt",
             "svim": "svim"}
SINGLE_PHASE = ("rp", "sh", "psfo")
LDPMINER = ("lm-rp", "lm-sh", "lm-sho")


def _sd(name: str, eps_milli: int, d: int, l: int, n: float, **params) -> float:
    mech = make_mechanism(name, int(eps_milli), int(d), l=int(l), **params)
    return math.sqrt(float(mech.item_variances(1, [0.0])[0]) / n)


def predict(users: int, eps_milli: int, domain: int, set_size: int, top: int,
            k_max: int = None, size_step: bool = True, size_ratio: float = None,
            int_domain: bool = True) -> list:
    """One row per protocol: {"protocol", "cli_name", "feasible", "predicted_sd",
    "phase1_sd", "params"} (module docstring; `int_domain`: `choose`)."""
    n, d, l, k = int(users), int(domain), int(set_size), int(top)
    for name, value, low in (("users", n, 1), ("domain", d, 2), ("set_size", l, 1), ("top", k, 1)):
        if value < low:
            raise ConfigError(name, "must be >= %d, got %d" % (low, value))
    if k > d:
        raise ConfigError("top", "must be at most the domain size %d, got %d" % (d, k))
    kc = min(d, 2 * k, ldpminer.MAX_CANDIDATES) if k_max is None else int(k_max)
    if not k <= kc <= min(d, ldpminer.MAX_CANDIDATES):
        raise ConfigError("k_max", "need top <= k_max <= min(domain size, %d), got k=%d, "
                          "k_max=%d" % (ldpminer.MAX_CANDIDATES, k, kc))
    l2 = min(l, kc)
    share = svim.DEFAULT_PHASE1_SHARE
    eps1, eps2 = ldpminer.split_budget(int(eps_milli))
    rows = []

    def row(proto, fn, params):
        out = {"protocol": proto, "cli_name": CLI_NAMES[proto], "params": params,
               "feasible": True, "predicted_sd": None, "phase1_sd": None}
        try:
            out["predicted_sd"], out["phase1_sd"] = fn()
        except (ConfigError, ValueError) as exc:
            out.update(feasible=False, reason=str(exc))
        rows.append(out)

    row("rp", lambda: (_check_rp(d) or _sd("srappor", eps_milli, d, l, n), None), {"l": l})
    row("sh", lambda: (_sh_sd(eps_milli, d, l, n), None), {"l": l})
    row("psfo", lambda: (_sd(choose_oracle(eps_milli, d), eps_milli, _check_ps(d, int_domain),
                             l, n), None),
        {"l": l, "oracle": choose_oracle(eps_milli, d)})
    lm = {"k_max": kc, "l2": l2, "eps1_milli": eps1, "eps2_milli": eps2}
    row("lm-rp", lambda: (_sd("srappor", eps2, d, l2, n, candidates=list(range(kc))),
                          _sh_sd(eps1, d, l, n)), lm)
    row("lm-sh", lambda: (_sh_sd(eps2, d, l2, n), _sh_sd(eps1, d, l, n)), lm)
    row("lm-sho", lambda: (_sd("shc", eps2, d, l, n, m=ldpminer.DEFAULT_M, phase=2,
                               eps1_milli=eps1, candidates=list(range(kc))),
                           _sh_sd(eps1, d, l, n)), dict(lm, l2=l))
    row("svim", lambda: _svim_sd(eps_milli, _check_ps(d, int_domain), l, kc, n, share,
                                 size_step, size_ratio),
        {"k_max": kc, "l1": 1, "l2": l2, "phase1_share": share,
         "size_share": svim.SIZE_SHARE, "flat_size_share": svim.FLAT_SIZE_SHARE,
         "oracle1": choose_oracle(eps_milli, d),
         "oracle2": choose_oracle(eps_milli, kc)})
    return rows


def _svim_sd(eps_milli, d, l, kc, n, share, size_step: bool = True, ratio: float = None) -> tuple:
    """(predicted sd, phase-1 sd) of svim (module docstring): the smaller of the candidate
    branch's and the flat branch's bounds. Without the size step (`size_step` False: a real
    campaign, whose phase-2 length is fixed at creation and whose flat branch scales phase 1
    by svim.ratio_of_sums, noisy on long-tailed domains) only the candidate branch on all the
    phase-2 devices, as before the size step existed."""
    sd1 = _sd(choose_oracle(eps_milli, d), eps_milli, _check_ps(d), 1, share * n)
    n2 = (1 - share) * n
    cand = _sd(choose_oracle(eps_milli, kc), eps_milli, d, min(l, kc),
               (1 - svim.SIZE_SHARE) * n2 if size_step else n2, candidates=list(range(kc)))
    if not size_step:
        return cand, sd1
    r = float(l) if ratio is None else min(max(float(ratio), 1.0), float(l))
    flat2 = _sd(choose_oracle(eps_milli, d), eps_milli, d, l, (1 - svim.FLAT_SIZE_SHARE) * n2)
    flat = (1.0 / ((r * sd1) ** -2 + flat2 ** -2)) ** 0.5
    return min(cand, flat), sd1


def _check_rp(d):
    if d > ldpminer.MAX_CANDIDATES:
        raise ConfigError("domain", "one-phase sampling RAPPOR needs at most %d items (one bit "
                          "each)" % ldpminer.MAX_CANDIDATES)


def _check_ps(d, int_domain: bool = True):
    if not int_domain:
        raise ConfigError("domain.type", "PSFO without a candidate list runs over the integer "
                          "items 0..d-1, not a string domain")
    if d > MAX_DOMAIN:
        raise ConfigError("domain", "PSFO over the whole domain needs at most %d items" % MAX_DOMAIN)
    return d


def _sh_sd(eps_milli, d, l, n):
    mech = make_mechanism("sh", int(eps_milli), int(d), l=int(l), m=ldpminer.DEFAULT_M)
    return math.sqrt(float(mech.item_variances(1, [0.0])[0]) / n)


def choose(users: int, eps_milli: int, domain: int, set_size: int, top: int,
           k_max: int = None, allowed=CHOICES, size_step: bool = True,
           size_ratio: float = None, int_domain: bool = True) -> dict:
    """{"chosen_protocol": CLI name, "chosen": core name, "predicted_error", "params",
    "rows": predict(...)}:
    the allowed feasible protocol with the smallest predicted_sd, an LDPMiner one only when no
    other is allowed and feasible (a string domain or more than 2^24 items in a campaign). Its
    phase 1 (SH at eps1 < eps over length l, `phase1_sd`) ranks the domain with an estimate
    noisier than every one-phase protocol's final one at eps (SH's variance at eps/2 exceeds
    OLH's, RAPPOR's and SH's at eps), so the candidates miss the head that phase 2's small
    predicted_sd assumes: the losses `tools/reproduce_twophase.py auto` measures on real data.
    svim's phase-1 score is the frequency divided by the sizes of the sets that hold the item, which
    (n, eps, d, l, k) do not give, so its phase1_sd is reported but not used. `size_step`
    False: svim as a real campaign runs it today (`_svim_sd`), for `campaign create`;
    `size_ratio`: r of the flat branch (module docstring), l if not given; `int_domain` False:
    a string domain, where psfo and svim (listless PSFO over the items 0..d-1) cannot run."""
    rows = predict(users, eps_milli, domain, set_size, top, k_max, size_step, size_ratio,
                   int_domain)
    ok = {r["protocol"]: r for r in rows if r["feasible"] and r["protocol"] in allowed}
    if not ok:
        raise ConfigError("domain", "no protocol is feasible: " + "; ".join(
            "%s: %s" % (r["cli_name"], r["reason"]) for r in rows if r["protocol"] in allowed))
    preferred = {p: r for p, r in ok.items() if p not in LDPMINER}
    best = min((preferred or ok).values(), key=lambda r: r["predicted_sd"])
    return {"chosen_protocol": best["cli_name"], "chosen": best["protocol"],
            "predicted_error": best["predicted_sd"], "params": best["params"], "rows": rows}
