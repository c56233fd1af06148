"""A load-generator login (topics ldp/<c>/r/<login>/<id>) brings at most
`--max-devices-per-login` device ids into a campaign phase: reports of further new ids are
counted as `device_limit` (acknowledged as rejected, one bounded log line naming the login),
ids already in keep deduplicating, other logins and real devices are not affected, and the
count survives a restart and is shared by workers (both backends); `serve` takes the option."""
import logging

import numpy as np

from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
from ldpfleet.core.signing import write_signing_key
from support.service import ServeProcess, publisher

BOUND = 50


def campaign(state, broker_url, tmp_path, name="c"):
    key = str(tmp_path / "sign.key")
    write_signing_key(key)
    with Store(state) as store:
        return create_campaign(store, BrokerSettings.from_url(broker_url), key, name, "grr", 2.0,
                               "0-7")


def messages(camp, topics, seed):
    rng = np.random.default_rng(seed)
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 8, len(topics)), rng)
    return [(t, r.tobytes()) for t, r in zip(topics, reports)]


def fold(state, msgs, worker="w", bound=BOUND):
    ingestor = Ingestor(state, options=IngestOptions(client_id=worker, max_devices_per_login=bound))
    try:
        counts = ingestor.process_batch(msgs)
        acks = ingestor.acks
        return {r: n for (c, r), n in counts.items() if c == "c"}, acks
    finally:
        ingestor.store.close()


def test_a_login_brings_at_most_its_bound_of_device_ids(state_url, mosquitto, tmp_path, caplog):
    camp = campaign(state_url, mosquitto.url, tmp_path)
    bulk = messages(camp, ["ldp/c/r/bulk/sim-%d" % i for i in range(80)], 1)
    real = messages(camp, ["ldp/c/r/dev-%d" % i for i in range(70)], 2)
    caplog.set_level(logging.WARNING, "ldpfleet.service")
    counts, acks = fold(state_url, bulk + real, "w1")
    assert counts == {"received": 150, "accepted": BOUND + 70, "device_limit": 80 - BOUND}
    assert "login bulk already brought 0 device ids (serve --max-devices-per-login 50); 30 new " \
           "id(s) refused" in caplog.text
    status = {t: p[3] for t, p in zip((t for t, _ in bulk + real), acks.payloads)}
    assert len(acks) == 150 and sorted(status.values()).count(0) == BOUND + 70  # 0: accepted

    # the admitted ids are still deduplicated; another worker sees the count; new ids refused
    again = bulk[:BOUND] + messages(camp, ["ldp/c/r/bulk/late-%d" % i for i in range(10)], 3)
    other = messages(camp, ["ldp/c/r/bulk2/sim-%d" % i for i in range(60)], 4)
    counts, _acks = fold(state_url, again + other, "w2")
    assert counts == {"received": 120, "duplicate": BOUND, "device_limit": 10 + 60 - BOUND,
                      "accepted": BOUND}
    with Store(state_url) as store:
        assert store.login_devices("c", 1, "bulk") == BOUND
        assert store.login_devices("c", 1, "bulk2") == BOUND
        assert store.counters("c")["device_limit"] == 30 + 20
        assert store.seen_count("c", 1) == 70 + 2 * BOUND
    # a higher bound (a restart with another option) lets the refused ids in
    counts, _acks = fold(state_url, bulk[BOUND:], "w1", bound=BOUND + 30)
    assert counts == {"received": 30, "accepted": 30}
    counts, _acks = fold(state_url, bulk[:3], "w1", bound=0)  # 0: no bound
    assert counts == {"received": 3, "duplicate": 3}


def test_serve_takes_the_bound(mosquitto, tmp_path):
    state = "sqlite:///" + str(tmp_path / "state.db")
    camp = campaign(state, mosquitto.url, tmp_path)
    serve = ServeProcess(mosquitto.url, state, extra_args=[
        "--no-broker-check", "--max-devices-per-login", "5"]).start()
    try:
        pub = publisher(mosquitto.url)
        pub.publish_all(messages(camp, ["ldp/c/r/loadgen/x%d" % i for i in range(8)], 5))
        pub.wait_acked()
        pub.close()
        counters = serve.wait_counts("c", lambda c: c.get("received", 0) >= 8)
    finally:
        assert serve.stop() == 0, serve.log()
    assert counters == {"received": 8, "accepted": 5, "device_limit": 3}
    assert "login loadgen already brought" in serve.log()
