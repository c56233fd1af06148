"""OLH, optimized local hashing (protocol_spec/v2 §3, id 2).

Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency Estimation"
(USENIX Security 2017) §4.4: the device reports (seed, GRR_g(bucket(Hs(key, seed), g))); an
item v is supported by a report iff bucket(Hs(v, seed), g) == y, so p* = P(keep) and, with the
hash modelled as random, q* = 1/g. Default g = round(e^eps) + 1 (their optimum e^eps + 1).
Restated in [NH] = Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate
Frequency Oracles under Local Differential Privacy" (NDSS 2020) §2.4.

Decoding is the O(n·d) loop of `ldp_olh_support` (C), run on `kernels.THREADS` threads over
disjoint item ranges.
"""
import math
from fractions import Fraction

import numpy as np

from .. import kernels, protocol
from .base import W, IntParam, body_ptr, body_u16
from .domain import DomainMechanism, SupportSketch, u32_keys

G_MAX = 65536
# Reports decoded per prepared chunk (12 bytes of decoder arrays each).
DECODE_CHUNK = 1 << 20
# Below this many (report, item) pairs one thread is faster than two.
THREAD_MIN_PAIRS = 1 << 18


def default_g(eps_milli: int) -> int:
    """round(e^eps) + 1, clamped to the protocol's [2, 65536]."""
    return min(max(int(round(math.exp(eps_milli / 1000.0))) + 1, 2), G_MAX)


G_PARAM = IntParam(default_g, 2, G_MAX)


def grr_over(v: int, g: int, t_keep: int, w_keep: int, w_other: int) -> int:
    """Spec §3 GRR over [0, g): keep v iff w_keep < T, else r = bucket(w_other, g-1), r + (r>=v)."""
    if w_keep < t_keep:
        return v
    r = protocol.bucket(w_other, g - 1)
    return r + (1 if r >= v else 0)


def item_spans(d: int, pairs: int):
    """Item ranges for the decoder threads."""
    threads = kernels.THREADS if pairs >= THREAD_MIN_PAIRS else 1
    return kernels.spans(d, max(1, -(-d // threads)))


def olh_support(arr: np.ndarray, g: int, keys: np.ndarray, support: np.ndarray):
    """support[v] += #reports in `arr` (validated, contiguous) supporting keys[v]."""
    n, stride = arr.shape
    keys = np.ascontiguousarray(keys, dtype=np.uint32)
    for start, stop in kernels.spans(n, DECODE_CHUNK):
        m = stop - start
        rseed, lo, width = (np.empty(m, np.uint32) for _ in range(3))
        kernels.lib.ldp_olh_prepare(body_ptr(arr, start), m, stride, g, kernels.ptr(rseed),
                                    kernels.ptr(lo), kernels.ptr(width))

        def run(part, m=m, rseed=rseed, lo=lo, width=width):
            a, b = part
            kernels.lib.ldp_olh_support(kernels.ptr(rseed), kernels.ptr(lo), kernels.ptr(width), m,
                                        kernels.ptr(keys, 4 * a), b - a, kernels.ptr(support, 8 * a))

        kernels.parallel_map(run, item_spans(keys.size, m * keys.size))


class LocalHashMechanism(DomainMechanism):
    """What OLH and FLH share: the device hashes its key into g buckets and reports GRR over
    them (T_grr(g)) with a u32 seed field and a u16 y (6-byte body, 3 words)."""

    body_size = 6
    random_words = 3

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        self.t_keep = protocol.t_grr(eps_milli, self.g)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self.one_report(protocol.item_key(value), words, seq, self._kernel)

    def perturb_batch(self, keys, rng, seq_start: int = 0) -> np.ndarray:
        return self.run_batch(u32_keys(keys), rng, seq_start, self._kernel)

    def support_pq(self):
        """p* = T_grr(g)/2^32 exactly. q* = 1/g under the random-hash model (Wang et al. §4.4):
        with probability 1/g item v shares x's bucket (supported w.p. p*), otherwise it is
        supported w.p. (1-p*)/(g-1); p*/g + (1-1/g)(1-p*)/(g-1) = 1/g."""
        return Fraction(self.t_keep, W), Fraction(1, self.g)


class OlhMechanism(LocalHashMechanism):
    """OLH with g hash buckets (params: g)."""

    name = "olh"
    PARAMS = {"g": G_PARAM}
    estimate_dependence = "independent"  # a fresh hash seed per report (significance.py)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        key = protocol.item_key(value)
        w0, w1, w2 = self.check_words(words)
        v = protocol.bucket(protocol.keyed_hash(key, w0), self.g)
        y = grr_over(v, self.g, self.t_keep, w1, w2)
        return self.header(seq) + w0.to_bytes(4, "little") + y.to_bytes(2, "little")

    def _kernel(self, keys, n, words, out, stride):
        return kernels.lib.ldp_olh_perturb(keys, n, self.g, self.t_keep, words, out, stride)

    def validate_bodies(self, bodies: np.ndarray):
        return [("y", body_u16(bodies, 4) >= self.g)]

    def new_sketch(self) -> "OlhSketch":
        return OlhSketch(self)


class OlhSketch(SupportSketch):
    """support[v] over the domain; `update` is the O(n·d) decode."""

    def _fold(self, arr):
        olh_support(arr, self.mechanism.g, self.mechanism.domain_key_array(), self.support)


MECHANISM = OlhMechanism
