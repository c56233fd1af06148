"""Memoised one-bit mean of a counter (spec §3.2 id 21; Ding, Kulkarni, Yekhanin, "Collecting
telemetry data privately", NeurIPS 2017 §2.1, §3): the counter x is a grid point in [0, m],
m = domain_size - 1 (clamped; a non-integer reports 0). State: alpha (u32) and the permanent
bit of each of the s + 1 rounding points. Report: alpha-point rounding of x to point j, then
bit j flipped iff w0 < t_flip (the paper's output perturbation). Body y:u8.
"""
from os import urandom

from .bitmap import Words
from .errors import ConfigError
from .hash import below
from .longitudinal import Memoised, bit_inst
from .report import param
from .thresholds import W, t_oue_q


class Lbitmean(Memoised):
    name = "lbitmean"
    words = 1

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        self.s = param(params, "s", 1, 255)
        if not 2 <= domain_size <= 0xFFFFFFFF or self.s > domain_size - 1:
            raise ConfigError("phases.params", "lbitmean needs 1 <= s <= m = d - 1")
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, params, 1)
        self.m = domain_size - 1
        self.classes = self.s + 1
        self.state_size = 4 + (self.s + 8) // 8
        self.enrol_words = 2 + self.s
        self.t0 = t_oue_q(eps_milli)
        self.t_flip = bit_inst(self.t0, self.eps1)

    def _enrol(self, rand, state):
        state[0:4] = rand(4)
        words, s, t0 = Words(rand, self.s + 1), self.s, self.t0
        for j in range(s + 1):
            words.flip(state, 4, j, 1, t0 + (j * (W - 2 * t0)) // s)

    def report(self, value, nonce, rand=urandom):
        x, state = self._input(value)
        if not isinstance(x, int) or isinstance(x, bool):
            x = 0
        x = min(max(x, 0), self.m)
        j, rho = divmod(x * self.s, self.m)
        j += below(state, 0, (rho << 32) // self.m)
        bit = (state[4 + (j >> 3)] >> (j & 7)) & 1
        self.buf[12] = bit ^ below(rand(4), 0, self.t_flip)
        return self._finish(nonce)


MECHANISM = Lbitmean
