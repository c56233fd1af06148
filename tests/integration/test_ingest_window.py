"""serve behind a broker with Mosquitto's packaged limits (max_inflight_messages 20,
max_queued_messages 1000): with MQTT 5 (its default) it announces a Receive Maximum, so the
broker sends it whole batches and a connected serve takes a burst far above the 1,020 the
broker would otherwise hold for it. A broker that holds a strict window (MQTT 3.1.1, or fewer
than announced) has it learned (service/ingest/inflight.py; Mosquitto 2.0.11 lets a whole window more
through with every PUBACK, so there it never settles)."""
import threading

import numpy as np

from ldpfleet.loadgen.bulk import BulkPublisher
from ldpfleet.mqtt.client import BrokerSettings
from ldpfleet.service.ingest.inflight import LEARN_STREAK, InflightWindow
from support.brokers import PrivateMosquitto
from support.service import ServeProcess, new_campaign


def test_window_is_learned_from_repeated_idle_counts_and_forgotten_when_exceeded():
    w = InflightWindow()
    assert w.limit is None and not w.full(10 ** 6)
    for i in range(LEARN_STREAK - 1):
        assert not w.idle(20)
    assert w.limit is None  # one streak short
    assert w.idle(20) and w.limit == 20 and w.full(20) and not w.full(19)
    assert not w.idle(20)  # already known
    w.saw(20)
    assert w.limit == 20
    w.saw(21)  # a read brought more than the window allows: it was wrong
    assert w.limit is None
    w.idle(5), w.idle(7), w.idle(5), w.idle(5)
    assert w.limit is None  # not LEARN_STREAK equal counts in a row
    w.idle(5)
    assert w.limit == 5
    w.reset()
    assert w.limit is None


def test_announced_receive_maximum_bounds_the_window():
    w = InflightWindow(announced=1000)
    assert w.limit == 1000 and w.full(1000) and not w.full(999)
    for _ in range(LEARN_STREAK):
        w.idle(1000)
    assert w.learned is None  # idle at the announced window teaches nothing new
    for _ in range(LEARN_STREAK):
        w.idle(32)  # a broker granting fewer (EMQX caps at its max_inflight)
    assert w.limit == 32


def _burst(url, campaign, reports, client_id):
    pub = BulkPublisher(BrokerSettings.from_url(url), client_id, max_inflight=5000)
    try:
        topics = ["ldp/%s/r/dev%d" % (campaign, i) for i in range(len(reports))]
        pub.publish_rows(topics, reports)
        pub.wait_acked(60)
    finally:
        pub.close()


def test_connected_serve_takes_a_burst_far_above_packaged_limits(tmp_path):
    """20,000 reports as fast as one publisher sends them, serve connected with its defaults:
    every one accepted and the broker's own drop counter stays 0 (no re-sends here: a campaign
    without acknowledgements). With MQTT 3.1.1 and a 20 ms idle rule serve drained about
    1,000/s behind these limits and the broker dropped most of such a burst."""
    from test_delivery import broker_dropped
    n = 20000
    with PrivateMosquitto(stock=True, extra_conf="sys_interval 1\n") as mosq:
        state, camp = new_campaign(tmp_path, mosq.url, "burst5", "olh", 2.0, "0-63")
        rng = np.random.default_rng(28)
        reports = camp.mechanism(1).perturb_batch(rng.integers(0, 64, n), rng)
        serve = ServeProcess(mosq.url, state, extra_args=["--no-broker-check"]).start()
        try:
            _burst(mosq.url, "burst5", reports, "pub-burst5")
            counts = serve.wait_counts("burst5", lambda c: c.get("accepted", 0) >= n, timeout=60)
            assert counts["accepted"] == n
            assert broker_dropped(mosq.port) == 0
        finally:
            serve.stop()


def test_a_broker_without_mqtt5_gets_a_hint(tmp_path, caplog):
    """MQTT 5 is serve's default: a broker that only speaks 3.1.1 answers its CONNECT with
    return code 1 (unacceptable protocol version), and serve says to use --mqtt 4. (No broker
    here lacks MQTT 5: a socket plays one, answering every connection with that CONNACK.)"""
    import logging
    import socket
    from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"\x20\x02\x00\x01")
    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    ingestor = Ingestor("sqlite:///%s" % (tmp_path / "s.db"),
                        BrokerSettings.from_url("mqtt://127.0.0.1:%d" % port),
                        IngestOptions(client_id="old-broker"))
    try:
        with caplog.at_level(logging.ERROR, logger="ldpfleet.service"):
            assert ingestor._connect() is None
    finally:
        ingestor.store.close()
        server.close()
    assert "a broker without MQTT 5 needs serve --mqtt 4" in caplog.text, caplog.text
