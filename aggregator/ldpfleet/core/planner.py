"""Accuracy planner for pilots: which mechanism, what error for N users, or N for a target error.

Expected error comes from each mechanism's own `variance(n)` (the theory the simulator is
checked against); decode cost is counted in elementary operations of the aggregator's kernels.
"""
import math

from . import protocol
from .errors import ConfigError
from .mechanisms import make_mechanism

CANDIDATES = ("grr", "oue", "olh", "flh", "hcms", "cms")
# Relative variance slack within which a cheaper-to-decode mechanism is preferred.
VARIANCE_SLACK = 0.10


def decode_ops(mech, n: int) -> float:
    """Aggregator work for n reports over the whole domain (kernel operations)."""
    d = mech.domain_size
    p = mech.params
    if mech.name == "grr":
        return n + d
    if mech.name == "oue":
        return n * math.ceil(d / 8) + d
    if mech.name == "olh":
        return float(n) * d
    if mech.name == "flh":
        return n + p.get("kp", 10000) * d
    if mech.name == "hcms":
        k, m = p["k"], p["m"]
        return n + k * m * math.log2(m) + k * d
    if mech.name in ("cms", "lcm"):
        k, m = p["k"], p["m"]
        return n * math.ceil(m / 8) + k * d
    return float(n) * d


def users_for_target(mech, target_mse: float, n_max: int = 10 ** 12):
    """Smallest n with variance(n) <= target (bisection; variance decreases in n)."""
    if mech.variance(n_max) > target_mse:
        return None
    lo, hi = 1, n_max
    while lo < hi:
        mid = (lo + hi) // 2
        if mech.variance(mid) <= target_mse:
            hi = mid
        else:
            lo = mid + 1
    return lo


def plan(eps: float, domain: int, users: int = None, target_mse: float = None,
         report_bytes_max: int = None, candidates=CANDIDATES, params: dict = None) -> dict:
    """Rank candidate mechanisms; recommend the lowest-variance one within the byte limit,
    preferring a cheaper decoder when its variance is within VARIANCE_SLACK. `params`: given
    to every candidate (e.g. the memoised mechanisms' `eps1_milli`)."""
    if (users is None) == (target_mse is None):
        raise ConfigError("users", "give exactly one of users / target_mse")
    try:
        eps_milli = protocol.eps_to_milli(eps)
    except ValueError as exc:  # the wire format's own check, one call: name the option
        raise ConfigError("epsilon", str(exc)) from None
    if not 2 <= domain <= protocol.WORD:
        raise ConfigError("domain", "must be in [2, 2^32], got %r" % (domain,))
    if users is not None and users < 1:
        raise ConfigError("users", "must be >= 1, got %r" % (users,))
    if target_mse is not None and not (math.isfinite(target_mse) and target_mse > 0):
        raise ConfigError("target_mse", "must be a positive number, got %r" % (target_mse,))
    if report_bytes_max is not None and report_bytes_max < protocol.HEADER_SIZE + 1:
        raise ConfigError("report_bytes_max", "must be at least %d (header + 1 byte), got %r"
                          % (protocol.HEADER_SIZE + 1, report_bytes_max))
    rows = []
    for name in candidates:
        try:
            mech = make_mechanism(name, eps_milli, domain, **(params or {}))
        except (ValueError, ImportError) as exc:
            rows.append({"mechanism": name, "feasible": False, "reason": str(exc)})
            continue
        row = {"mechanism": name, "params": mech.config_params(), "report_bytes": mech.report_size}
        if report_bytes_max is not None and mech.report_size > report_bytes_max:
            row.update(feasible=False, reason="report of %d bytes > %d" % (mech.report_size, report_bytes_max))
            rows.append(row)
            continue
        n = users
        if target_mse is not None:
            n = users_for_target(mech, target_mse)
            row["users_needed"] = n
            if n is None:
                row.update(feasible=False, reason="target not reachable")
                rows.append(row)
                continue
        row.update(feasible=True, expected_mse=mech.variance(n), decode_ops=decode_ops(mech, n))
        rows.append(row)
    feasible = [r for r in rows if r["feasible"]]
    if not feasible:
        return {"recommended": None, "candidates": rows}
    key = "users_needed" if target_mse is not None else "expected_mse"
    best = min(r[key] for r in feasible)
    near = [r for r in feasible if r[key] <= best * (1 + VARIANCE_SLACK)]
    choice = min(near, key=lambda r: (r["decode_ops"], r["report_bytes"]))
    return {"epsilon": eps, "domain": domain, "users": users, "target_mse": target_mse,
            "report_bytes_max": report_bytes_max, "recommended": choice["mechanism"],
            "recommended_params": choice["params"], "candidates": rows}
