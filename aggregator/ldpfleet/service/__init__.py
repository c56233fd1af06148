"""The aggregator service: MQTT ingest into a SQLite state file, campaigns, estimates.

Modules
- `store`: the state file (`Store`, `Campaign`), WAL mode, one transaction per batch.
- `ingest`: `Ingestor` — the `ldpfleet serve` loop (persistent MQTT session, manual acks
  after commit; see its docstring for the no-loss/no-double-count argument) and
  `Ingestor.process_batch` (validate/dedupe/fold/commit without MQTT). Rejection reasons:
  `fold.REASONS`.
- `campaigns`: `create_campaign` (`Issuance`: validity, salt, id), `close_campaign`,
  `publish_phase2`, `campaign_status`, signing key files.
- `protocol_campaigns`: two-phase protocols (LDPMiner, LDPLCM): `create_protocol_campaign`
  (`protocols.options.ProtocolOptions`), `advance_campaign`.
- `estimates`: `compute_estimates` -> `EstimateTable` (confidence intervals, post-processing,
  top-K, threshold; JSON/CSV/text).
- `answers`: `compute_answer` -> `ProtocolAnswer` (a two-phase protocol campaign's final
  answer in phase 2).
- `http_metrics`: `ServiceMetrics` (Prometheus).
- `ldpfleet.mqtt.client` (one level up): `BrokerSettings.from_url`, `publish`, `QosPublisher`.

Programmatic use (what `ldpfleet demo` does; `ldpfleet.loadgen.serve_process`):

    from ldpfleet.service import BrokerSettings, Store, create_campaign
    from ldpfleet.loadgen.serve_process import ServeProcess
    broker = BrokerSettings.from_url("mqtt://127.0.0.1:1883")
    with Store("sqlite:////tmp/agg.db") as store:
        create_campaign(store, broker, "signing.key", "cpu", "olh", 2.0, "0-1023")
    serve = ServeProcess(broker.url, "sqlite:////tmp/agg.db").start()   # subprocess, ready
    ...                                       # devices publish; poll store.counters("cpu")
    serve.stop()
    with Store("sqlite:////tmp/agg.db") as store:
        table = compute_estimates(store, "cpu", EstimateQuery(top=10))

or in-process: `Ingestor(state_url, broker, IngestOptions(...)).run()` in a thread, `.stop()`.
"""
from ..mqtt.client import BrokerSettings
from .campaigns.manage import (
    Issuance,
    campaign_status,
    close_campaign,
    create_campaign,
    publish_phase2)
from .campaigns.answers import compute_answer
from .campaigns.estimates import EstimateQuery, compute_estimates
from .ingest.fold import REASONS
from .ingest.loop import IngestOptions, Ingestor
from .campaigns.protocols import advance_campaign, create_protocol_campaign
from .state.store import Store

__all__ = ["BrokerSettings", "Issuance", "Store", "Ingestor", "IngestOptions", "REASONS",
           "create_campaign", "close_campaign", "publish_phase2", "campaign_status",
           "create_protocol_campaign", "advance_campaign", "compute_answer",
           "compute_estimates", "EstimateQuery"]
