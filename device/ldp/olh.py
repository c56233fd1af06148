"""OLH, optimized local hashing (spec §3 id 2; Wang et al., USENIX Security 2017, §4.4).

seed = w0; v = bucket(Hs(key, seed), g); GRR over g outputs with w1, w2.
"""
import struct
from os import urandom

from .hash import below, copy_word, hash_bucket_w, word_bucket
from .report import Report, param
from .thresholds import t_grr


class Olh(Report):
    name = "olh"
    words = 3

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 6)
        self.g = param(params, "g", 2, 65536)
        self.t_keep = t_grr(eps_milli, self.g)

    def report(self, key, nonce, rand=urandom):
        w = rand(12)
        g = self.g
        y = hash_bucket_w(key, w, 0, g)
        if not below(w, 1, self.t_keep):
            r = word_bucket(w, 2, g - 1)
            y = r + (r >= y)
        copy_word(self.buf, 12, w, 0)
        struct.pack_into("<H", self.buf, 16, y)
        return self._finish(nonce)


MECHANISM = Olh
