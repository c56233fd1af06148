"""Real MicroPython device processes against a private Mosquitto (spec §4-§6).

* 20 devices with different values report once each; a CPython paho subscriber parses every
  report with the core mechanism's `check()`; a second trigger (the config published again)
  brings byte-identical reports; the broker is killed and restarted mid-run (some devices are
  started while it is down): every device reconnects and delivers.
* A broker that stops answering (SIGSTOP) is detected by the keepalive timeout; the devices
  reconnect once it answers again (SIGCONT) and deliver again.
* Two-phase campaigns: LDPMiner (sh, then srappor over the signed phase-2 candidates) and
  LDPLCM (public sampling rule; phase 2 encoded high/low by the signed model).
* GRR over a string domain reports the item's index in the config's list.
"""
import os
import signal
import time

import pytest

from support.devices import SIGNING_KEY, ReportCollector, config_doc, stop_processes
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core import protocol
from ldpfleet.core.config import mechanism_for_phase

DEVICES = 20


def topic_of(campaign, device_id):
    return "ldp/%s/r/%s" % (campaign, device_id)


def by_topic(reports):
    out = {}
    for t, p in reports:
        out.setdefault(t, []).append(p)
    return out


def start(states, broker, campaign, tmp_path, **kw):
    kw.setdefault("keepalive", 2)
    kw.setdefault("backoff_max", 1)
    kw.setdefault("timeout", 110)
    return [device_runner.start_device(s, "127.0.0.1", broker.port, campaign,
                                       log_path=tmp_path / ("%s.log" % s.name), **kw)
            for s in states]


def log(tmp_path, state):
    return (tmp_path / ("%s.log" % state.name)).read_text()


def wait_all(collector, topics, since=0, count=1, timeout=60):
    """Wait until every topic has `count` reports after index `since`."""
    def ready(reports):
        got = by_topic(reports[since:])
        return all(len(got.get(t, [])) >= count for t in topics)
    reports = collector.wait_for(ready, timeout)
    assert ready(reports), "missing: %s" % sorted(t for t in topics if t not in by_topic(reports[since:]))
    return reports


def test_fleet_of_20_survives_broker_restart(mosquitto, tmp_path):
    doc = config_doc("fleet", mechanism="olh", eps_milli=2000, params={"g": 8})
    mech = mechanism_for_phase(doc, 1)
    payload = campaign_config.sign(doc, SIGNING_KEY)
    states = [device_runner.prepare_device(tmp_path / ("dev-%02d" % i), "dev-%02d" % i, SIGNING_KEY,
                                           value=i, campaign="fleet") for i in range(DEVICES)]
    topics = [topic_of("fleet", s.name) for s in states]
    collector = ReportCollector(mosquitto.port)
    procs = []
    try:
        collector.publish("ldp/fleet/config", payload)
        procs += start(states[:10], mosquitto, "fleet", tmp_path)
        wait_all(collector, topics[:10])

        mosquitto.stop()  # SIGTERM; the retained config survives in the broker's persistence
        since = len(collector.reports())  # nothing can arrive while the broker is down
        procs += start(states[10:], mosquitto, "fleet", tmp_path)
        time.sleep(1.0)  # let the new devices fail to connect and back off at least once
        mosquitto.start()
        reports = wait_all(collector, topics, since=since)

        since2 = len(reports)
        collector.publish("ldp/fleet/config", payload)  # a second trigger
        reports = wait_all(collector, topics, since=since2)
    finally:
        stop_processes(procs)
        collector.close()

    got = by_topic(reports)
    assert sorted(got) == sorted(topics)
    for state, topic in zip(states, topics):
        sent = got[topic]
        assert len(set(sent)) == 1, "%s sent different reports %s" % (topic, sent)
        arr = mech.check(sent)  # the core parser accepts every report
        assert arr.shape == (len(sent), mech.report_size)
        assert protocol.parse_header(sent[0])[4] == doc["campaign_id"]
        nonce = protocol.parse_header(sent[0])[5]  # random per campaign phase (spec §3)
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == 2000
        assert ledger["reports"] == {"%d:1" % doc["campaign_id"]: [nonce, 2000, sent[0].hex()]}
        text = log(tmp_path, state)
        assert text.count("spent phase=1") == 1, text
    for state in states[:10]:
        text = log(tmp_path, state)
        assert "connection-lost" in text and text.count("connected") >= 2, text
    for state in states[10:]:
        assert "backoff" in log(tmp_path, state)


