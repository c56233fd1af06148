"""SQLite's dedupe keys: an append-only log of claimed batches and an in-memory index of it.

PostgreSQL's workers claim dedupe keys through the unique key of `seen` (concurrent writers:
the index decides who wins). A SQLite state has one writer at a time (`BEGIN IMMEDIATE`), so it
does not need a B-tree of random 16-byte keys on disk: inserting a batch of them dirtied about
one page per key, and the commit wrote the whole index again (the ingest's largest cost, and
growing with the fleet). Instead every claim appends ONE row per (campaign, phase) and batch to
`seen_log` — the batch's keys and nonce tags (dedupe.py) as two blobs — in the same transaction as the sketch
delta and the counters, so a commit still covers dedupe keys + sketch + counters, then the
acknowledgements. Lookups go to `SeenIndex`, this process's index of the log.

The index stays exact whatever else writes the file: inside each write transaction (which holds
SQLite's write lock), before its first claim (`claims.SqliteClaims`), it reads the log's highest row id and the purge epoch; rows appended
by another process since are loaded, and a purge (which deletes rows) makes it reload. Keys
this transaction claims enter the index only after COMMIT (`Store.batch`): a rolled-back batch
leaves no trace. Memory: about 35-70 bytes per accepted (device, phase) of the open campaigns
(a hash table kept between 35 % and 70 % full; about 125 bytes for the moment it doubles,
when the old and the new table exist together, and 24 KB per (campaign, phase) at least); a closed campaign's keys are not loaded at start
(its reports are rejected before dedupe) and leave memory at the next reload (a purge).

Per (campaign, phase) the index is one open-addressing hash table in C (`_Table`): a batch's
lookup and its insertion after COMMIT are one C call each, O(1) per key whatever the fleet's
size (sorted runs merged like a binary counter, the first version, cost a quarter of serve's
time in numpy searchsorted and merges at 10^6 keys).
"""
import numpy as np

from ...core.kernels import lib, ptr

KEY = np.dtype((np.void, 16))
EPOCH_META = "seen_log_epoch"


def key_words(keys: np.ndarray):
    """(n, 16) uint8 keys (or void16) -> (hi, lo) uint64 arrays: integer sorts and binary
    searches are several times faster than numpy's on 16-byte voids."""
    words = np.ascontiguousarray(keys).view("<u8").reshape(-1, 2)
    return words[:, 0].copy(), words[:, 1].copy()


def unique_keys(keys: np.ndarray):
    """np.unique(keys, return_index, return_inverse) for (n, 16) uint8 keys, exact on all 128
    bits: (unique (m, 16) uint8, first index of each, inverse)."""
    hi, lo = key_words(keys)
    order = np.argsort(hi)  # one integer sort (a tenth of lexsort's time on both words)
    shi, slo = hi[order], lo[order]
    start = np.ones(order.size, bool)
    start[1:] = shi[1:] != shi[:-1]
    if ((~start[1:]) & (slo[1:] != slo[:-1])).any():  # a shared high word: ~2^-64 per pair
        order = np.lexsort((lo, hi))
        shi, slo = hi[order], lo[order]
        start[1:] = (shi[1:] != shi[:-1]) | (slo[1:] != slo[:-1])
    starts = np.flatnonzero(start)
    first = np.minimum.reduceat(order, starts) if order.size else order  # earliest row of each
    inverse = np.empty(order.size, np.int64)
    inverse[order] = np.cumsum(start) - 1
    return np.ascontiguousarray(keys)[first].reshape(-1, 16), first, inverse


