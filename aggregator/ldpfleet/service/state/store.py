"""The aggregator's state: a SQLite file in WAL mode (the embedded default) or a PostgreSQL
database shared by several `serve` workers (store_sql has the two connections and the schema).

Tables
- `campaigns`: name, campaign_id, the signed config payload as published and its body,
  the signing-key reference (path of the private key file, never the key), state `open`/`closed`,
  current phase, the signed phase-2 payload if any.
- `sketches`: one partial per (campaign, phase, worker): a serialized sketch
  (`Sketch.serialize()`) and its report count. Readers merge the partials (linear sketches);
  a worker only ever writes its own row, so workers never contend on one.
- `seen`: dedupe keys, one row per (campaign, phase, keyed hash of the device id under the
  campaign's key: dedupe.py) holding a keyed tag of the nonce accepted from that device
  (devices send one report per phase, spec §6); the primary key dedupes across PostgreSQL
  workers. `seen_log`: a SQLite state's dedupe keys instead, one row of blobs per claimed
  (campaign, phase, batch), indexed in memory by the writer (seen_log.py); claims.py is the
  one interface to either. `campaign_salts`:
  each campaign's salt (its keys come from it and the root key FILE, never stored here).
  `purges`: when a closed campaign's keys were dropped. `login_devices`: per (campaign,
  phase, load-generator login, worker) the device ids it brought (login_bound.py).
- `counters`: (campaign, reason, worker) -> count, summed by readers. Reasons of messages that
  name no known campaign are kept under campaign "" so attacker-chosen names cannot grow it.
- `meta`: schema version, readiness of the ingest, key set, broker drops, the fingerprint of
  the dedupe root key.
- `protocols`: the service-side state of a two-phase protocol campaign (LDPMiner's k and
  k_max, LDPLCM's theta, ...: what the aggregator needs but devices never see), one JSON
  document per campaign.

A recurring campaign (spec §3.4) stores each ROUND where another campaign stores a phase: the
`phase` column of `sketches`, `seen`, `seen_log` and `login_devices` holds the round (1..R), so
its sketches are per round and its dedupe is per (campaign, round, device)
(`Campaign.slot_phase`, service/campaigns/rounds.py).

The ingest writes a whole batch (its sketch partials + dedupe keys + counters) in ONE
transaction (`batch()`) and acknowledges the broker after COMMIT; readers (CLI `status`,
`estimate`) see the last committed batches and never block the writers.

URLs: `sqlite:///relative/path`, `sqlite:////absolute/path` (SQLAlchemy's convention), a bare
filesystem path, or `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`.
"""
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from ...core import config as cfgmod
from ...core import protocol, schedule
from ...core.errors import ConfigError
from . import claims, dedupe, sql as store_sql
from .dedupe_state import DedupeState
from .sql import SCHEMA_VERSION, is_postgres, redact  # noqa: F401 (re-exported)

GLOBAL = ""
"""Counter key of messages that belong to no known campaign (bad topic, unknown campaign)."""


def state_path(url: str) -> str:
    """Filesystem path of a `sqlite:///...` URL (or of a bare path); PostgreSQL URLs have none."""
    if is_postgres(url):
        raise ConfigError("state", "%s is a PostgreSQL state, not a file" % redact(url))
    return store_sql.sqlite_path(url)


