"""`ldpfleet campaign create|status|close|purge|trend|list|phase2|advance` (and `keygen|rotate-keys`,
commands/campaign_keys.py): campaigns of the aggregator service (ldpfleet.service.campaigns).

Two-phase protocols: `campaign create --protocol ldpminer-rappor|ldpminer-sh|ldpminer-sh-opt|ldplcm ...`,
devices report phase 1, `campaign advance NAME` publishes the phase-2 message computed from
the phase-1 sketch, devices report phase 2, `ldpfleet estimate NAME` prints the protocol's answer.

Exit codes: 0 ok, 2 bad input (typed ldpfleet error, printed with its field), 3 broker
unreachable.
"""
import json
import time

from ..core.config import DEFAULT_DRAIN_RATE
from ..core.errors import ConfigError
from ..core.protocols.options import ProtocolOptions, add_protocol_arguments
from . import campaign_keys, campaign_recurring
from .common import broker_args, command_broker, item_list, open_store, split_commas, state_arg


def register(subparsers):
    c = subparsers.add_parser("campaign", help="create, inspect and close campaigns")
    csub = c.add_subparsers(dest="campaign_command", metavar="ACTION")
    cr = csub.add_parser(
        "create", help="build, sign and publish (retained) a campaign config",
        description="One mechanism (--mechanism), or a two-phase protocol (--protocol): "
                    "ldpminer-rappor / ldpminer-sh / ldpminer-sh-opt (LDPMiner heavy hitters "
                    "over sets, -opt with correlated phases, spec §3.1: --set-size "
                    "L --top K [--k-max] [--budget-split]), svim (padding-and-sampling oracles, "
                    "devices split between the phases: --set-size L --top K [--k-max]), auto "
                    "(svim, or the best ldpminer-* where svim cannot run, for --fleet-size N) or "
                    "ldplcm (LDPLCM learned sketch: [--sample-rate R] [--theta T] [--sketch-k K "
                    "--sketch-m M]) or pem (strings nobody listed, --domain strings:max_len=L, the "
                    "default there: [--top K] [--k-max C] [--sample-rate R, default 0.9]); then `campaign "
                    "advance`. Hand-made two-phase campaigns: --mechanism sh,srappor --epsilon "
                    "1,3 and phase-2 parameters as --param 2:NAME=VALUE.")
    broker_args(cr)
    state_arg(cr)
    cr.add_argument("--signing-key", dest="signing_key_file", required=True, metavar="FILE",
                    help="Ed25519 private key from `campaign keygen FILE` (devices trust FILE.pub)")
    cr.add_argument("--name", required=True)
    kind = cr.add_mutually_exclusive_group(required=False)
    kind.add_argument("--mechanism", help="grr, olh, flh, oue, cms, hcms, sh, ... "
                      "(comma-separated for two phases); with --every a memoised one: "
                      "loloha, losue, lsue, lgrr, lbitmean")
    kind.add_argument("--protocol", choices=("ldpminer-rappor", "ldpminer-sh", "ldpminer-sh-opt",
                                             "svim", "ldplcm", "auto", "pem"),
                      help="a two-phase protocol (see above); with --every only auto (the "
                           "planner's memoised mechanism)")
    cr.add_argument("--epsilon", required=True, help="epsilon in nats (comma-separated per phase; "
                    "with --protocol the whole budget of a device)")
    cr.add_argument("--set-size", type=int, default=None, metavar="L",
                    help="LDPMiner: set length l of phase 1 (phase 2 uses min(l, k_max); "
                         "ldpminer-sh-opt: l in both)")
    add_protocol_arguments(cr)
    cr.add_argument("--fleet-size", type=int, default=None, metavar="N",
                    help="devices expected to report: the first-publish spread (delivery.spread_s "
                         "= N / --drain-rate seconds; default N: the most devices one campaign of "
                         "this state has had, else none and no spread) and, with --protocol auto, "
                         "the plan (the predicted errors depend on it; ldpfleet plan --top shows them)")
    cr.add_argument("--domain", required=True,
                    help="N or 0-M (integer items), a file with one string item per line, "
                         "strings:max_len=L (any string, PEM, spec §3.5), or a "
                         "numeric range for duchi/pm/hm/sw: LO..HI[:STEP] in the metric's units "
                         "(--domain=-40.0..85.0:0.1: write it with '=' when LO is negative) or "
                         "a JSON range/ranges object of protocol spec §1.1")
    cr.add_argument("--param", action="append", default=[], metavar="[PHASE:]K=V",
                    help="mechanism parameter, e.g. g=8 or 2:kc=16 (repeatable)")
    cr.add_argument("--valid-days", type=float, default=None,
                    help="how long the config is valid (default 30; with --every --rounds or "
                         "--until those set the end instead)")
    cr.add_argument("--salt", type=int, default=None, help="public hash salt (default: random)")
    cr.add_argument("--no-ack", action="store_true",
                    help="devices publish once per trigger and wait for no acknowledgement "
                         "(a report a broker drops is then lost; spec §6)")
    cr.add_argument("--retry-s", type=int, default=None, metavar="S",
                    help="first re-send of an unacknowledged report after S x U[0.5, 1.5) "
                         "seconds (default 30)")
    cr.add_argument("--retry-max-s", type=int, default=None, metavar="S",
                    help="re-sends back off, doubling, up to S seconds apart (default 3600)")
    cr.add_argument("--drain-rate", type=float, default=None, metavar="R",
                    help="reports/s the broker hands serve, for the spread (default %d: "
                         "conservative; tools/bench_ingest.py measures serve behind a broker)"
                    % DEFAULT_DRAIN_RATE)
    cr.add_argument("--spread-s", type=int, default=None, metavar="S",
                    help="devices spread a phase's first publish over U[0, S) seconds "
                         "(delivery.spread_s, spec §6; default --fleet-size / --drain-rate)")
    cr.add_argument("--metric", default=None, metavar="NAME",
                    help="the reading this campaign asks for ([a-z][a-z0-9_]{0,31}, spec §5.4): "
                         "devices running a provider of NAME (MicroPython ldp.Agent, C client "
                         "--metric) discover the campaign and take part")
    campaign_recurring.add_recurring_arguments(cr)
    cr.add_argument("--json", action="store_true")
    cr.set_defaults(func=run_create)

    st = csub.add_parser("status", help="counters by reason and expected error of a campaign")
    st.add_argument("name")
    state_arg(st)
    st.add_argument("--confidence", type=float, default=0.95)
    st.add_argument("--devices-file", default=None, metavar="FILE",
                    help="the provisioned fleet (one device id per line): coverage = its "
                         "devices with an accepted report / all of them")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=run_status)

    cl = csub.add_parser("close", help="stop accepting reports; with --broker, tell the devices",
                         description="Close a campaign: the aggregator rejects further reports "
                                     "(counted as closed_campaign). With --broker the signed close "
                                     "replaces the retained config, so devices stop re-sending and "
                                     "a device that comes later never spends on the campaign; the "
                                     "retained phase-2 message is cleared.")
    cl.add_argument("name")
    state_arg(cl)
    broker_args(cl, required=False)
    cl.add_argument("--signing-key", dest="signing_key_file", default=None, metavar="FILE",
                    help="key that signs the close (default: the one the campaign was made with)")
    cl.set_defaults(func=run_close)

    pu = csub.add_parser(
        "purge", help="drop the dedupe keys of closed campaigns (retention; sketches stay)",
        description="A closed campaign rejects every report, so its dedupe keys (keyed hashes "
                    "of device ids) protect nothing any more: purge drops them; estimates and "
                    "counters are unchanged and `campaign status` shows when it happened.")
    pu.add_argument("name", nargs="?", default=None, help="a closed campaign")
    state_arg(pu)
    pu.add_argument("--closed-before", type=float, default=None, metavar="DAYS",
                    help="instead of NAME: every campaign closed more than DAYS days ago")
    pu.add_argument("--json", action="store_true")
    pu.set_defaults(func=run_purge)

    tr = csub.add_parser("trend", help="a campaign's counters over time (one point a minute)",
                         description="Reports received, accepted, re-sent (duplicates) and "
                                     "otherwise rejected, cumulative, at most one point a "
                                     "minute while serve receives (what the dashboard draws).")
    tr.add_argument("name")
    state_arg(tr)
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=run_trend)

    ls = csub.add_parser("list", help="campaigns in the state file")
    state_arg(ls)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)

    p2 = csub.add_parser("phase2", help="sign and publish the phase-2 message (candidates or model)")
    p2.add_argument("name")
    state_arg(p2)
    broker_args(p2)
    p2.add_argument("--candidates", default=None,
                    help="comma-separated item keys, or a file with one item per line")
    p2.add_argument("--model-file", default=None, help="LDPLCM model JSON")
    p2.add_argument("--signing-key", dest="signing_key_file", default=None, metavar="FILE",
                    help="default: the one the campaign was made with")
    p2.set_defaults(func=run_phase2)

    ad = csub.add_parser(
        "advance", help="two-phase protocol: compute, sign and publish the phase-2 message",
        description="From the committed phase-1 sketch: LDPMiner's k_max candidates or LDPLCM's "
                    "trained frequency model, signed and retained on ldp/NAME/phase2; the "
                    "campaign then accepts phase-2 reports. svim tests whether phase 1 separates "
                    "the head and otherwise publishes \"fallback\": true (its flat branch, spec "
                    "§5.4).")
    ad.add_argument("name")
    state_arg(ad)
    broker_args(ad)
    ad.add_argument("--signing-key", dest="signing_key_file", default=None, metavar="FILE",
                    help="default: the one the campaign was made with")
    ad.add_argument("--json", action="store_true")
    ad.set_defaults(func=run_advance)

    campaign_keys.register(csub)
    c.set_defaults(func=lambda args: c.print_help() or 2)


