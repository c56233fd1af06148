"""The aggregator service: MQTT ingest into a SQLite state file, campaigns, estimates.

Modules
- `store`: the state file (`Store`, `Campaign`), WAL mode, one transaction per batch.
- `ingest`: `Ingestor` — the `ldpfleet serve` loop (persistent MQTT session, manual acks
  after commit; see its docstring for the no-loss/no-double-count argument) and
  `Ingestor.process_batch` (validate/dedupe/fold/commit without MQTT). Rejection reasons:
  `ingest.REASONS`.
- `campaigns`: `create_campaign`, `close_campaign`, `publish_phase2`, `campaign_status`,
  fleet key files; two-phase protocols (LDPMiner, LDPLCM): `create_protocol_campaign`,
  `advance_campaign`.
- `estimates`: `compute_estimates` -> `EstimateTable` (confidence intervals, post-processing,
  top-K, threshold; JSON/CSV/text); `compute_answer` -> `ProtocolAnswer` (a protocol
  campaign's final answer in phase 2).
- `http_metrics`: `ServiceMetrics` (Prometheus).
- `broker`: `BrokerSettings.from_url`, `publish`.

Programmatic use (what `ldpfleet demo` / end-to-end tests need):

    from ldpfleet.service import BrokerSettings, Store, ServeProcess, create_campaign
    broker = BrokerSettings.from_url("mqtt://127.0.0.1:1883")
    with Store("sqlite:////tmp/agg.db") as store:
        create_campaign(store, broker, "fleet.key", "cpu", "olh", 2.0, "0-1023")
    serve = ServeProcess(broker.url, "sqlite:////tmp/agg.db").start()   # subprocess, ready
    ...                                                                  # devices publish
    serve.wait_counts("cpu", lambda c: c.get("accepted", 0) >= n_sent, timeout=60)
    serve.stop()
    with Store("sqlite:////tmp/agg.db") as store:
        table = compute_estimates(store, "cpu", top=10)

or in-process: `Ingestor(state_url, broker, IngestOptions(...)).run()` in a thread, `.stop()`.
"""
import json
import os
import signal
import subprocess
import sys
import time

from .broker import BrokerSettings
from .campaigns import (advance_campaign, campaign_status, close_campaign, create_campaign,
                        create_protocol_campaign, publish_phase2)
from .estimates import compute_answer, compute_estimates
from .ingest import REASONS, IngestOptions, Ingestor
from .store import Store, state_path

__all__ = ["BrokerSettings", "Store", "Ingestor", "IngestOptions", "REASONS", "ServeProcess",
           "create_campaign", "close_campaign", "publish_phase2", "campaign_status",
           "create_protocol_campaign", "advance_campaign", "compute_answer",
           "compute_estimates", "wait_counts"]


def wait_counts(state_url: str, campaign: str, predicate, timeout: float = 60.0,
                poll: float = 0.1, process=None) -> dict:
    """Poll a campaign's committed counters (`campaign=None`: summed over all campaigns and
    the global "" key) until `predicate(counters)` holds; returns them.

    Raises TimeoutError (with the last counters), or RuntimeError if `process` (a Popen) died."""
    deadline = time.monotonic() + timeout
    with Store(state_url) as store:
        while True:
            counters = store.counters(campaign)
            if predicate(counters):
                return counters
            if process is not None and process.poll() is not None:
                raise RuntimeError("serve exited with %s; counters %s" % (process.returncode, counters))
            if time.monotonic() > deadline:
                raise TimeoutError("counters of %s after %.0f s: %s" % (campaign, timeout, counters))
            time.sleep(poll)


class ServeProcess:
    """`ldpfleet serve` as a subprocess (`sys.executable -m ldpfleet.cli serve ...`), with its
    output in `log_path`. `start()` returns once it has subscribed (the state file's
    `ingest.ready` meta names its pid). `kill()` is SIGKILL by PID; `stop()` is SIGTERM (the
    pending batch is committed and acknowledged first)."""

    def __init__(self, broker_url: str, state_url: str, client_id: str = None, batch_size: int = None,
                 batch_ms: float = None, metrics_port: int = None, log_path: str = None,
                 extra_args=(), env: dict = None):
        self.state_url = state_url
        self.args = [sys.executable, "-m", "ldpfleet.cli", "serve", "--broker", broker_url,
                     "--state", state_url]
        for flag, value in (("--client-id", client_id), ("--batch-size", batch_size),
                            ("--batch-ms", batch_ms), ("--metrics-port", metrics_port)):
            if value is not None:
                self.args += [flag, str(value)]
        self.args += list(extra_args)
        self.log_path = log_path or state_path(state_url) + ".serve.log"
        self.env = env
        self.proc = None

    def start(self, timeout: float = 30.0, wait_ready: bool = True) -> "ServeProcess":
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        finally:
            log.close()
        if not wait_ready:
            return self
        deadline = time.monotonic() + timeout
        with Store(self.state_url) as store:
            while True:
                ready = store.meta("ingest.ready")
                if ready and json.loads(ready).get("pid") == self.proc.pid:
                    return self
                if self.proc.poll() is not None:
                    raise RuntimeError("serve exited with %s:\n%s" % (self.proc.returncode, self.log()))
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError("serve did not subscribe within %.0f s:\n%s" % (timeout, self.log()))
                time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL by PID (crash simulation)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait; SIGKILL if it does not exit. Returns the exit code."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return None if self.proc is None else self.proc.returncode

    def wait_counts(self, campaign: str, predicate, timeout: float = 60.0) -> dict:
        return wait_counts(self.state_url, campaign, predicate, timeout, process=self.proc)

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-6000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