@dataclass
class Campaign:
    """One campaign row; `config` is the verified config body (dict)."""

    name: str
    campaign_id: int
    config: dict
    config_payload: bytes
    signing_key_ref: str
    state: str
    phase: int
    phase2: dict = None
    phase2_payload: bytes = None
    created_at: float = 0.0
    closed_at: float = None
    protocol: dict = None
    """Service-side state of a two-phase protocol (`protocols` table), else None."""
    _mechanisms: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def open(self) -> bool:
        return self.state == "open"

    @property
    def phases(self) -> int:
        return len(self.config["phases"])

    @property
    def sample_rate_ppm(self):
        """LDPLCM's public device split (spec §5): the phases' `sample_rate_ppm`, or None."""
        from ...core.protocols.ldplcm import sample_rate_ppm
        return sample_rate_ppm(self.config)

    def phase_extras(self, phase: int) -> dict:
        """Extra mechanism arguments of a phase (`mechanism_for_phase` adds `domain_keys` for
        a string domain itself): in phase 2 the phase-2 message's `candidates` / `model` when
        the mechanism's constructor names them. srappor needs the candidates (bit c is
        candidates[c]; without them it would default to the whole int domain and expect
        reports of another size), so a phase-2 srappor mechanism is refused until the
        phase-2 message exists; sh and lcm fold reports without them (the lcm sketch gets the
        model only at estimate time)."""
        name = self.config["phases"][phase - 1]["mechanism"]
        if phase != 2 or self.fallback:  # the flat branch runs listless (spec §5.4)
            return {}
        extras = cfgmod.phase2_inputs(name, self.phase2)
        if "candidates" in cfgmod.phase2_parameters(name) and "candidates" not in extras:
            raise ConfigError("candidates", "campaign %s: phase 2 (%s) has no candidates before "
                              "its phase-2 message" % (self.name, name))
        return extras

    @property
    def fallback(self) -> bool:
        """Has phase 2 taken svim's flat branch (`"fallback": true`, spec §5.4)? Its reports
        then carry the fallback's mechanism id and are folded by the fallback mechanism."""
        return cfgmod.is_fallback(self.phase2)

    def mechanism_name(self, phase: int) -> str:
        if phase == 2 and self.fallback:
            return self.config["phases"][1]["fallback"]["mechanism"]
        return self.config["phases"][phase - 1]["mechanism"]

    @property
    def header_rule(self):
        """What a report header must say for this campaign now (`header_rule_at`)."""
        return self.header_rule_at(int(time.time()))

    def header_rule_at(self, now: int):
        """What a report header must say for this campaign at unix time `now` (spec §3); the
        sizes of phases not open yet are never compared (their reports are `phase_not_open`
        first). A recurring campaign's reports carry flags 1 and a round of 1..the round open
        at `now` plus one (spec §3.4, core.schedule.highest_round)."""
        phases = self.config["phases"]
        extra = protocol.ROUND_HEADER_SIZE - protocol.HEADER_SIZE if self.recurring else 0
        return protocol.HeaderRule(
            self.campaign_id, tuple(protocol.MECHANISM_IDS[self.mechanism_name(ph["phase"])]
                                    for ph in phases),
            tuple(self.mechanism(p).report_size + extra if p <= self.phase else 0
                  for p in range(1, len(phases) + 1)),
            open_phase=self.phase, rounds=self.rounds,
            max_round=schedule.highest_round(self.config, now) if self.recurring else 0)

    # --- recurring campaigns (spec §3.4): a round's reports live in slot = round -----------
    @property
    def recurring(self) -> bool:
        """Does the config carry a `schedule` (spec §3.4)?"""
        return schedule.is_recurring(self.config)

    @property
    def rounds(self) -> int:
        """R of a recurring campaign, 0 for a one-shot one."""
        return schedule.round_count(self.config) if self.recurring else 0

    def report_size(self, phase: int) -> int:
        """Bytes of a report of `phase` as it arrives (the round header included)."""
        extra = protocol.ROUND_HEADER_SIZE - protocol.HEADER_SIZE if self.recurring else 0
        return self.mechanism(phase).report_size + extra

    def slot_phase(self, slot: int) -> int:
        """The phase whose mechanism folds storage slot `slot`: the slot itself in a one-shot
        campaign, phase 1 for every round of a recurring one (slot = round)."""
        return 1 if self.recurring else slot

    def slot_mechanism(self, slot: int):
        """The Mechanism of storage slot `slot` (a phase, or a recurring campaign's round)."""
        return self.mechanism(self.slot_phase(slot))

    def slot_label(self, slot: int) -> str:
        """`round 3` or `phase 2`: how logs and messages name a slot."""
        return ("round %d" if self.recurring else "phase %d") % slot

    def mechanism(self, phase: int):
        """The Mechanism of one phase (cached per row object)."""
        if phase not in self._mechanisms:
            self._mechanisms[phase] = cfgmod.mechanism_for_phase(
                self.config, phase, fallback=phase == 2 and self.fallback,
                **self.phase_extras(phase))
        return self._mechanisms[phase]


