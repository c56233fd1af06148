"""Two-phase protocol campaigns in phase 2: `compute_answer(store, name) -> ProtocolAnswer`, the
protocol's final answer (LDPMiner: `ldpminer.final_topk` over the candidates, top-k with
frequencies; svim: the candidates' phase-2 estimates or, on its flat branch, both phases pooled
over the domain; LDPLCM: `ldplcm.estimate_frequencies`, Alg. 4, with the high-frequent flag).
One-phase estimates with intervals are `estimates.compute_estimates`.

Every answer's rows carry `noise` by the one-phase tables' rule (significance.py): the family
is what the answer ranks — LDPMiner's and svim's k_max candidates with their phase-2 estimates
(phase 2's randomness is fresh, so testing the candidates phase 1 chose is no selection),
svim's flat branch and LDPLCM over the whole domain (LDPLCM's high-frequent items, answered
from the model, are tested on the phase-1 estimates the model learned from).
"""
import math
from dataclasses import dataclass, field

import numpy as np

from ...core import config as cfgmod
from ...core.errors import ConfigError
from . import significance
from .display import shown
from .estimates import load_sketch, rows_csv
from .significance import DEFAULT_FDR
from ..state.store import Store


@dataclass
class ProtocolAnswer:
    """The final answer of a two-phase protocol campaign. rows: {rank, item, key, frequency,
    estimate (count = frequency * phase-2 reports)} plus `high` (LDPLCM) or `phase1_frequency`
    (LDPMiner)."""

    campaign: str
    protocol: str
    phase_reports: list
    params: dict
    rows: list = field(default_factory=list)
    high_items: list = None
    warnings: list = field(default_factory=list)
    branch: str = None
    """svim: "candidates" or "flat" (the phase-2 branch taken at `campaign advance`)."""
    significance: "significance.Significance" = None
    threshold: float = None

    def to_json(self) -> dict:
        out = {"campaign": self.campaign, "protocol": self.protocol, "phase": 2,
               "phase_reports": self.phase_reports, "n": self.phase_reports[1],
               "params": self.params, "items": self.rows, "warnings": self.warnings,
               "significance": self.significance and self.significance.to_json(),
               "threshold": self.threshold}
        if self.high_items is not None:
            out["high_items"] = self.high_items
        if self.branch is not None:
            out["branch"] = self.branch
        return out

    def columns(self):
        extra = ["high"] if self.protocol == "ldplcm" else ["phase1_frequency"]
        if self.protocol == "pem":
            extra = ["ci_low", "ci_high"] + extra
        return ["rank", "item", "key", "estimate", "frequency"] + extra + ["noise"]

    def to_csv(self, stream=None) -> str:
        return rows_csv(self.columns(), self.rows, stream)

    def to_text(self) -> str:
        n1, n2 = self.phase_reports
        head = "campaign %s (%s): phase 1 %d reports, phase 2 %d reports; %s" % (
            self.campaign, self.protocol, n1, n2,
            ", ".join("%s %s" % (k, v) for k, v in sorted(self.params.items())))
        if n2 == 0:
            return head + "\nno phase-2 report yet"
        lines = [head]
        if self.significance is not None:
            lines.append("%d items stand out of the noise (%s); `noise` marks the rows that do "
                         "not" % (self.significance.discoveries, self.significance.describe()))
        if self.protocol == "ldplcm":
            lines.append("high-frequent items (model): %d; frequencies from the model for those, "
                         "the lcm sketch for the rest" % len(self.high_items))
            lines.append("%5s  %-24s %10s  %s" % ("rank", "item", "fraction", "high"))
            for row in self.rows:
                lines.append("%5d  %-24s %10.5f  %-4s%s" % (
                    row["rank"], shown(row["item"], 24), row["frequency"],
                    "yes" if row["high"] else "", "  noise" if row.get("noise") else ""))
        elif self.branch == "flat":
            lines.append("top-%d of the whole domain (svim flat branch: phase 1 scaled by %.4g "
                         "and phase 2 pooled by inverse variance)"
                         % (len(self.rows), self.params.get("ratio", float("nan"))))
            lines.append("%5s  %-24s %10s %12s" % ("rank", "item", "fraction", "phase-1"))
            lines += [self._line(row) for row in self.rows]
        elif self.protocol == "pem":
            lines.append("top-%d of %d PEM candidates (strings found in phase 1), validated: "
                         "phase-2 estimates with 95%% intervals" % (len(self.rows),
                                                                   self.params["k_max"]))
            lines.append("%5s  %-24s %10s %21s %12s" % ("rank", "item", "fraction", "interval",
                                                        "phase-1"))
            for row in self.rows:
                lines.append("%5d  %-24s %10.5f [%8.5f, %8.5f] %12.5f%s" % (
                    row["rank"], shown(row["item"], 24), row["frequency"], row["ci_low"],
                    row["ci_high"], row["phase1_frequency"], "  noise" if row.get("noise") else ""))
        else:
            lines.append("top-%d of %d candidates, ranked by their phase-2 estimates"
                         % (len(self.rows), self.params["k_max"]))
            lines.append("%5s  %-24s %10s %12s" % ("rank", "item", "fraction", "phase-1"))
            lines += [self._line(row) for row in self.rows]
        return "\n".join(lines)

    @staticmethod
    def _line(row) -> str:
        return "%5d  %-24s %10.5f %12.5f%s" % (row["rank"], shown(row["item"], 24),
                                              row["frequency"], row["phase1_frequency"],
                                              "  noise" if row.get("noise") else "")


