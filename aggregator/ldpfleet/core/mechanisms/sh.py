"""Sampling succinct histogram, SH (protocol_spec/v2 §3, id 7).

LDPMiner (Qin et al., CCS'16; Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy" (CCS 2016)) §4.2
Alg. 1 (sampling randomizer) with Alg. 2 (sampling SH); SH itself is Bassily-Smith's succinct
histogram with a +-1 projection phi(t, v).

Client (set of s distinct keys, L = max(l, s)): i = bucket(w0, L) picks an element, i >= s
is the dummy (padding, §3); t = bucket(w1, m) picks a projection row; dummy: a fair sign
(w2 < 2^31); else phi = +1 iff Hs(key_i, salt + t) < 2^31 and sign = phi w.p.
p = T_rr / 2^32, else -phi.

Aggregator state: z[t] = sum of signs at position t (int64, linear). The estimate of item v is
    f^(v) = l / (2p - 1) * sum_t z[t] phi(t, v)
(LDPMiner Alg. 1 line 5's scaling by l; Alg. 2's z_t = c_eps m x_t with x_t = +-1/sqrt(m) and
<Phi b_v, z> reduce to this with c_eps = 1/(2p-1) at the realised p). For users with s <= l it is
unbiased over random hash functions (the element at position i is sampled w.p. cnt_l(i)/2^32,
within l/2^32 relative of 1/l); a set longer than l is sampled at rate 1/s, LDPMiner's
truncation bias.

Set-valued input (perturb_batch): a (n, s) integer array, a list of per-user key sequences, or
`KeySets(keys, offsets)` (user u holds keys[offsets[u]:offsets[u+1]]).
"""
from collections import namedtuple

import numpy as np

from .. import protocol
from ..errors import ConfigError
from ..kernels import THREADS, lib, parallel_map, ptr
from .base import (W, IntParam, IntStateSketch, Mechanism, as_keys, body_ptr, body_u32,
                   check_words, report_array, run_chunks)
from .cms import collision_probability

HALF = protocol.T_HALF
DEFAULT_M = 65536
DEFAULT_L = 1
DECODE_PARALLEL_MIN = 4096

KeySets = namedtuple("KeySets", "keys offsets")
KeySets.__doc__ = "Flat item sets: user u holds keys[offsets[u]:offsets[u+1]] (n + 1 offsets)."


class DistinctSets(KeySets):
    """KeySets already checked to hold distinct keys per user (`key_sets`), or taken from such
    sets (`derived_sets`): `key_sets` returns them as they are instead of sorting every key
    again (a simulation passes the same million sets through it dozens of times)."""

    __slots__ = ()


def derived_sets(source, keys, offsets) -> KeySets:
    """Sets made from `source` by taking users or dropping items (each set stays distinct):
    DistinctSets when `source` was checked, plain KeySets otherwise."""
    return (DistinctSets if isinstance(source, DistinctSets) else KeySets)(keys, offsets)


def key_sets(values) -> KeySets:
    """Per-user sets as DistinctSets(uint32 keys, uint64 offsets); ValueError on a repeated
    key. DistinctSets come back unchanged."""
    if isinstance(values, DistinctSets):
        return values
    if isinstance(values, KeySets):
        keys = as_keys(values.keys)
        offsets = np.ascontiguousarray(values.offsets, dtype=np.uint64)
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != keys.size \
                or np.any(np.diff(offsets.astype(np.int64)) < 0):
            raise ValueError("offsets must rise from 0 to len(keys)")
    elif isinstance(values, np.ndarray) and values.ndim == 2:
        n, s = values.shape
        keys = as_keys(values.reshape(-1))
        rows = np.sort(keys.reshape(n, s), axis=1)
        clash = np.flatnonzero((rows[:, 1:] == rows[:, :-1]).any(axis=1))
        if clash.size:
            raise ConfigError("sets", "user %d holds a key twice (sets must be distinct keys)"
                              % clash[0])
        return DistinctSets(keys, np.arange(n + 1, dtype=np.uint64) * np.uint64(s))
    else:
        sets = [as_keys(v) for v in values]
        keys = np.concatenate(sets) if sets else np.zeros(0, np.uint32)
        offsets = np.zeros(len(sets) + 1, np.uint64)
        np.cumsum([v.size for v in sets], out=offsets[1:])
    check_distinct(keys, offsets)
    return DistinctSets(np.ascontiguousarray(keys), offsets)


