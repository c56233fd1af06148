"""The simulated fleet of a recurring campaign (protocol_spec/v2 §3.4): `ldpfleet fleet` against
a config with a `schedule`.

Each simulated device enrols once, at the first round the run takes part in: its permanent
state is drawn as a device draws it (§3.2: `enrol_words` random words through the shipped
enrolment kernel, `enrol_batch`), from a numpy Generator seeded from OS entropy (a simulator:
`--seed` makes a run reproducible for tests). Then, for every round that opens while the run
lasts (or `--rounds-to-run N` of them), each device's value evolves -- with probability
`change_rate` it draws a new value from the distribution (eval.longitudinal_sim.evolve, the
rule the in-process simulation uses) -- and the device makes the round's report from its
state with a fresh nonce (one per device and round), adds the round header
(core.schedule.with_round) and publishes it on ldp/<campaign>/r/<login>/<id> on its own
schedule, re-sending until acknowledged (schedule.py, acks.py: the one-shot fleet's delivery)
or until the round closes (the next round's opening or not_after: spec §3.4's rule for
re-sends). The bytes are what a device would send: same header, same body kernels, same
round header; only where the randomness comes from differs.

Per round the run reports how many reports were published and acknowledged, and the true
frequencies of the values the devices held (`RoundResult.true_counts`), so that an
end-to-end test can hold the per-round estimates against the truth.

A re-run against the same campaign uses the same device ids (sim<campaign id>-<i>, or
`--id-prefix`) but enrols them again: within a round a device already seen reports a second
nonce, which the aggregator counts as `second_report` (a device that lost its ledger).
"""
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from ..core import config as campaign_config
from ..core import schedule as rounds
from ..core.errors import ConfigError
from ..core.protocols.ldplcm import reports_in_phase
from ..eval.longitudinal_sim import evolve
from ..mqtt import client as mqtt
from .acks import AckTracker
from .bulk import BulkPublisher
from .campaign import fetch_campaign, phase_mechanism
from .items import draw_indices
from .schedule import DeviceSchedule, publish_on_schedule

WAIT_STEP = 1.0
"""Seconds between clock checks while waiting for the next round to open."""


class RecurringDevices:
    """`n` simulated devices of one memoised mechanism `mech`: enrolled once (`enrol`), their
    values drawn from `dist` (items.ItemDistribution or numeric.NumericDistribution) and
    evolved once per round (`advance`), one report per device and round (`reports`). All
    randomness from `rng` (module docstring)."""

    def __init__(self, mech, dist, n: int, change_rate: float, rng: np.random.Generator):
        if not getattr(mech, "enrol_batch", None) or mech.name not in rounds.MEMOISED:
            raise ConfigError("phases.mechanism", "a recurring campaign's fleet needs a memoised "
                              "mechanism, got %s" % mech.name)
        if not (isinstance(change_rate, (int, float)) and 0.0 <= change_rate <= 1.0):
            raise ConfigError("change_rate", "must be in [0, 1], got %r" % (change_rate,))
        if n < 0:
            raise ConfigError("devices", "must be >= 0, got %d" % n)
        self.mech, self.dist, self.n = mech, dist, n
        self.change_rate = float(change_rate)
        self.rng = rng
        self.states = None
        self.values = None
        """Every device's current value: item indices, or readings for a numeric domain."""
        self.redrawn = np.zeros(0, np.int64)
        self.changed = 0

    def enrol(self):
        """Every device's permanent state (n, state_size), once."""
        if self.states is None:
            self.states = self.mech.enrol_batch(self.n, self.rng)
        return self.states

    def _draw(self, k: int, rng):
        return draw_indices(k, self.dist, rng)

    def advance(self):
        """The values of the next round: the first round's drawn, later ones evolved."""
        if self.values is None:
            self.values = self._draw(self.n, self.rng)
            self.redrawn = np.arange(self.n)
            self.changed = self.n
            return self.values
        before = self.values
        self.values, self.redrawn = evolve(before, self.change_rate, self._draw, self.rng)
        self.changed = int(np.count_nonzero(self.keys(before) != self.keys()))
        return self.values

    def keys(self, values=None) -> np.ndarray:
        """What the report kernel takes: item keys, or a numeric domain's grid points."""
        values = self.values if values is None else values
        if getattr(self.dist, "numeric", False):
            return np.ascontiguousarray(self.dist.grid(values))
        return np.ascontiguousarray(self.dist.keys[values])

    def true_counts(self, active=None) -> dict:
        """{item: devices holding it} this round (of the `active` fleet indices)."""
        counts = {}
        values = self.values if active is None else self.values[active]
        self.dist.add_counts(counts, values)
        return counts

    def reports(self, r: int) -> np.ndarray:
        """(n, 16 + body) round-r reports: the state's report with a fresh nonce per device
        (this round's), in the round header's form (core.schedule.with_round)."""
        self.enrol()
        plain = self.mech.report_batch(self.keys(), self.states, self.rng)
        plain[:, 8:12] = self.rng.integers(0, 1 << 32, self.n, dtype=np.uint64).astype(
            "<u4").view(np.uint8).reshape(self.n, 4)
        size = plain.shape[1]
        blob = plain.tobytes()
        out = b"".join(rounds.with_round(blob[i * size:(i + 1) * size], r) for i in range(self.n))
        return np.frombuffer(out, np.uint8).reshape(self.n, size + 4).copy()


