"""The claimed dedupe keys of a state, behind one interface (`ClaimedKeys`) with one
implementation per database, chosen once when the `Store` opens (`for_connection`).

A claimed key is one (campaign, phase, device key) with the tag of the nonce accepted from that
device (dedupe.py makes both; spec §6: one report per device and phase).
- `SqliteClaims`: one writer at a time (`BEGIN IMMEDIATE`), so keys go to an append-only log
  (`seen_log`, one row of blobs per claimed batch) and lookups to this process's in-memory
  index of it (seen_log.py).
- `PostgresClaims`: several workers claim concurrently through `seen`'s unique key
  (INSERT ... ON CONFLICT DO NOTHING: the index decides who wins).

A transaction's claims follow it: `begin` at BEGIN, `committed` / `rolled_back` after
COMMIT / ROLLBACK, and `mark` / `rollback_to` around a savepoint (`Store.savepoint`).
"""
import numpy as np

from . import dedupe, seen_log


class ClaimedKeys:
    """What the store needs of its dedupe keys. Keys are (n, 16) uint8 arrays of distinct
    device keys (or lists of 16-byte `bytes`), tags int64 nonce tags < 2^63."""

    def __init__(self, conn):
        self.conn = conn

    # --- one write transaction ------------------------------------------------------------
    def begin(self):
        """A write transaction began (nothing is read yet)."""

    def lookup(self, name: str, phase: int, keys: np.ndarray) -> np.ndarray:
        """Inside the transaction: True where a key already has a claimed report."""
        raise NotImplementedError

    def claim(self, name: str, phase: int, keys: np.ndarray, tags: np.ndarray):
        """Inside the transaction: claim the keys not claimed yet. Returns (claimed bool array,
        prior tags int64 array, -1 where claimed)."""
        raise NotImplementedError

    def mark(self):
        """Before a savepoint: what `rollback_to` returns to."""
        return 0

    def rollback_to(self, mark):
        """The savepoint taken at `mark` rolled back."""

    def committed(self):
        """The transaction committed."""

    def rolled_back(self):
        """The transaction rolled back."""

    def dropped(self):
        """Inside a transaction that deleted or zeroed claimed keys (purge, close, removal)."""

    # --- reading ---------------------------------------------------------------------------
    def stored_tags(self, name: str, phase: int, keys: list) -> dict:
        """{key: nonce tag} of the given 16-byte keys that are claimed."""
        raise NotImplementedError

    def count(self, name: str, phase: int = None) -> int:
        """Claimed keys of a campaign (one phase, or all)."""
        raise NotImplementedError

    def devices_per_campaign(self) -> dict:
        """campaign -> distinct device keys with a claimed report in any phase."""
        raise NotImplementedError

    def drop_nonce_tags(self, name: str):
        """Zero a closed campaign's nonce tags (its reports are rejected before dedupe), the
        old content overwritten on disk."""
        self.conn.zero_deleted(True)
        try:
            self._zero_tags(name)
        finally:
            self.conn.zero_deleted(False)

    def _zero_tags(self, name: str):
        raise NotImplementedError


class SqliteClaims(ClaimedKeys):
    """`seen_log` and its index (seen_log.SeenIndex), caught up with the file ONCE per
    transaction, before its first lookup or claim (later, the connection would see its own
    uncommitted rows)."""

    def __init__(self, conn):
        super().__init__(conn)
        self.index = seen_log.SeenIndex()
        self._synced = False

    def _sync(self):
        if not self._synced:
            self.index.sync(self.conn)
            self._synced = True

    def begin(self):
        self._synced = False

    def lookup(self, name, phase, keys):
        self._sync()
        keys = np.ascontiguousarray(keys, np.uint8).reshape(-1, 16)
        return self.index.lookup(name, phase, *seen_log.key_words(keys)) >= 0

    def claim(self, name, phase, keys, tags):
        self._sync()
        return self.index.claim(self.conn, name, phase, keys, tags)

    def mark(self):
        return self.index.mark()

    def rollback_to(self, mark):
        self.index.rollback_to(mark)

    def committed(self):
        self.index.committed()

    def rolled_back(self):
        self.index.rolled_back()

    def dropped(self):
        seen_log.bump_epoch(self.conn)

    def stored_tags(self, name, phase, keys):
        return seen_log.stored_tags(self.conn, name, phase, keys)

    def count(self, name, phase=None):
        return seen_log.count(self.conn, name, phase)

    def devices_per_campaign(self):
        return seen_log.devices_per_campaign(self.conn)

    def _zero_tags(self, name):
        self.conn.execute("UPDATE seen_log SET nonce_tags = zeroblob(length(nonce_tags))"
                          " WHERE campaign=?", (name,))


