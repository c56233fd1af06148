"""LOLOHA, longitudinal local hashing (protocol_spec/v2 §3.2, id 20).

Arcolezi, Pinzón, Palamidessi, Gambs, "Frequency estimation of evolving data under local
differential privacy" (EDBT 2023) §4: the device hashes its value to g buckets with a hash
seed of its own (drawn once at enrolment, public: it is in every report), memoises a
permanent GRR over the g buckets at ε∞ per bucket, and reports GRR of the memoised bucket at
the keep threshold that makes one report ε1-LDP. At most g permanent responses exist, so the
lifetime loss is at most g·ε∞ however often the value changes (§4's bound; spec §3.2 states
exactly for which pairs of value sequences). OLOLOHA takes the paper's optimal g (§4.3), the
default here; BiLOLOHA g = 2. Enrolment draws the seed and all g permanent responses. Body
seed:u32, y:u16 — OLH's layout, decoded by OLH's kernel (an item v is supported iff
bucket(Hs(key_v, seed), g) == y; q* = 1/g under the random-hash model, Wang et al. 2017 §4.4).
"""
import math
from fractions import Fraction

from .. import kernels, protocol
from ..errors import ConfigError
from .base import IntParam, body_u16
from .domain import u32_keys
from .lgrr import grr_chain_keep, grr_step, grr_table
from .longitudinal import (EPS1_PARAM, CachedEstimate, LongitudinalMechanism, split_input,
                           t_grr_inst)
from .olh import OlhSketch

G_MAX = 256


def optimal_g(eps_milli: int, eps1_milli: int) -> int:
    """OLOLOHA's g (EDBT 2023 §4.3, the variance-minimising g for α = ε1/ε∞, rounded),
    clamped to [2, 256]."""
    e, a = eps_milli / 1000.0, eps1_milli / eps_milli
    x = math.exp
    num = (math.sqrt(x(4 * e) - 14 * x(2 * e) - 12 * x(2 * e * (a + 1)) + 12 * x(e * (a + 1))
                     + 12 * x(e * (a + 3)) + 1) - x(2 * e) + 6 * x(e) - 6 * x(e * a) + 1)
    g = num / (6 * (x(e) - x(e * a)))
    return int(min(max(round(g), 2), G_MAX))


class LolohaMechanism(LongitudinalMechanism):
    """LOLOHA with g buckets (params: g, eps1_milli). g defaults to OLOLOHA's optimum."""

    name = "loloha"
    PARAMS = {"eps1_milli": EPS1_PARAM, "g": IntParam(None, 2, G_MAX)}
    body_size = 6
    random_words = 2

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        params = kw
        if kw.get("g") is None:
            eps1 = kw.get("eps1_milli")
            eps1 = EPS1_PARAM.value("eps1_milli", eps1, eps_milli)
            params = dict(kw, g=optimal_g(eps_milli, eps1) if eps1 < eps_milli else 2)
        super().__init__(eps_milli, domain_size, **params)
        self.t_perm = protocol.t_grr(eps_milli, self.g)
        self.t_inst = t_grr_inst(self.g, self.t_perm, self.eps1_milli)
        self._keep = None

    classes = property(lambda self: self.g)
    state_size = property(lambda self: 4 + self.g)
    enrol_words = property(lambda self: 1 + 2 * self.g)

    def reference_enrol(self, words) -> bytes:
        w = self.check_enrol_words(words)
        return w[0].to_bytes(4, "little") + grr_table(self.g, self.t_perm, w[1:])

    def report_input(self, value) -> int:
        return protocol.item_key(value)

    def report_inputs(self, values):
        return u32_keys(values)

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        value, state = split_input(value, self.state_size)
        key = protocol.item_key(value)
        w0, w1 = self.check_words(words)
        seed = int.from_bytes(state[:4], "little")
        b = protocol.bucket(protocol.keyed_hash(key, seed), self.g)
        c = state[4 + b]
        if max(state[4:]) >= self.g:
            raise ConfigError("enrolment_state", "state entry is not a bucket")
        y = grr_step(c, self.g, self.t_inst, w0, w1)
        return self.header(seq) + state[:4] + y.to_bytes(2, "little")

    def _enrol_kernel(self, n, words, out, stride):
        return kernels.lib.ldp_loloha_enrol(n, self.g, self.t_perm, words, out, stride)

    def _report_kernel(self, keys, n, states, state_stride, words, out, stride):
        return kernels.lib.ldp_loloha_perturb(keys, n, self.g, self.t_inst, states, state_stride,
                                              words, out, stride)

    fold_kind = kernels.lib.LDP_LONG_SEED_U16
    fold_limit = property(lambda self: self.g)

    def validate_bodies(self, bodies):
        return [("y", body_u16(bodies, 4) >= self.g)]

    def new_sketch(self) -> "LolohaSketch":
        return LolohaSketch(self)

    def support_pq(self):
        """p* = P(y = bucket of x) (exact, averaged over buckets), q* = 1/g (random hash)."""
        if self._keep is None:
            self._keep = grr_chain_keep(self.g, self.t_perm, self.t_inst)
        return self._keep, Fraction(1, self.g)


class LolohaSketch(CachedEstimate, OlhSketch):
    """OLH's support counts over the domain (bodies checked in C by `check`)."""


MECHANISM = LolohaMechanism
