"""Dedupe keys that link nothing (dedupe.py): a copy of the state — the SQLite file, the
PostgreSQL tables or a `pg_dump` — neither links a device across campaigns nor matches a stored
nonce to one seen on the wire without the root key file, which lives outside the database; a
close zeroes the nonce tags and a purge drops the campaign's salt; the key file is made on
first use beside a SQLite state and a missing or different one is refused; a schema-5 state
(tests/fixtures/state_schema5.db, made by the schema-5 code: two campaigns of the same 40
devices, "old" closed and "live" open) migrates on both backends and still dedupes."""
import json
import os
import secrets
import shutil
import sqlite3
import stat
import subprocess

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.core.errors import ConfigError
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.state import dedupe
from ldpfleet.service.state.store import SCHEMA_VERSION
from ldpfleet.core.signing import write_signing_key
from support.service import fold_batch, report_messages

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURE = os.path.join(HERE, "fixtures", "state_schema5.db")
SHARED, OWN = 120, 80
GUESSES = 10000


def fleet_messages(state, broker_url, tmp_path):
    """Campaigns a and b: SHARED devices report in both, OWN more in each (400 rows)."""
    key = str(tmp_path / "sign.key")
    write_signing_key(key)
    rng = np.random.default_rng(29)
    msgs = {}
    with Store(state) as store:
        for name in ("a", "b"):
            camp = create_campaign(store, BrokerSettings.from_url(broker_url), key, name, "olh",
                                   2.0, "0-31")
            reports = camp.mechanism(1).perturb_batch(rng.integers(0, 32, SHARED + OWN), rng)
            msgs[name] = (report_messages(name, reports[:SHARED], prefix="dev-")
                          + report_messages(name, reports[SHARED:], prefix="dev-%s-" % name))
    for name in msgs:
        counts = fold_batch(state, msgs[name], "w")
        assert counts[(name, "accepted")] == SHARED + OWN
    return msgs


def raw_rows(state):
    """What a copy of the state shows, read with the database's own client, nothing of
    ldpfleet: {campaign: [(16-byte key, tag)]}, and every value of `meta` and
    `campaign_salts`. SQLite: an online backup of the file; PostgreSQL: the tables."""
    rows, material = {}, []
    if state.startswith("sqlite:///"):
        copy = state[len("sqlite:///"):] + ".backup"
        src, dst = sqlite3.connect(state[len("sqlite:///"):]), sqlite3.connect(copy)
        src.backup(dst)
        src.close()
        for name, keys, tags in dst.execute("SELECT campaign, keys, nonce_tags FROM seen_log"):
            tags = np.frombuffer(tags, "<u8").tolist()
            rows.setdefault(name, []).extend(
                (keys[16 * i:16 * i + 16], t) for i, t in enumerate(tags))
        assert dst.execute("SELECT count(*) FROM seen").fetchone()[0] == 0
        db = dst
    else:
        import psycopg
        db = psycopg.connect(state, autocommit=True)
        for name, key, tag in db.execute("SELECT campaign, device, nonce_tag FROM seen"):
            rows.setdefault(name, []).append((bytes(key), tag))
    material += [v for (v,) in db.execute("SELECT value FROM meta").fetchall()]
    for salt, legacy in db.execute("SELECT salt, legacy_key FROM campaign_salts").fetchall():
        material += [bytes(salt)] + ([bytes(legacy)] if legacy is not None else [])
    db.close()
    return rows, material


def candidate_keys(material):
    """Every 32-byte value the state holds (hex text or bytes): what an attacker with the copy
    would try as a key."""
    out = set()
    for value in material:
        if isinstance(value, str):
            try:
                value = bytes.fromhex(value)
            except ValueError:
                continue
        if len(value) == 32:
            out.add(value)
    return out


def sip_pair(key, ids):
    return set(dedupe.as_keys(dedupe._siphash_spans(
        key, np.frombuffer(b"".join(i.encode() for i in ids), np.uint8),
        np.cumsum([0] + [len(i) for i in ids[:-1]]).astype(np.uint32),
        np.array([len(i) for i in ids], np.uint32))))


def named_rows(rows, keys_of):
    """How many (device, campaign) rows `keys_of(campaign)` (a set of keys) names."""
    return sum(len({k for k, _t in part} & keys_of(name)) for name, part in rows.items())


def wire_nonces(msgs):
    return {int.from_bytes(p[8:12], "little") for m in msgs.values() for _t, p in m}


