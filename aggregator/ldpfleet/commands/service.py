"""`ldpfleet campaign create|status|close|list|phase2|advance` (and `keygen|rotate-keys`,
commands/keys.py; `serve` and `broker-check`: commands/serve.py) and
`ldpfleet estimate`: the aggregator service (ldpfleet.service).

Two-phase protocols: `campaign create --protocol ldpminer-rappor|ldpminer-sh|ldpminer-sh-opt|ldplcm ...`,
devices report phase 1, `campaign advance NAME` publishes the phase-2 message computed from
the phase-1 sketch, devices report phase 2, `estimate NAME` prints the protocol's answer.

Exit codes: 0 ok, 2 bad input (typed ldpfleet error, printed with its field), 3 broker
unreachable.
"""
import json
import sys
import time

from ..core.config import DEFAULT_DRAIN_RATE
from ..core.errors import ConfigError
from ..core.protocols.options import ProtocolOptions, add_protocol_arguments
from . import keys, serve
from . import add_password_args, resolve_password


def _broker_args(p, required=True):
    p.add_argument("--broker", required=required, help="mqtt://HOST:PORT or mqtts://HOST:PORT")
    p.add_argument("--username", default=None, help="broker login")
    add_password_args(p)
    p.add_argument("--tls", action="store_true", help="TLS (implied by mqtts:// or --cafile)")
    p.add_argument("--cafile", default=None, help="CA certificate(s) to verify the broker")


def _command_broker(args, store):
    """The broker settings of a campaign command, refused when they log in as `serve` does: a
    broker that binds client ids to logins (broker-config's) would hand serve's session, and
    the reports queued in it, to this command's connection."""
    broker = _broker(args)
    serve_login = store.meta("serve.username")
    if broker is not None and broker.username and broker.username == serve_login:
        raise ConfigError("username", "%s is the login `serve` uses for this state; run campaign "
                          "commands with another login (broker-config's admin login, e.g. %s-admin)"
                          " so they never take over serve's session" % (broker.username, broker.username))
    return broker


def _state_arg(p):
    p.add_argument("--state", required=True,
                   help="state: a SQLite file (sqlite:///relative/path, sqlite:////absolute/path or a "
                        "path) or a PostgreSQL database (postgresql://USER[:PASSWORD]@HOST[:PORT]/DB; "
                        "the password better in PGPASSWORD or ~/.pgpass)")
    p.add_argument("--dedupe-key", default=None, metavar="FILE",
                   help="the root key of the dedupe keys (64 hex digits), kept out of the state "
                        "so a copy of the state links no device across campaigns. Default for a "
                        "SQLite state: STATEFILE.dedupe-key, made on first use; a PostgreSQL "
                        "state needs it, the same file for every worker and command (made on "
                        "first use if missing; or `openssl rand -hex 32 > FILE`)")


def open_store(args, create: bool = True):
    """The state of a command (`--state`, `--dedupe-key`)."""
    from ..service.state.store import Store
    return Store(args.state, create=create, dedupe_key=getattr(args, "dedupe_key", None))


def _broker(args):
    from ..mqtt.client import BrokerSettings
    if getattr(args, "broker", None) is None:
        return None
    return BrokerSettings.from_url(args.broker, username=args.username,
                                   password=resolve_password(args),
                                   tls=args.tls, cafile=args.cafile)