class Store(DedupeState):
    """A connection to the state (created unless `create=False`): a SQLite file or a
    PostgreSQL database (store_sql). One per thread or process; cheap to open. `worker` names
    the sketch and counter partials this connection writes (serve: its client id); readers
    merge every worker's partial."""

    def __init__(self, url: str, timeout: float = 60.0, create: bool = True, worker: str = "",
                 dedupe_key: str = None):
        import os
        self.worker = worker
        self._dedupe_root = None
        self.dedupe_key_file = dedupe_key or os.environ.get(dedupe.KEY_ENV) or None
        if not is_postgres(url):
            path = store_sql.sqlite_path(url)
            if not create and not os.path.exists(path):
                raise ConfigError("state", "no state file at %s" % path)
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            if self.dedupe_key_file is None:
                self.dedupe_key_file = dedupe.default_key_file(path)
        self.conn = store_sql.connect(url, timeout)
        self.path = self.conn.where
        self.claims = claims.for_connection(self.conn)  # the dedupe keys' backend, once
        if not create and self._schema_version() is None:
            raise ConfigError("state", "no ldpfleet state in %s" % self.path)
        if self._schema_version() != SCHEMA_VERSION:  # readers never write unless it must
            store_sql.create_or_migrate(self.conn, self._schema_batch, self._schema_version,
                                        self._set_schema, lambda: self.dedupe_root)

    @property
    def db(self):
        """The connection (SQL with `?` placeholders runs on both databases)."""
        return self.conn

    @property
    def kind(self) -> str:
        return self.conn.kind

    def _schema_version(self):
        if not self.conn.has_table("meta"):
            return None
        row = self.conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        return int(row[0]) if row else None

    def _set_schema(self, version: int):
        self.conn.execute("INSERT INTO meta VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE"
                          " SET value=excluded.value", (str(version),))

    @contextmanager
    def _schema_batch(self):
        with self.batch():
            if self.kind == "postgresql":  # workers starting together create the schema once
                self.conn.execute("SELECT pg_advisory_xact_lock(7402318)")
            yield

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- transactions ------------------------------------------------------------------
    @contextmanager
    def batch(self):
        """One write transaction (BEGIN [IMMEDIATE] ... COMMIT; ROLLBACK on any exception)."""
        self.conn.ensure_alive()
        self.conn.execute(self.conn.BEGIN_WRITE)
        self.claims.begin()
        try:
            yield self
            self.conn.execute("COMMIT")
        except BaseException:
            self.claims.rolled_back()
            try:
                self.conn.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 (a dead connection rolled back by itself)
                pass
            raise
        self.claims.committed()

    @contextmanager
    def savepoint(self, name: str = "sp"):
        """Inside `batch()`: a nested unit of work. An exception rolls back what it wrote
        (dedupe claims included) and propagates; the enclosing transaction goes on."""
        mark = self.claims.mark()
        self.conn.execute("SAVEPOINT %s" % name)
        try:
            yield self
        except BaseException:
            self.conn.execute("ROLLBACK TO SAVEPOINT %s" % name)
            self.claims.rollback_to(mark)
            self.conn.execute("RELEASE SAVEPOINT %s" % name)
            raise
        self.conn.execute("RELEASE SAVEPOINT %s" % name)

    def data_version(self):
        """Changes whenever another connection changed the campaigns."""
        return self.conn.campaigns_version()

    # --- campaigns ---------------------------------------------------------------------
    _CAMPAIGN_COLS = ("name, campaign_id, config_body, config_payload, signing_key_ref, state, "
                      "phase, phase2_body, phase2_payload, created_at, closed_at")

    def _campaign(self, row) -> Campaign:
        return Campaign(name=row[0], campaign_id=row[1], config=json.loads(row[2]),
                        config_payload=bytes(row[3]), signing_key_ref=row[4], state=row[5],
                        phase=row[6], phase2=json.loads(row[7]) if row[7] else None,
                        phase2_payload=bytes(row[8]) if row[8] is not None else None,
                        created_at=row[9], closed_at=row[10], protocol=self.protocol(row[0]))

    def campaigns(self) -> list:
        rows = self.conn.execute("SELECT %s FROM campaigns ORDER BY created_at, name"
                               % self._CAMPAIGN_COLS).fetchall()
        return [self._campaign(r) for r in rows]

    def campaign(self, name: str) -> Campaign:
        row = self.conn.execute("SELECT %s FROM campaigns WHERE name=?" % self._CAMPAIGN_COLS,
                              (name,)).fetchone()
        return self._campaign(row) if row else None

    # --- two-phase protocol state ------------------------------------------------------
    def protocol(self, name: str):
        """The protocol document of a campaign (None: a plain mechanism campaign)."""
        row = self.conn.execute("SELECT body FROM protocols WHERE campaign=?", (name,)).fetchone()
        return json.loads(row[0]) if row else None

    def _put_protocol(self, name: str, doc: dict):
        """Inside `batch()`."""
        self.conn.execute("INSERT INTO protocols VALUES (?, ?) ON CONFLICT (campaign) DO UPDATE"
                        " SET body=excluded.body", (name, cfgmod.canonical(doc)))

    def require_campaign(self, name: str) -> Campaign:
        camp = self.campaign(name)
        if camp is None:
            raise ConfigError("campaign", "no campaign named %r in %s" % (name, self.path))
        return camp

    def add_campaign(self, config: dict, payload: bytes, signing_key_ref: str,
                     protocol: dict = None) -> Campaign:
        """Store a new campaign (with its protocol document, if any) in one transaction."""
        name = config["campaign"]
        with self.batch():
            if self.campaign(name) is not None:
                raise ConfigError("campaign", "campaign %r already exists" % name)
            clash = self.conn.execute("SELECT name FROM campaigns WHERE campaign_id=?",
                                    (config["campaign_id"],)).fetchone()
            if clash:
                raise ConfigError("campaign_id", "campaign id %d already used by %r"
                                  % (config["campaign_id"], clash[0]))
            self.conn.execute(
                "INSERT INTO campaigns (name, campaign_id, config_payload, config_body, signing_key_ref,"
                " state, phase, created_at) VALUES (?, ?, ?, ?, ?, 'open', 1, ?)",
                (name, config["campaign_id"], payload, cfgmod.canonical(config), signing_key_ref,
                 time.time()))
            if protocol is not None:
                self._put_protocol(name, protocol)
            dedupe.campaign_salt(self.conn, name)
        return self.campaign(name)

    def remove_campaign(self, name: str):
        """Undo `add_campaign` (only used when publishing the config failed)."""
        with self.batch():
            for table, col in (("campaigns", "name"), ("sketches", "campaign"),
                               ("seen", "campaign"), ("seen_log", "campaign"),
                               ("counters", "campaign"), ("protocols", "campaign"),
                               ("campaign_salts", "campaign"), ("login_devices", "campaign")):
                self.conn.execute("DELETE FROM %s WHERE %s=?" % (table, col), (name,))
            self.claims.dropped()

    def set_state(self, name: str, state: str):
        """Open or close a campaign; a close also zeroes its nonce tags (dedupe.py)."""
        with self.batch():
            self.require_campaign(name)
            self.conn.execute("UPDATE campaigns SET state=?, closed_at=? WHERE name=?",
                            (state, time.time() if state == "closed" else None, name))
            if state == "closed":
                self.claims.drop_nonce_tags(name)
                self.claims.dropped()  # the writer's index lets the campaign go

    def set_phase2(self, name: str, body: dict, payload: bytes, protocol: dict = None):
        """Move a campaign to phase 2 with its phase-2 message (and the protocol document's
        new state, e.g. LDPLCM's measured theta) in one transaction."""
        with self.batch():
            self.require_campaign(name)
            self.conn.execute("UPDATE campaigns SET phase=2, phase2_body=?, phase2_payload=? WHERE name=?",
                            (cfgmod.canonical(body), payload, name))
            if protocol is not None:
                self._put_protocol(name, protocol)

    def resign(self, name: str, config_payload: bytes, phase2_payload: bytes, signing_key_ref: str):
        """The same messages signed again with another key (after a key rotation, spec §5.3)."""
        with self.batch():
            self.require_campaign(name)
            self.conn.execute("UPDATE campaigns SET config_payload=?, phase2_payload=?, signing_key_ref=?"
                            " WHERE name=?", (config_payload, phase2_payload, signing_key_ref, name))

    def reopen_phase1(self, name: str, protocol: dict = None):
        """Undo `set_phase2` (only used when publishing the phase-2 message failed)."""
        with self.batch():
            self.require_campaign(name)
            self.conn.execute("UPDATE campaigns SET phase=1, phase2_body=NULL, phase2_payload=NULL"
                            " WHERE name=?", (name,))
            if protocol is not None:
                self._put_protocol(name, protocol)

    # --- sketches ----------------------------------------------------------------------
    def sketch_blob(self, name: str, phase: int):
        """(n, serialized sketch bytes) of every worker's partial merged, or None if no report
        was accepted yet."""
        rows = self.conn.execute("SELECT n, blob FROM sketches WHERE campaign=? AND phase=?"
                                 " ORDER BY worker", (name, phase)).fetchall()
        if not rows:
            return None
        if len(rows) == 1:
            return rows[0][0], bytes(rows[0][1])
        from ...core.mechanisms.base import Sketch
        merged = Sketch.deserialize(bytes(rows[0][1]))
        for _n, blob in rows[1:]:
            merged.merge(Sketch.deserialize(bytes(blob)))
        return merged.n, merged.serialize()

    def sketch_slots(self, name: str) -> list:
        """The slots (phases; a recurring campaign's rounds) that have a sketch, ascending."""
        rows = self.conn.execute("SELECT DISTINCT phase FROM sketches WHERE campaign=?"
                                 " ORDER BY phase", (name,)).fetchall()
        return [int(r[0]) for r in rows]

    def worker_sketch_blob(self, name: str, phase: int):
        """(n, bytes) of this connection's own partial, or None."""
        row = self.conn.execute("SELECT n, blob FROM sketches WHERE campaign=? AND phase=? AND"
                                " worker=?", (name, phase, self.worker)).fetchone()
        return (row[0], bytes(row[1])) if row else None

    def put_sketch(self, name: str, phase: int, n: int, blob: bytes):
        """This worker's partial; inside `batch()`."""
        self.conn.execute(
            "INSERT INTO sketches VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (campaign, phase, worker)"
            " DO UPDATE SET n=excluded.n, blob=excluded.blob, updated_at=excluded.updated_at",
            (name, phase, self.worker, n, blob, time.time()))

    # --- counters ----------------------------------------------------------------------
    def add_counts(self, counts: dict):
        """{(campaign, reason): increment} into this worker's counters; inside `batch()`."""
        self.conn.executemany(
            "INSERT INTO counters VALUES (?, ?, ?, ?) ON CONFLICT (campaign, reason, worker)"
            " DO UPDATE SET count = counters.count + excluded.count",
            [(c, r, self.worker, int(v)) for (c, r), v in sorted(counts.items()) if v])

    def counters(self, name: str = None) -> dict:
        """reason -> count for one campaign (GLOBAL = "" for unattributed messages), or summed
        over everything when name is None; every worker's counts summed."""
        if name is None:
            rows = self.conn.execute("SELECT reason, sum(count) FROM counters GROUP BY reason")
        else:
            rows = self.conn.execute("SELECT reason, sum(count) FROM counters WHERE campaign=?"
                                     " GROUP BY reason", (name,))
        return {r: int(c) for r, c in rows.fetchall()}

    def all_counters(self) -> dict:
        """campaign -> {reason: count}."""
        out = {}
        for c, r, n in self.conn.execute("SELECT campaign, reason, sum(count) FROM counters"
                                         " GROUP BY campaign, reason").fetchall():
            out.setdefault(c, {})[r] = int(n)
        return out

    # --- meta --------------------------------------------------------------------------
    def set_meta(self, key: str, value: str):
        self.set_metas({key: value})

    def set_metas(self, values: dict):
        """Several meta keys in one transaction."""
        with self.batch():
            for key, value in values.items():
                self.conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
                                " SET value=excluded.value", (key, value))

    def meta(self, key: str):
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None
