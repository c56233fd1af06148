"""Prometheus metrics of the ingest loop, served over HTTP on `--metrics-port`.

This worker's own counters, updated after each batch it committed (cheap, in process):
- `ldpfleet_reports_received_total`
- `ldpfleet_reports_accepted_total{campaign}`
- `ldpfleet_reports_rejected_total{reason}` (reasons: `fold.REJECTIONS`)
- `ldpfleet_batch_seconds` histogram (validate + fold + commit of one batch)
- `ldpfleet_batch_reports` histogram (messages per batch)
- `ldpfleet_backlog_reports` gauge (messages received from the broker, not yet committed/acked)
- `ldpfleet_broker_messages_dropped` gauge (the broker's own drop counter, `broker_watch`) and
  `ldpfleet_broker_drops_seen` gauge (its rise while this serve watched)
- `ldpfleet_acks_published_total` (spec §6 acknowledgements sent after commits)
- `ldpfleet_build_info{version, protocol, python}` (always 1)

The committed totals of the whole state (`StoreCollector`, with `state_url`): read from the
store at scrape time with the collector's own connection, every worker's partials summed, so
several workers sharing one PostgreSQL state each serve the same cluster-wide numbers (what
`ldpfleet campaign status` prints; aggregate them with max(), never sum(), across workers):
- `ldpfleet_campaign_reports_received_total{campaign}`
- `ldpfleet_campaign_reports_accepted_total{campaign, phase}` (the merged sketches' report
  counts: status's "phase N ...: K reports")
- `ldpfleet_campaign_reports_rejected_total{campaign, reason}`; messages that name no known
  campaign (bad topic, unknown campaign) are under campaign=""
- `ldpfleet_campaign_devices{campaign}` gauge: devices with an accepted report (distinct
  devices among the committed dedupe keys; none once `campaign purge` dropped them). A campaign
  has no configured fleet size or "expected reports" figure, so this observed count is what
  there is. It scans the dedupe keys, so it is recounted after new reports at a rate bounded by
  its own cost, else once a minute
- `ldpfleet_campaign_phase{campaign}` (current phase), `ldpfleet_campaign_open{campaign}` (1/0)
- recurring campaigns (spec §3.4; their sketches are stored per round): the accepted total above
  sums every round under phase="1" (the campaign's one phase), and
  `ldpfleet_round_reports{campaign, round}` gauge: the reports accepted in each of the latest
  `ROUND_WINDOW` rounds (those opened by now, or with reports: a round with none is 0), so the
  label set stays bounded however many rounds a campaign runs;
  `ldpfleet_campaign_round{campaign}`: the round open now (0 when none is: before the start,
  after the last round)
- `ldpfleet_campaign_ends_timestamp_seconds{campaign}`: the end of the config's validity window
  (`not_after`, Unix time): devices stop reporting then
- with serve's `--devices-file` (service/campaigns/coverage.py), per campaign whose dedupe keys are
  still there: `ldpfleet_campaign_devices_provisioned`, `ldpfleet_campaign_devices_reported`
  (provisioned devices with an accepted report in any phase) and
  `ldpfleet_campaign_coverage_ratio` (reported / provisioned), recounted like the devices
- `ldpfleet_store_up` (1 when the last scrape could read the state), `ldpfleet_store_scrape_seconds`
- `ldpfleet_ingest_subscribed` (this serve: 1 while its ingest is subscribed to the broker)

Labels are only campaign names, phases, rejection reasons and the build's versions: never a
device id or an item value. Each `ServiceMetrics` has its own registry, so several can live in
one process (tests).
"""
import json
import logging
import platform
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ...core import schedule

from ..ingest.fold import ACCEPTED, RECEIVED

ROUND_WINDOW = 8
"""Rounds of a recurring campaign with their own `ldpfleet_round_reports` series: the latest."""

log = logging.getLogger("ldpfleet.service")


