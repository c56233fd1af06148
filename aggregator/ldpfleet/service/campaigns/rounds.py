"""Recurring campaigns in the service (protocol_spec/v2 §3.4): where each round's reports live.

STORAGE CONTRACT. The ingest folds a recurring campaign's reports round by round: the `phase`
column of the `sketches`, `seen`, `seen_log` and `login_devices` tables holds the ROUND number
(1..R) for such a campaign — its storage "slot" is the round — so every round has its own
sketch (`Store.sketch_blob(name, round)`; the workers' partials merge by addition) and dedupe is
per (campaign, round, device) with the one-shot machinery. A one-shot campaign's slots are its
phases. Each round's sketch is the phase-1 mechanism's (`slot_mechanism`), fed the reports in
their one-shot form (core.schedule.split_round: flags 0, no round field).

Readers (estimate, the HTTP API, the dashboard, Prometheus) call these helpers instead of
looking at the config themselves; the rules are core/schedule.py's.

The read side: recurring campaigns on the read side (protocol_spec/v2 §3.4 "Estimation"): one round's
estimate and the series of rounds.

Storage (what the ingest writes): a recurring campaign has one phase, a memoised mechanism
(§3.2), and round r's reports are folded into that phase's sketch stored under phase = r (per
worker partials merged by addition, as every sketch). Each round is estimated alone, as a
one-shot estimate of that sketch: the single-report marginal of the two-level channel
(permanent then instantaneous randomised response) is what the mechanisms' `item_variances`
give, so the intervals and the false-discovery control are exactly those of `estimate`
(estimates.compute_estimates, significance.py). Which round is open at a time, how many there
are and their windows come from core/schedule.py only.

- `round_estimate`: `estimate NAME --round R` (default: the latest round with reports, said
  in the answer); `lbitmean` estimates a mean (Ding, Kulkarni, Yekhanin, "Collecting
  telemetry data privately", NeurIPS 2017, §2.1's estimator), the others item frequencies.
- `compute_series`: `estimate NAME --series` and the API's /campaigns/{name}/series: per
  round its window, n and the estimates of the followed items (or the mean). The followed
  items are the `top` largest of the latest round with reports, each round's rows flagged
  `noise` by that round's own test over everything it estimated (the whole domain: the same
  flags as `estimate --round r`), or exactly the items a query names (`items`: chosen before
  looking, the family is those items, as `estimate --items`). Rounds share the devices'
  permanent responses, so they are not independent draws: items picked on the latest round
  are a selection for the earlier rounds too, and a row marked `noise` in the latest round
  says so in a warning, as a `--top` list does.
"""

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ...core import schedule
from ...core.errors import ConfigError
from . import significance
from .estimates import EstimateQuery, compute_estimates, load_sketch, parse_items, rows_csv
from .significance import DEFAULT_FDR

SERIES_TOP = 5
"""Items a series follows unless the query names `top` or `items`."""
SERIES_LAST = 90
"""Rounds a series covers unless the query names `last` (the latest ones)."""
SERIES_LAST_MAX = 1000
MEAN_MECHANISMS = ("lbitmean",)
MEAN_INTERVAL = ("estimate +- z m sqrt(p(1-p)/n) / c1, p the round's share of 1-bits, c0 + c1 x/m "
                 "the exact P(bit = 1 | x) (Ding, Kulkarni, Yekhanin, NeurIPS 2017 §2.1; the "
                 "binomial variance bounds the devices' sum of p_i(1-p_i))")


def is_recurring(camp) -> bool:
    """Does the campaign's config carry a `schedule` (spec §3.4)?"""
    return camp.recurring


def round_count(camp) -> int:
    """R of a recurring campaign; 0 for a one-shot campaign."""
    return camp.rounds


def slots(camp) -> range:
    """Every storage slot of the campaign: its rounds 1..R (recurring), else its phases."""
    return range(1, (round_count(camp) if is_recurring(camp) else len(camp.config["phases"])) + 1)


def opened_slots(camp, now: int = None) -> range:
    """The slots that can hold reports at `now` (default: the clock): the rounds opened so far
    (recurring), else the phases open."""
    if not is_recurring(camp):
        return range(1, camp.phase + 1)
    return range(1, schedule.rounds_opened(camp.config, _now(now)) + 1)


