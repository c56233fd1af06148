"""Prometheus metrics of the ingest loop, served over HTTP on `--metrics-port`.

- `ldpfleet_reports_received_total`
- `ldpfleet_reports_accepted_total{campaign}`
- `ldpfleet_reports_rejected_total{reason}` (reasons: `fold.REJECTIONS`)
- `ldpfleet_batch_seconds` histogram (validate + fold + commit of one batch)
- `ldpfleet_batch_reports` histogram (messages per batch)
- `ldpfleet_backlog_reports` gauge (messages received from the broker, not yet committed/acked)
- `ldpfleet_broker_messages_dropped` gauge (the broker's own drop counter, `broker_watch`) and
  `ldpfleet_broker_drops_seen` gauge (its rise while this serve watched)
- `ldpfleet_acks_published_total` (spec §6 acknowledgements sent after commits)

Each `ServiceMetrics` has its own registry, so several can live in one process (tests).
"""
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import start_http_server

from .fold import ACCEPTED, RECEIVED


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry = None):
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
