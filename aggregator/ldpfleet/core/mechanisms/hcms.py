"""Apple Hadamard count-mean sketch, HCMS (protocol_spec/v2 §3, id 6).

Apple Differential Privacy Team, "Learning with Privacy at Scale" (2017), A_client-HCMS /
A_server-HCMS; restated in LDPLCM (Zhang, Lin, Yin, "Local Differentially Private Frequency Estimation based on Learned Sketches") §5.1.

Client: row j = bucket(w0, k), c = bucket(Hs(key, salt + j), m), Hadamard row l = bucket(w1, m)
(m a power of two, so l is exactly uniform), h = (-1)^popcount(l & c), sign = h w.p.
p = T_rr / 2^32, else -h.

Aggregator state: `sums[j, l]` = sum of signs (int64, linear). At estimate time each row goes
through the fast Walsh-Hadamard transform (exact in int64): Wt[j, c] = sum_l H[l, c] sums[j, l]
has expectation (2p - 1) #{users in row j with h_j(item) = c}, so with the realised p
    X_j(d) = Wt[j, h_j(d)] / (2p - 1)                         (Apple: c_eps = 1/(2p - 1))
    f^(d)  = (sum_j X_j(d) / (k pi_j) - n/m) / (1 - 1/m)      (Apple: m/(m-1)(... - n/m))
is exactly unbiased over random hash functions (pi_j = cnt_k(j)/2^32; 1/k for k = 2^a).
"""
import numpy as np

from .. import protocol
from ..errors import ConfigError
from ..kernels import lib, ptr
from .base import (W, IntParam, IntStateSketch, Mechanism, as_keys, body_ptr, body_u16,
                   check_words, report_array, run_chunks)
from .cms import DEFAULT_K, DEFAULT_M, gather, row_weight_moment


class HcmsMechanism(Mechanism):
    """Apple HCMS: `k` rows (1..65536), width `m` (a power of two, 2..65536).

    perturb_batch(keys, rng): keys is a 1-D array of u32 item keys."""

    name = "hcms"

    PARAMS = {"k": IntParam(DEFAULT_K, 1, 65536), "m": IntParam(DEFAULT_M, 2, 65536)}
    body_size = 5
    random_words = 3

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.m & (self.m - 1):
            raise ConfigError("m", "HCMS needs a power of two, got %d" % self.m)
        self.t_rr = protocol.t_rr(eps_milli)

    @property
    def keep_probability(self) -> float:
        """p = T_rr / 2^32, the realised probability that the Hadamard sign is kept."""
        return self.t_rr / W

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        key = int(as_keys(value)[0])
        w0, w1, w2 = check_words(words, 3)
        j = protocol.bucket(w0, self.k)
        c = protocol.bucket(protocol.keyed_hash(key, protocol.row_seed(self.salt, j)), self.m)
        l = protocol.bucket(w1, self.m)
        h = -1 if bin(l & c).count("1") % 2 else 1
        sign = h if w2 < self.t_rr else -h
        return (self.header(seq) + j.to_bytes(2, "little") + l.to_bytes(2, "little")
                + bytes([1 if sign > 0 else 0]))

    def _run(self, keys, words, out, row):
        lib.ldp_hcms_perturb(ptr(keys), keys.size, self.salt, self.k, self.m, self.t_rr,
                             ptr(words), body_ptr(out, row), out.shape[1])

    def c_report(self, value, words, seq: int = 0) -> bytes:
        out = report_array(self, 1, seq)
        self._run(as_keys(value)[:1], np.array(check_words(words, 3), np.uint32), out, 0)
        return out.tobytes()

    def perturb_batch(self, keys, rng, seq_start: int = 0) -> np.ndarray:
        keys = as_keys(keys)
        out = report_array(self, keys.size, seq_start)
        run_chunks(self, rng, keys.size,
                   lambda start, stop, words: self._run(keys[start:stop], words, out, start))
        return out

    def validate_bodies(self, bodies: np.ndarray):
        return [("j", body_u16(bodies, 0) >= self.k), ("l", body_u16(bodies, 2) >= self.m),
                ("sign", bodies[:, 4] > 1)]

    def new_sketch(self) -> "HcmsSketch":
        return HcmsSketch(self)

    def item_variances(self, n: int, freqs=None) -> np.ndarray:
        """Exact variance of f^(d)/n over random hash functions, rows, Hadamard rows and flips
        (each report contributes +-1/(2p-1) / (k pi_J) to S, gamma = 1/m):
            Var S = n A/(2p-1)^2 - F - (n - F)(gamma(1-gamma)/k + gamma^2)
                    + gamma(1-gamma)/k * sum_{d' != d} F(d')^2,     Var f^ = Var S/(1-gamma)^2
        (A = E[(1/(k pi_J))^2], 1 for k = 2^a), for every item of `freqs`; without, f = 0."""
        c2 = 1.0 / (2 * self.keep_probability - 1) ** 2
        a, g = row_weight_moment(self.k), 1.0 / self.m
        f = np.zeros(1) if freqs is None else np.asarray(freqs, np.float64).ravel()
        sq = float(np.sum(f * f)) if freqs is not None else 0.0
        var_s = (n * a * c2 - n * f - n * (1 - f) * (g * (1 - g) / self.k + g * g)
                 + g * (1 - g) / self.k * n * n * (sq - f * f))
        return var_s / (1 - g) ** 2 / (n * n)


def fwht(matrix: np.ndarray) -> np.ndarray:
    """Walsh-Hadamard transform of every row (Sylvester order) in place; int64 or float64."""
    if matrix.ndim != 2 or not matrix.flags.c_contiguous:
        raise ValueError("fwht needs a C-contiguous 2-D array")
    m = matrix.shape[1]
    if m < 1 or m & (m - 1):
        raise ValueError("row length must be a power of two, got %d" % m)
    if matrix.dtype == np.int64:
        lib.ldp_fwht_i64(ptr(matrix), matrix.shape[0], m)
    elif matrix.dtype == np.float64:
        lib.ldp_fwht_f64(ptr(matrix), matrix.shape[0], m)
    else:
        raise TypeError("fwht works on int64 or float64, got %s" % matrix.dtype)
    return matrix


class HcmsSketch(IntStateSketch):
    """`sums` (k, m) int64: per (row, Hadamard index) sum of reported signs."""

    STATE = ("sums",)

    def __init__(self, mechanism: HcmsMechanism):
        super().__init__(mechanism)
        self.sums = np.zeros((mechanism.k, mechanism.m), np.int64)

    def _fold(self, arr):
        mech = self.mechanism
        lib.ldp_hcms_accumulate(body_ptr(arr), arr.shape[0], arr.shape[1], mech.k, mech.m,
                                ptr(self.sums))

    def transformed(self) -> np.ndarray:
        """The rows after the Walsh-Hadamard transform (a copy; the state stays linear)."""
        return fwht(self.sums.copy())

    def estimate(self, keys) -> np.ndarray:
        mech = self.mechanism
        g = 1.0 / mech.m
        s = gather(mech, self.transformed(), keys) / (2 * mech.keep_probability - 1)
        return (s - self.n * g) / (1 - g)


MECHANISM = HcmsMechanism