def register(subparsers):
    serve.register(subparsers, _broker_args, _state_arg)

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
                    "ldplcm (LDPLCM learned sketch: "
                    "[--sample-rate R] [--theta T] [--sketch-k K --sketch-m M]); then `campaign "
                    "advance`. Hand-made two-phase campaigns: --mechanism sh,srappor --epsilon "
                    "1,3 and phase-2 parameters as --param 2:NAME=VALUE.")
    _broker_args(cr)
    _state_arg(cr)
    cr.add_argument("--signing-key", dest="signing_key_file", required=True, metavar="FILE",
                    help="Ed25519 private key from `campaign keygen FILE` (devices trust FILE.pub)")
    cr.add_argument("--name", required=True)
    kind = cr.add_mutually_exclusive_group(required=True)
    kind.add_argument("--mechanism", help="grr, olh, flh, oue, cms, hcms, sh, ... "
                      "(comma-separated for two phases)")
    kind.add_argument("--protocol", choices=("ldpminer-rappor", "ldpminer-sh", "ldpminer-sh-opt",
                                             "svim", "ldplcm", "auto"),
                      help="a two-phase protocol (see above)")
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
                    help="N or 0-M (integer items) or a file with one string item per line")
    cr.add_argument("--param", action="append", default=[], metavar="[PHASE:]K=V",
                    help="mechanism parameter, e.g. g=8 or 2:kc=16 (repeatable)")
    cr.add_argument("--valid-days", type=float, default=30.0)
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
    cr.add_argument("--json", action="store_true")
    cr.set_defaults(func=run_create)

    st = csub.add_parser("status", help="counters by reason and expected error of a campaign")
    st.add_argument("name")
    _state_arg(st)
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
    _state_arg(cl)
    _broker_args(cl, required=False)
    cl.add_argument("--signing-key", dest="signing_key_file", default=None, metavar="FILE",
                    help="key that signs the close (default: the one the campaign was made with)")
    cl.set_defaults(func=run_close)

    pu = csub.add_parser(
        "purge", help="drop the dedupe keys of closed campaigns (retention; sketches stay)",
        description="A closed campaign rejects every report, so its dedupe keys (keyed hashes "
                    "of device ids) protect nothing any more: purge drops them; estimates and "
                    "counters are unchanged and `campaign status` shows when it happened.")
    pu.add_argument("name", nargs="?", default=None, help="a closed campaign")
    _state_arg(pu)
    pu.add_argument("--closed-before", type=float, default=None, metavar="DAYS",
                    help="instead of NAME: every campaign closed more than DAYS days ago")
    pu.add_argument("--json", action="store_true")
    pu.set_defaults(func=run_purge)

    tr = csub.add_parser("trend", help="a campaign's counters over time (one point a minute)",
                         description="Reports received, accepted, re-sent (duplicates) and "
                                     "otherwise rejected, cumulative, at most one point a "
                                     "minute while serve receives (what the dashboard draws).")
    tr.add_argument("name")
    _state_arg(tr)
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=run_trend)

    ls = csub.add_parser("list", help="campaigns in the state file")
    _state_arg(ls)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)

    p2 = csub.add_parser("phase2", help="sign and publish the phase-2 message (candidates or model)")
    p2.add_argument("name")
    _state_arg(p2)
    _broker_args(p2)
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
    _state_arg(ad)
    _broker_args(ad)
    ad.add_argument("--signing-key", dest="signing_key_file", default=None, metavar="FILE",
                    help="default: the one the campaign was made with")
    ad.add_argument("--json", action="store_true")
    ad.set_defaults(func=run_advance)

    keys.register(csub, _broker_args, _state_arg)
    c.set_defaults(func=lambda args: c.print_help() or 2)

    e = subparsers.add_parser(
        "estimate", help="frequency estimates with confidence intervals",
        description="A two-phase protocol campaign in phase 2 prints the protocol's answer "
                    "(LDPMiner: top-k with frequencies; LDPLCM: every item's frequency and "
                    "whether the model calls it high-frequent; --top limits it); --phase N "
                    "gives one phase's raw estimates instead.")
    e.add_argument("name")
    _state_arg(e)
    e.add_argument("--phase", type=int, default=None, help="default: the campaign's current phase")
    e.add_argument("--post", default=None,
                   help="consistency post-processing (ldpfleet.core.post.METHODS) of one phase's "
                        "estimates; `none` for none (clears a config file's [estimate] post); a "
                        "two-phase protocol's answer ignores it with a warning")
    e.add_argument("--post-opt", action="append", default=[], metavar="K=V",
                   help="option of the post-processing method (repeatable)")
    e.add_argument("--top", type=int, default=None, help="only the K largest")
    e.add_argument("--threshold", default=None,
                   help="'auto': only the rows that stand out of the noise (at the --fdr "
                        "false-discovery rate), or a fraction of the reports")
    e.add_argument("--fdr", type=float, default=0.05, metavar="LEVEL",
                   help="false-discovery rate of a list: rows that do not stand out of the "
                        "noise of all the estimated items at this level are flagged `noise` "
                        "(Benjamini-Hochberg, or -Yekutieli where the estimates may depend on "
                        "each other; default 0.05)")
    e.add_argument("--confidence", type=float, default=0.95)
    e.add_argument("--items", default=None,
                   help="estimate only these items: comma-separated, or a file with one per line")
    e.add_argument("--subset", default=None,
                   help="set-value query: the fraction of users whose item is in this set "
                        "(comma-separated, or a file with one per line)")
    fmt = e.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    e.set_defaults(func=run_estimate)


