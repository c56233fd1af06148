"""Numeric campaigns in the service (protocol_spec/v2 §1.1, §3.3): the `--domain` syntax of a
numeric range, the expected error `campaign status` shows, and what `ldpfleet estimate` (and the
HTTP API) answers for `duchi`, `pm`, `hm` and `sw`.

Means (`duchi`, `pm`, `hm`): the unbiased mean of the per-report estimates of t in [-1, 1]
(the sketch's `mean()`), mapped to the metric's units. Its interval is estimate +- z sqrt(V / n)
with V the mechanism's largest per-report variance over the grid, computed from the realised
(integer-threshold) channel: Duchi's one-bit C^2 - t^2 (Duchi, Jordan, Wainwright, "Minimax
optimal procedures for locally private estimation", JASA 2018; restated as Eq. 3 in Wang et al.,
"Collecting and analyzing multidimensional data with local differential privacy", ICDE 2019),
largest at t = 0; the Piecewise Mechanism's t^2 / (e^(eps/2) - 1) + (e^(eps/2) + 3) / (3
(e^(eps/2) - 1)^2) (Wang et al. Lemma 1), largest at |t| = 1; the Hybrid Mechanism's mixture of
the two (Wang et al. §IV-C), whose variance is linear in t^2, so its largest is at t = 0 or
|t| = 1. Using the largest V makes the interval hold whatever the devices' values are (it is
conservative where they are not at the worst point). hm with d metrics of which a report
carries k (Wang et al. §IV-D): a metric's mean rests on the n_a reports that carry it, and which
devices carry it adds at most (1 - k/d) var(t) / n_a <= (1 - k/d) / n_a (var t <= 1 on [-1, 1]).

Distributions (`sw`, Li et al., "Estimating numerical distributions under local differential
privacy", SIGMOD 2020): the histogram over the B bins by EMS (§5), with per-bin, quantile and
mean intervals from the sketch's percentile bootstrap (the reports' output counts resampled,
EMS again). These carry the sampling and perturbation noise; EMS's smoothing bias is not in
them (said in every answer).
"""
import copy
import math
import threading
from decimal import Decimal, InvalidOperation

import numpy as np

from ...core import config as cfgmod
from ...core.campaign_rules import DECIMALS_MAX
from ...core.errors import ConfigError
from ...core.mechanisms.numeric import NumericDomain

MEAN_MECHANISMS = ("duchi", "pm", "hm")
QUANTILES = (0.25, 0.5, 0.75)
SW_INTERVAL = ("percentile bootstrap over the reports (output counts resampled, EMS again): "
               "sampling and perturbation noise, not EMS's smoothing bias")
MEAN_INTERVAL = ("estimate +- z sqrt(V / n), V the mechanism's largest per-report variance over "
                 "the grid (duchi: Duchi et al. JASA 2018 / Wang et al. ICDE 2019 Eq. 3; pm: "
                 "Wang et al. Lemma 1; hm: their mixture, §IV-C, plus the metric sampling's "
                 "share, §IV-D)")


def is_numeric(doc: dict) -> bool:
    return doc["domain"]["type"] in cfgmod.NUMERIC_DOMAINS


# --- the --domain syntax -----------------------------------------------------------------------