def test_a_copy_of_the_state_links_no_device_across_campaigns(state_url, mosquitto, tmp_path):
    """The audit's three measurements on both backends: shared devices linked across
    campaigns with no guessing (was 120/120), rows named with everything in the state and
    10,000 guessed ids (was 400/400 with the stored key), stored nonce = wire nonce (was
    400/400). The same guessing WITH the key file names every row: the attack is real and only
    the key file's absence stops it."""
    msgs = fleet_messages(state_url, mosquitto.url, tmp_path)
    rows, material = raw_rows(state_url)
    assert sorted(len(part) for part in rows.values()) == [SHARED + OWN] * 2
    a, b = ({k for k, _t in rows[n]} for n in ("a", "b"))
    assert len(a & b) == 0  # no device links across the two campaigns

    ids = ["dev-%d" % i for i in range(SHARED)] + ["dev-%s-%d" % (n, i) for n in "ab"
                                                    for i in range(OWN)]
    guesses = ids + ["dev-x-%d" % i for i in range(GUESSES - len(ids))]
    tried = candidate_keys(material)
    assert len(tried) >= 2  # the salts at least
    for key in tried:  # as the state's one key (schema <= 5) or as the root of a campaign's
        assert named_rows(rows, lambda _n: sip_pair(key, guesses)) == 0
        for salt in tried:
            ck = dedupe.DedupeKeys(key).campaign(salt)
            assert named_rows(rows, lambda _n: set(ck.many(guesses))) == 0
    tags = {t for part in rows.values() for _k, t in part}
    assert not tags & wire_nonces(msgs) and len(tags) == 2 * (SHARED + OWN)

    key_file = os.environ["LDPFLEET_DEDUPE_KEY"] if "postgresql" in state_url else \
        state_url[len("sqlite:///"):] + ".dedupe-key"
    root = dedupe.read_key_file(key_file)
    assert root not in tried
    with Store(state_url) as store:  # the residual: key file + state + guesses
        assert named_rows(rows, lambda n: set(store.dedupe_keys(n, guesses))) == 400
        for name, m in msgs.items():  # and the tags are the nonces' keyed tags, not the nonces
            by_key = dict(rows[name])
            for (topic, payload), k in zip(m, store.dedupe_keys(name, [t.split("/")[-1]
                                                                        for t, _p in m])):
                nonce = int.from_bytes(payload[8:12], "little")
                assert by_key[k] != nonce
                assert by_key[k] == int(store.campaign_keys(name).nonce_tags([nonce])[0])
    if state_url.startswith("sqlite:///"):
        with open(state_url[len("sqlite:///"):], "rb") as f:
            raw = f.read()
        assert root not in raw and root.hex().encode() not in raw
    else:
        dump = subprocess.run(["pg_dump", "--data-only", state_url], capture_output=True,
                              check=True).stdout
        assert b"seen" in dump and root.hex().encode() not in dump
        # the dump's rows are the same unlinked keys (bytea as \x hex in COPY)
        for k in a:
            assert k.hex().encode() in dump
            assert k not in b


def test_close_zeroes_nonce_tags_and_purge_drops_the_salt(state_url, mosquitto, tmp_path):
    msgs = fleet_messages(state_url, mosquitto.url, tmp_path)
    assert cli.main(["campaign", "close", "a", "--state", state_url]) == 0
    rows, _material = raw_rows(state_url)
    assert {t for _k, t in rows["a"]} == {0}  # dropped at the close
    assert 0 not in {t for _k, t in rows["b"]}
    late = fold_batch(state_url, msgs["a"][:5] + msgs["b"][:5], "w")
    assert late[("a", "closed_campaign")] == 5 and late[("b", "duplicate")] == 5
    with Store(state_url) as store:
        store.db.execute("UPDATE campaigns SET closed_at = closed_at - 120 WHERE name='a'")
        assert store.db.execute("SELECT count(*) FROM campaign_salts").fetchone()[0] == 2
    assert cli.main(["campaign", "purge", "a", "--state", state_url]) == 0
    rows, _material = raw_rows(state_url)
    assert "a" not in rows and len(rows["b"]) == SHARED + OWN
    with Store(state_url) as store:
        assert [r[0] for r in store.db.execute("SELECT campaign FROM campaign_salts")] == ["b"]