class _Table:
    """The claimed keys of one (campaign, phase) and their nonce tags: an open-addressing hash
    table in C (`ldp_seen_find` / `ldp_seen_insert`: slots of three uint64 words, the key's two
    words and USED | 63-bit tag, linear probing; exact on all 128 bits), grown by doubling at 70 %
    load. A batch's lookup is one C call of O(1) probes per key, whatever the fleet's size."""

    __slots__ = ("slots", "size")
    MAX_LOAD = 0.7
    USED = np.uint64(1 << 63)

    def __init__(self, capacity: int = 1024):
        self.slots = np.zeros((capacity, 3), np.uint64)
        self.size = 0

    @property
    def capacity(self):
        return self.slots.shape[0]

    def _insert(self, hi, lo, tags):
        hi, lo = np.ascontiguousarray(hi, np.uint64), np.ascontiguousarray(lo, np.uint64)
        tags = np.ascontiguousarray(tags).astype(np.uint64)
        self.size += int(lib.ldp_seen_insert(ptr(self.slots), self.capacity - 1, ptr(hi),
                                             ptr(lo), ptr(tags), hi.size))

    def add(self, hi, lo, tags):
        need = self.size + hi.size
        if need > self.MAX_LOAD * self.capacity:
            cap = self.capacity
            while need > self.MAX_LOAD * cap:
                cap *= 2
            old = self.slots[(self.slots[:, 2] & self.USED) != 0]
            self.slots, self.size = np.zeros((cap, 3), np.uint64), 0
            self._insert(old[:, 0], old[:, 1], old[:, 2] & ~self.USED)
        self._insert(hi, lo, tags)

    def find(self, hi, lo, prior):
        """prior[i] = the nonce tag of key i where the table holds it (-1 stays elsewhere)."""
        if self.size == 0 or hi.size == 0:
            return
        hi, lo = np.ascontiguousarray(hi, np.uint64), np.ascontiguousarray(lo, np.uint64)
        found = np.empty(hi.size, np.int64)
        lib.ldp_seen_find(ptr(self.slots), self.capacity - 1, ptr(hi), ptr(lo), hi.size,
                          ptr(found))
        hit = found >= 0
        prior[hit] = found[hit]


