"""Padding-and-sampling frequency oracles, PSGRR and PSOLH (protocol_spec/v2 §3, ids 10, 11).

Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining" (IEEE S&P 2018) §4,
PSFO: a user pads or samples its set to the public length l (LDPMiner §3's L = max(l, s),
slots >= s the dummy), reports the one sampled element through a single-item frequency oracle
at the full eps, and the collector scales the oracle's estimate by l. The oracle is chosen by
the size of the domain it runs over (§4.3, from Wang, Blocki, Li, Jha, USENIX Security 2017
§4.5): GRR when D + 1 < 3 e^eps + 2, OLH otherwise (`choose_oracle`).

The items (D of them) are the phase-2 candidate list (`candidates`, kc keys; an element that is
not a candidate is the dummy, LDPMiner §4.4's trimming) or, without a list, the integer domain
0..d-1 (c = key) -- one-phase use and SVIM's phase 1 over the whole domain.

* PSGRR, body y:u32, R = 3: c = the sampled element's index (D for the dummy); GRR over D + 1
  outputs with w1 (keep) and w2 (other), the T_grr(D + 1) threshold of GRR.
* PSOLH, body seed:u32, y:u16, R = 4: seed = w1; a real element is hashed to
  v = bucket(Hs(key, seed), g) and sent through GRR over g (w2 keep, w3 other); the dummy sends
  y = bucket(w3, g), uniform, so to the estimator it is a non-holder of every item.

Estimates (users with s <= l): for an item held by a fraction f of users, a report supports
it w.p. q + (p - q) f / l, so f^ = l (support / n - q) / (p - q), unbiased; q = (1 - p) / D
(PSGRR) or 1/g (PSOLH, random-hash model). Item variance (exact Bernoulli sum):
    Var(f^) = l^2 (f a (1 - a) + (1 - f) q (1 - q)) / (n (p - q)^2),  a = q + (p - q) / l.
"""
from fractions import Fraction
import math

import numpy as np

from .. import protocol
from ..errors import ConfigError
from ..kernels import lib, ptr
from .base import (W, IntParam, IntStateSketch, body_ptr, body_u16, body_u32,
                   check_words)
from .olh import G_PARAM, grr_over, olh_support
from .sh import DEFAULT_L, CandidateMixin, SetMechanism, one_set, sampled_index

MAX_DOMAIN = 1 << 24
"""Without a candidate list the items are the int domain 0..d-1 (d <= 2^24 here)."""


def choose_oracle(eps_milli: int, items: int) -> str:
    """"psgrr" iff items + 1 < 3 e^eps + 2 (GRR's variance (e^eps + D - 1) / (e^eps - 1)^2 is
    below OLH's 4 e^eps / (e^eps - 1)^2 there; the +1 is the dummy), else "psolh"."""
    return "psgrr" if items + 1 < 3 * math.exp(eps_milli / 1000.0) + 2 else "psolh"


