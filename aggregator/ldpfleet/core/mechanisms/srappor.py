"""Sampling RAPPOR over a phase-2 candidate list, SRAPPOR (protocol_spec/v2 §3, id 8).

LDPMiner (Qin et al., CCS'16; Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy" (CCS 2016)) §4.2
Alg. 1 with RAPPOR as the randomizer, used in Phase II over the k_max candidates (§4.4;
trimming to candidates per Theorem 4.3's proof, padding with the dummy per §3).

Client (set of s distinct keys, L = max(l, s)): i = bucket(w0, L); the chosen element's bit is
its candidate index c, or the dummy bit kc if it is not a candidate or i >= s; each of the
kc + 1 bits then flips iff w < T_flip (q = T_flip / 2^32; RAPPOR's sensitivity-2 coin).

Aggregator state: counts[b] = reports with bit b set (int64, kc + 1). The estimate of candidate
c (LDPMiner Prop. 3 estimator, realised q):  f^(c) = l (counts[c] - q n) / (1 - 2q).

Parameters: `l` and `candidates` (the phase-2 list of item keys, distinct, 1..65536 of them;
default: the integer domain 0..d-1 for d <= 65536, i.e. a single-phase run over every item).
"""
import numpy as np

from .. import protocol
from ..errors import ConfigError
from ..kernels import lib, ptr
from .base import (W, IntParam, IntStateSketch, bitmap_bytes, body_ptr, check_words,
                   pack_bitmap, padding_mask)
from .sh import DEFAULT_L, MAX_CANDIDATES, CandidateMixin, SetMechanism, one_set, sampled_index



class SrapporMechanism(CandidateMixin, SetMechanism):
    """Sampling RAPPOR: set length `l` (1..65536), `candidates` (list of u32 keys)."""

    name = "srappor"

    PARAMS = {"l": IntParam(DEFAULT_L, 1, 65536)}
    default_phase = 2

    def __init__(self, eps_milli: int, domain_size: int, candidates=None, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if candidates is None and domain_size > MAX_CANDIDATES:
            raise ConfigError("candidates", "needed when the domain has more than %d items"
                              % MAX_CANDIDATES)
        self.set_candidates(candidates, domain_size)
        self.t_flip = protocol.t_flip(eps_milli)

    @property
    def body_size(self) -> int:
        return bitmap_bytes(self.kc + 1)

    @property
    def random_words(self) -> int:
        return self.kc + 2

    @property
    def flip_probability(self) -> float:
        return self.t_flip / W

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        keys = one_set(value)
        w = check_words(words, self.random_words)
        i = sampled_index(w[0], len(keys), self.l)
        bit = self.kc
        if i < len(keys):
            index = {int(c): b for b, c in enumerate(self.candidates)}
            bit = index.get(keys[i], self.kc)
        bits = [(b == bit) != (w[1 + b] < self.t_flip) for b in range(self.kc + 1)]
        return self.header(seq) + pack_bitmap(bits)

    def _kernel(self, sets, start, stop, words, out):
        lib.ldp_srappor_perturb(ptr(sets.keys), ptr(sets.offsets[start:]), stop - start, self.l,
                                ptr(self.sorted_candidates), ptr(self.sorted_index), self.kc,
                                self.t_flip, ptr(words), body_ptr(out, start), out.shape[1])

    def validate_bodies(self, bodies: np.ndarray):
        return [("padding", padding_mask(bodies, self.kc + 1))]

    def new_sketch(self) -> "SrapporSketch":
        return SrapporSketch(self)

    def item_variances(self, n: int, freqs=None) -> np.ndarray:
        """Exact variance of f^(c)/n (sets with s <= l): counts[c] is a sum of independent
        Bernoullis, mu1 = q + (1-2q)/l for the F = n f_c holders of c and q for the rest:
            Var = l^2 (F mu1 (1 - mu1) + (n - F) q (1 - q)) / (1 - 2q)^2
        (LDPMiner Prop. 3 with realised q), for every candidate fraction in `freqs`; without,
        f = 0."""
        q, l = self.flip_probability, self.l
        f = np.zeros(1) if freqs is None else np.asarray(freqs, np.float64).ravel()
        mu1 = q + (1 - 2 * q) / l
        var = l * l * (n * f * mu1 * (1 - mu1) + n * (1 - f) * q * (1 - q)) / (1 - 2 * q) ** 2
        return var / (n * n)


class SrapporSketch(IntStateSketch):
    """`counts` (kc + 1,) int64: reports with each bit set; the last is the dummy's."""

    STATE = ("counts",)

    def __init__(self, mechanism: SrapporMechanism):
        super().__init__(mechanism)
        self.counts = np.zeros(mechanism.kc + 1, np.int64)

    def _fold(self, arr):
        lib.ldp_srappor_accumulate(body_ptr(arr), arr.shape[0], arr.shape[1],
                                   self.mechanism.kc + 1, ptr(self.counts))

    def estimate(self, keys) -> np.ndarray:
        """l (counts[c] - q n) / (1 - 2q) per key; NaN for a key that is not a candidate
        (LDPMiner Phase II does not estimate non-candidates)."""
        mech = self.mechanism
        bits = mech.candidate_bits(keys)
        q = mech.flip_probability
        est = mech.l * (self.counts[bits] - q * self.n) / (1 - 2 * q)
        est[bits == mech.kc] = np.nan
        return est


MECHANISM = SrapporMechanism
