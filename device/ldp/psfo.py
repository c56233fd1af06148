"""Padding-and-sampling frequency oracles, shared part of PSGRR and PSOLH (spec §3 ids 10, 11;
Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining", IEEE S&P 2018, §4).

The items (D of them) are the phase-2 candidate list (`params["candidates"]`, c = a key's
position, D = kc) or, without a list, the integer domain 0..d-1 (c = key, D = d <= 2^24);
c = D is the dummy (a key that is not an item, or a padding slot: i = bucket(w0, L) >= s,
L = max(l, s)). The aggregator's rules: ldpfleet.mechanisms.psfo.
"""
from micropython import const

from .errors import ConfigError
from .report import Report, param
from .sets import candidate_index

MAX_DOMAIN = const(16777216)  # 2^24: without a list the items are the int domain 0..d-1


class PsItems(Report):
    """A PSFO mechanism's item list: `kc` items, `index` {key: c} or None (int domain)."""

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

    def _c(self, key):
        """c of spec §3: the key's position among the items, kc if it is not one."""
        if self.index is None:
            return key if key < self.kc else self.kc
        return self.index.get(key, self.kc)
