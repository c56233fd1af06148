"""Two-phase protocol campaigns in phase 2: `compute_answer(store, name) -> ProtocolAnswer`, the
protocol's final answer (LDPMiner: `ldpminer.final_topk` over the candidates, top-k with
frequencies; svim: the candidates' pooled estimates or, on its flat branch, both phases pooled
over the domain; LDPLCM: `ldplcm.estimate_frequencies`, Alg. 4, with the high-frequent flag).
One-phase estimates with intervals are `estimates.compute_estimates`.
"""
import math
from dataclasses import dataclass, field

import numpy as np

from .. import config as cfgmod
from ..errors import ConfigError
from .estimates import load_sketch, noise_level, noise_warning, rows_csv
from .store import Store


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

    def to_json(self) -> dict:
        out = {"campaign": self.campaign, "protocol": self.protocol, "phase": 2,
               "phase_reports": self.phase_reports, "n": self.phase_reports[1],
               "params": self.params, "items": self.rows, "warnings": self.warnings}
        if self.high_items is not None:
            out["high_items"] = self.high_items
        if self.branch is not None:
            out["branch"] = self.branch
        return out

    def columns(self):
        extra = ["high"] if self.protocol == "ldplcm" else ["phase1_frequency"]
        return ["rank", "item", "key", "estimate", "frequency"] + extra

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
        if self.protocol == "ldplcm":
            lines.append("high-frequent items (model): %d; frequencies from the model for those, "
                         "the lcm sketch for the rest" % len(self.high_items))
            lines.append("%5s  %-24s %10s  %s" % ("rank", "item", "fraction", "high"))
            for row in self.rows:
                lines.append("%5d  %-24s %10.5f  %s" % (row["rank"], str(row["item"])[:24],
                                                       row["frequency"], "yes" if row["high"] else ""))
        elif self.branch == "flat":
            lines.append("top-%d of the whole domain (svim flat branch: phase 1 scaled by %.4g "
                         "and phase 2 pooled by inverse variance)"
                         % (len(self.rows), self.params.get("ratio", float("nan"))))
            lines.append("%5s  %-24s %10s %12s" % ("rank", "item", "fraction", "phase-1"))
            for row in self.rows:
                lines.append("%5d  %-24s %10.5f %12.5f" % (row["rank"], str(row["item"])[:24],
                                                          row["frequency"], row["phase1_frequency"]))
        else:
            lines.append("top-%d of %d candidates, ranked by their phase-2 estimates"
                         % (len(self.rows), self.params["k_max"]))
            lines.append("%5s  %-24s %10s %12s" % ("rank", "item", "fraction", "phase-1"))
            for row in self.rows:
                lines.append("%5d  %-24s %10.5f %12.5f" % (row["rank"], str(row["item"])[:24],
                                                          row["frequency"], row["phase1_frequency"]))
        return "\n".join(lines)


def _display(doc, keys):
    """Domain items of item keys (the item itself for an int domain)."""
    from .. import protocol
    if doc["domain"]["type"] == "str":
        names = {protocol.item_key(i): i for i in doc["domain"]["items"]}
        return [names.get(int(k), int(k)) for k in keys]
    return [int(k) for k in keys]


def compute_answer(store: Store, name: str, top: int = None) -> ProtocolAnswer:
    """The final answer of a protocol campaign in phase 2 (module docstring). `top`: LDPMiner
    reports its k (at most k_max) items, LDPLCM every domain item by default (in domain
    order) or its `top` largest."""
    from ..protocols import ldplcm, ldpminer
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
        order = np.arange(keys.size)
        if top is not None:
            order = np.argsort(-est, kind="stable")[:int(top)]
        shown = _display(doc, keys)
        answer.high_items = [shown[i] for i in np.flatnonzero(high).tolist()]
        for rank, i in enumerate(order.tolist(), start=1):
            answer.rows.append({"rank": rank, "item": shown[i], "key": int(keys[i]),
                                "estimate": float(est[i]) * sketch2.n,
                                "frequency": float(est[i]), "high": bool(high[i])})
        return answer
    if camp.fallback:
        return _svim_flat_answer(camp, sketch1, sketch2, top)
    cand = np.asarray(camp.phase2["candidates"], np.uint32)
    k = int(proto["k"]) if top is None else int(top)
    params = {"k": int(proto["k"]), "k_max": int(proto["k_max"]), "set_size": proto["set_size"],
              "budget_split": proto["budget_split"]}
    answer = ProtocolAnswer(name, proto["protocol"], reports, params, branch=proto.get("branch"))
    if sketch2.n == 0:
        return answer
    best = ldpminer.final_topk(sketch1, sketch2, k, candidates=cand)
    phase1 = np.asarray(sketch1.estimate(best.keys), np.float64) / max(sketch1.n, 1)
    shown = _display(doc, best.keys)
    for rank, (key, f, f1, item) in enumerate(zip(best.keys.tolist(), best.frequencies.tolist(),
                                                  phase1.tolist(), shown), start=1):
        answer.rows.append({"rank": rank, "item": item, "key": int(key),
                            "estimate": float(f) * sketch2.n, "frequency": float(f),
                            "phase1_frequency": float(f1)})
    answer.warnings += _ldpminer_warnings(camp, answer, sketch1, sketch2)
    return answer