def _display(doc, keys):
    """Domain items of item keys (the item itself for an int domain)."""
    from ...core import protocol
    if doc["domain"]["type"] == "str":
        names = {protocol.item_key(i): i for i in doc["domain"]["items"]}
        return [names.get(int(k), int(k)) for k in keys]
    return [int(k) for k in keys]


def compute_answer(store: Store, name: str, top: int = None, fdr: float = DEFAULT_FDR,
                   threshold=None) -> ProtocolAnswer:
    """The final answer of a protocol campaign in phase 2 (module docstring). `top`: LDPMiner
    and svim report their k (at most k_max) items, LDPLCM every domain item by default (in
    domain order) or its `top` largest. `fdr`: the false-discovery rate of the `noise` flags;
    `threshold`: "auto" keeps only the rows that stand out, a fraction the rows above it."""
    from ...core.protocols import ldplcm
    level = significance.check_level(fdr)
    camp = store.require_campaign(name)
    proto = camp.protocol
    if not proto:
        raise ConfigError("protocol", "campaign %s is not a two-phase protocol campaign" % name)
    if camp.phase != 2 or not camp.phase2:
        raise ConfigError("phase", "campaign %s is in phase 1; run `ldpfleet campaign advance` "
                          "first (or pass --phase 1 for the phase-1 estimates)" % name)
    sketch1, sketch2 = load_sketch(store, name, 1), load_sketch(store, name, 2)
    reports = [int(sketch1.n), int(sketch2.n)]
    doc = camp.config
    if proto["protocol"] == "ldplcm":
        model = ldplcm.check_model(camp.phase2["model"])
        keys = np.asarray(cfgmod.domain_keys(doc), np.uint32)
        theta = proto.get("theta_measured")
        params = {"theta": proto["theta"], "theta_measured": theta,
                  "sample_rate_ppm": proto["sample_rate_ppm"]}
        answer = ProtocolAnswer(name, "ldplcm", reports, params)
        if sketch2.n == 0:
            answer.high_items = []
            return answer
        est, high = ldplcm.estimate_frequencies(sketch2, model, keys, theta=theta)
        noise, answer.significance = _ldplcm_noise(camp, sketch1, sketch2, keys, est, high,
                                                   theta, level)
        order = np.arange(keys.size)
        if top is not None or threshold is not None:
            order = np.argsort(-est, kind="stable")
        shown = _display(doc, keys)
        answer.high_items = [shown[i] for i in np.flatnonzero(high).tolist()]
        for i in order.tolist():
            answer.rows.append({"rank": 0, "item": shown[i], "key": int(keys[i]),
                                "estimate": float(est[i]) * sketch2.n,
                                "frequency": float(est[i]), "high": bool(high[i]),
                                "noise": bool(noise[i])})
        return _finish(answer, top, threshold)
    if proto["protocol"] == "pem":  # spec §3.5: the candidates' phase-2 estimates
        from .pem_campaign import candidate_rows
        params = {"k": int(proto["k"]), "k_max": int(proto["k_max"]),
                  "max_len": int(proto["max_len"]), "sample_rate_ppm": proto["sample_rate_ppm"]}
        answer = ProtocolAnswer(name, "pem", reports, params)
        if sketch2.n == 0:
            return answer
        answer.rows, answer.significance = candidate_rows(camp, sketch2, level)
        return _finish(answer, top, threshold, int(proto["k"]))
    if camp.fallback:
        return _finish(_svim_flat_answer(camp, sketch1, sketch2, level), top, threshold,
                       int(proto["k"]))
    cand = np.asarray(camp.phase2["candidates"], np.uint32)
    params = {"k": int(proto["k"]), "k_max": int(proto["k_max"]), "set_size": proto["set_size"],
              "budget_split": proto["budget_split"]}
    answer = ProtocolAnswer(name, proto["protocol"], reports, params, branch=proto.get("branch"))
    if sketch2.n == 0:
        return answer
    rows, answer.significance = _candidate_rows(camp, sketch1, sketch2, cand, level)
    answer.rows = rows
    _finish(answer, top, threshold, int(proto["k"]))
    answer.warnings += _ldpminer_warnings(answer)
    return answer


