"""FLH, fast local hashing with k' public hash functions (protocol_spec/v2 §3, id 3).

Cormode, Maddock, Maple, "Frequency Estimation under Local Differential Privacy" (VLDB 2021)
§4: as OLH, but the device picks one of k' public seeds, seed_s = (salt + s) mod 2^32
(spec §1 row seeds), s = bucket(w0, k'). The aggregator keeps a k' x g table C[s, y] of report
counts (O(1) per report) and estimates an item's support as sum_s C[s, bucket(Hs(v, seed_s), g)]
(O(k') per item, `ldp_flh_support`). The k' x d bucket table is recomputed on the fly instead
of stored: at d = 42178 and k' = 10^4 it would take 0.8 GB, while the hash is as cheap as the
lookup.

Accuracy (random-hash model): unbiased over the draw of the public seeds; for a fixed seed set
an item's estimate is shifted by its hash collisions with other items. `variance` includes that
term (derived in `FlhMechanism.variance`).
"""
from fractions import Fraction

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, IntParam, body_ptr, body_u16, body_u32
from .domain import DomainSketch, u32_keys
from .olh import G_PARAM, LocalHashMechanism, grr_over, item_spans

KP_DEFAULT = 10000
# Upper bound on k' * g, the number of int64 cells of the aggregator's table (256 MiB).
TABLE_MAX = 1 << 25


class FlhMechanism(LocalHashMechanism):
    """FLH with g buckets and k' public seeds (params: g, kp)."""

    name = "flh"
    PARAMS = {"g": G_PARAM, "kp": IntParam(KP_DEFAULT, 1, W - 1)}

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.kp * self.g > TABLE_MAX:
            raise ConfigError("kp", "k' x g = %d cells exceeds the table limit %d"
                              % (self.kp * self.g, TABLE_MAX))

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        key = protocol.item_key(value)
        w0, w1, w2 = self.check_words(words)
        s = protocol.bucket(w0, self.kp)
        v = protocol.bucket(protocol.keyed_hash(key, protocol.row_seed(self.salt, s)), self.g)
        y = grr_over(v, self.g, self.t_keep, w1, w2)
        return self.header(seq) + s.to_bytes(4, "little") + y.to_bytes(2, "little")

    def _kernel(self, keys, n, words, out, stride):
        return kernels.lib.ldp_flh_perturb(keys, n, self.g, self.kp, self.salt, self.t_keep,
                                           words, out, stride)

    def validate_bodies(self, bodies: np.ndarray):
        return [("seed_index", body_u32(bodies, 0) >= self.kp),
                ("y", body_u16(bodies, 4) >= self.g)]

    def new_sketch(self) -> "FlhSketch":
        return FlhSketch(self)

    def item_variances(self, n: int, freqs) -> np.ndarray:
        """OLH's variance ([NH] Eq. 5 with p*, q* = 1/g) plus the public-seed collision term.

        Derivation (random-hash model, seeds independent): for a fixed seed set let c_vx be the
        fraction of the k' seeds on which v and x share a bucket. A user holding x != v then
        supports v w.p. q_vx = c_vx p + (1-c_vx)(1-p)/(g-1), so E[est_v | seeds] =
        n_v + g/(g-1) * sum_{x!=v} n_x (c_vx - 1/g). With Var(c_vx) = (g-1)/(g^2 k') and the
        c_vx uncorrelated across x, the law of total variance gives, in counts,
            [n_v p(1-p) + (n-n_v)(1/g)(1-1/g)] / (p-1/g)^2 + sum_{x!=v} n_x (n_x - 1) / ((g-1) k').
        As a fraction of n the second term is sum_{x!=v} f_x (f_x - 1/n) / ((g-1) k'), with
        `freqs` taken as the whole distribution (unlisted items add nothing to the sum)."""
        p = float(Fraction(self.t_keep, W))
        g = self.g
        f = np.asarray(freqs, dtype=np.float64).ravel()
        others = (np.sum(f * f) - f * f) - (np.sum(f) - f) / n
        base = (f * p * (1 - p) + (1 - f) * (1 / g) * (1 - 1 / g)) / (n * (p - 1 / g) ** 2)
        return base + others / ((g - 1) * self.kp)

    def variance(self, n: int, freqs=None) -> float:
        """Mean of `item_variances` over `freqs`; without `freqs`, an item of frequency 0
        among d - 1 others of frequency 1/d (the collision term of a uniform distribution)."""
        if freqs is not None:
            return float(np.mean(self.item_variances(n, freqs)))
        d = self.domain_size
        return float(self.item_variances(n, np.r_[0.0, np.full(d - 1, 1.0 / d)])[0])


class FlhSketch(DomainSketch):
    """counts[s, y]: reports with seed index s and value y (k' x g, int64)."""

    STATE = ("counts",)

    def __init__(self, mechanism: FlhMechanism):
        super().__init__(mechanism)
        self.counts = np.zeros((mechanism.kp, mechanism.g), np.int64)

    def _fold(self, arr):
        kernels.lib.ldp_flh_count(body_ptr(arr), arr.shape[0], arr.shape[1], self.mechanism.kp,
                                  self.mechanism.g, kernels.ptr(self.counts))

    def support(self, keys) -> np.ndarray:
        """Reports supporting each key: sum_s counts[s, bucket(Hs(key, seed_s), g)]."""
        m = self.mechanism
        keys = np.ascontiguousarray(u32_keys(keys))
        out = np.zeros(keys.size, np.int64)

        def run(part):
            a, b = part
            kernels.lib.ldp_flh_support(kernels.ptr(self.counts), m.kp, m.g, m.salt,
                                        kernels.ptr(keys, 4 * a), b - a, kernels.ptr(out, 8 * a))

        kernels.parallel_map(run, item_spans(keys.size, m.kp * keys.size))
        return out

    def estimate(self, keys) -> np.ndarray:
        """(support - n/g) / (p* - 1/g): unbiased over the public seeds (module docstring;
        p*, q* as OLH, q* averaged over the public seeds)."""
        m = self.mechanism
        return self.support_estimate(self.support(m.domain_key_array()[m.key_indices(keys)]))

    def estimate_all(self) -> np.ndarray:
        """Estimated counts of every domain item, in domain order."""
        return self.support_estimate(self.support(self.mechanism.domain_key_array()))


MECHANISM = FlhMechanism
