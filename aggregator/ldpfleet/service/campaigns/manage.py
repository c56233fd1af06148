"""Campaign lifecycle: create (build + sign + publish retained config, store), status, close,
phase-2 publication (protocol_spec/v2 §4, §5).

Python API (all take an open `Store` and, where something is published, `BrokerSettings`):
- `create_campaign(store, broker, signing_key_file, name, mechanism, epsilon, domain, params=None,
  issue=Issuance(valid_days=30, salt=None, campaign_id=None)) -> Campaign`: the config goes retained to `ldp/<name>/config` (QoS 1) and
  an `open` status to `ldp/<name>/status`; the store keeps the signed payload and the PATH of
  the key file (the key itself is re-read when a phase-2 message must be signed).
- `close_campaign(store, name, broker=None)`: state `closed` (the ingest rejects further reports
  as `closed_campaign`), retained status published when a broker is given.
- `publish_phase2(store, broker, name, candidates=None, model=None)`: signed phase-2 message,
  retained on `ldp/<name>/phase2`; the campaign moves to phase 2.
- `campaign_status(store, name) -> dict` and `status_document(store, campaign)` (what goes on
  the status topic).

Two-phase protocols (LDPMiner, LDPLCM): `protocol_campaigns`.

Signing key files: Ed25519, PKCS#8 PEM, written with `PATH.pub` by `signing.write_signing_key`
(`ldpfleet campaign keygen`); devices and `ldpfleet fleet` hold only `PATH.pub`.
"""
import math
import os
import time
from dataclasses import dataclass, replace

from ...core import config as cfgmod
from ...core import protocol
from ...core.errors import ConfigError, LdpError
from ...core.mechanisms import make_mechanism, mechanism_class
from ...mqtt import client as mqtt
from ..ingest.broker_watch import drops_in_state
from ...core.config import domain_extras
from ...core.signing import read_signing_key
from . import rounds
from .keys import require_trusted
from ..state.store import Campaign, Store

DEFAULT_VALID_DAYS = 30
MAX_VALID_DAYS = 3660
"""Longest validity window a config may get (ten years)."""


@dataclass
class Issuance:
    """How a config is issued: its validity window, public salt, campaign id (random when
    None; the id also unused in the state file), `delivery` (spec §5.4; default
    `config.DEFAULT_DELIVERY`: acknowledged, devices re-send until acked) and `metric` (spec
    §5.4; None: no metric, only devices flashed for the campaign's name take part),
    `recurrence` (a recurring campaign's schedule, recurring.Recurrence, spec §3.4; its
    `--rounds`/`--until` then set the window; `valid_days` None: the default)."""

    valid_days: float = DEFAULT_VALID_DAYS
    salt: int = None
    campaign_id: int = None
    delivery: dict = None
    metric: str = None
    recurrence: object = None

    def delivery_field(self) -> dict:
        return dict(cfgmod.DEFAULT_DELIVERY if self.delivery is None else self.delivery)

    def fresh_salt(self) -> int:
        return int.from_bytes(os.urandom(4), "little") if self.salt is None else int(self.salt)


def parse_domain(spec) -> dict:
    """`N` or `0-M` (int items 0..N-1 / 0..M), a file of item lines (str domain), or a numeric
    range: `LO..HI[:STEP]` or a JSON `range`/`ranges` object (spec §1.1, numeric.py)."""
    if isinstance(spec, dict):
        return spec
    spec = str(spec)
    if spec.startswith("strings") and not os.path.isfile(spec):
        return parse_strings_domain(spec)
    if not os.path.isfile(spec):
        from .numeric import parse_numeric_domain
        numeric = parse_numeric_domain(spec)
        if numeric is not None:
            return numeric
    if os.path.isfile(spec):
        with open(spec, encoding="utf-8") as f:
            items = [line.rstrip("\r\n") for line in f]
        items = [i for i in items if i.strip()]
        if len(set(items)) != len(items):
            raise ConfigError("domain", "%s lists an item twice" % spec)
        return {"type": "str", "items": items}
    lo, sep, hi = spec.partition("-")
    try:
        size = int(hi) + 1 if sep else int(lo)
        start = int(lo) if sep else 0
    except ValueError:
        raise ConfigError("domain", "%r is neither a file, N nor 0-M" % spec) from None
    if start != 0:
        raise ConfigError("domain", "an integer domain starts at 0 (items 0..d-1), got %r" % spec)
    if not 2 <= size <= protocol.WORD - 1:
        raise ConfigError("domain", "domain size must be in [2, 2^32 - 1] (index d is the reserved "
                          "item 'other'), got %d" % size)
    return {"type": "int", "size": size}


