"""Signed campaign configs and phase-2 messages (protocol_spec/v2 §5).

Payload: `{"body": "<canonical JSON>", "kid": "<16 hex>", "sig": "<128 hex>"}`, an Ed25519
signature (RFC 8032) over `b"ldpfleet-v2\\x00" || SHA-256(body)` (signing.py). The verifier
checks the signature over the exact body bytes before parsing them. The rules of a body's
domain, phases and delivery live in campaign_rules.py (re-exported here).
"""
import json
import os
import re
import time

from . import protocol, schedule, signing, strings_domain
from .campaign_rules import (  # noqa: F401 (config.X stays the one name for every rule)
    DECIMALS_MAX, DEFAULT_DELIVERY, DEFAULT_DRAIN_RATE, FALLBACK_MECHANISMS, FALLBACK_PARAMS,
    GRID_MAX, METRICS_MAX, NUMERIC_DOMAINS, NUMERIC_MECHANISMS, PHASE2_FIELDS, PPM,
    PS_MAX_DOMAIN, RETRY_MAX_S_MAX, RETRY_S_MAX, SET_VALUED, SPREAD_S_MAX, VALUE_MAX,
    METRIC_MAX, acknowledged, check_delivery, check_metric, check_fallback, check_grr_bound, check_listless_domain,
    check_numeric_domain, check_numeric_phases, check_phase2_choice,
    check_shc_phases, default_spread_s, domain_extras, domain_keys, domain_size, fallback_entry,
    is_fallback, mechanism_domain_size, mechanism_for_phase, numeric_metrics, phase2_inputs,
    phase2_parameters, spread_s, with_other)
from .errors import ConfigError
from .schedule import MEMOISED  # noqa: F401

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # \Z: "$" would also match before a final newline