def _record(store, name: str, action: str, detail: str = None):
    """This command's change of campaign `name`, for serve's log (service/campaigns/events.py)."""
    from ..service.campaigns import events as lifecycle
    lifecycle.record(store, name, action, lifecycle.cli_origin(), detail)


def _create_protocol(args):
    from ..service.campaigns.protocols import create_protocol_campaign
    if args.param:
        raise ConfigError("param", "--param is for --mechanism campaigns; --protocol takes its "
                          "own options")
    options = ProtocolOptions.from_args(args)
    if args.protocol not in ("auto", "pem"):  # --fleet-size is then only the spread's
        options.fleet_size = None
    with open_store(args) as store:
        camp = create_protocol_campaign(
            store, command_broker(args, store), args.signing_key_file, args.name, args.protocol, args.epsilon,
            args.domain, options, _issuance(args, store))
        _record(store, camp.name, "create")
        return camp


def _issuance(args, store, recurrence=None):
    from ..service.campaigns.manage import Issuance
    from ..core.config import DEFAULT_DELIVERY, check_delivery, check_metric
    delivery = dict(DEFAULT_DELIVERY, ack=not args.no_ack)
    if args.retry_s is not None:
        delivery["retry_s"] = args.retry_s
        delivery["retry_max_s"] = max(delivery["retry_max_s"], args.retry_s)
    if args.retry_max_s is not None:
        delivery["retry_max_s"] = args.retry_max_s
    spread, args.spread_note = _spread(args, store)
    if spread:  # absent means 0 (spec §5.4): devices older than the field accept such configs
        delivery["spread_s"] = spread
    metric = None if args.metric is None else check_metric(args.metric)
    if recurrence is None and args.valid_days is None:
        args.valid_days = 30.0
    return Issuance(valid_days=args.valid_days, salt=args.salt,
                    delivery=check_delivery(delivery), metric=metric, recurrence=recurrence)


