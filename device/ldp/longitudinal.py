"""What the memoised (longitudinal) mechanisms share on a device (spec §3.2): the ε pair, the
instantaneous thresholds, the enrolment charge and the state a report reads.

`eps_milli` is ε∞ (the permanent response), `params.eps1_milli` ε1 (one report), 1 <= ε1 < ε∞.
`enrol(rand)` draws the permanent state once (every permanent response the device can ever
use); `charge_milli(rounds)` is what enrolling costs the ledger, whatever the values will do;
`report({"value": v, "state": state}, nonce, rand)` reads the state, never writes it.
Thresholds: exact big-integer checks, identical to ldpfleet.core.mechanisms.longitudinal
(configuration time only).
"""
from os import urandom

from . import mechanisms  # noqa: F401  (registers the memoised mechanisms' ids)
from .errors import ConfigError
from .report import Report, param
from .thresholds import S, W, cmin, exp_lower

W2 = W * W


def lue_ok(t_p, t_q, f, e1):
    ps = t_p * (W - f) + (W - t_p) * f
    qs = t_q * (W - f) + (W - t_q) * f
    return (ps * (W2 - qs) * S <= e1 * qs * (W2 - ps)
            and qs * (W2 - ps) * S <= e1 * ps * (W2 - qs))


def bit_ok(t0, f, e1):
    return ((W - t0) * (W - f) + t0 * f) * S <= e1 * (t0 * (W - f) + (W - t0) * f)


def _smallest_flip(ok, eps1_milli):
    """The smallest f in [0, W/2] with ok(f, e1) (ok(W/2) always holds)."""
    e1 = exp_lower(eps1_milli, 1000)
    lo, hi = -1, W // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid, e1):
            hi = mid
        else:
            lo = mid
    return hi


def lue_inst(t_p, t_q, eps1_milli):
    return _smallest_flip(lambda f, e1: lue_ok(t_p, t_q, f, e1), eps1_milli)


def bit_inst(t0, eps1_milli):
    return _smallest_flip(lambda f, e1: bit_ok(t0, f, e1), eps1_milli)


def _cmax(n):
    return cmin(n) + (1 if W % n else 0)


def grr_chain_ok(n, t_perm, t_inst, e1):
    c_lo, c_hi = cmin(n - 1), _cmax(n - 1)
    k1, k2 = t_perm * W, t_inst * W
    o1_lo, o1_hi = (W - t_perm) * c_lo, (W - t_perm) * c_hi
    o2_lo, o2_hi = (W - t_inst) * c_lo, (W - t_inst) * c_hi
    r1 = W2 - k1
    s_lo, s_hi = k1 * k2 + r1 * o2_lo, k1 * k2 + r1 * o2_hi
    x_lo = o1_lo * (k2 - o2_lo) + W2 * o2_lo
    x_hi = o1_hi * (k2 - o2_hi) + W2 * o2_hi
    for hi, lo in ((s_hi, x_lo), (x_hi, s_lo), (x_hi, x_lo), (s_hi, s_lo)):
        if hi * S > e1 * lo:
            return False
    return True


def grr_inst(n, t_perm, eps1_milli):
    """The largest keep threshold the chain bounds accept (spec §3.2), else ConfigError."""
    e1 = exp_lower(eps1_milli, 1000)
    c_hi = _cmax(n - 1)
    lo = (W * c_hi + W + c_hi - 1) // (W + c_hi)
    if not grr_chain_ok(n, t_perm, lo, e1):
        raise ConfigError("phases.params", "eps1_milli is too small for %d outputs" % n)
    hi = W
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if grr_chain_ok(n, t_perm, mid, e1):
            lo = mid
        else:
            hi = mid
    return lo


class Memoised(Report):
    """Base of the memoised mechanisms. Subclasses set `classes`, `state_size`,
    `enrol_words` and implement `_enrol(rand, state)` and `report`."""

    classes = 0
    state_size = 0
    enrol_words = 0

    def __init__(self, eps_milli, domain_size, salt, campaign_id, phase, params, body_size):
        self.eps1 = param(params, "eps1_milli", 1, 63999)
        if self.eps1 >= eps_milli:
            raise ConfigError("phases.params", "eps1_milli must be below eps_milli")
        super().__init__(eps_milli, domain_size, salt, campaign_id, phase, body_size)

    def charge_milli(self, rounds=None):
        """The enrolment charge (spec §3.2): min(classes, rounds)·ε∞, rounds None = unbounded.
        Depends on the config only: never on a value."""
        c = self.classes
        if rounds is not None:
            if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
                raise ValueError("rounds must be a positive integer or None")
            c = min(c, rounds)
        return c * self.eps_milli

    def enrol(self, rand=urandom):
        """The permanent state, drawn once from `rand` (the OS RNG)."""
        state = bytearray(self.state_size)
        self._enrol(rand, state)
        return bytes(state)

    def _input(self, value):
        """(value, state) of a report input; ValueError if the state is not this campaign's size."""
        state = value["state"]
        if len(state) != self.state_size:
            raise ValueError("enrolment state of the wrong size")
        return value["value"], state
