"""Sampling succinct histogram, LDPMiner phase 1 (spec §3 id 7; Qin et al., "Heavy
Hitter Estimation over Set-Valued Data with Local Differential Privacy", CCS 2016, Alg. 2).

L = max(l, s); i = bucket(w0, L); t = bucket(w1, m). If i >= s (the dummy) sign = +1 iff
w2 < T_half; else phi = +1 iff Hs(key_i, seed_t) < 2^31 and sign = phi if w2 < T_rr else -phi.
`value` is a KeySet (or a list of item keys). Both branches are computed and one is kept, and
element i is chosen over every slot (sets.KeySet.pick): the same work for every set (spec §7.1).
"""
import struct
from os import urandom

from .hash import below, word_bucket
from .report import Report, param
from .sets import as_keyset, slot_sign
from .thresholds import T_HALF, t_rr


class Sh(Report):
    name = "sh"
    words = 3

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 5)
        self.m = param(params, "m", 2, 65536)
        self.l = param(params, "l", 1, 65536)
        self.t_keep = t_rr(eps_milli)

    def report(self, keys, nonce, rand=urandom):
        ks = as_keyset(keys)
        s = ks.count()
        w = rand(12)
        i = word_bucket(w, 0, max(self.l, s))
        t = word_bucket(w, 1, self.m)
        ks.pick(i)
        real = i < s
        signed = 1 ^ slot_sign(ks.chosen, 0, self.salt, t) ^ below(w, 2, self.t_keep)
        plus = real * signed + (1 - real) * below(w, 2, T_HALF)
        struct.pack_into("<IB", self.buf, 12, t, plus)
        return self._finish(nonce)


MECHANISM = Sh
