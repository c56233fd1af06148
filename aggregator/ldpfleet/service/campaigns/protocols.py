"""Two-phase protocol campaigns (`campaign create --protocol`, `campaign advance`;
protocol_spec/v2 §3, §5).

- `create_protocol_campaign(store, broker, signing_key_file, name, protocol, epsilon, domain,
  options=ProtocolOptions(...), issue=Issuance(...))`: `ldpminer-rappor` / `ldpminer-sh` /
  `ldpminer-sh-opt` (LDPMiner, sh then srappor / sh, or shc in both phases) or `ldplcm` (cms
  then lcm); the phases come from
  `ldpminer.campaign_phases` / `ldplcm.campaign_phases`, and what only the aggregator needs
  (k, k_max, theta, ...) is kept in the state file's `protocols` table (`Campaign.protocol`),
  never in the config.
- `advance_campaign(store, broker, name)`: from the phase-1 sketch, LDPMiner's k_max
  candidates (`candidates_from_phase1`) or LDPLCM's trained model (`train_model`), signed and
  retained on `ldp/<name>/phase2`; the campaign moves to phase 2. svim first tests
  separability (`svim.separation`) and on flat phase-1 data publishes `"fallback": true`
  (spec §5.4): phase 2 then runs the config's fallback over the whole domain; the branch and
  the test's diagnostics are kept in the protocol document.
"""
from ...core import config as cfgmod
from ...core import protocol
from ...core.config import domain_extras
from ...core.errors import ConfigError, LdpError
from ...core.mechanisms import make_mechanism
from ...core.protocols.options import ProtocolOptions, check_positive
from ...mqtt import client as mqtt
from .manage import (
    Issuance,
    fresh_campaign_id,
    parse_domain,
    parse_epsilon,
    publish_phase2,
    read_signing_key,
    sign_store_publish,
    validity_window)
from ..state.store import Campaign, Store

PROTOCOLS = {"ldpminer-rappor": "lm-rp", "ldpminer-sh": "lm-sh", "ldpminer-sh-opt": "lm-sho",
             "ldplcm": "ldplcm", "svim": "svim", "auto": "auto", "pem": "pem"}
"""CLI protocol names -> the core's names (ldpminer.PROTOCOLS, §5.1.3 of LDPMiner, and
ldpminer-sh-opt, LDPMiner-SH with §4.4's correlated phases: `shc` in both, spec §3.1; svim,
protocols.svim; auto, protocols.auto's choice: CAMPAIGN_AUTO)."""
CAMPAIGN_AUTO = ("lm-rp", "lm-sh", "lm-sho", "svim")
"""What `--protocol auto` chooses among for a campaign (the two-phase protocols; a one-phase
campaign is `--mechanism srappor|psgrr|psolh`): svim, or where svim cannot run (a string
domain, more than 2^24 items) the LDPMiner protocol predicted best (auto.choose)."""


