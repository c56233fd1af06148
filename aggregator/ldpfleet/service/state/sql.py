"""The two databases the aggregator's state lives in, behind one small connection interface.

- SQLite (the embedded default): one file in WAL mode, `synchronous=FULL`, one writer
  (`BEGIN IMMEDIATE`); `sqlite:///relative/path`, `sqlite:////absolute/path` or a bare path.
- PostgreSQL (`postgresql://USER@HOST[:PORT]/DB`, psycopg 3, the `postgres` extra): several
  `serve` workers on one or many machines write the same database; `synchronous_commit` (on by
  default) makes a commit durable before the broker is acknowledged.

Both run the same SQL (`?` placeholders; PostgreSQL gets `%s`) over the same schema; the few
differences live here: column types, how a write transaction starts, how a reader notices that
campaigns changed. How a batch's dedupe keys are claimed differs too (claims.py: PostgreSQL
into `seen`, SQLite into `seen_log`).

Schema versions (`meta.schema`) and their migrations (`migrate`), applied in one transaction:
2 -> 3: sketches and counters get a `worker` column (a per-(campaign, phase, worker) partial, so
workers never contend on one row; readers merge the partials: sketches are linear).
3 -> 4: `seen` keeps a keyed hash of each device id instead of the id (`dedupe.DeviceKeys`, the
key in `meta.dedupe_key`); `purges` records when a closed campaign's dedupe keys were dropped.
4 -> 5: `seen_log`, SQLite's dedupe keys as an append-only log of claimed batches
(`seen_log.py`; PostgreSQL keeps claiming through `seen`'s unique key). A SQLite state's `seen`
rows move into the log.
5 -> 6: dedupe keys per campaign under a root key kept outside the database (dedupe.py):
`campaign_salts`, every stored device hash hashed again under its campaign's key, nonces
replaced by keyed tags (`seen.nonce_tag`, `seen_log.nonce_tags`: 8 bytes each) or zeroed for
closed campaigns, `meta.dedupe_key` gone (`dedupe.rekey_v6`; it needs the key file);
`login_devices`, the device ids each load-generator login brought into a campaign phase
(login_bound.py).
6 -> 7: `counter_history`, each campaign's counter totals at most once a minute (history.py).
"""
import sqlite3

from ...core.errors import ConfigError, StateError
from . import dedupe, seen_log

