"""A device's charge matches what it publishes, whatever signed messages arrive (spec §7.2,
§7.3): both clients (the real MicroPython interpreter and the C client) against a private
Mosquitto.

* Binding: a campaign id is bound, in the generation of its first spend, to the digest of the
  config body it was spent under; another signed body for the id is refused (`bound`) and the
  device goes on with the config it holds. shc: re-signing the id with a larger eps1 after
  phase 1 no longer buys a phase-2 report made with other thresholds; LDPLCM: re-signing with
  another sample rate no longer moves a phase-1 device into phase 2 (and a ledger with a memo
  but no binding -- written before bindings existed -- keeps the device in the phase it reported).
  Key rotation re-signs the same body, so the binding survives it.
* Closes act on the campaign id held: the replayed close of an older campaign of the same name
  is recorded, but the device keeps re-sending the new campaign's report until its ack.
* Closed ids are never forgotten in a way a replay can use: past 64 closes the lowest
  not_before becomes the ledger's closed_floor; a replayed config issued at or before it is
  refused (`closed`) unless its id is bound.
"""
import hashlib
import json
import subprocess
import sys
import time

import pytest

from support.c_client import build_client, run_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc, stop_processes, write_key_files
from support.live import CLIENTS, read_log, start, wait_log
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core import protocol
from ldpfleet.core.protocols import ldplcm, ldpminer
from ldpfleet.service.state.store import Store

FAST = {"ack": True, "retry_s": 1, "retry_max_s": 2}


def digest(doc) -> str:
    """What a device binds a campaign id to: SHA-256 of the signed body, first 16 bytes, hex."""
    return hashlib.sha256(campaign_config.canonical(doc).encode()).digest()[:16].hex()


def state_of(tmp_path, device_id, budget=100000):
    return device_runner.prepare_device(tmp_path / device_id, device_id, SIGNING_KEY,
                                        eps_cap_milli=8000, lifetime_budget_milli=budget)


def once(client, state, port, campaign, value=3, wait=30):
    if client == "c":
        proc = run_client(build_client(), state, port, campaign, value, wait=wait)
        return proc.returncode, proc.stdout + proc.stderr
    proc = run_device(state, "127.0.0.1", port, campaign, value=value, wait=wait)
    return proc.returncode, proc.stdout


def publish(collector, topic, doc):
    collector.publish(topic, campaign_config.sign(doc, SIGNING_KEY))


def shc_config(name, eps1, eps2, campaign_id=None, not_before=None):
    params = {"m": 64, "l": 2}
    phases = [{"phase": 1, "mechanism": "shc", "eps_milli": eps1, "params": dict(params)},
              {"phase": 2, "mechanism": "shc", "eps_milli": eps2, "params": dict(params)}]
    kw = {} if campaign_id is None else {"campaign_id": campaign_id}
    if not_before is not None:
        kw["not_before"] = not_before
    return config_doc(name, phases=phases, domain={"type": "int", "size": 40}, **kw)


# --- binding -------------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_shc_id_re_signed_with_another_eps1_is_refused(mosquitto, tmp_path, client):
    """The audit's sequence: config A (eps1 0.1, eps2 1), phase 1 reported; the id re-signed
    with eps1 4 (B); phase 2 published. The device refuses B (`bound`), keeps A and reports
    phase 2 under A: it published eps1 + eps2 of A and was charged exactly that. A restart
    that finds B retained publishes nothing."""
    name = "bind-shc-" + client
    a = shc_config(name, 100, 1000)
    b = shc_config(name, 4000, 1000, campaign_id=a["campaign_id"])
    cid = a["campaign_id"]
    state = state_of(tmp_path, "dev-" + name)
    log = tmp_path / "dev.log"
    collector = ReportCollector(mosquitto.port)
    proc = None
    try:
        publish(collector, "ldp/%s/config" % name, a)
        proc = start(client, state, mosquitto.port, name, log, value=[1, 2], timeout=30)
        wait_log(log, "spent phase=1 eps_milli=100 ")
        publish(collector, "ldp/%s/config" % name, b)
        wait_log(log, "refused config bound:")
        publish(collector, "ldp/%s/phase2" % name, ldpminer.phase2_message(a, [1, 2, 3]))
        wait_log(log, "spent phase=2 eps_milli=1000 ")
        reports = collector.wait_for(lambda r: any(p[2] == 2 for _, p in r), 20)
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()
    out = read_log(log)
    assert out.count("spent phase=") == 2 and "spent phase=1 eps_milli=4000" not in out, out
    ledger = read_ledger(state)
    assert ledger["spent_milli"] == 1100 and ledger["bound"] == {str(cid): digest(a)}
    assert sorted({p[2] for _, p in reports}) == [1, 2]
    assert {p.hex() for _, p in reports} == {ledger["reports"]["%d:%d" % (cid, p)][2] for p in (1, 2)}
    # a restart with B retained: refused, nothing published, nothing written
    collector = ReportCollector(mosquitto.port)
    try:
        code, out = once(client, state, mosquitto.port, name, [1, 2])
        assert collector.barrier() == []
    finally:
        collector.close()
    assert code == device_runner.EXIT_REFUSED and "refused config bound:" in out, out
    assert read_ledger(state) == ledger


