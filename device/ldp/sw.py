"""Square Wave on a grid of cells (spec §3.3 id 16; Li et al., SIGMOD 2020, §4).

The window channel at the input bin x * bins // N (D = bins - 1, L = window). `value` is the
grid point x of the reading (spec §1.1).
"""
import struct
from os import urandom

from .errors import ConfigError
from .numeric import check_grid, window_cell, window_threshold
from .report import Report, param


class Sw(Report):
    name = "sw"
    words = 2

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        check_grid(domain_size)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 2)
        self.bins = param(params, "bins", 2, 1024)
        self.width = param(params, "window", 1, 2 * self.bins)
        if self.bins > domain_size:
            raise ConfigError("params.bins", "at most the domain's %d grid points" % domain_size)
        self.t_in = window_threshold(eps_milli, self.width, self.bins - 1, "params.window")

    def report(self, x, nonce, rand=urandom):
        if not 0 <= x < self.domain_size:
            raise ValueError("grid point out of the domain")
        struct.pack_into("<H", self.buf, 12, window_cell(rand(8), 0, x * self.bins // self.domain_size,
                                                         self.t_in, self.width, self.bins - 1))
        return self._finish(nonce)


MECHANISM = Sw
