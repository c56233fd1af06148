"""Apple count-mean sketch, CMS (protocol_spec/v2 §3, id 5).

Apple Differential Privacy Team, "Learning with Privacy at Scale" (2017), client A_client-CMS
and server A_server-CMS; restated in LDPLCM (Zhang, Lin, Yin, "Local Differentially Private Frequency Estimation based on Learned Sketches")
§3.2.1, Alg. 2 line 2 and the Apple-CMS variance after Theorem 3.

Client: row j = bucket(w0, k), column c = bucket(Hs(key, salt + j), m); the vector is -1 except
+1 at c; every bit flips iff w < T_flip (q = T_flip / 2^32, realised exactly).

Aggregator state (integers, linear): `row_counts[j]` reports in row j, `ones[j, i]` 1 bits at
(j, i). Apple's x~ = k (c_eps/2 v + 1/2) is linear in them, so the estimate is computed from the
state at query time with the REALISED probabilities, which makes it exactly unbiased over random
hash functions:
    X_j(d) = (ones[j, h_j(d)] - q row_counts[j]) / (1 - 2q)          (Apple: c_eps = 1/(1-2q))
    S(d)   = sum_j X_j(d) / (k pi_j)                                 (pi_j = cnt_k(j) / 2^32)
    f^(d)  = (S(d) - n gamma) / (1 - gamma)                          (gamma = sum_c P(c)^2)
For k and m powers of two, pi_j = 1/k and gamma = 1/m: Apple's m/(m-1) ((1/k) sum_j X_j - n/m).

This module also holds the sketch arithmetic CMS, HCMS, SH and LCM share (row weights,
collision probability, the row gather). The generic helpers it used to define live in
`base.py` and are imported here so they stay importable from it.
"""
import struct

import numpy as np

from .. import protocol
from ..kernels import THREADS, ffi, lib, parallel_map, ptr
from .base import (W, IntParam, IntStateSketch, Mechanism, as_keys, bitmap_bytes, body_ptr,
                   body_u16, check_words, pack_bitmap, padding_mask, report_array, run_chunks)

DEFAULT_K = 256
DEFAULT_M = 1024
PARALLEL_MIN = 1 << 15
"""Batches of at least this many reports are accumulated on THREADS threads."""


# --- sketch arithmetic shared by the sketch mechanisms ---------------------------------------