def _spread(args, store):
    """(delivery.spread_s, why): --spread-s, else --fleet-size (or the most devices one campaign
    of this state has had) over --drain-rate (config.default_spread_s)."""
    from ..core.config import default_spread_s
    if args.spread_s is not None:
        if args.fleet_size is not None or args.drain_rate is not None:
            raise ConfigError("spread_s", "give --spread-s, or --fleet-size/--drain-rate to derive "
                              "it, not both")
        return args.spread_s, "--spread-s"
    rate = DEFAULT_DRAIN_RATE if args.drain_rate is None else args.drain_rate
    rate_why = ("--drain-rate" if args.drain_rate is not None else
                "the conservative default; --drain-rate R sets yours")
    devices, devices_why = args.fleet_size, "--fleet-size"
    if devices is None:
        devices = max(store.devices_per_campaign().values(), default=0)
        devices_why = "the most devices one campaign of this state has had"
        if not devices:
            return 0, ("no spread: fleet size unknown (no campaign of this state has reports); "
                       "--fleet-size N spreads first publishes over N / %g s" % rate)
    spread = default_spread_s(devices, rate)
    return spread, ("%d devices (%s) at %g reports/s (%s)%s"
                    % (devices, devices_why, rate, rate_why,
                       "" if spread else ": they fit in one second"))


