"""The rules of a campaign's domain, phases and delivery (protocol_spec/v2 §1, §1.1, §2, §3,
§5.4) that `config.check_config` applies and both clients apply alike, and what a config
prescribes from them: domain sizes and keys, the mechanism of each phase, phase-2 inputs.
Every refusal is a ConfigError naming the field. `config` re-exports these names."""
from . import mechanism_table, protocol
from .errors import ConfigError

SET_VALUED = set(mechanism_table.SET_VALUED)  # tables generated from registry.json
PPM = 1000000
"""`sample_rate_ppm` is in parts per million of the device-id hash space (spec §5)."""
RETRY_S_MAX = 86400
RETRY_MAX_S_MAX = 259200
"""3 days: MicroPython's ticks_ms differences are only valid below 2^29 ms (6.2 days)."""
SPREAD_S_MAX = 86400
"""`delivery.spread_s` (spec §5.4): a device's first publish waits U[0, spread_s) seconds."""
DEFAULT_DRAIN_RATE = 1000
"""Reports/s `campaign create` assumes the broker hands serve when not told (`--drain-rate`):
conservative. Measured on 2 shared cores (tools/bench_ingest.py --only-live): serve behind
Mosquitto's packaged limits committed 13,000-17,000/s over MQTT 3.1.1 and 18,000-45,000/s over
MQTT 5 (as fast as the fleet generator published); 1,000 leaves room for TLS, PostgreSQL, a
slow disk, a busy machine and a broker other clients share."""
DEFAULT_DELIVERY = {"ack": True, "retry_s": 30, "retry_max_s": 3600}
"""Spec §5.4 `delivery`, what `campaign create` writes unless told otherwise: devices re-send
their memoised report (first after 30 s x U[0.5, 1.5), doubling up to an hour) until the
aggregator acknowledges it (spec §6) or the campaign ends."""


NUMERIC_DOMAINS = ("range", "ranges")
NUMERIC_MECHANISMS = mechanism_table.NUMERIC
GRID_MAX = 65536
METRICS_MAX = 64
VALUE_MAX = 10 ** 15
DECIMALS_MAX = 9


def _numeric_int(obj: dict, key: str, field: str, lo: int, hi: int) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError(field, "%s must be an integer in [%d, %d], got %r" % (key, lo, hi, v))
    return v


def _numeric_metric(m, field: str):
    """lo < hi (|.| <= 10^15), decimals 0..9 (default 0), optional name and unit strings."""
    if not isinstance(m, dict):
        raise ConfigError(field, "a metric must be an object")
    lo = _numeric_int(m, "lo", field, -VALUE_MAX, VALUE_MAX)
    hi = _numeric_int(m, "hi", field, -VALUE_MAX, VALUE_MAX)
    if lo >= hi:
        raise ConfigError(field, "lo must be below hi, got %d >= %d" % (lo, hi))
    if "decimals" in m:
        _numeric_int(m, "decimals", field, 0, DECIMALS_MAX)
    for key in ("name", "unit"):
        if key in m and (not isinstance(m[key], str) or not 1 <= len(m[key]) <= 64):
            raise ConfigError(field, "%s must be a string of 1..64 characters" % key)
    return lo, hi


def check_numeric_domain(domain: dict) -> int:
    """Spec §1.1, the one rule for numeric domains; returns the grid points N.

    `{"type": "range", "lo", "hi", "resolution", "decimals"?}`: integers in units of
    10^-decimals, (hi - lo) a multiple of resolution, N = (hi - lo) / resolution + 1 <= 65536.
    `{"type": "ranges", "points": N, "metrics": [{"lo", "hi", "decimals"?, "name"?}, ...]}`:
    1..64 metrics sharing N grid points (2..65536)."""
    if domain.get("type") == "range":
        lo, hi = _numeric_metric(domain, "domain.range")
        res = _numeric_int(domain, "resolution", "domain.resolution", 1, 2 * VALUE_MAX)
        if (hi - lo) % res:
            raise ConfigError("domain.resolution", "hi - lo = %d is not a multiple of the "
                              "resolution %d" % (hi - lo, res))
        points = (hi - lo) // res + 1
        if points > GRID_MAX:
            raise ConfigError("domain.resolution", "(hi - lo) / resolution + 1 = %d grid points, "
                              "at most %d" % (points, GRID_MAX))
        return points
    points = _numeric_int(domain, "points", "domain.points", 2, GRID_MAX)
    metrics = domain.get("metrics")
    if not isinstance(metrics, list) or not 1 <= len(metrics) <= METRICS_MAX:
        raise ConfigError("domain.metrics", "1..%d metrics" % METRICS_MAX)
    for m in metrics:
        _numeric_metric(m, "domain.metrics")
    return points


