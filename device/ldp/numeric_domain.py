"""Numeric domains on the device (spec §1.1): the domain rules (the aggregator's
config.check_numeric_domain / check_numeric_phases) and the grid point of a reading."""
import math

from .errors import ConfigError
from .mechanisms import NUMERIC as NUMERIC_MECHANISMS

GRID_MAX = 65536
METRICS_MAX = 64
VALUE_MAX = 10 ** 15
NUMERIC_DOMAINS = ("range", "ranges")


# a reading beyond +-10^16 clips to an end of every domain (|lo|, |hi| <= VALUE_MAX, 10^d >= 1);
# 10^16 is a float exactly, so the clamp changes no grid point
_LIMIT = 10 ** 16
_NEG_LIMIT = -_LIMIT
_NUMBER = (int, float)


def grid_point(reading, lo, hi, decimals, n):
    """The grid point of a reading, never refusing (spec §1.1): floor(t + 1/2), t = (reading *
    10^decimals - lo) * (N - 1) / (hi - lo) in float, clipped to [0, N - 1]; not a number (None,
    a string, a bool, a list ...) or NaN: (N - 1) // 2; beyond either end (inf too): that end.

    The same steps for every reading (spec §7.1), selection instead of branches: a non-number
    is replaced by 0.0 and takes the same float steps, its midpoint chosen at the end by
    indexing; every number is first clamped to [-10^16, 10^16] by min/max (which return
    existing objects), so inf and 1e300 take the in-range steps and an int never converts
    past that range (no OverflowError path, no time growing with its digits); NaN flows
    through the arithmetic and `t == t` tells it. Every reading allocates the same heap
    (nine floats and three 2-tuples: 384 B on the unix port). What stays representation-
    dependent: an int outside the port's small-int range (|x| >= 2^62 on the unix port, 2^30
    on 32-bit boards) takes the long-int comparison path of the clamp (no allocation; within
    the noise, tens of ns at most, on the host). A firmware's sensor returns one type in one
    range: the type is public, the value is not."""
    num = isinstance(reading, _NUMBER) & (not isinstance(reading, bool))
    x = min(max((0.0, reading)[num], _NEG_LIMIT), _LIMIT)
    top = float(n - 1)
    t = (x * float(10 ** decimals) - float(lo)) * top / float(hi - lo)
    fin = t == t  # False for NaN only: x is finite or NaN, so t is
    t = min(max((0.0, t)[fin], 0.0), top)
    return ((n - 1) // 2, int(math.floor(t + 0.5)))[num & fin]


def _int(obj, key, field, lo, hi):
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError(field, "%s must be an integer in [%d, %d], got %r" % (key, lo, hi, v))
    return v


def _metric(m, field):
    if not isinstance(m, dict):
        raise ConfigError(field, "a metric must be an object")
    lo = _int(m, "lo", field, -VALUE_MAX, VALUE_MAX)
    hi = _int(m, "hi", field, -VALUE_MAX, VALUE_MAX)
    if lo >= hi:
        raise ConfigError(field, "lo must be below hi, got %d >= %d" % (lo, hi))
    if "decimals" in m:
        _int(m, "decimals", field, 0, 9)
    for key in ("name", "unit"):
        if key in m and (not isinstance(m[key], str) or not 1 <= len(m[key]) <= 64):
            raise ConfigError(field, "%s must be a string of 1..64 characters" % key)
    return lo, hi


def check_numeric_domain(domain):
    """A `range` / `ranges` domain (spec §1.1); returns its grid points N."""
    if domain.get("type") == "range":
        lo, hi = _metric(domain, "domain.range")
        res = _int(domain, "resolution", "domain.resolution", 1, 2 * VALUE_MAX)
        if (hi - lo) % res:
            raise ConfigError("domain.resolution", "hi - lo = %d is not a multiple of the "
                              "resolution %d" % (hi - lo, res))
        points = (hi - lo) // res + 1
        if points > GRID_MAX:
            raise ConfigError("domain.resolution", "(hi - lo) / resolution + 1 = %d grid points, "
                              "at most %d" % (points, GRID_MAX))
        return points
    points = _int(domain, "points", "domain.points", 2, GRID_MAX)
    metrics = domain.get("metrics")
    if not isinstance(metrics, list) or not 1 <= len(metrics) <= METRICS_MAX:
        raise ConfigError("domain.metrics", "1..%d metrics" % METRICS_MAX)
    for m in metrics:
        _metric(m, "domain.metrics")
    return points


def domain_metrics(domain):
    """[(lo, hi, decimals)] of each metric."""
    ms = domain["metrics"] if domain["type"] == "ranges" else [domain]
    return [(m["lo"], m["hi"], m.get("decimals", 0)) for m in ms]


def check_numeric_phases(doc):
    """Numeric mechanisms on numeric domains only; hm's `metrics` equals the domain's; sw
    spells out bins and window."""
    dom = doc["domain"]
    numeric = dom.get("type") in NUMERIC_DOMAINS
    for ph in doc["phases"]:
        name = ph["mechanism"]
        if (name in NUMERIC_MECHANISMS) != numeric:
            raise ConfigError("phases.mechanism", "%s does not run on a %s domain"
                              % (name, dom.get("type")))
        if not numeric:
            continue
        d = len(dom["metrics"]) if dom["type"] == "ranges" else 1
        got = ph.get("params", {}).get("metrics", 1) if name == "hm" else 1
        if got != d:
            raise ConfigError("params.metrics", "%s reports %r metric(s), the domain has %d"
                              % (name, got, d))
        params = ph.get("params", {})
        if name == "sw" and ("bins" not in params or "window" not in params):
            raise ConfigError("phases.params", "sw needs bins and window (spec §3.3)")
