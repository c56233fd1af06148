"""Dedupe keys that name no device and link no campaigns: the `seen` table (PostgreSQL) and
`seen_log` (SQLite) hold, per (campaign, phase), a keyed hash of each device id and a keyed tag
of the nonce accepted from it (spec §6: one report per device and phase; the same nonce again is
a duplicate, another one a second report).

Keys, one place (`DedupeKeys`):
- the ROOT key: 32 random bytes in a file OUTSIDE the database (`--dedupe-key FILE` or
  LDPFLEET_DEDUPE_KEY; by default `<state file>.dedupe-key` beside a SQLite state, 0600, made
  on first use; a PostgreSQL state must name it, every worker and command the same file).
  The state keeps only a fingerprint of it (`meta.dedupe_key_check`), so a wrong or missing
  file is refused instead of silently splitting one campaign's keys in two.
- per campaign, a random 32-byte SALT (`campaign_salts`), dropped with the campaign's keys
  (`campaign purge`). The campaign's key material is BLAKE2b-512 of the salt keyed by the root
  (a PRF): 32 bytes for the device hashes, 16 for the nonce tags.
- a device's dedupe key in campaign C is SipHash-2-4 of its id under the first 16 bytes, then
  under the next 16, side by side (16 bytes, c_kernels/ldp_siphash.c): a 128-bit PRF, so two
  devices of one campaign collide with probability about n^2 / 2^129. A nonce's tag is
  SipHash-2-4 of its 4 little-endian bytes under the nonce key, top bit cleared (63 bits: a
  second report taken for a redelivery with probability 2^-63). A closed campaign's tags are
  zeroed (`ClaimedKeys.drop_nonce_tags`, claims.py): a closed campaign rejects every report before dedupe.

Without the root key, the rows of two campaigns are outputs of independent PRFs: a state file
or a `pg_dump` neither lists device ids nor links the same device across campaigns, and the
stored tags cannot be matched to nonces seen on the wire. With the root key AND the state, a
guessed device id can be tested against an open or unpurged campaign (the aggregator itself
must be able to, to dedupe).

States made before schema 6 had one key in `meta` and device hashes shared by every campaign.
The ids are not stored, so those hashes cannot be recomputed per campaign; the migration
(`rekey_v6`) hashes each stored hash again under its campaign's key instead, and keeps the old
key as that campaign's LEGACY inner key (`campaign_salts.legacy_key`): such a campaign's device
key is the per-campaign hash of the old hash. Its rows no longer link without the root key,
but a backup taken BEFORE the migration still links them (and holds the old key).
The ingest hashes a whole batch's device ids in one C call (two for a legacy campaign) over
their spans in the receive buffer, and its nonces in one more.
"""
import errno
import hashlib
import os
import secrets

import numpy as np

from ...core.errors import ConfigError
from ...core.kernels import ffi, lib

ROOT_BYTES = 32
SALT_BYTES = 32
DIGEST_BYTES = 16
TAG_MASK = np.uint64((1 << 63) - 1)
CHECK_META = "dedupe_key_check"
LEGACY_META = "dedupe_key"
"""Schema <= 5: the one key of the whole state, in `meta` (moved into `campaign_salts`)."""
KEY_FILE_SUFFIX = ".dedupe-key"
KEY_ENV = "LDPFLEET_DEDUPE_KEY"
"""The key file when no `dedupe_key` is given (what `--dedupe-key` reads from the environment)."""
_PERSON = b"ldpfleet-dedupe6"
PAGE = 50000
"""Rows re-keyed per statement by the 5 -> 6 migration."""


def default_key_file(state_path: str) -> str:
    """Where a SQLite state's root key lives unless `--dedupe-key` says otherwise."""
    return os.path.abspath(state_path) + KEY_FILE_SUFFIX


def fingerprint(root: bytes) -> str:
    """What the state keeps of the root key: a PRF output that tells keys apart and reveals
    nothing of the key."""
    return hashlib.blake2b(b"check", key=root, digest_size=16, person=_PERSON).hexdigest()


