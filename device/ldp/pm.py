"""Piecewise Mechanism on a grid of cells (spec §3.3 id 14; Wang et al., ICDE 2019, §III-B).

The window channel at position u x: y = u x + bucket(w1, L) if w0 < T_win, else r + L [r >=
u x] with r = bucket(w1, D). `value` is the grid point x of the reading (spec §1.1).
"""
from os import urandom

from .numeric import check_grid, pm_shape, put_u32, window_cell, window_threshold
from .report import Report


class Pm(Report):
    name = "pm"
    words = 2

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        check_grid(domain_size)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 4)
        self.u, self.span, self.width = pm_shape(eps_milli, domain_size)
        self.t_in = window_threshold(eps_milli, self.width, self.span)

    def report(self, x, nonce, rand=urandom):
        if not 0 <= x < self.domain_size:
            raise ValueError("grid point out of the domain")
        put_u32(self.buf, 12, window_cell(rand(8), 0, self.u * x, self.t_in, self.width,
                                          self.span))
        return self._finish(nonce)


MECHANISM = Pm
