"""Sampling RAPPOR over the phase-2 candidates, LDPMiner phase 2 (spec §3 id 8;
Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy" (CCS 2016), §5).

Bits 0..kc-1 are the candidates, bit kc the dummy. i = bucket(w0, L), L = max(l, s); the
chosen item's bit is set (candidate c -> bit c; not a candidate, or i >= s -> bit kc); then
bit b is flipped iff w_{1+b} < T_flip. `value` is a KeySet (or a list of item keys); the
candidate keys come in `params["candidates"]` (absent: the int domain 0..d-1, as on the
aggregator). Every slot's candidate position is found with a fixed number of steps and element
i is chosen over every slot (sets.KeySet): the same work for every set (spec §7.1).
"""
from os import urandom

from .bitmap import Words
from .hash import word_bucket, zero
from .report import Report, param
from .sets import MAX_CANDIDATES, as_keyset, candidate_index
from .thresholds import t_flip
from .errors import ConfigError


class Srappor(Report):
    name = "srappor"

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        cands = params.get("candidates")
        self.index = None  # None: the candidates are the int domain 0..d-1 (key == bit)
        if cands is None:
            if domain_size > MAX_CANDIDATES:
                raise ConfigError("candidates", "needed when the domain has more than %d items"
                                  % MAX_CANDIDATES)
            kc = domain_size
        else:
            self.index = candidate_index(cands)
            kc = len(cands)
        self.kc = kc
        self.l = param(params, "l", 1, 65536)
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, (kc + 8) // 8)
        self.words = kc + 2
        self.t_flip = t_flip(eps_milli)

    def report(self, keys, nonce, rand=urandom):
        ks = as_keyset(keys)
        ks.items_of(self.index, self.kc)
        s = ks.count()
        words = Words(rand, self.words)
        w, wi = words.one()
        i = word_bucket(w, wi, max(self.l, s))
        ks.pick(i)
        real = i < s
        bit = real * ks.chosen[1] + (1 - real) * self.kc
        buf = self.buf
        zero(buf, 12, len(buf) - 12)
        buf[12 + (bit >> 3)] = 1 << (bit & 7)
        words.flip(buf, 12, 0, self.kc + 1, self.t_flip)
        return self._finish(nonce)


MECHANISM = Srappor
