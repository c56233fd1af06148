"""Signed campaign configs and phase-2 messages on the device (spec §5, §6).

Signatures are checked by envelope.py (Ed25519, §5.1) before anything here runs;
`check_config` applies the same structural rules as the aggregator
(aggregator/ldpfleet/core/config.py::check_config). Every refusal is a ConfigError naming the
field, which the device logs.
"""
import json
import time

from .domain import EMPTY_KEY
from .errors import ConfigError
from .hash import item_key
from .mechanisms import NAMES, SET_VALUED
from .numeric_domain import (NUMERIC_DOMAINS, NUMERIC_MECHANISMS, check_numeric_domain,
                      check_numeric_phases)
from .strings import check_pem_phase2, check_strings_domain, check_strings_phases, is_strings
from .schedule import check_phase_kind, check_schedule, is_recurring
from .thresholds import cmin, grr_ok, shc_ok

PROTOCOL = 2
PPM = 1000000
SH_DEFAULT_M = 65536  # the aggregator's sh/shc defaults: its check_shc_phases counts them as given
SH_DEFAULT_L = 1
MAX_EPS_MILLI = 64000  # spec §2
# MicroPython ports whose epoch is 2000-01-01 report 946684800 s less than Unix time
EPOCH_OFFSET = 946684800 if time.gmtime(0)[0] == 2000 else 0


def unix_now():
    return int(time.time()) + EPOCH_OFFSET


def valid_name(name):
    """`name` matches [A-Za-z0-9_-]{1,64} (MicroPython's re has no counted repetition)."""
    if not isinstance(name, str) or not 1 <= len(name) <= 64:
        return False
    for ch in name:
        if not ("a" <= ch <= "z" or "A" <= ch <= "Z" or "0" <= ch <= "9" or ch in "_-"):
            return False
    return True


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _need(doc, key, kind, field=None):
    v = doc.get(key)
    if v is None or not isinstance(v, kind) or isinstance(v, bool):
        raise ConfigError(field or key, "missing or not %s" % kind.__name__)
    return v


def check_config(doc, now=None):
    """Structural checks of a config body, the aggregator's rules; returns `doc`."""
    if doc.get("type") != "config":
        raise ConfigError("type", "not a config")
    if doc.get("protocol") != PROTOCOL:
        raise ConfigError("protocol", "unsupported protocol %r" % (doc.get("protocol"),))
    if not valid_name(_need(doc, "campaign", str)):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}")
    for key in ("campaign_id", "salt", "not_before", "not_after"):
        _need(doc, key, int)
    if not 0 <= doc["campaign_id"] <= 0xFFFFFFFF:
        raise ConfigError("campaign_id", "out of u32 range")
    now = unix_now() if now is None else now
    if not doc["not_before"] <= now <= doc["not_after"]:
        raise ConfigError("validity", "outside validity window [%d, %d]" % (doc["not_before"], doc["not_after"]))
    domain = _need(doc, "domain", dict)
    if domain.get("type") == "int":
        size = _need(domain, "size", int, "domain.size")
        if not 2 <= size <= 0xFFFFFFFF:
            raise ConfigError("domain.size", "must be in [2, 2^32 - 1] (the reserved item "
                              "'other' takes index d, spec §1)")
    elif domain.get("type") == "str":
        items = _need(domain, "items", list, "domain.items")
        if len(items) < 2 or not all(isinstance(i, str) and i for i in items):
            raise ConfigError("domain.items", "need >= 2 non-empty strings")
        keys = [item_key(i) for i in items] + [EMPTY_KEY]
        if len(set(keys)) != len(keys):
            raise ConfigError("domain.items", "two items share a 32-bit key (or one shares the "
                              "key of the reserved item 'other'); rename one")
    elif domain.get("type") in NUMERIC_DOMAINS:
        check_numeric_domain(domain)
    elif is_strings(domain):
        check_strings_domain(domain)
    else:
        raise ConfigError("domain.type", "must be 'int', 'str', 'range', 'ranges' or 'strings'")
    phases = _need(doc, "phases", list)
    if not 1 <= len(phases) <= 2:
        raise ConfigError("phases", "one or two phases")
    for i, ph in enumerate(phases):
        if not isinstance(ph, dict) or ph.get("phase") != i + 1:
            raise ConfigError("phases", "phase entries must be numbered 1, 2 in order")
        if ph.get("mechanism") not in NAMES:
            raise ConfigError("phases.mechanism", "unknown mechanism %r" % (ph.get("mechanism"),))
        check_phase_kind(ph, is_recurring(doc))  # spec §3.4
        eps = ph.get("eps_milli")
        if not _is_int(eps) or eps <= 0:
            raise ConfigError("phases.eps_milli", "must be a positive integer")
        if eps > MAX_EPS_MILLI:
            raise ConfigError("phases.eps_milli", "must be at most %d" % MAX_EPS_MILLI)
        if not isinstance(ph.get("params", {}), dict):
            raise ConfigError("phases.params", "must be an object")
        if "sample_rate_ppm" in ph:
            ppm = ph["sample_rate_ppm"]
            if not _is_int(ppm) or not 0 < ppm < PPM:
                raise ConfigError("phases.sample_rate_ppm", "must be an integer in (0, 10^6), "
                                  "got %r" % (ppm,))
    rates = sample_rates(phases)
    if len(rates) > 1:
        raise ConfigError("phases.sample_rate_ppm", "the phases disagree on the sampling rate "
                          "(one public split, spec §5): %s" % sorted(rates))
    check_numeric_phases(doc)
    check_strings_phases(doc)  # spec §3.5
    for ph in phases:
        check_grr_bound(ph, domain_size(doc))
        check_listless_domain(ph, domain)
    check_shc(phases)
    check_fallback(doc)
    if "delivery" in doc:
        check_delivery(doc["delivery"])
    if "metric" in doc and not valid_metric(doc["metric"]):
        raise ConfigError("metric", "must match [a-z][a-z0-9_]{0,31}")
    if is_recurring(doc):
        check_schedule(doc)
    return doc