def test_silent_broker_is_detected_by_timeout(mosquitto, tmp_path):
    doc = config_doc("quiet", mechanism="hcms", eps_milli=1000, params={"k": 16, "m": 64})
    mech = mechanism_for_phase(doc, 1)
    states = [device_runner.prepare_device(tmp_path / ("q-%d" % i), "q-%d" % i, SIGNING_KEY,
                                           value=40 + i, campaign="quiet") for i in range(3)]
    topics = [topic_of("quiet", s.name) for s in states]
    collector = ReportCollector(mosquitto.port)
    procs = []
    try:
        collector.publish("ldp/quiet/config", campaign_config.sign(doc, SIGNING_KEY))
        procs = start(states, mosquitto, "quiet", tmp_path, keepalive=1)
        wait_all(collector, topics)
        os.kill(mosquitto.proc.pid, signal.SIGSTOP)
        since = len(collector.reports())  # nothing can arrive while the broker is stopped

        def timed_out(text):
            # a dead link is detected by a timeout (ETIMEDOUT, errno 110) on either path: the
            # device loop's keepalive check ("broker silent ...") or the MQTT client's own read
            # deadline, whichever expires first on a loaded machine
            return "broker silent" in text or "connection-lost OSError(110" in text
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(
                    timed_out(log(tmp_path, s)) for s in states):
                time.sleep(0.2)
        finally:
            os.kill(mosquitto.proc.pid, signal.SIGCONT)
        for s in states:
            assert timed_out(log(tmp_path, s)), log(tmp_path, s)
        reports = wait_all(collector, topics, since=since)
    finally:
        stop_processes(procs)
        collector.close()
    got = by_topic(reports)
    for t in topics:
        assert len(set(got[t])) == 1
        mech.check(got[t])


@pytest.mark.parametrize("phase2,params", [("srappor", {"l": 2}), ("psgrr", {"l": 2}),
                                           ("psolh", {"l": 2, "g": 4})])
def test_ldpminer_two_phases(mosquitto, tmp_path, phase2, params):
    phases = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": {"m": 64, "l": 2}},
              {"phase": 2, "mechanism": phase2, "eps_milli": 1500, "params": params}]
    doc = config_doc("miner", phases=phases, domain={"type": "str", "items": ["a", "b", "c", "d", "e"]})
    sets = [["a", "b"], ["c"], ["e", "a", "d"]]
    states = [device_runner.prepare_device(tmp_path / ("m-%d" % i), "m-%d" % i, SIGNING_KEY, value=v,
                                           campaign="miner") for i, v in enumerate(sets)]
    topics = [topic_of("miner", s.name) for s in states]
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/miner/config", campaign_config.sign(doc, SIGNING_KEY))
        procs = start(states, mosquitto, "miner", tmp_path, once=True, timeout=60)
        wait_all(collector, topics)
        candidates = [protocol.item_key(x) for x in ("a", "d", "zzz")]
        p2 = campaign_config.make_phase2(doc, candidates=candidates)
        collector.publish("ldp/miner/phase2", campaign_config.sign(p2, SIGNING_KEY))
        reports = wait_all(collector, topics, count=2)
        for p in procs:
            assert p.wait(30) == 0, log(tmp_path, states[procs.index(p)])
    finally:
        collector.close()
    sh = mechanism_for_phase(doc, 1)
    second_mech = mechanism_for_phase(doc, 2, candidates=candidates)
    got = by_topic(reports)
    for state, t in zip(states, topics):
        first, second = got[t]
        sh.check(first)
        second_mech.check(second)
        assert second[1] == protocol.MECHANISM_IDS[phase2]
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == 2500
        nonces = [int.from_bytes(r[8:12], "little") for r in (first, second)]
        assert nonces == [ledger["reports"]["%d:%d" % (doc["campaign_id"], p)][0] for p in (1, 2)]


def sampled(device_id, salt, ppm):
    return protocol.murmur3_32(device_id.encode(), salt) % 10 ** 6 < ppm


