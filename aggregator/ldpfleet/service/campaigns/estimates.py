"""Frequency estimates of a campaign from its stored sketch, with confidence intervals.

`compute_estimates(store, name, EstimateQuery(...)) -> EstimateTable`:
- raw estimates: `sketch.estimate(keys)` (unbiased counts), as fractions of the n reports;
- interval: estimate ± z·σ_x with σ_x² = `mech.item_variances(n, f̂_x)`, each item's own
  variance evaluated at its estimate clipped to [0, 1] (the plug-in variance: Wang et al. 2017
  §3 / [NH] Eq. 5 for the pure protocols; it grows with the item's frequency, so one f -> 0
  variance for all items under-covers the heavy items) and z the normal quantile of
  `confidence` (CLT over n reports). `stddev_fraction` is the f -> 0 value
  (`mech.variance(n)`), the noise floor of an item nobody holds;
- which rows stand out of the noise: every estimated item is tested (H0: nobody holds it) and
  the list controls its false-discovery rate `fdr` (default 5 %; significance.py: one-sided
  z-tests at each item's f = 0 deviation, Benjamini-Hochberg or -Yekutieli over all the
  estimated items). Each row carries `noise` (true: it does not stand out); a `top` list
  with such rows, or a table where nothing stands out, carries a warning;
- optional consistency post-processing `post.postprocess(method, est, var, n)` over the whole
  domain ([NH] §3), shown next to the raw estimate;
- `threshold="auto"`: only the rows that stand out (their smallest z is `significance.z_cutoff`,
  `threshold` the matching fraction); a number keeps items whose raw estimate exceeds that
  fraction of n;
- `top=K`: the K largest, ranked by the post-processed value if a method is given, else raw;
- `subset=[items]`: a set-value query, the fraction of users whose item is in the set: the sum
  of the estimates, interval ± z·sqrt(Σ σ_x²) (independent per-item errors, [NH] §5.2), and with
  a method the sum of its post-processed values (Post-Pos clips the query answer, [NH] §3.1);
  the table then holds only the subset's rows.

`EstimateTable.to_json()` / `to_csv(file)` / `to_text()` render it.

Two-phase protocol campaigns in phase 2: `answers.compute_answer` (the protocol's final answer);
`query.estimate` is what `ldpfleet estimate` asks for, either of the two.
"""
import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np

from ...core import config as cfgmod
from ...core.errors import ConfigError
from ...core.mechanisms.base import Sketch
from . import significance
from .display import shown
from .significance import DEFAULT_FDR
from ..state.store import Store


def two_sided_z(confidence: float) -> float:
    """z of a two-sided `confidence` interval, finite for every confidence < 1 (isf of the tail,
    not ppf(0.5 + c/2), which rounds to ppf(1) = inf for c within 1e-16 of 1)."""
    from scipy import stats
    return float(stats.norm.isf((1 - confidence) / 2))

MAX_ENUMERATED_DOMAIN = 1 << 22
"""Domains larger than this need an explicit list of items to estimate."""

NO_POST = "none"
"""`--post none` (and `post=none`): no post-processing, whatever the config file says."""


def _csv_value(value):
    """JSON's spelling of booleans (the `noise` column: true/false)."""
    return ("true" if value else "false") if isinstance(value, bool) else value