def run_create(args):
    from ..service.campaigns.manage import create_campaign, parse_params
    from ..service.campaigns.recurring import eps1_params
    recurrence = campaign_recurring.recurrence(args)
    if not args.mechanism and not args.protocol:  # a strings domain's default: pem (spec §3.5)
        from ..service.campaigns.pem_campaign import default_protocol
        args.protocol = default_protocol(args.domain)
    given = [name for name in ProtocolOptions.from_args(args).given() if name != "fleet_size"]
    if args.protocol and recurrence is None:
        camp = _create_protocol(args)
        return _print_created(args, camp)
    if args.protocol:  # --protocol auto --every: the planner's memoised mechanism
        mechanism, chosen = campaign_recurring.auto_mechanism(args, given, recurrence)
        args.mechanism, args.param = mechanism, ["%s=%s" % kv for kv in sorted(chosen.items())]
        args.eps1 = None  # in the chosen parameters
    elif given:
        raise ConfigError(given[0], "--%s needs --protocol" % given[0].replace("_", "-"))
    mechanisms = split_commas(args.mechanism)
    epsilons = split_commas(args.epsilon)
    if len(epsilons) != len(mechanisms):
        raise ConfigError("epsilon", "give one epsilon per phase (%d mechanisms)" % len(mechanisms))
    per_phase = [[] for _ in mechanisms]
    for item in args.param:
        head, sep, rest = item.partition(":")
        phase, pair = (int(head), rest) if sep and head.isdigit() else (1, item)
        if not 1 <= phase <= len(mechanisms):
            raise ConfigError("param", "no phase %d for %r" % (phase, item))
        per_phase[phase - 1].append(pair)
    params = [parse_params(p) for p in per_phase]
    if recurrence is not None:
        params[0] = eps1_params(params[0], args.eps1)
    with open_store(args) as store:
        camp = create_campaign(store, command_broker(args, store), args.signing_key_file, args.name, mechanisms,
                               epsilons, args.domain, params=params,
                               issue=_issuance(args, store, recurrence))
        _record(store, camp.name, "create")
    return _print_created(args, camp)


def _print_created(args, camp):
    spread = "delivery.spread_s %d: %s" % (camp.config["delivery"].get("spread_s", 0),
                                           args.spread_note)
    if args.json:
        out = {"campaign": camp.name, "campaign_id": camp.campaign_id, "config": camp.config,
               "spread": spread}
        if camp.protocol:
            out["protocol"] = camp.protocol
        print(json.dumps(out, sort_keys=True))
    else:
        phases = ", ".join("phase %d %s eps %g %s" % (p["phase"], p["mechanism"], p["eps_milli"] / 1000,
                                                      json.dumps(p["params"], sort_keys=True))
                           for p in camp.config["phases"])
        print("created campaign %s (id %d): %s; config retained on ldp/%s/config"
              % (camp.name, camp.campaign_id, phases, camp.name))
        if camp.config.get("metric"):
            print("metric %s: devices providing it take part" % camp.config["metric"])
        if camp.recurring:
            print(campaign_recurring.describe(camp))
        if camp.protocol:
            print("protocol %s" % json.dumps(camp.protocol, sort_keys=True))
        print(spread)
    return 0


