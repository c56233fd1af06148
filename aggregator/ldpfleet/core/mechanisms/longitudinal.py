"""What the longitudinal (memoised) mechanisms share (protocol_spec/v2 §3.2): the two-level
channels' integer thresholds, the enrolment charge, and the base class of L-OSUE, L-SUE,
L-GRR, LOLOHA and the memoised one-bit mean.

A longitudinal mechanism answers the same question every round of a recurring campaign. At
enrolment a device draws its **permanent state** from the OS RNG (`enrol`: every permanent
randomised response it can ever use, for every value or bucket at once) and charges its
ledger the campaign's worst-case lifetime bound (`enrolment_charge_milli`) once; afterwards
every round is an **instantaneous** randomisation of the memoised permanent response of the
current value (`reference_report` with `{"value": v, "state": ...}`), which costs nothing.
RAPPOR's permanent + instantaneous randomised response (Erlingsson, Pihur, Korolova, CCS 2014
§3); the chained parameters of Arcolezi, Couchot, Al Bouna, Xiao, "Improving the utility of
locally differentially private protocols for longitudinal and multidimensional frequency
estimates" (Digital Communications and Networks 2022) §3-4 and Arcolezi, Pinzón,
Palamidessi, Gambs, "Frequency estimation of evolving data under local differential privacy"
(EDBT 2023) §4.

Parameters: `eps_milli` is ε∞ (the permanent response's ε, what the device's ε cap applies
to), `params.eps1_milli` is ε1 (one report's ε), 1 <= ε1 < ε∞ as in both papers. The
instantaneous threshold is the paper's constraint "one report is ε1-LDP given the permanent
channel" solved over the integers: the binary search below returns the integer closest to the
paper's real solution on the private side, judged by an exact integer check of the realised
channel (spec §3.2).
"""
import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError
from .base import (ERROR_FIELDS, W, IntParam, bitmap_bytes, body_ptr, check_words,
                   os_random_words, report_array, run_chunks)
from .domain import DomainMechanism

S = protocol.SCALE
W2 = W * W
EPS1_MAX = protocol.MAX_EPS_MILLI - 1


