"""`shc`: sampling SH with correlated phases (protocol_spec/v2 §3 id 12, §3.1).

LDPMiner (Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential
Privacy", CCS 2016) §4.4 "Optimization": a device that reports the same item in both phases of
LDPMiner-SH correlates the two perturbations, so that the pair is (eps1 + eps2)-LDP while the
phase-2 sign alone is nearly as accurate as one sign at eps1 + eps2. The paper's version (re-use
the phase-1 item if it is a candidate, else sample another) is not eps-LDP (spec §3.1); `shc`
always keeps its phase-1 element, row and bit, candidate or not.

Phase 1 (R = 4): sampling SH (§4.2 Alg. 2) with the dummy as a fair bit x from w3, so real
element and dummy are the same Markov chain: i = bucket(w0, L), t = bucket(w1, m),
x = phi(t, key_i) or (dummy) +1 iff w3 < 2^31, y1 = x iff w2 < T_rr(eps1). The device keeps
(t, y1, x) (`ShcMemo`).
Phase 2 (R = 1): y2 = x iff w0 < (T_shc_a if y1 == x else T_shc_b); the body repeats t. Given x,
y2 keeps x with probability p2 = (T1 A + (W - T1) B) / W^2 whatever y1 was.

Both phases' bodies are `sh`'s (t:u32, sign:u8) and are folded into `ShSketch` (z[t] sums); the
estimate is l / (2p - 1) sum_t z[t] phi(t, v) with p = T1/W in phase 1 and p2 in phase 2, whose
variance is `sh`'s formula at that p (`ShMechanism.item_variances`).
"""
from collections import namedtuple

import numpy as np

from .. import protocol
from ..errors import ConfigError
from ..kernels import ffi, lib, ptr
from .base import W, body_ptr, body_u32, check_words, report_array, run_chunks
from .sh import HALF, CandidateMixin, ShMechanism, key_sets, one_set, sampled_index

ShcMemo = namedtuple("ShcMemo", "t y1 x")
ShcMemo.__doc__ = ("What a device keeps from its `shc` phase-1 report (spec §3.1), per user: "
                   "row t (u32), its phase-1 sign byte y1 and its bit x (1 = +1, 0 = -1).")


def memo_from_reports(reports: np.ndarray, x) -> ShcMemo:
    """ShcMemo of phase-1 reports ((n, 17) uint8) and their x bits."""
    bodies = reports[:, protocol.HEADER_SIZE:]
    return ShcMemo(np.ascontiguousarray(body_u32(bodies, 0), np.uint32),
                   np.ascontiguousarray(bodies[:, 4], np.uint8),
                   np.ascontiguousarray(x, np.uint8))


def phase2_value(value):
    """(t, y1 bit, x bit) of one device's phase-2 input: a mapping {"t", "y1", "x"} or a
    (t, y1, x) sequence; y1 and x as bits (1 = +1) or signs (+1 / -1)."""
    if isinstance(value, dict):
        value = (value["t"], value["y1"], value["x"])
    t, y1, x = (int(v) for v in value)

    def bit(v, name):
        if v in (0, -1):
            return 0
        if v == 1:
            return 1
        raise ConfigError(name, "must be a bit (0/1) or a sign (-1/+1), got %r" % (v,))
    if not 0 <= t < W:
        raise ConfigError("t", "must be a u32, got %r" % t)
    return t, bit(y1, "y1"), bit(x, "x")