SCHEMA_VERSION = 7
OLDEST_MIGRATED = 2
"""The oldest schema `create_or_migrate` migrates from."""

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns (
    name TEXT PRIMARY KEY,
    campaign_id BIGINT NOT NULL UNIQUE,
    config_payload {blob} NOT NULL,
    config_body TEXT NOT NULL,
    signing_key_ref TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'closed')),
    phase INTEGER NOT NULL,
    phase2_payload {blob},
    phase2_body TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    closed_at DOUBLE PRECISION
);
CREATE TABLE IF NOT EXISTS sketches (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, worker TEXT NOT NULL, n BIGINT NOT NULL,
    blob {blob} NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (campaign, phase, worker)
);
CREATE TABLE IF NOT EXISTS seen (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, device {blob} NOT NULL,
    nonce_tag BIGINT NOT NULL, PRIMARY KEY (campaign, phase, device)
){without_rowid};
CREATE TABLE IF NOT EXISTS seen_log (
    id {autoid}, campaign TEXT NOT NULL, phase INTEGER NOT NULL, n BIGINT NOT NULL,
    keys {blob} NOT NULL, nonce_tags {blob} NOT NULL
);
CREATE TABLE IF NOT EXISTS campaign_salts (
    campaign TEXT PRIMARY KEY, salt {blob} NOT NULL, legacy_key {blob}
);
CREATE TABLE IF NOT EXISTS login_devices (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, login TEXT NOT NULL, worker TEXT NOT NULL,
    devices BIGINT NOT NULL, PRIMARY KEY (campaign, phase, login, worker)
);
CREATE TABLE IF NOT EXISTS purges (
    campaign TEXT PRIMARY KEY, purged_at DOUBLE PRECISION NOT NULL, keys BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS protocols (campaign TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (
    campaign TEXT NOT NULL, reason TEXT NOT NULL, worker TEXT NOT NULL, count BIGINT NOT NULL,
    PRIMARY KEY (campaign, reason, worker)
){without_rowid};
{counter_history}
"""

_COUNTER_HISTORY = """
CREATE TABLE IF NOT EXISTS counter_history (
    campaign TEXT NOT NULL, minute BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL,
    received BIGINT NOT NULL, accepted BIGINT NOT NULL, duplicates BIGINT NOT NULL,
    rejected BIGINT NOT NULL, PRIMARY KEY (campaign, minute)
){without_rowid}"""

_MIGRATIONS = {
    # 2 -> 3: per-worker partials. Rows written before belong to worker "" (still merged in).
    2: """
ALTER TABLE sketches RENAME TO sketches_v2;
CREATE TABLE sketches (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, worker TEXT NOT NULL, n BIGINT NOT NULL,
    blob {blob} NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (campaign, phase, worker)
);
INSERT INTO sketches SELECT campaign, phase, '', n, blob, updated_at FROM sketches_v2;
DROP TABLE sketches_v2;
ALTER TABLE counters RENAME TO counters_v2;
CREATE TABLE counters (
    campaign TEXT NOT NULL, reason TEXT NOT NULL, worker TEXT NOT NULL, count BIGINT NOT NULL,
    PRIMARY KEY (campaign, reason, worker)
){without_rowid};
INSERT INTO counters SELECT campaign, reason, '', count FROM counters_v2;
DROP TABLE counters_v2;
CREATE TABLE IF NOT EXISTS protocols (campaign TEXT PRIMARY KEY, body TEXT NOT NULL)
""",
    # 3 -> 4: keyed hashes of device ids (the rows are re-keyed by `dedupe.rekey_seen`)
    3: """
ALTER TABLE seen RENAME TO seen_v3;
CREATE TABLE seen (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, device {blob} NOT NULL, seq BIGINT NOT NULL,
    PRIMARY KEY (campaign, phase, device)
){without_rowid};
CREATE TABLE IF NOT EXISTS purges (
    campaign TEXT PRIMARY KEY, purged_at DOUBLE PRECISION NOT NULL, keys BIGINT NOT NULL
)
""",
    # 4 -> 5: SQLite's dedupe log (its `seen` rows move in: `seen_log.from_seen`)
    4: """
CREATE TABLE IF NOT EXISTS seen_log (
    id {autoid}, campaign TEXT NOT NULL, phase INTEGER NOT NULL, n BIGINT NOT NULL,
    keys {blob} NOT NULL, seqs {blob} NOT NULL
)
""",
    # 5 -> 6: per-campaign dedupe keys (the rows are re-keyed by `dedupe.rekey_v6`)
    5: """
ALTER TABLE seen RENAME TO seen_v5;
CREATE TABLE seen (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, device {blob} NOT NULL,
    nonce_tag BIGINT NOT NULL, PRIMARY KEY (campaign, phase, device)
){without_rowid};
ALTER TABLE seen_log RENAME COLUMN seqs TO nonce_tags;
CREATE TABLE IF NOT EXISTS campaign_salts (
    campaign TEXT PRIMARY KEY, salt {blob} NOT NULL, legacy_key {blob}
);
CREATE TABLE IF NOT EXISTS login_devices (
    campaign TEXT NOT NULL, phase INTEGER NOT NULL, login TEXT NOT NULL, worker TEXT NOT NULL,
    devices BIGINT NOT NULL, PRIMARY KEY (campaign, phase, login, worker)
)
""",
    # 6 -> 7: counters over time (history.py)
    6: "{counter_history}",
}
AFTER_MIGRATION = {3: dedupe.rekey_seen, 4: seen_log.from_seen, 5: dedupe.rekey_v6}
"""version -> callable(conn, root) run after that version's SQL (data that SQL alone cannot
move); `root()` gives the state's `dedupe.DedupeKeys` (it reads the key file)."""


def _ddl(text: str, **types) -> str:
    """Schema text with the tables it names ({counter_history}) and the database's types."""
    return text.replace("{counter_history}", _COUNTER_HISTORY).format(**types)


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def sqlite_path(url: str) -> str:
    """Filesystem path of a `sqlite:///...` URL (or of a bare path)."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
    elif "://" in url:
        raise ConfigError("state", "state URLs are sqlite:///PATH, a path, or "
                          "postgresql://USER@HOST/DB; got %r" % redact(url))
    else:
        path = url
    if not path:
        raise ConfigError("state", "empty state path")
    return path


def redact(url: str) -> str:
    """The URL without a password (for logs and errors)."""
    if "://" not in url or "@" not in url.split("://", 1)[1].split("/", 1)[0]:
        return url
    scheme, rest = url.split("://", 1)
    auth, host = rest.split("@", 1)
    return "%s://%s@%s" % (scheme, auth.split(":", 1)[0] + (":***" if ":" in auth else ""), host)


def database_errors() -> tuple:
    """Exception classes of the state databases: the environment (cli: exit 4; HTTP 503),
    except those of `database_bug_errors`."""
    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def database_bug_errors() -> tuple:
    """The drivers' errors that say our SQL or our use of a connection is wrong (a closed
    connection, wrong bindings): bugs, reported as internal errors with their traceback."""
    kinds = (sqlite3.ProgrammingError, sqlite3.InterfaceError)
    try:
        import psycopg
    except ImportError:
        return kinds
    return kinds + (psycopg.ProgrammingError, psycopg.InterfaceError)


NOT_A_STATE_FILE = ("file is not a database", "unable to open database file")
"""SQLite's messages for a `--state` path that names no database (junk, a directory): bad input
(ConfigError, exit 2), unlike a locked or failing disk."""


class SQLiteConnection:
    """One SQLite connection (autocommit; transactions are explicit)."""

    kind = "sqlite"
    BEGIN_WRITE = "BEGIN IMMEDIATE"

    def __init__(self, path: str, timeout: float):
        self.where = path
        try:
            self.db = sqlite3.connect(path, timeout=timeout, isolation_level=None,
                                      check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as exc:
            if str(exc) not in NOT_A_STATE_FILE:
                raise  # locked, disk I/O ...: the environment (exit 4), not the input
            raise ConfigError("state file", "%s: %s" % (path, exc)) from None
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA cache_size=-65536")  # 64 MiB: dedupe keys are random B-tree keys
        self.db.execute("PRAGMA busy_timeout=%d" % int(timeout * 1000))

    def ddl(self, text: str):
        return _ddl(text, blob="BLOB", without_rowid=" WITHOUT ROWID",
                    autoid="INTEGER PRIMARY KEY")

    def execute(self, sql, params=()):
        return self.db.execute(sql, params)

    def executemany(self, sql, rows):
        self.db.executemany(sql, rows)

    def has_table(self, name: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                               (name,)).fetchone() is not None

    def campaigns_version(self):
        """Changes whenever ANOTHER connection commits (PRAGMA data_version)."""
        return self.db.execute("PRAGMA data_version").fetchone()[0]

    def zero_deleted(self, on: bool):
        """Overwrite deleted content (PRAGMA secure_delete) while purging or migrating dedupe
        keys; off otherwise (with random keys every page split would zero the moved cells)."""
        self.db.execute("PRAGMA secure_delete=%s" % ("ON" if on else "OFF"))

    def ensure_alive(self):
        pass

    def close(self):
        self.db.close()


class PostgresConnection:
    """One psycopg 3 connection (autocommit; transactions are explicit), re-opened by
    `ensure_alive` after the server or the network dropped it."""

    kind = "postgresql"
    BEGIN_WRITE = "BEGIN"

    def __init__(self, url: str, timeout: float):
        try:
            import psycopg
        except ImportError:
            raise ConfigError("state", "PostgreSQL state needs psycopg 3: pip install "
                              "'ldpfleet[postgres]'") from None
        self._psycopg = psycopg
        self.url, self.timeout = url, timeout
        self.where = redact(url)
        self.db = None
        self._open()

    def _open(self):
        try:
            self.db = self._psycopg.connect(self.url, autocommit=True,
                                            connect_timeout=max(1, int(self.timeout)))
        except self._psycopg.OperationalError as exc:
            raise StateError("state", "cannot connect to PostgreSQL at %s: %s"
                              % (self.where, str(exc).strip().splitlines()[0])) from None

    def ddl(self, text: str):
        return _ddl(text, blob="BYTEA", without_rowid="", autoid="BIGSERIAL PRIMARY KEY")

    def execute(self, sql, params=()):
        return self.db.execute(sql.replace("?", "%s"), params)

    def executemany(self, sql, rows):
        with self.db.cursor() as cur:
            cur.executemany(sql.replace("?", "%s"), rows)

    def has_table(self, name: str) -> bool:
        return self.db.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]

    def campaigns_version(self):
        """A digest of every campaign row's mutable parts (cheap: campaigns are few)."""
        return self.db.execute(
            "SELECT count(*), md5(string_agg(name || state || phase::text || md5(config_payload)"
            " || coalesce(md5(phase2_payload), ''), ',' ORDER BY name)) FROM campaigns").fetchone()

    def zero_deleted(self, on: bool):
        """Nothing to switch: PostgreSQL keeps deleted rows until VACUUM (autovacuum) reclaims
        them, as for every other table."""

    def ensure_alive(self):
        if self.db is None or self.db.closed or self.db.broken:
            try:
                if self.db is not None:
                    self.db.close()
            finally:
                self._open()

    def close(self):
        self.db.close()