METRIC_MAX = 32


def valid_metric(name):
    """`name` matches [a-z][a-z0-9_]{0,31} (spec §5.4 `metric`)."""
    if not isinstance(name, str) or not 1 <= len(name) <= METRIC_MAX or not "a" <= name[0] <= "z":
        return False
    for ch in name:
        if not ("a" <= ch <= "z" or "0" <= ch <= "9" or ch == "_"):
            return False
    return True


RETRY_S_MAX = 86400
RETRY_MAX_S_MAX = 259200
SPREAD_S_MAX = 86400


def check_delivery(d):
    """Spec §5.4 `delivery` (the aggregator's config.check_delivery): ack, retry_s,
    retry_max_s and optionally spread_s, nothing else."""
    if not isinstance(d, dict) or "ack" not in d or "retry_s" not in d \
            or "retry_max_s" not in d or len(d) != 3 + ("spread_s" in d):
        raise ConfigError("delivery", "must be {ack, retry_s, retry_max_s[, spread_s]}")
    if not isinstance(d["ack"], bool):
        raise ConfigError("delivery.ack", "must be true or false")
    if not _is_int(d["retry_s"]) or not 1 <= d["retry_s"] <= RETRY_S_MAX:
        raise ConfigError("delivery.retry_s", "must be an integer in [1, %d]" % RETRY_S_MAX)
    if not _is_int(d["retry_max_s"]) or not d["retry_s"] <= d["retry_max_s"] <= RETRY_MAX_S_MAX:
        raise ConfigError("delivery.retry_max_s", "must be an integer in [retry_s, %d]"
                          % RETRY_MAX_S_MAX)
    spread = d.get("spread_s", 0)
    if not _is_int(spread) or not 0 <= spread <= SPREAD_S_MAX:
        raise ConfigError("delivery.spread_s", "must be an integer in [0, %d]" % SPREAD_S_MAX)
    return d


def spread_ms(config):
    """The accepted config's first-publish spread in ms (spec §5.4, §6); 0 without it."""
    d = config.get("delivery") if config else None
    return d.get("spread_s", 0) * 1000 if d else 0


def check_grr_bound(ph, d):
    """Spec §2 "every pair of outputs" (the aggregator's config.check_grr_bound): a GRR phase
    (n = d + 1) or an OLH/FLH phase (n = g) is refused when its 'other' outputs' bucket counts
    differ by more than e^ε."""
    name = ph["mechanism"]
    g = ph.get("params", {}).get("g")
    if name == "grr":
        n, field = d + 1, "domain.size"
    elif name in ("olh", "flh", "psolh") and _is_int(g) and g >= 2:
        n, field = g, "params.g"
    else:
        return
    if not grr_ok(ph["eps_milli"], n):
        raise ConfigError(field, "GRR over %d outputs is not exactly eps-LDP at eps_milli %d "
                          "(bucket counts %d and %d, spec §2)"
                          % (n, ph["eps_milli"], cmin(n - 1), cmin(n - 1) + 1))


