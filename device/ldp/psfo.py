"""Padding-and-sampling frequency oracles, shared part of PSGRR and PSOLH (spec §3 ids 10, 11;
Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining", IEEE S&P 2018, §4).

The items (D of them) are the phase-2 candidate list (`params["candidates"]`, c = a key's
position, D = kc) or, without a list, the integer domain 0..d-1 (c = key, D = d <= 2^24);
c = D is the dummy (a key that is not an item, or a padding slot: i = bucket(w0, L) >= s,
L = max(l, s)). The aggregator's rules: ldpfleet.core.mechanisms.psfo.
"""
from micropython import const

from .errors import ConfigError
from .hash import word_bucket
from .report import Report, param
from .sets import as_keyset, candidate_index

MAX_DOMAIN = const(16777216)  # 2^24: without a list the items are the int domain 0..d-1


class PsItems(Report):
    """A PSFO mechanism's item list: `kc` items, `index` (sets.Candidates) or None (int
    domain)."""

    def _items(self, domain_size, params):
        cands = params.get("candidates")
        self.index = None  # None: the items are the int domain 0..d-1 (c == key)
        if cands is None:
            if domain_size > MAX_DOMAIN:
                raise ConfigError("domain.size", "%s without a candidate list needs a domain of "
                                  "at most %d items" % (self.name, MAX_DOMAIN))
            self.kc = domain_size
        else:
            self.index = candidate_index(cands)
            self.kc = len(cands)
        self.l = param(params, "l", 1, 65536)

    def _sample(self, keys, w):
        """(keyset, real, c) of spec §3 for a KeySet (or list) and the words `w`: element
        i = bucket(w0, L) chosen over every slot, real = i < s, c its position among the items
        (kc for the dummy), its key in keyset.chosen[0]. The same work for every set (§7.1)."""
        ks = as_keyset(keys)
        ks.items_of(self.index, self.kc)
        s = ks.count()
        i = word_bucket(w, 0, max(self.l, s))
        ks.pick(i)
        real = i < s
        return ks, real, real * ks.chosen[1] + (1 - real) * self.kc
