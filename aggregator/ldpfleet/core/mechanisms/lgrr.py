"""L-GRR: memoised generalized randomized response (protocol_spec/v2 §3.2, id 19).

Arcolezi, Couchot, Al Bouna, Xiao, "Improving the utility of locally differentially private
protocols for longitudinal and multidimensional frequency estimates" (Digital Communications
and Networks 2022) §4.1: a permanent GRR of the value at ε∞ (T_grr(ε∞, n)), memoised per value,
then every round GRR of the memoised output at the keep threshold that makes one report
ε1-LDP. Enrolment draws the permanent output of every value (n <= 256 bytes); a report
perturbs entry x. Body y:u32, counted like GRR.
"""
from fractions import Fraction

from .. import kernels, protocol
from ..errors import ConfigError
from .base import W, body_u32
from .grr import GrrSketch
from .longitudinal import CachedEstimate, LongitudinalMechanism, split_input, t_grr_inst

N_MAX = 256


def grr_step(c: int, n: int, t: int, w_keep: int, w_other: int) -> int:
    """Spec §3 GRR over n outputs from c: keep iff w_keep < t, else r = bucket(w_other, n-1),
    r + (r >= c)."""
    if w_keep < t:
        return c
    r = protocol.bucket(w_other, n - 1)
    return r + (1 if r >= c else 0)


def grr_table(n: int, t: int, words) -> bytes:
    """Entry b = grr_step(b, n, t, words[2b], words[2b+1]), one byte each (n <= 256)."""
    return bytes(grr_step(b, n, t, words[2 * b], words[2 * b + 1]) for b in range(n))


def grr_chain_distribution(n: int, t_perm: int, t_inst: int, x: int):
    """Exact P(y | x) of GRR(t_perm) then GRR(t_inst) over n outputs, as Fractions (O(n^2))."""
    def step(c, t):
        out = [Fraction(0)] * n
        out[c] = Fraction(t, W)
        for r in range(n - 1):
            out[r + (1 if r >= c else 0)] += Fraction(W - t, W) * Fraction(
                protocol.bucket_count(r, n - 1), W)
        return out
    first = step(x, t_perm)
    out = [Fraction(0)] * n
    for c, pc in enumerate(first):
        for y, py in enumerate(step(c, t_inst)):
            out[y] += pc * py
    return out


def grr_chain_keep(n: int, t_perm: int, t_inst: int) -> Fraction:
    """P(y = x), averaged over x (exact; the same for every x up to the bucket counts)."""
    cnt = [protocol.bucket_count(r, n - 1) for r in range(n - 1)]
    total = 0
    for x in range(n):
        same = t_perm * W * t_inst * W
        for c in range(n):
            if c != x:
                r1 = c - (1 if c > x else 0)
                r2 = x - (1 if x > c else 0)
                same += (W - t_perm) * cnt[r1] * (W - t_inst) * cnt[r2]
        total += same
    return Fraction(total, n * W ** 4)


class LgrrMechanism(LongitudinalMechanism):
    """L-GRR over n <= 256 items (params: eps1_milli)."""

    name = "lgrr"
    body_size = 4
    random_words = 2

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.domain_size > N_MAX:
            raise ConfigError("domain.size", "lgrr keeps one permanent output per item: n <= %d,"
                              " got %d" % (N_MAX, self.domain_size))
        self.t_perm = protocol.t_grr(eps_milli, self.domain_size)
        self.t_inst = t_grr_inst(self.domain_size, self.t_perm, self.eps1_milli)
        self._keep = None

    classes = property(lambda self: self.domain_size)
    state_size = property(lambda self: self.domain_size)
    enrol_words = property(lambda self: 2 * self.domain_size)

    def reference_enrol(self, words) -> bytes:
        return grr_table(self.domain_size, self.t_perm, self.check_enrol_words(words))

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        value, state = split_input(value, self.state_size)
        x = self.key_index(value)
        w0, w1 = self.check_words(words)
        c = state[x]
        if c >= self.domain_size:
            raise ConfigError("enrolment_state", "state entry %d is not an output" % c)
        y = grr_step(c, self.domain_size, self.t_inst, w0, w1)
        return self.header(seq) + y.to_bytes(4, "little")

    def _enrol_kernel(self, n, words, out, stride):
        return kernels.lib.ldp_lgrr_enrol(n, self.domain_size, self.t_perm, words, out, stride)

    def _report_kernel(self, x, n, states, state_stride, words, out, stride):
        return kernels.lib.ldp_lgrr_perturb(x, n, self.domain_size, self.t_inst, states, state_stride,
                                            words, out, stride)

    fold_kind = kernels.lib.LDP_LONG_U32
    fold_limit = property(lambda self: self.domain_size)

    def validate_bodies(self, bodies):
        return [("y", body_u32(bodies, 0) >= self.domain_size)]

    def new_sketch(self) -> "LgrrSketch":
        return LgrrSketch(self)

    def support_pq(self):
        """p* = P(y = x) averaged over x, q* = (1 - p*)/(n - 1) (exact Fractions)."""
        if self._keep is None:
            self._keep = grr_chain_keep(self.domain_size, self.t_perm, self.t_inst)
        return self._keep, (1 - self._keep) / (self.domain_size - 1)

    def memo_keep(self) -> Fraction:
        """The permanent response's P(c = x)."""
        return Fraction(self.t_perm, W)


class LgrrSketch(CachedEstimate, GrrSketch):
    """GRR's support counts; `update` checks and counts in one C call (ldp_long_fold)."""

    def update(self, reports) -> int:
        return self.mechanism.fold(self, reports, self.support)


MECHANISM = LgrrMechanism
