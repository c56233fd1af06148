"""Several `serve` workers on one PostgreSQL state: `serve --group` subscribes through
the MQTT shared subscription `$share/<group>/ldp/+/r/#`, each worker with its own persistent
session and its own sketch partial. Three workers ingest a stream while one of them is SIGKILLed
and restarted and the broker is restarted once: every report is accepted exactly once, and the
merged sketch is byte-identical to one in-process sketch of the same reports. Two workers folding
the same reports at the same time (what a broker that hands a redelivery to another member of
the group, or a replaying device, causes) accept each exactly once: the dedupe key is claimed
with INSERT ... ON CONFLICT DO NOTHING in the batch's transaction (`claims.PostgresClaims`)."""
import threading
import time

import numpy as np
import pytest

from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.core.signing import write_signing_key
from support.service import ServeProcess, direct_sketch, publisher, report_messages, wait_counts

SEED = 9090


def worker(broker_url, state, name, tmp_path):
    return ServeProcess(broker_url, state, client_id=name, batch_size=300, batch_ms=20,
                        log_path=str(tmp_path / ("%s.log" % name)),
                        extra_args=["--group", "pool", "--no-broker-check",
                                    "--status-interval", "0"])


def test_three_workers_kill9_and_broker_restart(postgres_url, mosquitto, tmp_path):
    rng = np.random.default_rng(SEED)
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(postgres_url) as store:
        camp = create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "pool", "olh",
                               2.0, "0-255", params={"g": 6}, issue=Issuance(campaign_id=5150))
    mech = camp.mechanism(1)
    n = 24000
    reports = mech.perturb_batch(rng.zipf(1.3, n) % 256, rng)
    messages = report_messages("pool", reports)

    workers = [worker(mosquitto.url, postgres_url, "w%d" % i, tmp_path).start() for i in range(3)]
    pub = publisher(mosquitto.url, "pub-pool", max_inflight=1000)
    progress = {"n": 0}
    thread = threading.Thread(target=lambda: pub.publish_all(
        messages, on_progress=lambda k: progress.__setitem__("n", k)), daemon=True)
    try:
        thread.start()
        wait_counts(postgres_url, "pool", lambda c: c.get("accepted", 0) >= n // 5, timeout=60)
        workers[1].kill()  # SIGKILL mid-stream: its session keeps queueing its share
        time.sleep(0.3)
        workers[1].start(wait_ready=False)
        deadline = time.monotonic() + 60
        while progress["n"] < n // 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        mosquitto.restart()  # every worker reconnects; persistence keeps the queues
        thread.join(180)
        pub.wait_acked(120)
        counters = wait_counts(postgres_url, "pool", lambda c: c.get("accepted", 0) >= n,
                               timeout=120)
        time.sleep(0.5)  # anything still in flight would show as a double count now
        assert all(w.alive() for w in workers), [w.log() for w in workers]
    finally:
        pub.close()
        for w in workers:
            w.stop()
    with Store(postgres_url) as store:
        counters = store.counters("pool")
        n_stored, blob = store.sketch_blob("pool", 1)
        partials = store.db.execute("SELECT worker, n FROM sketches WHERE campaign='pool'"
                                    " ORDER BY worker").fetchall()
        seen = store.seen_count("pool", 1)
    assert counters["accepted"] == n and seen == n and n_stored == n
    assert set(counters) <= {"received", "accepted", "duplicate"}, counters
    assert counters["received"] == n + counters.get("duplicate", 0)
    assert blob == direct_sketch(mech, reports).serialize()
    # the load was shared: every worker folded a partial of its own
    assert [w for w, _n in partials] == ["w0", "w1", "w2"], partials
    assert sum(k for _w, k in partials) == n and min(k for _w, k in partials) > 0


def test_concurrent_workers_claim_each_report_once(postgres_url, mosquitto, tmp_path):
    from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(postgres_url) as store:
        camp = create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "race", "grr",
                               1.0, "0-31", issue=Issuance(campaign_id=77))
    rng = np.random.default_rng(SEED + 1)
    n = 6000
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 32, n), rng)
    messages = report_messages("race", reports)
    orders = [rng.permutation(n) for _ in range(3)]
    errors = []

    def run(name, order):
        ingestor = Ingestor(postgres_url, options=IngestOptions(client_id=name))
        try:
            for start in range(0, n, 400):
                ingestor.process_batch([messages[i] for i in order[start:start + 400]])
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            ingestor.store.close()

    threads = [threading.Thread(target=run, args=("r%d" % i, order))
               for i, order in enumerate(orders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    with Store(postgres_url) as store:
        counters = store.counters("race")
        blob = store.sketch_blob("race", 1)[1]
    assert counters == {"received": 3 * n, "accepted": n, "duplicate": 2 * n}
    assert blob == direct_sketch(camp.mechanism(1), reports).serialize()


def test_group_needs_postgresql_and_distinct_client_ids(postgres_url, mosquitto, tmp_path):
    from ldpfleet.cli import main
    assert main(["serve", "--broker", mosquitto.url, "--state", str(tmp_path / "s.db"),
                 "--group", "pool"]) == 2
    first = worker(mosquitto.url, postgres_url, "same", tmp_path).start()
    try:
        second = worker(mosquitto.url, postgres_url, "same", tmp_path)
        second.start(wait_ready=False)
        assert second.proc.wait(30) == 2
        assert "another serve runs with client id same" in second.log()
    finally:
        first.stop()


@pytest.mark.parametrize("bad", ["a/b", "#", "x+y"])
def test_group_name_is_one_topic_level(bad, tmp_path, postgres_url, mosquitto):
    from ldpfleet.cli import main
    assert main(["serve", "--broker", mosquitto.url, "--state", postgres_url,
                 "--group", bad]) == 2
