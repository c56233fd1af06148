"""The state on SQLite and on PostgreSQL gives the same answers: one scenario (a
single-phase OLH campaign and a two-phase LDPMiner campaign; reports folded by two workers,
duplicates and second reports among them; `campaign advance` between the phases) runs on each
backend, and `estimate`, `campaign status` and `campaign advance` print the same JSON up to the
campaigns' random ids and times. On each backend the merged sketch is byte-identical to one
in-process sketch of the accepted reports, and the counters are exact. Also: a schema-2 SQLite
file (before per-worker partials) is migrated in place."""
import sqlite3

import numpy as np
import pytest

from ldpfleet.core.mechanisms.base import Sketch
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.state.sql import SCHEMA_VERSION
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.service.campaigns.protocols import ProtocolOptions, create_protocol_campaign
from ldpfleet.service.state.store import SCHEMA_VERSION
from ldpfleet.core.signing import write_signing_key
from support.service import cli_json, direct_sketch, fold_batch, report_messages

SEED = 1414
VOLATILE = ("campaign_id", "created_at", "closed_at", "not_after", "config", "time", "salt")


def normalised(doc):
    """The JSON without what differs between two runs by design (random ids, clocks)."""
    if isinstance(doc, dict):
        return {k: normalised(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [normalised(v) for v in doc]
    return doc


def run_cli(capsys, *args):
    return cli_json(capsys, *args)


def fold(state, worker, messages):
    return fold_batch(state, messages, worker)


def scenario(state, broker_url, tmp_path, capsys):
    """Everything the comparison looks at, from one backend."""
    rng = np.random.default_rng(SEED)
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    broker = BrokerSettings.from_url(broker_url)
    with Store(state) as store:
        olh = create_campaign(store, broker, key, "cpu", "olh", 2.0, "0-63", params={"g": 5},
                              issue=Issuance(salt=77, campaign_id=101))
        miner = create_protocol_campaign(store, broker, key, "lm", "ldpminer-rappor", 6.0, "64",
                                         ProtocolOptions(set_size=4, top=2),
                                         Issuance(salt=78, campaign_id=102))
    reports = olh.mechanism(1).perturb_batch(rng.zipf(1.4, 3000) % 64, rng)
    msgs = report_messages("cpu", reports)
    fold(state, "w1", msgs[:1700])
    fold(state, "w2", msgs[1500:] + msgs[:40])  # 240 redeliveries (duplicates) across workers
    second = bytearray(msgs[7][1])
    second[8] ^= 1  # another nonce from a device that already reported: a second report
    fold(state, "w2", [(msgs[7][0], bytes(second))])

    sets = [sorted(set((rng.zipf(1.5, 4) % 64).tolist())) for _ in range(2000)]
    sets[:600] = [sorted({3, 9} | set(s[:2])) for s in sets[:600]]
    lm1 = miner.mechanism(1).perturb_batch(sets, rng)
    fold(state, "w1", report_messages("lm", lm1[:1000]))
    fold(state, "w2", report_messages("lm", lm1[1000:], start=1000))
    out = {"estimate_cpu": run_cli(capsys, "estimate", "cpu", "--state", state),
           "status_cpu": run_cli(capsys, "campaign", "status", "cpu", "--state", state),
           "advance_lm": run_cli(capsys, "campaign", "advance", "lm", "--state", state,
                                 "--broker", broker_url)}
    with Store(state) as store:
        phase2 = store.require_campaign("lm").mechanism(2)
    lm2 = phase2.perturb_batch(sets, rng)
    fold(state, "w3", report_messages("lm", lm2))
    out["estimate_lm"] = run_cli(capsys, "estimate", "lm", "--state", state)
    out["status_lm"] = run_cli(capsys, "campaign", "status", "lm", "--state", state)
    with Store(state) as store:
        out["sketches"] = {(name, phase): store.sketch_blob(name, phase)[1]
                           for name, phase in (("cpu", 1), ("lm", 1), ("lm", 2))}
        out["counters"] = store.all_counters()
    out["reference"] = {("cpu", 1): direct_sketch(olh.mechanism(1), reports).serialize(),
                        ("lm", 1): direct_sketch(miner.mechanism(1), lm1).serialize(),
                        ("lm", 2): direct_sketch(phase2, lm2).serialize()}
    return out


def test_backend_folds_exactly(state_url, mosquitto, tmp_path, capsys):
    out = scenario(state_url, mosquitto.url, tmp_path, capsys)
    for key, blob in out["sketches"].items():
        assert blob == out["reference"][key], key  # merged partials == one in-process sketch
    assert out["counters"]["cpu"] == {"received": 3241, "accepted": 3000, "duplicate": 240,
                                      "second_report": 1}
    assert out["counters"]["lm"] == {"received": 4000, "accepted": 4000}
    assert out["status_cpu"]["accepted"] == 3000 and out["status_cpu"]["rejected"] == {
        "duplicate": 240, "second_report": 1}
    assert len(out["advance_lm"]["candidates"]) == 4 and 3 in out["advance_lm"]["candidates"]
    assert out["estimate_lm"]["phase_reports"] == [2000, 2000]


def test_sqlite_and_postgresql_answer_the_same(postgres_url, mosquitto, tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    lite = scenario("sqlite:///" + str(tmp_path / "a" / "state.db"), mosquitto.url,
                    tmp_path / "a", capsys)
    pg = scenario(postgres_url, mosquitto.url, tmp_path / "b", capsys)
    for key in ("estimate_cpu", "status_cpu", "advance_lm", "estimate_lm", "status_lm"):
        assert normalised(lite[key]) == normalised(pg[key]), key
    assert lite["sketches"] == pg["sketches"] and lite["counters"] == pg["counters"]


def test_schema2_sqlite_state_is_migrated(tmp_path, mosquitto):
    """A state file from before per-worker partials keeps its sketches and counters."""
    state = "sqlite:///" + str(tmp_path / "old.db")
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    with Store(state) as store:
        camp = create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "cpu", "grr",
                               1.0, "0-7")
    reports = camp.mechanism(1).perturb_batch(np.arange(200) % 8, np.random.default_rng(3))
    fold(state, "", report_messages("cpu", reports))
    as_schema3_seen(str(tmp_path / "old.db"), "cpu", report_messages("cpu", reports))
    db = sqlite3.connect(str(tmp_path / "old.db"))  # rewrite it as schema 2 had it
    db.executescript("""
        CREATE TABLE s2 (campaign TEXT NOT NULL, phase INTEGER NOT NULL, n INTEGER NOT NULL,
            blob BLOB NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (campaign, phase));
        INSERT INTO s2 SELECT campaign, phase, n, blob, updated_at FROM sketches;
        DROP TABLE sketches; ALTER TABLE s2 RENAME TO sketches;
        CREATE TABLE c2 (campaign TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
            PRIMARY KEY (campaign, reason)) WITHOUT ROWID;
        INSERT INTO c2 SELECT campaign, reason, count FROM counters;
        DROP TABLE counters; ALTER TABLE c2 RENAME TO counters;
        UPDATE meta SET value='2' WHERE key='schema';""")
    db.close()
    with Store(state) as store:
        assert store.meta("schema") == str(SCHEMA_VERSION)
        assert store.counters("cpu") == {"received": 200, "accepted": 200}
        blob = store.sketch_blob("cpu", 1)[1]
    assert blob == direct_sketch(camp.mechanism(1), reports).serialize()
    assert Sketch.deserialize(blob).n == 200


def as_schema3_seen(path, campaign, messages):
    """Rewrite a state's dedupe keys as schema 3 had them: device ids and nonces in clear, no
    key (`messages`: the phase-1 reports the state accepted, one per device)."""
    with Store("sqlite:///" + path) as store:
        assert store.seen_count(campaign) == len(messages)
    db = sqlite3.connect(path)
    db.executescript("""
        DROP TABLE seen; DROP TABLE purges; DROP TABLE seen_log; DROP TABLE campaign_salts;
        DELETE FROM meta WHERE key='dedupe_key_check';
        CREATE TABLE seen (campaign TEXT NOT NULL, phase INTEGER NOT NULL, device TEXT NOT NULL,
            seq BIGINT NOT NULL, PRIMARY KEY (campaign, phase, device)) WITHOUT ROWID;
        UPDATE meta SET value='3' WHERE key='schema';""")
    db.executemany("INSERT INTO seen VALUES (?, 1, ?, ?)",
                   [(campaign, topic.split("/")[-1], int.from_bytes(payload[8:12], "little"))
                    for topic, payload in messages])
    db.commit()
    db.close()


def test_schema3_dedupe_keys_become_keyed_hashes(tmp_path, mosquitto):
    """3 -> 4: the device ids in `seen` are replaced by keyed hashes under a new key, and a
    replay of an old report is still a duplicate, another nonce still a second report."""
    path = str(tmp_path / "v3.db")
    state = "sqlite:///" + path
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    with Store(state) as store:
        camp = create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "cpu", "grr",
                               1.0, "0-7")
    reports = camp.mechanism(1).perturb_batch(np.arange(50) % 8, np.random.default_rng(4))
    msgs = report_messages("cpu", reports, prefix="unit-")
    fold(state, "", msgs)
    as_schema3_seen(path, "cpu", msgs)
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM seen WHERE device='unit-7'").fetchone()[0] == 1
    db.close()
    second = bytearray(msgs[3][1])
    second[8] ^= 1
    counts = fold(state, "", msgs[:10] + [(msgs[3][0], bytes(second))])
    assert counts[("cpu", "duplicate")] == 10 and counts[("cpu", "second_report")] == 1
    with Store(state) as store:
        assert store.meta("schema") == str(SCHEMA_VERSION)
        assert store.counters("cpu")["accepted"] == 50
        assert store.seen_count("cpu") == 50
    with open(path, "rb") as f:
        raw = f.read()
    assert b"unit-" not in raw


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    Store("sqlite:///" + str(path)).close()
    db = sqlite3.connect(str(path))
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    db.close()
    with pytest.raises(Exception, match="schema 99"):
        Store("sqlite:///" + str(path))


def test_dedupe_claims_keep_every_63_bit_nonce_tag(state_url):
    """Both backends claim a batch's keys and give back the stored nonce tag of a key already
    claimed, over the whole 63-bit range of tags (PostgreSQL: the tags travel as one big-endian
    blob the server splits, claims.PostgresClaims; SQLite: the C table's USED bit is the 64th)."""
    from ldpfleet.service import Store
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 256, (5, 16), dtype=np.uint8)
    nonces = np.array([0, 1, 2 ** 32 - 1, 2 ** 62, 2 ** 63 - 1], np.int64)
    with Store(state_url) as store:
        with store.batch():
            claimed, prior = store.claim_key_array("c", 1, keys, nonces)
        assert claimed.all() and (prior == -1).all()
        with store.batch():
            claimed, prior = store.claim_key_array("c", 1, keys[::-1], np.zeros(5, np.int64))
        assert not claimed.any() and prior.tolist() == nonces[::-1].tolist()
        with store.batch():  # another phase is another claim
            claimed, _prior = store.claim_key_array("c", 2, keys[:2], nonces[:2])
        assert claimed.all()