def parse_strings_domain(spec: str) -> dict:
    """`strings:max_len=L` (spec §3.5; `strings` alone: max_len 16)."""
    from ...core.strings_domain import check_strings_domain
    head, _sep, rest = spec.partition(":")
    if head != "strings":
        raise ConfigError("domain", "expected strings:max_len=L, got %r" % spec)
    dom = {"type": "strings", "max_len": 16}
    for pair in filter(None, rest.split(",")):
        key, eq, value = pair.partition("=")
        if key != "max_len" or not eq or not value.strip().isdigit():
            raise ConfigError("domain.max_len", "expected strings:max_len=L, got %r" % spec)
        dom["max_len"] = int(value)
    check_strings_domain(dom)
    return dom


def parse_params(pairs) -> dict:
    """["k=4", "m=1024"] -> {"k": 4, "m": 1024} (integers where they parse)."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError("param", "expected k=v, got %r" % pair)
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def parse_epsilon(epsilon) -> int:
    """Epsilon in nats (2, 2.0, "2.0") -> integer milli-nats (spec §2)."""
    try:
        return protocol.eps_to_milli(float(epsilon))
    except ValueError as exc:
        raise ConfigError("epsilon", str(exc)) from None


def build_config(name: str, mechanisms, epsilons, domain: dict, params=None,
                 issue: Issuance = None) -> dict:
    """A checked config body. `mechanisms`/`epsilons`/`params` are one entry per phase (a bare
    value means a one-phase campaign); parameters not given get the mechanism's defaults,
    which are written into the config so every party uses the same ones."""
    if isinstance(mechanisms, str):
        mechanisms, epsilons, params = [mechanisms], [epsilons], [params or {}]
    params = list(params) if params is not None else [{} for _ in mechanisms]
    if not len(mechanisms) == len(epsilons) == len(params):
        raise ConfigError("phases", "one mechanism, epsilon and parameter set per phase")
    if not cfgmod.NAME_RE.match(name or ""):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}, got %r" % name)
    issue = issue or Issuance()
    salt = issue.fresh_salt()
    cid = cfgmod.new_campaign_id() if issue.campaign_id is None else int(issue.campaign_id)
    probe = {"domain": domain}
    phases = []
    for phase, (mech_name, eps, p) in enumerate(zip(mechanisms, epsilons, params), start=1):
        try:
            mechanism_class(mech_name)
        except (ValueError, ImportError) as exc:
            raise ConfigError("mechanism", str(exc)) from None
        eps_milli = parse_epsilon(eps)
        kw = dict(p, **domain_extras(probe, mech_name))
        if mech_name == "hm" and "metrics" not in kw and domain.get("type") == "ranges":
            kw["metrics"] = cfgmod.numeric_metrics(domain)  # one per metric of the domain
        if mech_name == "shc" and phase == 2 and phases:  # its thresholds need eps1 (§3.1)
            kw["eps1_milli"] = phases[0]["eps_milli"]
        size = cfgmod.mechanism_domain_size(probe, mech_name)
        try:
            mech = make_mechanism(mech_name, eps_milli, size, salt=salt, campaign_id=cid,
                                  phase=phase, **kw)
            written = mech.config_params()
        except (TypeError, ValueError) as exc:
            if phase == 2 and getattr(exc, "field", None) == "candidates":
                # The candidates come with the phase-2 message; build with a placeholder list
                # so the config still spells out every other parameter (devices never guess).
                mech = make_mechanism(mech_name, eps_milli, size, salt=salt, campaign_id=cid,
                                      phase=phase, **dict(kw, candidates=[0, 1]))
                written = {k: v for k, v in mech.config_params().items() if k != "candidates"}
            elif isinstance(exc, LdpError):
                raise
            else:
                raise ConfigError("param", str(exc)) from None
        phases.append({"phase": phase, "mechanism": mech_name, "eps_milli": eps_milli,
                       "params": written})
    sched = None
    if issue.recurrence is not None:
        not_before, not_after, sched = issue.recurrence.window(issue.valid_days)
    else:
        not_before, not_after = validity_window(issue.valid_days)
    return cfgmod.make_config(name, phases, domain, salt, campaign_id=cid, not_before=not_before,
                              not_after=not_after, delivery=issue.delivery_field(),
                              metric=issue.metric, recurring=sched)


def validity_window(valid_days) -> tuple:
    """(not_before, not_after) of a config valid from a minute ago for `valid_days` days
    (None: DEFAULT_VALID_DAYS)."""
    if valid_days is None:
        valid_days = DEFAULT_VALID_DAYS
    if not (isinstance(valid_days, (int, float)) and 0 < valid_days <= MAX_VALID_DAYS):
        raise ConfigError("valid_days", "must be in (0, %d], got %r" % (MAX_VALID_DAYS, valid_days))
    now = int(time.time())
    return now - 60, now + int(valid_days * 86400)


def sign_store_publish(store: Store, broker, signing_key_file: str, key: bytes, doc: dict,
                        protocol: dict = None) -> Campaign:
    """Sign the config, store the campaign, publish the config retained (and the status);
    a publishing failure removes the campaign again."""
    require_trusted(store, key, signing_key_file)
    payload = cfgmod.sign(doc, key)
    name = doc["campaign"]
    camp = store.add_campaign(doc, payload, os.path.abspath(signing_key_file), protocol=protocol)
    if broker is not None:
        try:
            mqtt.publish(broker, "ldp/%s/config" % name, payload, retain=True)
            publish_status(store, broker, name, key)
        except Exception:
            store.remove_campaign(name)
            raise
    return camp


def fresh_campaign_id(store: Store) -> int:
    """A random campaign id no campaign of the state uses (spec §5.4)."""
    return cfgmod.new_campaign_id(c.campaign_id for c in store.campaigns())


def status_document(store: Store, campaign: Campaign) -> dict:
    """The status body signed and published retained on `ldp/<name>/status` (spec §4, §5.4);
    a recurring campaign's adds `round`, the round open now (None between rounds)."""
    counters = store.counters(campaign.name)
    rejected = sum(v for k, v in counters.items() if k not in ("received", "accepted"))
    extra = {"round": rounds.current_round(campaign)} if campaign.recurring else {}
    return {**extra, "type": "status", "protocol": protocol.PROTOCOL_VERSION,
            "campaign": campaign.name, "campaign_id": campaign.campaign_id, "state": campaign.state,
            "phase": campaign.phase, "phases": campaign.phases,
            "counters": {"received": counters.get("received", 0),
                         "accepted": counters.get("accepted", 0), "rejected": rejected},
            "time": int(time.time())}


