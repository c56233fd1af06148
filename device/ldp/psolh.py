"""PSOLH, padding-and-sampling OLH (spec §3 id 11; Wang, Li, Jha, IEEE S&P 2018, §4 PSFO).

i = bucket(w0, L), L = max(l, s); seed = w1. A real element (i < s, and an item when the
phase has a candidate list): v = bucket(Hs(key_i, seed), g), y = v if w2 < T_grr(g), else
r = bucket(w3, g - 1), y = r + (r >= v). The dummy: y = bucket(w3, g). `value` is a KeySet (or
a list of item keys); every branch is computed and one is kept (spec §7.1).
"""
import struct
from os import urandom

from .hash import below, copy_word, word_bucket
from .psfo import PsItems
from .report import param
from .sets import slot_bucket
from .thresholds import t_grr


class PsOlh(PsItems):
    name = "psolh"
    words = 4

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        self._items(domain_size, params)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 6)
        self.g = param(params, "g", 2, 65536)
        self.t_keep = t_grr(eps_milli, self.g)

    def report(self, keys, nonce, rand=urandom):
        w = rand(16)
        g = self.g
        ks, real, c = self._sample(keys, w)
        real = real & ((c < self.kc) | (self.index is None))
        v = slot_bucket(ks.chosen, 0, w, 1, g)
        keep = below(w, 2, self.t_keep)
        r = word_bucket(w, 3, g - 1)
        held = keep * v + (1 - keep) * (r + (r >= v))
        y = real * held + (1 - real) * word_bucket(w, 3, g)
        copy_word(self.buf, 12, w, 1)
        struct.pack_into("<H", self.buf, 16, y)
        return self._finish(nonce)


MECHANISM = PsOlh
