"""LOLOHA (spec §3.2 id 20; Arcolezi et al., "Frequency estimation of evolving data under
local differential privacy", EDBT 2023 §4): state = the hash seed (u32, public: it is in every
report) and the permanent GRR output (at ε∞) of each of the g buckets. A report hashes the key
to its bucket b = bucket(Hs(key, seed), g) and sends GRR at t_inst of entry b. `value["value"]`
is the item's key.
"""
import struct
from os import urandom

from .hash import copy_word, hash_bucket_w
from .lgrr import grr_of, grr_table
from .longitudinal import Memoised, grr_inst
from .report import param
from .thresholds import t_grr


class Loloha(Memoised):
    name = "loloha"
    words = 2

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        self.g = param(params, "g", 2, 256)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, params, 6)
        self.classes = self.g
        self.state_size = 4 + self.g
        self.enrol_words = 1 + 2 * self.g
        self.t_perm = t_grr(eps_milli, self.g)
        self.t_inst = grr_inst(self.g, self.t_perm, self.eps1)

    def _enrol(self, rand, state):
        state[0:4] = rand(4)
        grr_table(rand, self.g, self.t_perm, state, 4)

    def report(self, key, nonce, rand=urandom):
        key, state = self._input(key)
        g = self.g
        b = hash_bucket_w(key, state, 0, g)
        y = grr_of(state[4 + b], g, self.t_inst, rand(8))
        copy_word(self.buf, 12, state, 0)
        struct.pack_into("<H", self.buf, 16, y)
        return self._finish(nonce)


MECHANISM = Loloha