def publish_status(store: Store, broker: mqtt.BrokerSettings, name: str, key):
    """Sign the status with the campaign's key and publish it retained (QoS 0)."""
    camp = store.require_campaign(name)
    mqtt.publish(broker, "ldp/%s/status" % name, cfgmod.sign(status_document(store, camp), key),
                 qos=0)


def create_campaign(store: Store, broker: mqtt.BrokerSettings, signing_key_file: str, name: str,
                    mechanism, epsilon, domain, params=None, issue: Issuance = None) -> Campaign:
    """Build, sign, store and publish a campaign config (see module docstring).

    `mechanism`/`epsilon`/`params` may be lists (one per phase) for two-phase campaigns;
    `domain` is a dict, `N`, `0-M` or a file of items. Publishing failure undoes the store."""
    key = read_signing_key(signing_key_file)
    issue = issue or Issuance()
    if issue.campaign_id is None:
        issue = replace(issue, campaign_id=fresh_campaign_id(store))
    doc = build_config(name, mechanism, epsilon, parse_domain(domain), params=params, issue=issue)
    return sign_store_publish(store, broker, signing_key_file, key, doc)


def campaign_key(camp: Campaign, signing_key_file: str = None):
    """The key that signs a campaign's later messages (phase 2, close): the given key file or
    the one the campaign was made with, refused unless it verifies the campaign's config
    (devices would refuse anything else)."""
    key_file = signing_key_file or camp.signing_key_ref
    key = read_signing_key(key_file)
    try:
        cfgmod.verify(camp.config_payload, key)
    except ConfigError:
        raise ConfigError("signing_key", "%s is not the key campaign %s was signed with"
                          % (key_file, camp.name)) from None
    return key


