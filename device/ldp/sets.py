"""Set-valued inputs (spec §3, LDPMiner §3) over a fixed number of slots (spec §7.1).

A set is held in `n` slots (the device's `set_capacity`): a key per slot and a live mask
(1 = a distinct domain item of the set, in the set's own order). Every step — dropping
repeats and non-items, trimming to a phase-2 candidate list (LDPMiner §4.4), counting s,
choosing element i of L = max(l, s) — visits every slot with the same operations and no
branch on the set's contents, under `@micropython.viper`, allocating nothing: how long it
takes does not depend on the set's size or contents, nor on how it meets the candidates.
"""
from array import array

import micropython
from micropython import const

from .errors import ConfigError

MAX_CANDIDATES = const(65536)


@micropython.viper
def first_occurrences(a: ptr32, b: ptr32, kinds: ptr8, n: int):
    """kinds[j] = 0 where slot j repeats an earlier live slot (same kind, a and b): every
    pair of slots compared once."""
    j = 1
    while j < n:
        kj = kinds[j]
        aj = uint(a[j])
        bj = uint(b[j])
        dup = 0
        k = 0
        while k < j:
            dup |= int(kinds[k] == kj) & int(uint(a[k]) == aj) & int(uint(b[k]) == bj)
            k += 1
        kinds[j] = kj * (1 - dup)
        j += 1


@micropython.viper
def count(live: ptr8, n: int) -> int:
    """How many of the n slots are live."""
    s = 0
    j = 0
    while j < n:
        s += live[j]
        j += 1
    return s


@micropython.viper
def _pick(keys: ptr32, cs: ptr32, live: ptr8, n: int, i: int, out: ptr32):
    """out[0], out[1] = keys[j], cs[j] of the live slot of rank i (0, 0 if there is none)."""
    rank = 0
    key = uint(0)
    c = uint(0)
    j = 0
    while j < n:
        mask = uint(0) - uint(live[j] & int(rank == i))
        key |= uint(keys[j]) & mask
        c |= uint(cs[j]) & mask
        rank += live[j]
        j += 1
    out[0] = key
    out[1] = c


@micropython.viper
def _positions(keys: ptr32, n: int, sorted_keys: ptr32, pos: ptr32, kc: int, steps: int,
               out: ptr32):
    """out[j] = the position of keys[j] in a candidate list (its keys ascending in
    sorted_keys, their positions in pos), kc if it is not a candidate: `steps` halvings."""
    j = 0
    while j < n:
        key = uint(keys[j])
        base = 0
        size = kc
        k = 0
        while k < steps:
            half = size >> 1
            base += half * int(uint(sorted_keys[base + half]) <= key)
            size -= half
            k += 1
        hit = int(uint(sorted_keys[base]) == key)
        out[j] = uint(pos[base]) * uint(hit) + uint(kc) * uint(1 - hit)
        j += 1


@micropython.viper
def _clamp(keys: ptr32, n: int, d: uint, out: ptr32):
    """out[j] = keys[j] if keys[j] < d else d (the integer domain 0..d-1 as the items)."""
    j = 0
    while j < n:
        key = uint(keys[j])
        inside = uint(int(key < d))
        out[j] = key * inside + d * (uint(1) - inside)
        j += 1


@micropython.viper
def _keep_items(live: ptr8, cs: ptr32, n: int, kc: uint):
    """live[j] = 0 where cs[j] == kc (not an item)."""
    j = 0
    while j < n:
        live[j] = live[j] & int(uint(cs[j]) < kc)
        j += 1


