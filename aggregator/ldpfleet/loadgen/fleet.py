"""`ldpfleet fleet`: one report per device and phase from simulated devices and, optionally,
real MicroPython and C client processes (package docstring).

The simulated fleet of a campaign is fixed: without `--seed` the seed is the campaign's id
(public, in its signed config), so a second run against the same campaign has the same device
ids and makes byte-identical reports -- the aggregator counts them as duplicates, never as new
devices -- and an shc phase 2 replays its phase 1. `--seed N` simulates another fleet."""
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..core import config as campaign_config
from ..core import schedule as rounds
from ..mqtt import client as mqtt
from ..core.errors import ConfigError
from .acks import AckTracker
from .bulk import BulkPublisher
from .campaign import fetch_campaign, phase_mechanism
from .devices import RealDevices, c_client_binary
from .recurring import run_recurring
from .items import campaign_set_size, draw_indices, item_distribution
from .schedule import DeviceSchedule, publish_on_schedule
from .simulated import simulated_device_ids, simulated_reports

ACK_TIMEOUT = 60.0
ACK_WAIT = 120.0
"""--ack-wait's default for a one-shot campaign."""
REAL_DEVICE_WAIT = 60.0
"""Seconds a real device gets to deliver, beyond the campaign's spread (and --ack-wait)."""


@dataclass
class FleetOptions:
    """What `ldpfleet fleet` runs: device counts per kind, the true-item distribution (a
    `datasets` spec or a weights file), the aggregator-side `seed` (default: the campaign's id,
    module docstring; a fixed seed re-sends byte-identical reports, which the aggregator must
    count as duplicates; a recurring campaign: OS entropy, recurring.py), the `phase` (default: the campaign's current one), device-id prefix,
    publishing window and rate, set length of set-valued phases (default the campaign's:
    `items.campaign_set_size`),
    progress bar and status lines, a kept work directory for the real devices and the C client
    binary."""

    devices: int = 1000
    micropython: int = 0
    c_clients: int = 0
    dist: str = None
    """None: zipf:1.1 (items), beta:2,5 (numeric readings)."""
    seed: int = None
    phase: int = None
    id_prefix: str = None
    max_inflight: int = 5000
    rate: float = None
    set_size: int = None
    progress: bool = False
    workdir: str = None
    c_client: str = None
    ack_wait: float = None
    """Seconds after the last first publish during which unacknowledged reports are re-sent,
    each on its own device's timer (spec §6; campaigns with delivery.ack only). None: 120 s;
    in a recurring campaign until the round closes (spec §3.4), which also bounds a value."""
    change_rate: float = 0.1
    """Recurring campaigns (recurring.py): each device's chance per round of drawing a new
    value from the distribution."""
    rounds_to_run: int = None
    """Recurring campaigns: stop after this many rounds (None: every round that opens until
    the campaign ends)."""
    on_round: object = None
    """Recurring campaigns: `on_round(RoundResult)` after each round (the CLI prints it)."""
    status: object = None
    """`status(line)`: a progress line every few seconds while the fleet waits (the CLI prints
    them on stderr)."""
    device_logins: list = None
    """[(username, password)] of provisioned devices for the real devices (MicroPython first,
    then C): needed when the load generator logs in (a broker-config broker binds a client id
    to its login, so the devices cannot share the load generator's)."""
    ack_root: bytes = None
    """The fleet's ack root key (`fleet --ack-key`): the simulated devices take only acks MAC'd
    under their keys (spec §6) and the real devices are provisioned with theirs."""
    ack_login_key: bytes = None
    """Instead, the key of the generator's own login (`fleet --ack-login-key`, `ack-key
    login`): enough to check the acks of its simulated devices <login>/<id>."""

    def check(self, broker: mqtt.BrokerSettings):
        if broker.tls and broker.cafile is None and (self.micropython or self.c_clients):
            raise ConfigError("cafile", "real devices on a TLS broker need the CA file (--cafile)")
        real = self.micropython + self.c_clients
        if broker.username and real and self.device_logins is None:
            raise ConfigError("device_logins", "real devices log in as themselves on a broker with "
                              "logins (broker-config binds each client id to its login): give "
                              "--device-logins credentials.csv (%d device rows)" % real)
        if self.device_logins is not None and len(self.device_logins) < real:
            raise ConfigError("device_logins", "%d real devices need %d device logins, got %d"
                              % (real, real, len(self.device_logins)))
        for name in ("devices", "micropython", "c_clients"):
            if getattr(self, name) < 0:
                raise ConfigError(name, "must be >= 0, got %d" % getattr(self, name))
        if self.rate is not None and not self.rate > 0:
            raise ConfigError("rate", "must be > 0, got %r" % self.rate)
        if self.set_size is not None and self.set_size < 1:
            raise ConfigError("set_size", "must be >= 1, got %r" % self.set_size)
        if self.ack_login_key is not None and (self.ack_root is not None or not broker.username):
            raise ConfigError("ack_login_key", "a login's ack key checks the acks of that login's "
                              "simulated devices: give it with --username (and without --ack-key)")

    def device_prefix(self, seed: int) -> str:
        """`--id-prefix`, else `sim<seed>`: the same seed, the same devices."""
        prefix = self.id_prefix if self.id_prefix is not None else "sim%d" % seed
        if not campaign_config.NAME_RE.match("%s-%d" % (prefix, max(self.devices - 1, 0))):
            raise ConfigError("id_prefix", "device ids %s-N must match [A-Za-z0-9_-]{1,64}" % prefix)
        return prefix