class StoreCollector:
    """A prometheus_client custom collector: the state's committed per-campaign counters, read
    when Prometheus scrapes (in the exporter's request thread) through a connection of its own,
    opened for that scrape and closed after it. It never touches serve's connection, and a
    state that cannot be read gives `ldpfleet_store_up 0` instead of a failed scrape."""

    DEVICES_SLOWDOWN = 50

    def __init__(self, state_url: str, timeout: float = 5.0, devices_ttl: float = 60.0,
                 fleet=None):
        self.state_url = state_url
        self.fleet = fleet
        self.timeout = timeout
        self.devices_ttl = devices_ttl
        # (monotonic time read, accepted total then, seconds the count took, {campaign: n})
        self._devices = (float("-inf"), None, 0.0, ({}, {}))
        self._lock = threading.Lock()
        self._failing = False

    @staticmethod
    def _families():
        return {
            "received": CounterMetricFamily(
                "ldpfleet_campaign_reports_received",
                "Report messages received, committed by every worker of the state",
                labels=["campaign"]),
            "accepted": CounterMetricFamily(
                "ldpfleet_campaign_reports_accepted",
                "Reports folded into the campaign phase's sketch, every worker's partial summed",
                labels=["campaign", "phase"]),
            "rejected": CounterMetricFamily(
                "ldpfleet_campaign_reports_rejected",
                "Report messages rejected, by campaign and reason, committed by every worker",
                labels=["campaign", "reason"]),
            "devices": GaugeMetricFamily(
                "ldpfleet_campaign_devices",
                "Devices with an accepted report in the campaign (distinct devices among the "
                "committed dedupe keys; campaigns have no configured fleet size)",
                labels=["campaign"]),
            "round_reports": GaugeMetricFamily(
                "ldpfleet_round_reports",
                "Reports accepted in a round of a recurring campaign (the latest %d rounds), "
                "every worker's partial summed" % ROUND_WINDOW, labels=["campaign", "round"]),
            "round": GaugeMetricFamily(
                "ldpfleet_campaign_round",
                "Round of a recurring campaign open now (0: none is open)", labels=["campaign"]),
            "phase": GaugeMetricFamily("ldpfleet_campaign_phase",
                                       "Current phase of the campaign", labels=["campaign"]),
            "open": GaugeMetricFamily("ldpfleet_campaign_open",
                                      "1 while the campaign accepts reports, 0 once closed",
                                      labels=["campaign"]),
            "ends": GaugeMetricFamily("ldpfleet_campaign_ends_timestamp_seconds",
                                      "End of the campaign config's validity window (not_after, "
                                      "Unix time)", labels=["campaign"]),
            "provisioned": GaugeMetricFamily(
                "ldpfleet_campaign_devices_provisioned",
                "Devices of serve's --devices-file", labels=["campaign"]),
            "reported": GaugeMetricFamily(
                "ldpfleet_campaign_devices_reported",
                "Devices of serve's --devices-file with an accepted report in any phase",
                labels=["campaign"]),
            "coverage": GaugeMetricFamily(
                "ldpfleet_campaign_coverage_ratio",
                "Provisioned devices with an accepted report / provisioned devices",
                labels=["campaign"]),
        }

    def describe(self):
        fams = list(self._families().values())
        fams.append(GaugeMetricFamily("ldpfleet_store_up", ""))
        fams.append(GaugeMetricFamily("ldpfleet_store_scrape_seconds", ""))
        return fams

    def collect(self):
        started = time.perf_counter()
        fams = self._families()
        up = 1
        try:
            self._read(fams)
            if self._failing:
                log.info("metrics: the state %s is readable again", self.state_url_redacted)
            self._failing = False
        except Exception as exc:  # noqa: BLE001 (a scrape reports the failure, never raises)
            up = 0
            fams = self._families()  # nothing half-read
            if not self._failing and isinstance(exc, _state_errors()):
                log.warning("metrics: cannot read the state for /metrics: %s", exc)
            elif not self._failing:
                log.exception("metrics: reading the state for /metrics failed (a bug)")
            self._failing = True
        for fam in fams.values():
            yield fam
        yield GaugeMetricFamily("ldpfleet_store_up",
                                "1 when this scrape read the state's committed counters",
                                value=up)
        yield GaugeMetricFamily("ldpfleet_store_scrape_seconds",
                                "Time to read the state's counters for this scrape",
                                value=time.perf_counter() - started)

    @property
    def state_url_redacted(self) -> str:
        from ..state.sql import redact
        return redact(self.state_url)

    def _read(self, fams):
        from ..state.store import Store
        with Store(self.state_url, timeout=self.timeout, create=False) as store:
            db = store.db
            campaigns = db.execute("SELECT name, state, phase, config_body FROM campaigns"
                                   " ORDER BY name").fetchall()
            recurring = {}
            for name, state, phase, body in campaigns:
                doc = json.loads(body)
                fams["phase"].add_metric([name], int(phase))
                fams["open"].add_metric([name], 1 if state == "open" else 0)
                fams["ends"].add_metric([name], float(doc["not_after"]))
                if schedule.is_recurring(doc):
                    recurring[name] = (doc, {})
            accepted = 0
            for name, phase, n in db.execute(
                    "SELECT campaign, phase, sum(n) FROM sketches GROUP BY campaign, phase"
                    " ORDER BY campaign, phase").fetchall():
                accepted += int(n)
                if name in recurring:  # phase = round: summed below, never a label per round
                    recurring[name][1][int(phase)] = int(n)
                else:
                    fams["accepted"].add_metric([name, str(phase)], int(n))
            self._rounds(fams, recurring, time.time())
            for name, reason, n in db.execute(
                    "SELECT campaign, reason, sum(count) FROM counters GROUP BY campaign, reason"
                    " ORDER BY campaign, reason").fetchall():
                if reason == RECEIVED:
                    fams["received"].add_metric([name], int(n))
                elif reason != ACCEPTED:
                    fams["rejected"].add_metric([name, reason], int(n))
            counts, coverage = self._device_counts(store, accepted)
            for name, n in sorted(counts.items()):
                fams["devices"].add_metric([name], n)
            for name, cov in sorted(coverage.items()):
                fams["provisioned"].add_metric([name], cov["provisioned"])
                fams["reported"].add_metric([name], cov["reported"])
                if cov["ratio"] is not None:
                    fams["coverage"].add_metric([name], cov["ratio"])

    @staticmethod
    def _rounds(fams, recurring: dict, now: float):
        """The per-round series of the recurring campaigns ({name: (config, {round: n})})."""
        from ..campaigns.rounds import opened_rounds
        for name, (doc, per_round) in sorted(recurring.items()):
            fams["accepted"].add_metric([name, "1"], sum(per_round.values()))
            fams["round"].add_metric([name], schedule.round_at(doc, int(now)) or 0)
            total = schedule.round_count(doc)
            upto = max([opened_rounds(doc, now)]
                       + [r for r, n in per_round.items() if n > 0 and r <= total])
            for r in range(max(1, upto - ROUND_WINDOW + 1), upto + 1):
                fams["round_reports"].add_metric([name, str(r)], per_round.get(r, 0))

    def _device_counts(self, store, accepted: int) -> tuple:
        """{campaign: distinct devices}: the one query whose cost grows with the fleet, so it
        is re-run when reports were accepted since its last run, no sooner than
        `DEVICES_SLOWDOWN` times its last duration after it (capped at `devices_ttl` seconds: a
        1 ms count is fresh at every scrape, a 2 s one at most a minute old), and otherwise
        every `devices_ttl` seconds (keys dropped by `campaign purge`). With a fleet the
        coverage of every campaign is counted with them ({campaign: coverage dict})."""
        with self._lock:
            read_at, key, seconds, counts = self._devices
            age = time.monotonic() - read_at
            if ((key == accepted and age < self.devices_ttl)
                    or age < min(self.devices_ttl, self.DEVICES_SLOWDOWN * seconds)):
                return counts
            started = time.perf_counter()
            counts = (store.devices_per_campaign(), self._coverage(store))
            self._devices = (time.monotonic(), accepted, time.perf_counter() - started, counts)
            return counts

    def _coverage(self, store) -> dict:
        if self.fleet is None:
            return {}
        from ..campaigns.coverage import coverage
        out = {}
        for camp in store.campaigns():
            cov = coverage(store, camp.name, self.fleet)
            if cov is not None:  # None: the campaign's dedupe keys were purged
                out[camp.name] = cov
        return out


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry = None, state_url: str = None, fleet=None):
        """`state_url`: also serve the state's committed per-campaign totals (`StoreCollector`);
        `fleet`: the provisioned devices of the coverage series."""
        self.registry = registry or CollectorRegistry()
        self.received = Counter("ldpfleet_reports_received", "Report messages received",
                                registry=self.registry)
        self.accepted = Counter("ldpfleet_reports_accepted", "Reports folded into a sketch",
                                ["campaign"], registry=self.registry)
        self.rejected = Counter("ldpfleet_reports_rejected", "Report messages rejected, by reason",
                                ["reason"], registry=self.registry)
        self.batch_seconds = Histogram(
            "ldpfleet_batch_seconds", "Validate + fold + commit time of one batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry)
        self.batch_reports = Histogram(
            "ldpfleet_batch_reports", "Messages per batch",
            buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000, 50000), registry=self.registry)
        self.backlog_gauge = Gauge("ldpfleet_backlog_reports",
                                   "Messages received but not yet committed and acknowledged",
                                   registry=self.registry)

        self.broker_dropped = Gauge("ldpfleet_broker_messages_dropped",
                                    "The broker's own count of dropped messages ($SYS)",
                                    registry=self.registry)
        self.broker_seen = Gauge("ldpfleet_broker_drops_seen",
                                 "Rise of the broker's drop counter while this serve watched",
                                 registry=self.registry)
        self.acks = Counter("ldpfleet_acks_published", "Acknowledgements published to devices",
                            registry=self.registry)
        from ... import __version__
        from ...core import protocol
        build = Gauge("ldpfleet_build_info", "ldpfleet version, protocol version and Python "
                      "version of this serve (always 1)", ["version", "protocol", "python"],
                      registry=self.registry)
        build.labels(__version__, str(protocol.PROTOCOL_VERSION), platform.python_version()).set(1)
        self.store_collector = None
        if state_url is not None:
            self.store_collector = StoreCollector(state_url, fleet=fleet)
            self.registry.register(self.store_collector)
        self.subscribed = Gauge("ldpfleet_ingest_subscribed",
                                "1 while this serve's ingest is subscribed to the broker",
                                registry=self.registry)

    def ingest_subscribed(self, probe):
        """`probe()`: whether the ingest is subscribed now (read at every scrape)."""
        self.subscribed.set_function(lambda: 1.0 if probe() else 0.0)

    def broker_drops(self, value: int, seen: int):
        self.broker_dropped.set(value)
        self.broker_seen.set(seen)

    def observe_batch(self, counts: dict, seconds: float, backlog: int, acks: int = 0):
        """`counts` as returned by `Ingestor.process_batch`."""
        self.acks.inc(acks)
        size = 0
        for (campaign, reason), n in counts.items():
            if reason == RECEIVED:
                self.received.inc(n)
                size += n
            elif reason == ACCEPTED:
                self.accepted.labels(campaign).inc(n)
            else:
                self.rejected.labels(reason).inc(n)
        self.batch_seconds.observe(seconds)
        self.batch_reports.observe(size)
        self.backlog(backlog)

    def backlog(self, n: int):
        self.backlog_gauge.set(n)

    def serve(self, port: int, addr: str = "127.0.0.1"):
        """Start the HTTP exporter in a daemon thread; returns (server, thread)."""
        return start_http_server(port, addr=addr, registry=self.registry)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def _state_errors() -> tuple:
    """What an unreadable state raises (logged as one line); anything else is a bug (logged
    with its traceback)."""
    from ...core.errors import LdpError
    from ..state.sql import database_errors
    return (LdpError, OSError) + database_errors()