def close_campaign(store: Store, name: str, broker: mqtt.BrokerSettings = None,
                   signing_key_file: str = None) -> Campaign:
    """State `closed` (the ingest rejects further reports as `closed_campaign`). With a broker,
    the signed close (spec §5.4) replaces the retained config on `ldp/<name>/config` — a device
    that comes later never sees the config, so it never spends on the campaign — the retained
    phase-2 message is cleared, and the closed status is published. The key is read before
    anything changes, so a missing key file changes nothing."""
    camp = store.require_campaign(name)
    payload = None
    if broker is not None:
        key = campaign_key(camp, signing_key_file)
        payload = cfgmod.sign(cfgmod.make_close(camp.config), key)
    store.set_state(name, "closed")
    if broker is not None:
        mqtt.publish(broker, "ldp/%s/config" % name, payload, retain=True)
        if camp.phases > 1:
            mqtt.publish(broker, "ldp/%s/phase2" % name, b"", retain=True)  # clears it
        publish_status(store, broker, name, key)
    return store.require_campaign(name)


def publish_phase2(store: Store, broker: mqtt.BrokerSettings, name: str, candidates=None,
                   model=None, signing_key_file: str = None, protocol: dict = None,
                   fallback: bool = False) -> Campaign:
    """Sign and publish the phase-2 message (LDPMiner/svim candidates, LDPLCM model, or svim's
    flat branch `fallback`, spec §5.4); the campaign
    then accepts phase-2 reports (and still late phase-1 ones). `protocol`: the campaign's
    updated protocol document, stored in the same transaction. If the broker does not take
    the message, the campaign goes back to phase 1 (and its old protocol document).

    Refused before anything is stored or sent: a key other than the one the config was signed
    with (devices would refuse the message), candidates outside the domain, a model devices
    would refuse, and a phase-2 message different from the one already open (devices may have
    reported against it). The same message again is re-published (recovery after a crash
    between storing and publishing)."""
    camp = store.require_campaign(name)
    if camp.phases < 2:
        raise ConfigError("phase", "campaign %s has a single phase" % name)
    if not camp.open:
        raise ConfigError("state", "campaign %s is closed" % name)
    key = campaign_key(camp, signing_key_file)
    if candidates is not None:
        keys = set(int(c) for c in candidates)
        dom = camp.config["domain"]
        if dom["type"] == "int":
            missing = sorted(k for k in keys if not 0 <= k < dom["size"])
        elif dom["type"] == "strings":  # any key of a code (spec §3.5), at most 1024
            from ...core.strings_domain import check_pem_phase2
            check_pem_phase2({"candidates": [int(c) for c in candidates]})
            missing = []
        else:
            missing = sorted(keys - set(cfgmod.domain_keys(camp.config)))
        if missing:
            raise ConfigError("candidates", "%d candidate(s) not in the domain, e.g. key %d"
                              % (len(missing), missing[0]))
    if model is not None:
        from ...core.protocols import ldplcm
        ldplcm.check_model(model)  # the devices' own rules (ldplcm-model.md)
    body = cfgmod.check_phase2_choice(camp.config, cfgmod.make_phase2(
        camp.config, candidates=candidates, model=model, fallback=fallback))
    if camp.phase >= 2:
        if body != camp.phase2:
            raise ConfigError("phase", "phase 2 of %s is already open with another message; "
                              "devices may have reported against it" % name)
        if broker is not None:
            mqtt.publish(broker, "ldp/%s/phase2" % name, camp.phase2_payload, retain=True)
            publish_status(store, broker, name, key)
        return camp
    payload = cfgmod.sign(body, key)
    probe = Campaign(**{**camp.__dict__, "phase2": body, "phase": 2, "_mechanisms": {}})
    probe.mechanism(2)  # refuse a phase-2 message the phase-2 mechanism cannot use
    store.set_phase2(name, body, payload, protocol=protocol)
    if broker is not None:
        try:
            mqtt.publish(broker, "ldp/%s/phase2" % name, payload, retain=True)
        except Exception:
            if camp.phase == 1:
                store.reopen_phase1(name, protocol=camp.protocol)
            raise
        publish_status(store, broker, name, key)
    return store.require_campaign(name)


def expected_error(campaign: Campaign, phase: int, n: int, confidence: float = 0.95) -> dict:
    """Standard deviation of one item's estimate from `mech.variance(n)` (f -> 0), as a fraction
    and as a count, and the half-width of the two-sided `confidence` interval."""
    from .estimates import two_sided_z
    if n <= 0:
        return {"n": 0, "stddev_fraction": None, "stddev_count": None, "ci_halfwidth_count": None,
                "confidence": confidence}
    var = campaign.mechanism(phase).variance(n)
    sd = math.sqrt(var)
    z = two_sided_z(confidence)
    return {"n": n, "stddev_fraction": sd, "stddev_count": sd * n,
            "ci_halfwidth_count": z * sd * n, "confidence": confidence}


