"""Hadamard count-mean sketch (spec §3 id 6; Apple, "Learning with Privacy at Scale", 2017).

j = bucket(w0, k); c = bucket(Hs(key, seed_j), m); l = bucket(w1, m);
h = (-1)^popcount(l & c); sign = h if w2 < T_rr else -h (byte 1 = +1, 0 = -1).
"""
import struct
from os import urandom

from .hash import below, hash_bucket, parity, word_bucket
from .report import Report, param
from .thresholds import t_rr
from .errors import ConfigError


class Hcms(Report):
    name = "hcms"
    words = 3

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 5)
        self.k = param(params, "k", 1, 65536)
        self.m = param(params, "m", 2, 65536)
        if self.m & (self.m - 1):
            raise ConfigError("phases.params", "m must be a power of two")
        self.t_keep = t_rr(eps_milli)

    def report(self, key, nonce, rand=urandom):
        w = rand(12)
        j = word_bucket(w, 0, self.k)
        c = hash_bucket(key, self.salt, j, self.m)
        l = word_bucket(w, 1, self.m)
        plus = 1 - parity(l & c)
        if not below(w, 2, self.t_keep):
            plus = 1 - plus
        struct.pack_into("<HHB", self.buf, 12, j, l, plus)
        return self._finish(nonce)


MECHANISM = Hcms