def protocol_phases(protocol_name: str, eps_milli: int, domain: dict,
                    options: ProtocolOptions = None):
    """(phases of the config, protocol document) of a two-phase protocol campaign
    (`ProtocolOptions` says what each option means and its default)."""
    from ...core.protocols import ldplcm, ldpminer
    if protocol_name not in PROTOCOLS:
        raise ConfigError("protocol", "unknown protocol %r (known: %s)"
                          % (protocol_name, ", ".join(PROTOCOLS)))
    opts = options or ProtocolOptions()
    if protocol_name == "pem" or domain["type"] == "strings":
        if protocol_name != "pem" or domain["type"] != "strings":
            raise ConfigError("domain.type", "a strings domain takes --protocol pem, and pem a "
                              "strings domain (spec §3.5)")
        from . import pem_campaign
        return pem_campaign.campaign_phases(eps_milli, domain, opts)
    size = domain["size"] if domain["type"] == "int" else len(domain["items"])
    if protocol_name == "ldplcm":
        opts.refuse(("budget_split",), "ldplcm", " (each device reports once, with the whole "
                    "epsilon)")
        opts.refuse(("set_size", "top", "k_max", "fleet_size"), "ldplcm")
        rate, theta, k, m = opts.ldplcm()
        ppm = ldplcm.rate_ppm(rate)
        phases = ldplcm.campaign_phases(eps_milli, k, m, ppm)
        return phases, {"protocol": protocol_name, "theta": theta, "sample_rate_ppm": ppm,
                        "train_seed": 0}
    opts.refuse(ProtocolOptions.LDPLCM_ONLY, protocol_name)
    if protocol_name != "auto":
        opts.refuse(("fleet_size",), protocol_name, " (only --protocol auto plans for a fleet)")
    if opts.set_size is None or opts.top is None:
        raise ConfigError("set_size" if opts.set_size is None else "top",
                          "%s needs --set-size L and --top K" % protocol_name)
    l, k = check_positive(opts.set_size, "set_size"), check_positive(opts.top, "top")
    kc = min(2 * k, size) if opts.k_max is None else check_positive(opts.k_max, "k_max")
    if not k <= kc <= min(size, ldpminer.MAX_CANDIDATES):
        raise ConfigError("k_max", "need top <= k_max <= min(domain size, %d), got k=%d, k_max=%d"
                          % (ldpminer.MAX_CANDIDATES, k, kc))
    plan = None
    if protocol_name in ("svim", "auto"):
        opts.refuse(("budget_split",), protocol_name, " (svim gives every device the whole "
                    "epsilon once; auto plans with LDPMiner's even split)")
        if domain["type"] != "int" and protocol_name == "svim":
            raise ConfigError("domain.type", "%s needs an integer domain: its phase 1 runs "
                              "psgrr/psolh over the items 0..d-1 (spec §3)" % protocol_name)
    if protocol_name == "auto":
        from ...core.protocols import auto
        if opts.fleet_size is None:
            raise ConfigError("fleet_size", "--protocol auto needs --fleet-size N (the devices "
                              "expected to report)")
        plan = auto.choose(check_positive(opts.fleet_size, "fleet_size"), eps_milli, size, l, k,
                           kc, allowed=CAMPAIGN_AUTO, size_step=False,
                           int_domain=domain["type"] == "int")
        protocol_name = plan["chosen_protocol"]
    if protocol_name == "svim":
        from ...core.protocols import svim
        phases = svim.campaign_phases(eps_milli, size, l, kc)
        return phases, _with_plan({"protocol": "svim", "k": k, "k_max": kc, "set_size": l,
                                    "budget_split": None}, plan)
    share = opts.ldpminer_share()
    phases = ldpminer.campaign_phases(PROTOCOLS[protocol_name], eps_milli, l, kc,
                                      opts.ldpminer_m(), share)
    return phases, _with_plan({"protocol": protocol_name, "k": k, "k_max": kc, "set_size": l,
                               "budget_split": share}, plan)


def _with_plan(doc: dict, plan) -> dict:
    """The protocol document, with `--protocol auto`'s plan (what was chosen and why)."""
    if plan is not None:
        doc["plan"] = plan
    return doc


def _spelled_out(phases, domain: dict, salt: int, cid: int) -> list:
    """Every phase's parameters as its mechanism writes them (defaults included; srappor's
    candidates come later), checked by building the mechanism."""
    probe = {"domain": domain}
    out = []
    for ph in phases:
        kw = dict(ph["params"], **domain_extras(probe, ph["mechanism"]))
        size = cfgmod.mechanism_domain_size(probe, ph["mechanism"])
        if ph["phase"] == 2 and "candidates" in cfgmod.phase2_parameters(ph["mechanism"]):
            kw["candidates"] = [0, 1]  # placeholder: the list comes with the phase-2 message
        if ph["phase"] == 2 and ph["mechanism"] == "shc":  # its thresholds need eps1 (§3.1)
            kw["eps1_milli"] = phases[0]["eps_milli"]
        try:
            mech = make_mechanism(ph["mechanism"], ph["eps_milli"], size, salt=salt,
                                  campaign_id=cid, phase=ph["phase"], **kw)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, LdpError):
                raise
            raise ConfigError("param", str(exc)) from None
        params = {k: v for k, v in mech.config_params().items() if k != "candidates"}
        out.append(dict(ph, params=params))
    return out


def create_protocol_campaign(store: Store, broker: mqtt.BrokerSettings, signing_key_file: str,
                             name: str, protocol_name: str, epsilon, domain,
                             options: ProtocolOptions = None, issue: Issuance = None) -> Campaign:
    """Build, sign, store and publish a two-phase protocol campaign (module docstring).
    `epsilon` is the whole budget: LDPMiner splits it between its phases (every device
    reports twice, sequential composition); LDPLCM gives it to both (each device reports once)."""
    if not cfgmod.NAME_RE.match(name or ""):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}, got %r" % name)
    key = read_signing_key(signing_key_file)
    dom = parse_domain(domain)
    if dom["type"] in cfgmod.NUMERIC_DOMAINS:
        raise ConfigError("domain.type", "the two-phase protocols run over items; a numeric "
                          "range takes --mechanism duchi, pm, hm or sw")
    issue = issue or Issuance()
    phases, proto = protocol_phases(protocol_name, parse_epsilon(epsilon), dom, options)
    salt = issue.fresh_salt()
    cid = fresh_campaign_id(store) if issue.campaign_id is None else int(issue.campaign_id)
    not_before, not_after = validity_window(issue.valid_days)
    doc = cfgmod.make_config(name, _spelled_out(phases, dom, salt % protocol.WORD, cid), dom, salt,
                             campaign_id=cid, not_before=not_before, not_after=not_after,
                             delivery=issue.delivery_field(), metric=issue.metric)
    return sign_store_publish(store, broker, signing_key_file, key, doc, protocol=proto)


