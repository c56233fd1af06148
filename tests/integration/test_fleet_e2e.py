"""A mixed fleet end to end: 20 MicroPython device processes (device/, via
ldpfleet.provision.device_runner) and 5 C clients (device/c_client) with different values, one private
Mosquitto, one CPython paho subscriber (spec §4-§6).

* Every device's report arrives and the core parser (`mechanism_for_phase(config, 1).check`)
  accepts it; a second trigger (the config published again) brings byte-identical reports.
* The broker is killed (SIGKILL) and restarted mid-run; every device, MicroPython and C,
  reconnects and delivers its memoised report again; ledgers show one spend per device.
* A broker that stops answering (SIGSTOP) is detected by the C client's keepalive; it
  reconnects once the broker answers again and delivers.
"""
import os
import signal
import time


from support.c_client import assert_no_sanitizer_report, build_client, start_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc, stop_processes
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger
from ldpfleet.core import protocol

MICROPYTHON_DEVICES = 20
C_DEVICES = 5


def by_topic(reports):
    out = {}
    for topic, payload in reports:
        out.setdefault(topic, []).append(payload)
    return out


def wait_all(collector, topics, count, timeout=90):
    """Wait until every topic has `count` reports; assert it."""
    def ready(reports):
        got = by_topic(reports)
        return all(len(got.get(t, [])) >= count for t in topics)
    reports = collector.wait_for(ready, timeout)
    got = by_topic(reports)
    assert ready(reports), "missing: %s" % sorted(t for t in topics if len(got.get(t, [])) < count)
    return reports


def wait_logs(paths, text, count, timeout=60):
    """Wait until every log file holds `text` at least `count` times; assert it."""
    deadline = time.monotonic() + timeout
    while True:
        short = [p for p in paths if (p.read_text() if p.exists() else "").count(text) < count]
        if not short or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not short, "no %r x%d in %s" % (text, count, [p.name for p in short])


def test_mixed_fleet_survives_broker_kill(mosquitto, tmp_path):
    doc = config_doc("fleet", mechanism="cms", eps_milli=1000, params={"k": 8, "m": 64})
    mech = campaign_config.mechanism_for_phase(doc, 1)
    payload = campaign_config.sign(doc, SIGNING_KEY)
    lib_dir = device_runner.compile_mpy(tmp_path / "mpy")
    binary = build_client()

    devices = []  # (device id, state dir, log path, kind)
    for i in range(MICROPYTHON_DEVICES):
        dev = "mp-%02d" % i
        state = device_runner.prepare_device(tmp_path / dev, dev, SIGNING_KEY, value=i, campaign="fleet")
        devices.append((dev, state, tmp_path / (dev + ".log"), "mp"))
    for i in range(C_DEVICES):
        dev = "c-%02d" % i
        state = device_runner.prepare_device(tmp_path / dev, dev, SIGNING_KEY)
        devices.append((dev, state, tmp_path / (dev + ".log"), "c"))
    topics = ["ldp/fleet/r/%s" % dev for dev, _, _, _ in devices]
    logs = [log for _, _, log, _ in devices]

    collector = ReportCollector(mosquitto.port)
    procs = []
    try:
        for i, (dev, state, log, kind) in enumerate(devices):  # values: 0..19 (MicroPython), 40..44 (C)
            if kind == "mp":
                procs.append(device_runner.start_device(state, "127.0.0.1", mosquitto.port, "fleet",
                                                        log_path=log, lib_dir=lib_dir, keepalive=5,
                                                        backoff_max=1, timeout=170))
            else:
                procs.append(start_client(binary, state, mosquitto.port, "fleet", 40 + i % 20, log,
                                          keepalive=5, backoff_max=1, timeout=170))
        wait_logs(logs, "connected", 1)
        collector.publish("ldp/fleet/config", payload)
        first = by_topic(wait_all(collector, topics, 1))

        collector.publish("ldp/fleet/config", payload)  # a second trigger
        wait_all(collector, topics, 2)

        collector.subscribed.clear()
        mosquitto.stop(signal.SIGKILL)  # a crash: no clean shutdown
        wait_logs(logs, "connection-lost", 1)
        mosquitto.start()
        assert collector.subscribed.wait(15), "the subscriber did not come back"
        wait_logs(logs, "connected", 2)
        collector.publish("ldp/fleet/config", payload)  # what the aggregator does after a restart
        reports = wait_all(collector, topics, 3)
    finally:
        stop_processes(procs)
        collector.close()

    got = by_topic(reports)
    assert sorted(got) == sorted(topics)
    for (dev, state, log, kind), topic in zip(devices, topics):
        sent = got[topic]
        assert len(set(sent)) == 1, "%s sent different reports" % dev
        assert sent[0] == first[topic][0]
        arr = mech.check(sent)  # the core parser accepts every report
        assert arr.shape == (len(sent), mech.report_size)
        cid, nonce = protocol.parse_header(sent[0])[4:]  # nonce: random per phase (spec §3)
        assert cid == doc["campaign_id"]
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == 1000
        assert ledger["reports"] == {"%d:1" % doc["campaign_id"]: [nonce, 1000, sent[0].hex()]}
        text = log.read_text()
        assert text.count("spent phase=1") == 1 and text.count("memo phase=1") >= 2, text
        if kind == "c":
            assert_no_sanitizer_report(text)
    assert {kind for _, _, _, kind in devices} == {"mp", "c"}


def test_c_client_detects_a_silent_broker(mosquitto, tmp_path):
    """SIGSTOP: the TCP connection stays up but nothing answers. libmosquitto's keepalive
    (PINGREQ unanswered) declares the connection dead; after SIGCONT the client reconnects and
    delivers the memoised report again."""
    doc = config_doc("quiet", mechanism="hcms", eps_milli=1000, params={"k": 16, "m": 64})
    payload = campaign_config.sign(doc, SIGNING_KEY)
    binary = build_client()
    states = [device_runner.prepare_device(tmp_path / ("q-%d" % i), "q-%d" % i, SIGNING_KEY) for i in range(2)]
    logs = [tmp_path / ("q-%d.log" % i) for i in range(2)]
    topics = ["ldp/quiet/r/q-%d" % i for i in range(2)]
    collector = ReportCollector(mosquitto.port)
    procs = []
    stopped = False
    try:
        collector.publish("ldp/quiet/config", payload)
        procs = [start_client(binary, s, mosquitto.port, "quiet", i, log, keepalive=5, backoff_max=1,
                              timeout=120) for i, (s, log) in enumerate(zip(states, logs))]
        wait_all(collector, topics, 1)
        os.kill(mosquitto.proc.pid, signal.SIGSTOP)
        stopped = True
        wait_logs(logs, "connection-lost", 1, timeout=40)
        os.kill(mosquitto.proc.pid, signal.SIGCONT)
        stopped = False
        reports = wait_all(collector, topics, 2)
    finally:
        if stopped:
            os.kill(mosquitto.proc.pid, signal.SIGCONT)
        stop_processes(procs)
        collector.close()
    got = by_topic(reports)
    for topic, log in zip(topics, logs):
        assert len(set(got[topic])) == 1
        campaign_config.mechanism_for_phase(doc, 1).check(got[topic])
        text = log.read_text()
        assert text.count("connected") >= 2 and text.count("spent phase=1") == 1, text