def _svim_flat_answer(camp, sketch1, sketch2, top) -> ProtocolAnswer:
    """svim's flat branch (spec §5.4 `fallback`): every domain item's phase-1 score scaled by
    the ratio of sums and pooled with phase 2's listless estimate by inverse variance
    (`svim.flat_estimates`, the simulation's own computation); the top k with each pooled
    estimate's standard deviation `stddev` (as a fraction)."""
    from ..protocols import svim
    proto = camp.protocol
    keys = np.asarray(cfgmod.domain_keys(camp.config), np.uint32)
    k = min(int(proto["k"]) if top is None else int(top), keys.size)
    params = {"k": int(proto["k"]), "k_max": int(proto["k_max"]), "set_size": proto["set_size"],
              "budget_split": proto["budget_split"]}
    answer = ProtocolAnswer(camp.name, proto["protocol"], [int(sketch1.n), int(sketch2.n)],
                            params, branch="flat")
    if sketch2.n == 0 or sketch1.n == 0:
        return answer
    f, var, ratio = svim.flat_estimates(sketch1, sketch2, keys, int(proto["set_size"]))
    params.update(ratio=float(ratio[0]), ratio_variance=float(ratio[1]))
    f1 = np.asarray(sketch1.estimate(keys), np.float64) / max(sketch1.n, 1)
    order = np.argsort(-f, kind="stable")[:k]
    shown = _display(camp.config, keys[order])
    for rank, (i, item) in enumerate(zip(order.tolist(), shown), start=1):
        answer.rows.append({"rank": rank, "item": item, "key": int(keys[i]),
                            "estimate": float(f[i]) * sketch2.n, "frequency": float(f[i]),
                            "stddev": float(math.sqrt(var[i])),
                            "phase1_frequency": float(f1[i])})
    return answer


def _ldpminer_warnings(camp, answer, sketch1, sketch2) -> list:
    """LDPMiner answers that are mostly noise (issue 10 #4): a fraction of devices holding an
    item cannot leave [0, 1], and a phase-2 frequency within NOISE_SIGMAS noise floors is not
    told apart from a candidate nobody holds."""
    out = []
    freqs = [r["frequency"] for r in answer.rows] + [r["phase1_frequency"] for r in answer.rows]
    if freqs and (max(freqs) > 1.0 or min(freqs) < -0.5):
        out.append("some frequencies lie outside [0, 1] (from %.3g to %.3g), which a share of "
                   "devices cannot: the noise of this fleet size dominates the answer"
                   % (min(freqs), max(freqs)))
    try:
        sd2 = math.sqrt(float(camp.mechanism(2).variance(max(int(sketch2.n), 1))))
    except Exception:  # a phase-2 mechanism without a variance formula: no further check
        return out
    kth = min((r["frequency"] for r in answer.rows), default=None)
    k_max = int(camp.protocol["k_max"])
    if kth is not None and kth < noise_level(sd2, k_max):
        largest = max(r["frequency"] for r in answer.rows)
        if largest < noise_level(sd2, k_max):
            out.append(noise_warning(largest, sd2, int(sketch2.n), k_max))
        else:
            out.append("the k-th item's frequency %.4g is below the noise level %.4g of %d "
                       "candidates with %d phase-2 reports: the lower ranks are mostly noise"
                       % (kth, noise_level(sd2, k_max), k_max, int(sketch2.n)))
    return out