def advance_campaign(store: Store, broker: mqtt.BrokerSettings, name: str,
                     signing_key_file: str = None) -> dict:
    """Phase 1 -> phase 2 of a protocol campaign: compute the phase-2 message from the
    phase-1 sketch as it is committed now, sign and publish it retained, persist it (with
    LDPLCM's measured theta). Returns what was decided: {"campaign", "protocol",
    "phase1_reports", "candidates"} (LDPMiner; svim adds "branch" and "separation", and on the
    flat branch publishes `"fallback": true` instead of candidates, spec §5.4) or {..., "high_items", "theta_measured",
    "model_nodes"} (LDPLCM)."""
    from ...core.protocols import ldplcm, ldpminer
    from .estimates import load_sketch
    camp = store.require_campaign(name)
    proto = camp.protocol
    if not proto:
        raise ConfigError("protocol", "campaign %s was not created with --protocol; publish its "
                          "phase-2 message with `campaign phase2`" % name)
    if camp.phase != 1:
        raise ConfigError("phase", "campaign %s is already in phase %d" % (name, camp.phase))
    if not camp.open:
        raise ConfigError("state", "campaign %s is closed" % name)
    sketch1 = load_sketch(store, name, 1)
    if sketch1.n < 1:
        raise ConfigError("phase1", "campaign %s has no phase-1 reports yet" % name)
    out = {"campaign": name, "protocol": proto["protocol"], "phase1_reports": int(sketch1.n)}
    if proto["protocol"] == "pem":  # spec §3.5: identify over the groups, candidates' keys
        from . import pem_campaign
        cand, updated, summary = pem_campaign.advance(camp, sketch1)
        publish_phase2(store, broker, name, candidates=cand, signing_key_file=signing_key_file,
                       protocol=updated)
        out.update(summary, candidates=cand)
        return out
    keys = cfgmod.domain_keys(camp.config)
    if proto["protocol"] == "ldplcm":
        training = ldplcm.train_model(sketch1, keys, theta=proto["theta"],
                                      seed=int(proto.get("train_seed", 0)))
        model = training.model
        updated = dict(proto, theta_measured=training.theta_measured)
        publish_phase2(store, broker, name, model=ldplcm.model_to_doc(model),
                       signing_key_file=signing_key_file, protocol=updated)
        high = ldplcm.high_mask(model, range(len(keys)))
        out.update(theta_measured=training.theta_measured, high_items=int(high.sum()),
                   model_nodes=len(model.split))
        return out
    updated = None
    if proto["protocol"] == "svim":
        branch, sep = svim_branch(camp, sketch1, keys)
        updated = dict(proto, branch=branch, separation=sep)
        out.update(branch=branch, separation=sep)
        if branch == "flat":
            publish_phase2(store, broker, name, fallback=True, signing_key_file=signing_key_file,
                           protocol=updated)
            return out
    cand = ldpminer.candidates_from_phase1(sketch1, int(proto["k_max"]), keys)
    publish_phase2(store, broker, name, candidates=[int(c) for c in cand],
                   signing_key_file=signing_key_file, protocol=updated)
    out["candidates"] = [int(c) for c in cand]
    return out


def svim_branch(camp: Campaign, sketch1, keys) -> tuple:
    """(branch, separation diagnostics) of a svim campaign at the end of phase 1 (protocols.svim:
    the separability test on the phase-1 scores and their exact variances, post-processing):
    "flat" when phase 1 does not separate the head and the config carries a fallback (spec
    §5.4), else "candidates" (a config without a fallback always takes it)."""
    from ...core.protocols import svim
    proto = camp.protocol
    scores, variances = svim.phase1_scores(sketch1, keys)
    sep = svim.separation(scores, variances, int(proto["k"]), int(proto["k_max"]))
    flat = not sep["separable"] and cfgmod.fallback_entry(camp.config) is not None
    return ("flat" if flat else "candidates"), svim.separation_doc(sep)


