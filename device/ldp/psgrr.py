"""PSGRR, padding-and-sampling GRR (spec §3 id 10; Wang, Li, Jha, IEEE S&P 2018, §4 PSFO).

i = bucket(w0, L), L = max(l, s); c = the sampled key's index among the D items (D for the
dummy: i >= s, or not an item); GRR over D + 1 outputs: y = c if w1 < T_grr(D + 1), else
r = bucket(w2, D), y = r + (r >= c). `value` is a KeySet (or a list of item keys); both
branches are computed and one is kept (spec §7.1).
"""
import struct
from os import urandom

from .errors import ConfigError
from .hash import below, word_bucket
from .psfo import PsItems
from .thresholds import grr_ok, t_grr


class PsGrr(PsItems):
    name = "psgrr"
    words = 3

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        self._items(domain_size, params)
        if not grr_ok(eps_milli, self.kc + 1):
            raise ConfigError("domain.size", "GRR over %d outputs is not eps-LDP with integer "
                              "thresholds (spec §2)" % (self.kc + 1))
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 4)
        self.t_keep = t_grr(eps_milli, self.kc + 1)

    def report(self, keys, nonce, rand=urandom):
        w = rand(12)
        _, _, c = self._sample(keys, w)
        keep = below(w, 1, self.t_keep)
        r = word_bucket(w, 2, self.kc)
        y = keep * c + (1 - keep) * (r + (r >= c))
        struct.pack_into("<I", self.buf, 12, y)
        return self._finish(nonce)


MECHANISM = PsGrr
