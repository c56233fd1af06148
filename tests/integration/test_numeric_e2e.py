"""A numeric campaign end to end through the product's CLI: a private Mosquitto, `serve`,
`campaign create --domain=-40.0..85.0:0.1`, `ldpfleet fleet` with 2,000 simulated devices, 3
MicroPython and 2 C device processes whose readings (Beta(2, 5) scaled into the range) the fleet
writes out (`--true-counts`), then `estimate`:

* pm (a mean): the true mean of the devices' grid values lies in the estimate's 95 % interval,
  whose half-width is z sqrt(V / n) with V the mechanism's worst-case per-report variance. The
  simulated fleet's words come from the fixed `--seed`; the five real devices draw from their
  OS RNG, and a report's estimate lies in [f(0), f(D + L - 1)], so they can move the mean by at
  most 5 (f_max - f_min) / n: the test asserts the truth lies inside the interval by that
  margin, so a pass means the interval covers whatever the real devices drew (a failure can
  still come from their draws together with the simulated fleet's, about 5 % of seeds).
* sw (a distribution): the EMS histogram sums to 1, each bin's fraction lies in its bootstrap
  interval, its mean and median are within 1.5 degrees of the truth and the mass of the bins
  below 0 within 0.05 of the true share. These tolerances are regression bounds for this seed
  (EMS smooths: its bias is not in any interval), not bounds derived from the variance.
* `campaign status` reads the range and the reports; the HTTP API's estimate equals the CLI's.
"""
import json
import math
import os
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from support.brokers import PrivateMosquitto, free_port
from support.c_client import build_client
from support.service import ServeProcess
from ldpfleet.core import config as cfgmod
from ldpfleet.service import Store
from ldpfleet.service.campaigns.numeric import worst_report_variance

SIMULATED, MICROPYTHON, C_CLIENTS = 2000, 3, 2
DEVICES = SIMULATED + MICROPYTHON + C_CLIENTS


def cli(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *args], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def truth(path):
    """(grid values, counts) of every device's reading, as the fleet wrote them."""
    counts = json.load(open(path))["true_counts"]
    values = np.array([float(k) for k in counts])
    weights = np.array([counts[k] for k in counts], dtype=np.float64)
    assert weights.sum() == DEVICES
    return values, weights


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    work = tmp_path_factory.mktemp("numeric-e2e")
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    key = str(work / "k.pem")
    state = "sqlite:///" + str(work / "state.db")
    with PrivateMosquitto() as broker:
        url = "mqtt://127.0.0.1:%d" % broker.port
        cli("campaign", "keygen", key)
        for name, params in (("temp-pm", []), ("temp-sw", ["--param", "bins=256"])):
            cli("campaign", "create", "--broker", url, "--state", state, "--signing-key", key,
                "--name", name, "--mechanism", name[5:], "--epsilon", "1",
                "--domain=-40.0..85.0:0.1", "--salt", "7", *params)
        serve = ServeProcess(url, state, log_path=str(work / "serve.log")).start()
        try:
            for name in ("temp-pm", "temp-sw"):
                cli("fleet", "--broker", url, "--campaign", name, "--trusted-keys", key + ".pub",
                    "--devices", str(SIMULATED), "--micropython", str(MICROPYTHON),
                    "--c-clients", str(C_CLIENTS), "--c-client", str(build_client()),
                    "--seed", "11", "--dist", "beta:2,5",
                    "--true-counts", str(work / (name + ".json")), "--ack-wait", "30", "--json",
                    env=env)
                serve.wait_counts(name, lambda c: c.get("accepted", 0) >= DEVICES, timeout=120)
        finally:
            serve.stop()
    return work, state


def test_pm_mean_within_its_interval(fleet):
    work, state = fleet
    est = json.loads(cli("estimate", "temp-pm", "--state", state, "--json"))
    assert est["n"] == DEVICES and est["items"] == []
    (m,) = est["numeric"]["means"]
    values, weights = truth(work / "temp-pm.json")
    true_mean = float(np.dot(values, weights) / weights.sum())
    with Store(state) as store:
        mech = store.require_campaign("temp-pm").mechanism(1)
    half_t = 1.959964 * math.sqrt(worst_report_variance(mech) / DEVICES)
    assert (m["ci_high"] - m["ci_low"]) / 2 == pytest.approx(half_t * 62.5, rel=1e-4)
    f = mech.estimates(np.array([0, mech.cells - 1]))
    margin = (MICROPYTHON + C_CLIENTS) * float(f[1] - f[0]) / DEVICES * 62.5  # degrees
    assert m["ci_low"] + margin <= true_mean <= m["ci_high"] - margin, (m, true_mean, margin)
    status = json.loads(cli("campaign", "status", "temp-pm", "--state", state, "--json"))
    assert status["domain"]["range"] == "-40.0..85.0 by 0.1 (1251 points)"
    assert status["accepted"] == DEVICES
    text = cli("campaign", "status", "temp-pm", "--state", state)
    assert "numeric domain -40.0..85.0" in text and "mean +/-" in text


def test_sw_histogram(fleet):
    work, state = fleet
    est = json.loads(cli("estimate", "temp-sw", "--state", state, "--json"))
    num = est["numeric"]
    hist = num["histogram"]
    assert len(hist) == 256 and est["n"] == DEVICES
    assert sum(b["fraction"] for b in hist) == pytest.approx(1.0, abs=1e-6)
    assert all(b["ci_low"] - 1e-12 <= b["fraction"] <= b["ci_high"] + 1e-12 for b in hist)
    values, weights = truth(work / "temp-sw.json")
    true_mean = float(np.dot(values, weights) / weights.sum())
    assert abs(num["means"][0]["mean"] - true_mean) < 1.5
    order = np.argsort(values)
    cdf = np.cumsum(weights[order]) / weights.sum()
    true_median = float(values[order][np.searchsorted(cdf, 0.5)])
    median = next(q for q in num["quantiles"] if q["q"] == 0.5)
    assert abs(median["value"] - true_median) < 1.5, (median, true_median)
    boundary = max(b["high"] for b in hist if b["high"] <= 0.0)  # half a grid step off 0
    below = sum(b["fraction"] for b in hist if b["high"] <= boundary)
    assert abs(below - float(weights[values < boundary].sum() / weights.sum())) < 0.05

def test_api_answers_as_the_cli(fleet):
    from ldpfleet.service.http.api import create_app, start_http
    work, state = fleet
    port = free_port()
    server = start_http(create_app(state), "127.0.0.1", port)
    try:
        for name in ("temp-pm", "temp-sw"):
            with urllib.request.urlopen("http://127.0.0.1:%d/campaigns/%s/estimate" % (port, name),
                                        timeout=60) as r:
                api = json.load(r)
            with urllib.request.urlopen("http://127.0.0.1:%d/campaigns/%s/estimate?format=csv"
                                        % (port, name), timeout=60) as r:
                csv_api = r.read().decode()
            assert api == json.loads(cli("estimate", name, "--state", state, "--json"))
            assert csv_api == cli("estimate", name, "--state", state, "--csv")
    finally:
        server.should_exit = True
