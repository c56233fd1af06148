"""`campaign create --every P [--rounds N | --until T] [--start T] [--eps1 E]`: a recurring
campaign (protocol_spec/v2 §3.4; service/campaigns/recurring.py): one signed config announces
the schedule, every round is reported and deduplicated on its own. It runs a memoised mechanism
(`--mechanism loloha|losue|lsue|lgrr|lbitmean`, or `--protocol auto`, which lets the planner
choose among them); its ε1 (one report's) defaults to ε∞/2."""
import time

from ..core.errors import ConfigError

RECURRING_OPTIONS = ("rounds", "until", "start", "eps1")


def add_recurring_arguments(cr):
    g = cr.add_argument_group("recurring campaigns (spec §3.4)")
    g.add_argument("--every", default=None, metavar="P",
                   help="a recurring campaign: one round every P (30s, 10m, 1h, 1d or seconds; "
                        "10 s to a year); needs a memoised mechanism (loloha, losue, lsue, "
                        "lgrr, lbitmean) or --protocol auto")
    g.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="with --every: N rounds (the config ends at start + N·P)")
    g.add_argument("--until", default=None, metavar="T",
                   help="with --every: rounds until T (unix seconds or ISO-8601 date/time, UTC "
                        "unless it names an offset)")
    g.add_argument("--start", default=None, metavar="T",
                   help="with --every: when round 1 opens (default: now)")
    g.add_argument("--eps1", default=None, metavar="E",
                   help="with --every: one report's epsilon in nats (ε1 < --epsilon, the "
                        "permanent response's ε∞; default ε∞/2)")


def recurrence(args):
    """The Recurrence of `--every ...`, or None; the other schedule options without --every
    are refused with their field. `--rounds`/`--until` set the config's end (a --valid-days,
    perhaps from ldpfleet.toml, then does not)."""
    from ..service.campaigns.recurring import Recurrence
    if args.every is None:
        for name in RECURRING_OPTIONS:
            if getattr(args, name) is not None:
                raise ConfigError(name, "--%s needs --every (a recurring campaign)" % name)
        return None
    return Recurrence.from_options(args.every, args.rounds, args.until, args.start)


def auto_mechanism(args, given, recurrence=None):
    """`--protocol auto --every`: (mechanism, params) the planner chooses among the memoised
    ones; `given` the protocol options on the command line (refused: they are two-phase
    protocols')."""
    from ..service.campaigns.manage import parse_domain
    from ..service.campaigns.recurring import choose_memoised
    if args.protocol != "auto":
        raise ConfigError("protocol", "a recurring campaign runs one memoised mechanism: "
                          "--mechanism loloha|losue|lsue|lgrr|lbitmean or --protocol auto, "
                          "not %s" % args.protocol)
    if given:
        raise ConfigError(given[0], "--%s is for two-phase protocols, not a recurring campaign"
                          % given[0].replace("_", "-"))
    if args.param:
        raise ConfigError("param", "--protocol auto chooses the parameters; use --mechanism "
                          "to set them")
    rounds = None
    if recurrence is not None:  # R of the config this creates (--rounds, --until or the
        from ..core import schedule  # validity window): core.schedule.round_count, its one place
        _, not_after, sched = recurrence.window(getattr(args, "valid_days", None))
        rounds = max(1, schedule.round_count({"schedule": sched, "not_after": not_after}))
    choice = choose_memoised(args.epsilon, parse_domain(args.domain), eps1=args.eps1,
                             fleet_size=args.fleet_size, rounds=rounds)
    return choice["mechanism"], choice["params"]


def describe(camp) -> str:
    """One line on a recurring campaign's schedule, or None."""
    from ..service.campaigns import rounds
    info = rounds.describe(camp)
    if info is None:
        return None
    s = info["schedule"]
    return ("recurring: %d round(s) every %d s from %d (%s); round open now: %s"
            % (info["rounds"], s["every_s"], s["start"], _utc(s["start"]),
               "none" if info["round"] is None else info["round"]))


def _utc(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

def status_lines(info: dict) -> str:
    """`campaign status` on a recurring campaign's schedule and the reports of each round
    (manage.campaign_status's `schedule`); its phase line counts the latest round's."""
    s = info["schedule"]
    lines = ["recurring: %d round(s) every %d s from %d (%s); round open now: %s (%d opened)"
             % (info["rounds"], s["every_s"], s["start"], _utc(s["start"]),
                "none" if info["round"] is None else info["round"], info["rounds_opened"])]
    lines += ["  round %d: %d reports" % (r["round"], r["reports"]) for r in info["per_round"]]
    return "\n".join(lines)
