"""Retention (issue 15): dedupe keys are keyed hashes of device ids, never the ids, and a
closed campaign's keys can be purged (by hand or by `serve --purge-after-days`) while its
sketches, counters and estimates stay exactly as they were. Both backends."""
import json
import time

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.ingest import IngestOptions, Ingestor
from ldpfleet.signing import write_signing_key
from support.service import ServeProcess, report_messages

DAY = 86400.0


def fold(state, messages):
    ingestor = Ingestor(state, options=IngestOptions(client_id="w"))
    try:
        return ingestor.process_batch(messages)
    finally:
        ingestor.store.close()


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
        rows = store.db.execute("SELECT campaign, phase, device, seq FROM seen").fetchall()
        assert len(rows) == 400
        assert all(len(bytes(r[2])) == 16 for r in rows)
        stored = b"".join(bytes(r[2]) for r in rows)
        assert b"sensor-" not in stored and not any("sensor" in str(c) for r in rows for c in r)
        # the public lookup still answers by device id (it hashes with the state's key)
        assert set(store.seen_seqs("old", 1, ["sensor-old-3", "nobody"])) == {"sensor-old-3"}
    if state_url.startswith("sqlite:///"):
        with open(state_url[len("sqlite:///"):], "rb") as f:
            assert b"sensor-" not in f.read()
    again = fold(state_url, msgs["old"][:25])  # redeliveries are still duplicates
    assert again[("old", "duplicate")] == 25


def test_two_states_hash_the_same_device_differently(tmp_path, mosquitto):
    keys = []
    for i in range(2):
        with Store("sqlite:///" + str(tmp_path / ("s%d.db" % i))) as store:
            keys.append(store.device_keys.of("sensor-1"))
    assert keys[0] != keys[1] and len(keys[0]) == 16


def test_purge_drops_only_a_closed_campaigns_keys(state_url, mosquitto, tmp_path, capsys):
    msgs = two_campaigns(state_url, mosquitto.url, tmp_path)
    code, _out, err = cli_json(capsys, "campaign", "purge", "old", "--state", state_url)
    assert code == 2 and "campaign old is open" in err
    code, before, _ = cli_json(capsys, "estimate", "old", "--state", state_url, "--json")
    assert code == 0
    assert cli_json(capsys, "campaign", "close", "old", "--state", state_url)[0] == 0
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