@dataclass
class RoundResult:
    round: int
    of: int = 0
    """The campaign's number of rounds R."""
    published: int = 0
    """Reports whose first publish the broker acknowledged (PUBACK)."""
    acknowledged: int = None
    """End-to-end acknowledgements (delivery.ack), else None."""
    unacknowledged: int = None
    resent: int = 0
    ack_status: dict = None
    """The acknowledgements' statuses (accepted / duplicate / rejected), with delivery.ack."""
    redrawn: int = 0
    """Devices that drew a new value this round (the first round: every device)."""
    changed: int = 0
    """Of them, those whose reported key (grid point) differs from the previous round's."""
    true_counts: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self, detail: bool = True) -> dict:
        out = {"round": self.round, "published": self.published,
               "acknowledged": self.acknowledged, "unacknowledged": self.unacknowledged,
               "resent": self.resent, "ack_status": self.ack_status,
               "redrawn": self.redrawn, "changed": self.changed,
               "seconds": round(self.seconds, 3)}
        if detail:
            out["true_counts"] = {str(k): int(v) for k, v in self.true_counts.items()}
        return out

    def line(self) -> str:
        acks = "" if self.acknowledged is None else (
            ", acknowledged %d, unacknowledged %d (%d re-sends)"
            % (self.acknowledged, self.unacknowledged, self.resent))
        top = sorted(self.true_counts.items(), key=lambda kv: -kv[1])[:5]
        return ("round %d/%d: published %d reports%s; %d devices drew a new value (%d changed); "
                "most common true values: %s; %.1f s" % (
                    self.round, self.of, self.published, acks, self.redrawn, self.changed,
                    ", ".join("%s=%d" % kv for kv in top) or "none", self.seconds))


@dataclass
class RecurringResult:
    campaign: str
    campaign_id: int
    mechanism: str
    rounds_total: int
    devices: int
    change_rate: float
    seed: int = None
    """None: the run drew from OS entropy (not reproducible)."""
    device_prefix: str = ""
    rounds: list = field(default_factory=list)
    stopped: str = ""
    """Why the run ended: rounds-to-run done, the campaign's last round, a close, ..."""
    seconds: float = 0.0
    failed: int = 0
    reconnects: int = 0

    @property
    def acks(self):
        """The one-shot FleetResult's `acks` shape (the CLI's exit code reads it)."""
        if not self.rounds or self.rounds[0].acknowledged is None:
            return None
        return {"acknowledged": sum(r.acknowledged for r in self.rounds),
                "unacknowledged": sum(r.unacknowledged for r in self.rounds),
                "resent": sum(r.resent for r in self.rounds)}

    def truth(self) -> dict:
        """{round: {item: count}} (the `--truth FILE` document; keys as strings)."""
        return {str(r.round): {str(k): int(v) for k, v in r.true_counts.items()}
                for r in self.rounds}

    def to_json(self, detail: bool = False) -> dict:
        return {"campaign": self.campaign, "campaign_id": self.campaign_id,
                "mechanism": self.mechanism, "recurring": True,
                "rounds_total": self.rounds_total, "devices": self.devices,
                "change_rate": self.change_rate, "seed": self.seed,
                "device_prefix": self.device_prefix, "stopped": self.stopped,
                "rounds": [r.to_json(detail) for r in self.rounds], "acks": self.acks,
                "failed": self.failed, "reconnects": self.reconnects,
                "seconds": round(self.seconds, 3)}

    def summary(self, per_round: bool = False) -> str:
        """One line (the CLI prints each round's line as it ends: `on_round`); `per_round`
        adds them."""
        lines = ["campaign %s (%s, recurring, %d rounds): %d simulated devices (%s-<i>), "
                 "change rate %g, %d round(s) run; %s"
                 % (self.campaign, self.mechanism, self.rounds_total, self.devices,
                    self.device_prefix, self.change_rate, len(self.rounds), self.stopped)]
        if per_round:
            lines += [r.line() for r in self.rounds]
        acks = self.acks
        if acks is not None and acks["unacknowledged"]:
            lines.append("WARNING: %d reports were never acknowledged by the aggregator within "
                         "their round (is serve running? see `ldpfleet broker-check`)"
                         % acks["unacknowledged"])
        return "\n".join(lines)


def _next_round(doc: dict, last, now: float):
    """The round to run next: the one open at `now` if not run yet, else the first to open
    later; None when the campaign has no round left."""
    r = rounds.round_at(doc, int(now))
    if r is not None and r != last:
        return r
    if r is not None:
        nxt = r + 1
    elif last is not None:
        nxt = last + 1
    elif now < doc["schedule"]["start"]:
        nxt = 1
    else:
        return None
    if nxt > rounds.round_count(doc) or rounds.round_window(doc, nxt)[0] >= doc["not_after"]:
        return None
    return nxt