def _candidate_rows(camp, sketch1, sketch2, cand, level) -> tuple:
    """(rows of every candidate, best first, with `noise`; Significance) of an LDPMiner or
    svim answer: the phase-2 estimates of the k_max candidates, tested as one family."""
    from ...core.protocols import ldpminer
    best = ldpminer.final_topk(sketch1, sketch2, int(cand.size), candidates=cand)
    mech2 = sketch2.mechanism
    noise, sig = significance.discoveries(
        best.frequencies, significance.null_stddevs(mech2, sketch2.n, best.frequencies), level,
        mech2.estimate_dependence)
    phase1 = np.asarray(sketch1.estimate(best.keys), np.float64) / max(sketch1.n, 1)
    shown = _display(camp.config, best.keys)
    rows = [{"rank": 0, "item": item, "key": int(key), "estimate": float(f) * sketch2.n,
             "frequency": float(f), "phase1_frequency": float(f1), "noise": bool(flag)}
            for key, f, f1, item, flag in zip(best.keys.tolist(), best.frequencies.tolist(),
                                               phase1.tolist(), shown, noise.tolist())]
    return rows, sig


def _ldplcm_noise(camp, sketch1, sketch2, keys, est, high, theta, level) -> tuple:
    """(noise mask, Significance) of an LDPLCM answer over the domain: the low items' sketch
    estimates at their f = 0 deviation (LcmMechanism.item_variances with the model's high
    mask), the high items' phase-1 estimates (what the model learned from) at phase 1's."""
    mech1, mech2 = sketch1.mechanism, sketch2.mechanism
    freq = np.asarray(est, np.float64).copy()
    sd = significance.null_stddevs(mech2, sketch2.n, est, high=high,
                                   theta_known=theta is not None)
    if high.any():
        f1 = np.asarray(sketch1.estimate(keys), np.float64) / max(sketch1.n, 1)
        freq[high] = f1[high]
        sd[high] = significance.null_stddevs(mech1, sketch1.n, f1)[high]
    return significance.discoveries(freq, sd, level, "any")


