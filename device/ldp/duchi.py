"""Duchi's one-bit mean (spec §3.3 id 13; Duchi, Jordan, Wainwright, JASA 2018).

y = 1 iff w0 < T(x) = T(0) + s x: `value` is the grid point x of the reading (spec §1.1).
"""
from os import urandom

from .numeric import check_grid, duchi_bit, duchi_slope
from .report import Report


class Duchi(Report):
    name = "duchi"
    words = 1

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        check_grid(domain_size)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 1)
        self.slope, self.base = duchi_slope(eps_milli, domain_size)

    def report(self, x, nonce, rand=urandom):
        if not 0 <= x < self.domain_size:
            raise ValueError("grid point out of the domain")
        self.buf[12] = duchi_bit(rand(4), 0, self.base, self.slope, x)
        return self._finish(nonce)


MECHANISM = Duchi
