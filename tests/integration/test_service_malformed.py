"""100,000 bad messages mixed with 15,000 good reports: the service stays up, every bad
message is counted under its own reason, every good report is counted exactly once and the
sketch equals an in-process sketch fed only the good reports."""
import numpy as np
import pytest

from ldpfleet.service import Store, close_campaign

from support.service import ServeProcess
from ldpfleet.service.ingest.loop import Ingestor
from ldpfleet.service.state.store import GLOBAL
from support.service import publisher, direct_sketch, new_campaign, report_messages

SEED = 99173
D = 64


def mutate(report: bytes, pos: int, value: int) -> bytes:
    b = bytearray(report)
    b[pos] = value
    return bytes(b)


def with_u32(report: bytes, offset: int, value: int) -> bytes:
    return report[:offset] + int(value).to_bytes(4, "little") + report[offset + 4:]


def bad_messages(rng, mech, closed_mech, wave1, good_msgs):
    """[(topic, payload)] and {(campaign key, reason): count} of what the service must count."""
    spare = mech.perturb_batch(rng.integers(0, D, 20000), rng, seq_start=1000)
    closed_reports = closed_mech.perturb_batch(rng.integers(0, D, 1500), rng)
    pool = iter(row.tobytes() for row in spare)
    out, want = [], {}

    def add(reason, topic, payload, key="good"):
        out.append((topic, payload))
        want[(key, reason)] = want.get((key, reason), 0) + 1

    for i in range(3000):  # truncated, down to empty
        add("size", "ldp/good/r/t%d" % i, next(pool)[:int(rng.integers(0, 16))])
    for i in range(2000):  # oversized; a few by 100 kB: longer than any report, dropped on arrival
        extra = 100_000 if i < 5 else int(rng.integers(1, 200))
        add("too_large" if i < 5 else "size", "ldp/good/r/o%d" % i, next(pool) + rng.bytes(extra))
    for i in range(1500):
        add("version", "ldp/good/r/v%d" % i, mutate(next(pool), 0, int(rng.choice([0, 1, 7, 255]))))
    for i in range(1500):
        add("mechanism", "ldp/good/r/m%d" % i, mutate(next(pool), 1, int(rng.integers(2, 256))))
    for i in range(2000):  # wrong phase: the campaign is in phase 1
        add("phase", "ldp/good/r/p%d" % i, mutate(next(pool), 2, int(rng.choice([0, 2, 3, 255]))))
    for i in range(1000):
        add("flags", "ldp/good/r/f%d" % i, mutate(next(pool), 3, int(rng.integers(1, 256))))
    for i in range(1500):
        add("campaign_id", "ldp/good/r/c%d" % i, with_u32(next(pool), 4, mech.campaign_id ^ (1 + i)))
    for i in range(2000):
        add("y", "ldp/good/r/y%d" % i, with_u32(next(pool), 12, int(rng.integers(D, 2**32))))
    for i in range(3000):  # unknown campaigns, many names: counted globally
        add("unknown_campaign", "ldp/nosuch%d/r/u%d" % (i % 125, i), next(pool), key=GLOBAL)
    for i in range(1500):
        add("closed_campaign", "ldp/shut/r/s%d" % i, closed_reports[i].tobytes(), key="shut")
    bad_topics = ["ldp/good/r/dev.%d", "ldp/good/r/" + "x" * 60 + "%05d", "ldp/go!od/r/d%d",
                  "ldp/good/r/gen/sub/d%d", "ldp/good/r/gen//d%d",
                  "ldp/good/r/d%d é"]
    for i in range(1500):
        add("bad_topic", bad_topics[i % len(bad_topics)] % i, next(pool), key=GLOBAL)
    for i in rng.integers(0, len(good_msgs), 3000):  # replayed: same device, same seq
        add("duplicate", *good_msgs[i])
    for i in rng.integers(0, len(wave1), 1500):  # another seq from a device that reported
        topic, payload = wave1[i]
        add("second_report", topic, with_u32(payload, 8, 1 + int(rng.integers(0, 2**31))))
    return out, want


def test_malformed_flood_is_counted_by_reason(tmp_path, mosquitto):
    rng = np.random.default_rng(SEED)
    state, camp = new_campaign(tmp_path, mosquitto.url, "good", "grr", 1.0, str(D))
    _, shut = new_campaign(tmp_path, mosquitto.url, "shut", "grr", 1.0, str(D))
    with Store(state) as store:
        close_campaign(store, "shut")
    mech = camp.mechanism(1)
    good = mech.perturb_batch(rng.zipf(1.5, 6000) % D, rng)
    good_msgs = report_messages("good", good, "g")
    wave1, wave2 = good_msgs[:2000], good_msgs[2000:]
    bad, want = bad_messages(rng, mech, shut.mechanism(1), wave1, good_msgs)
    assert len(bad) == 25_000
    mixed = wave2 + bad
    order = rng.permutation(len(mixed))

    serve = ServeProcess(mosquitto.url, state, batch_size=2000, batch_ms=50).start()
    try:
        pub = publisher(mosquitto.url, "pub-malformed")
        pub.publish_all(wave1)  # first, so that second reports of these devices come after
        serve.wait_counts("good", lambda c: c.get("accepted", 0) >= 2000)
        pub.publish_all(mixed[i] for i in order)
        pub.wait_acked()
        pub.close()
        serve.wait_counts(None, lambda c: c.get("received", 0) >= len(good_msgs) + len(bad))
        assert serve.alive()
    finally:
        assert serve.stop() == 0, serve.log()

    want[("good", "accepted")] = len(good_msgs)
    with Store(state) as store:
        got = {(key, reason): n for key, reasons in store.all_counters().items()
               for reason, n in reasons.items() if reason != "received"}
        received = {key: reasons["received"] for key, reasons in store.all_counters().items()}
        n, blob = store.sketch_blob("good", 1)
        assert store.sketch_blob("shut", 1) is None
    assert got == want
    assert sum(received.values()) == len(good_msgs) + len(bad)
    for key in received:
        assert received[key] == sum(v for (k, _), v in want.items() if k == key)
    assert n == len(good_msgs)
    assert blob == direct_sketch(mech, good).serialize()


