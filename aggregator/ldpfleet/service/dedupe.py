"""Dedupe keys without device ids (issue 15's retention): the `seen` table holds, per
(campaign, phase), a keyed hash of each device id and the nonce accepted from it (spec §6: one
report per device and phase; the same nonce again is a duplicate, another one a second report).

The hash is a PRF under a random 32-byte key made with the state (`meta.dedupe_key`): SipHash-2-4
(c_kernels/ldp_siphash.c) of the device id under the key's first 16 bytes, then under its last
16 bytes, the two 64-bit outputs side by side (16 bytes). The table never lists the fleet's
device ids, and 128 bits make a collision between two devices of one campaign negligible (about
n^2 / 2^129). The ingest hashes a whole batch's device ids in one C call over their spans in the
receive buffer (`DeviceKeys.spans`). Every worker of a PostgreSQL state reads the same key.
The key is stored in the same state: whoever can read the whole state (a backup, a database
role with access to `meta`) can still test a *guessed* id against it. What the keyed hash buys
is that the ids are not in the table to be read off, exported or joined; `campaign purge`
(retention.py) drops a closed campaign's keys altogether.
"""
import secrets

import numpy as np

from ..kernels import ffi, lib

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
    """device id -> its 16-byte keyed hash (`ldp_siphash_spans`), for one state's key."""

    def __init__(self, key: bytes):
        if len(key) != KEY_BYTES:
            raise ValueError("a dedupe key has %d bytes, not %d" % (KEY_BYTES, len(key)))
        self._key = bytes(key)

    def spans(self, data: np.ndarray, off, length) -> np.ndarray:
        """(n, 16) uint8: the hashes of the byte spans data[off[i]:off[i] + length[i]]."""
        off = np.ascontiguousarray(off, np.uint32)
        length = np.ascontiguousarray(length, np.uint32)
        out = np.empty((off.shape[0], DIGEST_BYTES), np.uint8)
        if off.shape[0]:
            lib.ldp_siphash_spans(self._key, ffi.from_buffer("uint8_t[]", data),
                                  ffi.from_buffer("uint32_t[]", off),
                                  ffi.from_buffer("uint32_t[]", length), off.shape[0],
                                  ffi.from_buffer("uint8_t[]", out))
        return out

    def of(self, device: str) -> bytes:
        return self.many([device])[0]

    def many(self, devices) -> list:
        """The hashes (bytes) of device ids (str), in order."""
        raw = [d.encode() for d in devices]
        if not raw:
            return []
        length = np.fromiter(map(len, raw), np.uint32, len(raw))
        off = np.zeros(len(raw), np.uint32)
        np.cumsum(length[:-1], out=off[1:])
        return as_keys(self.spans(np.frombuffer(b"".join(raw) or b"\0", np.uint8), off, length))


def as_keys(hashes: np.ndarray) -> list:
    """(n, 16) hashes -> n bytes objects (what the store binds)."""
    flat = np.ascontiguousarray(hashes, np.uint8).tobytes()
    return [flat[i:i + DIGEST_BYTES] for i in range(0, len(flat), DIGEST_BYTES)]


def rekey_seen(conn):
    """Migration 3 -> 4: the rows of `seen_v3` (device ids) into `seen` (keyed hashes)."""
    keys = DeviceKeys(ensure_key(conn))
    rows = conn.execute("SELECT campaign, phase, device, seq FROM seen_v3").fetchall()
    hashed = keys.many([r[2] for r in rows])
    conn.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)",
                     [(c, p, k, s) for (c, p, _d, s), k in zip(rows, hashed)])
    conn.zero_deleted(True)  # the ids in clear must not stay in free pages
    try:
        conn.execute("DELETE FROM seen_v3")
        conn.execute("DROP TABLE seen_v3")
    finally:
        conn.zero_deleted(False)


def claim(conn, name: str, phase: int, keys: np.ndarray, seqs):
    """PostgreSQL: claim the distinct dedupe `keys` ((n, 16) uint8 hashes) reporting nonces
    `seqs` in this transaction. Returns (claimed bool array, prior nonces int64 array, -1 where
    claimed). A key not claimed already had a report in this phase: committed earlier, or by
    another worker meanwhile (the unique key decides who wins). SQLite claims through
    `seen_log`."""
    keys = np.ascontiguousarray(keys, np.uint8).reshape(-1, 16)
    won = conn.claim_seen(name, phase, keys, seqs)
    prior = np.full(keys.shape[0], -1, np.int64)
    lost = np.flatnonzero(~won)
    if lost.size:
        stored = conn.seen_seqs(name, phase, [bytes(keys[i]) for i in lost])
        for i in lost.tolist():
            prior[i] = stored.get(bytes(keys[i]), -1)
    return won, prior
