"""Response models of the HTTP API (http_api.py): the OpenAPI description of the JSON the CLI
prints (`campaign list|status --json`, `estimate --json`, `campaign advance --json`). The API
answers with that JSON itself; these models document it, and the contract tests
(tests/integration/test_http_api.py) check every answer against them."""
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

Item = Union[int, str]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow")


class Problem(_Doc):
    """An error: what is wrong (`detail`) and the offending field or parameter."""

    detail: Union[str, list]
    field: Optional[str] = None
    campaign: Optional[str] = None


class CampaignRow(_Doc):
    campaign: str
    campaign_id: int
    state: Literal["open", "closed"]
    phase: int
    mechanisms: list[str]
    accepted: int
    rejected: int
    duplicates: Optional[int] = None


class TrendPoint(_Doc):
    at: float
    received: int
    accepted: int
    duplicates: int
    rejected: int


class Trend(_Doc):
    """`ldpfleet campaign trend NAME --json`: cumulative counters at most once a minute,
    oldest first, the last point now (`rejected` without the duplicates)."""

    campaign: str
    interval_s: int
    points: list[TrendPoint]


class ExpectedError(_Doc):
    """One item's standard deviation (f -> 0) and interval half-width; `error` when the
    mechanism has no variance formula."""

    n: Optional[int] = None
    stddev_fraction: Optional[float] = None
    stddev_count: Optional[float] = None
    ci_halfwidth_count: Optional[float] = None
    confidence: Optional[float] = None
    error: Optional[str] = None
    mean_stddev: Optional[float] = None
    """Numeric mean (duchi, pm, hm): the mean's standard deviation in the metric's units."""
    mean_ci_halfwidth: Optional[float] = None
    bins: Optional[int] = None
    """sw: the histogram's bins."""


class PhaseStatus(_Doc):
    phase: int
    mechanism: str
    epsilon: float
    params: dict[str, Any]
    reports: int
    open: bool
    sample_rate_ppm: Optional[int] = None
    expected_error: Optional[ExpectedError] = None


class Domain(_Doc):
    type: str
    size: int
    range: Optional[str] = None
    """Numeric domains: the range in the metric's units and the grid points."""


class PurgeRecord(_Doc):
    purged_at: float
    keys: int


class Coverage(_Doc):
    """Devices with an accepted report (provisioned ones, with serve's --devices-file) over
    the provisioned devices; `provisioned` and `ratio` null without a devices file."""

    reported: int
    provisioned: Optional[int] = None
    ratio: Optional[float] = None


class CampaignStatus(_Doc):
    """`ldpfleet campaign status NAME --json`."""

    campaign: str
    campaign_id: int
    state: Literal["open", "closed"]
    phase: int
    domain: Domain
    created_at: float
    closed_at: Optional[float] = None
    not_after: Union[int, float]
    received: int
    accepted: int
    rejected: dict[str, int]
    rejected_total: int
    phases: list[PhaseStatus]
    protocol: Optional[dict[str, Any]] = None
    delivery: Optional[dict[str, Any]] = None
    broker_drops: Optional[dict[str, Any]] = None
    dedupe_purged: Optional[PurgeRecord] = None
    coverage: Optional[Coverage] = None
    schedule: Optional["ScheduleStatus"] = None
    """A recurring campaign's rounds (its phase's `reports` then sums every round's, and its
    expected error is one round's: the latest with reports)."""


class ScheduleStatus(_Doc):
    start: int
    every_s: int
    rounds: int
    current_round: Optional[int] = None
    opened: int
    reports: int
    latest_round: Optional[int] = None
    latest_reports: int


CampaignStatus.model_rebuild()


class EstimateRow(_Doc):
    """One item: raw estimate (count) and fraction with its interval (`post`: post-processed);
    a protocol answer has `high` (LDPLCM) or `phase1_frequency` (LDPMiner) instead."""

    rank: int
    item: Item
    key: int
    estimate: float
    frequency: float
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    post: Optional[float] = None
    high: Optional[bool] = None
    phase1_frequency: Optional[float] = None
    noise: Optional[bool] = None
    """True: the row does not stand out of the noise of the list (see `significance`)."""


