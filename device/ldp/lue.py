"""Memoised unary encoding, L-OSUE and L-SUE (spec §3.2 ids 17, 18; Arcolezi et al., DCN 2022).

State: n rows of ceil(n/8) bytes, row v = the permanent bitmap of value v (bit j = 1 iff
w[vn + j] < (j == v ? t_p : t_q)). Report: row x with every bit flipped iff w_j < t_flip.
`value["value"]` is the item's domain index.
"""
from os import urandom

from .bitmap import Words
from .errors import ConfigError
from .longitudinal import Memoised, lue_inst

N_MAX = 128


class Lue(Memoised):
    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        if not 2 <= domain_size <= N_MAX:
            raise ConfigError("domain.size", "%s needs 2 <= n <= %d" % (self.name, N_MAX))
        self.row = (domain_size + 7) // 8
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, params, self.row)
        self.words = domain_size
        self.classes = domain_size
        self.state_size = domain_size * self.row
        self.enrol_words = domain_size * domain_size
        self.t_p, self.t_q = self.permanent(eps_milli)
        self.t_flip = lue_inst(self.t_p, self.t_q, self.eps1)

    def _enrol(self, rand, state):
        n, words = self.domain_size, Words(rand, self.enrol_words)
        for v in range(n):
            off = v * self.row
            words.flip(state, off, 0, v, self.t_q)
            words.flip(state, off, v, 1, self.t_p)
            words.flip(state, off, v + 1, n - v - 1, self.t_q)

    def report(self, value, nonce, rand=urandom):
        x, state = self._input(value)
        if not 0 <= x < self.domain_size:
            raise ValueError("item index out of the domain")
        buf, row = self.buf, self.row
        buf[12:12 + row] = state[x * row:(x + 1) * row]
        Words(rand, self.words).flip(buf, 12, 0, self.domain_size, self.t_flip)
        return self._finish(nonce)