def run_status(args):
    from ..service.campaigns.manage import campaign_status
    from ..service.campaigns.coverage import fleet_of
    fleet = fleet_of(args.devices_file)
    with open_store(args, create=False) as store:
        status = campaign_status(store, args.name, confidence=args.confidence, fleet=fleet)
    if args.json:
        print(json.dumps(status, sort_keys=True))
        return 0
    if status["domain"].get("range"):
        print("campaign %s (id %d): %s, phase %d, numeric domain %s"
              % (status["campaign"], status["campaign_id"], status["state"], status["phase"],
                 status["domain"]["range"]))
    else:
        print("campaign %s (id %d): %s, phase %d, domain %s of %d items"
              % (status["campaign"], status["campaign_id"], status["state"], status["phase"],
                 status["domain"]["type"], status["domain"]["size"]))
    if status.get("protocol"):
        print("protocol %s" % json.dumps(status["protocol"], sort_keys=True))
    if status.get("metric"):
        print("metric %s" % status["metric"])
    if status.get("schedule"):
        print(campaign_recurring.status_lines(status["schedule"]))
    if status.get("branch"):
        print("branch %s (svim phase 2%s)" % (status["branch"], ": the config's fallback over the "
              "whole domain" if status["branch"] == "flat" else ": the candidates"))
    resent = status["rejected"].get("duplicate", 0)
    print("received %d  accepted %d  rejected %d  re-sent %d (duplicates of reports already "
          "counted)" % (status["received"], status["accepted"], status["rejected_total"] - resent,
                        resent))
    for reason, count in status["rejected"].items():
        if reason != "duplicate":
            print("  rejected %-16s %d" % (reason, count))
    from .devices import coverage_line
    print(coverage_line(status["coverage"]))
    drops = status.get("broker_drops")
    if drops and drops["seen_by_serve"]:
        print("WARNING: the broker dropped %d messages while serve watched (its counter: %d)%s"
              % (drops["seen_by_serve"], drops["broker_dropped"],
                 "; devices re-send unacknowledged reports" if (status.get("delivery") or {}).get("ack")
                 else "; this campaign has no acknowledgements: those reports are LOST"))
    if status.get("dedupe_purged"):
        purged = status["dedupe_purged"]
        print("dedupe keys purged at %s (%d keys)" % (
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(purged["purged_at"])), purged["keys"]))
    for ph in status["phases"]:
        line = "phase %d %s eps %g: %d reports" % (ph["phase"], ph["mechanism"], ph["epsilon"],
                                                   ph["reports"])
        if not ph["open"]:
            line += " (not open: waiting for its phase-2 message)"
        err = ph.get("expected_error") or {}
        if err.get("mean_ci_halfwidth") is not None:
            line += "; mean +/- %.4g (%g%% interval, worst-case variance)" % (
                err["mean_ci_halfwidth"], 100 * err["confidence"])
        elif err.get("bins"):
            line += "; histogram over %d bins (EMS)" % err["bins"]
        if err.get("stddev_fraction") is not None:
            line += "; per-item stddev %.3g of n (%.1f reports), %g%% interval +/- %.1f reports" % (
                err["stddev_fraction"], err["stddev_count"], 100 * err["confidence"],
                err["ci_halfwidth_count"])
        print(line)
    return 0


def run_trend(args):
    from ..service.state.history import trend
    with open_store(args, create=False) as store:
        out = trend(store, args.name)
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print("%-20s %12s %12s %12s %12s" % ("time (UTC)", "received", "accepted", "duplicates",
                                         "rejected"))
    for p in out["points"]:
        print("%-20s %12d %12d %12d %12d" % (time.strftime("%Y-%m-%d %H:%M:%S",
                                                           time.gmtime(p["at"])),
                                             p["received"], p["accepted"], p["duplicates"],
                                             p["rejected"]))
    return 0


def run_purge(args):
    from ..service.state import retention
    if (args.name is None) == (args.closed_before is None):
        raise ConfigError("name", "give a campaign NAME or --closed-before DAYS (not both)")
    if args.closed_before is not None and args.closed_before < 0:
        raise ConfigError("closed_before", "--closed-before must be >= 0 days")
    with open_store(args, create=False) as store:
        if args.name is not None:
            purged = {args.name: retention.purge(store, args.name)}
        else:
            purged = retention.purge_closed_before(store, args.closed_before)
    if args.json:
        print(json.dumps({"purged": purged}, sort_keys=True))
    elif not purged:
        print("nothing to purge")
    for name, count in ({} if args.json else purged).items():
        print("campaign %s: dropped %d dedupe keys (sketches and counters kept)" % (name, count))
    return 0