# Hs(key, seed) below is hash.py's one-block MurmurHash3 (spec §1), reading the key from a slot.
@micropython.viper
def slot_sign(keys: ptr32, j: int, salt: uint, row: uint) -> int:
    """1 if Hs(keys[j], (salt + row) mod 2^32) < 2^31 else 0: SH's ±1 projection (spec §3)
    of a key read from a slot (never boxed: no allocation on 31-bit-smallint boards)."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    seed = (salt + row) & mask
    k = (uint(keys[j]) & mask) * ((uint(0xCC9E) << 16) | uint(0x2D51)) & mask
    k = ((k << 15) | (k >> 17)) & mask
    k = (k * ((uint(0x1B87) << 16) | uint(0x3593))) & mask
    h = seed ^ k
    h = ((h << 13) | (h >> 19)) & mask
    h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
    h ^= uint(4)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    return int((h >> 31) ^ uint(1))


@micropython.viper
def slot_bucket(keys: ptr32, j: int, w: ptr8, i: int, n: uint) -> int:
    """bucket(Hs(keys[j], seed), n), seed = random word i of `w` (PSOLH), n <= 2^16, of a key
    read from a slot (never boxed)."""
    mask = (uint(0xFFFF) << 16) | uint(0xFFFF)
    o = 4 * i
    seed = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
    k = (uint(keys[j]) & mask) * ((uint(0xCC9E) << 16) | uint(0x2D51)) & mask
    k = ((k << 15) | (k >> 17)) & mask
    k = (k * ((uint(0x1B87) << 16) | uint(0x3593))) & mask
    h = (seed & mask) ^ k
    h = ((h << 13) | (h >> 19)) & mask
    h = (h * 5 + ((uint(0xE654) << 16) | uint(0x6B64))) & mask
    h ^= uint(4)
    h ^= h >> 16
    h = (h * ((uint(0x85EB) << 16) | uint(0xCA6B))) & mask
    h ^= h >> 13
    h = (h * ((uint(0xC2B2) << 16) | uint(0xAE35))) & mask
    h ^= h >> 16
    return int(((h >> 16) * n + (((h & uint(0xFFFF)) * n) >> 16)) >> 16)


class KeySet:
    """A set of item keys in `n` slots: `keys` (u32), `live` (1 = a distinct item of the set),
    and the scratch a mechanism uses: `cs` (each slot's item position) and `chosen` (the key
    and position of the sampled element). Allocated once; refilled in place."""

    def __init__(self, n):
        self.n = n
        self.keys = array("I", bytes(4 * n))
        self.live = bytearray(n)
        self.cs = array("I", bytes(4 * n))
        self.chosen = array("I", bytes(8))
        self.kinds = bytearray(n)

    @classmethod
    def of(cls, keys, n=1):
        """A KeySet of a list of u32 keys (its distinct ones, first occurrence order kept) in
        max(n, len(keys)) slots: the mechanisms' list form (vectors, tests); allocates."""
        ks = cls(max(n, len(keys)))
        for j, k in enumerate(keys):
            ks.keys[j] = k
            ks.kinds[j] = 1
        first_occurrences(ks.keys, ks.keys, ks.kinds, ks.n)
        for j in range(ks.n):
            ks.live[j] = ks.kinds[j]
        return ks

    def count(self):
        """s: how many distinct items the set holds."""
        return count(self.live, self.n)

    def items_of(self, cands, d):
        """cs[j] = slot j's position among the items: a candidate list's (`cands`, kc if not
        a candidate) or, with cands None, the integer domain 0..d-1 (the key; d if >= d)."""
        if cands is None:
            _clamp(self.keys, self.n, d, self.cs)
        else:
            _positions(self.keys, self.n, cands.keys, cands.pos, cands.kc, cands.steps, self.cs)

    def pick(self, i):
        """chosen = [key, item position] of the set's element i (i < s), [0, 0] for i >= s."""
        _pick(self.keys, self.cs, self.live, self.n, i, self.chosen)

    def as_list(self):
        """The live keys in slot order (tests and tools only: allocates)."""
        return [self.keys[j] for j in range(self.n) if self.live[j]]


def as_keyset(keys):
    """`keys` as a KeySet (a list is converted: the mechanisms' list form)."""
    return KeySet.of(keys) if isinstance(keys, list) else keys


@micropython.viper
def _sort_pairs(keys: ptr32, pos: ptr32, n: int) -> int:
    """Sort (keys, pos) pairs by key in place (heap sort: public work, no allocation); 1 if
    two keys are equal."""
    build = n >> 1
    end = n
    while build > 0 or end > 1:
        if build > 0:  # heapify, then move the largest to the end, n - 1 times
            build -= 1
            root = build
        else:
            end -= 1
            tk = keys[0]
            keys[0] = keys[end]
            keys[end] = tk
            tp = pos[0]
            pos[0] = pos[end]
            pos[end] = tp
            root = 0
        while True:  # sift root down within [0, end)
            child = 2 * root + 1
            if child >= end:
                break
            if child + 1 < end and uint(keys[child + 1]) > uint(keys[child]):
                child += 1
            if uint(keys[root]) >= uint(keys[child]):
                break
            tk = keys[root]
            keys[root] = keys[child]
            keys[child] = tk
            tp = pos[root]
            pos[root] = pos[child]
            pos[child] = tp
            root = child
    j = 1
    while j < n:
        if keys[j] == keys[j - 1]:
            return 1
        j += 1
    return 0


class Candidates:
    """A phase-2 candidate list: `kc` keys, ascending in `keys` with their list positions in
    `pos`; `steps` halvings find any key (a fixed number for every key)."""

    def __init__(self, cands):
        self.kc = len(cands)
        self.keys = array("I", cands)
        self.pos = array("I", range(self.kc))
        if _sort_pairs(self.keys, self.pos, self.kc):
            raise ConfigError("candidates", "candidate keys must be distinct")
        steps = 0
        while (1 << steps) < self.kc:
            steps += 1
        self.steps = steps + 1


def candidate_index(cands):
    """The Candidates of a phase-2 candidate list (1..65536 distinct u32 keys), else
    ConfigError("candidates") -- the aggregator's rules (ldpfleet.core.mechanisms.srappor)."""
    if not isinstance(cands, list) or not 1 <= len(cands) <= MAX_CANDIDATES:
        raise ConfigError("candidates", "need 1..%d candidate keys" % MAX_CANDIDATES)
    for key in cands:
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key <= 0xFFFFFFFF:
            raise ConfigError("candidates", "candidate keys must be u32")
    return Candidates(cands)


def trim(keyset, cands):
    """LDPMiner §4.4's phase-2 input, in place: the set's items that are candidates, in the
    set's own order (ldpfleet.core.protocols.ldpminer.trim_to_candidates). Returns `keyset`."""
    keyset.items_of(cands, 0)
    _keep_items(keyset.live, keyset.cs, keyset.n, cands.kc)
    return keyset
