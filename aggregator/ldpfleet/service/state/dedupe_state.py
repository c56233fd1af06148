"""The dedupe keys and load-generator counts of a `Store` (a mixin: store.py stays the
tables and transactions). Keys come from dedupe.py (per-campaign keyed hashes of device ids
and nonce tags); they are claimed through the store's `ClaimedKeys` (claims.py: SQLite's log
and in-memory index, or PostgreSQL's unique key), chosen when the store opened."""
import numpy as np

from ...core.errors import ConfigError
from . import dedupe
from .claims import ClaimedKeys


class DedupeState:
    """Store's dedupe methods; expects `conn`, `path`, `worker`, `claims` (a ClaimedKeys),
    `_dedupe_root` and `dedupe_key_file` from Store."""

    claims: ClaimedKeys

    @property
    def seen_index(self):
        """SQLite's in-memory index of the claimed keys (seen_log.SeenIndex), None on
        PostgreSQL: for diagnostics and tests."""
        return getattr(self.claims, "index", None)

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
        stored = self.claims.stored_tags(name, phase, hashed)
        return {d for d, k in zip(devices, hashed) if k in stored}

    def claimed_keys(self, name: str, phase: int, keys: np.ndarray) -> np.ndarray:
        """Inside `batch()`: which of the (n, 16) dedupe keys already have a claimed report in
        this phase (a lookup, nothing claimed)."""
        return self.claims.lookup(name, phase, keys)

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
        tag int64 array, -1 where claimed): `ClaimedKeys.claim`."""
        return self.claims.claim(name, phase, keys, tags)

    def savepoint_mark(self):
        """Before a SAVEPOINT: what `savepoint_rolled_back` returns the claims to (the two
        halves of `Store.savepoint`, which callers use)."""
        return self.claims.mark()

    def savepoint_rolled_back(self, mark):
        self.claims.rollback_to(mark)

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
        return self.claims.devices_per_campaign()

    def seen_count(self, name: str, phase: int = None) -> int:
        """Claimed dedupe keys of a campaign (one phase, or all)."""
        return self.claims.count(name, phase)
