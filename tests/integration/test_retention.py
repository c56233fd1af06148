"""Retention: dedupe keys are keyed hashes of device ids, never the ids, and a
closed campaign's keys can be purged (by hand or by `serve --purge-after-days`) while its
sketches, counters and estimates stay exactly as they were. Both backends."""
import json
import time

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.core.kernels import lib
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.state import dedupe
from ldpfleet.service.state.sql import SCHEMA_VERSION
from ldpfleet.service.ingest.batch import ReportBatch
from ldpfleet.service.state.store import SCHEMA_VERSION
from ldpfleet.core.signing import write_signing_key
from support.service import ServeProcess, fold_batch, report_messages

DAY = 86400.0


def fold(state, messages):
    return fold_batch(state, messages, "w")


def cli_json(capsys, *args):
    capsys.readouterr()
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def two_campaigns(state, broker_url, tmp_path, n=300):
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    broker = BrokerSettings.from_url(broker_url)
    rng = np.random.default_rng(9)
    msgs = {}
    with Store(state) as store:
        for name in ("old", "live"):
            camp = create_campaign(store, broker, key, name, "olh", 2.0, "0-31")
            reports = camp.mechanism(1).perturb_batch(rng.integers(0, 32, n), rng)
            msgs[name] = report_messages(name, reports, prefix="sensor-%s-" % name)
    for name in msgs:
        fold(state, msgs[name])
    return msgs


def test_dedupe_keys_hold_no_device_ids(state_url, mosquitto, tmp_path):
    msgs = two_campaigns(state_url, mosquitto.url, tmp_path, n=200)
    with Store(state_url) as store:
        rows = store.dedupe_rows()
        assert len(rows) == 400
        assert all(len(bytes(r[2])) == 16 for r in rows)
        stored = b"".join(bytes(r[2]) for r in rows)
        assert b"sensor-" not in stored and not any("sensor" in str(c) for r in rows for c in r)
        # the public lookup still answers by device id (it hashes with the campaign's key)
        assert store.reported("old", 1, ["sensor-old-3", "nobody"]) == {"sensor-old-3"}
    if state_url.startswith("sqlite:///"):
        with open(state_url[len("sqlite:///"):], "rb") as f:
            assert b"sensor-" not in f.read()
    again = fold(state_url, msgs["old"][:25])  # redeliveries are still duplicates
    assert again[("old", "duplicate")] == 25


def test_two_states_and_two_campaigns_hash_the_same_device_differently(tmp_path):
    keys = []
    for i in range(2):
        with Store("sqlite:///" + str(tmp_path / ("s%d.db" % i))) as store:
            keys += store.dedupe_keys("a", ["sensor-1"]) + store.dedupe_keys("b", ["sensor-1"])
            assert store.dedupe_keys("a", ["sensor-1"]) == keys[-2:-1]  # stable
    assert len(set(keys)) == 4 and all(len(k) == 16 for k in keys)


def test_purge_drops_only_a_closed_campaigns_keys(state_url, mosquitto, tmp_path, capsys):
    msgs = two_campaigns(state_url, mosquitto.url, tmp_path)
    code, _out, err = cli_json(capsys, "campaign", "purge", "old", "--state", state_url)
    assert code == 2 and "campaign old is open" in err
    code, before, _ = cli_json(capsys, "estimate", "old", "--state", state_url, "--json")
    assert code == 0
    assert cli_json(capsys, "campaign", "close", "old", "--state", state_url)[0] == 0
    code, _out, err = cli_json(capsys, "campaign", "purge", "old", "--state", state_url)
    assert code == 2 and "purge at least 60 s after the close" in err  # batches in flight
    with Store(state_url) as store:
        store.db.execute("UPDATE campaigns SET closed_at=? WHERE name='old'", (time.time() - 120,))
    code, out, _ = cli_json(capsys, "campaign", "purge", "old", "--state", state_url, "--json")
    assert code == 0 and json.loads(out) == {"purged": {"old": 300}}
    with Store(state_url) as store:
        assert store.seen_count("old") == 0 and store.seen_count("live") == 300
        assert store.counters("old")["accepted"] == 300
    code, after, _ = cli_json(capsys, "estimate", "old", "--state", state_url, "--json")
    assert code == 0 and after == before  # the sketch is untouched
    code, out, _ = cli_json(capsys, "campaign", "status", "old", "--state", state_url, "--json")
    purged = json.loads(out)["dedupe_purged"]
    assert purged["keys"] == 300 and abs(purged["purged_at"] - time.time()) < 60
    code, out, _ = cli_json(capsys, "campaign", "status", "old", "--state", state_url)
    assert "dedupe keys purged at" in out
    late = fold(state_url, msgs["old"][:10])  # a replay after the purge is still refused
    assert late[("old", "closed_campaign")] == 10 and ("old", "accepted") not in late
    code, _out, err = cli_json(capsys, "campaign", "purge", "--state", state_url)
    assert code == 2 and "NAME or --closed-before" in err


