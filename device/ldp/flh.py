"""FLH, fast local hashing (spec §3 id 3; Cormode, Maddock, Maple, VLDB 2021, §4.2).

seed_index = bucket(w0, k'); seed = (salt + seed_index) mod 2^32; then OLH with w1, w2.
"""
import struct
from os import urandom

from .hash import below, hash_bucket, word_bucket
from .report import Report, param
from .thresholds import t_grr


class Flh(Report):
    name = "flh"
    words = 3

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 6)
        self.g = param(params, "g", 2, 65536)
        self.kp = param(params, "kp", 1, 0xFFFFFFFF)
        self.t_keep = t_grr(eps_milli, self.g)

    def report(self, key, nonce, rand=urandom):
        w = rand(12)
        g = self.g
        idx = word_bucket(w, 0, self.kp)
        y = hash_bucket(key, self.salt, idx, g)
        if not below(w, 1, self.t_keep):
            r = word_bucket(w, 2, g - 1)
            y = r + (r >= y)
        struct.pack_into("<IH", self.buf, 12, idx, y)
        return self._finish(nonce)


MECHANISM = Flh
