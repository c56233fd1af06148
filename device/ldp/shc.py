"""Sampling SH with correlated phases, LDPMiner-SH §4.4's optimisation (spec §3 id 12, §3.1).

Phase 1 (4 words): L = max(l, s), i = bucket(w0, L), t = bucket(w1, m); x = phi(t, key_i)
(+1 iff Hs(key_i, seed_t) < 2^31) for a real element, x = +1 iff w3 < 2^31 for the dummy
(i >= s); sign y1 = x iff w2 < T_rr(eps1). `value` is a KeySet (or a list of item keys), its
element i chosen over every slot (sets.KeySet.pick); the bit x (1 for +1)
is left in `self.x` for the ledger (spec §7.4 "shc"), committed with the memo.
Phase 2 (1 word): the same row t and bit x, from the phase-1 memo and the ledger; never the
value. sign = x iff w0 < (y1 == x ? T_shc_a : T_shc_b). `value` is {"t", "y1", "x"}, the bits
1 for +1 (`memo_input` builds it; the vectors' form).
Phase 2's thresholds need eps1: params["eps1_milli"] (the device passes phase 1's eps_milli).
"""
import struct
from os import urandom

from .errors import ConfigError
from .hash import below, word_bucket
from .report import Report, param
from .sets import as_keyset, slot_sign
from .thresholds import T_HALF, shc_ok, shc_thresholds, t_rr


class Shc(Report):
    name = "shc"

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params):
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, 5)
        self.m = param(params, "m", 2, 65536)
        self.l = param(params, "l", 1, 65536)
        self.x = None
        if phase == 1:
            self.words = 4
            self.t_keep = t_rr(eps_milli)
            return
        self.words = 1
        eps1 = param(params, "eps1_milli", 1, 64000)
        if not shc_ok(eps1, eps_milli):
            raise ConfigError("phases.eps_milli", "shc phases eps_milli %d, %d fail shc_ok "
                              "(spec §3.1)" % (eps1, eps_milli))
        _, self.t_a, self.t_b, _ = shc_thresholds(eps1, eps_milli)

    def report(self, value, nonce, rand=urandom):
        if self.phase == 1:
            return self._phase1(value, nonce, rand)
        t, y1, x = value["t"], value["y1"], value["x"]
        w = rand(4)
        plus = x if below(w, 0, self.t_a if y1 == x else self.t_b) else 1 - x
        struct.pack_into("<IB", self.buf, 12, t, plus)
        return self._finish(nonce)

    def _phase1(self, keys, nonce, rand):
        ks = as_keyset(keys)
        s = ks.count()
        w = rand(16)
        i = word_bucket(w, 0, max(self.l, s))
        t = word_bucket(w, 1, self.m)
        # the same work for a real element and the dummy: element i is chosen over every slot
        # (key 0 for the dummy), both bits are drawn, one is kept (spec §7.1)
        ks.pick(i)
        real = i < s
        x = real * slot_sign(ks.chosen, 0, self.salt, t) + (1 - real) * below(w, 3, T_HALF)
        plus = 1 ^ x ^ below(w, 2, self.t_keep)
        self.x = x
        struct.pack_into("<IB", self.buf, 12, t, plus)
        return self._finish(nonce)


def memo_input(report, x):
    """Phase 2's input {"t", "y1", "x"} from the phase-1 memo bytes and the ledger's bit, or
    None if the memo is not a 17-byte shc phase-1 report or x is not a bit."""
    if len(report) != 17 or report[1] != 12 or report[2] != 1 or report[16] > 1 or x not in (0, 1):
        return None
    return {"t": struct.unpack_from("<I", report, 12)[0], "y1": report[16], "x": x}


MECHANISM = Shc