def _default_eps1(eps_milli: int) -> int:
    return max(1, eps_milli // 2)


default_eps1_milli = _default_eps1
"""ε1 when a config or command names none: ε∞/2."""


EPS1_PARAM = IntParam(_default_eps1, 1, EPS1_MAX)


def check_eps_pair(eps_milli: int, eps1_milli: int):
    """ε1 < ε∞ (both papers' condition: the instantaneous step must add noise), else
    ConfigError("params.eps1_milli")."""
    if not 1 <= eps1_milli < eps_milli:
        raise ConfigError("params.eps1_milli", "eps1_milli (one report) must be in [1, eps_milli)"
                          " = [1, %d), got %d" % (eps_milli, eps1_milli))


def enrolment_charge_milli(classes: int, eps_milli: int, rounds=None) -> int:
    """THE enrolment charge (spec §3.2): a device memoises at most `classes` permanent
    responses (values or buckets) and uses at most one new one per round, so a campaign of
    `rounds` rounds (None: unbounded) costs at most min(classes, rounds)·ε∞ over its whole
    life, whatever the values do; charged once, when the device enrols."""
    if rounds is not None:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigError("rounds", "rounds must be a positive integer or None, got %r"
                              % (rounds,))
        classes = min(classes, rounds)
    return classes * eps_milli


# --- two-level channels: the instantaneous threshold ---------------------------------------

def lue_ok(t_p: int, t_q: int, f: int, e1: int) -> bool:
    """Unary encoding, permanent bit 1 w.p. t_p/W (the value's bit) or t_q/W (any other),
    then every bit flipped iff w < f: one report's ratio p*(1-q*) / (q*(1-p*)) <= e1/S, with
    p* = (t_p (W-f) + (W-t_p) f)/W^2 and q* likewise (the two bits where x and x' differ)."""
    ps = t_p * (W - f) + (W - t_p) * f
    qs = t_q * (W - f) + (W - t_q) * f
    return (ps * (W2 - qs) * S <= e1 * qs * (W2 - ps)
            and qs * (W2 - ps) * S <= e1 * ps * (W2 - qs))


def bit_ok(t0: int, f: int, e1: int) -> bool:
    """One memoised bit, 1 w.p. between t0/W and (W-t0)/W, flipped iff w < f: the report's
    ratio r_s / r_0 <= e1/S with r_j = T_j (W-f) + (W-T_j) f (both outputs give the same
    ratio by symmetry)."""
    r_hi = (W - t0) * (W - f) + t0 * f
    r_lo = t0 * (W - f) + (W - t0) * f
    return r_hi * S <= e1 * r_lo


def grr_chain_bounds(n: int, t_perm: int, t_inst: int):
    """Bounds (units W^4) on one report of GRR over n outputs (keep iff w < t_perm, else
    bucket(w', n-1)) followed by GRR (t_inst) of its output: ((same_lo, same_hi),
    (other_lo, other_hi)) for P(y = x | x) and P(y = v | x), v != x. Every non-kept output
    gets cnt_{n-1}(r) in [cmin, cmax] words. Needs t_inst·W >= (W - t_inst)·cmax."""
    c_lo, c_hi = protocol.cmin(n - 1), protocol.cmax(n - 1)
    k1, k2 = t_perm * W, t_inst * W
    o2_lo, o2_hi = (W - t_inst) * c_lo, (W - t_inst) * c_hi
    o1_lo, o1_hi = (W - t_perm) * c_lo, (W - t_perm) * c_hi
    r1 = W2 - k1
    same = (k1 * k2 + r1 * o2_lo, k1 * k2 + r1 * o2_hi)
    other = (o1_lo * (k2 - o2_lo) + W2 * o2_lo, o1_hi * (k2 - o2_hi) + W2 * o2_hi)
    return same, other


def grr_chain_ok(n: int, t_perm: int, t_inst: int, e1: int) -> bool:
    """Every pair (same/other, other/same, other/other, same/same) of the bounds <= e1/S."""
    (s_lo, s_hi), (o_lo, o_hi) = grr_chain_bounds(n, t_perm, t_inst)
    return all(hi * S <= e1 * lo for hi, lo in ((s_hi, o_lo), (o_hi, s_lo), (o_hi, o_lo),
                                                (s_hi, s_lo)))


def t_lue_inst(t_p: int, t_q: int, eps1_milli: int) -> int:
    """The smallest flip threshold f in [0, W/2] with `lue_ok` (f = W/2 always is)."""
    e1 = protocol.exp_lower(eps1_milli, 1000)
    lo, hi = -1, W // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if lue_ok(t_p, t_q, mid, e1):
            hi = mid
        else:
            lo = mid
    return hi


def t_bit_inst(t0: int, eps1_milli: int) -> int:
    """The smallest flip threshold f in [0, W/2] with `bit_ok`."""
    e1 = protocol.exp_lower(eps1_milli, 1000)
    lo, hi = -1, W // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bit_ok(t0, mid, e1):
            hi = mid
        else:
            lo = mid
    return hi


def grr_inst_floor(n: int) -> int:
    """The least keep threshold the chain bounds accept: t·W >= (W - t)·cmax(n-1)."""
    c_hi = protocol.cmax(n - 1)
    return -((-W * c_hi) // (W + c_hi))


def t_grr_inst(n: int, t_perm: int, eps1_milli: int, field: str = "params.eps1_milli") -> int:
    """The largest keep threshold t in [grr_inst_floor(n), W - 1] with `grr_chain_ok`;
    ConfigError(field) if not even the floor passes (ε1 below what n outputs allow)."""
    e1 = protocol.exp_lower(eps1_milli, 1000)
    lo = grr_inst_floor(n)
    if not grr_chain_ok(n, t_perm, lo, e1):
        raise ConfigError(field, "eps1_milli %d is too small for %d outputs" % (eps1_milli, n))
    hi = W
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if grr_chain_ok(n, t_perm, mid, e1):
            lo = mid
        else:
            hi = mid
    return lo


# --- the base class ---------------------------------------------------------------------

def split_input(value, state_size: int):
    """(value, state bytes) of a report input {"value": v, "state": bytes | hex}."""
    if not isinstance(value, dict) or set(value) != {"value", "state"}:
        raise TypeError("a longitudinal report takes {'value': v, 'state': the enrolment state}")
    state = value["state"]
    if isinstance(state, str):
        state = bytes.fromhex(state)
    state = bytes(state)
    if len(state) != state_size:
        raise ConfigError("enrolment_state", "%d bytes, expected %d" % (len(state), state_size))
    return value["value"], state


FOLD_FAULTS = ("version", "phase", "mechanism", "flags", "campaign_id")
"""`ldp_long_fold`'s fault codes 1-5 (6 is the mechanism's body field): the header rule's
order for reports of one phase (protocol.header_checks)."""


class LongitudinalMechanism(DomainMechanism):
    """A memoised mechanism: `enrol` (permanent state from words), then reports from the
    state. Subclasses set `classes` (how many permanent responses the state holds),
    `state_size`, `enrol_words`, the kernels `_enrol_kernel(n, words, out, stride)` and
    `_report_kernel(inputs, n, states, state_stride, words, out, stride)`, and the body rule
    of the C batch check (`fold_kind`, `fold_limit`, `body_field`: ldp_long_fold.h)."""

    PARAMS = {"eps1_milli": EPS1_PARAM}
    classes: int
    state_size: int
    enrol_words: int
    fold_kind: int
    fold_limit: int
    body_field = "y"

    def __init__(self, eps_milli: int, domain_size: int, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        check_eps_pair(eps_milli, self.eps1_milli)

    def enrolment_charge_milli(self, rounds=None) -> int:
        """What enrolling costs the device's ledger (`enrolment_charge_milli`)."""
        return enrolment_charge_milli(self.classes, self.eps_milli, rounds)

    # --- enrolment ---------------------------------------------------------------------
    def check_enrol_words(self, words) -> list:
        return check_words(words, self.enrol_words, self.name + " enrolment")

    def reference_enrol(self, words) -> bytes:
        """Plain-Python permanent state from `enrol_words` words (spec §3.2)."""
        raise NotImplementedError

    def c_enrol(self, words) -> bytes:
        w = np.array(self.check_enrol_words(words), np.uint32)
        out = np.zeros(self.state_size, np.uint8)
        if self._enrol_kernel(1, kernels.ptr(w), kernels.byte_ptr(out), self.state_size) != 0:
            raise ValueError("%s enrolment kernel rejected its input" % self.name)
        return out.tobytes()

    def enrol(self, words=None) -> bytes:
        """A device's permanent state; `words` only under test (production: the OS RNG)."""
        return self.reference_enrol(os_random_words(self.enrol_words) if words is None else words)

    def enrol_batch(self, n: int, rng) -> np.ndarray:
        """Simulation: (n, state_size) states through the C kernel, words from `rng`."""
        out = np.zeros((n, self.state_size), np.uint8)
        for start, stop in kernels.spans(n, kernels.chunk_rows(self.enrol_words)):
            words = kernels.random_words(rng, stop - start, self.enrol_words)
            if self._enrol_kernel(stop - start, kernels.ptr(words), kernels.byte_ptr(out[start:]),
                                  self.state_size) != 0:
                raise ValueError("%s enrolment kernel rejected its input" % self.name)
        return out

    # --- reports -----------------------------------------------------------------------
    def report_input(self, value) -> int:
        """The u32 the report kernel takes for `value` (index or key)."""
        return self.key_index(value)

    def report_inputs(self, values) -> np.ndarray:
        return self.key_indices(values)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        value, state = split_input(value, self.state_size)
        arr = np.array([self.report_input(value)], np.uint32)
        st = np.frombuffer(state, np.uint8).copy()
        w = np.array(self.check_words(words), np.uint32)
        out = np.zeros(self.body_size, np.uint8)
        if self._report_kernel(kernels.ptr(arr), 1, kernels.byte_ptr(st), self.state_size,
                               kernels.ptr(w), kernels.byte_ptr(out), self.body_size) != 0:
            raise ValueError("%s kernel rejected its input" % self.name)
        return self.header(seq) + out.tobytes()

    def report_batch(self, values, states: np.ndarray, rng, seq_start: int = 0) -> np.ndarray:
        """Simulation: one round's reports of n devices from their states (n, state_size)."""
        inputs = self.report_inputs(values).astype(np.uint32)
        states = np.ascontiguousarray(states, np.uint8)
        if states.shape != (inputs.shape[0], self.state_size):
            raise ValueError("states must be (%d, %d)" % (inputs.shape[0], self.state_size))
        out = report_array(self, inputs.shape[0], seq_start)

        def write(start, stop, words):
            chunk = np.ascontiguousarray(inputs[start:stop])
            if self._report_kernel(kernels.ptr(chunk), stop - start,
                                   kernels.byte_ptr(states[start:]), self.state_size,
                                   kernels.ptr(words), body_ptr(out, start), out.shape[1]) != 0:
                raise ValueError("%s kernel rejected its input" % self.name)

        run_chunks(self, rng, inputs.shape[0], write)
        return out

    def perturb_batch(self, keys, rng, seq_start: int = 0) -> np.ndarray:
        """One round of fresh devices (each enrolled from `rng`): the single-report marginal."""
        keys = np.asarray(keys)
        return self.report_batch(keys, self.enrol_batch(keys.shape[0], rng), rng, seq_start)

    # --- aggregator: the header and body checks in C ------------------------------------
    def fold_codes(self):
        """ERROR_FIELDS index of each `ldp_long_fold` fault code (0: valid, -1)."""
        codes = getattr(self, "_fold_codes", None)
        if codes is None:
            codes = np.array([-1] + [ERROR_FIELDS.index(f) for f in FOLD_FAULTS]
                             + [ERROR_FIELDS.index(self.body_field)], np.int16)
            self._fold_codes = codes
        return codes

    def fold_checked(self, arr: np.ndarray, counts=None, faults=None) -> int:
        """ONE C call over a C-contiguous (n, report_size) uint8 batch: every report's header
        (this mechanism, phase and campaign id) and body field checked; with `counts` (the
        sketch's int64 array) the batch added to it iff all are valid. Returns the number of
        invalid reports; `faults` (n uint8) receives every report's fault code."""
        key, expect = getattr(self, "_expect", (None, None))
        if key != (self.phase, self.campaign_id):  # the header's first 8 bytes, kept
            expect = self.header(0)[:8]
            self._expect = ((self.phase, self.campaign_id), expect)
        got = kernels.lib.ldp_long_fold(
            kernels.ffi.from_buffer("uint8_t[]", arr), arr.shape[0], arr.shape[1], expect,
            self.fold_kind, self.fold_limit,
            kernels.ffi.NULL if faults is None else kernels.ffi.from_buffer("uint8_t[]", faults),
            kernels.ffi.NULL if counts is None else kernels.ffi.from_buffer("int64_t[]", counts))
        if got < 0:
            raise ValueError("%s: ldp_long_fold refused its parameters" % self.name)
        return got

    def _c_batch(self, arr) -> bool:
        return (isinstance(arr, np.ndarray) and arr.ndim == 2 and arr.dtype == np.uint8
                and arr.shape[1] == self.report_size)

    def validate(self, arr: np.ndarray) -> np.ndarray:
        """`Mechanism.validate` (the same codes) in one C call when `arr` is a batch of this
        mechanism's report size."""
        if not self._c_batch(arr):
            return super().validate(arr)
        arr = np.ascontiguousarray(arr)
        faults = np.zeros(arr.shape[0], np.uint8)
        if arr.shape[0] == 0 or self.fold_checked(arr, faults=faults) == 0:
            return np.full(arr.shape[0], -1, np.int16)
        return self.fold_codes()[faults]

    def check(self, reports) -> np.ndarray:
        arr = self.as_report_array(reports)
        if self._c_batch(arr) and arr.shape[0] and self.fold_checked(
                np.ascontiguousarray(arr)) == 0:
            return arr
        return super().check(arr)

    def fold(self, sketch, reports, counts=None) -> int:
        """`Sketch.update` of a longitudinal sketch: the reports checked (ReportFormatError
        naming the first invalid one's field, as `check`) and, with `counts`, folded into
        them, in one C call; `sketch.n` advanced. Returns how many."""
        arr = np.ascontiguousarray(self.as_report_array(reports))
        if arr.shape[0] and self.fold_checked(arr, counts) != 0:
            self.check(arr)  # raises for the first invalid report
            raise AssertionError("ldp_long_fold and check disagree")
        sketch.n += arr.shape[0]
        return arr.shape[0]

    def support_pq_float(self):
        """`support_pq` as floats, computed once (the estimate of every round uses them)."""
        pq = getattr(self, "_pq_float", None)
        if pq is None:
            pq = self._pq_float = tuple(float(v) for v in self.support_pq())
        return pq

    def key_indices(self, keys) -> np.ndarray:
        """`DomainMechanism.key_indices`, short-cut for an unsigned array over 0..d-1."""
        if (self._domain_keys is None and isinstance(keys, np.ndarray) and keys.ndim == 1
                and keys.dtype.kind == "u" and (keys.size == 0 or keys.max() < self.domain_size)):
            return keys.astype(np.int64)
        return super().key_indices(keys)

    def describe_state(self) -> dict:
        """Sizes a ledger needs (spec §3.2)."""
        return {"state_bytes": self.state_size, "enrol_words": self.enrol_words,
                "classes": self.classes}


class CachedEstimate:
    """Sketch mixin: the support estimate with the mechanism's (p*, q*) as cached floats."""

    def support_estimate(self, support) -> np.ndarray:
        p, q = self.mechanism.support_pq_float()
        return (support - self.n * q) / (p - q)


def bitmap_rows(rows: int, bits: int) -> int:
    """Bytes of `rows` bitmaps of `bits` bits, each padded to whole bytes."""
    return rows * bitmap_bytes(bits)