@dataclass
class FleetResult:
    campaign: str
    phase: int
    mechanism: str
    seed: int = None
    """The simulator's seed (the campaign id unless --seed): the same seed, the same devices."""
    sent: int = 0
    sent_by_kind: dict = field(default_factory=dict)
    skipped_by_sampling: int = 0
    true_counts: dict = field(default_factory=dict)
    device_ids: dict = field(default_factory=dict)
    seconds: float = 0.0
    failed: int = 0
    reconnects: int = 0
    """Times the simulated devices' publisher connected again (a broker restart or drop)."""
    acks: dict = None
    """With delivery.ack: acknowledged / unacknowledged / resent, by kind of device."""
    numeric: bool = False
    """A numeric campaign: true_counts are the devices' grid values ("<metric>:<value>" with
    several metrics) and the summary gives their true mean."""

    TOP_IN_SUMMARY = 20

    def true_means(self) -> dict:
        """Numeric campaigns: metric ("0", ...) -> the mean of the devices' grid values."""
        sums = {}
        for key, count in self.true_counts.items():
            metric, _, value = str(key).rpartition(":")
            acc = sums.setdefault(metric or "0", [0.0, 0])
            acc[0] += float(value) * count
            acc[1] += count
        return {m: total / n for m, (total, n) in sorted(sums.items()) if n}

    def to_json(self, detail: bool = False) -> dict:
        """A summary (the most common true items, device counts per kind); with `detail` every
        true count and every device id as well (`fleet --true-counts FILE`): for a large fleet
        that is megabytes, which a terminal should not get by default."""
        out = {"campaign": self.campaign, "phase": self.phase, "mechanism": self.mechanism,
               "seed": self.seed, "sent": self.sent, "sent_by_kind": self.sent_by_kind, "failed": self.failed,
               "reconnects": self.reconnects,
               "skipped_by_sampling": self.skipped_by_sampling,
               "distinct_true_items": len(self.true_counts),
               "top_true_counts": {str(k): int(v) for k, v in sorted(
                   self.true_counts.items(), key=lambda kv: -kv[1])[:self.TOP_IN_SUMMARY]},
               "devices_by_kind": {k: len(v) for k, v in self.device_ids.items()},
               "acks": self.acks,
               "seconds": round(self.seconds, 3),
               "rate": round(self.sent / self.seconds, 1) if self.seconds > 0 else None}
        if self.numeric:
            out["true_means"] = self.true_means()
        if detail:
            out["true_counts"] = {str(k): int(v) for k, v in self.true_counts.items()}
            out["device_ids"] = self.device_ids
        return out

    def summary(self) -> str:
        kinds = ", ".join("%d %s" % (v, k) for k, v in self.sent_by_kind.items() if v)
        top = sorted(self.true_counts.items(), key=lambda kv: -kv[1])[:5]
        truth = "most common true items: " + ", ".join("%s=%d" % kv for kv in top)
        if self.numeric:
            truth = "true mean of the readings' grid values: " + ", ".join(
                ("%.6g" % v if len(self.true_means()) == 1 else "metric %s %.6g" % (m, v))
                for m, v in self.true_means().items())
        line = ("campaign %s phase %d (%s): sent %d reports (%s) in %.1f s (seed %s: a re-run "
                "re-sends the same devices' reports); %s"
                % (self.campaign, self.phase, self.mechanism, self.sent, kinds or "none",
                   self.seconds, self.seed, truth))
        if self.acks is not None:
            line += "\nacknowledged end to end: %d, unacknowledged: %d (%d re-sends)" % (
                self.acks["acknowledged"], self.acks["unacknowledged"], self.acks["resent"])
            if self.acks["unacknowledged"]:
                line += ("\nWARNING: %d reports were never acknowledged by the aggregator: they "
                         "are lost unless their devices re-send later (is serve running? does "
                         "the broker drop messages? see `ldpfleet broker-check`)"
                         % self.acks["unacknowledged"])
        return line

    def add(self, kind: str, ids: list, counts: dict, sent: int):
        self.sent_by_kind[kind] = sent
        self.device_ids[kind] = ids
        for item, c in counts.items():
            self.true_counts[item] = self.true_counts.get(item, 0) + c