def test_ldplcm_sampling_rule_and_model_decide_the_phase_2_encoding(mosquitto, tmp_path):
    """Sampled devices (public rule, spec §5) report phase 1 only, the others phase 2 only; in
    phase 2 the signed model decides high/low (g(index) >= P), the same as the aggregator's
    `is_high`; a malformed model is refused."""
    from ldpfleet.core.protocols import ldplcm

    phases = [{"phase": 1, "mechanism": "cms", "eps_milli": 2000, "params": {"k": 8, "m": 32},
               "sample_rate_ppm": 500000},
              {"phase": 2, "mechanism": "lcm", "eps_milli": 2000, "params": {"k": 8, "m": 32}}]
    doc = config_doc("learned", phases=phases)
    ids = ["l-%d" % i for i in range(40)]
    inside = [d for d in ids if sampled(d, doc["salt"], 500000)][:2]
    outside = [d for d in ids if not sampled(d, doc["salt"], 500000)][:3]
    assert len(inside) == 2 and len(outside) == 3
    # one tree: items with index <= 7 reach the leaf 5, the others the leaf 0; P = 5
    model = {"format": "ldplcm-gbr", "version": 1, "scale_bits": 0, "init": 0, "boundary": 5,
             "roots": [0], "split": [7, 5, 0], "right": [2, -1, -1]}
    values = {inside[0]: 3, inside[1]: 9, outside[0]: 3, outside[1]: 9, outside[2]: 7}
    states = [device_runner.prepare_device(tmp_path / d, d, SIGNING_KEY, value=values[d],
                                           campaign="learned") for d in inside + outside]
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/learned/config", campaign_config.sign(doc, SIGNING_KEY))
        procs = start(states, mosquitto, "learned", tmp_path, once=True, timeout=60)
        wait_all(collector, [topic_of("learned", d) for d in inside])
        p2 = campaign_config.make_phase2(doc, model=model)
        collector.publish("ldp/learned/phase2", campaign_config.sign(p2, SIGNING_KEY))
        for p, s in zip(procs, states):
            assert p.wait(30) == 0, log(tmp_path, s)
        reports = collector.barrier()
        bad = device_runner.prepare_device(tmp_path / "bad", outside[0], SIGNING_KEY, value=3,
                                           campaign="learned")
        broken = dict(model, right=[5, -1, -1])
        collector.publish("ldp/learned/phase2",
                          campaign_config.sign(campaign_config.make_phase2(doc, model=broken), SIGNING_KEY))
        refused = run_device(bad, "127.0.0.1", mosquitto.port, wait=40)
    finally:
        collector.close()
    assert refused.returncode == device_runner.EXIT_REFUSED and "refused phase2 model:" in refused.stdout
    got = by_topic(reports)
    assert sorted(got) == sorted(topic_of("learned", d) for d in inside + outside)
    cms = mechanism_for_phase(doc, 1)
    lcm = mechanism_for_phase(doc, 2)
    int_model = ldplcm.check_model(model)
    for s, d in zip(states, inside + outside):
        (r,) = got[topic_of("learned", d)]
        (key,) = read_ledger(s)["reports"]
        if d in inside:
            cms.check(r)
            assert key.endswith(":1")
        else:
            lcm.check(r)
            assert key.endswith(":2")
            # the decision is never logged (spec §7.1); test_device_phase2 checks it bit-exactly
            assert "high=" not in log(tmp_path, s)
    assert [ldplcm.is_high(int_model, values[d]) for d in outside] == [True, False, True]


def test_grr_on_a_string_domain_reports_the_item_index(mosquitto, tmp_path):
    """GRR over a str domain perturbs the item's index in the config's list. At ε = 8 with d = 3
    a device keeps its index with probability T_grr/2^32 > 0.9993 (spec §2), so at least 4 of 5
    devices report index 2 except with probability < 1e-5. A value outside the domain is not
    refused (a refusal would tell the config's author the value, spec §1): it reports ⊥, index 3,
    kept with the same probability."""
    items = ["idle", "busy", "hot"]
    doc = config_doc("states", mechanism="grr", eps_milli=8000, params={},
                     domain={"type": "str", "items": items})
    keep = protocol.t_grr(8000, 3) / 2 ** 32
    assert keep > 0.9993
    states = [device_runner.prepare_device(tmp_path / ("s-%d" % i), "s-%d" % i, SIGNING_KEY, value="hot",
                                           campaign="states", eps_cap_milli=8000) for i in range(5)]
    stranger = device_runner.prepare_device(tmp_path / "s-x", "s-x", SIGNING_KEY, value="cold",
                                            campaign="states", eps_cap_milli=8000)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/states/config", campaign_config.sign(doc, SIGNING_KEY))
        procs = start(states, mosquitto, "states", tmp_path, once=True, timeout=60)
        other = run_device(stranger, "127.0.0.1", mosquitto.port, wait=40)
        for p, s in zip(procs, states):
            assert p.wait(40) == 0, log(tmp_path, s)
        reports = collector.barrier()
    finally:
        collector.close()
    assert other.returncode == device_runner.EXIT_DONE and "refused" not in other.stdout, other.stdout
    mech = mechanism_for_phase(doc, 1)
    assert mech.domain_size == 4  # the 3 items and ⊥
    got = by_topic(reports)
    assert sorted(got) == sorted(topic_of("states", s.name) for s in states + [stranger])
    (stray,) = got.pop(topic_of("states", stranger.name))
    ys = [int.from_bytes(mech.check(r)[0, 12:16].tobytes(), "little") for (r,) in got.values()]
    assert sum(y == 2 for y in ys) >= 4, ys
    # P(the stranger's ⊥ is not kept) < 7e-4 (keep > 0.9993)
    assert int.from_bytes(mech.check(stray)[0, 12:16].tobytes(), "little") == 3