def run_close(args):
    from ..service.campaigns.manage import close_campaign
    with open_store(args, create=False) as store:
        broker = command_broker(args, store)
        camp = close_campaign(store, args.name, broker=broker, signing_key_file=args.signing_key_file)
        _record(store, camp.name, "close")
    if broker is None:
        print("campaign %s closed (devices were not told: give --broker to publish the signed "
              "close)" % camp.name)
    else:
        print("campaign %s closed; signed close retained on ldp/%s/config" % (camp.name, camp.name))
    return 0


def run_list(args):
    from ..service.campaigns.manage import campaign_rows
    with open_store(args, create=False) as store:
        rows = campaign_rows(store)
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    print("%-24s %10s %-7s %5s %-14s %10s %10s %s" % ("campaign", "id", "state", "phase",
                                                      "mechanisms", "accepted", "rejected", "round"))
    for r in rows:
        rnd = "-" if "rounds" not in r else "%s/%d" % (r["round"] or "-", r["rounds"])
        print("%-24s %10d %-7s %5d %-14s %10d %10d %s" % (r["campaign"], r["campaign_id"], r["state"],
                                                          r["phase"], ",".join(r["mechanisms"]),
                                                          r["accepted"], r["rejected"], rnd))
    return 0


def _items(text, domain_type=None):
    """Comma-separated items or a file of lines; ints where the domain is int."""
    from ..service.campaigns.estimates import parse_items
    return parse_items(item_list(text), domain_type)


def run_phase2(args):
    from ..core import protocol
    from ..service.campaigns.manage import publish_phase2
    model = None
    if args.model_file:
        with open(args.model_file, encoding="utf-8") as f:
            try:
                model = json.load(f)
            except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
                raise ConfigError("model_file", "%s is not a JSON model: %s"
                                  % (args.model_file, exc)) from None
    with open_store(args, create=False) as store:
        candidates = None
        if args.candidates:
            camp = store.require_campaign(args.name)
            candidates = [protocol.item_key(i)
                          for i in _items(args.candidates, camp.config["domain"]["type"])]
        moving = store.require_campaign(args.name).phase < 2
        camp = publish_phase2(store, command_broker(args, store), args.name, candidates=candidates, model=model,
                              signing_key_file=args.signing_key_file)
        if moving:
            _record(store, camp.name, "phase2")
    print("campaign %s is in phase %d; phase-2 message retained on ldp/%s/phase2"
          % (camp.name, camp.phase, camp.name))
    return 0


def _svim_z() -> float:
    from ..core.protocols.svim import SEPARATION_Z
    return SEPARATION_Z


def run_advance(args):
    from ..service.campaigns.protocols import advance_campaign
    with open_store(args, create=False) as store:
        out = advance_campaign(store, command_broker(args, store), args.name, signing_key_file=args.signing_key_file)
        from ..service.campaigns import events as lifecycle
        _record(store, args.name, "advance", lifecycle.advance_detail(out))
    if args.json:
        print(json.dumps(out, sort_keys=True))
    elif out.get("branch") == "flat":
        print("campaign %s is in phase 2: svim flat branch (phase 1 does not separate the head: "
              "z = %.3g <= %g from %d phase-1 reports); phase 2 runs the config's fallback over "
              "the whole domain; phase-2 message (fallback) retained on ldp/%s/phase2" % (
                  args.name, out["separation"]["z"], _svim_z(), out["phase1_reports"], args.name))
    elif "candidates" in out:  # pem: the strings (its message carries their keys, spec §3.5)
        shown = [repr(s) for s in out.get("candidate_strings", out["candidates"])]
        print("campaign %s is in phase 2: %d candidates from %d phase-1 reports (%s); phase-2 "
              "message retained on ldp/%s/phase2" % (
                  args.name, len(out["candidates"]), out["phase1_reports"],
                  ",".join(shown[:20])
                  + (",..." if len(out["candidates"]) > 20 else ""), args.name))
    else:
        print("campaign %s is in phase 2: model of %d nodes from %d phase-1 reports, %d "
              "high-frequent items, measured theta %.4g; phase-2 message retained on ldp/%s/phase2"
              % (args.name, out["model_nodes"], out["phase1_reports"], out["high_items"],
                 out["theta_measured"], args.name))
    return 0
