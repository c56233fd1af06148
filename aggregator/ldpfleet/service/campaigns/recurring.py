"""Creating recurring campaigns (protocol_spec/v2 §3.4, §5.4 `schedule`): `campaign create
--every P [--rounds N | --until T] [--start T] [--eps1 E]`.

`Recurrence` turns the options into the config's validity window and `schedule`: `start`
(default: now), `every_s`, and either `rounds` (then not_after = start + N·P) or not_after =
T (`--until`; R = ceil((T − start)/P)); without either, the window of `--valid-days`. The rules
of a schedule are core/schedule.py's (`check_schedule` runs in `config.check_config`); here
only the options are parsed, each refused with its own field (`every`, `rounds`, `until`,
`start`, `eps1`).

A recurring campaign runs a memoised mechanism (§3.2). `choose_memoised` is `--protocol auto
--every`: the planner (core/planner.py) ranks the memoised mechanisms that fit the domain by
one round's variance (`Mechanism.variance`, at ε∞ and ε1) and takes the lowest, preferring a
cheaper decoder within the planner's slack — L-OSUE vs LOLOHA vs L-GRR as in Arcolezi,
Pinzón, Palamidessi, Gambs, "Frequency estimation of evolving data under local differential
privacy" (EDBT 2023) §5, and Arcolezi et al., "Improving the utility of locally differentially
private protocols for longitudinal and multidimensional frequency estimates" (DCN 2022) §5.
No memoised mechanism runs on a numeric (`range`) domain: `lbitmean` takes an integer counter
over an `int` domain, and `auto` does not guess that a frequency question is a mean one.
"""
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ...core import config as cfgmod
from ...core import protocol, schedule
from ...core.errors import ConfigError
from ...core.schedule import parse_period  # noqa: F401 (the one period parser)

FREQUENCY_MEMOISED = ("losue", "lsue", "lgrr", "loloha")
"""The memoised frequency oracles `auto` chooses among (lbitmean is the numeric one)."""
DEFAULT_FLEET = 10000
"""Fleet size the ranking assumes without --fleet-size (a variance ranking does not depend on
it: every candidate's variance scales as 1/n)."""


def parse_time(text, field: str) -> int:
    """Unix seconds, or an ISO-8601 date / date-time (UTC unless it names an offset)."""
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(field, "expected unix seconds or an ISO-8601 date/time (2026-12-01, "
                          "2026-12-01T06:00:00Z), got %r" % text) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp())


@dataclass
class Recurrence:
    """A schedule as `campaign create` gives it (see the module docstring)."""

    every_s: int
    rounds: int = None
    until: int = None
    start: int = None

    @classmethod
    def from_options(cls, every, rounds=None, until=None, start=None) -> "Recurrence":
        if rounds is not None and until is not None:
            raise ConfigError("rounds", "give --rounds N or --until T, not both")
        if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int)
                                   or not 1 <= rounds <= schedule.ROUNDS_MAX):
            raise ConfigError("rounds", "--rounds must be an integer in 1..%d, got %r"
                              % (schedule.ROUNDS_MAX, rounds))
        return cls(parse_period(every), rounds,
                   None if until is None else parse_time(until, "until"),
                   None if start is None else parse_time(start, "start"))

    def window(self, valid_days, now: int = None):
        """(not_before, not_after, schedule) of the config. `valid_days` (None: the default)
        sets the end only without `rounds` and `until`."""
        from .manage import DEFAULT_VALID_DAYS, validity_window
        now = int(time.time()) if now is None else now
        start = now if self.start is None else self.start
        if self.start is not None and self.start + self.every_s <= now:
            raise ConfigError("start", "--start %d: its first round closed before now (%d)"
                              % (self.start, now))
        if self.rounds is not None:
            not_after = start + self.rounds * self.every_s
        elif self.until is not None:
            if self.until <= start:
                raise ConfigError("until", "--until %d is not after the start %d"
                                  % (self.until, start))
            not_after = self.until
        else:
            not_after = validity_window(DEFAULT_VALID_DAYS if valid_days is None
                                        else valid_days)[1]
        sched = {"start": start, "every_s": self.every_s}
        if self.rounds is not None:
            sched["rounds"] = self.rounds
        return min(now - 60, start), not_after, sched


def eps1_params(params: dict, eps1) -> dict:
    """`params` with `eps1_milli` from `--eps1 E` (nats); the mechanism's default (ε∞/2)
    without it."""
    if eps1 is None:
        return params
    if "eps1_milli" in params:
        raise ConfigError("eps1", "give --eps1 or --param eps1_milli=..., not both")
    try:
        milli = protocol.eps_to_milli(float(eps1))
    except (ValueError, TypeError) as exc:
        raise ConfigError("eps1", str(exc)) from None
    return dict(params, eps1_milli=milli)


def choose_memoised(epsilon, domain: dict, eps1=None, fleet_size=None, rounds=None,
                    lifetime_budget=None) -> dict:
    """`--protocol auto --every`: the recurring planner's choice (core.longitudinal_plan.choose:
    the smallest per-round MSE among the memoised protocols whose lifetime charge, min(classes,
    R)·ε∞, fits the device's lifetime budget) — the same rule `plan --every` marks `(auto)`:
    {"mechanism", "params", "protocol", "plan"}."""
    from ...core import longitudinal_plan
    from ...core.mechanisms.longitudinal import default_eps1_milli
    if domain.get("type") in cfgmod.NUMERIC_DOMAINS:  # the config rules refuse any memoised
        raise ConfigError("domain", "no memoised mechanism runs on a %s domain: a recurring "
                          "mean is --mechanism lbitmean over an integer counter, --domain N "
                          "(counter 0..N-1, spec §3.2)" % domain["type"])
    eps_milli = protocol.eps_to_milli(float(epsilon))
    params = eps1_params({}, eps1)
    eps1_milli = params.get("eps1_milli", default_eps1_milli(eps_milli))
    size = cfgmod.mechanism_domain_size({"domain": domain}, FREQUENCY_MEMOISED[0])  # d + 1 (⊥)
    budget = longitudinal_plan.DEFAULT_LIFETIME_BUDGET if lifetime_budget is None else lifetime_budget
    result = longitudinal_plan.plan_recurring(eps_milli, eps1_milli, size,
                                              fleet_size or DEFAULT_FLEET, rounds, budget)
    if result["auto"] is None:
        raise ConfigError("protocol", "no memoised mechanism fits this campaign: %s"
                          % result["auto_reason"])
    mechanism, fixed = longitudinal_plan.PROTOCOLS[result["auto"]]
    return {"mechanism": mechanism, "params": dict(fixed, eps1_milli=eps1_milli),
            "protocol": result["auto"], "plan": result}
