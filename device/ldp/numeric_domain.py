"""Numeric domains on the device (spec §1.1): the domain rules (the aggregator's
config.check_numeric_domain / check_numeric_phases) and the grid point of a reading."""
import math

from .errors import ConfigError
from .mechanisms import NUMERIC as NUMERIC_MECHANISMS

GRID_MAX = 65536
METRICS_MAX = 64
VALUE_MAX = 10 ** 15
NUMERIC_DOMAINS = ("range", "ranges")


def grid_point(reading, lo, hi, decimals, n):
    """The grid point of a reading, never refusing: floor(t + 1/2), t = (reading * 10^decimals
    - lo) * (N - 1) / (hi - lo) clipped to [0, N - 1]; not a number or NaN: (N - 1) // 2."""
    t = float((n - 1) // 2)
    if isinstance(reading, (int, float)) and not isinstance(reading, bool):
        try:
            v = float(reading)
        except OverflowError:
            v = math.inf if reading > 0 else -math.inf
        t = (v * float(10 ** decimals) - float(lo)) * float(n - 1) / float(hi - lo)
        if t != t:
            t = float((n - 1) // 2)
    t = min(max(t, 0.0), float(n - 1))
    return int(math.floor(t + 0.5))


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
