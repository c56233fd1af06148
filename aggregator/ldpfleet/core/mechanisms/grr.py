"""GRR, generalized randomized response (protocol_spec/v2 §3, id 1).

Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency Estimation"
(USENIX Security 2017) §4.1 ("direct encoding"); restated in [NH] =
Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020) §2.2, Eq. 1-3.

The pieces GRR, OLH, FLH and OUE share (`DomainMechanism`, `SupportSketch`, ...) live in
`domain.py`, the generic helpers in `base.py`; the names this module used to define are
imported here so they stay importable from it.
"""
from fractions import Fraction

import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, body_ptr, body_u32
from .domain import DomainMechanism, SupportSketch


class GrrMechanism(DomainMechanism):
    """GRR over the d domain items: y = x w.p. T/2^32, else uniform among the other d-1."""

    name = "grr"

    body_size = 4
    random_words = 2

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.domain_size >= W:
            raise ConfigError("domain.size", "GRR domain must be < 2^32 items")
        self.t_keep = protocol.t_grr(eps_milli, self.domain_size)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        x = self.key_index(value)
        w0, w1 = self.check_words(words)
        y = x
        if w0 >= self.t_keep:
            r = protocol.bucket(w1, self.domain_size - 1)
            y = r + (1 if r >= x else 0)
        return self.header(seq) + y.to_bytes(4, "little")

    def _kernel(self, x, n, words, out, stride):
        return kernels.lib.ldp_grr_perturb(x, n, self.domain_size, self.t_keep, words, out, stride)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        return self.one_report(self.key_index(value), words, seq, self._kernel)

    def perturb_batch(self, keys, rng, seq_start: int = 0) -> np.ndarray:
        return self.run_batch(self.key_indices(keys), rng, seq_start, self._kernel)

    def validate_bodies(self, bodies: np.ndarray):
        return [("y", body_u32(bodies, 0) >= self.domain_size)]

    def new_sketch(self) -> "GrrSketch":
        return GrrSketch(self)

    def support_pq(self):
        """p* = T/2^32 exactly; q* = (1-p*)/(d-1), the mean over the other items (each other
        item gets (1-p*)·cnt_{d-1}(r)/2^32, within one word in 2^32 of it)."""
        p = Fraction(self.t_keep, W)
        return p, (1 - p) / (self.domain_size - 1)


class GrrSketch(SupportSketch):
    def _fold(self, arr):
        kernels.lib.ldp_grr_count(body_ptr(arr), arr.shape[0], arr.shape[1],
                                  self.mechanism.domain_size, kernels.ptr(self.support))


MECHANISM = GrrMechanism


def boundary_words(t: int):
    """Words on both sides of a threshold plus the extremes."""
    return [0, t - 1, t, W - 1]
