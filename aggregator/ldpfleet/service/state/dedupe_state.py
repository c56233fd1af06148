"""The dedupe keys and load-generator counts of a `Store` (a mixin: store.py stays the
tables and transactions). Keys come from dedupe.py (per-campaign keyed hashes of device ids
and nonce tags); SQLite claims through its log and in-memory index (seen_log.py), PostgreSQL
through `seen`'s unique key (dedupe.claim)."""
import numpy as np

from ...core.errors import ConfigError
from . import dedupe, seen_log


class DedupeState:
    """Store's dedupe methods; expects `conn`, `path`, `worker`, `seen_index` (SQLite),
    `_index_synced`, `_dedupe_root` and `dedupe_key_file` from Store."""

    @property
    def dedupe_root(self) -> dedupe.DedupeKeys:
        """The root of the dedupe keys, from the key file (`--dedupe-key`; beside a SQLite
        state by default), checked against the state's fingerprint on first use."""
        if self._dedupe_root is None:
            if self.dedupe_key_file is None:
                raise ConfigError("dedupe_key", "a PostgreSQL state needs --dedupe-key FILE (the "
                                  "same file for every worker and command: `openssl rand -hex 32 "
                                  "> FILE`, or a path where the first serve creates it)")
            self._dedupe_root = dedupe.load_root(self.conn, self.dedupe_key_file, self.path)
        return self._dedupe_root

    def campaign_keys(self, name: str) -> dedupe.CampaignKeys:
        """The dedupe key functions of one campaign (its salt made on first use)."""
        return self.dedupe_root.campaign(*dedupe.campaign_salt(self.conn, name))

    def dedupe_keys(self, name: str, devices) -> list:
        """The dedupe keys (16 bytes each) of device ids in campaign `name`: what `seen` /
        `seen_log` hold for them. The one public way from a device id to its stored key."""
        return self.campaign_keys(name).many(list(devices))

    def reported(self, name: str, phase: int, devices) -> set:
        """The given device ids with a claimed report in this campaign phase."""
        devices = list(devices)
        hashed = self.dedupe_keys(name, devices)
        stored = self._stored_tags(name, phase, hashed)
        return {d for d, k in zip(devices, hashed) if k in stored}

    def _stored_tags(self, name, phase, keys) -> dict:
        if self.seen_index is not None:
            return seen_log.stored_tags(self.conn, name, phase, keys)
        return self.conn.seen_tags(name, phase, keys)

    def _sync_index(self):
        if not self._index_synced:
            self.seen_index.sync(self.conn)
            self._index_synced = True

    def claimed_keys(self, name: str, phase: int, keys: np.ndarray) -> np.ndarray:
        """Inside `batch()`: which of the (n, 16) dedupe keys already have a claimed report in
        this phase (a lookup, nothing claimed)."""
        keys = np.ascontiguousarray(keys, np.uint8).reshape(-1, 16)
        if self.seen_index is not None:
            self._sync_index()
            return self.seen_index.lookup(name, phase, *seen_log.key_words(keys)) >= 0
        stored = self.conn.seen_tags(name, phase, dedupe.as_keys(keys))
        return np.fromiter((bytes(k) in stored for k in keys), bool, keys.shape[0])

    def login_devices(self, name: str, phase: int, login: str) -> int:
        """Device ids the load-generator `login` brought into a campaign phase (every worker)."""
        return int(self.conn.execute(
            "SELECT coalesce(sum(devices), 0) FROM login_devices WHERE campaign=? AND phase=?"
            " AND login=?", (name, phase, login)).fetchone()[0])

    def add_login_devices(self, name: str, phase: int, login: str, n: int):
        """This worker's count of `login`'s device ids, + n; inside `batch()`."""
        self.conn.execute(
            "INSERT INTO login_devices VALUES (?, ?, ?, ?, ?) ON CONFLICT (campaign, phase, login,"
            " worker) DO UPDATE SET devices = login_devices.devices + excluded.devices",
            (name, phase, login, self.worker, int(n)))

    def claim_key_array(self, name: str, phase: int, keys: np.ndarray, tags: np.ndarray):
        """Inside `batch()`: claim the distinct dedupe `keys` ((n, 16) uint8 `campaign_keys`
        hashes) reporting nonce tags `tags` for this phase. Returns (claimed bool array, prior
        tag int64 array, -1 where claimed). SQLite: the log and its index (seen_log.py), caught up
        with the file ONCE per transaction, before its first claim (later, the connection would
        see its own uncommitted rows); PostgreSQL: `seen`'s unique key (dedupe.claim)."""
        if self.seen_index is not None:
            self._sync_index()
            return self.seen_index.claim(self.conn, name, phase, keys, tags)
        return dedupe.claim(self.conn, name, phase, keys, tags)

    def savepoint_mark(self):
        """Before a SAVEPOINT: what `savepoint_rolled_back` returns the index to."""
        return self.seen_index.mark() if self.seen_index is not None else 0

    def savepoint_rolled_back(self, mark):
        if self.seen_index is not None:
            self.seen_index.rollback_to(mark)

    def dedupe_rows(self) -> list:
        """Every stored dedupe key as (campaign, phase, key bytes, nonce tag), on either
        backend (for tools and tests; the ingest never reads them all)."""
        rows = [(c, int(p), bytes(k), int(q)) for c, p, k, q in self.conn.execute(
            "SELECT campaign, phase, device, nonce_tag FROM seen").fetchall()]
        for c, p, keys, tags in self.conn.execute(
                "SELECT campaign, phase, keys, nonce_tags FROM seen_log ORDER BY id").fetchall():
            keys, tags = bytes(keys), np.frombuffer(bytes(tags), "<u8").tolist()
            rows += [(c, int(p), keys[16 * i:16 * i + 16], q) for i, q in enumerate(tags)]
        return rows

    def devices_per_campaign(self) -> dict:
        """campaign -> distinct devices with an accepted report (any phase)."""
        if self.seen_index is not None:
            return seen_log.devices_per_campaign(self.conn)
        return {name: int(n) for name, n in self.conn.execute(
            "SELECT campaign, count(DISTINCT device) FROM seen GROUP BY campaign").fetchall()}

    def seen_count(self, name: str, phase: int = None) -> int:
        if self.seen_index is not None:
            return seen_log.count(self.conn, name, phase)
        if phase is None:
            q = self.conn.execute("SELECT count(*) FROM seen WHERE campaign=?", (name,))
        else:
            q = self.conn.execute("SELECT count(*) FROM seen WHERE campaign=? AND phase=?",
                                  (name, phase))
        return q.fetchone()[0]
