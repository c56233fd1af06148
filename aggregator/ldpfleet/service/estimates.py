"""Frequency estimates of a campaign from its stored sketch, with confidence intervals.

`compute_estimates(store, name, EstimateQuery(...)) -> EstimateTable`:
- raw estimates: `sketch.estimate(keys)` (unbiased counts), as fractions of the n reports;
- interval: estimate ± z·σ_x with σ_x² = `mech.item_variances(n, f̂_x)`, each item's own
  variance evaluated at its estimate clipped to [0, 1] (the plug-in variance: Wang et al. 2017
  §3 / [NH] Eq. 5 for the pure protocols; it grows with the item's frequency, so one f -> 0
  variance for all items under-covers the heavy items) and z the normal quantile of
  `confidence` (CLT over n reports). `stddev_fraction` is the f -> 0 value
  (`mech.variance(n)`), the noise floor of an item nobody holds;
- optional consistency post-processing `post.postprocess(method, est, var, n)` over the whole
  domain ([NH] §3), shown next to the raw estimate;
- `threshold="auto"`: keep items whose raw estimate exceeds T = Φ⁻¹(1 − α/d)·σ with α = 2
  ([NH] §3.1, Eq. 9: about two false positives among d items that all have frequency 0); a
  number keeps items whose raw estimate exceeds that fraction of n;
- `top=K`: the K largest, ranked by the post-processed value if a method is given, else raw;
- `subset=[items]`: a set-value query, the fraction of users whose item is in the set: the sum
  of the estimates, interval ± z·sqrt(Σ σ_x²) (independent per-item errors, [NH] §5.2), and with
  a method the sum of its post-processed values (Post-Pos clips the query answer, [NH] §3.1);
  the table then holds only the subset's rows.

`EstimateTable.to_json()` / `to_csv(file)` / `to_text()` render it.

Two-phase protocol campaigns in phase 2: `compute_answer(store, name) -> ProtocolAnswer`, the
protocol's final answer (LDPMiner: `ldpminer.final_topk` over the candidates, top-k with
frequencies; LDPLCM: `ldplcm.estimate_frequencies`, Alg. 4, with the high-frequent flag).
"""
import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np

from .. import config as cfgmod
from ..errors import ConfigError
from ..mechanisms.base import Sketch
from .store import Store


def two_sided_z(confidence: float) -> float:
    """z of a two-sided `confidence` interval, finite for every confidence < 1 (isf of the tail,
    not ppf(0.5 + c/2), which rounds to ppf(1) = inf for c within 1e-16 of 1)."""
    from scipy import stats
    return float(stats.norm.isf((1 - confidence) / 2))

MAX_ENUMERATED_DOMAIN = 1 << 22
"""Domains larger than this need an explicit list of items to estimate."""

DEFAULT_ALPHA = 2.0
"""[NH] §3.1, Eq. 9: alpha = 2 expected false positives (post.DEFAULT_CUT_ALPHA)."""



def rows_csv(columns, rows, stream=None) -> str:
    """CSV of `rows` (dicts) with a header of `columns`, written to `stream` (then "") or
    returned as text."""
    out = stream or io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k) for k in columns})
    return out.getvalue() if stream is None else ""