class SeenIndex:
    """(campaign, phase) -> the claimed keys and their nonce tags, caught up with `seen_log`."""

    def __init__(self):
        self.tables = {}
        self.loaded_id = 0
        self.epoch = None
        self.staged = []

    # --- keeping up with the log -----------------------------------------------------------
    def sync(self, conn):
        """Load what other connections appended (or reload after a purge). Call inside the
        write transaction, before any lookup."""
        row = conn.execute("SELECT value FROM meta WHERE key=?", (EPOCH_META,)).fetchone()
        epoch = row[0] if row else "0"
        top = conn.execute("SELECT coalesce(max(id), 0) FROM seen_log").fetchone()[0]
        if epoch != self.epoch or top < self.loaded_id:
            self.tables, self.loaded_id, self.epoch = {}, 0, epoch
        if top > self.loaded_id:
            rows = conn.execute(
                "SELECT id, campaign, phase, keys, nonce_tags FROM seen_log WHERE id > ? AND campaign IN"
                " (SELECT name FROM campaigns WHERE state='open') ORDER BY id",
                (self.loaded_id,)).fetchall()
            grouped = {}
            for _id, name, phase, keys, tags in rows:
                grouped.setdefault((name, int(phase)), []).append((keys, tags))
            for where, parts in grouped.items():
                keys = np.frombuffer(b"".join(bytes(k) for k, _t in parts), np.uint8)
                tags = np.frombuffer(b"".join(bytes(t) for _k, t in parts), "<u8").astype(np.uint64)
                self._add(where, *key_words(keys), tags)
            self.loaded_id = top

    def _add(self, where, hi, lo, tags):
        table = self.tables.get(where)
        if table is None:
            table = self.tables[where] = _Table()
        table.add(hi, lo, tags)

    # --- one transaction -------------------------------------------------------------------
    def lookup(self, name: str, phase: int, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """The stored nonce tag of each key (int64), -1 where the key is not claimed yet."""
        prior = np.full(hi.size, -1, np.int64)
        table = self.tables.get((name, phase))
        if table is not None:
            table.find(hi, lo, prior)
        return prior

    def claim(self, conn, name: str, phase: int, keys: np.ndarray, tags: np.ndarray):
        """Inside the write transaction (after `sync`): claim the distinct `keys` ((n, 16)
        uint8) not claimed yet with their nonce `tags` (< 2^63), appending one `seen_log` row.
        Returns (claimed bool array, prior tags with -1 for the claimed)."""
        keys = np.ascontiguousarray(keys, np.uint8).reshape(-1, 16)
        tags = np.ascontiguousarray(tags).astype(np.uint64)
        hi, lo = key_words(keys)
        prior = self.lookup(name, phase, hi, lo)
        new = prior < 0
        if new.any():
            cur = conn.execute("INSERT INTO seen_log (campaign, phase, n, keys, nonce_tags)"
                               " VALUES (?, ?, ?, ?, ?)", (name, phase, int(new.sum()),
                                                           keys[new].tobytes(),
                                                           tags[new].astype("<u8").tobytes()))
            self.staged.append(((name, phase), hi[new], lo[new], tags[new], cur.lastrowid))
        return new, prior

    def mark(self) -> int:
        return len(self.staged)

    def rollback_to(self, mark: int):
        """A savepoint rolled back: forget what was claimed since `mark`."""
        del self.staged[mark:]

    def committed(self):
        """The transaction committed: its claims enter the index (in log order)."""
        for where, hi, lo, tags, rowid in self.staged:
            self._add(where, hi, lo, tags)
            self.loaded_id = max(self.loaded_id, int(rowid))
        self.staged = []

    def rolled_back(self):
        self.staged = []


def bump_epoch(conn):
    """After deleting `seen_log` rows (purge, a removed campaign): every index reloads."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (EPOCH_META,)).fetchone()
    conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                 (EPOCH_META, str(int(row[0]) + 1 if row else 1)))


def count(conn, name: str, phase: int = None) -> int:
    if phase is None:
        q = conn.execute("SELECT coalesce(sum(n), 0) FROM seen_log WHERE campaign=?", (name,))
    else:
        q = conn.execute("SELECT coalesce(sum(n), 0) FROM seen_log WHERE campaign=? AND phase=?",
                         (name, phase))
    return int(q.fetchone()[0])


def stored_tags(conn, name: str, phase: int, keys: list) -> dict:
    """{key: nonce tag} of the given keys (bytes) found in the log: the wanted keys go into a C
    hash table (their position as its value) and the log's keys are probed against it, one C
    call per log row (a scan: for coverage, tools and tests; the ingest uses `SeenIndex`)."""
    if not keys:
        return {}
    hi, lo = key_words(np.frombuffer(b"".join(keys), np.uint8).reshape(-1, 16))
    wanted = _Table()
    wanted.add(hi, lo, np.arange(len(keys), dtype=np.uint64))
    out = {}
    for blob, tags in conn.execute("SELECT keys, nonce_tags FROM seen_log WHERE campaign=? AND"
                                   " phase=?", (name, phase)).fetchall():
        stored = np.frombuffer(bytes(blob), np.uint8).reshape(-1, 16)
        nonce_tags = np.frombuffer(bytes(tags), "<u8")
        where = np.full(stored.shape[0], -1, np.int64)
        wanted.find(*key_words(stored), where)
        for j in np.flatnonzero(where >= 0).tolist():
            out[keys[int(where[j])]] = int(nonce_tags[j])
    return out


def devices_per_campaign(conn) -> dict:
    """campaign -> distinct devices that have a claimed report in any phase."""
    parts = {}
    for name, blob in conn.execute("SELECT campaign, keys FROM seen_log").fetchall():
        parts.setdefault(name, []).append(bytes(blob))
    return {name: int(np.unique(np.frombuffer(b"".join(p), KEY)).size)
            for name, p in parts.items()}


def from_seen(conn, _root=None):
    """Migration 4 -> 5 (SQLite): the rows of `seen` into `seen_log`, one row per (campaign,
    phase); `seen` is emptied (its keys zeroed on disk)."""
    if conn.kind != "sqlite":
        return
    pairs = conn.execute("SELECT DISTINCT campaign, phase FROM seen").fetchall()
    for name, phase in pairs:
        rows = conn.execute("SELECT device, seq FROM seen WHERE campaign=? AND phase=?",
                            (name, phase)).fetchall()
        keys = b"".join(bytes(r[0]) for r in rows)
        seqs = np.asarray([r[1] for r in rows], np.int64).astype("<u4").tobytes()
        conn.execute("INSERT INTO seen_log (campaign, phase, n, keys, seqs) VALUES (?, ?, ?, ?, ?)",
                     (name, phase, len(rows), keys, seqs))
    conn.zero_deleted(True)
    try:
        conn.execute("DELETE FROM seen")
    finally:
        conn.zero_deleted(False)
