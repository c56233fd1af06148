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
from .base import (W, body_ptr, body_u16, body_u32, contiguous_bodies,  # noqa: F401
                   fill_headers, parse_case, parse_cases_for, report_case)
from .domain import DomainMechanism, DomainSketch, SupportSketch  # noqa: F401
from .domain import item_keys as as_keys  # noqa: F401  (the name it had here)


class GrrMechanism(DomainMechanism):
    """GRR over the d domain items: y = x w.p. T/2^32, else uniform among the other d-1."""

    name = "grr"

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.domain_size >= W:
            raise ValueError("GRR domain must be < 2^32 items")
        self.t_keep = protocol.t_grr(eps_milli, self.domain_size)

    @property
    def body_size(self) -> int:
        return 4

    @property
    def random_words(self) -> int:
        return 2

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


def vector_cases():
    reports, parses = [], []
    configs = [(500, 2, 0), (1000, 5, 7), (2500, 8, 0xDEADBEEF), (5000, 1024, 42), (100, 3, 1)]
    seq = 0
    for eps_milli, d, cid in configs:
        mech = GrrMechanism(eps_milli, d, salt=0x1234, campaign_id=cid, phase=1)
        t = mech.t_keep
        for x, w0, w1 in [(0, 0, 0), (d - 1, t - 1, W - 1), (d // 2, t, 0), (1, W - 1, W - 1),
                          (d - 1, t, W // 3)]:
            words = [w0, w1]
            seq += 1
            reports.append(report_case(mech, x, words, seq))
        valid = mech.reference_report(d - 1, [t, W - 1], 5)
        bad_y = valid[:protocol.HEADER_SIZE] + d.to_bytes(4, "little")
        parses += parse_cases_for(mech, valid, [("y", bad_y)])
        top_y = valid[:protocol.HEADER_SIZE] + (d - 1).to_bytes(4, "little")
        parses.append(parse_case(mech, top_y))
    mech2 = GrrMechanism(1000, 5, campaign_id=3, phase=2)
    valid = mech2.reference_report(4, [0, 0], 9)
    parses += parse_cases_for(mech2, valid, [("y", valid[:12] + b"\xff\xff\xff\xff")])
    return reports, parses