def rows_csv(columns, rows, stream=None) -> str:
    """CSV of `rows` (dicts) with a header of `columns`, written to `stream` (then "") or
    returned as text; text cells a spreadsheet would run as a formula are quoted
    (`csvcells.cell`: an item "=HYPERLINK(...)" is written '=HYPERLINK(...))."""
    from ...core.csvcells import cell
    out = stream or io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: cell(_csv_value(row.get(k))) for k in columns})
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
    significance: "significance.Significance" = None
    round: dict = None
    """A recurring campaign's round (rounds.round_info: round, rounds, opens, closes, how it
    was chosen), else None; `round_text` says it in the text header."""
    round_text: str = None

    def to_json(self) -> dict:
        out = {"campaign": self.campaign, "phase": self.phase, "mechanism": self.mechanism,
               "epsilon": self.epsilon, "n": self.n, "confidence": self.confidence,
               "stddev_fraction": self.stddev_fraction,
               "stddev_count": None if self.stddev_fraction is None else self.stddev_fraction * self.n,
               "post": self.post, "threshold": self.threshold, "items": self.rows,
               "subset": self.subset, "warnings": self.warnings,
               "significance": self.significance and self.significance.to_json()}
        if self.round is not None:
            out.update(self.round)
        return out

    def columns(self):
        cols = ["rank", "item", "key", "estimate", "frequency", "ci_low", "ci_high"]
        return cols + (["post"] if self.post else []) + ["noise"]

    def to_csv(self, stream=None) -> str:
        return rows_csv(self.columns(), self.rows, stream)

    def to_text(self) -> str:
        lines = ["campaign %s %s (%s, epsilon %g): n = %d reports" % (
            self.campaign, self.round_text or "phase %d" % self.phase,
            self.mechanism, self.epsilon, self.n)]
        if self.n == 0:
            return lines[0] + "; no estimate yet"
        lines.append("noise floor (stddev of an item nobody holds) %.3g of n (%.1f reports); "
                     "%g%% intervals from each item's own variance%s%s" % (
            self.stddev_fraction, self.stddev_fraction * self.n, 100 * self.confidence,
            "; post-processing %s" % self.post if self.post else "",
            "; threshold %.4g" % self.threshold if self.threshold is not None else ""))
        if self.significance is not None:
            lines.append("%d items stand out of the noise (%s); `noise` marks the rows that do "
                         "not" % (self.significance.discoveries, self.significance.describe()))
        head = "%5s  %-24s %12s %10s  %-23s" % ("rank", "item", "estimate", "fraction", "interval")
        lines.append(head + ("  %10s" % "post" if self.post else ""))
        for row in self.rows:
            line = "%5d  %-24s %12.1f %10.5f  [%9.5f, %9.5f]" % (
                row["rank"], shown(row["item"], 24), row["estimate"], row["frequency"],
                row["ci_low"], row["ci_high"])
            line += "  %10.5f" % row["post"] if self.post else ""
            lines.append(line + ("  noise" if row.get("noise") else ""))
        if self.subset is not None:
            q = self.subset
            lines.append("subset of %d items: fraction %.5f [%.5f, %.5f]%s" % (
                len(q["items"]), q["frequency"], q["ci_low"], q["ci_high"],
                "; %s %.5f" % (self.post, q["post"]) if "post" in q else ""))
        return "\n".join(lines)


def _query_keys(campaign, phase, items):
    """(display items, item keys) of the estimate query."""
    from ...core import protocol
    doc = campaign.config
    if items is not None:
        _check_items(campaign, items)
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


def _null_sd(campaign, phase, mech, sketch, freq, items) -> np.ndarray:
    """The f = 0 standard deviation of each estimated item (significance.null_stddevs), the
    other items taken at the whole domain's estimates when `items` restricts the query (a
    sketch's collisions come from every item) and the domain can be enumerated."""
    plug = freq
    if items is not None:
        try:
            _shown, keys = _query_keys(campaign, phase, None)
            plug = np.asarray(sketch.estimate(keys), np.float64) / max(sketch.n, 1)
        except ConfigError:  # too large to enumerate: the listed items only
            plug = freq
    return significance.null_stddevs(mech, sketch.n, plug)[:1].repeat(len(freq))


def _check_items(campaign, items):
    """ConfigError naming `items` for an item outside the campaign's domain (the domain as
    `campaign status` gives it: d items, without the reserved ⊥ of single-item mechanisms)."""
    doc = campaign.config
    size = cfgmod.domain_size(doc)
    if doc["domain"]["type"] == "int":
        bad = [i for i in items if isinstance(i, bool) or not isinstance(i, int)
               or not 0 <= i < size]
        what = "the integers 0-%d" % (size - 1)
    else:
        known = set(doc["domain"]["items"])
        bad = [i for i in items if i not in known]
        what = "its %d string items" % size
    if bad:
        raise ConfigError("items", "%r is not an item of campaign %s's domain of %d items (%s)"
                          % (bad[0], campaign.name, size, what))


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
    from ...core import protocol
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
        from ...core import post as postmod
        out["post"] = float(postmod.query_transform(post)(float(post_values[idx].sum())))
    return out