def lcm_config(name, rate_ppm, campaign_id=None):
    phases = [{"phase": 1, "mechanism": "cms", "eps_milli": 1000, "sample_rate_ppm": rate_ppm,
               "params": {"k": 4, "m": 16}},
              {"phase": 2, "mechanism": "lcm", "eps_milli": 1000, "sample_rate_ppm": rate_ppm,
               "params": {"k": 4, "m": 16}}]
    kw = {} if campaign_id is None else {"campaign_id": campaign_id}
    return config_doc(name, phases=phases, domain={"type": "int", "size": 8}, salt=77, **kw)


def split_rates(device_id, salt=77):
    """(rate that puts the device in phase 1, rate that puts it in phase 2)."""
    h = protocol.murmur3_32(device_id.encode(), salt) % ldplcm.PPM
    assert 0 < h < ldplcm.PPM - 1
    return h + 1, h


@pytest.mark.parametrize("client", CLIENTS)
def test_ldplcm_id_re_signed_with_another_rate_is_refused(mosquitto, tmp_path, client):
    """A phase-1 device of an LDPLCM campaign; the id re-signed with a sample rate that puts it
    in phase 2; the phase-2 message. The re-signed config is refused (`bound`) and the device
    skips phase 2: one report, charged once."""
    name, device = "bind-lcm-" + client, "lcm-dev-" + client
    in1, in2 = split_rates(device)
    a = lcm_config(name, in1)
    b = lcm_config(name, in2, campaign_id=a["campaign_id"])
    assert ldplcm.in_phase1(device, 77, in1) and not ldplcm.in_phase1(device, 77, in2)
    state = state_of(tmp_path, device)
    log = tmp_path / "dev.log"
    collector = ReportCollector(mosquitto.port)
    proc = None
    try:
        publish(collector, "ldp/%s/config" % name, a)
        proc = start(client, state, mosquitto.port, name, log, timeout=30)
        wait_log(log, "spent phase=1")
        publish(collector, "ldp/%s/config" % name, b)
        wait_log(log, "refused config bound:")
        publish(collector, "ldp/%s/phase2" % name, campaign_config.make_phase2(a))
        wait_log(log, "skip phase 2 (this device is not in it)")
        reports = collector.barrier()
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()
    assert [p[2] for _, p in reports] == [1], read_log(log)
    assert read_ledger(state)["spent_milli"] == 1000


@pytest.mark.parametrize("client", CLIENTS)
def test_a_reported_phase_decides_participation_without_a_binding(mosquitto, tmp_path, client):
    """A ledger with a phase-1 memo of an LDPLCM id but no binding (written before bindings
    existed): a config of the id whose rate puts the device in phase 2 is accepted, but the
    device stays in the phase it reported: it re-sends the memo and skips phase 2."""
    name, device = "memo-lcm-" + client, "memo-dev-" + client
    in1, in2 = split_rates(device)
    a = lcm_config(name, in1)
    b = lcm_config(name, in2, campaign_id=a["campaign_id"])
    cid = a["campaign_id"]
    report = campaign_config.mechanism_for_phase(a, 1).reference_report(3, [0] * 17, 5)
    prior = {"spent_milli": 1000, "closed": [],
             "reports": {"%d:1" % cid: [5, 1000, report.hex()]}}
    state = state_of(tmp_path, device)
    device_runner.write_ledger(state, prior, 1)
    collector = ReportCollector(mosquitto.port)
    try:
        publish(collector, "ldp/%s/config" % name, b)
        publish(collector, "ldp/%s/phase2" % name, campaign_config.make_phase2(b))
        code, out = once(client, state, mosquitto.port, name)
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == 0, out
    assert "memo phase=1" in out and "skip phase 2 (this device is not in it)" in out, out
    assert [p for _, p in reports] == [report] and "spent" not in out
    assert read_ledger(state) == prior


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=120)