def test_purge_closed_before_days(state_url, mosquitto, tmp_path, capsys):
    two_campaigns(state_url, mosquitto.url, tmp_path, n=50)
    for name in ("old", "live"):
        assert cli_json(capsys, "campaign", "close", name, "--state", state_url)[0] == 0
    with Store(state_url) as store:
        store.db.execute("UPDATE campaigns SET closed_at=? WHERE name='old'", (time.time() - 40 * DAY,))
    code, out, _ = cli_json(capsys, "campaign", "purge", "--closed-before", "30", "--state",
                            state_url, "--json")
    assert code == 0 and json.loads(out) == {"purged": {"old": 50}}
    code, out, _ = cli_json(capsys, "campaign", "purge", "--closed-before", "30", "--state",
                            state_url, "--json")
    assert json.loads(out) == {"purged": {}}  # nothing left to purge


@pytest.mark.parametrize("days, purged", [(30, True), (90, False)])
def test_serve_purges_after_days(mosquitto, tmp_path, capsys, days, purged):
    state = "sqlite:///" + str(tmp_path / "state.db")
    two_campaigns(state, mosquitto.url, tmp_path, n=40)
    assert cli_json(capsys, "campaign", "close", "old", "--state", state)[0] == 0
    with Store(state) as store:
        store.db.execute("UPDATE campaigns SET closed_at=? WHERE name='old'", (time.time() - 60 * DAY,))
    serve = ServeProcess(mosquitto.url, state, extra_args=[
        "--no-broker-check", "--purge-after-days", str(days)]).start()
    try:
        deadline = time.monotonic() + (20 if purged else 3)  # serve checks once it is up
        while time.monotonic() < deadline:
            with Store(state) as store:
                if store.seen_count("old") == 0:
                    break
            time.sleep(0.2)
        with Store(state) as store:
            assert (store.seen_count("old") == 0) == purged
            assert store.seen_count("live") == 40
    finally:
        serve.stop()


# SipHash-2-4 with 64-bit output, key 00..0f, message 00 01 .. (i-1) for i = 0..63: the
# reference implementation's vectors.h (vectors_sip64), as little-endian bytes. Entry 15 is the
# example of the SipHash paper's appendix (output a129ca6149be45e5).
SIP64 = """
310e0edd47db6f72 fd67dc93c539f874 5a4fa9d909806c0d 2d7efbd796666785 b7877127e09427cf
8da699cd64557618 cee3fe586e46c9cb 37d1018bf50002ab 6224939a79f5f593 b0e4a90bdf82009e
f3b9dd94c5bb5d7a a7ad6b22462fb3f4 fbe50e86bc8f1e75 903d84c02756ea14 eef27a8e90ca23f7
e545be4961ca29a1 db9bc2577fcc2a3f 9447be2cf5e99a69 9cd38d96f0b3c14b bd6179a71dc96dbb
98eea21af25cd6be c7673b2eb0cbf2d0 883ea3e395675393 c8ce5ccd8c030ca8 94af49f6c650adb8
eab8858ade92e1bc f315bb5bb835d817 adcf6b0763612e2f a5c91da7acaa4dde 716595876650a2a6
28ef495c53a387ad 42c341d8fa92d832 ce7cf2722f512771 e37859f94623f3a7 381205bb1ab0e012
ae97a10fd434e015 b4a31508beff4d31 81396229f0907902 4d0cf49ee5d4dcca 5c73336a76d8bf9a
d0a704536ba93e0e 925958fcd6420cad a915c29bc8067318 952b79f3bc0aa6d4 f21df2e41d4535f9
87577519048f53a9 10a56cf5dfcd9adb eb75095ccd986cd0 51a9cb9ecba312e6 96afadfc2ce666c7
72fe52975a4364ee 5a1645b276d592a1 b274cb8ebf87870a 6f9bb4203de7b381 eaecb2a30b22a87f
9924a43cc1315724 bd838d3aafbf8db7 0b1a2a3265d51aea 135079a3231ce660 932b2846e4d70666
e1915f5cb1eca46c f325965ca16d629f 575ff28e60381be5 724506eb4c328a95
""".split()


def test_siphash24_reference_vectors():
    key, msg = bytes(range(16)), bytes(range(64))
    assert len(SIP64) == 64
    for i, want in enumerate(SIP64):
        assert lib.ldp_siphash24(key, msg, i).to_bytes(8, "little").hex() == want, i
    assert lib.ldp_siphash24(key, msg, 15) == 0xa129ca6149be45e5


