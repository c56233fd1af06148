"""PEM campaigns over strings nobody listed (protocol_spec/v2 §3.5; `campaign create --domain
strings:max_len=L [--protocol pem]`, `campaign advance`, `estimate`).

Prefix extending: Wang, Li, Jha et al., "Locally differentially private heavy hitter
identification" (IEEE TDSC 2019) §4; the frequency oracle of phase 1 is FLH per group
(mechanisms/pem.py). The phases:

* phase 1 `pem` on the devices below the public split `sample_rate_ppm` (default 90 %: PEM
  spreads phase 1 over one group per level, so it needs most of the fleet; phase 2 validates
  at most `k_max` candidates, which few devices do well), each device in the group of its id;
* `campaign advance` runs `protocols.pem.identify` over the per-group FLH sketches (the
  `keep` best prefixes extended level by level) and publishes the signed phase-2 message with
  the keys of the `k_max` best full codes (`candidates`, at most 1024). The message carries keys
  only; the decoded strings and their phase-1 estimates stay in the campaign's protocol document;
* phase 2 `psgrr` with `l = 1` over the candidates on the other devices; `estimate` then shows
  the candidates' phase-2 frequencies with intervals and the false-discovery control of the
  other two-phase protocols (answers.py, significance.py). In phase 1 `estimate` shows the
  phase-1 candidates, labelled unvalidated.
"""
import math

import numpy as np

from ...core import strings_domain
from ...core.errors import ConfigError
from ...core.mechanisms.olh import default_g
from ...core.mechanisms.pem import KP_DEFAULT
from ...core.protocols import pem as pem_protocol
from . import significance
from .display import shown

DEFAULT_PHASE1_SHARE = 0.9
DEFAULT_FLEET = 100000
"""Devices `campaign create --domain strings:...` plans for without --fleet-size (PemPlan.for_fleet
sizes k' from it; a larger fleet only makes the seed-collision term smaller than planned)."""
DEFAULT_TOP = 10
PPM = 1000000


def default_protocol(domain_spec) -> str:
    """`campaign create` without --mechanism or --protocol: pem on a strings domain."""
    if str(domain_spec).startswith("strings"):
        return "pem"
    raise ConfigError("mechanism", "give --mechanism or --protocol")


def default_k_max(top: int) -> int:
    """Phase-2 candidates: 4k (PSGRR's variance grows slowly with the list at l = 1), at most
    the spec's 1024."""
    return min(4 * int(top), strings_domain.CANDIDATES_MAX)


def plan_for(eps_milli: int, proto: dict, params: dict = None) -> "pem_protocol.PemPlan":
    """The PemPlan of a campaign: the config's public `levels`, `kp`, `g` (spec §3.5) and the
    aggregator's own `keep`, `alphabet` and pooled ranking from the protocol document; `top`
    is `keep`: every final candidate comes back ranked, `plausible` ones are then kept."""
    keep = max(int(proto.get("keep") or pem_protocol.DEFAULT_KEEP), int(proto["k_max"]))
    kw = {"top": keep, "keep": keep, "max_len": int(proto["max_len"])}
    if params is not None:
        kw.update(levels=tuple(params["levels"]), kp=int(params["kp"]), g=int(params["g"]))
    else:  # a protocol document from before the config's levels were used
        if proto.get("step") is not None:
            kw["step"] = int(proto["step"])
        if proto.get("first") is not None:
            kw["first"] = int(proto["first"])
    if proto.get("alphabet"):
        kw["alphabet"] = proto["alphabet"]
    if proto.get("pool"):
        kw["pool"] = True
    return pem_protocol.PemPlan(eps_milli, **kw)