def bucket_probabilities(n: int) -> np.ndarray:
    """P(bucket(w, n) = r) = cnt_n(r) / 2^32 for every r (spec §2)."""
    r = np.arange(n + 1, dtype=np.int64)
    edges = -((-r * W) // n)  # ceil(r W / n)
    return np.diff(edges) / float(W)


def collision_probability(n: int) -> float:
    """gamma = sum_r P(r)^2: the chance two independent uniform 32-bit hashes share a bucket."""
    p = bucket_probabilities(n)
    return float(np.sum(p * p))


def row_weights(k: int) -> np.ndarray:
    """1 / (k pi_j): reweights row j so the row choice averages out exactly (1 if k = 2^a)."""
    return 1.0 / (k * bucket_probabilities(k))


def row_weight_moment(k: int) -> float:
    """A = (1/k^2) sum_j 1/pi_j = E_J[(1/(k pi_J))^2] (1 if k is a power of two)."""
    return float(np.sum(1.0 / bucket_probabilities(k)) / (k * k))


def accumulate_parallel(arr: np.ndarray, shapes: dict, kernel) -> dict:
    """Fold report rows into fresh int64 arrays of `shapes`, one set per thread, summed.

    `kernel(part, states)` runs one C call over the (contiguous) rows `part`."""
    n = arr.shape[0]
    pieces = THREADS if n >= PARALLEL_MIN else 1
    bounds = np.linspace(0, n, pieces + 1).astype(int)

    def run(i):
        states = {name: np.zeros(shape, np.int64) for name, shape in shapes.items()}
        kernel(arr[bounds[i]:bounds[i + 1]], states)
        return states

    results = parallel_map(run, range(pieces))
    total = results[0]
    for other in results[1:]:
        for name in total:
            total[name] += other[name]
    return total


# --- CMS --------------------------------------------------------------------------------------

class CmsMechanism(Mechanism):
    """Apple CMS: `k` hash rows (1..65536), sketch width `m` (2..65536).

    perturb_batch(keys, rng): keys is a 1-D array of u32 item keys (one item per user)."""

    name = "cms"

    PARAMS = {"k": IntParam(DEFAULT_K, 1, 65536), "m": IntParam(DEFAULT_M, 2, 65536)}

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        self.t_flip = protocol.t_flip(eps_milli)

    @property
    def body_size(self) -> int:
        return 2 + bitmap_bytes(self.m)

    @property
    def random_words(self) -> int:
        return 1 + self.m

    @property
    def flip_probability(self) -> float:
        """q = T_flip / 2^32, the realised probability that a bit is flipped."""
        return self.t_flip / W

    # --- client face ----------------------------------------------------------------------
    def _reference(self, key, high: bool, words, seq: int) -> bytes:
        w = check_words(words, self.random_words)
        j = protocol.bucket(w[0], self.k)
        c = -1 if high else protocol.bucket(
            protocol.keyed_hash(key, protocol.row_seed(self.salt, j)), self.m)
        bits = [(i == c) != (w[1 + i] < self.t_flip) for i in range(self.m)]
        return self.header(seq) + struct.pack("<H", j) + pack_bitmap(bits)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        return self._reference(int(as_keys(value)[0]), False, words, seq)

    def _run(self, keys: np.ndarray, high, words: np.ndarray, out: np.ndarray, row: int):
        lib.ldp_cms_perturb(ptr(keys), ffi.NULL if high is None else ptr(high), keys.size,
                            self.salt, self.k, self.m, self.t_flip, ptr(words),
                            body_ptr(out, row), out.shape[1])

    def _c_one(self, key, high, words, seq: int) -> bytes:
        w = np.array(check_words(words, self.random_words), np.uint32)
        out = report_array(self, 1, seq)
        flags = None if high is None else np.array([1 if high else 0], np.uint8)
        self._run(as_keys(key), flags, w, out, 0)
        return out.tobytes()

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self._c_one(value, None, words, seq)

    def _perturb(self, keys, rng, seq_start: int, high=None) -> np.ndarray:
        keys = as_keys(keys)
        if high is not None:
            high = np.ascontiguousarray(high, dtype=bool).astype(np.uint8)
            if high.shape != keys.shape:
                raise ValueError("high has shape %s, keys %s" % (high.shape, keys.shape))
        out = report_array(self, keys.size, seq_start)

        def kernel(start, stop, words):
            self._run(keys[start:stop], None if high is None else high[start:stop], words, out,
                      start)

        run_chunks(self, rng, keys.size, kernel)
        return out

    def perturb_batch(self, keys, rng, seq_start: int = 0) -> np.ndarray:
        return self._perturb(keys, rng, seq_start)

    def validate_bodies(self, bodies: np.ndarray):
        return [("j", body_u16(bodies, 0) >= self.k),
                ("padding", padding_mask(bodies[:, 2:], self.m))]

    # --- aggregator face ------------------------------------------------------------------
    def new_sketch(self) -> "CmsSketch":
        return CmsSketch(self)

    def _noise_terms(self):
        """(V, A, gamma): per-report flip variance q(1-q)/(1-2q)^2 (LDPLCM Lemma 1's
        (c_eps^2 - 1)/4 with realised q), row-weight moment, column collision probability."""
        q = self.flip_probability
        v = q * (1 - q) / (1 - 2 * q) ** 2
        return v, row_weight_moment(self.k), collision_probability(self.m)

    def item_variances(self, n: int, freqs=None) -> np.ndarray:
        """Exact variance of f^(d)/n averaged over random hash functions, row choices and flips
        (Apple-CMS variance after LDPLCM Theorem 3, with realised q, pi_j, gamma):
            Var S = n A V + F (A - 1) + (n - F)(gamma A - gamma(1-gamma)/k - gamma^2)
                    + gamma(1-gamma)/k * sum_{d' != d} F(d')^2,      Var f^ = Var S / (1-gamma)^2
        (F = n f_d; with k = 2^a, A = 1 and the collision terms are Apple's
        (n-F)/m (1-1/m)(1-1/k) + (1/(km) - 1/(km^2)) sum F'^2), for every item of `freqs`
        (true fractions); without freqs one item with f = 0 and sum F'^2 = 0."""
        v, a, g = self._noise_terms()
        f = np.zeros(1) if freqs is None else np.asarray(freqs, np.float64).ravel()
        sq = float(np.sum(f * f)) if freqs is not None else 0.0
        var_s = (n * a * v + n * f * (a - 1) + n * (1 - f) * (g * a - g * (1 - g) / self.k - g * g)
                 + g * (1 - g) / self.k * n * n * (sq - f * f))
        return var_s / (1 - g) ** 2 / (n * n)


def gather(mech, matrix: np.ndarray, keys) -> np.ndarray:
    """sum_j matrix[j, h_j(key)] / (k pi_j) for every key of a (k, m) int64 matrix (one C call)."""
    keys = as_keys(keys)
    matrix = np.ascontiguousarray(matrix, dtype=np.int64)
    weights = row_weights(mech.k)
    out = np.empty(keys.size, np.float64)
    if keys.size:
        lib.ldp_sketch_gather(ptr(matrix), mech.k, mech.m, mech.salt, ptr(weights), ptr(keys),
                              keys.size, ptr(out))
    return out


class CmsSketch(IntStateSketch):
    """`row_counts` (k,) and `ones` (k, m), int64. estimate(keys) -> unbiased counts."""

    STATE = ("row_counts", "ones")

    def __init__(self, mechanism: CmsMechanism):
        super().__init__(mechanism)
        self.row_counts = np.zeros(mechanism.k, np.int64)
        self.ones = np.zeros((mechanism.k, mechanism.m), np.int64)

    def _accumulate(self, part: np.ndarray, states: dict):
        mech = self.mechanism
        if part.shape[0]:
            lib.ldp_cms_accumulate(body_ptr(part), part.shape[0], part.shape[1], mech.k, mech.m,
                                   ptr(states["row_counts"]), ptr(states["ones"]))

    def _fold(self, arr):
        if arr.shape[0] < PARALLEL_MIN:
            self._accumulate(arr, {"row_counts": self.row_counts, "ones": self.ones})
        else:
            add = accumulate_parallel(arr, {"row_counts": self.row_counts.shape,
                                            "ones": self.ones.shape}, self._accumulate)
            self.row_counts += add["row_counts"]
            self.ones += add["ones"]

    def row_sums(self, keys) -> np.ndarray:
        """S(d) = sum_j X_j(d) / (k pi_j): flip-debiased, its expectation over hash functions
        is F(d) + gamma (n_low - F(d)), n_low = users whose vector has a +1 (all, for CMS)."""
        q = self.mechanism.flip_probability
        base = q * float(np.dot(row_weights(self.mechanism.k), self.row_counts))
        return (gather(self.mechanism, self.ones, keys) - base) / (1 - 2 * q)

    def estimate(self, keys) -> np.ndarray:
        """Apple A_server-CMS with realised probabilities: (S - n gamma) / (1 - gamma)."""
        g = collision_probability(self.mechanism.m)
        return (self.row_sums(keys) - self.n * g) / (1 - g)


MECHANISM = CmsMechanism


# --- vectors (CMS and LCM) -------------------------------------------------------------------