def check_listless_domain(ph, domain):
    """psgrr/psolh in phase 1 (no candidate list) run over the integer items 0..d-1: refused
    on any other domain (the aggregator's campaign_rules.check_listless_domain)."""
    if ph["mechanism"] in ("psgrr", "psolh") and ph.get("phase") == 1 \
            and domain.get("type") != "int":
        raise ConfigError("domain.type", "%s in phase 1 (no candidate list) needs an integer "
                          "domain" % ph["mechanism"])


FALLBACK_PARAMS = {"psgrr": ["l"], "psolh": ["g", "l"]}
PS_MAX_DOMAIN = 16777216


def check_fallback(doc):
    """Spec §5.4 `fallback` (the aggregator's config.check_fallback): only on a psgrr/psolh
    phase 2, exactly {"mechanism": psgrr|psolh, "params": {"l"[, "g"]}}, an integer domain of at
    most 2^24 items, grr_ok at phase 2's eps. Field `phases.fallback`."""
    field = "phases.fallback"
    for ph in doc["phases"]:
        if "fallback" not in ph:
            continue
        fb = ph["fallback"]
        if ph["phase"] != 2 or ph["mechanism"] not in FALLBACK_PARAMS:
            raise ConfigError(field, "only phase 2 of a psgrr/psolh (svim) campaign has a fallback")
        if not isinstance(fb, dict) or len(fb) != 2 or "mechanism" not in fb or "params" not in fb:
            raise ConfigError(field, "must be {mechanism, params}")
        name = fb["mechanism"]
        if not isinstance(name, str) or name not in FALLBACK_PARAMS:
            raise ConfigError(field, "mechanism must be psgrr or psolh")
        params = fb["params"]
        if not isinstance(params, dict) or sorted(params) != FALLBACK_PARAMS[name]:
            raise ConfigError(field, "%s params must be exactly %s"
                              % (name, ", ".join(FALLBACK_PARAMS[name])))
        for key, low in (("l", 1), ("g", 2)):
            v = params.get(key, low)
            if not _is_int(v) or not low <= v <= 65536:
                raise ConfigError(field, "params.%s must be an integer in [%d, 65536]" % (key, low))
        dom = doc["domain"]
        if dom.get("type") != "int" or dom["size"] > PS_MAX_DOMAIN:
            raise ConfigError(field, "runs over the integer domain 0..d-1, d <= 2^24")
        n = params["g"] if name == "psolh" else dom["size"] + 1
        if not grr_ok(ph["eps_milli"], n):
            raise ConfigError(field, "GRR over %d outputs is not exactly eps-LDP at eps_milli %d "
                              "(spec §2)" % (n, ph["eps_milli"]))


def fallback_of(config):
    """The config's phase-2 fallback {"mechanism", "params"}, or None."""
    phases = config["phases"]
    return phases[1].get("fallback") if len(phases) == 2 else None


def is_fallback(p2):
    return p2.get("fallback") is True


def check_shc(phases):
    """Spec §3.1 (the aggregator's config.check_shc_phases): an `shc` campaign is two `shc`
    phases with the same m and l (an absent one counts as sh's default), whose eps_milli pass
    shc_ok."""
    names = [ph["mechanism"] for ph in phases]
    if "shc" not in names:
        return
    if names != ["shc", "shc"]:
        raise ConfigError("phases.mechanism", "shc needs two shc phases (spec §3.1)")
    first, second = phases[0].get("params", {}), phases[1].get("params", {})
    for name, default in (("m", SH_DEFAULT_M), ("l", SH_DEFAULT_L)):  # as the aggregator counts
        a, b = first.get(name, default), second.get(name, default)
        if a != b or type(a) is not type(b):
            raise ConfigError("params." + name, "both shc phases need the same %s (spec §3.1)" % name)
    if not shc_ok(phases[0]["eps_milli"], phases[1]["eps_milli"]):
        raise ConfigError("phases.eps_milli", "shc phases eps_milli %d, %d fail shc_ok (spec §3.1)"
                          % (phases[0]["eps_milli"], phases[1]["eps_milli"]))


