"""Make the committed upgrade fixture: a small aggregator state of this code's schema, with
what its campaigns answer, for tests/integration/test_upgrade.py (docs/upgrade.md).

    python tools/make_state_fixture.py tests/fixtures/state_v5 [--postgres ADMIN_URL]

writes, into the directory:
- `state.db.gz`: a SQLite state (the file `serve --state sqlite:///...` keeps), gzipped;
- `state.pg.sql.gz` (with --postgres): the same state made on PostgreSQL in a throw-away
  database and dumped with `pg_dump --no-owner --no-privileges`, gzipped;
- `expected.json`: every campaign's status counters and its estimate rows, as this code
  computes them, and a few accepted reports (`resend`). A later schema must migrate the state,
  give the same answers and still count each of those reports, sent again, as a duplicate.

Everything is seeded (campaign ids, salts, devices, the perturbation words), with no broker:
campaigns are created, advanced and closed in process and the reports go through the real
ingest path (`Ingestor.process_batch`). Campaigns: `cpu` (OLH, one phase, duplicates and a
malformed report), `hh` (LDPMiner-RAPPOR advanced to phase 2, both phases reported) and `gone`
(GRR, closed, its dedupe keys purged).
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "aggregator"))

from ldpfleet.core.protocols.options import ProtocolOptions  # noqa: E402
from ldpfleet.service.state import retention  # noqa: E402
from ldpfleet.service.campaigns.manage import (
    Issuance,
    campaign_status,
    close_campaign,
    create_campaign)
from ldpfleet.service.campaigns.estimates import EstimateQuery  # noqa: E402
from ldpfleet.service.campaigns.query import estimate  # noqa: E402
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor  # noqa: E402
from ldpfleet.service.campaigns.protocols import advance_campaign, create_protocol_campaign
from ldpfleet.service.state.store import Store  # noqa: E402
from ldpfleet.service.state.sql import SCHEMA_VERSION  # noqa: E402
from ldpfleet.core.signing import write_signing_key  # noqa: E402

WORKER = "fixture-worker"


def _fold(state: str, messages):
    ingestor = Ingestor(state, options=IngestOptions(client_id=WORKER))
    try:
        return ingestor.process_batch(messages)
    finally:
        ingestor.store.close()


def _messages(name: str, reports, prefix: str):
    return [("ldp/%s/r/%s%d" % (name, prefix, i), row.tobytes()) for i, row in enumerate(reports)]


def build(state: str, key_file: str) -> list:
    """Campaigns, reports, an advance, a close and a purge into `state`; returns a few of the
    accepted reports as (topic, payload hex): sent again, each must be a duplicate."""
    rng = np.random.default_rng(20261126)
    with Store(state) as store:
        cpu = create_campaign(store, None, key_file, "cpu", "olh", "2", "0-63",
                              issue=Issuance(salt=11, campaign_id=1001))
        hh = create_protocol_campaign(store, None, key_file, "hh", "ldpminer-rappor", "4", "0-99",
                                      ProtocolOptions(set_size=4, top=3),
                                      Issuance(salt=12, campaign_id=1002))
        gone = create_campaign(store, None, key_file, "gone", "grr", "1", "8",
                               issue=Issuance(salt=13, campaign_id=1003))
    values = np.minimum(rng.zipf(1.5, 400) - 1, 63).astype(np.uint32)
    reports = cpu.mechanism(1).perturb_batch(values, rng)
    msgs = _messages("cpu", reports, "cpu-")
    _fold(state, msgs[:300])
    _fold(state, msgs[300:] + msgs[:20] + [("ldp/cpu/r/cpu-bad", reports[0].tobytes()[:-1])])

    resend = [(t, p.hex()) for t, p in msgs[:3]]
    sets = [sorted({int(v) for v in np.minimum(rng.zipf(1.6, 4) - 1, 99)}) for _ in range(300)]
    msgs = _messages("hh", hh.mechanism(1).perturb_batch(sets, rng), "hh-")
    _fold(state, msgs)
    resend += [(t, p.hex()) for t, p in msgs[:2]]
    with Store(state) as store:
        out = advance_campaign(store, None, "hh")
        hh = store.require_campaign("hh")
    candidates = set(out["candidates"])
    trimmed = [[v for v in s if v in candidates] for s in sets]
    _fold(state, _messages("hh", hh.mechanism(2).perturb_batch(trimmed, rng), "hh-"))

    _fold(state, _messages("gone", gone.mechanism(1).perturb_batch(
        rng.integers(0, 8, 50).astype(np.uint32), rng), "gone-"))
    grace, retention.CLOSE_GRACE_S = retention.CLOSE_GRACE_S, 0.0
    try:
        with Store(state) as store:
            close_campaign(store, "gone")
            retention.purge(store, "gone")
    finally:
        retention.CLOSE_GRACE_S = grace
    return resend


def answers(state: str) -> dict:
    """What the fixture's campaigns answer: status counters and estimate rows."""
    out = {}
    with Store(state, create=False) as store:
        for camp in store.campaigns():
            status = campaign_status(store, camp.name)
            rows = estimate(store, camp.name, EstimateQuery()).to_json()["items"]
            out[camp.name] = {
                "campaign_id": status["campaign_id"], "state": status["state"],
                "phase": status["phase"], "received": status["received"],
                "accepted": status["accepted"], "rejected": status["rejected"],
                "phase_reports": [ph["reports"] for ph in status["phases"]],
                "dedupe_purged_keys": (status["dedupe_purged"] or {}).get("keys"),
                "estimate": [[r["item"], r["estimate"]] for r in rows]}
    return out