def canonical(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def sign(doc: dict, key) -> bytes:
    """The envelope of `doc` signed with the aggregator's Ed25519 key (a signing.SigningKey)."""
    body = canonical(doc).encode("ascii")
    sig = key.sign(signing.signed_message(body))
    return json.dumps({"body": body.decode("ascii"), "kid": key.kid, "sig": sig.hex()},
                      separators=(",", ":")).encode("ascii")


ENVELOPE_KEYS = {"body", "kid", "sig"}


def verify(payload: bytes, trusted) -> dict:
    """The body document of an envelope signed by a trusted key (spec §5.1), else ConfigError.

    `trusted`: {kid: PublicKey}, or keys as signing.trusted_set takes them. Checks, in order:
    the envelope's shape (`envelope`; v1 HMAC envelopes have no `kid`), the key id (`kid`), the
    signature over the exact body bytes (`sig`), then parses the body (`body`)."""
    try:
        env = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("envelope", "not JSON: %s" % exc)
    if not (isinstance(env, dict) and set(env) == ENVELOPE_KEYS
            and all(isinstance(env[k], str) for k in ENVELOPE_KEYS)):
        raise ConfigError("envelope", "expected exactly {\"body\": str, \"kid\": str, \"sig\": str}"
                          " (HMAC envelopes are refused in protocol v2)")
    key = signing.trusted_set(trusted).get(env["kid"])
    if key is None:
        raise ConfigError("kid", "signed by key %r, which this party does not trust" % env["kid"][:32])
    try:
        sig = bytes.fromhex(env["sig"])
    except ValueError:
        sig = b""
    if len(sig) != 64 or not key.verify(sig, signing.signed_message(env["body"].encode("utf-8"))):
        raise ConfigError("sig", "signature does not verify")
    try:
        doc = json.loads(env["body"])
    except ValueError as exc:
        raise ConfigError("body", "not JSON: %s" % exc)
    if not isinstance(doc, dict):
        raise ConfigError("body", "body must be a JSON object")
    return doc


def new_campaign_id(taken=()) -> int:
    """A random u32 campaign id (spec §5.4) not in `taken`: a campaign created again under an
    old name gets a new id, so devices' memos of the old one never match it."""
    taken = set(taken)
    while True:
        cid = int.from_bytes(os.urandom(4), "little")
        if cid not in taken:
            return cid


def make_config(name: str, phases: list, domain: dict, salt: int, campaign_id: int = None,
                not_before: int = None, not_after: int = None, delivery: dict = None,
                metric: str = None, recurring: dict = None) -> dict:
    """A config body. `phases`: [{"phase", "mechanism", "eps_milli", "params"}]; `delivery`
    (spec §5.4; absent: publish once per trigger, no acknowledgements); `metric` (spec §5.4;
    absent: only devices flashed for the campaign's name take part); `recurring` the
    `schedule` of a recurring campaign (spec §3.4)."""
    now = int(time.time())
    doc = {
        "type": "config", "protocol": protocol.PROTOCOL_VERSION, "campaign": name,
        "campaign_id": new_campaign_id() if campaign_id is None else int(campaign_id),
        "salt": int(salt) % protocol.WORD,
        "not_before": now - 60 if not_before is None else int(not_before),
        "not_after": now + 30 * 86400 if not_after is None else int(not_after),
        "domain": domain, "phases": phases,
    }
    if delivery is not None:
        doc["delivery"] = dict(delivery)
    if metric is not None:
        doc["metric"] = metric
    if recurring is not None:
        doc["schedule"] = dict(recurring)
    check_config(doc, now=now)
    return doc


def _need(doc, key, kind, field=None):
    if key not in doc or not isinstance(doc[key], kind) or isinstance(doc[key], bool):
        raise ConfigError(field or key, "missing or not %s" % getattr(kind, "__name__", kind))
    return doc[key]


def check_config(doc: dict, now: int = None) -> dict:
    """Structural checks of a config body (both sides run the same rules)."""
    if doc.get("type") != "config":
        raise ConfigError("type", "not a config")
    if doc.get("protocol") != protocol.PROTOCOL_VERSION:
        raise ConfigError("protocol", "unsupported protocol %r" % doc.get("protocol"))
    name = _need(doc, "campaign", str)
    if not NAME_RE.match(name):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}")
    for key in ("campaign_id", "salt", "not_before", "not_after"):
        _need(doc, key, int)
    if not 0 <= doc["campaign_id"] < protocol.WORD:
        raise ConfigError("campaign_id", "out of u32 range")
    now = int(time.time()) if now is None else now
    if not doc["not_before"] <= now <= doc["not_after"]:
        raise ConfigError("validity", "outside validity window [%d, %d]" % (doc["not_before"], doc["not_after"]))
    domain = _need(doc, "domain", dict)
    if domain.get("type") == "int":
        size = _need(domain, "size", int, "domain.size")
        if not 2 <= size <= protocol.WORD - 1:
            raise ConfigError("domain.size", "must be in [2, 2^32 - 1] (the reserved item "
                              "'other' takes index d, spec §1)")
    elif domain.get("type") == "str":
        items = _need(domain, "items", list, "domain.items")
        if len(items) < 2 or not all(isinstance(i, str) and i for i in items):
            raise ConfigError("domain.items", "need >= 2 non-empty strings")
        keys = [protocol.item_key(i) for i in items] + [protocol.EMPTY_KEY]
        if len(set(keys)) != len(keys):
            raise ConfigError("domain.items", "two items share a 32-bit key (or one shares the "
                              "key of the reserved item 'other'); rename one")
    elif domain.get("type") in NUMERIC_DOMAINS:
        check_numeric_domain(domain)
    elif strings_domain.is_strings(domain):
        strings_domain.check_strings_domain(domain)
    else:
        raise ConfigError("domain.type", "must be 'int', 'str', 'range', 'ranges' or 'strings'")
    phases = _need(doc, "phases", list)
    if not 1 <= len(phases) <= 2:
        raise ConfigError("phases", "one or two phases")
    for i, ph in enumerate(phases):
        if not isinstance(ph, dict) or ph.get("phase") != i + 1:
            raise ConfigError("phases", "phase entries must be numbered 1, 2 in order")
        if ph.get("mechanism") not in protocol.MECHANISM_IDS:
            raise ConfigError("phases.mechanism", "unknown mechanism %r" % ph.get("mechanism"))
        schedule.check_phase_kind(ph, schedule.is_recurring(doc))
        eps = ph.get("eps_milli")
        if not isinstance(eps, int) or isinstance(eps, bool) or eps <= 0:
            raise ConfigError("phases.eps_milli", "must be a positive integer")
        if eps > protocol.MAX_EPS_MILLI:
            raise ConfigError("phases.eps_milli", "must be at most %d" % protocol.MAX_EPS_MILLI)
        if not isinstance(ph.get("params", {}), dict):
            raise ConfigError("phases.params", "must be an object")
        if "sample_rate_ppm" in ph:
            ppm = ph["sample_rate_ppm"]
            if not isinstance(ppm, int) or isinstance(ppm, bool) or not 0 < ppm < PPM:
                raise ConfigError("phases.sample_rate_ppm", "must be an integer in (0, 10^6), "
                                  "got %r" % (ppm,))
    rates = {ph["sample_rate_ppm"] for ph in phases if "sample_rate_ppm" in ph}
    if len(rates) > 1:
        raise ConfigError("phases.sample_rate_ppm", "the phases disagree on the sampling rate "
                          "(one public split, spec §5): %s" % sorted(rates))
    check_numeric_phases(doc)
    strings_domain.check_strings_phases(doc)
    for ph in phases:
        check_grr_bound(ph, domain_size(doc))
        check_listless_domain(ph, doc["domain"])
    check_shc_phases(phases)
    check_fallback(doc)
    if "delivery" in doc:
        check_delivery(doc["delivery"])
    if "metric" in doc:
        check_metric(doc["metric"])
    if schedule.is_recurring(doc):
        schedule.check_schedule(doc)
    return doc