@dataclass
class EstimateTable:
    campaign: str
    phase: int
    mechanism: str
    epsilon: float
    n: int
    confidence: float
    stddev_fraction: float
    post: str = None
    threshold: float = None
    rows: list = field(default_factory=list)
    subset: dict = None
    warnings: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"campaign": self.campaign, "phase": self.phase, "mechanism": self.mechanism,
                "epsilon": self.epsilon, "n": self.n, "confidence": self.confidence,
                "stddev_fraction": self.stddev_fraction,
                "stddev_count": None if self.stddev_fraction is None else self.stddev_fraction * self.n,
                "post": self.post, "threshold": self.threshold, "items": self.rows,
                "subset": self.subset, "warnings": self.warnings}

    def columns(self):
        cols = ["rank", "item", "key", "estimate", "frequency", "ci_low", "ci_high"]
        return cols + (["post"] if self.post else [])

    def to_csv(self, stream=None) -> str:
        return rows_csv(self.columns(), self.rows, stream)

    def to_text(self) -> str:
        lines = ["campaign %s phase %d (%s, epsilon %g): n = %d reports" % (
            self.campaign, self.phase, self.mechanism, self.epsilon, self.n)]
        if self.n == 0:
            return lines[0] + "; no estimate yet"
        lines.append("noise floor (stddev of an item nobody holds) %.3g of n (%.1f reports); "
                     "%g%% intervals from each item's own variance%s%s" % (
            self.stddev_fraction, self.stddev_fraction * self.n, 100 * self.confidence,
            "; post-processing %s" % self.post if self.post else "",
            "; threshold %.4g" % self.threshold if self.threshold is not None else ""))
        head = "%5s  %-24s %12s %10s  %-23s" % ("rank", "item", "estimate", "fraction", "interval")
        lines.append(head + ("  %10s" % "post" if self.post else ""))
        for row in self.rows:
            line = "%5d  %-24s %12.1f %10.5f  [%9.5f, %9.5f]" % (
                row["rank"], str(row["item"])[:24], row["estimate"], row["frequency"],
                row["ci_low"], row["ci_high"])
            lines.append(line + ("  %10.5f" % row["post"] if self.post else ""))
        if self.subset is not None:
            q = self.subset
            lines.append("subset of %d items: fraction %.5f [%.5f, %.5f]%s" % (
                len(q["items"]), q["frequency"], q["ci_low"], q["ci_high"],
                "; %s %.5f" % (self.post, q["post"]) if "post" in q else ""))
        return "\n".join(lines)


def _query_keys(campaign, phase, items):
    """(display items, item keys) of the estimate query."""
    from .. import protocol
    doc = campaign.config
    if items is not None:
        shown = list(items)
        return shown, [protocol.item_key(i) for i in shown]
    if phase == 2 and campaign.phase2 and "candidates" in campaign.phase2:
        keys = list(campaign.phase2["candidates"])
        if doc["domain"]["type"] == "str":
            names = {protocol.item_key(i): i for i in doc["domain"]["items"]}
            return [names.get(k, k) for k in keys], keys
        return keys, keys
    # single-item mechanisms estimate the reserved item ⊥ too, shown as "other" (spec §1)
    other = cfgmod.with_other(doc["phases"][phase - 1]["mechanism"])
    keys = None
    if doc["domain"]["type"] == "str":
        shown, keys = list(doc["domain"]["items"]), cfgmod.domain_keys(doc, other=other)
    else:
        size = doc["domain"]["size"]
        if size > MAX_ENUMERATED_DOMAIN:
            raise ConfigError("items", "domain of %d items is too large to enumerate; pass items"
                              % size)
        shown = list(range(size))
        keys = cfgmod.domain_keys(doc, other=other)
    if other:
        shown.append(protocol.OTHER_LABEL)
    return shown, keys


def noise_level(floor_sd: float, d: int) -> float:
    """The largest estimate noise alone produces among d items, with a margin: σ·(sqrt(2 ln d)
    + 1) (the expected maximum of d normal errors is about σ·sqrt(2 ln d); pure noise exceeds
    this level with probability about d·P(Z > sqrt(2 ln d) + 1), 0.2 % at d = 256)."""
    return floor_sd * (math.sqrt(2 * math.log(max(d, 2))) + 1)


def reports_needed(floor_sd: float, n: int, d: int, frequency: float) -> int:
    """Reports at which an item of `frequency` clears the noise level of d items (σ shrinks as
    1/sqrt(n))."""
    return int(math.ceil(n * (noise_level(floor_sd, d) / frequency) ** 2))


def noise_warning(largest: float, floor_sd: float, n: int, d: int) -> str:
    """The warning when even the largest estimate is below the noise level of d items, with the
    fleet sizes that would resolve an item held by 5 % and by 1 % of the devices."""
    return ("no estimate stands out of the noise (largest %.4g; noise alone reaches about %.4g "
            "among %d items, sigma %.4g as fractions of the %d reports): these numbers are "
            "mostly noise. At this epsilon about %d reports resolve an item held by 5 %% of the "
            "devices, %d one held by 1 %% (or raise epsilon, or pick a mechanism with less "
            "variance: `ldpfleet plan`)."
            % (largest, noise_level(floor_sd, d), d, floor_sd, n,
               reports_needed(floor_sd, n, d, 0.05), reports_needed(floor_sd, n, d, 0.01)))