def campaign_phases(eps_milli: int, domain: dict, options) -> tuple:
    """(phases, protocol document) of a PEM campaign: levels from PemPlan.level_bits(), g
    g, kp and levels from PemPlan.for_fleet (--fleet-size, --alphabet), the public split from
    --sample-rate (default 0.9)."""
    opts = options
    opts.refuse(("set_size", "budget_split", "theta", "sketch_k", "sketch_m"), "pem")
    max_len = strings_domain.check_strings_domain(domain)
    top = DEFAULT_TOP if opts.top is None else int(opts.top)
    if top < 1:
        raise ConfigError("top", "must be a positive integer, got %r" % (top,))
    k_max = default_k_max(top) if opts.k_max is None else int(opts.k_max)
    if not top <= k_max <= strings_domain.CANDIDATES_MAX:
        raise ConfigError("k_max", "need top <= k_max <= %d, got k=%d, k_max=%d"
                          % (strings_domain.CANDIDATES_MAX, top, k_max))
    share = DEFAULT_PHASE1_SHARE if opts.sample_rate is None else float(opts.sample_rate)
    ppm = int(round(share * PPM))
    if not 0 < ppm < PPM:
        raise ConfigError("sample_rate", "the phase-1 share must be in (0, 1), got %r" % share)
    fleet = DEFAULT_FLEET if opts.fleet_size is None else int(opts.fleet_size)
    if fleet < 1:
        raise ConfigError("fleet_size", "must be a positive integer, got %r" % (fleet,))
    # the public schedule, k' and g for about `fleet` devices (PemPlan.for_fleet: PEM §4-§5 and
    # FLH's collision term; measured in tools/bench_heavy_hitters.py)
    plan = pem_protocol.PemPlan.for_fleet(int(round(fleet * share)), eps_milli, max_len,
                                          alphabet=opts.alphabet, top=k_max)
    params = {"g": plan.g or default_g(eps_milli), "kp": plan.kp, "levels": plan.level_bits()}
    phases = [{"phase": 1, "mechanism": "pem", "eps_milli": int(eps_milli),
               "sample_rate_ppm": ppm, "params": params},
              {"phase": 2, "mechanism": "psgrr", "eps_milli": int(eps_milli),
               "sample_rate_ppm": ppm, "params": {"l": 1}}]
    proto = {"protocol": "pem", "k": top, "k_max": k_max, "max_len": max_len,
             "keep": plan.keep, "alphabet": opts.alphabet, "pool": bool(plan.pool),
             "fleet_size": fleet, "sample_rate_ppm": ppm}
    return phases, proto


def plausible(code: bytes) -> bool:
    """Could a device hold this code? Not empty, and UTF-8 except that a full code may end in
    a cut character (spec §3.5). Post-processing of public estimates: a final-level candidate
    of random bytes (noise surviving every level) would only take a phase-2 slot."""
    import codecs
    text = bytes(code).rstrip(b"\0")
    if not text:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(text, final=len(text) < len(code))
    except UnicodeDecodeError:
        return False
    return True


def identify(camp, sketch1) -> "pem_protocol.PemAnswer":
    """PEM §4 over the campaign's per-group FLH sketches: the k_max best full codes."""
    proto = camp.protocol
    phase1 = camp.config["phases"][0]
    plan = plan_for(phase1["eps_milli"], proto, phase1["params"])
    return pem_protocol.identify(plan, sketch1.group_estimate())


def advance(camp, sketch1) -> tuple:
    """(candidate keys, updated protocol document, summary) at the end of phase 1: identify's
    codes, best first, their keys (phase-2 `candidates`; the empty code and duplicate keys
    dropped), the decoded strings and phase-1 frequencies kept in the protocol document."""
    answer = identify(camp, sketch1)
    keys, strings, freqs, codes = [], [], [], []
    k_max = int(camp.protocol["k_max"])
    for code, f in zip(answer.codes, answer.frequencies):
        code = bytes(code)
        key = strings_domain.code_key(code)
        if not plausible(code) or key in keys:
            continue
        if len(keys) == k_max:
            break
        keys.append(key)
        codes.append(code.hex())
        strings.append(strings_domain.code_string(code))
        freqs.append(float(f))
    if not keys:
        raise ConfigError("phase1", "PEM found no non-empty candidate")
    updated = dict(camp.protocol, candidate_strings=strings, candidate_codes=codes,
                   phase1_frequencies=freqs,
                   levels_run=[list(level) for level in answer.levels])
    return keys, updated, {"candidate_strings": strings[:20]}