def _record(store, name: str, action: str, detail: str = None):
    """This command's change of campaign `name`, for serve's log (service/campaigns/events.py)."""
    from ..service.campaigns import events as lifecycle
    lifecycle.record(store, name, action, lifecycle.cli_origin(), detail)


def _split(text):
    return [t.strip() for t in str(text).split(",") if t.strip()]


def _create_protocol(args):
    from ..service.campaigns.protocols import create_protocol_campaign
    if args.param:
        raise ConfigError("param", "--param is for --mechanism campaigns; --protocol takes its "
                          "own options")
    options = ProtocolOptions.from_args(args)
    if args.protocol != "auto":  # --fleet-size is then only the spread's
        options.fleet_size = None
    with open_store(args) as store:
        camp = create_protocol_campaign(
            store, _command_broker(args, store), args.signing_key_file, args.name, args.protocol, args.epsilon,
            args.domain, options, _issuance(args, store))
        _record(store, camp.name, "create")
        return camp


def _issuance(args, store):
    from ..service.campaigns.manage import Issuance
    from ..core.config import DEFAULT_DELIVERY, check_delivery
    delivery = dict(DEFAULT_DELIVERY, ack=not args.no_ack)
    if args.retry_s is not None:
        delivery["retry_s"] = args.retry_s
        delivery["retry_max_s"] = max(delivery["retry_max_s"], args.retry_s)
    if args.retry_max_s is not None:
        delivery["retry_max_s"] = args.retry_max_s
    spread, args.spread_note = _spread(args, store)
    if spread:  # absent means 0 (spec §5.4): devices older than the field accept such configs
        delivery["spread_s"] = spread
    return Issuance(valid_days=args.valid_days, salt=args.salt,
                    delivery=check_delivery(delivery))


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
    if args.protocol:
        camp = _create_protocol(args)
        return _print_created(args, camp)
    given = [name for name in ProtocolOptions.from_args(args).given() if name != "fleet_size"]
    if given:
        raise ConfigError(given[0], "--%s needs --protocol" % given[0].replace("_", "-"))
    mechanisms = _split(args.mechanism)
    epsilons = _split(args.epsilon)
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
    with open_store(args) as store:
        camp = create_campaign(store, _command_broker(args, store), args.signing_key_file, args.name, mechanisms,
                               epsilons, args.domain, params=params, issue=_issuance(args, store))
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
    print("campaign %s (id %d): %s, phase %d, domain %s of %d items"
          % (status["campaign"], status["campaign_id"], status["state"], status["phase"],
             status["domain"]["type"], status["domain"]["size"]))
    if status.get("protocol"):
        print("protocol %s" % json.dumps(status["protocol"], sort_keys=True))
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
        broker = _command_broker(args, store)
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
    print("%-24s %10s %-7s %5s %-14s %10s %10s" % ("campaign", "id", "state", "phase", "mechanisms",
                                                   "accepted", "rejected"))
    for r in rows:
        print("%-24s %10d %-7s %5d %-14s %10d %10d" % (r["campaign"], r["campaign_id"], r["state"],
                                                       r["phase"], ",".join(r["mechanisms"]),
                                                       r["accepted"], r["rejected"]))
    return 0