def make_postgres(admin_url: str, key_file: str, out_path: str) -> dict:
    """The same state on PostgreSQL, dumped to `out_path`; returns its answers."""
    import psycopg
    name = "ldpfleet_fixture_%s" % uuid.uuid4().hex[:10]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "%s"' % name)
    url = "%s/%s" % (admin_url.rsplit("/", 1)[0], name)
    try:
        build(url, key_file)
        found = answers(url)
        dump = subprocess.run(["pg_dump", "--no-owner", "--no-privileges", "--dbname", url],
                              check=True, capture_output=True, text=True).stdout
        with gzip.open(out_path, "wt") as f:
            f.write(dump)
        return found
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="directory (e.g. tests/fixtures/state_v5)")
    ap.add_argument("--postgres", default=None, metavar="ADMIN_URL",
                    help="also make state.pg.sql on this server (a role that may create "
                         "databases, e.g. postgresql://postgres@127.0.0.1:5432/postgres)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ldpfleet-fixture-")
    try:
        key_file = os.path.join(work, "fixture.key")
        write_signing_key(key_file)
        sqlite_path = os.path.join(work, "state.db")
        resend = build("sqlite:///" + sqlite_path, key_file)
        expected = answers("sqlite:///" + sqlite_path)
        with Store("sqlite:///" + sqlite_path) as store:  # one file, no WAL beside it
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            store.conn.execute("VACUUM")
        with open(sqlite_path, "rb") as src, gzip.open(os.path.join(args.out, "state.db.gz"),
                                                       "wb") as dst:
            shutil.copyfileobj(src, dst)
        if args.postgres:
            found = make_postgres(args.postgres, key_file, os.path.join(args.out, "state.pg.sql.gz"))
            if found != expected:
                raise SystemExit("PostgreSQL answers differ from SQLite's: %s != %s"
                                 % (found, expected))
        with open(os.path.join(args.out, "expected.json"), "w") as f:
            json.dump({"schema": SCHEMA_VERSION, "campaigns": expected, "resend": resend}, f,
                      sort_keys=True)
            f.write("\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("wrote %s (schema %d): %s" % (args.out, SCHEMA_VERSION, ", ".join(sorted(expected))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
