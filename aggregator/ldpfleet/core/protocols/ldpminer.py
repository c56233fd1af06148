"""LDPMiner: heavy hitters over set-valued data (Qin et al., CCS'16;
Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy" (CCS 2016)).

Protocols (the names of §5.1.3 "Competitors"):

* ``lm-rp`` LDPMiner-RAPPOR: phase 1 sampling SH (Alg. 2) with eps1 over the whole domain; the
  k_max items with the highest phase-1 estimates are the candidates (§4.1; k_max = 2k by
  default); phase 2 sampling RAPPOR with eps2 over the candidates (§4.4).
* ``lm-sh`` LDPMiner-SH: the same with sampling SH in phase 2.
* ``lm-sho`` LDPMiner-SH with §4.4's optimisation in the exactly private form of spec §3.1
  (mechanism ``shc`` in both phases, CLI ``ldpminer-sh-opt``): every device keeps its phase-1
  element, row t and bit x and re-reports them in phase 2, correlated with its phase-1 sign, so
  that both reports together are (eps1 + eps2)-LDP; it does NOT trim to the candidates (a
  non-candidate element is zero-mean noise for every candidate, like the dummy) and its phase-2
  length is l. The answer for the candidates is the phase-2 estimate, whose sign keeps x with
  probability p2, about that of one sign at eps1 + eps2.
* ``rp`` single-phase sampling RAPPOR with the whole eps over the whole domain (§4.2, Prop. 3).
* ``sh`` single-phase sampling SH with the whole eps (§4.2-4.3, Prop. 4).

Budget: eps1 + eps2 = eps exactly, in integer milli-nats (sequential composition, Thm 2.1 and
4.4), split by ``phase1_share`` (default 1/2, §5.1.2).

Sets (§3): a user holds s distinct item keys, the campaign fixes l, and the mechanisms pick one
of L = max(l, s) slots, slots >= s being the dummy (padding when s < l, uniform sampling when
s > l); estimates are scaled by l (Alg. 1 line 5).

Phase 2 (§4.4, proof of Thm 4.3): a device TRIMS its set to the candidates
(`trim_to_candidates`: a deterministic function of its set and the public list) and reports the
trimmed set padded with the dummy to the phase-2 length l2 (sampling RAPPOR: bit kc; sampling
SH: the fair coin of Alg. 2 line 7), estimates scaled by l2. l2 = min(l, k_max) by default:
after trimming nobody holds more than k_max items, and shrinking the set length from l to O(k)
is where the two-phase gain comes from (§4.1 "if we can reduce l ...", §5.3.2 "reducing the size
of item sets from l to O(k)"); ``phase2_pad="l"`` pads to l instead (§4.4's literal wording).
l2 is public (config), so padding reveals nothing. A user with s <= l items holds at most l2
candidates, so the phase-2 estimate is unbiased for every such user.

Final answer (§4.1): the top-k candidates ranked by their phase-2 estimates, with frequencies as
fractions of users. Of §4.4's optimisation:

* implemented (option ``combine="ivw"``): using both phases' information at the collector, as
  the inverse-variance weighted mean of a candidate's phase-1 and phase-2 estimates (variances:
  the mechanisms' exact item variances at plug-in frequencies). Caveat: candidates were chosen
  for large phase-1 estimates, so those carry a winner's-curse upward bias; the default
  ``combine="phase2"`` ranks and reports with the phase-2 estimates alone.
* implemented as ``lm-sho`` (above): the correlated perturbation of phase 2 on the device's
  phase-1 element. The paper's version (re-use the phase-1 item if it is a candidate, else
  sample another) is not eps-LDP (spec §3.1), so ``shc`` always keeps the phase-1 element; its
  phase-1 sign is a coarsened copy of the phase-2 one, so ``combine="ivw"`` is refused for it.
"""
from collections import namedtuple

import numpy as np

from .. import config
from ..errors import ConfigError
from ..mechanisms.cms import as_keys
from ..mechanisms.sh import KeySets, derived_sets, key_sets

PROTOCOLS = ("lm-rp", "lm-sh", "lm-sho", "rp", "sh")
PHASE1_MECHANISM = {"lm-rp": "sh", "lm-sh": "sh", "lm-sho": "shc"}
PHASE2_MECHANISM = {"lm-rp": "srappor", "lm-sh": "sh", "lm-sho": "shc"}
CORRELATED = ("lm-sho",)
"""Protocols whose phase 2 re-reports each device's phase-1 element (spec §3.1): no trimming,
phase-2 length l, and the simulation keeps every device's (t, y1, x)."""
SINGLE_MECHANISM = {"rp": "srappor", "sh": "sh"}
DEFAULT_M = 65536
"""SH projection rows: the collision term gamma sum F^2 shrinks as 1/m (sh.item_variances)."""
DEFAULT_SHARE = 0.5
"""LDPMiner §5.1.2: half of ε for each phase."""
MAX_CANDIDATES = 65536

