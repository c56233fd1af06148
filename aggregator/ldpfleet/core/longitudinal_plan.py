"""The planner of recurring campaigns (protocol_spec/v2 §3.2, §3.4): per memoised protocol, the
error of one round's frequency estimates at n devices over k items, and what a device is
charged over its life (the enrolment charge, min(classes, R)·ε∞); and `auto`'s choice among
them. `ldpfleet plan --every P --rounds R`, `ldpfleet simulate --rounds R` and
tools/longitudinal_table.py all read these rows: one rule, one place.

Protocols: L-OSUE, L-SUE, L-GRR (Arcolezi, Couchot, Al Bouna, Xiao, "Improving the utility of
locally differentially private protocols for longitudinal and multidimensional frequency
estimates", Digital Communications and Networks 2022, §4), OLOLOHA and BiLOLOHA (Arcolezi,
Pinzón, Palamidessi, Gambs, "Frequency estimation of evolving data under local differential
privacy", EDBT 2023, §4; OLOLOHA's g is §4.3's optimum). The baseline `every-round-oue`
re-reports a fresh one-shot OUE at ε1 every round: same per-round error as L-OSUE, lifetime
R·ε1.

`auto` (`choose`): among the feasible memoised protocols whose lifetime ε fits the device's
lifetime budget (default 40 nats, the board default of `flash --budget`), the one with the
smallest per-round MSE (mean over the k items of the exact item variance at the given
frequencies, uniform by default); ties go to the smaller lifetime ε, then the smaller report.
A one-shot mechanism re-reported every round is never chosen: a recurring campaign takes a
memoised mechanism only (§3.4).
"""
import numpy as np

from .errors import ConfigError
from .mechanisms import make_mechanism
from .mechanisms.longitudinal import check_eps_pair
from .schedule import HEADER, ROUND_HEADER

PROTOCOLS = {
    "l-osue": ("losue", {}),
    "l-sue": ("lsue", {}),
    "l-grr": ("lgrr", {}),
    "ololoha": ("loloha", {}),
    "biloloha": ("loloha", {"g": 2}),
}
"""Protocol name -> (mechanism, fixed parameters)."""
BASELINE = "every-round-oue"
ROUND_FIELD = ROUND_HEADER - HEADER
"""A recurring campaign's report carries round:u32 after the header (spec §3.4): the
memoised protocols' `report_bytes` count it (the baseline's is a one-shot report's)."""
DEFAULT_LIFETIME_BUDGET = 40.0
"""Nats: a board's default lifetime budget (`ldpfleet flash --budget`, provision.boards)."""


def protocol_mechanism(protocol: str, eps_milli: int, eps1_milli: int, domain_size: int, **kw):
    """The mechanism a longitudinal protocol runs (ConfigError for an unknown name)."""
    if protocol not in PROTOCOLS:
        raise ConfigError("protocol", "unknown longitudinal protocol %r (known: %s)"
                          % (protocol, ", ".join(PROTOCOLS)))
    name, params = PROTOCOLS[protocol]
    return make_mechanism(name, eps_milli, domain_size, eps1_milli=eps1_milli, **params, **kw)


def _per_round(mech, users: int, freqs) -> dict:
    var0 = mech.variance(users)
    mse = var0 if freqs is None else float(np.mean(mech.item_variances(users, freqs)))
    return {"per_round_variance": var0, "per_round_sd": var0 ** 0.5, "per_round_mse": mse}


def plan_longitudinal(eps_milli: int, eps1_milli: int, domain_size: int, users: int, rounds=None,
                      protocols=tuple(PROTOCOLS), baseline: bool = True, freqs=None) -> list:
    """Per protocol: the per-round variance and standard deviation of a frequency estimate
    (an item of frequency 0, the usual f -> 0 figure), the per-round MSE (the item variances
    averaged over the k items at the true fractions `freqs`; None: uniform), the lifetime ε a
    device is charged at enrolment for `rounds` rounds (None: no round limit), report (with
    the round header) and state sizes; infeasible ones with the reason. The baseline re-reports fresh OUE at ε1
    every round (lifetime rounds·ε1)."""
    if freqs is None:
        freqs = np.full(domain_size, 1.0 / domain_size)
    rows = []
    for name in protocols:
        try:
            mech = protocol_mechanism(name, eps_milli, eps1_milli, domain_size)
        except (ConfigError, ValueError) as exc:
            rows.append({"protocol": name, "feasible": False, "reason": str(exc)})
            continue
        rows.append(dict({"protocol": name, "feasible": True, "mechanism": mech.name,
                          "params": mech.config_params(),
                          "lifetime_eps": mech.enrolment_charge_milli(rounds) / 1000.0,
                          "report_bytes": mech.report_size + ROUND_FIELD,
                          "state_bytes": mech.state_size},
                         **_per_round(mech, users, freqs)))
    if baseline:
        oue = make_mechanism("oue", eps1_milli, domain_size)
        rows.append(dict({"protocol": BASELINE, "feasible": True, "mechanism": "oue",
                          "params": {},
                          "lifetime_eps": None if rounds is None else rounds * eps1_milli / 1000.0,
                          "report_bytes": oue.report_size, "state_bytes": 0},
                         **_per_round(oue, users, freqs)))
    return rows


def choose(rows: list, lifetime_budget: float = DEFAULT_LIFETIME_BUDGET) -> dict:
    """`auto` over `plan_longitudinal` rows (module docstring): {"chosen": protocol or None,
    "reason": why}."""
    if not lifetime_budget > 0:
        raise ConfigError("lifetime_budget", "must be > 0, got %r" % (lifetime_budget,))
    memoised = [r for r in rows if r["feasible"] and r["protocol"] in PROTOCOLS]
    fits = [r for r in memoised if r["lifetime_eps"] <= lifetime_budget + 1e-9]
    if not fits:
        least = min(memoised, key=lambda r: r["lifetime_eps"], default=None)
        return {"chosen": None, "reason": "no memoised protocol fits a lifetime budget of %g"
                % lifetime_budget + ("" if least is None else
                                     " (the least charge: %s, %g)" % (least["protocol"],
                                                                      least["lifetime_eps"]))}
    best = min(fits, key=lambda r: (r["per_round_mse"], r["lifetime_eps"], r["report_bytes"]))
    over = sorted(r["protocol"] for r in memoised if r not in fits)
    return {"chosen": best["protocol"],
            "reason": "the smallest per-round MSE among the protocols whose lifetime eps fits "
                      "the budget %g%s" % (lifetime_budget, "" if not over else
                                           " (over it: %s)" % ", ".join(over))}


def plan_recurring(eps_milli: int, eps1_milli: int, domain_size: int, users: int, rounds=None,
                   lifetime_budget: float = DEFAULT_LIFETIME_BUDGET, freqs=None) -> dict:
    """Every protocol's row (`plan_longitudinal`, with the baseline) and `auto`'s choice."""
    check_eps_pair(eps_milli, eps1_milli)
    if users < 1:
        raise ConfigError("users", "must be >= 1, got %r" % (users,))
    if not 2 <= domain_size:
        raise ConfigError("domain", "must be >= 2, got %r" % (domain_size,))
    rows = plan_longitudinal(eps_milli, eps1_milli, domain_size, users, rounds, freqs=freqs)
    auto = choose(rows, lifetime_budget)
    return {"eps_milli": eps_milli, "eps1_milli": eps1_milli, "domain": domain_size,
            "users": users, "rounds": rounds, "lifetime_budget": lifetime_budget,
            "auto": auto["chosen"], "auto_reason": auto["reason"], "protocols": rows}