def run_recurring(broker, view, trusted_keys, opts, dist, on_round=None) -> RecurringResult:
    """Run the simulated fleet of the recurring campaign `view` (module docstring). `opts`:
    fleet.FleetOptions (devices, seed, id_prefix, change_rate, rounds_to_run, ack_wait,
    max_inflight, rate, ack keys, status); `on_round(RoundResult)` after each round."""
    broker = mqtt.as_settings(broker)
    doc = view.config
    if opts.micropython or opts.c_clients:
        raise ConfigError("micropython", "a recurring campaign's fleet runs simulated devices "
                          "only: start MicroPython agents and C clients (--metric) on their own")
    if opts.rounds_to_run is not None and opts.rounds_to_run < 1:
        raise ConfigError("rounds_to_run", "must be >= 1, got %r" % opts.rounds_to_run)
    mech = phase_mechanism(view)
    rng = np.random.default_rng(opts.seed)  # None: OS entropy
    prefix = opts.device_prefix(opts.seed if opts.seed is not None else int(doc["campaign_id"]))
    path_prefix = "%s/%s" % (broker.username, prefix) if broker.username else prefix
    device_ids = ["%s-%d" % (path_prefix, i) for i in range(opts.devices)]
    active = np.flatnonzero(reports_in_phase(device_ids, doc, 1))
    fleet = RecurringDevices(mech, dist, opts.devices, opts.change_rate, rng)
    total = rounds.round_count(doc)
    result = RecurringResult(view.config["campaign"], int(doc["campaign_id"]), mech.name, total,
                             opts.devices, fleet.change_rate, opts.seed, prefix)
    say = opts.status or (lambda line: None)
    t0 = time.monotonic()
    last = None
    while True:
        if opts.rounds_to_run is not None and len(result.rounds) >= opts.rounds_to_run:
            result.stopped = "ran the %d round(s) asked for" % opts.rounds_to_run
            break
        r = _next_round(doc, last, time.time())
        if r is None:
            result.stopped = ("the campaign has no round left (round %d of %d%s)"
                              % (last or 0, total, "" if last else "; it is over"))
            break
        opens, closes = rounds.round_window(doc, r)
        if time.time() < opens:
            say("waiting for round %d/%d: opens in %.1f s" % (r, total, opens - time.time()))
            while time.time() < opens:
                time.sleep(min(WAIT_STEP, max(0.0, opens - time.time())))
        if last is not None:
            stop = _still_running(broker, view, trusted_keys)
            if stop:
                result.stopped = stop
                break
        one = _run_round(broker, doc, fleet, r, closes, active, device_ids, path_prefix, opts,
                         result)
        result.rounds.append(one)
        last = r
        if on_round is not None:
            on_round(one)
    result.seconds = time.monotonic() - t0
    return result


def _still_running(broker, view, trusted_keys) -> str:
    """'' while the campaign's retained config is still this campaign's, else why not (a
    close replaces it, spec §5.4)."""
    try:
        now = fetch_campaign(broker, view.config["campaign"], trusted_keys, 1)
    except ConfigError as exc:
        return "stopped: %s" % exc
    if now.config["campaign_id"] != view.config["campaign_id"]:
        return "stopped: the campaign's config now has another id (%d)" % now.config["campaign_id"]
    return ""


def _run_round(broker, doc, fleet: RecurringDevices, r: int, closes: int, active, device_ids,
               path_prefix: str, opts, result: RecurringResult) -> RoundResult:
    t0 = time.monotonic()
    fleet.advance()
    reports = fleet.reports(r)
    one = RoundResult(r, rounds.round_count(doc), redrawn=int(fleet.redrawn.size),
                      changed=fleet.changed, true_counts=fleet.true_counts(active))
    deadline = time.monotonic() + (closes - time.time())
    campaign = doc["campaign"]
    publisher = BulkPublisher(broker, "ldpfleet-fleet-%s" % uuid.uuid4().hex[:12],
                              opts.max_inflight, opts.rate)
    tracker = None
    try:
        if campaign_config.acknowledged(doc):
            tracker = AckTracker(campaign, path_prefix, reports, active,
                                 ack_root=opts.ack_root, ack_login_key=opts.ack_login_key)
            publisher.subscribe(tracker.topic_filter, tracker.on_message)
        sched = DeviceSchedule(len(device_ids), active, doc.get("delivery"),
                               np.random.default_rng(), time.monotonic())
        topic = "ldp/%s/r/%s-" % (campaign, path_prefix)
        ack_wait = np.inf if opts.ack_wait is None else opts.ack_wait
        publish_on_schedule(publisher, sched, lambda idx: [topic + str(i) for i in idx.tolist()],
                            reports, tracker, ack_wait, opts.status, deadline=deadline)
        publisher.wait_acked(60.0)
        one.published = int(sched.active - sched.unsent)
        if tracker is not None:
            one.acknowledged = tracker.acked_count()
            one.unacknowledged = tracker.pending_count()
            one.resent = sched.resent
            one.ack_status = dict(tracker.statuses)
    finally:
        publisher.close()
    result.failed += publisher.failed
    result.reconnects += publisher.reconnects
    one.seconds = time.monotonic() - t0
    return one