class PemPhase1Answer:
    """The phase-1 candidates of a PEM campaign (unvalidated: PEM's own ranking, before the
    phase-2 re-estimate)."""

    def __init__(self, campaign, reports, rows, sizes, warnings):
        self.campaign, self.reports, self.rows, self.sizes = campaign, reports, rows, sizes
        self.warnings = warnings

    def to_json(self) -> dict:
        return {"campaign": self.campaign, "protocol": "pem", "phase": 1, "validated": False,
                "n": self.reports, "group_reports": self.sizes, "items": self.rows,
                "warnings": self.warnings}

    def to_csv(self, stream=None) -> str:
        from .estimates import rows_csv
        return rows_csv(["rank", "item", "key", "phase1_frequency", "validated"], self.rows,
                        stream)

    def to_text(self) -> str:
        lines = ["campaign %s (pem) phase 1: %d reports in %d groups; UNVALIDATED candidates "
                 "(PEM's phase-1 ranking; `campaign advance` validates them in phase 2)"
                 % (self.campaign, self.reports, len(self.sizes))]
        lines.append("%5s  %-24s %12s" % ("rank", "item", "phase-1"))
        for row in self.rows:
            lines.append("%5d  %-24s %12.5f" % (row["rank"], shown(row["item"], 24),
                                               row["phase1_frequency"]))
        return "\n".join(lines)


def phase1_answer(camp, sketch1, top=None) -> PemPhase1Answer:
    """`estimate` of a PEM campaign in phase 1 (or `--phase 1`): identify's candidates."""
    sizes = [int(s) for s in sketch1.sizes]
    if sketch1.n == 0:
        return PemPhase1Answer(camp.name, 0, [], sizes, ["no phase-1 report yet"])
    answer = identify(camp, sketch1)
    rows = []
    last = max(sizes[-1], 1)  # the full codes are estimated on the last group's reports
    for code, f in zip(answer.codes, answer.frequencies):
        if not plausible(bytes(code)):
            continue
        rows.append({"rank": len(rows) + 1, "item": strings_domain.code_string(bytes(code)),
                     "key": strings_domain.code_key(bytes(code)), "estimate": float(f) * last,
                     "frequency": float(f), "phase1_frequency": float(f), "validated": False})
    limit = int(camp.protocol["k"]) if top is None else int(top)
    return PemPhase1Answer(camp.name, int(sketch1.n), rows[:limit], sizes, [
        "unvalidated: phase-1 candidates of PEM (their estimates are the selected maxima of "
        "many noisy prefixes, biased upwards); the answer is phase 2's"])


def candidate_rows(camp, sketch2, level) -> tuple:
    """(rows best first with `noise`, Significance): the phase-2 PSGRR estimates of every
    candidate, tested as one family (phase 2's randomness is fresh: no selection bias), each
    with its interval (± z σ, σ from PSGRR's exact variance at its estimate)."""
    from .estimates import two_sided_z
    proto = camp.protocol
    cand = np.asarray(camp.phase2["candidates"], np.uint32)
    names = dict(zip((int(k) for k in cand), proto.get("candidate_strings", [])))
    f1 = dict(zip((int(k) for k in cand), proto.get("phase1_frequencies", [])))
    n = max(int(sketch2.n), 1)
    mech = sketch2.mechanism
    f = np.asarray(sketch2.estimate(cand), np.float64) / n
    noise, sig = significance.discoveries(f, significance.null_stddevs(mech, n, f), level,
                                          mech.estimate_dependence)
    sd = np.sqrt(np.asarray(mech.item_variances(n, np.clip(f, 0.0, 1.0)), np.float64))
    z = two_sided_z(0.95)
    order = np.argsort(-f, kind="stable")
    rows = []
    for i in order.tolist():
        key = int(cand[i])
        rows.append({"rank": 0, "item": names.get(key, key), "key": key,
                     "estimate": float(f[i]) * n, "frequency": float(f[i]),
                     "ci_low": float(f[i] - z * sd[i]), "ci_high": float(f[i] + z * sd[i]),
                     "phase1_frequency": float(f1.get(key, math.nan)),
                     "noise": bool(noise[i])})
    return rows, sig
