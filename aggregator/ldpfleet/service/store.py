"""The aggregator's state: one SQLite file in WAL mode.

Tables
- `campaigns`: name, campaign_id, the signed config payload as published and its body,
  the signing-key reference (path of the private key file, never the key), state `open`/`closed`,
  current phase, the signed phase-2 payload if any.
- `sketches`: serialized sketch (`Sketch.serialize()`) and its report count per campaign+phase.
- `seen`: dedupe keys, one row per (campaign, phase, device id) holding the seq accepted from
  that device (devices send one report per phase, spec §6).
- `counters`: (campaign, reason) -> count. Reasons of messages that name no known campaign are
  kept under campaign "" so attacker-chosen names cannot grow the table.
- `meta`: schema version and the ingest process's readiness (pid, time).
- `protocols`: the service-side state of a two-phase protocol campaign (LDPMiner's k and
  k_max, LDPLCM's theta, ...: what the aggregator needs but devices never see), one JSON
  document per campaign. Created on first use in state files made before it existed.

The ingest writes a whole batch (sketches + dedupe keys + counters) in ONE transaction
(`batch()`); readers (CLI `status`, `estimate`) see the last committed batch and never block
the writer (WAL). `synchronous=FULL` makes a commit durable before the broker is acked.

URLs: `sqlite:///relative/path`, `sqlite:////absolute/path` (SQLAlchemy's convention) or a
bare filesystem path.
"""
import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import config as cfgmod
from .. import protocol
from ..errors import ConfigError

SCHEMA_VERSION = 2
"""2: protocol v2 (Ed25519-signed configs; `signing_key_ref` is the signing key's path). A schema-1
state holds HMAC-signed campaigns that v2 devices refuse: it is refused, not migrated."""
PROTOCOLS_TABLE = ("CREATE TABLE IF NOT EXISTS protocols (campaign TEXT PRIMARY KEY,"
                   " body TEXT NOT NULL)")
GLOBAL = ""
"""Counter key of messages that belong to no known campaign (bad topic, unknown campaign)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns (
    name TEXT PRIMARY KEY,
    campaign_id INTEGER NOT NULL UNIQUE,
    config_payload BLOB NOT NULL,
    config_body TEXT NOT NULL,
    signing_key_ref TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'closed')),
    phase INTEGER NOT NULL,
    phase2_payload BLOB,
    phase2_body TEXT,
    created_at REAL NOT NULL,
    closed_at REAL
);
CREATE TABLE IF NOT EXISTS sketches (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, n INTEGER NOT NULL, blob BLOB NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (campaign, phase)
);
CREATE TABLE IF NOT EXISTS seen (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, device TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (campaign, phase, device)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS protocols (campaign TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (
    campaign TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (campaign, reason)
) WITHOUT ROWID;
"""