def campaign_rows(store: Store) -> list:
    """One row per campaign: what `ldpfleet campaign list --json` and `GET /campaigns` give
    (`rejected` counts every rejection reason, `duplicates` the re-sends among them)."""
    rows = []
    for camp in store.campaigns():
        counters = store.counters(camp.name)
        rows.append({"campaign": camp.name, "campaign_id": camp.campaign_id, "state": camp.state,
                     "phase": camp.phase,
                     "mechanisms": [p["mechanism"] for p in camp.config["phases"]],
                     "accepted": counters.get("accepted", 0),
                     "rejected": sum(v for k, v in counters.items()
                                     if k not in ("received", "accepted")),
                     "duplicates": counters.get("duplicate", 0),
                     **_schedule_fields(camp)})
    return rows


def _schedule_fields(camp: Campaign) -> dict:
    """A recurring campaign's `schedule`, `rounds` (R) and current `round` (spec §3.4)."""
    info = rounds.describe(camp)
    if info is None:
        return {}
    return {"schedule": info["schedule"], "rounds": info["rounds"], "round": info["round"]}


def campaign_status(store: Store, name: str, confidence: float = 0.95, fleet=None) -> dict:
    """Everything `ldpfleet campaign status` prints. `fleet`: the provisioned devices
    (coverage.ProvisionedFleet) that `coverage` counts."""
    from .coverage import coverage
    from .numeric import describe_domain, is_numeric
    from .numeric import expected_error as numeric_error
    from ..state.retention import purge_record
    camp = store.require_campaign(name)
    numeric = is_numeric(camp.config)
    counters = store.counters(name)
    phases = []
    sched = None
    if "schedule" in camp.config:  # recurring (spec §3.4): sketches per round, estimated alone
        from .rounds import schedule_status
        sched = schedule_status(store, camp)
    for ph in camp.config["phases"]:
        stored = None if sched else store.sketch_blob(name, ph["phase"])
        n = sched["latest_reports"] if sched else stored[0] if stored else 0
        entry = {"phase": ph["phase"], "mechanism": ph["mechanism"],
                 "epsilon": ph["eps_milli"] / 1000.0, "params": ph.get("params", {}),
                 "reports": sched["reports"] if sched else n, "open": ph["phase"] <= camp.phase}
        if ph["phase"] == 2 and camp.fallback:  # svim's flat branch: phase 2 runs the fallback
            fb = cfgmod.fallback_entry(camp.config)
            entry.update(mechanism=fb["mechanism"], params=fb["params"], fallback=True)
        if "sample_rate_ppm" in ph:
            entry["sample_rate_ppm"] = ph["sample_rate_ppm"]
        if ph["phase"] <= camp.phase and numeric:
            entry["expected_error"] = numeric_error(camp.mechanism(ph["phase"]),
                                                    camp.config["domain"], n, confidence)
        elif ph["phase"] <= camp.phase:
            try:
                entry["expected_error"] = expected_error(camp, ph["phase"], n, confidence)
            except NotImplementedError as exc:  # a mechanism without variance() (numeric ones)
                entry["expected_error"] = {"error": str(exc)}
        phases.append(entry)
    rejected = {k: v for k, v in sorted(counters.items()) if k not in ("received", "accepted")}
    return {"campaign": name, "campaign_id": camp.campaign_id, "state": camp.state,
            "phase": camp.phase, "domain": dict(
                {"type": camp.config["domain"]["type"], "size": cfgmod.domain_size(camp.config)},
                **({"range": describe_domain(camp.config["domain"])} if numeric else {}),
                **{k: v for k, v in camp.config["domain"].items() if k == "max_len"}),
            "created_at": camp.created_at, "closed_at": camp.closed_at,
            "not_after": camp.config["not_after"],
            "received": counters.get("received", 0), "accepted": counters.get("accepted", 0),
            "rejected": rejected, "rejected_total": sum(rejected.values()), "phases": phases,
            "protocol": camp.protocol, "branch": (camp.protocol or {}).get("branch"),
            "delivery": camp.config.get("delivery"), "metric": camp.config.get("metric"),
            "broker_drops": drops_in_state(store), "dedupe_purged": purge_record(store, name),
            "coverage": coverage(store, name, fleet), **({"schedule": sched} if sched else {})}