class ShcMechanism(CandidateMixin, ShMechanism):
    """`shc` in one phase: `m` rows (2..65536) and set length `l` (1..65536), equal in both
    phases. Phase 2 needs phase 1's eps (`eps1_milli`, which `config.mechanism_for_phase`
    passes) and takes the phase-2 candidates only as the keys the answer is for (devices
    validate the list but do not use it)."""

    name = "shc"

    def __init__(self, eps_milli: int, domain_size: int, eps1_milli: int = None,
                 candidates=None, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        if self.phase not in (1, 2):
            raise ConfigError("phases", "shc has phases 1 and 2, not %r" % self.phase)
        self.candidates = None
        if candidates is not None:
            self.set_candidates(candidates)
        if self.phase == 1:
            if eps1_milli is not None and int(eps1_milli) != eps_milli:
                raise ConfigError("phases.eps_milli", "shc phase 1 runs at its own eps")
            self.eps1_milli = eps_milli
            self.t_a = self.t_b = 0
        else:
            if eps1_milli is None:
                raise ConfigError("phases.eps_milli", "shc phase 2 needs phase 1's eps_milli")
            self.eps1_milli = int(eps1_milli)
            if not protocol.shc_ok(self.eps1_milli, eps_milli):
                raise ConfigError("phases.eps_milli", "shc_ok(%d, %d) fails (spec §3.1)"
                                  % (self.eps1_milli, eps_milli))
            self.t_rr, self.t_a, self.t_b = protocol.shc_thresholds(self.eps1_milli, eps_milli)
        self._cparams = ffi.new("ldp_shc_params *", {
            "l": self.l, "salt": self.salt, "m": self.m, "t_rr": self.t_rr,
            "t_a": self.t_a, "t_b": self.t_b})

    @property
    def random_words(self) -> int:
        return 4 if self.phase == 1 else 1

    @property
    def keep_probability(self) -> float:
        """T1/W in phase 1; p2 = (T1 A + (W - T1) B) / W^2 in phase 2 (spec §3.1)."""
        if self.phase == 1:
            return self.t_rr / W
        return (self.t_rr * self.t_a + (W - self.t_rr) * self.t_b) / (W * W)

    def describe(self) -> dict:
        """As every mechanism's, with phase 2's `eps1_milli` among the params (a sketch
        rebuilds its mechanism from this; the config's phase entry does not carry it)."""
        desc = super().describe()
        if self.phase == 2:
            desc["params"] = dict(desc["params"], eps1_milli=self.eps1_milli)
        return desc

    # --- client face: plain-Python reference --------------------------------------------------
    def reference_phase1(self, value, words, seq: int = 0):
        """(report, x bit) of phase 1 from words w0..w3 (spec §3.1)."""
        keys = one_set(value)
        w0, w1, w2, w3 = check_words(words, 4, self.name)
        i = sampled_index(w0, len(keys), self.l)
        t = protocol.bucket(w1, self.m)
        if i < len(keys):
            x = protocol.keyed_hash(keys[i], protocol.row_seed(self.salt, t)) < HALF
        else:
            x = w3 < HALF
        plus = x == (w2 < self.t_rr)
        return self.header(seq) + t.to_bytes(4, "little") + bytes([plus]), int(x)

    def reference_phase2(self, value, words, seq: int = 0) -> bytes:
        """Phase 2 from a device's (t, y1, x) and one word (spec §3.1)."""
        t, y1, x = phase2_value(value)
        (w0,) = check_words(words, 1, self.name)
        keep = w0 < (self.t_a if y1 == x else self.t_b)
        return self.header(seq) + t.to_bytes(4, "little") + bytes([x == keep])

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        """Phase 1: `value` is the set; phase 2: the device's (t, y1, x) (`phase2_value`)."""
        if self.phase == 1:
            return self.reference_phase1(value, words, seq)[0]
        return self.reference_phase2(value, words, seq)

    # --- client face: C kernels ----------------------------------------------------------------
    def c_report(self, value, words, seq: int = 0) -> bytes:
        words = np.array(check_words(words, self.random_words, self.name), np.uint32)
        out = report_array(self, 1, seq)
        if self.phase == 1:
            self._kernel(key_sets([value]), 0, 1, words, out, np.zeros(1, np.uint8))
        else:
            t, y1, x = phase2_value(value)
            self._kernel2(ShcMemo(np.array([t], np.uint32), np.array([y1], np.uint8),
                                  np.array([x], np.uint8)), 0, 1, words, out)
        return out.tobytes()

    def _kernel(self, sets, start, stop, words, out, x=None):
        if x is None:
            x = np.zeros(out.shape[0], np.uint8)
        lib.ldp_shc_perturb1(self._cparams, ptr(sets.keys), ptr(sets.offsets[start:]),
                             stop - start, ptr(words), body_ptr(out, start), out.shape[1],
                             ptr(x[start:]))

    def _kernel2(self, memo, start, stop, words, out):
        lib.ldp_shc_perturb2(self._cparams, ptr(memo.t[start:]), ptr(memo.y1[start:]),
                             ptr(memo.x[start:]), stop - start, ptr(words),
                             body_ptr(out, start), out.shape[1])

    def perturb_phase1(self, sets, rng, seq_start: int = 0):
        """Simulation, phase 1: (reports (n, 17) uint8, x bits (n,) uint8), C kernel per chunk."""
        if self.phase != 1:
            raise ValueError("perturb_phase1 on a phase-%d shc mechanism" % self.phase)
        sets = key_sets(sets)
        n = sets.offsets.size - 1
        out = report_array(self, n, seq_start)
        x = np.zeros(n, np.uint8)
        run_chunks(self, rng, n, lambda a, b, words: self._kernel(sets, a, b, words, out, x))
        return out, x

    def perturb_phase2(self, memo: ShcMemo, rng, seq_start: int = 0) -> np.ndarray:
        """Simulation, phase 2: every user's report from its ShcMemo, C kernel per chunk."""
        if self.phase != 2:
            raise ValueError("perturb_phase2 on a phase-%d shc mechanism" % self.phase)
        memo = ShcMemo(np.ascontiguousarray(memo.t, np.uint32),
                       np.ascontiguousarray(memo.y1, np.uint8),
                       np.ascontiguousarray(memo.x, np.uint8))
        n = memo.t.size
        if not memo.y1.size == memo.x.size == n:
            raise ValueError("t, y1 and x must have one entry per user")
        if n and int(memo.t.max()) >= self.m:
            raise ValueError("a memo's row t is not below m = %d" % self.m)
        out = report_array(self, n, seq_start)
        run_chunks(self, rng, n, lambda a, b, words: self._kernel2(memo, a, b, words, out))
        return out

    def perturb_batch(self, values, rng, seq_start: int = 0) -> np.ndarray:
        """Phase 1: the users' sets; phase 2: their ShcMemo."""
        if self.phase == 1:
            return self.perturb_phase1(values, rng, seq_start)[0]
        if not isinstance(values, ShcMemo):
            raise TypeError("shc phase 2 perturbs each device's phase-1 memo (ShcMemo), "
                            "not sets")
        return self.perturb_phase2(values, rng, seq_start)


MECHANISM = ShcMechanism