def read_key_file(path: str):
    """The root key in `path` (64 hex digits, e.g. `openssl rand -hex 32`), None if there is no
    such file."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("dedupe_key", "cannot read the dedupe key file %s: %s"
                          % (path, getattr(exc, "strerror", None) or exc)) from None
    try:
        root = bytes.fromhex(text)
    except ValueError:
        root = b""
    if len(root) != ROOT_BYTES:
        raise ConfigError("dedupe_key", "%s is not a dedupe key: it must hold %d hex digits "
                          "(make one with `openssl rand -hex %d`)"
                          % (path, 2 * ROOT_BYTES, ROOT_BYTES))
    return root


def create_key_file(path: str) -> bytes:
    """A new random root key in `path` (mode 0600), written whole before it appears; when
    another process made the file first, its key."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.%s.tmp" % (os.path.basename(path), secrets.token_hex(4)))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(ROOT_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic: never a half-written key, never two keys
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
    except OSError as exc:
        raise ConfigError("dedupe_key", "cannot create the dedupe key file %s: %s"
                          % (path, exc.strerror or exc)) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return read_key_file(path)


def load_root(conn, path: str, where: str) -> "DedupeKeys":
    """The state's root key from `path`, checked against the state's fingerprint (recorded on
    first use). A missing file is made only for a state that never had one."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (CHECK_META,)).fetchone()
    root = read_key_file(path)
    if root is None:
        if row is not None:
            raise ConfigError("dedupe_key", "no dedupe key file at %s, but the dedupe keys of %s "
                              "were made with one (fingerprint %s): give that file with "
                              "--dedupe-key (without it, reports of open campaigns cannot be "
                              "told from earlier ones)" % (path, where, row[0][:12]))
        root = create_key_file(path)
    mine = fingerprint(root)
    if row is None:
        conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                     (CHECK_META, mine))
        row = conn.execute("SELECT value FROM meta WHERE key=?", (CHECK_META,)).fetchone()
    if row[0] != mine:
        raise ConfigError("dedupe_key", "the dedupe key file %s (fingerprint %s) is not the one "
                          "%s was made with (fingerprint %s): every serve and command of one "
                          "state needs the same file" % (path, mine[:12], where, row[0][:12]))
    return DedupeKeys(root)


class DedupeKeys:
    """The root key, and the keys of each campaign derived from it and the campaign's salt."""

    def __init__(self, root: bytes):
        if len(root) != ROOT_BYTES:
            raise ValueError("a dedupe root key has %d bytes, not %d" % (ROOT_BYTES, len(root)))
        self._root = bytes(root)
        self._cache = {}

    @property
    def fingerprint(self) -> str:
        return fingerprint(self._root)

    def campaign(self, salt: bytes, legacy: bytes = None) -> "CampaignKeys":
        """The keys of the campaign with this salt (and legacy inner key, if migrated)."""
        where = (bytes(salt), None if legacy is None else bytes(legacy))
        keys = self._cache.get(where)
        if keys is None:
            material = hashlib.blake2b(bytes(salt), key=self._root, digest_size=64,
                                       person=_PERSON).digest()
            keys = self._cache[where] = CampaignKeys(material[:32], material[32:48], where[1])
        return keys


def _siphash_spans(key: bytes, data: np.ndarray, off, length) -> np.ndarray:
    off = np.ascontiguousarray(off, np.uint32)
    length = np.ascontiguousarray(length, np.uint32)
    out = np.empty((off.shape[0], DIGEST_BYTES), np.uint8)
    if off.shape[0]:
        lib.ldp_siphash_spans(key, ffi.from_buffer("uint8_t[]", data),
                              ffi.from_buffer("uint32_t[]", off),
                              ffi.from_buffer("uint32_t[]", length), off.shape[0],
                              ffi.from_buffer("uint8_t[]", out))
    return out


class CampaignKeys:
    """One campaign's device key (`spans`, `many`) and nonce tag (`nonce_tags`) functions."""

    def __init__(self, device_key: bytes, nonce_key: bytes, legacy: bytes = None):
        self._device_key, self._nonce_key, self._legacy = device_key, nonce_key, legacy

    def spans(self, data: np.ndarray, off, length) -> np.ndarray:
        """(n, 16) uint8: the keys of the device ids data[off[i]:off[i] + length[i]]."""
        if self._legacy is not None:
            return self.rehash(_siphash_spans(self._legacy, data, off, length))
        return _siphash_spans(self._device_key, data, off, length)

    def rehash(self, inner: np.ndarray) -> np.ndarray:
        """(n, 16) legacy hashes (the one-key hashes of schema <= 5) -> this campaign's keys."""
        inner = np.ascontiguousarray(inner, np.uint8).reshape(-1, DIGEST_BYTES)
        n = inner.shape[0]
        off = np.arange(n, dtype=np.uint32) * DIGEST_BYTES
        return _siphash_spans(self._device_key, inner.reshape(-1) if n else np.zeros(1, np.uint8),
                              off, np.full(n, DIGEST_BYTES, np.uint32))

    def many(self, devices) -> list:
        """The keys (bytes) of device ids (str), in order."""
        raw = [d.encode() for d in devices]
        if not raw:
            return []
        length = np.fromiter(map(len, raw), np.uint32, len(raw))
        off = np.zeros(len(raw), np.uint32)
        np.cumsum(length[:-1], out=off[1:])
        return as_keys(self.spans(np.frombuffer(b"".join(raw) or b"\0", np.uint8), off, length))

    def nonce_tags(self, nonces) -> np.ndarray:
        """int64 tags (< 2^63) of u32 nonces: what the state keeps instead of a nonce."""
        nonces = np.ascontiguousarray(nonces, np.uint32)
        out = np.empty(nonces.shape[0], np.uint64)
        if nonces.shape[0]:
            lib.ldp_siphash_u32s(self._nonce_key, ffi.from_buffer("uint32_t[]", nonces),
                                 nonces.shape[0], ffi.from_buffer("uint64_t[]", out))
        return (out & TAG_MASK).astype(np.int64)


def as_keys(hashes: np.ndarray) -> list:
    """(n, 16) hashes -> n bytes objects (what the store binds)."""
    flat = np.ascontiguousarray(hashes, np.uint8).tobytes()
    return [flat[i:i + DIGEST_BYTES] for i in range(0, len(flat), DIGEST_BYTES)]


# --- per-campaign salts --------------------------------------------------------------------

def campaign_salt(conn, name: str):
    """(salt, legacy inner key or None) of a campaign, made on first use (concurrent workers
    agree: the first insert wins and everyone reads it back)."""
    row = conn.execute("SELECT salt, legacy_key FROM campaign_salts WHERE campaign=?",
                       (name,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO campaign_salts (campaign, salt) VALUES (?, ?) ON CONFLICT"
                     " (campaign) DO NOTHING", (name, secrets.token_bytes(SALT_BYTES)))
        row = conn.execute("SELECT salt, legacy_key FROM campaign_salts WHERE campaign=?",
                           (name,)).fetchone()
    return bytes(row[0]), (bytes(row[1]) if row[1] is not None else None)


def drop_salt(conn, name: str):
    """Forget a campaign's salt (its keys can never be computed again). Inside a transaction
    with deleted content zeroed (`zero_deleted`)."""
    conn.execute("DELETE FROM campaign_salts WHERE campaign=?", (name,))


# --- migrations ----------------------------------------------------------------------------

def _legacy_key(conn) -> bytes:
    """Schema 4's one key of the state (`meta.dedupe_key`), made on first use."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (LEGACY_META,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                     (LEGACY_META, secrets.token_hex(32)))
        row = conn.execute("SELECT value FROM meta WHERE key=?", (LEGACY_META,)).fetchone()
    return bytes.fromhex(row[0])


def rekey_seen(conn, _root):
    """Migration 3 -> 4: the rows of `seen_v3` (device ids) into `seen` (one-key hashes, which
    the 5 -> 6 migration hashes again per campaign)."""
    key = _legacy_key(conn)
    rows = conn.execute("SELECT campaign, phase, device, seq FROM seen_v3").fetchall()
    raw = [r[2].encode() for r in rows]
    length = np.fromiter(map(len, raw), np.uint32, len(raw))
    off = np.zeros(len(raw), np.uint32)
    if len(raw) > 1:
        np.cumsum(length[:-1], out=off[1:])
    hashed = as_keys(_siphash_spans(key, np.frombuffer(b"".join(raw) or b"\0", np.uint8),
                                    off, length))
    conn.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)",
                     [(c, p, k, s) for (c, p, _d, s), k in zip(rows, hashed)])
    conn.zero_deleted(True)  # the ids in clear must not stay in free pages
    try:
        conn.execute("DELETE FROM seen_v3")
        conn.execute("DROP TABLE seen_v3")
    finally:
        conn.zero_deleted(False)


def rekey_v6(conn, root):
    """Migration 5 -> 6: a salt per campaign (the old one-key of the state kept as each
    existing campaign's legacy inner key, then dropped from `meta`), every stored device hash
    hashed again under its campaign's key, the nonces of open campaigns replaced by their tags
    and those of closed campaigns zeroed. `root()` gives the DedupeKeys (the key file)."""
    keys = root()
    row = conn.execute("SELECT value FROM meta WHERE key=?", (LEGACY_META,)).fetchone()
    legacy = bytes.fromhex(row[0]) if row else None
    names = {r[0] for r in conn.execute("SELECT name FROM campaigns").fetchall()}
    names |= {r[0] for r in conn.execute("SELECT DISTINCT campaign FROM seen").fetchall()}
    names |= {r[0] for r in conn.execute("SELECT DISTINCT campaign FROM seen_log").fetchall()}
    open_names = {r[0] for r in conn.execute(
        "SELECT name FROM campaigns WHERE state='open'").fetchall()}
    for name in sorted(names):
        conn.execute("INSERT INTO campaign_salts VALUES (?, ?, ?)",
                     (name, secrets.token_bytes(SALT_BYTES), legacy))

    def rekeyed(name, blob, nonces):
        ck = keys.campaign(*campaign_salt(conn, name))
        digests = ck.rehash(np.frombuffer(blob, np.uint8)) if legacy is not None else \
            np.frombuffer(blob, np.uint8).reshape(-1, DIGEST_BYTES)
        tags = ck.nonce_tags(nonces) if name in open_names else np.zeros(len(nonces), np.int64)
        return digests, tags

    conn.zero_deleted(True)  # the old hashes and the nonces must not stay in free pages
    try:
        for (rowid,) in conn.execute("SELECT id FROM seen_log ORDER BY id").fetchall():
            name, blob, seqs = conn.execute("SELECT campaign, keys, nonce_tags FROM seen_log"
                                            " WHERE id=?", (rowid,)).fetchone()
            digests, tags = rekeyed(name, bytes(blob),
                                    np.frombuffer(bytes(seqs), "<u4").astype(np.uint32))
            conn.execute("UPDATE seen_log SET keys=?, nonce_tags=? WHERE id=?",
                         (digests.tobytes(), tags.astype("<u8").tobytes(), rowid))
        after = ("", -1, b"")
        while True:  # seen_v5 (PostgreSQL's rows; SQLite's moved to seen_log at schema 5)
            rows = conn.execute(
                "SELECT campaign, phase, device, seq FROM seen_v5 WHERE (campaign, phase, device)"
                " > (?, ?, ?) ORDER BY campaign, phase, device LIMIT %d" % PAGE, after).fetchall()
            if not rows:
                break
            after = (rows[-1][0], rows[-1][1], bytes(rows[-1][2]))
            groups = {}
            for c, p, d, q in rows:
                groups.setdefault((c, int(p)), []).append((bytes(d), int(q)))
            for (name, phase), part in groups.items():
                nonces = np.asarray([q for _d, q in part], np.int64).astype(np.uint32)
                digests, tags = rekeyed(name, b"".join(d for d, _q in part), nonces)
                conn.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)",
                                 [(name, phase, d, int(t)) for d, t in zip(as_keys(digests), tags)])
        conn.execute("DROP TABLE seen_v5")
        conn.execute("DELETE FROM meta WHERE key=?", (LEGACY_META,))
    finally:
        conn.zero_deleted(False)

