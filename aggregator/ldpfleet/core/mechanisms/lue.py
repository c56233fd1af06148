"""L-OSUE and L-SUE: memoised unary encoding (protocol_spec/v2 §3.2, ids 17 and 18).

Arcolezi, Couchot, Al Bouna, Xiao, "Improving the utility of locally differentially private
protocols for longitudinal and multidimensional frequency estimates" (Digital Communications
and Networks 2022) §4: a permanent unary encoding of the value (L-OSUE: OUE at ε∞, p1 = 1/2,
q1 = 1/(e^ε∞ + 1); L-SUE: RAPPOR's SUE at ε∞), memoised per value, then every round a
symmetric (SUE) flip of every bit at the threshold that makes one report ε1-LDP. L-SUE is
RAPPOR's basic one-time-RAPPOR chain (Erlingsson et al., CCS 2014 §3); L-OSUE is the paper's
better-utility variant. Enrolment draws the permanent bitmap of every value (n rows of n bits,
n <= 128); a report flips row x's bits.
"""
from fractions import Fraction

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, bitmap_bytes, pack_bitmap, padding_mask
from .longitudinal import CachedEstimate, LongitudinalMechanism, W2, split_input, t_lue_inst
from .oue import OueSketch

N_MAX = 128
"""Items (d + 1 with ⊥) of a memoised unary encoding: its state holds n^2 bits."""


class LueMechanism(LongitudinalMechanism):
    """Memoised unary encoding over n <= 128 items (params: eps1_milli)."""

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.domain_size > N_MAX:
            raise ConfigError("domain.size", "%s keeps n^2 permanent bits: n <= %d items, got %d"
                              % (self.name, N_MAX, self.domain_size))
        self.t_p, self.t_q = self.permanent_thresholds(eps_milli)
        self.t_flip = t_lue_inst(self.t_p, self.t_q, self.eps1_milli)
        self.row_bytes = bitmap_bytes(self.domain_size)

    @staticmethod
    def permanent_thresholds(eps_milli: int):
        raise NotImplementedError

    classes = property(lambda self: self.domain_size)
    body_size = property(lambda self: bitmap_bytes(self.domain_size))
    random_words = property(lambda self: self.domain_size)
    state_size = property(lambda self: self.domain_size * self.row_bytes)
    enrol_words = property(lambda self: self.domain_size * self.domain_size)

    def reference_enrol(self, words) -> bytes:
        w, n = self.check_enrol_words(words), self.domain_size
        return b"".join(pack_bitmap([w[v * n + j] < (self.t_p if j == v else self.t_q)
                                     for j in range(n)]) for v in range(n))

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        value, state = split_input(value, self.state_size)
        x = self.key_index(value)
        w = self.check_words(words)
        row = state[x * self.row_bytes:(x + 1) * self.row_bytes]
        bits = [((row[j >> 3] >> (j & 7)) & 1) ^ (w[j] < self.t_flip)
                for j in range(self.domain_size)]
        return self.header(seq) + pack_bitmap(bits)

    def _enrol_kernel(self, n, words, out, stride):
        return kernels.lib.ldp_lue_enrol(n, self.domain_size, self.t_p, self.t_q, words, out, stride)

    def _report_kernel(self, x, n, states, state_stride, words, out, stride):
        return kernels.lib.ldp_lue_perturb(x, n, self.domain_size, self.t_flip, states, state_stride,
                                           words, out, stride)

    fold_kind = kernels.lib.LDP_LONG_BITMAP
    fold_limit = property(lambda self: self.domain_size)
    body_field = "padding"

    def validate_bodies(self, bodies):
        return [("padding", padding_mask(bodies, self.domain_size))]

    def new_sketch(self) -> "LueSketch":
        return LueSketch(self)

    def channel_pq(self):
        """(p*, q*): one report's bit of the value / of another item is 1 with these exact
        probabilities (the permanent bit marginalised)."""
        f = self.t_flip
        p = Fraction(self.t_p * (W - f) + (W - self.t_p) * f, W2)
        q = Fraction(self.t_q * (W - f) + (W - self.t_q) * f, W2)
        return p, q

    support_pq = channel_pq

    def memo_pq(self):
        """The permanent bit's (p1, q1)."""
        return Fraction(self.t_p, W), Fraction(self.t_q, W)


class LueSketch(CachedEstimate, OueSketch):
    """OUE's bit counts; `update` checks and counts in one C call (ldp_long_fold)."""

    def update(self, reports) -> int:
        return self.mechanism.fold(self, reports, self.support)


class LosueMechanism(LueMechanism):
    """L-OSUE: OUE permanent response (p1 = 1/2, q1 = T_oue_q(ε∞)/W), SUE instantaneous."""

    name = "losue"

    @staticmethod
    def permanent_thresholds(eps_milli):
        return protocol.T_OUE_P, protocol.t_oue_q(eps_milli)


class LsueMechanism(LueMechanism):
    """L-SUE (RAPPOR): SUE permanent response (bits flipped iff w < T_flip(ε∞)), SUE
    instantaneous."""

    name = "lsue"

    @staticmethod
    def permanent_thresholds(eps_milli):
        t = protocol.t_flip(eps_milli)
        return W - t, t


MECHANISMS = {"losue": LosueMechanism, "lsue": LsueMechanism}
MECHANISM = LosueMechanism