def test_the_key_file_is_made_beside_sqlite_and_a_wrong_one_is_refused(tmp_path, mosquitto,
                                                                        capsys):
    state = "sqlite:///" + str(tmp_path / "state.db")
    msgs = fleet_messages(state, mosquitto.url, tmp_path)
    key_file = str(tmp_path / "state.db.dedupe-key")
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    with open(key_file) as f:
        assert len(bytes.fromhex(f.read().strip())) == 32
    with Store(state) as store:
        assert store.meta("dedupe_key_check") == dedupe.fingerprint(dedupe.read_key_file(key_file))
    moved = str(tmp_path / "elsewhere.key")
    os.rename(key_file, moved)
    with Store(state) as store:  # reading estimates needs no key
        assert store.counters("a")["accepted"] == SHARED + OWN
        with pytest.raises(ConfigError, match="no dedupe key file at .*--dedupe-key"):
            store.dedupe_keys("a", ["dev-1"])
    assert not os.path.exists(key_file)  # never silently replaced
    out = subprocess.run(["ldpfleet", "serve", "--broker", mosquitto.url, "--state", state,
                          "--no-broker-check"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--dedupe-key" in out.stderr, out.stderr
    with open(key_file, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    with Store(state) as store:
        with pytest.raises(ConfigError, match="is not the one .* was made with"):
            store.dedupe_keys("a", ["dev-1"])
    os.unlink(key_file)
    # the right file named on the command line (or LDPFLEET_DEDUPE_KEY, or dedupe_key in
    # ldpfleet.toml: argparse defaults): a redelivery is still a duplicate
    capsys.readouterr()
    assert cli.main(["campaign", "status", "a", "--state", state, "--dedupe-key", moved,
                     "--json"]) == 0
    from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
    ingestor = Ingestor(state, options=IngestOptions(client_id="w", dedupe_key=moved))
    try:
        assert ingestor.process_batch(msgs["a"][:7])[("a", "duplicate")] == 7
    finally:
        ingestor.store.close()


def test_postgresql_needs_a_named_key_file(postgres_url, mosquitto, tmp_path, monkeypatch):
    monkeypatch.delenv("LDPFLEET_DEDUPE_KEY")
    key = str(tmp_path / "sign.key")
    write_signing_key(key)
    with Store(postgres_url) as store:  # creating a state and a campaign needs no key
        create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "a", "olh", 2.0,
                        "0-31")
        with pytest.raises(ConfigError, match="PostgreSQL state needs --dedupe-key"):
            store.dedupe_keys("a", ["dev-1"])
    shared = str(tmp_path / "shared.key")
    with Store(postgres_url, dedupe_key=shared) as one, \
            Store(postgres_url, dedupe_key=shared) as two:  # two workers, one file
        assert one.dedupe_keys("a", ["dev-1"]) == two.dedupe_keys("a", ["dev-1"])
    other = str(tmp_path / "other.key")  # a worker on a machine without the file: refused,
    with Store(postgres_url, dedupe_key=other) as store:  # and no file of its own is made
        with pytest.raises(ConfigError, match="no dedupe key file at .*other.key"):
            store.dedupe_keys("a", ["dev-1"])
    assert not os.path.exists(other)
    dedupe.create_key_file(other)  # a key of its own: refused too
    with Store(postgres_url, dedupe_key=other) as store:
        with pytest.raises(ConfigError, match="is not the one"):
            store.dedupe_keys("a", ["dev-1"])


# --- migration of a schema-5 state -----------------------------------------------------------

V5_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE campaigns (name TEXT PRIMARY KEY, campaign_id BIGINT NOT NULL UNIQUE,
    config_payload BYTEA NOT NULL, config_body TEXT NOT NULL, signing_key_ref TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'closed')), phase INTEGER NOT NULL,
    phase2_payload BYTEA, phase2_body TEXT, created_at DOUBLE PRECISION NOT NULL,
    closed_at DOUBLE PRECISION);
CREATE TABLE sketches (campaign TEXT NOT NULL, phase INTEGER NOT NULL, worker TEXT NOT NULL,
    n BIGINT NOT NULL, blob BYTEA NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (campaign, phase, worker));
CREATE TABLE seen (campaign TEXT NOT NULL, phase INTEGER NOT NULL, device BYTEA NOT NULL,
    seq BIGINT NOT NULL, PRIMARY KEY (campaign, phase, device));
CREATE TABLE seen_log (id BIGSERIAL PRIMARY KEY, campaign TEXT NOT NULL, phase INTEGER NOT NULL,
    n BIGINT NOT NULL, keys BYTEA NOT NULL, seqs BYTEA NOT NULL);
CREATE TABLE purges (campaign TEXT PRIMARY KEY, purged_at DOUBLE PRECISION NOT NULL,
    keys BIGINT NOT NULL);
