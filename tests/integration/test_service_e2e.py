"""End to end through real parts: a private mosquitto, `ldpfleet serve` as a subprocess, a
signed campaign, the fleet generator's simulated devices (C kernels) and real MicroPython
device processes. Nothing may be lost, nothing counted twice, and every item's estimate must
lie within its theoretical error.

Accuracy bound: for item i with true count c_i among n reports, the estimate's standard
deviation is n·sqrt(v_i) with v_i = `mech.item_variances(n, [c_i/n])` (the mechanism's exact
per-item variance of the estimated fraction). Over d items the family-wise bound uses
z = Φ⁻¹(1 − α/(2d)) (Bonferroni), α = 1e-4: a correct pipeline fails with probability at most
~1e-4 under the normal approximation. The bound is tight enough to tell the two heaviest
items apart (checked: swapping their true counts violates it), so a decoder with the wrong
seeds, or a pipeline that dropped or misrouted an item's reports, fails; small losses are
caught exactly by the counters (accepted == sent). The simulated devices draw from a fixed
seed, so the sim part is reproducible."""
import shutil

import numpy as np
import pytest
from scipy import stats

from support.devices import OTHER_KEY, ReportCollector
from ldpfleet.core import config as campaign_config
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.service import BrokerSettings, Store, create_campaign
from support.service import ServeProcess
from ldpfleet.core.signing import write_signing_key
from ldpfleet.service.campaigns.estimates import load_sketch

HAVE_MICROPYTHON = shutil.which("micropython") is not None
ALPHA = 1e-4


def settled(sent):
    """Every sent report is accounted for once: accepted or rejected (duplicates aside)."""
    return lambda c: sum(v for k, v in c.items() if k not in ("received", "duplicate")) >= sent


@pytest.fixture
def service(mosquitto, tmp_path):
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log")).start()
    key_file = str(tmp_path / "fleet.key")
    key = write_signing_key(key_file)
    yield mosquitto, serve, state, key_file, key
    serve.stop()


def estimates_within_bound(state, name, true_counts):
    """(items, true counts, estimates, allowed deviation) for the campaign's whole domain."""
    with Store(state) as store:
        camp = store.require_campaign(name)
        sketch = load_sketch(store, name, 1)
    mech = camp.mechanism(1)
    doc = camp.config
    items = (list(range(doc["domain"]["size"])) if doc["domain"]["type"] == "int"
             else list(doc["domain"]["items"]))
    n = sketch.n
    truth = np.array([true_counts.get(i, 0) for i in items], dtype=np.float64)
    est = np.asarray(sketch.estimate(np.asarray(campaign_config.domain_keys(doc), np.uint32)),
                     dtype=np.float64)
    z = stats.norm.ppf(1 - ALPHA / (2 * len(items)))
    allowed = z * n * np.sqrt(mech.item_variances(n, truth / n))
    return items, truth, est, allowed


@pytest.mark.skipif(not HAVE_MICROPYTHON, reason="micropython binary not installed")
def test_simulated_and_micropython_fleet_lossless_and_accurate(service, tmp_path):
    broker, serve, state, key_file, key = service
    with Store(state) as store:
        create_campaign(store, BrokerSettings.from_url(broker.url), key_file, "e2e-olh", "olh", 2.0, "64")
    workdir = str(tmp_path / "fleet")
    result = run_fleet(broker.url, "e2e-olh", key, FleetOptions(
        devices=5000, micropython=10, dist="zipf:1.1", seed=20240501, workdir=workdir))
    assert result.sent_by_kind == {"simulated": 5000, "micropython": 10}
    assert sum(result.true_counts.values()) == result.sent == 5010
    counters = serve.wait_counts("e2e-olh", settled(result.sent), timeout=60)
    assert counters.get("accepted") == result.sent  # lost == 0, nothing rejected
    assert counters.get("received") == result.sent  # and nothing arrived twice

    items, truth, est, allowed = estimates_within_bound(state, "e2e-olh", result.true_counts)
    assert truth.sum() == result.sent
    worst = np.argmax(np.abs(est - truth) / allowed)
    assert np.all(np.abs(est - truth) <= allowed), (
        "item %s: estimate %.1f, true %d, allowed deviation %.1f"
        % (items[worst], est[worst], truth[worst], allowed[worst]))
    swapped = truth.copy()
    swapped[[0, 1]] = truth[[1, 0]]
    with Store(state) as store:
        mech = store.require_campaign("e2e-olh").mechanism(1)
    z = stats.norm.ppf(1 - ALPHA / (2 * len(items)))
    allowed_swapped = z * truth.sum() * np.sqrt(mech.item_variances(int(truth.sum()), swapped / truth.sum()))
    assert not np.all(np.abs(est - swapped) <= allowed_swapped)

    # Re-running the same seeded fleet (same device ids, same ledgers) re-sends identical
    # reports: the aggregator must count every one as a duplicate and fold nothing again.
    again = run_fleet(broker.url, "e2e-olh", key, FleetOptions(
        devices=5000, micropython=10, dist="zipf:1.1", seed=20240501, workdir=workdir))
    assert again.true_counts == result.true_counts
    counters = serve.wait_counts("e2e-olh", lambda c: c.get("duplicate", 0) >= again.sent,
                                 timeout=60)
    assert counters.get("accepted") == result.sent
    assert counters.get("duplicate") == again.sent == 5010
    with Store(state) as store:
        assert load_sketch(store, "e2e-olh", 1).n == result.sent