def _decimal(text: str, what: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ConfigError("domain", "%s %r is not a number" % (what, text)) from None
    if not value.is_finite():
        raise ConfigError("domain", "%s %r is not a finite number" % (what, text))
    if value and value.adjusted() > 15:  # past VALUE_MAX: refused before any scaling
        raise ConfigError("domain", "%s %r is out of range (|x| < 10^16)" % (what, text[:40]))
    return value


def parse_range(text: str) -> dict:
    """`LO..HI[:STEP]` -> a `range` domain (spec §1.1): integers in units of 10^-k, k the most
    decimal places any of the three numbers is written with (at most 9); STEP defaults to one
    unit of that place. `-40.0..85.0:0.1` is {"lo": -400, "hi": 850, "resolution": 1,
    "decimals": 1} (1251 points)."""
    body, _, step_text = text.partition(":")
    lo_text, sep, hi_text = body.partition("..")
    if not sep:
        raise ConfigError("domain", "a numeric range is LO..HI[:STEP], got %r" % text)
    numbers = [_decimal(lo_text, "lo"), _decimal(hi_text, "hi")]
    if step_text:
        numbers.append(_decimal(step_text, "step"))
    places = max(max(-n.as_tuple().exponent, 0) for n in numbers)
    if places > DECIMALS_MAX:
        raise ConfigError("domain.range", "at most %d decimal places, got %d"
                          % (DECIMALS_MAX, places))
    scale = Decimal(10) ** places
    lo, hi = (int(n * scale) for n in numbers[:2])
    res = int(numbers[2] * scale) if step_text else 1
    if res < 1:
        raise ConfigError("domain.resolution", "the step must be positive, got %r" % step_text)
    domain = {"type": "range", "lo": lo, "hi": hi, "resolution": res}
    if places:
        domain["decimals"] = places
    cfgmod.check_numeric_domain(domain)
    return domain


def parse_numeric_domain(text: str):
    """A numeric `--domain`: a JSON `range`/`ranges` object of spec §1.1, or `LO..HI[:STEP]`;
    None when `text` is neither (an item domain)."""
    import json
    text = text.strip()
    if text.startswith("{"):
        try:
            domain = json.loads(text)
        except ValueError as exc:
            raise ConfigError("domain", "not a JSON domain object: %s" % exc) from None
        if not isinstance(domain, dict) or domain.get("type") not in cfgmod.NUMERIC_DOMAINS:
            raise ConfigError("domain.type", "a JSON domain is a 'range' or 'ranges' object")
        cfgmod.check_numeric_domain(domain)
        return domain
    if ".." in text:
        return parse_range(text)
    return None


def describe_domain(domain: dict) -> str:
    """`-40.0..85.0 by 0.1 (1251 points)` / `3 metrics on 1001 points`."""
    n = cfgmod.check_numeric_domain(domain)
    if domain["type"] == "ranges":
        return "%d metrics (%s) on %d points" % (
            len(domain["metrics"]), ", ".join(_metric_label(m, i) for i, m in
                                              enumerate(domain["metrics"])), n)
    dec = domain.get("decimals", 0)
    fmt = "%%.%df" % dec
    step = domain["resolution"] / 10 ** dec
    return "%s..%s by %s%s (%d points)" % (fmt % (domain["lo"] / 10 ** dec),
                                          fmt % (domain["hi"] / 10 ** dec), fmt % step,
                                          " " + domain["unit"] if "unit" in domain else "", n)


def _metric_label(m: dict, i: int) -> str:
    dec = m.get("decimals", 0)
    return "%s %g..%g%s" % (m.get("name") or "metric %d" % i, m["lo"] / 10 ** dec,
                            m["hi"] / 10 ** dec, " " + m["unit"] if "unit" in m else "")


# --- per-report variance and expected error ---------------------------------------------------

def worst_report_variance(mech) -> float:
    """The largest per-report variance of one carried metric's estimate of t over the grid,
    from the realised channel (module docstring): duchi C^2 (t = 0); pm and hm the larger of
    t = 0 and |t| = 1 (their exact variances are ~linear in t^2)."""
    if mech.name == "duchi":
        return float(mech.scale ** 2)
    n = mech.domain_size
    return float(np.max(mech.report_variance([0, (n - 1) // 2, n - 1])))


def sampling_share(mech) -> float:
    """hm: the most the choice of which devices carry a metric adds to one report's variance,
    (1 - k/d) var(t) <= 1 - k/d; 0 for a mechanism every report of which carries the metric."""
    if mech.name != "hm":
        return 0.0
    return 1.0 - mech.sampled / mech.metrics


def mean_stddev(mech, reports: int) -> float:
    """Standard deviation (t units) of a metric's mean over `reports` reports that carry it."""
    if reports <= 0:
        return math.nan
    return math.sqrt((worst_report_variance(mech) + sampling_share(mech)) / reports)


def expected_error(mech, domain: dict, n: int, confidence: float) -> dict:
    """`campaign status`'s expected error of a numeric phase: for a mean, the half-width of its
    interval in the metric's units (the first metric's; hm: with n k / d reports carrying it);
    for sw, the number of bins."""
    from .estimates import two_sided_z
    out = {"n": n, "confidence": confidence, "stddev_fraction": None, "stddev_count": None,
           "ci_halfwidth_count": None}
    if mech.name == "sw":
        out["bins"] = mech.bins
        return out
    if n <= 0:
        out["mean_ci_halfwidth"] = None
        return out
    carried = n * mech.sampled / mech.metrics if mech.name == "hm" else n
    sd = mean_stddev(mech, carried)
    dom = NumericDomain(domain)
    lo, hi, dec = dom.metrics[0]
    out["mean_stddev"] = sd * (hi - lo) / 2 / 10 ** dec  # t units -> the metric's units
    out["mean_ci_halfwidth"] = two_sided_z(confidence) * out["mean_stddev"]
    return out

# --- estimates ---------------------------------------------------------------------------------

class NumericEstimate:
    """What `ldpfleet estimate` answers for a numeric campaign: `means` (duchi, pm, hm: one per
    metric) or, for sw, `histogram`, `quantiles` and `means` (the histogram's mean). Rendered
    like the other estimates: `to_json()` (the estimate document with `items: []` and a
    `numeric` object), `to_csv(stream)`, `to_text()`; `warnings` go to stderr."""

    def __init__(self, campaign: str, phase: int, mech, n: int, confidence: float, domain: dict):
        self.campaign, self.phase, self.mech, self.n = campaign, phase, mech, n
        self.confidence, self.domain = confidence, domain
        self.means, self.histogram, self.quantiles, self.warnings = [], None, None, []
        self.interval = SW_INTERVAL if mech.name == "sw" else MEAN_INTERVAL
        self.per_report_variance = None

    def to_json(self) -> dict:
        numeric = {"domain": self.domain, "range": describe_domain(self.domain),
                   "interval": self.interval, "means": self.means,
                   "per_report_variance": self.per_report_variance}
        if self.histogram is not None:
            numeric.update(histogram=self.histogram, quantiles=self.quantiles)
        return {"campaign": self.campaign, "phase": self.phase, "mechanism": self.mech.name,
                "epsilon": self.mech.eps, "n": self.n, "confidence": self.confidence,
                "items": [], "warnings": self.warnings, "numeric": numeric}

    def to_csv(self, stream=None) -> str:
        from .estimates import rows_csv
        if self.histogram is not None:
            return rows_csv(["bin", "low", "high", "fraction", "ci_low", "ci_high"],
                            self.histogram, stream)
        return rows_csv(["metric", "name", "reports", "mean", "ci_low", "ci_high", "stddev"],
                        self.means, stream)

    def to_text(self) -> str:
        lines = ["campaign %s phase %d (%s, epsilon %g): n = %d reports; domain %s" % (
            self.campaign, self.phase, self.mech.name, self.mech.eps, self.n,
            describe_domain(self.domain))]
        if self.n == 0:
            return lines[0] + "; no estimate yet"
        lines.append("%g%% intervals: %s" % (100 * self.confidence, self.interval))
        for m in self.means:
            lines.append("%-12s mean %.6g  [%.6g, %.6g]  (%d reports)" % (
                m["name"] or "metric %d" % m["metric"], m["mean"], m["ci_low"], m["ci_high"],
                m["reports"]))
        for q in self.quantiles or ():
            lines.append("quantile %-4g %.6g  [%.6g, %.6g]" % (q["q"], q["value"], q["ci_low"],
                                                              q["ci_high"]))
        if self.histogram is not None:
            lines.append("%5s  %-27s %9s  %-21s" % ("bin", "range", "fraction", "interval"))
            for b in self.histogram:
                lines.append("%5d  [%11.6g, %11.6g) %9.5f  [%8.5f, %8.5f]" % (
                    b["bin"], b["low"], b["high"], b["fraction"], b["ci_low"], b["ci_high"]))
        return "\n".join(lines)


def _metric_names(domain: dict) -> list:
    metrics = domain["metrics"] if domain["type"] == "ranges" else [domain]
    return [m.get("name", "") for m in metrics]


_CACHE = {}
_CACHE_LOCK = threading.Lock()
CACHE_SIZE = 16
"""Answers of unchanged sketches: sw's bootstrap takes seconds at 1024 bins, and the dashboard
asks again every few seconds."""


def compute_numeric(store, name: str, phase: int = None, confidence: float = 0.95,
                    replicates: int = None) -> NumericEstimate:
    """The numeric estimate of campaign `name` (module docstring). `replicates`: the sw
    bootstrap's (default the sketch's)."""
    from .estimates import load_sketch
    camp = store.require_campaign(name)
    phase = camp.phase if phase is None else int(phase)
    if not 1 <= phase <= camp.phases:
        raise ConfigError("phase", "campaign %s has no phase %d" % (name, phase))
    if not 0 < confidence < 1:
        raise ConfigError("confidence", "must be in (0, 1), got %r" % confidence)
    mech = camp.mechanism(phase)
    domain = camp.config["domain"]
    stored = store.sketch_blob(name, phase)
    if stored is None:
        return NumericEstimate(name, phase, mech, 0, confidence, domain)
    import hashlib
    key = (name, camp.campaign_id, phase, confidence, replicates,
           hashlib.sha256(stored[1]).digest())
    with _CACHE_LOCK:  # the API answers on a thread pool
        answer = _CACHE.get(key)
    if answer is None:  # computed outside the lock: two threads may both compute it, once
        answer = _answer(load_sketch(store, name, phase),
                         NumericEstimate(name, phase, mech, stored[0], confidence, domain),
                         replicates)
        with _CACHE_LOCK:
            while len(_CACHE) >= CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = answer
    return _fresh(answer)


def _fresh(out):
    """A copy of a cached answer the caller may change (its warnings), sharing the mechanism."""
    new = NumericEstimate(out.campaign, out.phase, out.mech, out.n, out.confidence, out.domain)
    new.means, new.histogram, new.quantiles = (copy.deepcopy(out.means),
                                               copy.deepcopy(out.histogram),
                                               copy.deepcopy(out.quantiles))
    new.warnings, new.per_report_variance = list(out.warnings), out.per_report_variance
    return new


def _answer(sketch, out, replicates):
    """Fill `out` (NumericEstimate) from the sketch."""
    from .estimates import two_sided_z
    mech, domain, confidence = out.mech, out.domain, out.confidence
    out.n = sketch.n
    if sketch.n == 0:
        return out
    dom = NumericDomain(domain)
    names = _metric_names(domain)
    if mech.name == "sw":
        _sw_estimate(out, mech, sketch, dom, confidence, replicates)
        return out
    out.per_report_variance = worst_report_variance(mech) + sampling_share(mech)
    z = two_sided_z(confidence)
    estimates = sketch.means(confidence) if mech.name == "hm" else [sketch.mean(confidence)]
    for a, est in enumerate(estimates):
        sd = mean_stddev(mech, est.n)
        lo, hi, dec = dom.metrics[a]
        unit = (hi - lo) / 2 / 10 ** dec
        value = (lambda t: float(dom.value((dom.points - 1) * (t + 1) / 2, a)))
        row = {"metric": a, "name": names[a], "reports": int(est.n)}
        if est.n == 0:
            row.update(mean=None, ci_low=None, ci_high=None, stddev=None)
            out.warnings.append("metric %d has no report yet" % a)
        else:
            row.update(mean=value(est.t), ci_low=value(est.t - z * sd),
                       ci_high=value(est.t + z * sd), stddev=sd * unit)
        out.means.append(row)
    return out


def _sw_estimate(out, mech, sketch, dom, confidence, replicates):
    from ...core.mechanisms import sw as swmod
    reps = swmod.BOOTSTRAP if replicates is None else int(replicates)
    theta, boot = sketch.bootstrap(reps)
    alpha = (1 - confidence) / 2
    low = np.quantile(boot, alpha, axis=1)
    high = np.quantile(boot, 1 - alpha, axis=1)
    edges = [float(v) for v in dom.value(mech.bin_edges())]
    out.histogram = [{"bin": i, "low": edges[i], "high": edges[i + 1], "fraction": float(theta[i]),
                      "ci_low": float(low[i]), "ci_high": float(high[i])}
                     for i in range(mech.bins)]
    conv = (lambda v: float(dom.value(v)))
    out.quantiles = [{"q": q, "value": conv(v), "ci_low": conv(lo), "ci_high": conv(hi)}
                     for q, v, lo, hi in sketch.quantiles(QUANTILES, confidence, reps)]
    mean, lo, hi = sketch.mean(confidence, reps)
    out.means = [{"metric": 0, "name": _metric_names(out.domain)[0], "reports": int(sketch.n),
                  "mean": conv(mean), "ci_low": conv(lo), "ci_high": conv(hi), "stddev": None}]