CREATE TABLE protocols (campaign TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE counters (campaign TEXT NOT NULL, reason TEXT NOT NULL, worker TEXT NOT NULL,
    count BIGINT NOT NULL, PRIMARY KEY (campaign, reason, worker))
"""
"""Schema 5's tables on PostgreSQL, as store_sql made them (its `seen` holds the keys there)."""


def fixture_messages():
    with open(FIXTURE.replace(".db", ".json")) as f:
        return {n: [(t, bytes.fromhex(p)) for t, p in m] for n, m in json.load(f).items()}


def schema5_state(backend, tmp_path, postgres_url=None):
    """The fixture as a state of `backend`: the SQLite file copied, or its rows loaded into
    schema 5's PostgreSQL tables (the seen_log blobs as `seen` rows, as a PostgreSQL worker
    of schema 5 claimed them). Returns (state URL, the fixture's one-key hashes by campaign)."""
    path = str(tmp_path / "v5.db")
    shutil.copy(FIXTURE, path)
    lite = sqlite3.connect(path)
    assert lite.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == "5"
    hashes = {}
    for name, keys, seqs in lite.execute("SELECT campaign, keys, seqs FROM seen_log"):
        nonces = np.frombuffer(seqs, "<u4").tolist()
        hashes.setdefault(name, []).extend((keys[16 * i:16 * i + 16], q)
                                           for i, q in enumerate(nonces))
    if backend == "sqlite":
        lite.close()
        return "sqlite:///" + path, hashes
    import psycopg
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        for stmt in V5_TABLES.split(";"):
            pg.execute(stmt)
        for table in ("meta", "campaigns", "sketches", "purges", "protocols", "counters"):
            rows = lite.execute("SELECT * FROM %s" % table).fetchall()
            if rows:
                with pg.cursor() as cur:
                    cur.executemany("INSERT INTO %s VALUES (%s)" % (
                        table, ", ".join(["%s"] * len(rows[0]))), rows)
        with pg.cursor() as cur:
            cur.executemany("INSERT INTO seen VALUES (%s, 1, %s, %s)",
                            [(n, k, q) for n, part in hashes.items() for k, q in part])
    lite.close()
    return postgres_url, hashes


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_schema5_state_migrates_and_still_dedupes(backend, tmp_path, request):
    pg_url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    state, before = schema5_state(backend, tmp_path, pg_url)
    msgs = fixture_messages()
    # today's schema-5 state links the 40 devices of both campaigns, and keeps wire nonces
    assert len({k for k, _q in before["old"]} & {k for k, _q in before["live"]}) == 40
    assert {q for part in before.values() for _k, q in part} == wire_nonces(msgs)

    with Store(state) as store:  # migrates (and makes the key file)
        assert store.meta("schema") == str(SCHEMA_VERSION)
        assert store.meta("dedupe_key") is None
        assert store.seen_count("old") == 40 and store.seen_count("live") == 40
        old_key = bytes.fromhex(sqlite3.connect(FIXTURE).execute(
            "SELECT value FROM meta WHERE key='dedupe_key'").fetchone()[0])
        legacy = {bytes(r[0]) for r in store.db.execute(
            "SELECT legacy_key FROM campaign_salts").fetchall()}
        assert legacy == {old_key}  # what cannot be re-keyed without the ids: kept per campaign
    rows, material = raw_rows(state)
    assert len({k for k, _t in rows["old"]} & {k for k, _t in rows["live"]}) == 0
    assert {t for _k, t in rows["old"]} == {0}  # closed: nonces dropped
    assert not {t for _k, t in rows["live"]} & wire_nonces(msgs)
    ids = ["sensor-%d" % i for i in range(40)]
    for key in candidate_keys(material):  # the old key in the state no longer names a row
        assert named_rows(rows, lambda _n: sip_pair(key, ids + ["x-%d" % i for i in range(200)])) == 0

    with Store(state) as store:
        assert store.reported("live", 1, ids + ["nobody"]) == set(ids)
    live = msgs["live"]
    second = bytearray(live[3][1])
    second[8] ^= 1
    new_device = [(live[0][0].replace("sensor-0", "sensor-new"), live[0][1])]
    counts = fold_batch(state, live + [(live[3][0], bytes(second))] + new_device
                        + msgs["old"][:4], "w")
    assert counts[("live", "duplicate")] == 40 and counts[("live", "second_report")] == 1
    assert counts[("live", "accepted")] == 1 and counts[("old", "closed_campaign")] == 4
    with Store(state) as store:
        assert store.counters("live")["accepted"] == 41 and store.seen_count("live") == 41
        store.db.execute("UPDATE campaigns SET closed_at = closed_at - 120 WHERE name='old'")
    assert cli.main(["campaign", "purge", "old", "--state", state]) == 0
    with Store(state) as store:  # the purge takes the old key's copy with the campaign
        assert [r[0] for r in store.db.execute("SELECT campaign FROM campaign_salts")] == ["live"]