def current_round(camp, now: int = None):
    """The round open at `now` (1..R), or None (one-shot, before start, after the last)."""
    if not is_recurring(camp):
        return None
    return schedule.round_at(camp.config, _now(now))


def slot_phase(camp, slot: int) -> int:
    """The config phase whose mechanism folds `slot` (1 for every round)."""
    return camp.slot_phase(slot)


def slot_mechanism(camp, slot: int):
    """The Mechanism whose sketch slot `slot` holds."""
    return camp.slot_mechanism(slot)


def round_window(camp, r: int):
    """[opens, closes) of round r in unix seconds."""
    return schedule.round_window(camp.config, r)


def describe(camp, now: int = None):
    """What `campaign status/list` and the status message show of the schedule; None for a
    one-shot campaign."""
    if not is_recurring(camp):
        return None
    t = _now(now)
    return {"schedule": dict(camp.config["schedule"]), "rounds": round_count(camp),
            "round": schedule.round_at(camp.config, t),
            "rounds_opened": schedule.rounds_opened(camp.config, t)}


def _now(now):
    return int(time.time()) if now is None else int(now)


def opened_rounds(doc: dict, now: float) -> int:
    """How many rounds have opened by `now` (0..R; core.schedule.rounds_opened)."""
    return schedule.rounds_opened(doc, int(now))


def require_recurring(camp, field: str = "schedule") -> int:
    """R of a recurring campaign; ConfigError naming `field` for a one-shot one."""
    if not is_recurring(camp):
        raise ConfigError(field, "campaign %s is not recurring (its config has no schedule, "
                          "spec §3.4): it has phases, not rounds" % camp.name)
    return schedule.round_count(camp.config)


def check_round(camp, r) -> int:
    """A round number of the campaign, 1..R; ConfigError naming `round` otherwise."""
    total = require_recurring(camp, "round")
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= total:
        raise ConfigError("round", "campaign %s has rounds 1..%d, got %r" % (camp.name, total, r))
    return r


def round_reports(store, name: str) -> dict:
    """{round: accepted reports} of every round with a stored sketch (all workers summed)."""
    rows = store.db.execute("SELECT phase, sum(n) FROM sketches WHERE campaign=? GROUP BY phase",
                            (name,)).fetchall()
    return {int(r): int(n) for r, n in rows}


def round_info(doc: dict, r: int, chosen: str = None) -> dict:
    """What an answer says about its round: number, R, window [opens, closes) in unix seconds
    and, when the query named none, why this one."""
    opens, closes = schedule.round_window(doc, r)
    return {"round": r, "rounds": schedule.round_count(doc), "opens": opens, "closes": closes,
            "every_s": doc["schedule"]["every_s"], "round_chosen": chosen}