def take_sets(sets: KeySets, index) -> KeySets:
    """The sets of users `index` (in that order, repeats allowed), O(items taken)."""
    index = np.asarray(index, np.int64)
    offsets = sets.offsets.astype(np.int64)
    sizes = offsets[index + 1] - offsets[index]
    out = np.zeros(index.size + 1, np.uint64)
    np.cumsum(sizes, out=out[1:])
    total = int(out[-1])
    shift = np.repeat(offsets[index] - out[:-1].astype(np.int64), sizes)
    keys = sets.keys[np.arange(total, dtype=np.int64) + shift]
    return derived_sets(sets, np.ascontiguousarray(keys, np.uint32), out)


def check_distinct(keys: np.ndarray, offsets: np.ndarray):
    n = offsets.size - 1
    if keys.size < 2:
        return
    owner = np.repeat(np.arange(n), np.diff(offsets.astype(np.int64)))
    order = np.lexsort((keys, owner))
    same = (owner[order][1:] == owner[order][:-1]) & (keys[order][1:] == keys[order][:-1])
    if same.any():
        u = owner[order][1:][same][0]
        raise ConfigError("sets", "user %d holds key %d twice (sets must be distinct keys)"
                          % (u, keys[order][1:][same][0]))


MAX_CANDIDATES = 65536


class CandidateMixin:
    """A phase-2 candidate list (LDPMiner §4.4; spec §3 `srappor`, `psgrr`, `psolh`):
    `candidates` (kc distinct u32 keys, list order = item index), `kc`, and the sorted copy
    with each key's index that the C kernels search."""

    def set_candidates(self, candidates, default_size: int = None):
        """`candidates` checked (ConfigError naming `candidates`), or without a list the int
        keys 0..default_size-1; returns True iff a list was given."""
        if candidates is None:
            cand = np.arange(default_size, dtype=np.uint32)
        else:
            try:
                cand = as_keys(candidates)
            except (TypeError, ValueError) as exc:
                raise ConfigError("candidates", str(exc)) from None
            if not 1 <= cand.size <= MAX_CANDIDATES:
                raise ConfigError("candidates", "need 1..%d candidates, got %d"
                                  % (MAX_CANDIDATES, cand.size))
            if np.unique(cand).size != cand.size:
                raise ConfigError("candidates", "candidate keys must be distinct")
            self.params["candidates"] = [int(c) for c in cand]
        self.candidates = cand
        self.kc = int(cand.size)
        order = np.argsort(cand, kind="stable")
        self.sorted_candidates = np.ascontiguousarray(cand[order])
        self.sorted_index = np.ascontiguousarray(order.astype(np.uint32))
        return candidates is not None

    def candidate_bits(self, keys) -> np.ndarray:
        """Index of every key among the candidates, kc if it is not one."""
        keys = as_keys(keys)
        pos = np.minimum(np.searchsorted(self.sorted_candidates, keys), self.kc - 1)
        hit = self.sorted_candidates[pos] == keys
        return np.where(hit, self.sorted_index[pos], self.kc).astype(np.int64)


def sampled_index(w0: int, s: int, l: int) -> int:
    """LDPMiner §3 padding/truncation: bucket(w0, max(l, s)); >= s means the dummy."""
    return protocol.bucket(w0, max(l, s))


def one_set(value) -> list:
    sets = key_sets([value])
    return [int(k) for k in sets.keys]


class SetMechanism(Mechanism):
    """Shared client plumbing of the set-valued mechanisms (batch over KeySets)."""

    set_valued = True

    def _kernel(self, sets: KeySets, start: int, stop: int, words, out):
        raise NotImplementedError

    def c_report(self, value, words, seq: int = 0) -> bytes:
        sets = key_sets([value])
        out = report_array(self, 1, seq)
        self._kernel(sets, 0, 1, np.array(check_words(words, self.random_words), np.uint32), out)
        return out.tobytes()

    def perturb_batch(self, sets, rng, seq_start: int = 0) -> np.ndarray:
        sets = key_sets(sets)
        n = sets.offsets.size - 1
        out = report_array(self, n, seq_start)
        run_chunks(self, rng, n,
                   lambda start, stop, words: self._kernel(sets, start, stop, words, out))
        return out