def test_rotate_keys_re_signs_the_same_body(mosquitto, tmp_path):
    """`campaign rotate-keys` signs every open campaign's stored body again: the body bytes (and
    so the digest devices bind to) are those of the original config; only kid and sig change."""
    from ldpfleet.core.signing import SigningKey
    old, new = tmp_path / "a.key", tmp_path / "b.key"
    write_key_files(old, SIGNING_KEY)
    write_key_files(new, SigningKey.from_seed(bytes(range(2, 34))))
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    base = ["--broker", mosquitto.url, "--state", state]
    assert cli("campaign", "create", *base, "--signing-key", old, "--name", "rot",
               "--mechanism", "olh", "--epsilon", 2, "--domain", 16).returncode == 0
    with Store(state) as store:
        before = json.loads(store.require_campaign("rot").config_payload)
    out = cli("campaign", "rotate-keys", *base, "--signing-key", old, "--new-key", new)
    assert out.returncode == 0, out.stderr
    with Store(state) as store:
        after = json.loads(store.require_campaign("rot").config_payload)
    collector = ReportCollector(mosquitto.port, topic="#")
    try:
        retained = json.loads(dict(collector.barrier())["ldp/rot/config"])
    finally:
        collector.close()
    assert after["kid"] != before["kid"] and retained == after
    assert after["body"] == before["body"]


@pytest.mark.parametrize("client", CLIENTS)
def test_binding_survives_key_rotation(mosquitto, tmp_path, client):
    """A device spent under the config signed by key A; the same body re-signed by B after a
    rotation is the same config: the memo is re-sent, nothing refused, nothing spent."""
    from ldpfleet.core.signing import SigningKey
    new = SigningKey.from_seed(bytes(range(2, 34)))
    name = "bind-rot-" + client
    doc = config_doc(name)
    state = state_of(tmp_path, "dev-" + name)
    collector = ReportCollector(mosquitto.port)
    try:
        publish(collector, "ldp/%s/config" % name, doc)
        code, out = once(client, state, mosquitto.port, name)
        assert code == 0 and "spent" in out, out
        collector.publish("ldpfleet/keys", campaign_config.sign(
            campaign_config.make_keys(1, [new.public]), SIGNING_KEY))
        collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, new))
        code, out = once(client, state, mosquitto.port, name)
    finally:
        collector.close()
    assert code == 0 and "keys serial=1" in out and "memo phase=1" in out, out
    assert "spent" not in out and "refused" not in out
    assert read_ledger(state)["bound"] == {str(doc["campaign_id"]): digest(doc)}


# --- closes act on the id held ---------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_close_of_an_older_campaign_does_not_stop_the_new_one(mosquitto, tmp_path, client):
    """The new campaign (id Y) is reported and awaits its ack; the signed close of the old
    campaign of the same name (id X) is replayed on the config topic: the device records X as
    closed, keeps re-sending Y's report, and ends its --once run at Y's ack."""
    name, device = "close-other-" + client, "co-dev-" + client
    now = int(time.time())
    old = config_doc(name, campaign_id=111, not_before=now - 86400)
    new = config_doc(name, campaign_id=222, delivery=FAST)
    state = state_of(tmp_path, device)
    log = tmp_path / "dev.log"
    topic = "ldp/%s/r/%s" % (name, device)
    collector = ReportCollector(mosquitto.port)
    proc = None
    try:
        publish(collector, "ldp/%s/config" % name, new)
        proc = start(client, state, mosquitto.port, name, log, once=True)
        report = collector.wait_for(lambda r: any(t == topic for t, _ in r), 20)[0][1]
        publish(collector, "ldp/%s/config" % name, campaign_config.make_close(old))
        out = wait_log(log, "close-recorded campaign_id=111")
        resent = out.count("resent phase=1")
        wait_log(log, "resent phase=1", count=resent + 2)
        assert proc.poll() is None
        collector.publish("ldp/%s/a/%s" % (name, device),
                          protocol.ack_for(report, protocol.ACK_ACCEPTED), retain=False)
        assert proc.wait(15) == 0
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()
    out = read_log(log)
    assert "acked phase=1" in out and "\nldp %s closed" % device not in out, out
    ledger = read_ledger(state)
    assert ledger["closed"] == [[111, now - 86400]] and ledger["spent_milli"] == 2000