def utc(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def describe_round(info: dict) -> str:
    text = "round %d of %d [%s, %s)" % (info["round"], info["rounds"], utc(info["opens"]),
                                        utc(info["closes"]))
    if info.get("round_chosen"):
        text += " (%s; --round R for another)" % info["round_chosen"]
    return text


def latest_opened(rounds, doc: dict, now: float):
    """The latest of `rounds` that has opened at `now`, else the latest of them (None if
    empty): the ingest accepts a round one ahead of the clock (spec §3.4, skew), so a round
    that has not opened may hold a skewed device's early report and nothing else."""
    opened = opened_rounds(doc, now)
    rounds = sorted(rounds)
    return max([r for r in rounds if r <= opened] or rounds or [None])


def default_round(doc: dict, reports: dict, now: float) -> tuple:
    """(round, why) when a query names none: the latest opened round with reports, else the
    round open now (or the last that opened, or round 1 before the start)."""
    with_reports = [r for r, n in reports.items() if n > 0 and 1 <= r <= schedule.round_count(doc)]
    if with_reports:
        return latest_opened(with_reports, doc, now), "the latest round with reports"
    open_now = schedule.round_at(doc, int(now))
    if open_now is not None:
        return open_now, "no report yet; the round open now"
    return max(1, opened_rounds(doc, now)), "no report yet"


def schedule_status(store, camp, now: float = None) -> dict:
    """`campaign status`'s `schedule` of a recurring campaign: the config's schedule, R, the
    round open now (None: none), how many opened, every round's reports summed, and the latest
    round with reports with its count (a round's expected error rests on its own reports)."""
    now = time.time() if now is None else now
    doc = camp.config
    reports = {r: n for r, n in round_reports(store, camp.name).items() if n > 0}
    latest = max(reports) if reports else None
    current = schedule.round_at(doc, int(now))
    return {"schedule": dict(doc["schedule"]), "start": doc["schedule"]["start"],
            "every_s": doc["schedule"]["every_s"], "rounds": schedule.round_count(doc),
            "current_round": current, "round": current, "opened": opened_rounds(doc, now),
            "rounds_opened": opened_rounds(doc, now), "reports": sum(reports.values()),
            "per_round": [{"round": r, "reports": n} for r, n in sorted(reports.items())],
            "latest_round": latest, "latest_reports": reports.get(latest, 0)}


# --- one round ------------------------------------------------------------------------------

@dataclass
class RoundMean:
    """One round's mean (lbitmean), rendered like a numeric campaign's answer (`numeric`)."""

    campaign: str
    mechanism: object
    domain: dict
    n: int
    confidence: float
    round: dict
    mean: float = None
    ci_low: float = None
    ci_high: float = None
    stddev: float = None
    warnings: list = field(default_factory=list)

    def row(self) -> dict:
        return {"metric": 0, "name": "mean", "reports": self.n, "mean": self.mean,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "stddev": self.stddev}

    def to_json(self) -> dict:
        m = self.mechanism
        out = {"campaign": self.campaign, "phase": 1, "mechanism": m.name, "epsilon": m.eps,
               "n": self.n, "confidence": self.confidence, "items": [],
               "warnings": self.warnings,
               "numeric": {"domain": self.domain, "range": "0-%d" % m.m,
                           "interval": MEAN_INTERVAL, "means": [self.row()]}}
        out.update(self.round)
        return out

    def to_csv(self, stream=None) -> str:
        return rows_csv(["round", "opens", "closes", "reports", "mean", "ci_low", "ci_high",
                         "stddev"], [dict(self.row(), **self.round)], stream)

    def to_text(self) -> str:
        head = "campaign %s %s (%s, epsilon %g): n = %d reports; counter 0-%d" % (
            self.campaign, describe_round(self.round), self.mechanism.name, self.mechanism.eps,
            self.n, self.mechanism.m)
        if not self.n:
            return head + "; no estimate yet"
        return head + "\nmean %.4f, %g%% interval [%.4f, %.4f]" % (
            self.mean, 100 * self.confidence, self.ci_low, self.ci_high)


def mean_of_round(sketch, confidence: float):
    """(mean, low, high, stddev) of one round's lbitmean sketch (MEAN_INTERVAL)."""
    from .estimates import two_sided_z
    mech = sketch.mechanism
    c0, c1 = (float(v) for v in mech.linear_coefficients())
    p = min(max(float(sketch.ones[0]) / sketch.n, 0.0), 1.0)
    sd = mech.m * math.sqrt(p * (1 - p) / sketch.n) / c1
    mean = float(sketch.mean())
    z = two_sided_z(confidence)
    return mean, mean - z * sd, mean + z * sd, sd


def _round_mean(store, camp, r, info, query) -> RoundMean:
    for flag in ("items", "subset", "top", "threshold"):
        if getattr(query, flag) not in (None, []):
            raise ConfigError(flag, "%s applies to item estimates, not to %s's mean"
                              % (flag, camp.mechanism_name(1)))
    if not 0 < query.confidence < 1:
        raise ConfigError("confidence", "must be in (0, 1), got %r" % query.confidence)
    sketch = load_sketch(store, camp.name, 1, r, camp)
    out = RoundMean(camp.name, camp.mechanism(1), camp.config["domain"], int(sketch.n),
                    query.confidence, info)
    if sketch.n:
        out.mean, out.ci_low, out.ci_high, out.stddev = mean_of_round(sketch, query.confidence)
    if query.post not in (None, "", "none"):  # perhaps the config file's [estimate] post
        out.warnings.append("post-processing %s applies to item estimates: a mean is not "
                            "post-processed" % query.post)
    return out


def round_estimate(store, camp, query: EstimateQuery, now: float = None):
    """`estimate NAME [--round R]` of a recurring campaign: that round's estimate table (or
    mean), with the round's window; without a round the latest round with reports."""
    now = time.time() if now is None else now
    if query.phase not in (None, 1):
        raise ConfigError("phase", "campaign %s is recurring: one phase, asked by round "
                          "(--round R)" % camp.name)
    r, chosen = query.round, None
    if r is None:
        r, chosen = default_round(camp.config, round_reports(store, camp.name), now)
    check_round(camp, r)
    info = round_info(camp.config, r, chosen)
    if camp.mechanism_name(1) in MEAN_MECHANISMS:
        return _round_mean(store, camp, r, info, query)
    table = compute_estimates(store, camp.name, replace(query, phase=1, round=r), camp=camp)
    table.round, table.round_text = info, describe_round(info)
    return table


# --- the series -----------------------------------------------------------------------------

@dataclass
class Series:
    """Every covered round's window, n and estimates (module docstring); `items` the followed
    items (None for a mean), `items_from_round` the round they were picked on (None: named)."""

    campaign: str
    mechanism: str
    every_s: int
    rounds: int
    current_round: int
    confidence: float
    fdr: float
    items: list = None
    items_from_round: int = None
    series: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def is_mean(self) -> bool:
        return self.mechanism in MEAN_MECHANISMS

    def to_json(self) -> dict:
        return {"campaign": self.campaign, "mechanism": self.mechanism, "every_s": self.every_s,
                "rounds": self.rounds, "current_round": self.current_round,
                "confidence": self.confidence, "fdr": self.fdr, "items": self.items,
                "items_from_round": self.items_from_round, "series": self.series,
                "warnings": self.warnings}

    def csv_rows(self) -> tuple:
        head = ["round", "opens", "closes", "n"]
        if self.is_mean:
            return head + ["mean", "low", "high"], [
                dict(e, **(e["mean"] or {"mean": None})) for e in self.series]
        rows = []
        for e in self.series:
            for est in e["estimates"]:
                rows.append(dict({k: e[k] for k in head}, **est))
        return head + ["item", "estimate", "frequency", "low", "high", "noise"], rows

    def to_csv(self, stream=None) -> str:
        cols, rows = self.csv_rows()
        return rows_csv(cols, rows, stream)

    def to_text(self) -> str:
        lines = ["campaign %s (%s): recurring every %d s, %d rounds; %s" % (
            self.campaign, self.mechanism, self.every_s, self.rounds,
            "round %d open now" % self.current_round if self.current_round else "no round open now")]
        if self.is_mean:
            lines.append("mean of the counter per round, %g%% intervals" % (100 * self.confidence))
            lines.append("%6s  %-20s  %8s  %s" % ("round", "opens (UTC)", "n", "mean"))
            for e in self.series:
                m = e["mean"]
                cell = "%.4f +- %.4f" % (m["mean"], (m["high"] - m["low"]) / 2) if m else "-"
                lines.append("%6d  %-20s  %8d  %s" % (e["round"], utc(e["opens"]), e["n"], cell))
            return "\n".join(lines)
        if not self.items:
            return "\n".join(lines + ["no round has reports yet" if not any(
                e["n"] for e in self.series) else "no item to follow"])
        picked = ("the top %d of round %d (the latest with reports)" % (len(self.items),
                                                                        self.items_from_round)
                  if self.items_from_round else "the items asked for")
        lines.append("fraction +- half-width of its %g%% interval for %s; ~ marks a value that "
                     "does not stand out of that round's noise (false-discovery rate %g)"
                     % (100 * self.confidence, picked, self.fdr))
        width = 17
        lines.append("%6s  %-20s  %8s  " % ("round", "opens (UTC)", "n")
                     + "  ".join("%*s" % (width, str(i)[:width]) for i in self.items))
        for e in self.series:
            by_item = {str(x["item"]): x for x in e["estimates"]}
            cells = []
            for item in self.items:
                x = by_item.get(str(item))
                cells.append("%*s" % (width, "-" if x is None else "%.4f+-%.4f%s" % (
                    x["frequency"], (x["high"] - x["low"]) / 2, "~" if x["noise"] else " ")))
            lines.append("%6d  %-20s  %8d  " % (e["round"], utc(e["opens"]), e["n"])
                         + "  ".join(cells))
        return "\n".join(lines)


def compute_series(store, name: str, top: int = None, items=None, confidence: float = 0.95,
                   fdr: float = DEFAULT_FDR, last: int = None, now: float = None) -> Series:
    """The series of a recurring campaign (module docstring): the `last` latest rounds that
    opened by `now` (and any later one with reports: devices' clocks run ahead), oldest
    first; items as strings (`items`) or the `top` largest of the latest round with reports."""
    now = time.time() if now is None else now
    camp = store.require_campaign(name)
    total = require_recurring(camp)
    level = significance.check_level(fdr)
    if not 0 < confidence < 1:
        raise ConfigError("confidence", "must be in (0, 1), got %r" % confidence)
    last = SERIES_LAST if last is None else last
    if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= SERIES_LAST_MAX:
        raise ConfigError("last", "a number of rounds in 1..%d, got %r" % (SERIES_LAST_MAX, last))
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ConfigError("top", "must be at least 1, got %r" % (top,))
    doc = camp.config
    reports = {r: n for r, n in round_reports(store, name).items() if 1 <= r <= total}
    upto = max([opened_rounds(doc, now)] + [r for r, n in reports.items() if n > 0])
    covered = list(range(max(1, upto - last + 1), upto + 1))
    out = Series(name, camp.mechanism_name(1), doc["schedule"]["every_s"], total,
                 schedule.round_at(doc, int(now)), confidence, level)
    entries = {r: dict(round_info(doc, r), n=reports.get(r, 0)) for r in covered}
    for e in entries.values():
        for key in ("rounds", "every_s", "round_chosen"):
            del e[key]
    out.series = [entries[r] for r in covered]
    if out.is_mean and (top is not None or items is not None):
        raise ConfigError("top" if top is not None else "items", "%s's series is a mean per "
                          "round: no items to follow" % out.mechanism)
    if out.is_mean:
        for r, e in entries.items():
            e["mean"] = None
            if e["n"]:
                sketch = load_sketch(store, name, 1, r, camp)
                mean, lo, hi, _sd = mean_of_round(sketch, confidence)
                e["mean"] = {"mean": mean, "low": lo, "high": hi}
        return out
    if top is not None and items is not None:
        raise ConfigError("items", "a series follows either the top items or the items named")
    named = parse_items(items, doc["domain"]["type"]) if items is not None else None
    query = EstimateQuery(phase=1, confidence=confidence, fdr=level, items=named)
    tables = {}
    with_reports = [r for r in covered if entries[r]["n"] > 0]
    if named is None:
        out.items, out.items_from_round = [], None
        if with_reports:
            latest = latest_opened(with_reports, doc, now)
            table = tables[latest] = compute_estimates(store, name, replace(query, round=latest),
                                                       camp=camp)
            order = np.argsort([-row["frequency"] for row in table.rows], kind="stable")
            picked = [dict(table.rows[i], rank=rank) for rank, i in
                      enumerate(order[:top or SERIES_TOP].tolist(), start=1)]
            out.items, out.items_from_round = [row["item"] for row in picked], latest
            warning = significance.noise_rows_warning(picked, table.significance)
            if warning:
                out.warnings.append("round %d: %s" % (latest, warning))
    else:
        out.items = list(named)
    followed = {str(i) for i in out.items}
    for r in covered:
        entries[r]["estimates"] = []
        if entries[r]["n"] == 0:
            continue
        table = tables.get(r) or compute_estimates(store, name, replace(query, round=r), camp=camp)
        entries[r]["discoveries"] = table.significance.discoveries
        rows = {str(row["item"]): row for row in table.rows if str(row["item"]) in followed}
        entries[r]["estimates"] = [
            {"item": row["item"], "estimate": row["estimate"], "frequency": row["frequency"],
             "low": row["ci_low"], "high": row["ci_high"], "noise": row["noise"]}
            for row in (rows[str(i)] for i in out.items if str(i) in rows)]
    return out