class ShMechanism(SetMechanism):
    """Sampling SH: `m` projection positions (2..65536), set length `l` (1..65536)."""

    name = "sh"

    PARAMS = {"m": IntParam(DEFAULT_M, 2, 65536), "l": IntParam(DEFAULT_L, 1, 65536)}
    body_size = 5
    random_words = 3

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        self.t_rr = protocol.t_rr(eps_milli)

    @property
    def keep_probability(self) -> float:
        return self.t_rr / W

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        keys = one_set(value)
        w0, w1, w2 = check_words(words, 3)
        i = sampled_index(w0, len(keys), self.l)
        t = protocol.bucket(w1, self.m)
        if i >= len(keys):
            plus = w2 < HALF
        else:
            phi_plus = protocol.keyed_hash(keys[i], protocol.row_seed(self.salt, t)) < HALF
            plus = phi_plus == (w2 < self.t_rr)
        return self.header(seq) + t.to_bytes(4, "little") + bytes([1 if plus else 0])

    def _kernel(self, sets, start, stop, words, out):
        lib.ldp_sh_perturb(ptr(sets.keys), ptr(sets.offsets[start:]), stop - start, self.l,
                           self.salt, self.m, self.t_rr, ptr(words), body_ptr(out, start),
                           out.shape[1])

    def validate_bodies(self, bodies: np.ndarray):
        return [("t", body_u32(bodies, 0) >= self.m), ("sign", bodies[:, 4] > 1)]

    def new_sketch(self) -> "ShSketch":
        return ShSketch(self)

    def item_variances(self, n: int, freqs=None) -> np.ndarray:
        """Exact variance of f^(v)/n over random hashes, sampling and flips when every set has
        s <= l items (each report contributes +-l/(2p-1); gamma = sum_t P(t)^2 = 1/m for m = 2^a):
            Var = n l^2/(2p-1)^2 - F - gamma (I - F) + gamma sum_{u != v} F(u)^2
        with F = n f_v users holding v and I = n sum_u f_u item instances in all. This replaces
        LDPMiner Prop. 4 (stated for its JL-sized m) with the exact form for this encoding.
        For every item of `freqs` (fractions of users holding it); without, f = 0."""
        c2 = 1.0 / (2 * self.keep_probability - 1) ** 2
        g = collision_probability(self.m)
        f = np.zeros(1) if freqs is None else np.asarray(freqs, np.float64).ravel()
        total = float(np.sum(f)) if freqs is not None else 0.0
        sq = float(np.sum(f * f)) if freqs is not None else 0.0
        var = n * self.l ** 2 * c2 - n * f - g * n * (total - f) + g * n * n * (sq - f * f)
        return var / (n * n)


class ShSketch(IntStateSketch):
    """`z` (m,) int64: per projection position the sum of reported signs."""

    STATE = ("z",)

    def __init__(self, mechanism: ShMechanism):
        super().__init__(mechanism)
        self.z = np.zeros(mechanism.m, np.int64)

    def _fold(self, arr):
        lib.ldp_sh_accumulate(body_ptr(arr), arr.shape[0], arr.shape[1], self.mechanism.m,
                              ptr(self.z))

    def correlations(self, keys) -> np.ndarray:
        """sum_t z[t] phi(t, v) for every key, exact int64 (C decoder, 2 threads)."""
        keys = as_keys(keys)
        ts = np.flatnonzero(self.z).astype(np.uint32)
        zs = np.ascontiguousarray(self.z[ts])
        out = np.empty(keys.size, np.int64)
        pieces = THREADS if keys.size >= DECODE_PARALLEL_MIN else 1
        bounds = np.linspace(0, keys.size, pieces + 1).astype(int)

        def run(i):
            a, b = bounds[i], bounds[i + 1]
            if b > a:
                lib.ldp_sh_decode(ptr(ts), ptr(zs), ts.size, self.mechanism.salt, ptr(keys[a:]),
                                  b - a, ptr(out[a:]))

        parallel_map(run, range(pieces))
        return out

    def estimate(self, keys) -> np.ndarray:
        mech = self.mechanism
        return mech.l * self.correlations(keys) / (2 * mech.keep_probability - 1)


MECHANISM = ShMechanism