class Significance(_Doc):
    """How the list's `noise` flags were decided (service/campaigns/significance.py): the procedure
    (benjamini-hochberg or benjamini-yekutieli), its false-discovery rate, the items tested,
    how many stand out, and the z above which an item stands out."""

    procedure: str
    fdr: float
    tested: int
    discoveries: int
    z_cutoff: Optional[float] = None
    dependence: str


class SubsetAnswer(_Doc):
    items: list[Item]
    frequency: float
    ci_low: float
    ci_high: float
    post: Optional[float] = None


class NumericMean(_Doc):
    """One metric's mean in its units with its interval (sw: the histogram's mean, `stddev`
    null: a bootstrap interval)."""

    metric: int
    name: str
    reports: int
    mean: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    stddev: Optional[float] = None


class HistogramBin(_Doc):
    bin: int
    low: float
    high: float
    fraction: float
    ci_low: float
    ci_high: float


class Quantile(_Doc):
    q: float
    value: float
    ci_low: float
    ci_high: float


class NumericAnswer(_Doc):
    """A numeric campaign's answer (service/campaigns/numeric.py): means (duchi, pm, hm) or the
    sw histogram over its bins with quantiles and the mean; `interval` says how the intervals
    are made."""

    domain: dict[str, Any]
    range: str
    interval: str
    means: list[NumericMean]
    per_report_variance: Optional[float] = None
    histogram: Optional[list[HistogramBin]] = None
    quantiles: Optional[list[Quantile]] = None


class Estimate(_Doc):
    """`ldpfleet estimate NAME --json`: one phase's estimate table, or a two-phase protocol's
    final answer (`protocol`, `phase_reports`, `params`)."""

    campaign: str
    phase: int
    n: int
    items: list[EstimateRow]
    warnings: list[str]
    mechanism: Optional[str] = None
    epsilon: Optional[float] = None
    confidence: Optional[float] = None
    stddev_fraction: Optional[float] = None
    stddev_count: Optional[float] = None
    post: Optional[str] = None
    threshold: Optional[float] = None
    subset: Optional[SubsetAnswer] = None
    protocol: Optional[str] = None
    phase_reports: Optional[list[int]] = None
    params: Optional[dict[str, Any]] = None
    high_items: Optional[list[Item]] = None
    significance: Optional[Significance] = None
    numeric: Optional[NumericAnswer] = None
    round: Optional[int] = None
    """A recurring campaign's round (with `rounds`, its window `opens`/`closes` in unix
    seconds, `every_s`, and `round_chosen` when the query named none)."""
    rounds: Optional[int] = None
    opens: Optional[int] = None
    closes: Optional[int] = None
    every_s: Optional[int] = None
    round_chosen: Optional[str] = None


class SeriesEstimate(_Doc):
    """One followed item in one round: count, fraction and the fraction's interval."""

    item: Item
    estimate: float
    frequency: float
    low: float
    high: float
    noise: bool


class SeriesMean(_Doc):
    mean: float
    low: float
    high: float


class SeriesRound(_Doc):
    """One round: its window [opens, closes) in unix seconds, its reports, and the followed
    items' estimates (`discoveries`: how many items stand out in it) or the mean (lbitmean;
    null without reports)."""

    round: int
    opens: int
    closes: int
    n: int
    estimates: Optional[list[SeriesEstimate]] = None
    discoveries: Optional[int] = None
    mean: Optional[SeriesMean] = None


class Series(_Doc):
    """`ldpfleet estimate NAME --series --json`: a recurring campaign's rounds, oldest first;
    `items` the followed items (picked on round `items_from_round`, null: named by the
    query), `current_round` null when no round is open."""

    campaign: str
    mechanism: str
    every_s: int
    rounds: int
    current_round: Optional[int] = None
    confidence: float
    fdr: float
    items: Optional[list[Item]] = None
    items_from_round: Optional[int] = None
    series: list[SeriesRound]
    warnings: list[str]


class Advanced(_Doc):
    """`ldpfleet campaign advance NAME --json`: what phase 2 was given."""

    campaign: str
    protocol: str
    phase1_reports: int
    candidates: Optional[list[int]] = None
    theta_measured: Optional[float] = None
    high_items: Optional[int] = None
    model_nodes: Optional[int] = None


class Health(_Doc):
    status: Literal["ok"]


class Readiness(_Doc):
    ready: bool
    state: bool
    ingest: bool
    detail: Optional[str] = None