def numeric_metrics(domain: dict) -> int:
    """How many metrics a numeric domain has (1 for `range`)."""
    return len(domain["metrics"]) if domain["type"] == "ranges" else 1


def check_numeric_phases(doc: dict):
    """Numeric mechanisms run on numeric domains and only there (spec §1.1, §3.3); an `hm`
    phase's `metrics` equals the domain's, the other numeric mechanisms take one metric; an
    `sw` phase spells out `bins` and `window` (devices do not compute the paper's b)."""
    numeric = doc["domain"]["type"] in NUMERIC_DOMAINS
    for ph in doc["phases"]:
        name = ph["mechanism"]
        if (name in NUMERIC_MECHANISMS) != numeric:
            raise ConfigError("phases.mechanism", "%s does not run on a %s domain"
                              % (name, doc["domain"]["type"]))
        if not numeric:
            continue
        d = numeric_metrics(doc["domain"])
        got = ph.get("params", {}).get("metrics", 1) if name == "hm" else 1
        if got != d:
            raise ConfigError("params.metrics", "%s reports %r metric(s), the domain has %d"
                              % (name, got, d))
        if name == "sw" and not {"bins", "window"} <= set(ph.get("params", {})):
            raise ConfigError("phases.params", "sw needs bins and window (spec §3.3)")


METRIC_MAX = 32
"""`metric` (spec §5.4): [a-z][a-z0-9_]{0,31}, the name of the reading a device provides."""


def check_metric(metric) -> str:
    """Spec §5.4 `metric` (optional): a string [a-z][a-z0-9_]{0,31}, else ConfigError
    `metric`. Devices that provide that metric take part (discovery, spec §4)."""
    ok = isinstance(metric, str) and 1 <= len(metric) <= METRIC_MAX and "a" <= metric[0] <= "z"
    if ok:
        ok = all("a" <= c <= "z" or "0" <= c <= "9" or c == "_" for c in metric)
    if not ok:
        raise ConfigError("metric", "must match [a-z][a-z0-9_]{0,31}, got %r" % (metric,))
    return metric


def check_delivery(delivery) -> dict:
    """Spec §5.4: {"ack": bool, "retry_s": 1..86400, "retry_max_s": retry_s..259200} and
    optionally "spread_s": 0..86400 (absent: 0)."""
    if not isinstance(delivery, dict) or not ({"ack", "retry_s", "retry_max_s"} <= set(delivery)
                                               <= {"ack", "retry_s", "retry_max_s", "spread_s"}):
        raise ConfigError("delivery", "must be {ack, retry_s, retry_max_s[, spread_s]}")
    if not isinstance(delivery["ack"], bool):
        raise ConfigError("delivery.ack", "must be true or false")
    retry = delivery["retry_s"]
    if not isinstance(retry, int) or isinstance(retry, bool) or not 1 <= retry <= RETRY_S_MAX:
        raise ConfigError("delivery.retry_s", "must be an integer in [1, %d]" % RETRY_S_MAX)
    top = delivery["retry_max_s"]
    if not isinstance(top, int) or isinstance(top, bool) or not retry <= top <= RETRY_MAX_S_MAX:
        raise ConfigError("delivery.retry_max_s", "must be an integer in [retry_s, %d]"
                          % RETRY_MAX_S_MAX)
    spread = delivery.get("spread_s", 0)
    if not isinstance(spread, int) or isinstance(spread, bool) or not 0 <= spread <= SPREAD_S_MAX:
        raise ConfigError("delivery.spread_s", "must be an integer in [0, %d]" % SPREAD_S_MAX)
    return delivery