def load_sketch(store: Store, name: str, phase: int, round: int = None, camp=None):
    """The stored sketch of a campaign phase (a fresh empty one if no report was accepted);
    `round`: that round's sketch of a recurring campaign, stored under phase = round (spec
    §3.4; the campaign's one phase makes every round's sketch)."""
    camp = camp or store.require_campaign(name)
    stored = store.sketch_blob(name, phase if round is None else round)
    if stored is None:
        return camp.mechanism(phase).new_sketch()
    return Sketch.deserialize(stored[1])


@dataclass
class EstimateQuery:
    """What an estimate asks for (module docstring): the phase (default: the open one), a
    post-processing method and its options, the top K, a threshold (a fraction of n, or
    "auto"), the intervals' confidence, the false-discovery rate of the list, `items` to
    restrict the query to (ints or strs) and a `subset` whose set-value query is answered as
    well."""

    phase: int = None
    post: str = None
    post_opts: dict = None
    top: int = None
    threshold: object = None
    confidence: float = 0.95
    items: list = None
    subset: list = None
    fdr: float = DEFAULT_FDR
    round: int = None
    """A recurring campaign's round (spec §3.4), checked by rounds.py; None: one-shot."""


def compute_estimates(store: Store, name: str, query: EstimateQuery = None,
                      camp=None) -> EstimateTable:
    """The estimate table of campaign `name` for `query` (module docstring); `camp` the
    campaign row if the caller has it (a series reads many rounds with one)."""
    q = query or EstimateQuery()
    phase, post, top, threshold = q.phase, q.post, q.top, q.threshold
    confidence, items, post_opts, subset = q.confidence, q.items, q.post_opts, q.subset
    level = significance.check_level(q.fdr)
    camp = camp or store.require_campaign(name)
    phase = camp.phase if phase is None else int(phase)
    if not 1 <= phase <= camp.phases:
        raise ConfigError("phase", "campaign %s has no phase %d" % (name, phase))
    if phase > camp.phase:
        raise ConfigError("phase", "campaign %s has not opened phase %d yet" % (name, phase))
    if not 0 < confidence < 1:
        raise ConfigError("confidence", "must be in (0, 1), got %r" % confidence)
    mech = camp.mechanism(phase)
    sketch = load_sketch(store, name, phase, q.round, camp)
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
        from ...core import post as postmod
        if items is not None:
            raise ConfigError("post", "post-processing needs the whole domain, not a list of items")
        opts = dict(post_opts or {})
        if post == "mle-apx" and "p" not in opts and hasattr(mech, "support_pq"):
            p, q = mech.support_pq()
            opts.update(p=float(p), q=float(q))
        post_values = np.asarray(postmod.postprocess(post, freq, var, n, **opts), dtype=np.float64)
        value = post_values
    noise, sig = significance.discoveries(freq, _null_sd(camp, phase, mech, sketch, freq, items),
                                          level, mech.estimate_dependence)
    table.significance = sig
    if threshold is not None:
        table.threshold = sig.z_cutoff * sd if threshold == "auto" else float(threshold)
    sds = item_stddevs(mech, freq, n)
    if sig.discoveries == 0 and freq.size:
        table.warnings.append(significance.nothing_stands_out(float(np.max(freq)), sd, n, sig))
    if subset is not None:
        table.subset = _subset_query(subset, keys, freq, post_values, post, sds, z)
    order = np.arange(len(keys))
    if top is not None or table.threshold is not None:
        order = np.argsort(-value, kind="stable")
    if threshold == "auto":
        order = order[~noise[order]]
    elif table.threshold is not None:
        order = order[freq[order] > table.threshold]
    if top is not None:
        order = order[:int(top)]
    for rank, i in enumerate(order.tolist(), start=1):
        row = {"rank": rank, "item": shown[i], "key": int(keys[i]), "estimate": float(counts[i]),
               "frequency": float(freq[i]), "ci_low": float(freq[i] - z * sds[i]),
               "ci_high": float(freq[i] + z * sds[i])}
        if post_values is not None:
            row["post"] = float(post_values[i])
        row["noise"] = bool(noise[i])
        table.rows.append(row)
    if subset is not None:
        # a set-value query answers about its items: show those rows (and the sum), not the
        # whole domain; ranks stay those of the full ordering
        wanted = set(table.subset["items"])
        table.rows = [row for row in table.rows if row["item"] in wanted]
    elif top is not None:
        warning = significance.noise_rows_warning(table.rows, sig)
        if warning:
            table.warnings.append(warning)
    return table


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
