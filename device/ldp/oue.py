"""OUE, optimized unary encoding (spec §3 id 4; Wang et al., USENIX Security 2017, §4.3).

Bit i = 1 iff w_i < (T_oue_p if i == x else T_oue_q). `value` is the item's domain index.
Needs d random words per report: only for small domains on a device.
"""
from os import urandom
from micropython import const

from .bitmap import Words
from .hash import zero
from .report import Report
from .thresholds import T_OUE_P, t_oue_q
from .errors import ConfigError

MAX_BITS = const(65536)


class Oue(Report):
    name = "oue"

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        if not 2 <= domain_size <= MAX_BITS:
            raise ConfigError("domain.size", "OUE on a device needs 2 <= d <= %d" % MAX_BITS)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, (domain_size + 7) // 8)
        self.words = domain_size
        self.t_q = t_oue_q(eps_milli)

    def report(self, x, nonce, rand=urandom):
        if not 0 <= x < self.domain_size:
            raise ValueError("item index out of the domain")
        buf = self.buf
        words = Words(rand, self.words)
        zero(buf, 12, len(buf) - 12)
        # all bits start at 0, so toggling where w_i < T sets exactly those bits
        words.flip(buf, 12, 0, x, self.t_q)
        words.flip(buf, 12, x, 1, T_OUE_P)
        words.flip(buf, 12, x + 1, self.domain_size - x - 1, self.t_q)
        return self._finish(nonce)


MECHANISM = Oue
