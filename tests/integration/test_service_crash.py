"""No loss and no double count across `kill -9` of the aggregator and a broker restart.

The aggregator acks a batch to the broker only after the SQLite transaction holding its
sketch increments, dedupe keys and counters has committed (ldpfleet.service.ingest.loop). With
paho's default acknowledgement on receipt instead, these kills lost reports (checked: the
wait for `accepted == sent` times out), as would acking before the commit when a kill lands
in between. Reports replayed after the restarts must all be duplicates: the dedupe keys
survive `kill -9` with the sketch they guard. Whether a kill lands between a commit and its
acks (the broker then redelivers committed reports) depends on timing; when it does, those
reports must show up as `duplicate` and the sketch must still equal the reference."""
import time

import numpy as np

from ldpfleet.service import Store

from support.service import ServeProcess
from support.service import publisher, direct_sketch, new_campaign, report_messages

SEED = 7321


def publish_in_background(url, messages, client_id):
    import threading
    pub = publisher(url, client_id, max_inflight=1000)
    progress = {"n": 0}

    def run():
        pub.publish_all(messages, on_progress=lambda k: progress.__setitem__("n", k))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return pub, thread, progress


def wait_until(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def check_final_state(state, name, mech, reports):
    n = reports.shape[0]
    with Store(state) as store:
        counters = store.counters(name)
        stored_n, blob = store.sketch_blob(name, 1)
        seen = store.seen_count(name, 1)
    assert counters["accepted"] == n
    assert set(counters) <= {"received", "accepted", "duplicate"}, counters
    assert counters["received"] == n + counters.get("duplicate", 0)
    assert stored_n == n and seen == n
    assert blob == direct_sketch(mech, reports).serialize()
    return counters


def test_kill9_of_aggregator_loses_and_doubles_nothing(tmp_path, mosquitto):
    rng = np.random.default_rng(SEED)
    state, camp = new_campaign(tmp_path, mosquitto.url, "crash", "grr", 1.0, "0-99")
    mech = camp.mechanism(1)
    n = 30000
    reports = mech.perturb_batch(rng.integers(0, 100, n), rng)
    messages = report_messages("crash", reports)

    serve = ServeProcess(mosquitto.url, state, batch_size=400, batch_ms=20).start()
    pub, thread, progress = publish_in_background(mosquitto.url, messages, "pub-crash")
    kills = sorted(rng.uniform(0.1, 0.8, size=3) * n)
    try:
        for at in kills:
            # kill -9 once the committed count passes a random point, after a random delay
            serve.wait_counts("crash", lambda c, at=at: c.get("accepted", 0) >= at, timeout=60)
            time.sleep(rng.uniform(0, 0.05))
            serve.kill()
            serve.start()
        thread.join(120)
        pub.wait_acked()
        before = serve.wait_counts("crash", lambda c: c.get("accepted", 0) >= n, timeout=60)
        replay = publisher(mosquitto.url, "pub-replay")
        replay.publish_all(messages[i] for i in rng.choice(n, 1000, replace=False))
        replay.wait_acked()
        replay.close()
        after = serve.wait_counts(
            "crash", lambda c: c["received"] >= before["received"] + 1000, timeout=60)
    finally:
        pub.close()
        serve.stop()
    assert after.get("duplicate", 0) == before.get("duplicate", 0) + 1000
    check_final_state(state, "crash", mech, reports)


def test_broker_restart_mid_run_loses_nothing(tmp_path, mosquitto):
    rng = np.random.default_rng(SEED + 1)
    state, camp = new_campaign(tmp_path, mosquitto.url, "bounce", "olh", 2.0, "0-127")
    mech = camp.mechanism(1)
    n = 20000
    reports = mech.perturb_batch(rng.integers(0, 128, n), rng)
    messages = report_messages("bounce", reports)

    serve = ServeProcess(mosquitto.url, state, batch_size=500, batch_ms=20).start()
    pub, thread, progress = publish_in_background(mosquitto.url, messages, "pub-bounce")
    try:
        at = int(rng.uniform(0.2, 0.6) * n)
        wait_until(lambda: progress["n"] >= at, what="publisher progress")
        mosquitto.restart()
        thread.join(120)
        pub.wait_acked(120)
        serve.wait_counts("bounce", lambda c: c.get("accepted", 0) >= n, timeout=90)
        assert serve.alive()
    finally:
        pub.close()
        serve.stop()
    check_final_state(state, "bounce", mech, reports)