def test_campaign_keys_are_two_siphashes_over_batch_spans_and_nonce_tags():
    """A device's key in a campaign: SipHash-2-4 under the campaign's device key's first 16
    bytes, then under its next 16 (the key: BLAKE2b-512 of the campaign's salt keyed by the
    root key); the ingest's one call over a batch's device spans gives the same bytes as
    `many`. A nonce's tag: SipHash-2-4 of its 4 little-endian bytes under the nonce key, 63
    bits. A migrated campaign hashes the old one-key hash."""
    import hashlib
    root, salt = bytes(range(100, 132)), bytes(range(7, 39))
    material = hashlib.blake2b(salt, key=root, digest_size=64, person=b"ldpfleet-dedupe6").digest()
    keys = dedupe.DedupeKeys(root).campaign(salt)
    devices = ["sensor-%d" % i for i in range(300)] + ["x", "a" * 64, "sensor-7"]
    for d in ("x", "sensor-7", "a" * 64):
        raw = d.encode()
        want = (lib.ldp_siphash24(material[:16], raw, len(raw)).to_bytes(8, "little")
                + lib.ldp_siphash24(material[16:32], raw, len(raw)).to_bytes(8, "little"))
        assert keys.many([d]) == [want]
    batch = ReportBatch.from_pairs([("ldp/c/r/%s" % d, b"\0" * 16) for d in devices])
    ok, _co, _cl, doff, dlen = batch.split_topics()
    assert ok.all()
    spans = keys.spans(batch.data, doff, dlen)
    assert dedupe.as_keys(spans) == keys.many(devices)
    assert len(set(keys.many(devices))) == len(set(devices))
    other = dedupe.DedupeKeys(root).campaign(bytes(32))  # another campaign's salt
    assert not set(other.many(devices)) & set(keys.many(devices))
    nonces = np.array([0, 1, 0xDEADBEEF, 2 ** 32 - 1], np.uint32)
    tags = keys.nonce_tags(nonces)
    for n, t in zip(nonces.tolist(), tags.tolist()):
        assert t == lib.ldp_siphash24(material[32:48], n.to_bytes(4, "little"), 4) & (2 ** 63 - 1)
    assert tags.dtype == np.int64 and (tags >= 0).all() and len(set(tags.tolist())) == 4
    legacy = bytes(range(32))
    migrated = dedupe.DedupeKeys(root).campaign(salt, legacy)
    raw = b"sensor-7"
    old = (lib.ldp_siphash24(legacy[:16], raw, 8).to_bytes(8, "little")
           + lib.ldp_siphash24(legacy[16:], raw, 8).to_bytes(8, "little"))
    want = (lib.ldp_siphash24(material[:16], old, 16).to_bytes(8, "little")
            + lib.ldp_siphash24(material[16:32], old, 16).to_bytes(8, "little"))
    assert migrated.many(["sensor-7"]) == [want] != keys.many(["sensor-7"])
    assert dedupe.as_keys(migrated.spans(batch.data, doff, dlen)) == migrated.many(devices)


def as_schema3(store, messages):
    """Rewrite a state's dedupe keys as schema 3 had them (device ids and nonces in clear, no
    key, no `purges`, no salts), on either backend; `messages`: the accepted phase-1 reports,
    one per device."""
    db = store.db
    with store.batch():
        for stmt in ("DROP TABLE seen", "DROP TABLE purges", "DROP TABLE seen_log",
                     "DROP TABLE campaign_salts", "DELETE FROM meta WHERE key='dedupe_key_check'",
                     db.ddl("CREATE TABLE seen (campaign TEXT NOT NULL, phase INTEGER NOT NULL,"
                            " device TEXT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (campaign,"
                            " phase, device)){without_rowid}"),
                     "UPDATE meta SET value='3' WHERE key='schema'"):
            db.execute(stmt)
        db.executemany("INSERT INTO seen VALUES (?, 1, ?, ?)",
                       [(t.split("/")[1], t.split("/")[-1], int.from_bytes(p[8:12], "little"))
                        for t, p in messages])


def test_schema3_state_migrates_and_still_dedupes(state_url, mosquitto, tmp_path):
    """3 -> 6 on both backends: the ids in clear become keyed hashes, per campaign; a replay
    of an old report is still a duplicate, another nonce still a second report."""
    msgs = two_campaigns(state_url, mosquitto.url, tmp_path, n=60)
    with Store(state_url) as store:
        old_key = store.dedupe_keys("old", ["sensor-old-5"])
        as_schema3(store, msgs["old"] + msgs["live"])
        assert store.db.execute("SELECT count(*) FROM seen WHERE device='sensor-old-5'"
                                ).fetchone()[0] == 1
    with Store(state_url) as store:
        assert store.meta("schema") == str(SCHEMA_VERSION)
        rows = store.dedupe_rows()
        assert len(rows) == 120 and all(len(bytes(r[2])) == 16 for r in rows)
        assert not any("sensor" in str(c) for r in rows for c in (r[0], r[2]))
        assert store.dedupe_keys("old", ["sensor-old-5"]) != old_key  # a new salt
        assert store.reported("old", 1, ["sensor-old-5", "nobody"]) == {"sensor-old-5"}
        assert store.meta("dedupe_key") is None  # the old key lives on per campaign only
    second = bytearray(msgs["old"][3][1])
    second[8] ^= 1
    counts = fold(state_url, msgs["old"][:10] + [(msgs["old"][3][0], bytes(second))]
                  + msgs["live"][:5])
    assert counts[("old", "duplicate")] == 10 and counts[("old", "second_report")] == 1
    assert counts[("live", "duplicate")] == 5 and ("old", "accepted") not in counts
    with Store(state_url) as store:
        assert store.seen_count("old") == 60 and store.counters("old")["accepted"] == 60