class PsMechanism(CandidateMixin, SetMechanism):
    """Shared part: the item list (candidates or the int domain) and the l-scaled estimate."""

    default_phase = 1

    def __init__(self, eps_milli: int, domain_size: int, candidates=None, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if candidates is None and domain_size > MAX_DOMAIN:
            raise ConfigError("domain.size", "%s without a candidate list needs a domain of at "
                              "most %d items" % (self.name, MAX_DOMAIN))
        self.listed = self.set_candidates(candidates, domain_size)

    def item_index(self, key: int) -> int:
        """c of spec §3: the key's position among the items, kc if it is not one."""
        key = int(key)
        if not self.listed:
            return key if key < self.kc else self.kc
        pos = int(np.searchsorted(self.sorted_candidates, key))
        if pos < self.kc and int(self.sorted_candidates[pos]) == key:
            return int(self.sorted_index[pos])
        return self.kc

    def item_indices(self, keys) -> np.ndarray:
        return self.candidate_bits(keys)

    def _cand_ptrs(self):
        if not self.listed:
            return lib_null(), lib_null()
        return ptr(self.sorted_candidates), ptr(self.sorted_index)

    def support_pq(self):
        raise NotImplementedError

    def item_variances(self, n: int, freqs=None) -> np.ndarray:
        """Module docstring's exact variance of f^ (fraction), per item of `freqs`."""
        p, q = (float(x) for x in self.support_pq())
        f = np.zeros(1) if freqs is None else np.asarray(freqs, np.float64).ravel()
        a = q + (p - q) / self.l
        return self.l ** 2 * (f * a * (1 - a) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)

    def scaled_estimate(self, support: np.ndarray, n: int) -> np.ndarray:
        """l (support - n q) / (p - q): estimated counts of holders."""
        p, q = (float(x) for x in self.support_pq())
        return self.l * (support - n * q) / (p - q)


def lib_null():
    from ..kernels import ffi
    return ffi.NULL


class PsGrrMechanism(PsMechanism):
    """PSGRR over D = kc items plus the dummy: `l` (1..65536), `candidates` (optional)."""

    name = "psgrr"
    PARAMS = {"l": IntParam(DEFAULT_L, 1, 65536)}
    body_size = 4
    random_words = 3

    def __init__(self, eps_milli: int, domain_size: int, candidates=None, **kw):
        super().__init__(eps_milli, domain_size, candidates=candidates, **kw)
        if not protocol.grr_ok(eps_milli, self.kc + 1):
            raise ConfigError("domain.size", "GRR over %d outputs is not eps-LDP with integer "
                              "thresholds (spec §2)" % (self.kc + 1))
        self.t_keep = protocol.t_grr(eps_milli, self.kc + 1)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        keys = one_set(value)
        w0, w1, w2 = check_words(words, 3, self.name)
        i = sampled_index(w0, len(keys), self.l)
        c = self.item_index(keys[i]) if i < len(keys) else self.kc
        y = grr_over(c, self.kc + 1, self.t_keep, w1, w2)
        return self.header(seq) + y.to_bytes(4, "little")

    def _kernel(self, sets, start, stop, words, out):
        cs, ci = self._cand_ptrs()
        lib.ldp_psgrr_perturb(ptr(sets.keys), ptr(sets.offsets[start:]), stop - start, self.l,
                              cs, ci, self.kc, self.t_keep, ptr(words), body_ptr(out, start),
                              out.shape[1])

    def validate_bodies(self, bodies: np.ndarray):
        return [("y", body_u32(bodies, 0) > self.kc)]

    def support_pq(self):
        p = Fraction(self.t_keep, W)
        return p, (1 - p) / self.kc

    def new_sketch(self) -> "PsGrrSketch":
        return PsGrrSketch(self)


class PsGrrSketch(IntStateSketch):
    """`counts` (kc + 1,) int64: reports per output (the last is the dummy's)."""

    STATE = ("counts",)

    def __init__(self, mechanism: PsGrrMechanism):
        super().__init__(mechanism)
        self.counts = np.zeros(mechanism.kc + 1, np.int64)

    def _fold(self, arr):
        lib.ldp_grr_count(body_ptr(arr), arr.shape[0], arr.shape[1], self.mechanism.kc + 1,
                          ptr(self.counts))

    def estimate(self, keys) -> np.ndarray:
        """Estimated holders of each key; NaN for a key that is not one of the items."""
        mech = self.mechanism
        idx = mech.item_indices(keys)
        est = mech.scaled_estimate(self.counts[idx].astype(np.float64), self.n)
        est[idx == mech.kc] = np.nan
        return est


class PsOlhMechanism(PsMechanism):
    """PSOLH: `l` (1..65536), `g` buckets (default round(e^eps) + 1), `candidates` (optional)."""

    name = "psolh"
    PARAMS = {"l": IntParam(DEFAULT_L, 1, 65536), "g": G_PARAM}
    body_size = 6
    random_words = 4

    def __init__(self, eps_milli: int, domain_size: int, candidates=None, **kw):
        super().__init__(eps_milli, domain_size, candidates=candidates, **kw)
        self.t_keep = protocol.t_grr(eps_milli, self.g)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        keys = one_set(value)
        w0, w1, w2, w3 = check_words(words, 4, self.name)
        i = sampled_index(w0, len(keys), self.l)
        real = i < len(keys) and (not self.listed or self.item_index(keys[i]) < self.kc)
        if real:
            v = protocol.bucket(protocol.keyed_hash(keys[i], w1), self.g)
            y = grr_over(v, self.g, self.t_keep, w2, w3)
        else:
            y = protocol.bucket(w3, self.g)
        return self.header(seq) + w1.to_bytes(4, "little") + y.to_bytes(2, "little")

    def _kernel(self, sets, start, stop, words, out):
        cs, ci = self._cand_ptrs()
        lib.ldp_psolh_perturb(ptr(sets.keys), ptr(sets.offsets[start:]), stop - start, self.l,
                              cs, ci, self.kc, self.g, self.t_keep, ptr(words),
                              body_ptr(out, start), out.shape[1])

    def validate_bodies(self, bodies: np.ndarray):
        return [("y", body_u16(bodies, 4) >= self.g)]

    def support_pq(self):
        return Fraction(self.t_keep, W), Fraction(1, self.g)

    def new_sketch(self) -> "PsOlhSketch":
        return PsOlhSketch(self)


class PsOlhSketch(IntStateSketch):
    """`support` (kc,) int64: reports supporting each item (O(n kc) decode at fold time)."""

    STATE = ("support",)

    def __init__(self, mechanism: PsOlhMechanism):
        super().__init__(mechanism)
        self.support = np.zeros(mechanism.kc, np.int64)

    def _fold(self, arr):
        olh_support(arr, self.mechanism.g, self.mechanism.candidates, self.support)

    def estimate(self, keys) -> np.ndarray:
        mech = self.mechanism
        idx = mech.item_indices(keys)
        hit = idx < mech.kc
        est = np.full(idx.size, np.nan)
        est[hit] = mech.scaled_estimate(self.support[idx[hit]].astype(np.float64), self.n)
        return est


MECHANISMS = {"psgrr": PsGrrMechanism, "psolh": PsOlhMechanism}
MECHANISM = PsGrrMechanism