# --- closed ids are never forgotten in a way a replay can use ---------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_seventy_closes_then_replays(mosquitto, tmp_path, client):
    """A device spends on campaign Z (issued long ago), then sees 70 closes of other ids of its
    campaign name (issued later, one second apart): its ledger keeps 64 and closed_floor is the
    sixth-oldest not_before. Then: Z's config again is still accepted (bound: memo re-sent);
    the first closed id's config is refused (`closed`, below the floor), as is a never-seen id
    issued at or before the floor; a campaign issued after it is reported."""
    name = "closes-" + client
    now = int(time.time())
    base = now - 100000
    z = config_doc(name, campaign_id=5000, not_before=base - 10)
    closed = [config_doc(name, campaign_id=1000 + i, not_before=base + i) for i in range(70)]
    state = state_of(tmp_path, "dev-" + name)
    log = tmp_path / "dev.log"
    topic = "ldp/%s/config" % name
    collector = ReportCollector(mosquitto.port)
    proc = None
    try:
        publish(collector, topic, z)
        proc = start(client, state, mosquitto.port, name, log, timeout=120)
        wait_log(log, "spent phase=1")
        for i, doc in enumerate(closed):
            publish(collector, topic, campaign_config.make_close(doc))
            wait_log(log, "close-recorded campaign_id=%d " % doc["campaign_id"], timeout=20)
        ledger = read_ledger(state)
        assert len(ledger["closed"]) == 64 and ledger["closed_floor"] == base + 5
        assert [c[0] for c in ledger["closed"]] == [1000 + i for i in range(6, 70)]
        publish(collector, topic, z)
        wait_log(log, "memo phase=1")
        publish(collector, topic, closed[0])
        wait_log(log, "refused config closed:")
        publish(collector, topic, config_doc(name, campaign_id=6000, not_before=base + 3))
        wait_log(log, "refused config closed:", count=2)
        publish(collector, topic, closed[69])
        wait_log(log, "refused config closed:", count=3)
        publish(collector, topic, config_doc(name, campaign_id=7000))
        wait_log(log, "spent phase=1", count=2)
        reports = collector.wait_for(  # the report leaves after its spend is logged
            lambda r: any(protocol.parse_header(p)[4] == 7000 for _, p in r), 20)
    finally:
        if proc is not None:
            stop_processes([proc])
        collector.close()
    out = read_log(log)
    assert out.count("spent phase=1") == 2, out
    assert sorted({protocol.parse_header(p)[4] for _, p in reports}) == [5000, 7000]
    final = read_ledger(state)
    assert final["spent_milli"] == 4000 and final["closed_floor"] == base + 5
    assert sorted(final["bound"]) == ["5000", "7000"]


def test_c_client_binding_digest_equals_the_vectors(tmp_path):
    """The digest a device binds an id to (spec §7.2: SHA-256 of the signed body, 16 bytes) for
    every signed message of signatures.json (the MicroPython client's in test_device_vectors.py)."""
    vec = json.loads((device_runner.ROOT / "protocol_spec" / "v2" / "vectors" / "signatures.json")
                     .read_text())
    write_key_files(tmp_path / "k")
    for c in vec["signed"]:
        proc = subprocess.run([str(build_client()), "verify-config", "--trusted-keys",
                               str(tmp_path / "k") + ".pub", "--envelope-only", "--print-digest"],
                              input=c["payload"].encode(), capture_output=True, timeout=30)
        assert proc.stdout.decode().split() == ["accepted", c["body_digest_hex"]], c["kind"]
        assert c["body_digest_hex"] == hashlib.sha256(c["body"].encode()).digest()[:16].hex()


@pytest.mark.parametrize("client", CLIENTS)
def test_phase2_of_another_id_is_refused(mosquitto, tmp_path, client):
    """The device holds the new campaign (id Y); the retained phase-2 message is the old
    campaign's (id X, same name): refused (`campaign_id`), no phase-2 report, nothing spent on it."""
    name = "p2-other-" + client
    phases = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": {"m": 8, "l": 2}},
              {"phase": 2, "mechanism": "srappor", "eps_milli": 1000, "params": {"l": 2}}]
    old = config_doc(name, phases=phases, campaign_id=31, domain={"type": "int", "size": 8})
    new = config_doc(name, phases=phases, campaign_id=32, domain={"type": "int", "size": 8})
    state = state_of(tmp_path, "dev-" + name)
    collector = ReportCollector(mosquitto.port)
    try:
        publish(collector, "ldp/%s/config" % name, new)
        publish(collector, "ldp/%s/phase2" % name, campaign_config.make_phase2(old, candidates=[1, 2]))
        code, out = once(client, state, mosquitto.port, name, [1, 2])
        reports = collector.barrier()
    finally:
        collector.close()
    assert code == device_runner.EXIT_REFUSED and "refused phase2 campaign_id:" in out, out
    assert [p[2] for _, p in reports] == [1]
    assert read_ledger(state)["spent_milli"] == 1000
