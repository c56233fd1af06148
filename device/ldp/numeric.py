"""Numeric mechanisms on the device (spec §3.3): the integer thresholds of Duchi's bit and of
the sliding window, and the viper helpers that draw them (the domain rules and the grid point of
a reading are in numeric_domain.py, which only the config check and the device loop need).

Thresholds are computed once per config with plain (big) integers; a report only runs the
viper helpers below, which compute every candidate output and select one arithmetically.
"""
import micropython

from .errors import ConfigError
from .thresholds import W, S, exp_lower, cmin, t_rr

GRID_MAX = 65536
PM_SPAN = 65536
HM_PM_FROM = 611
HM_SAMPLE = 2500


def check_grid(n):
    if not 2 <= n <= GRID_MAX:
        raise ConfigError("domain.points", "a numeric domain has 2..%d grid points" % GRID_MAX)


# --- spec §3.3: thresholds (config time) ------------------------------------------------------

def duchi_slope(eps_milli, n):
    """(s, T(0)): T(x) = T(0) + s x, s = 2 floor((2 T_rr - 2^32) / (2 (N-1)))."""
    s = 2 * ((2 * t_rr(eps_milli) - W) // (2 * (n - 1)))
    base = (1 << 31) - (s // 2) * (n - 1)
    if s < 2 or (base + s * (n - 1)) * S > exp_lower(eps_milli, 1000) * base:
        raise ConfigError("phases.eps_milli", "no integer Duchi slope at eps_milli %d over %d "
                          "grid points (spec §3.3)" % (eps_milli, n))
    return s, base


def _cmax(n):
    return W // n + (1 if W % n else 0)


def window_threshold(eps_milli, width, span, field="phases.eps_milli"):
    """T_win, after checking window_ok (ConfigError `field` if it fails)."""
    e = exp_lower(eps_milli, 1000)
    c = cmin(span)
    t = min(max((e * W * c) // (S * _cmax(width) + e * c), 1), W - 1)
    top = max(t * _cmax(width), (W - t) * _cmax(span))
    bottom = min(t * cmin(width), (W - t) * c)
    if not (width >= 1 and span >= 1 and bottom > 0 and top * S <= e * bottom):
        raise ConfigError(field, "the window (L %d, D %d) is not exactly eps-LDP at eps_milli %d "
                          "(spec §3.3)" % (width, span, eps_milli))
    return t


def pm_shape(eps_milli, n):
    """(u, D, L) of PM over N grid points."""
    u = PM_SPAN // (n - 1)
    span = u * (n - 1)
    return u, span, max(1, (span * S) // exp_lower(eps_milli, 2000))


def hm_choice_threshold(eps_milli):
    if eps_milli < HM_PM_FROM:
        return 0
    return W - (-(-W * S // exp_lower(eps_milli, 2000)))


# --- per report (viper: no allocation, the same steps whatever the branch) ---------------------

@micropython.viper
def duchi_bit(w: ptr8, i: int, base: uint, slope: uint, x: uint) -> int:
    """1 iff random word i < base + slope x (< 2^32)."""
    o = 4 * i
    v = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
    if v < base + slope * x:
        return 1
    return 0


@micropython.viper
def window_cell(w: ptr8, i: int, pos: uint, t: uint, width: uint, span: uint) -> int:
    """The window channel with words i, i + 1 (spec §3.3): p + bucket(w1, L) if w0 < T, else
    r + L [r >= p], r = bucket(w1, D). Both are computed; L, D <= 2^16, p <= 2^16."""
    o = 4 * i
    w0 = uint(w[o]) | (uint(w[o + 1]) << 8) | (uint(w[o + 2]) << 16) | (uint(w[o + 3]) << 24)
    w1 = uint(w[o + 4]) | (uint(w[o + 5]) << 8) | (uint(w[o + 6]) << 16) | (uint(w[o + 7]) << 24)
    hi = w1 >> 16
    lo = w1 & uint(0xFFFF)
    inside = pos + ((hi * width + ((lo * width) >> 16)) >> 16)
    r = (hi * span + ((lo * span) >> 16)) >> 16
    outside = r + width * ((r + uint(0x20000) - pos) >> 17)
    keep = uint(0)
    if w0 < t:
        keep = uint(1)
    return int(outside + keep * (inside - outside))


@micropython.viper
def put_u32(buf: ptr8, at: int, v: uint):
    buf[at] = v & 0xFF
    buf[at + 1] = (v >> 8) & 0xFF
    buf[at + 2] = (v >> 16) & 0xFF
    buf[at + 3] = (v >> 24) & 0xFF
