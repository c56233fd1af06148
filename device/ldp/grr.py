"""GRR, generalized randomized response (spec §3 id 1; Wang et al., USENIX Security 2017, §4.1).

y = x if w0 < T_grr(d), else r = bucket(w1, d-1), y = r + (r >= x). `value` is the item's
index in the domain (for an int domain the item itself).
"""
import struct
from os import urandom

from .hash import below, word_bucket
from .report import Report
from .thresholds import t_grr
from .errors import ConfigError


class Grr(Report):
    name = "grr"
    words = 2

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        if not 2 <= domain_size <= 0xFFFFFFFF:
            raise ConfigError("domain.size", "GRR needs 2 <= d < 2^32")
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 4)
        self.t_keep = t_grr(eps_milli, domain_size)

    def report(self, x, nonce, rand=urandom):
        if not 0 <= x < self.domain_size:
            raise ValueError("item index out of the domain")
        w = rand(8)
        y = x
        if not below(w, 0, self.t_keep):
            r = word_bucket(w, 1, self.domain_size - 1)
            y = r + (r >= x)
        struct.pack_into("<I", self.buf, 12, y)
        return self._finish(nonce)


MECHANISM = Grr