TopK = namedtuple("TopK", "keys frequencies")
TopK.__doc__ = "Top-k answer: item keys, best first, and their estimated frequencies (fractions)."


# --- campaign set-up ------------------------------------------------------------------------

def check_protocol(name: str) -> str:
    if name not in PROTOCOLS:
        raise ConfigError("protocol", "unknown LDPMiner protocol %r (known: %s)"
                          % (name, ", ".join(PROTOCOLS)))
    return name


def split_budget(eps_milli: int, phase1_share: float = DEFAULT_SHARE):
    """(eps1_milli, eps2_milli), both >= 1 and summing to eps_milli exactly (Thm 4.4)."""
    if isinstance(eps_milli, bool) or not isinstance(eps_milli, int) or eps_milli < 2:
        raise ConfigError("eps_milli", "a two-phase campaign needs an integer eps_milli >= 2, "
                          "got %r" % (eps_milli,))
    if not 0.0 < float(phase1_share) < 1.0:
        raise ConfigError("phase1_share", "must be in (0, 1), got %r" % (phase1_share,))
    eps1 = min(max(int(round(eps_milli * float(phase1_share))), 1), eps_milli - 1)
    return eps1, eps_milli - eps1


def phase2_length(l: int, k_max: int, phase2_pad: str = "kmax", name: str = None) -> int:
    """l2, the phase-2 set length: min(l, k_max) ("kmax", default) or l ("l"); module doc.
    Always l for the correlated protocol `name` in CORRELATED (spec §3.1: equal l)."""
    if name in CORRELATED:
        return int(l)
    if phase2_pad == "kmax":
        return min(int(l), int(k_max))
    if phase2_pad == "l":
        return int(l)
    raise ConfigError("phase2_pad", "must be 'kmax' or 'l', got %r" % (phase2_pad,))


def campaign_phases(name: str, eps_milli: int, l: int, k_max: int = None, m: int = DEFAULT_M,
                    phase1_share: float = DEFAULT_SHARE, phase2_pad: str = "kmax") -> list:
    """The `phases` list of a campaign config (config.make_config) for one protocol; the
    two-phase ones need k_max (it fixes the phase-2 set length l2)."""
    check_protocol(name)
    if name in SINGLE_MECHANISM:
        mech = SINGLE_MECHANISM[name]
        params = {"l": l} if mech == "srappor" else {"m": m, "l": l}
        return [{"phase": 1, "mechanism": mech, "eps_milli": eps_milli, "params": params}]
    if k_max is None:
        raise ConfigError("k_max", "a two-phase campaign needs k_max")
    eps1, eps2 = split_budget(eps_milli, phase1_share)
    mech2 = PHASE2_MECHANISM[name]
    l2 = phase2_length(l, k_max, phase2_pad, name)
    params2 = {"l": l2} if mech2 == "srappor" else {"m": m, "l": l2}
    return [{"phase": 1, "mechanism": PHASE1_MECHANISM[name], "eps_milli": eps1,
             "params": {"m": m, "l": l}},
            {"phase": 2, "mechanism": mech2, "eps_milli": eps2, "params": params2}]


def phase1_mechanism(cfg: dict):
    """Phase-1 mechanism of a campaign config: sampling SH over the domain (Alg. 2), `shc`'s
    phase 1 for the correlated protocol."""
    mech = config.mechanism_for_phase(cfg, 1)
    if len(cfg["phases"]) == 2 and mech.name not in ("sh", "shc"):
        raise ConfigError("phases.mechanism", "LDPMiner phase 1 is sampling SH, not %r" % mech.name)
    return mech


def candidates_from_phase1(sketch, k_max: int, domain_keys) -> np.ndarray:
    """The k_max domain keys with the highest phase-1 estimates, best first (ties: domain
    order) -- LDPMiner §4.1's candidate set."""
    keys = as_keys(domain_keys)
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) \
            or not 1 <= k_max <= min(keys.size, MAX_CANDIDATES):
        raise ConfigError("k_max", "must be an integer in [1, %d], got %r"
                          % (min(keys.size, MAX_CANDIDATES), k_max))
    est = np.asarray(sketch.estimate(keys), np.float64)
    return keys[np.argsort(-est, kind="stable")[:int(k_max)]]


def phase2_message(cfg: dict, candidates) -> dict:
    """The phase-2 body (spec §5) carrying the candidate keys; sign it with config.sign."""
    return config.make_phase2(cfg, candidates=[int(c) for c in as_keys(candidates)])