def test_process_batch_without_broker(tmp_path, mosquitto):
    """The batch step alone: a topic that is not UTF-8 (None), an empty payload, a good report
    and its replay in the same batch; nothing is folded twice."""
    state, camp = new_campaign(tmp_path, mosquitto.url, "unit", "olh", 2.0, "0-31")
    mech = camp.mechanism(1)
    reports = mech.perturb_batch(np.arange(4), np.random.default_rng(SEED))
    ingest = Ingestor(state)
    msgs = [(None, reports[0].tobytes()), ("ldp/unit/r/a", b""), ("ldp/unit/r/a", reports[1].tobytes()),
            ("ldp/unit/r/a", reports[1].tobytes()), ("ldp/unit/r/b", reports[2].tobytes())]
    counts = ingest.process_batch(msgs)
    assert counts == {(GLOBAL, "received"): 1, (GLOBAL, "bad_topic"): 1, ("unit", "received"): 4,
                      ("unit", "size"): 1, ("unit", "accepted"): 2, ("unit", "duplicate"): 1}
    again = ingest.process_batch([("ldp/unit/r/b", reports[2].tobytes()),
                                  ("ldp/unit/r/b", reports[3].tobytes())])
    assert again == {("unit", "received"): 2, ("unit", "duplicate"): 1, ("unit", "second_report"): 1}
    ingest.store.close()
    with Store(state) as store:
        assert store.sketch_blob("unit", 1)[1] == direct_sketch(mech, reports[1:3]).serialize()


def _peak_rss_kib(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


@pytest.mark.parametrize("mqtt_version", [4, 5])
def test_oversized_flood_keeps_serve_memory_bounded(tmp_path, mosquitto, mqtt_version):
    """200 one-MiB payloads on a campaign's report topics (a broker without a size limit, as in
    the tests): serve drops each when it arrives (`too_large`) or, with MQTT 5, announces a
    Maximum Packet Size so the broker never sends them; its peak RSS does not grow by the
    flood's 200 MiB (a buffered batch of them would), and a real report after it is accepted."""
    import time
    state, camp = new_campaign(tmp_path, mosquitto.url, "big", "olh", 2.0, "16")
    serve = ServeProcess(mosquitto.url, state, batch_size=2000, batch_ms=2000,
                         extra_args=["--mqtt", str(mqtt_version), "--max-packet-bytes", "65536",
                                     "--no-broker-check"]).start()
    try:
        before = _peak_rss_kib(serve.pid)
        pub = publisher(mosquitto.url, "flood-%d" % mqtt_version, max_inflight=20)
        try:
            for i in range(200):
                pub.publish("ldp/big/r/dev-%d" % i, bytes(1 << 20))
            report = camp.mechanism(1).perturb(3)
            pub.publish("ldp/big/r/honest", report)
            pub.wait_acked(60)
        finally:
            pub.close()
        counts = serve.wait_counts("big", lambda c: c.get("accepted", 0) == 1, timeout=60)
        time.sleep(0.5)
        grown = _peak_rss_kib(serve.pid) - before
        assert grown < 64 * 1024, "serve's peak RSS grew by %d KiB" % grown
        if mqtt_version == 4:
            assert counts.get("too_large") == 200, counts
        else:  # the broker kept them from us
            assert counts.get("received") == 1 and "too_large" not in counts, counts
    finally:
        serve.stop()


def test_one_huge_publish_is_skipped_as_it_streams(tmp_path, mosquitto):
    """MQTT 3.1.1 cannot announce a Maximum Packet Size and a stock broker forwards a 48 MiB
    publish: serve skips it as it streams in (never holding it), counts it `too_large`,
    acknowledges it (it is not redelivered), and accepts the report after it."""
    import time
    state, camp = new_campaign(tmp_path, mosquitto.url, "huge", "grr", 1.0, "0-7")
    serve = ServeProcess(mosquitto.url, state, batch_size=100, batch_ms=50,
                         extra_args=["--mqtt", "4", "--max-packet-bytes", "65536",
                                     "--no-broker-check"]).start()
    try:
        before = _peak_rss_kib(serve.pid)
        pub = publisher(mosquitto.url, "huge-pub", max_inflight=5)
        try:
            pub.publish("ldp/huge/r/dev-big", bytes(48 << 20))
            pub.publish("ldp/huge/r/honest", camp.mechanism(1).perturb(3))
            pub.wait_acked(60)
        finally:
            pub.close()
        counts = serve.wait_counts("huge", lambda c: c.get("accepted", 0) == 1, timeout=60)
        time.sleep(0.5)
        grown = _peak_rss_kib(serve.pid) - before
        assert counts.get("too_large") == 1 and counts.get("received") == 2, counts
        assert grown < 24 * 1024, "serve's peak RSS grew by %d KiB" % grown
        serve.stop()
        serve.start()  # it was acknowledged: nothing comes back after a restart
        time.sleep(1.0)
        counts = serve.wait_counts("huge", lambda c: True)
        assert counts.get("received") == 2, counts
    finally:
        serve.stop()