def check_close(doc):
    """A close body (spec §5.4; the aggregator's config.check_close): `not_before` (the
    campaign's, optional) an integer when present."""
    if doc.get("type") != "close":
        raise ConfigError("type", "not a close message")
    if doc.get("protocol") != PROTOCOL:
        raise ConfigError("protocol", "unsupported protocol %r" % (doc.get("protocol"),))
    if not valid_name(_need(doc, "campaign", str)):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}")
    if not 0 <= _need(doc, "campaign_id", int) <= 0xFFFFFFFF:
        raise ConfigError("campaign_id", "out of u32 range")
    if "not_before" in doc:
        _need(doc, "not_before", int)
    return doc


def check_keys(doc):
    """A key-rotation body (spec §5.3; the aggregator's config.check_keys). Returns the new
    trusted set {kid: pub}."""
    from .envelope import MAX_TRUSTED, trusted_keys
    if doc.get("type") != "keys":
        raise ConfigError("type", "not a key-rotation message")
    if doc.get("protocol") != PROTOCOL:
        raise ConfigError("protocol", "unsupported protocol %r" % (doc.get("protocol"),))
    if not 1 <= _need(doc, "serial", int) < 0x80000000:
        raise ConfigError("serial", "must be an integer in [1, 2^31)")
    keys = doc.get("keys")
    if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_TRUSTED:
        raise ConfigError("keys", "1 to %d keys" % MAX_TRUSTED)
    try:
        trusted = trusted_keys(keys)
    except ConfigError as exc:
        raise ConfigError("keys", exc.message)
    if len(trusted) != len(keys):
        raise ConfigError("keys", "a key is listed twice")
    return trusted


def sample_rates(phases):
    """The distinct `sample_rate_ppm` values of the phases (LDPLCM's public split, spec §5)."""
    rates = []
    for ph in phases:
        if "sample_rate_ppm" in ph and ph["sample_rate_ppm"] not in rates:
            rates.append(ph["sample_rate_ppm"])
    return rates


def check_phase2(doc, config):
    """A phase-2 body that belongs to the accepted `config`."""
    if doc.get("type") != "phase2":
        raise ConfigError("type", "not a phase-2 message")
    if doc.get("campaign") != config["campaign"]:
        raise ConfigError("campaign", "phase 2 of another campaign")
    if doc.get("campaign_id") != config["campaign_id"] or isinstance(doc.get("campaign_id"), bool):
        raise ConfigError("campaign_id", "phase 2 of another campaign id")
    if doc.get("phase") != 2 or isinstance(doc.get("phase"), bool):
        raise ConfigError("phase", "phase must be 2")
    if doc.get("protocol") != PROTOCOL:
        raise ConfigError("protocol", "unsupported protocol %r" % (doc.get("protocol"),))
    if len(config["phases"]) != 2:
        raise ConfigError("phases", "the config has no phase 2")
    # spec §5.4: exactly one of `candidates` and `"fallback": true` when the config has a fallback
    if "fallback" in doc:
        if doc["fallback"] is not True:
            raise ConfigError("candidates", "fallback must be true")
        if fallback_of(config) is None:
            raise ConfigError("candidates", "the config's phase 2 has no fallback")
        if "candidates" in doc:
            raise ConfigError("candidates", "a phase-2 message carries candidates or fallback, "
                              "not both")
    elif fallback_of(config) is not None and "candidates" not in doc:
        raise ConfigError("candidates", "the phase-2 message carries neither candidates nor "
                          "fallback")
    if is_strings(config["domain"]):
        check_pem_phase2(doc)  # spec §3.5: 1..1024 keys
    return doc


def domain_size(doc):
    """d of an item domain, N (grid points) of a numeric one (spec §1.1)."""
    d = doc["domain"]
    if d["type"] in NUMERIC_DOMAINS:
        return check_numeric_domain(d)
    if d["type"] == "strings":  # any 32-bit key (spec §3.5): PEM works over candidates
        return 0xFFFFFFFF
    return d["size"] if d["type"] == "int" else len(d["items"])


def mechanism_domain_size(doc, mechanism):
    """n of spec §3: d + 1 (⊥ at index d) for single-item mechanisms, d for set-valued ones,
    N for numeric ones (they clip, spec §1.1)."""
    return domain_size(doc) + (0 if mechanism in SET_VALUED or mechanism in NUMERIC_MECHANISMS
                               else 1)
