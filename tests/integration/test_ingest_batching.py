"""When `serve` commits: a drained backlog's last batch does not wait for `--batch-ms` (the
broker had nothing more for IDLE_FLUSH_S), and a batch never holds more than `--batch-size`
messages (the counters move in steps of at most that)."""
import time

import numpy as np

from support.service import ServeProcess, new_campaign, publisher, report_messages


def test_last_batch_commits_when_the_broker_is_idle(tmp_path, mosquitto):
    state, camp = new_campaign(tmp_path, mosquitto.url, "idle", "grr", 1.0, "0-15")
    rng = np.random.default_rng(5)
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 16, 300), rng)
    # batch_ms of 60 s: only the idle rule can commit these 300 reports quickly
    serve = ServeProcess(mosquitto.url, state, batch_size=100000, batch_ms=60000).start()
    try:
        pub = publisher(mosquitto.url, "pub-idle")
        started = time.monotonic()
        pub.publish_all(report_messages("idle", reports))
        pub.wait_acked()
        pub.close()
        serve.wait_counts("idle", lambda c: c.get("accepted", 0) >= 300, timeout=20)
        assert time.monotonic() - started < 20
    finally:
        serve.stop()


def test_batches_are_bounded_by_batch_size(tmp_path, mosquitto):
    """One socket read brings thousands of queued reports; they are committed in batches of at
    most --batch-size (the exporter's batch-size histogram: every batch <= 1000)."""
    import re
    import urllib.request
    from support.brokers import free_port
    state, camp = new_campaign(tmp_path, mosquitto.url, "bound", "grr", 1.0, "0-15")
    rng = np.random.default_rng(6)
    n = 6000
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 16, n), rng)
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, client_id="bound-serve", batch_size=700,
                         batch_ms=50, metrics_port=port).start()
    serve.stop()  # the session exists; the reports queue up for it
    pub = publisher(mosquitto.url, "pub-bound")
    pub.publish_all(report_messages("bound", reports))
    pub.wait_acked()
    pub.close()
    serve.start()
    try:
        serve.wait_counts("bound", lambda c: c.get("accepted", 0) >= n, timeout=60)
        deadline = time.monotonic() + 20
        while True:
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port).read().decode()
            total = float(re.search(r"^ldpfleet_batch_reports_sum (\S+)", text, re.M).group(1))
            if total >= n or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        serve.stop()
    count = float(re.search(r"^ldpfleet_batch_reports_count (\S+)", text, re.M).group(1))
    small = float(re.search(r'^ldpfleet_batch_reports_bucket\{le="1000.0"\} (\S+)', text,
                            re.M).group(1))
    assert total == n and count >= n / 700
    assert small == count, text  # no batch above 1000 messages


def test_a_flush_remainder_does_not_carry_its_read_buffer_along():
    """After a flush takes the first batch_size messages, the rest still shares the read's
    buffer; concatenating it with the next read copies only the rest's own bytes (before, each
    flush copied every committed byte again and the buffer grew with every flush)."""
    from ldpfleet.service.ingest.batch import ReportBatch
    msgs = [("ldp/c/r/d%04d" % i, bytes([i % 256]) * 40) for i in range(1000)]
    first = ReportBatch.from_pairs(msgs[:600])
    rest = first.take(np.arange(500, 600))  # what _flush keeps pending after a batch of 500
    assert rest.data.size == first.data.size  # shared: the whole read
    joined = ReportBatch.concat([rest, ReportBatch.from_pairs(msgs[600:])])
    per_message = first.data.size // 600
    assert joined.data.size == 500 * per_message
    assert [joined.topic(i) for i in range(len(joined))] == [t for t, _p in msgs[500:]]
    assert [joined.payload(i) for i in range(len(joined))] == [p for _t, p in msgs[500:]]
    assert np.array_equal(joined.headers(np.arange(3))[0],
                          np.frombuffer(b"".join(p[:12] for _t, p in msgs[500:503]),
                                        np.uint8).reshape(3, 12))


def test_gathering_refuses_indices_and_spans_outside_the_batch():
    """`ReportBatch.gather` (one C call, ldp_gather_spans) checks every index against the
    message arrays and every whole span against the buffer: an error, never a read outside."""
    import pytest
    from ldpfleet.service.ingest.batch import ReportBatch
    batch = ReportBatch.from_pairs([("ldp/c/r/a", b"x" * 20), ("ldp/c/r/b", b"y" * 20)])
    assert batch.rows(np.array([1, 0]), 20).tobytes() == b"y" * 20 + b"x" * 20
    for bad in ([2], [-1]):
        with pytest.raises(IndexError):
            batch.rows(np.array(bad), 20)
    past = ReportBatch(batch.data, batch.topic_off, batch.topic_len, batch.payload_off,
                       batch.payload_len + np.array([0, 5]))  # the last span runs past the buffer
    with pytest.raises(IndexError):
        past.headers(np.array([1]))  # even though a header (12 bytes) would fit
    assert past.headers(np.array([0]))[0].tobytes() == b"x" * 12


def test_kernel_pool_runs_nested_maps_inline_and_forked_children_make_their_own():
    import os
    from ldpfleet.core import kernels
    inner = kernels.parallel_map(lambda a: kernels.parallel_map(lambda b: a * b, range(8), 2),
                                 range(8), 2)  # a nested map on the pool's own threads
    assert inner == [[a * b for b in range(8)] for a in range(8)]
    assert 2 in kernels._POOLS
    pid = os.fork()
    if pid == 0:  # the child: no inherited pool, and a fresh one works
        ok = not kernels._POOLS and kernels.parallel_map(lambda x: x + 1, range(4), 2) == [1, 2, 3, 4]
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0
