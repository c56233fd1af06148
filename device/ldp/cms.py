"""Count-mean sketch (spec §3 id 5; Apple, "Learning with Privacy at Scale", 2017).

j = bucket(w0, k); c = bucket(Hs(key, seed_j), m); the vector is -1 except +1 at c (bit 1
means +1); bit i is flipped iff w_{1+i} < T_flip.
"""
import struct
from os import urandom

from .bitmap import Words
from .hash import hash_bucket, word_bucket, zero
from .report import Report, param
from .thresholds import t_flip


class Cms(Report):
    name = "cms"

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        self.k = param(params, "k", 1, 65536)
        self.m = param(params, "m", 2, 65536)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 2 + (self.m + 7) // 8)
        self.words = 1 + self.m
        self.t_flip = t_flip(eps_milli)

    def _sketch(self, key, nonce, rand, one_hot):
        words = Words(rand, self.words)
        buf = self.buf
        w, i = words.one()
        j = word_bucket(w, i, self.k)
        struct.pack_into("<H", buf, 12, j)
        zero(buf, 14, len(buf) - 14)
        if one_hot:
            c = hash_bucket(key, self.salt, j, self.m)
            buf[14 + (c >> 3)] = 1 << (c & 7)
        words.flip(buf, 14, 0, self.m, self.t_flip)
        return self._finish(nonce)

    def report(self, key, nonce, rand=urandom):
        return self._sketch(key, nonce, rand, True)


MECHANISM = Cms