def _finish(answer: ProtocolAnswer, top, threshold, k: int = None) -> ProtocolAnswer:
    """The rows an answer lists (rows come best first, or in domain order for LDPLCM without
    `top`): the rows that stand out (`threshold` "auto") or above a fraction, then the top
    `top` (default k), ranked 1..; a warning for listed rows that do not stand out, or for
    an answer where nothing does."""
    rows = answer.rows
    sig = answer.significance
    if threshold == "auto":
        rows = [r for r in rows if not r["noise"]]
    elif threshold is not None:
        answer.threshold = float(threshold)
        rows = [r for r in rows if r["frequency"] > answer.threshold]
    limit = top if top is not None else k
    if limit is not None:
        rows = rows[:int(limit)]
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    answer.rows = rows
    if sig is not None and sig.discoveries == 0 and rows:
        answer.warnings.append(
            "no item stands out of the noise (%s): the answer is mostly noise; more devices, a "
            "larger epsilon or a smaller domain would resolve it" % sig.describe())
    elif sig is not None and limit is not None:
        warning = significance.noise_rows_warning(rows, sig)
        if warning:
            answer.warnings.append(warning)
    return answer


def _svim_flat_answer(camp, sketch1, sketch2, level) -> ProtocolAnswer:
    """svim's flat branch (spec §5.4 `fallback`): every domain item's phase-1 score scaled by
    the ratio of sums and pooled with phase 2's listless estimate by inverse variance
    (`svim.flat_estimates`, the simulation's own computation), best first, each pooled
    estimate's standard deviation `stddev` (as a fraction) and its `noise` flag (the pooled
    estimate at the pooled deviation of an item nobody holds)."""
    from ...core.protocols import svim
    proto = camp.protocol
    keys = np.asarray(cfgmod.domain_keys(camp.config), np.uint32)
    params = {"k": int(proto["k"]), "k_max": int(proto["k_max"]), "set_size": proto["set_size"],
              "budget_split": proto["budget_split"]}
    answer = ProtocolAnswer(camp.name, proto["protocol"], [int(sketch1.n), int(sketch2.n)],
                            params, branch="flat")
    if sketch2.n == 0 or sketch1.n == 0:
        return answer
    f, var, ratio = svim.flat_estimates(sketch1, sketch2, keys, int(proto["set_size"]))
    params.update(ratio=float(ratio[0]), ratio_variance=float(ratio[1]))
    zeros = np.zeros(keys.size)
    var0 = svim.pooled(zeros, sketch1.mechanism.item_variances(max(sketch1.n, 1), zeros), zeros,
                       sketch2.mechanism.item_variances(max(sketch2.n, 1), zeros), ratio,
                       zeros)[1]
    noise, answer.significance = significance.discoveries(f, np.sqrt(var0), level, "any")
    f1 = np.asarray(sketch1.estimate(keys), np.float64) / max(sketch1.n, 1)
    order = np.argsort(-f, kind="stable")
    shown = _display(camp.config, keys[order])
    for i, item in zip(order.tolist(), shown):
        answer.rows.append({"rank": 0, "item": item, "key": int(keys[i]),
                            "estimate": float(f[i]) * sketch2.n, "frequency": float(f[i]),
                            "stddev": float(math.sqrt(var[i])),
                            "phase1_frequency": float(f1[i]), "noise": bool(noise[i])})
    return answer


def _ldpminer_warnings(answer) -> list:
    """LDPMiner answers whose numbers cannot be shares of devices: a fraction of devices
    holding an item cannot leave [0, 1] (the noise of the fleet size dominates)."""
    freqs = [r["frequency"] for r in answer.rows] + [r["phase1_frequency"] for r in answer.rows]
    if freqs and (max(freqs) > 1.0 or min(freqs) < -0.5):
        return ["some frequencies lie outside [0, 1] (from %.3g to %.3g), which a share of "
                "devices cannot: the noise of this fleet size dominates the answer"
                % (min(freqs), max(freqs))]
    return []