def acknowledged(doc: dict) -> bool:
    """Whether devices of this config wait for acknowledgements (spec §6)."""
    return bool(doc.get("delivery", {}).get("ack", False))


def default_spread_s(devices: int, drain_rate: float = DEFAULT_DRAIN_RATE) -> int:
    """`delivery.spread_s` for a fleet of `devices` that starts a phase at once (one retained
    config) behind a broker and serve that take `drain_rate` reports/s: devices / drain_rate
    seconds (rounded down), so the first publishes arrive no faster than they are drained; at
    most SPREAD_S_MAX."""
    if not drain_rate > 0:
        raise ConfigError("drain_rate", "must be > 0 reports/s, got %r" % (drain_rate,))
    if devices < 0:
        raise ConfigError("fleet_size", "must be >= 0, got %r" % (devices,))
    return int(min(SPREAD_S_MAX, devices // drain_rate))


def spread_s(doc: dict) -> int:
    """Seconds over which devices spread a phase's first publish (spec §5.4; 0 without it)."""
    return int(doc.get("delivery", {}).get("spread_s", 0))


def check_listless_domain(phase: dict, domain: dict):
    """psgrr/psolh without a candidate list (phase 1) run over the integer items 0..d-1
    (spec §3 ids 10, 11): refuse them on a string domain, where they would measure nothing."""
    if phase["mechanism"] in ("psgrr", "psolh") and phase.get("phase") == 1 \
            and domain.get("type") != "int":
        raise ConfigError("domain.type", "%s in phase 1 (no candidate list) needs an integer "
                          "domain" % phase["mechanism"])


FALLBACK_MECHANISMS = ("psgrr", "psolh")
FALLBACK_PARAMS = {"psgrr": ("l",), "psolh": ("g", "l")}
PS_MAX_DOMAIN = 1 << 24


def check_fallback(doc: dict):
    """Spec §5.4 `fallback` (svim's flat branch, §3): only on phase 2 of a psgrr/psolh phase 2,
    exactly {"mechanism": "psgrr"|"psolh", "params": {"l"[, "g"]}} (every parameter spelled
    out), run listless over an integer domain of at most 2^24 items at phase 2's eps, passing
    grr_ok. Every refusal names `phases.fallback` (both clients apply the same rules)."""
    field = "phases.fallback"
    for ph in doc["phases"]:
        if "fallback" not in ph:
            continue
        fb = ph["fallback"]
        if ph["phase"] != 2 or ph["mechanism"] not in FALLBACK_MECHANISMS:
            raise ConfigError(field, "only phase 2 of a psgrr/psolh (svim) campaign has a fallback")
        if not isinstance(fb, dict) or set(fb) != {"mechanism", "params"}:
            raise ConfigError(field, "must be {\"mechanism\", \"params\"}")
        name = fb["mechanism"]
        if name not in FALLBACK_MECHANISMS:
            raise ConfigError(field, "mechanism must be psgrr or psolh, got %r" % (name,))
        params = fb["params"]
        if not isinstance(params, dict) or sorted(params) != list(FALLBACK_PARAMS[name]):
            raise ConfigError(field, "%s params must be exactly %s"
                              % (name, ", ".join(FALLBACK_PARAMS[name])))
        for key, low in (("l", 1), ("g", 2)):
            v = params.get(key, low)
            if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= 65536:
                raise ConfigError(field, "params.%s must be an integer in [%d, 65536]" % (key, low))
        dom = doc["domain"]
        if dom.get("type") != "int" or dom["size"] > PS_MAX_DOMAIN:
            raise ConfigError(field, "runs over the integer domain 0..d-1, d <= 2^24")
        n = params["g"] if name == "psolh" else dom["size"] + 1
        if not protocol.grr_ok(ph["eps_milli"], n):
            raise ConfigError(field, "GRR over %d outputs is not exactly eps-LDP at eps_milli %d "
                              "(spec §2)" % (n, ph["eps_milli"]))


def fallback_entry(doc: dict):
    """Phase 2's flat-branch entry {"phase": 2, "mechanism", "eps_milli", "params"} (phase 2's
    eps), or None when the config has no fallback."""
    phases = doc["phases"]
    if len(phases) < 2 or "fallback" not in phases[1]:
        return None
    fb = phases[1]["fallback"]
    return {"phase": 2, "mechanism": fb["mechanism"], "eps_milli": phases[1]["eps_milli"],
            "params": dict(fb["params"])}


def is_fallback(phase2) -> bool:
    """Does a phase-2 body choose the flat branch (`"fallback": true`, spec §5.4)?"""
    return isinstance(phase2, dict) and phase2.get("fallback") is True


def check_phase2_choice(config: dict, body: dict) -> dict:
    """Spec §5.4: a phase-2 body of a config with a fallback carries exactly one of
    `candidates` and `"fallback": true`; `fallback` is refused on any other config and with any
    other value. ConfigError("candidates") (both clients apply the same rules)."""
    if "fallback" in body:
        if body["fallback"] is not True:
            raise ConfigError("candidates", "fallback must be true")
        if fallback_entry(config) is None:
            raise ConfigError("candidates", "the config's phase 2 has no fallback")
        if "candidates" in body:
            raise ConfigError("candidates", "a phase-2 message carries candidates or fallback, "
                              "not both")
    elif fallback_entry(config) is not None and "candidates" not in body:
        raise ConfigError("candidates", "the phase-2 message carries neither candidates nor "
                          "fallback")
    return body


def check_shc_phases(phases: list):
    """Spec §3.1: `shc` runs in both phases of a two-phase campaign (else `phases.mechanism`)
    with the same `m` and `l` (`params.m`, `params.l`; defaults count as given) and eps pair
    passing `shc_ok` (`phases.eps_milli`)."""
    names = [ph["mechanism"] for ph in phases]
    if "shc" not in names:
        return
    if names != ["shc", "shc"]:
        raise ConfigError("phases.mechanism", "shc runs in both phases of a two-phase campaign "
                          "(spec §3.1), got %s" % names)
    from .mechanisms.sh import DEFAULT_L, DEFAULT_M
    first, second = (ph.get("params", {}) for ph in phases)
    for key, default in (("m", DEFAULT_M), ("l", DEFAULT_L)):
        a, b = first.get(key, default), second.get(key, default)
        if a != b or type(a) is not type(b):
            raise ConfigError("params." + key, "shc phases must have the same %s (spec §3.1), "
                              "got %r and %r" % (key, a, b))
    eps1, eps2 = phases[0]["eps_milli"], phases[1]["eps_milli"]
    if not protocol.shc_ok(eps1, eps2):
        raise ConfigError("phases.eps_milli", "shc_ok(%d, %d) fails: eps1 + eps2 must be at most "
                          "%d milli (spec §3.1)" % (eps1, eps2, protocol.MAX_EPS_MILLI))


def check_grr_bound(phase: dict, d: int):
    """Spec §2 "every pair of outputs": refuse a GRR phase (n = d + 1 outputs) or an OLH/FLH
    phase (n = g) whose non-kept outputs' bucket counts differ by more than e^ε."""
    name, eps = phase["mechanism"], phase["eps_milli"]
    if name == "grr":
        n, field = d + 1, "domain.size"
    elif name in ("olh", "flh", "psolh", "pem") and isinstance(phase.get("params", {}).get("g"), int) \
            and not isinstance(phase["params"]["g"], bool) and phase["params"]["g"] >= 2:
        n, field = phase["params"]["g"], "params.g"
    else:
        return
    if not protocol.grr_ok(eps, n):
        raise ConfigError(field, "GRR over %d outputs is not exactly eps-LDP at eps_milli %d: "
                          "its 'other' outputs get %d or %d of 2^32 words, a ratio above e^eps "
                          "(spec §2); use a smaller domain, a larger epsilon, or olh"
                          % (n, eps, protocol.cmin(n - 1), protocol.cmax(n - 1)))


def domain_size(doc: dict) -> int:
    """d of an item domain; N (grid points) of a numeric one (spec §1.1)."""
    d = doc["domain"]
    if d["type"] in NUMERIC_DOMAINS:
        return check_numeric_domain(d)
    if d["type"] == "strings":  # any 32-bit key (spec §3.5): PEM estimates over candidates
        return protocol.WORD - 1
    return d["size"] if d["type"] == "int" else len(d["items"])


def with_other(mechanism: str) -> bool:
    """Does `mechanism` run over the domain plus ⊥ (spec §1)? Single-item mechanisms do;
    set-valued ones drop out-of-domain elements instead; numeric ones clip (spec §1.1)."""
    return mechanism not in SET_VALUED and mechanism not in NUMERIC_MECHANISMS


def mechanism_domain_size(doc: dict, mechanism: str) -> int:
    """n of spec §3: d + 1 (⊥ at index d) for single-item mechanisms, d for set-valued; a
    strings domain has no ⊥ (the empty code is a value, spec §3.5): 2^32 - 1, any key."""
    if doc["domain"]["type"] == "strings":
        return domain_size(doc)
    return domain_size(doc) + (1 if with_other(mechanism) else 0)


def domain_keys(doc: dict, other: bool = False):
    """Item keys of the domain in domain order (int domain: 0..d-1); with `other`, key(⊥)
    last (spec §1: d, or H(b"", KEY_SEED) for a string domain)."""
    d = doc["domain"]
    if d["type"] == "int":
        keys = list(range(d["size"]))
    else:
        keys = [protocol.item_key(i) for i in d["items"]]
    if other:
        keys.append(protocol.other_key(d))
    return keys


def domain_extras(doc: dict, mechanism: str) -> dict:
    """`domain_keys=` for mechanisms that estimate over an explicit domain (they have
    `with_domain_keys`) when the campaign's items are strings (⊥'s key last when the
    mechanism runs over ⊥)."""
    from .mechanisms import mechanism_class
    if doc["domain"]["type"] == "str" and hasattr(mechanism_class(mechanism), "with_domain_keys"):
        return {"domain_keys": domain_keys(doc, other=with_other(mechanism))}
    return {}


PHASE2_FIELDS = ("candidates", "model")
"""Fields of a phase-2 message a mechanism may take (spec §5.4)."""


def phase2_parameters(mechanism: str) -> tuple:
    """Which PHASE2_FIELDS the mechanism's constructor takes (srappor: its candidates; lcm
    takes no model: devices evaluate it to set `high`, the sketch gets it at estimate time)."""
    import inspect
    from .mechanisms import mechanism_class
    named = inspect.signature(mechanism_class(mechanism).__init__).parameters
    return tuple(f for f in PHASE2_FIELDS if f in named)


def phase2_inputs(mechanism: str, phase2: dict) -> dict:
    """The arguments a phase-2 message gives the mechanism of phase 2."""
    return {f: phase2[f] for f in phase2_parameters(mechanism) if phase2 and f in phase2}


def mechanism_for_phase(doc: dict, phase: int, fallback: bool = False, **extra):
    """The Mechanism object a config prescribes for one phase (`fallback`: phase 2's flat
    branch, spec §5.4, listless over the integer domain)."""
    from .mechanisms import make_mechanism
    ph = fallback_entry(doc) if fallback and phase == 2 else doc["phases"][phase - 1]
    if ph is None:
        raise ConfigError("phases.fallback", "the config's phase 2 has no fallback")
    kw = dict(domain_extras(doc, ph["mechanism"]), **ph.get("params", {}))
    if ph["mechanism"] == "shc" and phase == 2:  # its thresholds need phase 1's eps (§3.1)
        kw["eps1_milli"] = doc["phases"][0]["eps_milli"]
    kw.update(extra)
    return make_mechanism(ph["mechanism"], ph["eps_milli"], mechanism_domain_size(doc, ph["mechanism"]),
                          salt=doc["salt"],
                          campaign_id=doc["campaign_id"], phase=phase, **kw)