class PostgresClaims(ClaimedKeys):
    """`seen`'s primary key (campaign, phase, device): a key another worker inserted
    meanwhile (committed, or committing: PostgreSQL waits for it) is not claimed, and the caller
    counts that report as a duplicate or second report."""

    def dropped(self):
        seen_log.bump_epoch(self.conn)  # a SQLite index of the same rows would reload

    def lookup(self, name, phase, keys):
        keys = np.ascontiguousarray(keys, np.uint8).reshape(-1, 16)
        stored = self.stored_tags(name, phase, dedupe.as_keys(keys))
        return np.fromiter((bytes(k) in stored for k in keys), bool, keys.shape[0])

    def claim(self, name, phase, keys, tags):
        keys = np.ascontiguousarray(keys, np.uint8).reshape(-1, 16)
        won = self._insert(name, phase, keys, tags)
        prior = np.full(keys.shape[0], -1, np.int64)
        lost = np.flatnonzero(~won)
        if lost.size:
            stored = self.stored_tags(name, phase, [bytes(keys[i]) for i in lost])
            for i in lost.tolist():
                prior[i] = stored.get(bytes(keys[i]), -1)
        return won, prior

    def _insert(self, name, phase, keys, tags) -> np.ndarray:
        """Insert the distinct keys with their nonce tags; True where this transaction inserted
        the key. Keys go in sorted (memcmp) order so two workers never wait on each other in a
        cycle. The keys and the tags travel as two bytea blobs split by the server
        (generate_series): psycopg's dumping of per-key arrays cost 5 us of client CPU per key,
        twice the statement. The tags are < 2^63 (`dedupe.CampaignKeys.nonce_tags`): a BIGINT
        holds them."""
        n = keys.shape[0]
        if n == 0:
            return np.zeros(0, bool)
        order = np.argsort(keys.view("S16").ravel(), kind="stable")
        blob = keys[order].tobytes()
        nonces = np.asarray(tags, np.int64)[order].astype(">i8").tobytes()
        cur = self.conn.db.execute(
            "INSERT INTO seen SELECT %s, %s, substring(%s::bytea FROM 16 * i + 1 FOR 16),"
            " ('x' || encode(substring(%s::bytea FROM 8 * i + 1 FOR 8), 'hex'))::bit(64)::bigint"
            " FROM generate_series(0, %s - 1) AS i ON CONFLICT DO NOTHING RETURNING device",
            (name, int(phase), blob, nonces, n))
        won = {bytes(r[0]) for r in cur.fetchall()}
        return np.fromiter((bytes(k) in won for k in keys), bool, n)

    def stored_tags(self, name, phase, keys):
        """One query joining a bytea[] parameter with the primary key. (An IN list of 500
        parameters took ~60 ms to plan; `device = ANY(array)` got a sequential-scan generic
        plan once psycopg prepared it: rows x array length comparisons.)"""
        if not keys:
            return {}
        return {bytes(k): seq for k, seq in self.conn.db.execute(
            "SELECT s.device, s.nonce_tag FROM unnest(%s::bytea[]) AS d(device) JOIN seen s"
            " ON s.campaign = %s AND s.phase = %s AND s.device = d.device",
            (keys, name, phase)).fetchall()}

    def count(self, name, phase=None):
        if phase is None:
            q = self.conn.execute("SELECT count(*) FROM seen WHERE campaign=?", (name,))
        else:
            q = self.conn.execute("SELECT count(*) FROM seen WHERE campaign=? AND phase=?",
                                  (name, phase))
        return q.fetchone()[0]

    def devices_per_campaign(self):
        return {name: int(n) for name, n in self.conn.execute(
            "SELECT campaign, count(DISTINCT device) FROM seen GROUP BY campaign").fetchall()}

    def _zero_tags(self, name):
        self.conn.execute("UPDATE seen SET nonce_tag = 0 WHERE campaign=? AND nonce_tag <> 0",
                          (name,))


def for_connection(conn) -> ClaimedKeys:
    """The implementation for this connection's database."""
    return SqliteClaims(conn) if conn.kind == "sqlite" else PostgresClaims(conn)