def make_close(config: dict) -> dict:
    """The close body of a campaign (spec §5.4): published retained on the config topic, so a
    device that arrives after the close never sees the config and never spends on it. It
    carries the config's `not_before`, which devices keep with the closed id (spec §7.3)."""
    return {"type": "close", "protocol": protocol.PROTOCOL_VERSION, "campaign": config["campaign"],
            "campaign_id": config["campaign_id"], "not_before": config["not_before"]}


def check_close(doc: dict) -> dict:
    """Structural checks of a close body (both clients apply the same rules)."""
    if doc.get("type") != "close":
        raise ConfigError("type", "not a close message")
    if doc.get("protocol") != protocol.PROTOCOL_VERSION:
        raise ConfigError("protocol", "unsupported protocol %r" % doc.get("protocol"))
    if not NAME_RE.match(_need(doc, "campaign", str)):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}")
    if not 0 <= _need(doc, "campaign_id", int) < protocol.WORD:
        raise ConfigError("campaign_id", "out of u32 range")
    if "not_before" in doc:  # optional (closes written before it had none)
        _need(doc, "not_before", int)
    return doc


def make_keys(serial: int, keys) -> dict:
    """A key-rotation body (spec §5.3): `keys` (signing.PublicKey) is the whole new trusted set."""
    return {"type": "keys", "protocol": protocol.PROTOCOL_VERSION, "serial": int(serial),
            "keys": [k.to_doc() for k in keys]}


def check_keys(doc: dict) -> dict:
    """Structural checks of a key-rotation body (both clients apply the same rules): serial a
    positive integer, 1 to 8 keys, each kid matching its key, no kid twice."""
    if doc.get("type") != "keys":
        raise ConfigError("type", "not a key-rotation message")
    if doc.get("protocol") != protocol.PROTOCOL_VERSION:
        raise ConfigError("protocol", "unsupported protocol %r" % doc.get("protocol"))
    if not 1 <= _need(doc, "serial", int) < 2 ** 31:
        raise ConfigError("serial", "must be an integer in [1, 2^31)")
    keys = doc.get("keys")
    if not isinstance(keys, list) or not 1 <= len(keys) <= signing.MAX_TRUSTED:
        raise ConfigError("keys", "1 to %d keys" % signing.MAX_TRUSTED)
    try:
        kids = [signing.PublicKey.from_doc(k).kid for k in keys]
    except ConfigError as exc:
        raise ConfigError("keys", str(exc)) from None
    if len(set(kids)) != len(kids):
        raise ConfigError("keys", "a key is listed twice")
    return doc


def make_phase2(config: dict, candidates=None, model=None, fallback: bool = False) -> dict:
    """A phase-2 body: LDPMiner/svim `candidates`, LDPLCM `model`, or svim's flat branch
    (`"fallback": true`, spec §5.4)."""
    doc = {"type": "phase2", "protocol": protocol.PROTOCOL_VERSION, "campaign": config["campaign"],
           "campaign_id": config["campaign_id"], "phase": 2}
    if candidates is not None:
        doc["candidates"] = [int(c) for c in candidates]
    if model is not None:
        doc["model"] = model
    if fallback:
        doc["fallback"] = True
    return doc