def item_stddevs(mech, freq, n: int) -> np.ndarray:
    """Each item's standard deviation (fraction of n) from its plug-in variance: the
    mechanism's exact per-item variance at the estimate clipped to [0, 1]. Mechanisms whose
    variance needs more than the frequency (LDPLCM's high/low split) fall back to the f -> 0
    value for every item."""
    f = np.clip(np.asarray(freq, dtype=np.float64), 0.0, 1.0)
    try:
        var = np.asarray(mech.item_variances(n, f), dtype=np.float64)
        if var.shape != f.shape:
            raise ValueError("per-item variances of another shape")
    except (TypeError, ValueError, NotImplementedError):
        var = np.full(f.shape, float(mech.variance(n)))
    return np.sqrt(np.maximum(var, 0.0))


def _subset_query(subset, keys, freq, post_values, post, sd, z) -> dict:
    """Set-value query over `subset` (items of the campaign's domain)."""
    from .. import protocol
    index = {k: i for i, k in enumerate(keys)}
    wanted = list(dict.fromkeys(subset))
    missing = [item for item in wanted if protocol.item_key(item) not in index]
    if not wanted or missing:
        raise ConfigError("subset", "items not in the estimated domain: %r" % (missing[:5],))
    idx = np.array([index[protocol.item_key(item)] for item in wanted])
    total = float(freq[idx].sum())
    half = z * math.sqrt(float(np.sum(np.asarray(sd)[idx] ** 2)))  # independent per-item errors
    out = {"items": wanted, "frequency": total, "ci_low": total - half, "ci_high": total + half}
    if post_values is not None:
        from .. import post as postmod
        out["post"] = float(postmod.query_transform(post)(float(post_values[idx].sum())))
    return out


def load_sketch(store: Store, name: str, phase: int):
    """The stored sketch of a campaign phase (a fresh empty one if no report was accepted)."""
    camp = store.require_campaign(name)
    stored = store.sketch_blob(name, phase)
    if stored is None:
        return camp.mechanism(phase).new_sketch()
    return Sketch.deserialize(stored[1])


@dataclass
class EstimateQuery:
    """What an estimate asks for (module docstring): the phase (default: the open one), a
    post-processing method and its options, the top K, a threshold (a fraction of n, or
    "auto"), the intervals' confidence, `items` to restrict the query to (ints or strs) and a
    `subset` whose set-value query is answered as well."""

    phase: int = None
    post: str = None
    post_opts: dict = None
    top: int = None
    threshold: object = None
    confidence: float = 0.95
    items: list = None
    subset: list = None