def state_path(url: str) -> str:
    """Filesystem path of a `sqlite:///...` URL (or of a bare path)."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
    elif "://" in url:
        raise ConfigError("state", "only sqlite:/// state URLs are supported, got %r" % url)
    else:
        path = url
    if not path:
        raise ConfigError("state", "empty state path")
    return path


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
        from ..protocols.ldplcm import sample_rate_ppm
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
        if phase != 2:
            return {}
        extras = cfgmod.phase2_inputs(name, self.phase2)
        if "candidates" in cfgmod.phase2_parameters(name) and "candidates" not in extras:
            raise ConfigError("candidates", "campaign %s: phase 2 (%s) has no candidates before "
                              "its phase-2 message" % (self.name, name))
        return extras

    @property
    def header_rule(self):
        """What a report header must say for this campaign (spec §3); the sizes of phases
        not open yet are never compared (their reports are `phase_not_open` first)."""
        phases = self.config["phases"]
        return protocol.HeaderRule(
            self.campaign_id, tuple(protocol.MECHANISM_IDS[ph["mechanism"]] for ph in phases),
            tuple(self.mechanism(p).report_size if p <= self.phase else 0
                  for p in range(1, len(phases) + 1)),
            open_phase=self.phase)

    def mechanism(self, phase: int):
        """The Mechanism of one phase (cached per row object)."""
        if phase not in self._mechanisms:
            self._mechanisms[phase] = cfgmod.mechanism_for_phase(self.config, phase,
                                                                 **self.phase_extras(phase))
        return self._mechanisms[phase]


class Store:
    """A connection to the state file (created unless `create=False`). One per thread or
    process; cheap to open."""

    def __init__(self, url: str, timeout: float = 60.0, create: bool = True):
        self.path = state_path(url)
        if not create and not os.path.exists(self.path):
            raise ConfigError("state", "no state file at %s" % self.path)
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                  check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA busy_timeout=%d" % int(timeout * 1000))
        if self._schema_version() is None:  # new file: create (readers never take this path)
            with self.batch():
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                if self._schema_version() is None:
                    self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        if self._schema_version() != SCHEMA_VERSION:
            raise ConfigError("state", "state file %s has schema %s, this ldpfleet reads %d"
                              % (self.path, self._schema_version(), SCHEMA_VERSION))

    def _schema_version(self):
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.OperationalError:  # no meta table yet
            return None
        return int(row[0]) if row else None

    def close(self):
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- transactions ------------------------------------------------------------------
    @contextmanager
    def batch(self):
        """One write transaction (BEGIN IMMEDIATE ... COMMIT; ROLLBACK on any exception)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def data_version(self) -> int:
        """Changes whenever ANOTHER connection commits (PRAGMA data_version)."""
        return self.db.execute("PRAGMA data_version").fetchone()[0]

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
        rows = self.db.execute("SELECT %s FROM campaigns ORDER BY created_at, name"
                               % self._CAMPAIGN_COLS).fetchall()
        return [self._campaign(r) for r in rows]

    def campaign(self, name: str) -> Campaign:
        row = self.db.execute("SELECT %s FROM campaigns WHERE name=?" % self._CAMPAIGN_COLS,
                              (name,)).fetchone()
        return self._campaign(row) if row else None

    # --- two-phase protocol state ------------------------------------------------------
    def protocol(self, name: str):
        """The protocol document of a campaign (None: a plain mechanism campaign)."""
        try:
            row = self.db.execute("SELECT body FROM protocols WHERE campaign=?", (name,)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # a state file from before the table existed
                return None
            raise
        return json.loads(row[0]) if row else None

    def _put_protocol(self, name: str, doc: dict):
        """Inside `batch()`."""
        self.db.execute(PROTOCOLS_TABLE)
        self.db.execute("INSERT INTO protocols VALUES (?, ?) ON CONFLICT (campaign) DO UPDATE"
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
            clash = self.db.execute("SELECT name FROM campaigns WHERE campaign_id=?",
                                    (config["campaign_id"],)).fetchone()
            if clash:
                raise ConfigError("campaign_id", "campaign id %d already used by %r"
                                  % (config["campaign_id"], clash[0]))
            self.db.execute(
                "INSERT INTO campaigns (name, campaign_id, config_payload, config_body, signing_key_ref,"
                " state, phase, created_at) VALUES (?, ?, ?, ?, ?, 'open', 1, ?)",
                (name, config["campaign_id"], payload, cfgmod.canonical(config), signing_key_ref,
                 time.time()))
            if protocol is not None:
                self._put_protocol(name, protocol)
        return self.campaign(name)

    def remove_campaign(self, name: str):
        """Undo `add_campaign` (only used when publishing the config failed)."""
        with self.batch():
            self.db.execute(PROTOCOLS_TABLE)
            for table, col in (("campaigns", "name"), ("sketches", "campaign"),
                               ("seen", "campaign"), ("counters", "campaign"),
                               ("protocols", "campaign")):
                self.db.execute("DELETE FROM %s WHERE %s=?" % (table, col), (name,))

    def set_state(self, name: str, state: str):
        with self.batch():
            self.require_campaign(name)
            self.db.execute("UPDATE campaigns SET state=?, closed_at=? WHERE name=?",
                            (state, time.time() if state == "closed" else None, name))

    def set_phase2(self, name: str, body: dict, payload: bytes, protocol: dict = None):
        """Move a campaign to phase 2 with its phase-2 message (and the protocol document's
        new state, e.g. LDPLCM's measured theta) in one transaction."""
        with self.batch():
            self.require_campaign(name)
            self.db.execute("UPDATE campaigns SET phase=2, phase2_body=?, phase2_payload=? WHERE name=?",
                            (cfgmod.canonical(body), payload, name))
            if protocol is not None:
                self._put_protocol(name, protocol)

    def resign(self, name: str, config_payload: bytes, phase2_payload: bytes, signing_key_ref: str):
        """The same messages signed again with another key (after a key rotation, spec §5.3)."""
        with self.batch():
            self.require_campaign(name)
            self.db.execute("UPDATE campaigns SET config_payload=?, phase2_payload=?, signing_key_ref=?"
                            " WHERE name=?", (config_payload, phase2_payload, signing_key_ref, name))

    def reopen_phase1(self, name: str, protocol: dict = None):
        """Undo `set_phase2` (only used when publishing the phase-2 message failed)."""
        with self.batch():
            self.require_campaign(name)
            self.db.execute("UPDATE campaigns SET phase=1, phase2_body=NULL, phase2_payload=NULL"
                            " WHERE name=?", (name,))
            if protocol is not None:
                self._put_protocol(name, protocol)

    # --- sketches ----------------------------------------------------------------------
    def sketch_blob(self, name: str, phase: int):
        """(n, serialized sketch bytes) or None if no report was accepted yet."""
        row = self.db.execute("SELECT n, blob FROM sketches WHERE campaign=? AND phase=?",
                              (name, phase)).fetchone()
        return (row[0], bytes(row[1])) if row else None

    def put_sketch(self, name: str, phase: int, n: int, blob: bytes):
        """Inside `batch()`."""
        self.db.execute(
            "INSERT INTO sketches VALUES (?, ?, ?, ?, ?) ON CONFLICT (campaign, phase) DO UPDATE"
            " SET n=excluded.n, blob=excluded.blob, updated_at=excluded.updated_at",
            (name, phase, n, blob, time.time()))

    # --- dedupe keys -------------------------------------------------------------------
    def seen_seqs(self, name: str, phase: int, devices) -> dict:
        """device -> seq already accepted, for the given devices."""
        out = {}
        devices = list(devices)
        for start in range(0, len(devices), 500):
            chunk = devices[start:start + 500]
            rows = self.db.execute(
                "SELECT device, seq FROM seen WHERE campaign=? AND phase=? AND device IN (%s)"
                % ",".join("?" * len(chunk)), [name, phase] + chunk)
            out.update(rows)
        return out

    def add_seen(self, rows):
        """rows of (campaign, phase, device, seq); inside `batch()`."""
        self.db.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)", rows)

    def seen_count(self, name: str, phase: int = None) -> int:
        if phase is None:
            q = self.db.execute("SELECT count(*) FROM seen WHERE campaign=?", (name,))
        else:
            q = self.db.execute("SELECT count(*) FROM seen WHERE campaign=? AND phase=?", (name, phase))
        return q.fetchone()[0]

    # --- counters ----------------------------------------------------------------------
    def add_counts(self, counts: dict):
        """{(campaign, reason): increment}; inside `batch()`."""
        self.db.executemany(
            "INSERT INTO counters VALUES (?, ?, ?) ON CONFLICT (campaign, reason) DO UPDATE"
            " SET count = count + excluded.count",
            [(c, r, int(v)) for (c, r), v in counts.items() if v])

    def counters(self, name: str = None) -> dict:
        """reason -> count for one campaign (GLOBAL = "" for unattributed messages), or summed
        over everything when name is None."""
        if name is None:
            rows = self.db.execute("SELECT reason, sum(count) FROM counters GROUP BY reason")
        else:
            rows = self.db.execute("SELECT reason, count FROM counters WHERE campaign=?", (name,))
        return {r: int(c) for r, c in rows}

    def all_counters(self) -> dict:
        """campaign -> {reason: count}."""
        out = {}
        for c, r, n in self.db.execute("SELECT campaign, reason, count FROM counters"):
            out.setdefault(c, {})[r] = int(n)
        return out

    # --- meta --------------------------------------------------------------------------
    def set_meta(self, key: str, value: str):
        self.set_metas({key: value})

    def set_metas(self, values: dict):
        """Several meta keys in one transaction."""
        with self.batch():
            for key, value in values.items():
                self.db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
                                " SET value=excluded.value", (key, value))

    def meta(self, key: str):
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None
