"""Helpers of the service tests: a campaign in a temp state file, `serve` as a subprocess
that can be waited on, the reports of many devices, the metrics endpoint. Publishing goes
through the product's `ldpfleet.mqtt.client.QosPublisher` (`publisher()`)."""
import os
import time
import urllib.request

import numpy as np

from ldpfleet.loadgen import serve_process
from ldpfleet.mqtt.client import QosPublisher
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.core.signing import write_signing_key


def publisher(broker_url: str, client_id: str = "test-publisher", max_inflight: int = 2000):
    """A QoS 1 publisher with a persistent session: a broker restart loses nothing in flight
    (paho reconnects and re-sends)."""
    return QosPublisher(broker_url, client_id, max_inflight=max_inflight, persistent=True)


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



class ServeProcess(serve_process.ServeProcess):
    """The product's serve subprocess, plus waiting on its committed counters."""

    def wait_counts(self, campaign: str, predicate, timeout: float = 60.0) -> dict:
        return wait_counts(self.state_url, campaign, predicate, timeout, process=self.proc)



def new_campaign(tmp_path, broker_url, name, mechanism, epsilon, domain, params=None,
                 state_name="state.db"):
    """Create (sign + publish + store) a campaign; returns (state URL, Campaign)."""
    key_file = os.path.join(str(tmp_path), "fleet-%s.key" % name)
    if not os.path.exists(key_file):
        write_signing_key(key_file)
    state = "sqlite:///" + os.path.join(str(tmp_path), state_name)
    with Store(state) as store:
        camp = create_campaign(store, BrokerSettings.from_url(broker_url), key_file, name,
                               mechanism, epsilon, domain, params=params)
    return state, camp


def device_topics(campaign: str, n: int, prefix: str = "dev", start: int = 0):
    return ["ldp/%s/r/%s%d" % (campaign, prefix, i) for i in range(start, start + n)]


def report_messages(campaign: str, reports: np.ndarray, prefix: str = "dev", start: int = 0):
    """(topic, payload) of one report per device `prefix<i>`."""
    return list(zip(device_topics(campaign, reports.shape[0], prefix, start),
                    (row.tobytes() for row in reports)))


def direct_sketch(mech, reports: np.ndarray):
    """The in-process reference: a fresh sketch fed the reports in one update."""
    sketch = mech.new_sketch()
    sketch.update(np.ascontiguousarray(reports))
    return sketch


def scrape_metrics_until(port: int, lines, timeout: float = 30.0) -> str:
    """The exporter's text once it contains every one of `lines`. The serve process commits a
    batch to the store first and updates its Prometheus counters after acknowledging it, so a
    reader that saw the store's counters must still wait for the exporter to catch up."""
    deadline = time.monotonic() + timeout
    while True:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
        missing = [line for line in lines if line not in text]
        if not missing:
            return text
        if time.monotonic() > deadline:
            raise TimeoutError("metrics never showed %r; last scrape:\n%s" % (missing, text))
        time.sleep(0.05)


def fold_batch(state: str, messages, worker: str = ""):
    """One worker's batch through the real ingest path (validate, dedupe, fold, commit), in
    process; returns its counts {(campaign, reason): n}."""
    from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
    ingestor = Ingestor(state, options=IngestOptions(client_id=worker))
    try:
        return ingestor.process_batch(messages)
    finally:
        ingestor.store.close()


def cli_json(capsys, *args):
    """`ldpfleet ARGS --json` in this process (pytest's capsys): the parsed JSON it printed;
    fails the test on a non-zero exit, showing stderr."""
    import json
    from ldpfleet import cli
    capsys.readouterr()
    status = cli.main([str(a) for a in args] + ["--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)