def progress_bar(total: int, enabled: bool, desc: str):
    """A tqdm bar, or None when not wanted or tqdm (extra `eval`) is not installed."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="dev", leave=False)


def run_fleet(broker, campaign: str, trusted_keys, options: FleetOptions = None) -> FleetResult:
    """Verify the campaign's config, then publish one report per device, each simulated device
    on its own schedule (schedule.py: the campaign's spread, its own re-send timer), while the
    real devices run as processes. A recurring campaign (a config with a `schedule`) runs
    recurring.run_recurring instead and returns its RecurringResult. `broker`: an mqtt:// or mqtts:// URL or BrokerSettings (its
    credentials and CA file are handed to the real devices too)."""
    opts = options or FleetOptions()
    broker = mqtt.as_settings(broker)
    opts.check(broker)
    c_client = (opts.c_client or c_client_binary()) if opts.c_clients else None
    view = fetch_campaign(broker, campaign, trusted_keys, opts.phase)
    distribution = item_distribution(opts.dist, view.config)
    if rounds.is_recurring(view.config):
        return run_recurring(broker, view, trusted_keys, opts, distribution, opts.on_round)
    mech = phase_mechanism(view)
    ack_wait = ACK_WAIT if opts.ack_wait is None else opts.ack_wait
    set_size = 0
    if mech.set_valued:
        set_size = opts.set_size or campaign_set_size(view.config)
    seed = opts.seed if opts.seed is not None else int(view.config["campaign_id"])
    rng = np.random.default_rng(seed)
    id_prefix = opts.device_prefix(seed)
    # a load generator's login L publishes only under ldp/<c>/r/L/<id> (spec §4)
    path_prefix = "%s/%s" % (broker.username, id_prefix) if broker.username else id_prefix
    result = FleetResult(campaign, view.phase, mech.name, seed=seed,
                         numeric=bool(getattr(distribution, "numeric", False)))
    delivery = view.config.get("delivery")
    t0 = time.monotonic()
    bar = progress_bar(opts.devices + opts.micropython + opts.c_clients, opts.progress,
                       "fleet %s" % campaign)
    tick = bar.update if bar else None
    real = []
    with ThreadPoolExecutor(2) as pool:
        logins = list(opts.device_logins) if opts.device_logins is not None else None
        wait = campaign_config.spread_s(view.config) + max(REAL_DEVICE_WAIT, ack_wait)
        for kind, count in (("micropython", opts.micropython), ("c", opts.c_clients)):
            if count:
                mine = None
                if logins is not None:
                    mine, logins = logins[:count], logins[count:]
                devices = RealDevices(kind, broker, view, distribution, trusted_keys, id_prefix,
                                      logins=mine, workdir=opts.workdir, binary=c_client,
                                      wait=wait, ack_root=opts.ack_root)
                indices = draw_indices(count, distribution, rng, set_size)
                real.append((kind, count, (devices, pool.submit(devices.run, indices))))
        device_ids = simulated_device_ids(opts.devices, path_prefix)
        chosen, counts, reports = simulated_reports(view, mech, distribution, device_ids, rng,
                                                    set_size)
        publisher = BulkPublisher(broker, "ldpfleet-fleet-%s" % uuid.uuid4().hex[:12],
                                  opts.max_inflight, opts.rate)
        tracker = None
        try:
            if campaign_config.acknowledged(view.config):
                tracker = AckTracker(campaign, path_prefix, reports, chosen,
                                     ack_root=opts.ack_root, ack_login_key=opts.ack_login_key)
                publisher.subscribe(tracker.topic_filter, tracker.on_message)
            schedule = DeviceSchedule(opts.devices, chosen, delivery, np.random.default_rng(),
                                      time.monotonic())
            topic = "ldp/%s/r/%s-" % (campaign, path_prefix)
            publish_on_schedule(publisher, schedule, lambda idx: [topic + str(i) for i in
                                                                  idx.tolist()],
                                reports, tracker, ack_wait, opts.status, tick)
            publisher.wait_acked(ACK_TIMEOUT)
            if tracker is not None:
                result.acks = {"simulated": tracker.to_json(schedule.resent)}
        finally:
            publisher.close()
        ids = [device_ids[i] for i in chosen.tolist()]
        result.add("simulated", ids, counts, len(ids) if tracker else publisher.acked)
        result.failed = publisher.failed
        result.reconnects = publisher.reconnects
        result.skipped_by_sampling = opts.devices - len(ids)
        for kind, count, future in real:
            devices, outcome = future
            result.add(kind, *outcome.result())
            if result.acks is not None:
                sent = result.sent_by_kind[kind]
                result.acks[kind] = {"acknowledged": devices.acked,
                                     "unacknowledged": sent - devices.acked}
            if tick:
                tick(count)
        if result.acks is not None:
            result.acks.update({key: sum(v.get(key, 0) for v in list(result.acks.values())
                                         if isinstance(v, dict))
                                for key in ("acknowledged", "unacknowledged", "resent")})
    if bar:
        bar.close()
    result.sent = sum(result.sent_by_kind.values())
    result.seconds = time.monotonic() - t0
    return result
