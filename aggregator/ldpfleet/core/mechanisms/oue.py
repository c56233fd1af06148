"""OUE, optimized unary encoding (protocol_spec/v2 §3, id 4).

Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency Estimation"
(USENIX Security 2017) §4.3; restated in [NH] = Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020)
§2.3, Eq. 5-6. The true item's bit is 1 w.p. p* = 2^31/2^32 = 1/2 exactly, every other bit
w.p. q* = T_oue_q/2^32 exactly, so the estimator is exactly unbiased.
"""
from fractions import Fraction

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, bitmap_bytes, body_ptr, pack_bitmap, padding_mask
from .domain import DomainMechanism, SupportSketch

# A bitmap of d bits needs d random words per report; keep the C kernel's word buffer sane.
D_MAX = 1 << 24


class OueMechanism(DomainMechanism):
    """OUE over the d domain items (no parameters)."""

    name = "oue"
    estimate_dependence = "independent"  # every bit flipped on its own (significance.py)

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.domain_size > D_MAX:
            raise ConfigError("domain.size", "OUE domain of %d items exceeds %d"
                              % (self.domain_size, D_MAX))
        self.t_p = protocol.T_OUE_P
        self.t_q = protocol.t_oue_q(eps_milli)

    @property
    def body_size(self) -> int:
        return bitmap_bytes(self.domain_size)

    @property
    def random_words(self) -> int:
        return self.domain_size

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        x = self.key_index(value)
        words = self.check_words(words)
        bits = [w < (self.t_p if i == x else self.t_q) for i, w in enumerate(words)]
        return self.header(seq) + pack_bitmap(bits)

    def _kernel(self, x, n, words, out, stride):
        return kernels.lib.ldp_oue_perturb(x, n, self.domain_size, self.t_p, self.t_q, words,
                                           out, stride)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self.one_report(self.key_index(value), words, seq, self._kernel)

    def perturb_batch(self, keys, rng, seq_start: int = 0) -> np.ndarray:
        return self.run_batch(self.key_indices(keys), rng, seq_start, self._kernel)

    def validate_bodies(self, bodies: np.ndarray):
        return [("padding", padding_mask(bodies, self.domain_size))]

    def new_sketch(self) -> "OueSketch":
        return OueSketch(self)

    def support_pq(self):
        """p* = 1/2, q* = T_oue_q / 2^32, both exact."""
        return Fraction(self.t_p, W), Fraction(self.t_q, W)


class OueSketch(SupportSketch):
    """support[v] = number of reports with bit v set."""

    def _fold(self, arr):
        if kernels.lib.ldp_oue_count(body_ptr(arr), arr.shape[0], arr.shape[1],
                                     self.mechanism.domain_size, kernels.ptr(self.support)) != 0:
            raise MemoryError("OUE bit counting could not allocate its scratch lanes")


MECHANISM = OueMechanism