def phase2_mechanism(cfg: dict, candidates):
    """Phase-2 mechanism: sampling RAPPOR over `candidates` (bit c = candidates[c]), or
    sampling SH (the candidates only shape the devices' trimmed sets), or `shc` (the candidates
    are only what the answer is for)."""
    if len(cfg["phases"]) != 2:
        raise ConfigError("phases", "the campaign has no phase 2")
    name = cfg["phases"][1]["mechanism"]
    if name in ("srappor", "shc"):
        return config.mechanism_for_phase(cfg, 2, candidates=[int(c) for c in as_keys(candidates)])
    if name == "sh":
        return config.mechanism_for_phase(cfg, 2)
    raise ConfigError("phases.mechanism", "LDPMiner phase 2 is srappor, sh or shc, not %r"
                      % name)


# --- trimming (client side, §4.4) ----------------------------------------------------------

def trim_to_candidates(keys, candidates) -> list:
    """A device's phase-2 input: its keys that are candidates, in its own order (§4.4)."""
    wanted = {int(c) for c in as_keys(candidates)}
    return [int(k) for k in as_keys(keys) if int(k) in wanted]


def trim_sets(sets, candidates) -> KeySets:
    """trim_to_candidates for many users: a (n, s) array, a list of sets or KeySets in,
    KeySets out (users may end with an empty set: they report the dummy)."""
    cand = np.unique(as_keys(candidates))
    ks = None
    if isinstance(sets, np.ndarray) and sets.ndim == 2:
        arr = as_keys(sets).reshape(sets.shape)
        keep = np.isin(arr, cand)
        counts = keep.sum(axis=1)
        keys = arr[keep]
    else:
        ks = key_sets(sets)
        n = ks.offsets.size - 1
        keep = np.isin(ks.keys, cand)
        owner = np.repeat(np.arange(n), np.diff(ks.offsets.astype(np.int64)))
        counts = np.bincount(owner[keep], minlength=n)
        keys = ks.keys[keep]
    offsets = np.zeros(counts.size + 1, np.uint64)
    np.cumsum(counts, out=offsets[1:])
    return derived_sets(ks, np.ascontiguousarray(keys, np.uint32), offsets)


# --- answers -----------------------------------------------------------------------------------

def frequencies(sketch, keys) -> np.ndarray:
    return np.asarray(sketch.estimate(keys), np.float64) / max(sketch.n, 1)


def combined(phase1_sketch, phase2_sketch, cand, combine):
    f2 = frequencies(phase2_sketch, cand)
    if combine == "phase2":
        return f2
    if combine != "ivw":
        raise ConfigError("combine", "must be 'phase2' or 'ivw', got %r" % (combine,))
    if phase2_sketch.mechanism.name == "shc":
        raise ConfigError("combine", "shc's phases are correlated (spec §3.1): its phase-1 "
                          "estimate adds nothing to the phase-2 one; use combine='phase2'")
    f1 = frequencies(phase1_sketch, cand)
    v1 = phase1_sketch.mechanism.item_variances(max(phase1_sketch.n, 1), np.clip(f1, 0.0, 1.0))
    v2 = phase2_sketch.mechanism.item_variances(max(phase2_sketch.n, 1), np.clip(f2, 0.0, 1.0))
    w1, w2 = 1.0 / np.asarray(v1), 1.0 / np.asarray(v2)
    return (w1 * f1 + w2 * f2) / (w1 + w2)


def final_topk(phase1_sketch, phase2_sketch, k: int, candidates=None,
               combine: str = "phase2") -> TopK:
    """LDPMiner's answer: the k candidates with the highest (combined) estimates, best first.

    `candidates` defaults to the sampling-RAPPOR phase-2 mechanism's list (an SH phase 2 does
    not carry it). `combine`: "phase2" (default) or "ivw" (module docstring)."""
    if candidates is None:
        candidates = getattr(phase2_sketch.mechanism, "candidates", None)
        if candidates is None:
            raise ConfigError("candidates", "an sh phase 2 needs the candidate list")
    cand = as_keys(candidates)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= cand.size:
        raise ConfigError("k", "must be an integer in [1, %d candidates], got %r" % (cand.size, k))
    f = combined(phase1_sketch, phase2_sketch, cand, combine)
    order = np.argsort(-f, kind="stable")[:int(k)]
    return TopK(cand[order], f[order])


def single_phase_topk(sketch, k: int, domain_keys) -> TopK:
    """Single-phase sampling RAPPOR / SH answer: the top-k of the whole domain."""
    keys = as_keys(domain_keys)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= keys.size:
        raise ConfigError("k", "must be an integer in [1, %d], got %r" % (keys.size, k))
    f = frequencies(sketch, keys)
    order = np.argsort(-f, kind="stable")[:int(k)]
    return TopK(keys[order], f[order])
