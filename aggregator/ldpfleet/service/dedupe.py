"""Dedupe keys without device ids (issue 15's retention): the `seen` table holds, per
(campaign, phase), a keyed hash of each device id and the nonce accepted from it (spec §6: one
report per device and phase; the same nonce again is a duplicate, another one a second report).

The hash is keyed BLAKE2b (RFC 7693) with a 16-byte digest under a random 32-byte key made with
the state (`meta.dedupe_key`): a PRF, so a copy of the state alone neither lists the fleet's
device ids nor confirms a guessed id without the key, and 128 bits make a collision between two
devices of one campaign negligible (about n^2 / 2^129). Every worker of a PostgreSQL state reads
the same key. Whoever holds the state *and* the key can test a guessed id: `campaign purge`
(retention.py) drops a closed campaign's keys altogether.
"""
import hashlib
import secrets

KEY_BYTES = 32
DIGEST_BYTES = 16
META_KEY = "dedupe_key"


def ensure_key(conn) -> bytes:
    """The state's dedupe key, made on first use (concurrent workers agree: the first insert
    wins and everyone reads it back)."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (META_KEY,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                     (META_KEY, secrets.token_hex(KEY_BYTES)))
        row = conn.execute("SELECT value FROM meta WHERE key=?", (META_KEY,)).fetchone()
    return bytes.fromhex(row[0])


class DeviceKeys:
    """device id (str) -> its 16-byte keyed hash, for one state's key."""

    def __init__(self, key: bytes):
        self._base = hashlib.blake2b(key=key, digest_size=DIGEST_BYTES)

    def of(self, device: str) -> bytes:
        h = self._base.copy()
        h.update(device.encode())
        return h.digest()

    def many(self, devices) -> list:
        base, out = self._base, []
        for device in devices:
            h = base.copy()
            h.update(device.encode())
            out.append(h.digest())
        return out


def rekey_seen(conn):
    """Migration 3 -> 4: the rows of `seen_v3` (device ids) into `seen` (keyed hashes)."""
    keys = DeviceKeys(ensure_key(conn))
    rows = conn.execute("SELECT campaign, phase, device, seq FROM seen_v3").fetchall()
    conn.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)",
                     [(c, p, keys.of(d), s) for c, p, d, s in rows])
    conn.zero_deleted(True)  # the ids in clear must not stay in free pages
    try:
        conn.execute("DELETE FROM seen_v3")
        conn.execute("DROP TABLE seen_v3")
    finally:
        conn.zero_deleted(False)


def claim(conn, keys: DeviceKeys, name: str, phase: int, devices: list, seqs: list):
    """Claim the dedupe keys of `devices` (distinct) reporting `seqs` in this transaction.
    Returns (claimed: list of bool, prior: {device: stored nonce} of the others). A device not
    claimed already had a report in this phase: committed earlier, or (PostgreSQL) by another
    worker meanwhile."""
    hashed = keys.many(devices)
    rows = [(name, phase, k, int(q)) for k, q in zip(hashed, seqs)]
    if conn.claim_all(rows):  # SQLite, every device new: the common case
        return [True] * len(rows), {}
    if conn.kind == "sqlite":  # one writer: look up, then insert the new ones
        stored = conn.seen_seqs(name, phase, hashed)
        conn.claim_seen([r for r in rows if r[2] not in stored])
        won = {r[2] for r in rows} - set(stored)
    else:  # concurrent workers: the unique key decides who wins
        won = conn.claim_seen(rows)
        stored = conn.seen_seqs(name, phase, [k for k in hashed if k not in won])
    claimed = [k in won for k in hashed]
    prior = {d: stored[k] for d, k in zip(devices, hashed) if k in stored}
    return claimed, prior
