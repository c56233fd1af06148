"""L-GRR (spec §3.2 id 19; Arcolezi et al., DCN 2022 §4.1): state = the permanent GRR output
(at ε∞) of every value, one byte each (n <= 256); a report is GRR at t_inst of entry x.
`value["value"]` is the item's domain index.
"""
import struct
from os import urandom

from .errors import ConfigError
from .hash import below, word_bucket
from .longitudinal import Memoised, grr_inst
from .thresholds import t_grr

N_MAX = 256


def grr_table(rand, n, t, state, off):
    """state[off + b] = GRR_n(b) at threshold t, two words each."""
    for b in range(n):
        w = rand(8)
        c = b
        if not below(w, 0, t):
            r = word_bucket(w, 1, n - 1)
            c = r + (r >= b)
        state[off + b] = c


def grr_of(c, n, t, w):
    if below(w, 0, t):
        return c
    r = word_bucket(w, 1, n - 1)
    return r + (r >= c)


class Lgrr(Memoised):
    name = "lgrr"
    words = 2

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        if not 2 <= domain_size <= N_MAX:
            raise ConfigError("domain.size", "lgrr needs 2 <= n <= %d" % N_MAX)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, params, 4)
        self.classes = self.state_size = domain_size
        self.enrol_words = 2 * domain_size
        self.t_perm = t_grr(eps_milli, domain_size)
        self.t_inst = grr_inst(domain_size, self.t_perm, self.eps1)

    def _enrol(self, rand, state):
        grr_table(rand, self.domain_size, self.t_perm, state, 0)

    def report(self, value, nonce, rand=urandom):
        x, state = self._input(value)
        if not 0 <= x < self.domain_size:
            raise ValueError("item index out of the domain")
        struct.pack_into("<I", self.buf, 12, grr_of(state[x], self.domain_size, self.t_inst, rand(8)))
        return self._finish(nonce)


MECHANISM = Lgrr