def test_string_domain_grr_fleet(service):
    broker, serve, state, key_file, key = service
    names = ["boot", "wifi-drop", "ota-fail", "brownout", "watchdog", "panic", "ok", "overheat"]
    domain_file = key_file + ".items"
    with open(domain_file, "w") as f:
        f.write("\n".join(names) + "\n")
    with Store(state) as store:
        create_campaign(store, BrokerSettings.from_url(broker.url), key_file, "e2e-str", "grr", 1.5,
                        domain_file)
    micropython = 3 if HAVE_MICROPYTHON else 0
    result = run_fleet(broker.url, "e2e-str", key, FleetOptions(
        devices=3000, micropython=micropython, dist="zipf:0.8", seed=7))
    assert set(result.true_counts) <= set(names)
    counters = serve.wait_counts("e2e-str", settled(result.sent), timeout=60)
    assert counters.get("accepted") == result.sent == 3000 + micropython
    items, truth, est, allowed = estimates_within_bound(state, "e2e-str", result.true_counts)
    assert items == names
    assert np.all(np.abs(est - truth) <= allowed), list(zip(items, truth, est, allowed))


def test_fleet_refuses_a_config_signed_with_another_key(service):
    broker, serve, state, key_file, key = service
    with Store(state) as store:
        create_campaign(store, BrokerSettings.from_url(broker.url), key_file, "e2e-key", "oue", 1.0, "16")
    from ldpfleet.core.errors import ConfigError
    collector = ReportCollector(broker.port)
    try:
        with pytest.raises(ConfigError) as err:
            run_fleet(broker.url, "e2e-key", OTHER_KEY.public, FleetOptions(devices=10))
        assert err.value.field == "kid"
        # everything the fleet could have published before refusing has been routed by now
        assert [t for t, _ in collector.barrier() if t.startswith("ldp/e2e-key/")] == []
    finally:
        collector.close()


def test_c_clients_join_the_fleet(service):
    """The fleet's third kind of device: the C client binary (device/c_client, built by its own
    build script), beside simulated devices, into the same campaign."""
    from support.c_client import build_client
    broker, serve, state, key_file, key = service
    with Store(state) as store:
        create_campaign(store, BrokerSettings.from_url(broker.url), key_file, "e2e-c", "olh", 2.0, "32")
    result = run_fleet(broker.url, "e2e-c", key, FleetOptions(
        devices=1000, c_clients=4, seed=5, c_client=str(build_client())))
    assert result.sent_by_kind == {"simulated": 1000, "c": 4}
    assert len(result.device_ids["c"]) == 4
    counters = serve.wait_counts("e2e-c", settled(result.sent), timeout=60)
    assert counters.get("accepted") == result.sent == 1004
    items, truth, est, allowed = estimates_within_bound(state, "e2e-c", result.true_counts)
    assert np.all(np.abs(est - truth) <= allowed)


def test_fleet_cli_json(service, tmp_path):
    import json
    import subprocess
    import sys
    broker, serve, state, key_file, key = service
    with Store(state) as store:
        create_campaign(store, BrokerSettings.from_url(broker.url), key_file, "e2e-cli", "oue", 1.0, "16")
    weights = tmp_path / "weights.txt"
    weights.write_text("3 5\n7 1\n# comment\n9\n")
    micropython = 1 if HAVE_MICROPYTHON else 0
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "fleet", "--broker", broker.url,
                           "--campaign", "e2e-cli", "--devices", "300", "--micropython", str(micropython),
                           "--trusted-keys", key_file, "--dist", str(weights), "--seed", "3",
                           "--rate", "2000", "--json", "--true-counts", str(tmp_path / "truth.json")],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # a summary on stdout, no per-device dump
    assert "device_ids" not in summary and "true_counts" not in summary
    assert summary["devices_by_kind"]["simulated"] == 300 and summary["distinct_true_items"] <= 3
    out = json.loads((tmp_path / "truth.json").read_text())
    assert out["sent"] == summary["sent"] == 300 + micropython
    assert set(out["true_counts"]) <= {"3", "7", "9"}
    assert summary["top_true_counts"] == out["true_counts"]  # <= 3 items: all of them in the top
    assert sum(out["true_counts"].values()) == out["sent"]
    assert out["device_ids"]["simulated"] == ["sim3-%d" % i for i in range(300)]
    assert len(out["device_ids"].get("micropython", [])) == micropython
    counters = serve.wait_counts("e2e-cli", settled(out["sent"]), timeout=60)
    assert counters.get("accepted") == out["sent"]


def test_bench_ingest_smoke():
    """tools/bench_ingest.py runs end to end and accounts for every report (no timing check)."""
    import json
    import os
    import subprocess
    import sys
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench_ingest.py")
    proc = subprocess.run([sys.executable, tool, "--reports", "5000", "--batch-size", "500",
                           "--domain", "16", "--live-reports", "5000", "--held-reports", "5000"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    for run in ("serve_sqlite", "serve_postgresql", "workers2_postgresql"):
        assert out[run + "_accepted"] == 5000 and out[run + "_rejected"] == 0, run
        assert out[run + "_rate"] > 0 and out[run + "_ratio_raw"] > 0
    for key in ("raw_socket_rate", "bare_subscriber_rate", "loadgen_rate"):
        assert out[key] > 0
    # behind packaged limits and broker-config's, serve connected (live) or stopped (held)
    for run in ("live_sized", "held_sized", "held_packaged"):
        assert out[run + "_accepted"] == 5000 and out[run + "_dropped"] == 0, run
    assert out["live_packaged_accepted"] + out["live_packaged_dropped"] == 5000
    assert out["held_packaged_ratio_sized"] > 0