def compute_estimates(store: Store, name: str, query: EstimateQuery = None) -> EstimateTable:
    """The estimate table of campaign `name` for `query` (module docstring)."""
    from scipy import stats
    q = query or EstimateQuery()
    phase, post, top, threshold = q.phase, q.post, q.top, q.threshold
    confidence, items, post_opts, subset = q.confidence, q.items, q.post_opts, q.subset
    camp = store.require_campaign(name)
    phase = camp.phase if phase is None else int(phase)
    if not 1 <= phase <= camp.phases:
        raise ConfigError("phase", "campaign %s has no phase %d" % (name, phase))
    if phase > camp.phase:
        raise ConfigError("phase", "campaign %s has not opened phase %d yet" % (name, phase))
    if not 0 < confidence < 1:
        raise ConfigError("confidence", "must be in (0, 1), got %r" % confidence)
    mech = camp.mechanism(phase)
    sketch = load_sketch(store, name, phase)
    n = sketch.n
    table = EstimateTable(campaign=name, phase=phase, mechanism=mech.name, epsilon=mech.eps, n=n,
                          confidence=confidence, stddev_fraction=None, post=post)
    if n == 0:
        return table
    shown, keys = _query_keys(camp, phase, items)
    counts = np.asarray(sketch.estimate(keys), dtype=np.float64)
    freq = counts / n
    var = float(mech.variance(n))
    sd = math.sqrt(var)
    z = two_sided_z(confidence)
    table.stddev_fraction = sd
    value = freq
    post_values = None
    if post:
        from .. import post as postmod
        if items is not None:
            raise ConfigError("post", "post-processing needs the whole domain, not a list of items")
        opts = dict(post_opts or {})
        if post == "mle-apx" and "p" not in opts and hasattr(mech, "support_pq"):
            p, q = mech.support_pq()
            opts.update(p=float(p), q=float(q))
        post_values = np.asarray(postmod.postprocess(post, freq, var, n, **opts), dtype=np.float64)
        value = post_values
    if threshold is not None:
        if threshold == "auto":
            table.threshold = float(stats.norm.ppf(1 - DEFAULT_ALPHA / len(keys))) * sd
        else:
            table.threshold = float(threshold)
    sds = item_stddevs(mech, freq, n)
    if items is None and freq.size and float(np.max(freq)) < noise_level(sd, len(keys)):
        table.warnings.append(noise_warning(float(np.max(freq)), sd, n, len(keys)))
    if subset is not None:
        table.subset = _subset_query(subset, keys, freq, post_values, post, sds, z)
    order = np.arange(len(keys))
    if top is not None or table.threshold is not None:
        order = np.argsort(-value, kind="stable")
    if table.threshold is not None:
        order = order[freq[order] > table.threshold]
    if top is not None:
        order = order[:int(top)]
    for rank, i in enumerate(order.tolist(), start=1):
        row = {"rank": rank, "item": shown[i], "key": int(keys[i]), "estimate": float(counts[i]),
               "frequency": float(freq[i]), "ci_low": float(freq[i] - z * sds[i]),
               "ci_high": float(freq[i] + z * sds[i])}
        if post_values is not None:
            row["post"] = float(post_values[i])
        table.rows.append(row)
    if subset is not None:
        # a set-value query answers about its items: show those rows (and the sum), not the
        # whole domain (issue 10 #7); ranks stay those of the full ordering
        wanted = set(table.subset["items"])
        table.rows = [row for row in table.rows if row["item"] in wanted]
    return table


# --- two-phase protocols' final answers ---------------------------------------------------------

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


def parse_threshold(text):
    """'auto', a fraction in [0, 1) (from text), or None; ConfigError naming `threshold`."""
    if text is None or text == "auto":
        return text
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0 <= value < 1:
        raise ConfigError("threshold", "'auto' or a frequency in [0, 1), got %r" % text)
    return value


def parse_items(raw, domain_type: str):
    """Item strings -> the campaign's items: ints unless the domain is of strings."""
    if raw is None:
        return None
    raw = [str(x).strip() for x in raw if str(x).strip()]
    if domain_type == "str":
        return raw
    try:
        return [int(x) for x in raw]
    except ValueError:
        return raw


def estimate(store: Store, name: str, query: EstimateQuery):
    """What `ldpfleet estimate` (and the HTTP API) answers: a two-phase protocol campaign in
    phase 2 without an explicit phase gives the protocol's answer (`compute_answer`), anything
    else the estimate table (`compute_estimates`). `query.items`/`subset` are item strings."""
    camp = store.require_campaign(name)
    if camp.protocol and camp.phase == 2 and query.phase is None:
        for flag in ("post", "threshold", "items", "subset"):
            if getattr(query, flag):
                raise ConfigError(flag, "%s applies to one phase's estimates; ask for phase 1 "
                                        "or 2" % flag)
        return compute_answer(store, name, top=query.top)
    kind = camp.config["domain"]["type"]
    return compute_estimates(store, name, EstimateQuery(
        phase=query.phase, post=query.post, post_opts=query.post_opts, top=query.top,
        threshold=parse_threshold(query.threshold), confidence=query.confidence,
        items=parse_items(query.items, kind), subset=parse_items(query.subset, kind)))