def _items(text, domain_type=None):
    """Comma-separated items or a file of lines; ints where the domain is int."""
    from ..service.campaigns.estimates import parse_items
    return parse_items(_item_list(text), domain_type)


def run_phase2(args):
    from ..core import protocol
    from ..service.campaigns.manage import publish_phase2
    model = None
    if args.model_file:
        with open(args.model_file) as f:
            model = json.load(f)
    with open_store(args, create=False) as store:
        candidates = None
        if args.candidates:
            camp = store.require_campaign(args.name)
            candidates = [protocol.item_key(i)
                          for i in _items(args.candidates, camp.config["domain"]["type"])]
        moving = store.require_campaign(args.name).phase < 2
        camp = publish_phase2(store, _command_broker(args, store), args.name, candidates=candidates, model=model,
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
        out = advance_campaign(store, _command_broker(args, store), args.name, signing_key_file=args.signing_key_file)
        from ..service.campaigns import events as lifecycle
        _record(store, args.name, "advance", lifecycle.advance_detail(out))
    if args.json:
        print(json.dumps(out, sort_keys=True))
    elif out.get("branch") == "flat":
        print("campaign %s is in phase 2: svim flat branch (phase 1 does not separate the head: "
              "z = %.3g <= %g from %d phase-1 reports); phase 2 runs the config's fallback over "
              "the whole domain; phase-2 message (fallback) retained on ldp/%s/phase2" % (
                  args.name, out["separation"]["z"], _svim_z(), out["phase1_reports"], args.name))
    elif "candidates" in out:
        print("campaign %s is in phase 2: %d candidates from %d phase-1 reports (%s); phase-2 "
              "message retained on ldp/%s/phase2" % (
                  args.name, len(out["candidates"]), out["phase1_reports"],
                  ",".join(str(c) for c in out["candidates"][:20])
                  + (",..." if len(out["candidates"]) > 20 else ""), args.name))
    else:
        print("campaign %s is in phase 2: model of %d nodes from %d phase-1 reports, %d "
              "high-frequent items, measured theta %.4g; phase-2 message retained on ldp/%s/phase2"
              % (args.name, out["model_nodes"], out["phase1_reports"], out["high_items"],
                 out["theta_measured"], args.name))
    return 0


def run_estimate(args):
    from ..service.campaigns.manage import parse_params
    from ..service.campaigns.estimates import EstimateQuery, parse_threshold
    from ..service.campaigns.query import estimate
    from ..service.campaigns.significance import check_level
    parse_threshold(args.threshold)
    check_level(args.fdr)
    if args.top is not None and args.top < 1:
        raise ConfigError("top", "must be at least 1, got %d" % args.top)
    if args.post_opt and args.post in (None, "", "none"):
        raise ConfigError("post_opt", "options of a post-processing method need --post METHOD")
    with open_store(args, create=False) as store:
        result = estimate(store, args.name, EstimateQuery(
            phase=args.phase, post=args.post, post_opts=parse_params(args.post_opt),
            top=args.top, threshold=args.threshold, confidence=args.confidence,
            items=_item_list(args.items), subset=_item_list(args.subset), fdr=args.fdr))
    return _print_result(args, result)


def _item_list(text):
    """Comma-separated items, or a file with one per line (as strings; None stays None)."""
    import os
    if text is None:
        return None
    if os.path.isfile(text):
        with open(text, encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f if line.strip()]
    return _split(text)


def _print_result(args, result):
    """An estimate table or a protocol answer as JSON, CSV or text; its warnings on stderr."""
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
    elif args.csv:
        result.to_csv(sys.stdout)
    else:
        print(result.to_text())
    for warning in result.warnings:
        print("ldpfleet: warning: %s" % warning, file=sys.stderr)
    return 0