def connect(url: str, timeout: float):
    if is_postgres(url):
        return PostgresConnection(url, timeout)
    return SQLiteConnection(sqlite_path(url), timeout)


def newer_schema_message(where: str, version: int) -> str:
    """Why a state written by a newer ldpfleet is refused (nothing in it was changed)."""
    from ... import __version__
    return ("state %s has schema %d, newer than this ldpfleet %s reads (schema %d): a newer "
            "ldpfleet wrote it. Nothing was changed. Run that newer version, or restore the "
            "backup taken before the upgrade to go back to this one (docs/upgrade.md)"
            % (where, version, __version__, SCHEMA_VERSION))


def create_or_migrate(conn, begin, schema_version, set_version, root):
    """Create the tables of a new state, or migrate an older schema, inside `begin()` (one
    transaction). Refuses a schema newer than this code (an older ldpfleet never writes a
    state it does not understand) or older than OLDEST_MIGRATED. `root()`: the state's
    `dedupe.DedupeKeys` (only a migration that re-keys calls it)."""
    with begin():
        version = schema_version()
        if version is None:
            for stmt in conn.ddl(_TABLES).split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            set_version(SCHEMA_VERSION)
            return
        if version > SCHEMA_VERSION:
            raise ConfigError("state", newer_schema_message(conn.where, version))
        if version < OLDEST_MIGRATED:
            raise ConfigError("state", "state %s has schema %d, older than this ldpfleet "
                              "migrates from (%d)" % (conn.where, version, OLDEST_MIGRATED))
        while version < SCHEMA_VERSION:
            if version == 2 and not conn.has_table("protocols"):
                conn.execute("CREATE TABLE protocols (campaign TEXT PRIMARY KEY, body TEXT NOT NULL)")
            for stmt in conn.ddl(_MIGRATIONS[version]).split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            if version in AFTER_MIGRATION:
                AFTER_MIGRATION[version](conn, root)
            version += 1
            set_version(version)
