"""`ldpfleet fleet`: one report per device and phase from simulated devices and, optionally,
real MicroPython and C client processes (package docstring)."""
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .. import config as campaign_config
from .. import mqtt
from ..errors import ConfigError
from .acks import AckTracker
from .bulk import BulkPublisher
from .campaign import fetch_campaign, phase_mechanism
from .devices import RealDevices, c_client_binary
from .items import draw_indices, item_distribution
from .simulated import run_simulated, simulated_device_ids

ACK_TIMEOUT = 60.0


@dataclass
class FleetOptions:
    """What `ldpfleet fleet` runs: device counts per kind, the true-item distribution (a
    `datasets` spec or a weights file), the aggregator-side `seed` (a fixed seed re-sends
    byte-identical reports, which the aggregator must count as duplicates), the `phase` (default:
    the campaign's current one), device-id prefix, publishing window and rate, set length of
    set-valued phases (default phase 1's l), progress bar, a kept work directory for the real
    devices and the C client binary."""

    devices: int = 1000
    micropython: int = 0
    c_clients: int = 0
    dist: str = "zipf:1.1"
    seed: int = None
    phase: int = None
    id_prefix: str = None
    max_inflight: int = 5000
    rate: float = None
    set_size: int = None
    progress: bool = False
    workdir: str = None
    c_client: str = None
    ack_wait: float = 120.0
    """Seconds after the burst during which unacknowledged reports are re-sent (spec §6;
    campaigns with delivery.ack only)."""
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
                raise ValueError("%s must be >= 0, got %d" % (name, getattr(self, name)))
        if self.rate is not None and not self.rate > 0:
            raise ValueError("rate must be > 0, got %r" % self.rate)
        if self.set_size is not None and self.set_size < 1:
            raise ValueError("set_size must be >= 1, got %r" % self.set_size)
        if self.ack_login_key is not None and (self.ack_root is not None or not broker.username):
            raise ConfigError("ack_login_key", "a login's ack key checks the acks of that login's "
                              "simulated devices: give it with --username (and without --ack-key)")

    def device_prefix(self) -> str:
        prefix = self.id_prefix
        if prefix is None:
            prefix = "sim%d" % self.seed if self.seed is not None else "sim%s" % uuid.uuid4().hex[:6]
        if not campaign_config.NAME_RE.match("%s-%d" % (prefix, max(self.devices - 1, 0))):
            raise ConfigError("id_prefix", "device ids %s-N must match [A-Za-z0-9_-]{1,64}" % prefix)
        return prefix


@dataclass
class FleetResult:
    campaign: str
    phase: int
    mechanism: str
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

    TOP_IN_SUMMARY = 20

    def to_json(self, detail: bool = False) -> dict:
        """A summary (the most common true items, device counts per kind); with `detail` every
        true count and every device id as well (`fleet --true-counts FILE`): for a large fleet
        that is megabytes, which a terminal should not get by default."""
        out = {"campaign": self.campaign, "phase": self.phase, "mechanism": self.mechanism,
               "sent": self.sent, "sent_by_kind": self.sent_by_kind, "failed": self.failed,
               "reconnects": self.reconnects,
               "skipped_by_sampling": self.skipped_by_sampling,
               "distinct_true_items": len(self.true_counts),
               "top_true_counts": {str(k): int(v) for k, v in sorted(
                   self.true_counts.items(), key=lambda kv: -kv[1])[:self.TOP_IN_SUMMARY]},
               "devices_by_kind": {k: len(v) for k, v in self.device_ids.items()},
               "acks": self.acks,
               "seconds": round(self.seconds, 3),
               "rate": round(self.sent / self.seconds, 1) if self.seconds > 0 else None}
        if detail:
            out["true_counts"] = {str(k): int(v) for k, v in self.true_counts.items()}
            out["device_ids"] = self.device_ids
        return out

    def summary(self) -> str:
        kinds = ", ".join("%d %s" % (v, k) for k, v in self.sent_by_kind.items() if v)
        top = sorted(self.true_counts.items(), key=lambda kv: -kv[1])[:5]
        line = ("campaign %s phase %d (%s): sent %d reports (%s) in %.1f s; most common true "
                "items: %s" % (self.campaign, self.phase, self.mechanism, self.sent, kinds or "none",
                               self.seconds, ", ".join("%s=%d" % kv for kv in top)))
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
    """Verify the campaign's config, then publish one report per device (package docstring).
    `broker`: an mqtt:// or mqtts:// URL or BrokerSettings (its credentials and CA file are
    handed to the real devices too)."""
    opts = options or FleetOptions()
    broker = mqtt.as_settings(broker)
    opts.check(broker)
    c_client = (opts.c_client or c_client_binary()) if opts.c_clients else None
    view = fetch_campaign(broker, campaign, trusted_keys, opts.phase)
    mech = phase_mechanism(view)
    distribution = item_distribution(opts.dist, view.config)
    set_size = 0
    if mech.set_valued:
        first = view.config["phases"][0]
        set_size = opts.set_size or int(first.get("params", {}).get("l", mech.params.get("l", 1)))
    if mech.name == "shc" and view.phase == 2 and opts.seed is None and opts.devices:
        raise ConfigError("seed", "shc phase 2: the simulated devices replay phase 1 to recover "
                          "what they kept (spec §3.1); give the phase-1 run's --seed")
    rng = np.random.default_rng(opts.seed)
    id_prefix = opts.device_prefix()
    # a load generator's login L publishes only under ldp/<c>/r/L/<id> (spec §4)
    path_prefix = "%s/%s" % (broker.username, id_prefix) if broker.username else id_prefix
    result = FleetResult(campaign, view.phase, mech.name)
    t0 = time.monotonic()
    bar = progress_bar(opts.devices + opts.micropython + opts.c_clients, opts.progress,
                       "fleet %s" % campaign)
    tick = bar.update if bar else None
    real = []
    with ThreadPoolExecutor(2) as pool:
        logins = list(opts.device_logins) if opts.device_logins is not None else None
        for kind, count in (("micropython", opts.micropython), ("c", opts.c_clients)):
            if count:
                mine = None
                if logins is not None:
                    mine, logins = logins[:count], logins[count:]
                devices = RealDevices(kind, broker, view, distribution, trusted_keys, id_prefix,
                                      logins=mine, workdir=opts.workdir, binary=c_client,
                                      ack_root=opts.ack_root)
                indices = draw_indices(count, distribution, rng, set_size)
                real.append((kind, count, (devices, pool.submit(devices.run, indices))))
        publisher = BulkPublisher(broker, "ldpfleet-fleet-%s" % uuid.uuid4().hex[:12],
                                  opts.max_inflight, opts.rate)
        tracker = None
        try:
            if campaign_config.acknowledged(view.config):
                tracker = AckTracker(campaign, path_prefix, opts.devices, mech.report_size,
                                     view.config["delivery"], np.random.default_rng(),
                                     ack_root=opts.ack_root, ack_login_key=opts.ack_login_key)
                publisher.subscribe(tracker.topic_filter, tracker.on_message)
            ids, counts = run_simulated(publisher, view, mech, distribution,
                                        simulated_device_ids(opts.devices, path_prefix), rng,
                                        set_size, tick, keep=tracker.keep if tracker else None)
            publisher.wait_acked(ACK_TIMEOUT)
            if tracker is not None:
                left = tracker.resend_until_acked(publisher, time.monotonic() + opts.ack_wait)
                publisher.wait_acked(ACK_TIMEOUT)
                result.acks = {"simulated": tracker.to_json(left)}
        finally:
            publisher.close()
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
