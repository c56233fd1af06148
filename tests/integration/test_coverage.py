"""Coverage (service/campaigns/coverage.py): provisioned devices with an accepted report over the
provisioned devices, in `campaign status` (text and JSON), the HTTP API, /metrics and the
dashboard; `ldpfleet devices silent` lists the provisioned devices without one, per phase
where a campaign asks devices in several. The state holds keyed hashes of device ids, never
the ids: each provisioned id is hashed and looked up. Both backends."""
import json
import os
import time
import urllib.request

import numpy as np
import pytest

from ldpfleet.broker.embedded import free_port
from ldpfleet.core.protocols import ldplcm
from ldpfleet.service import Store, create_campaign
from ldpfleet.service.state import retention
from ldpfleet.service.campaigns.manage import close_campaign
from ldpfleet.service.campaigns.coverage import ProvisionedFleet
from ldpfleet.service.http.api import ApiTokens, create_app, start_http
from ldpfleet.service.http.metrics import ServiceMetrics
from ldpfleet.service.campaigns.protocols import (
    ProtocolOptions,
    advance_campaign,
    create_protocol_campaign)
from ldpfleet.core.signing import write_signing_key

from support.service import ServeProcess, cli_json, fold_batch, report_messages

FLEET = ["dev%d" % i for i in range(50)]


def messages(camp, phase, devices, rng, sets=False):
    mech = camp.mechanism(phase)
    values = ([[int(v)] for v in rng.integers(0, 16, len(devices))] if sets
              else rng.integers(0, 16, len(devices)).astype(np.uint32))
    reports = mech.perturb_batch(values, rng)
    return [("ldp/%s/r/%s" % (camp.name, d), row.tobytes()) for d, row in zip(devices, reports)]


def populate(state: str, tmp_path):
    """cpu (one phase): dev0..39 and two devices nobody provisioned; lm (LDPMiner): dev0..29 in
    phase 1, dev0..19 in phase 2; lc (LDPLCM, phase 1): the devices its rule asks, but dev0;
    gone: closed, its keys purged. Returns the devices file."""
    rng = np.random.default_rng(7)
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(state) as store:
        cpu = create_campaign(store, None, key, "cpu", "olh", "2", "16")
        lm = create_protocol_campaign(store, None, key, "lm", "ldpminer-rappor", "4", "16",
                                      ProtocolOptions(set_size=1, top=2))
        lc = create_protocol_campaign(store, None, key, "lc", "ldplcm", "2", "16",
                                      ProtocolOptions(sample_rate=0.5))
        gone = create_campaign(store, None, key, "gone", "grr", "1", "16")
    fold_batch(state, messages(cpu, 1, FLEET[:40] + ["guest-1", "guest-2"], rng))
    fold_batch(state, messages(lm, 1, FLEET[:30], rng, sets=True))
    with Store(state) as store:
        advance_campaign(store, None, "lm")
        lm = store.require_campaign("lm")
    fold_batch(state, messages(lm, 2, FLEET[:20], rng, sets=True))
    asked = [d for d, yes in zip(FLEET, ldplcm.reports_in_phase(FLEET, lc.config, 1)) if yes]
    fold_batch(state, messages(lc, 1, [d for d in asked if d != "dev0"], rng))
    fold_batch(state, messages(gone, 1, FLEET[:5], rng))
    grace, retention.CLOSE_GRACE_S = retention.CLOSE_GRACE_S, 0.0
    try:
        with Store(state) as store:
            close_campaign(store, "gone")
            retention.purge(store, "gone")
    finally:
        retention.CLOSE_GRACE_S = grace
    devices = tmp_path / "devices.txt"
    devices.write_text("# the pilot fleet\n" + "\n".join(FLEET) + "\n")
    return devices, asked


def test_status_and_silent_devices_per_phase(state_url, tmp_path, capsys):
    devices, asked = populate(state_url, tmp_path)
    status = cli_json(capsys, "campaign", "status", "cpu", "--state", state_url,
                      "--devices-file", devices)
    assert status["coverage"] == {"reported": 40, "provisioned": 50, "ratio": 0.8}
    # without the fleet: the distinct devices that reported, guests included, no denominator
    status = cli_json(capsys, "campaign", "status", "cpu", "--state", state_url)
    assert status["coverage"] == {"reported": 42, "provisioned": None, "ratio": None}
    status = cli_json(capsys, "campaign", "status", "lm", "--state", state_url,
                      "--devices-file", devices)
    assert status["coverage"] == {"reported": 30, "provisioned": 50, "ratio": 0.6}
    assert cli_json(capsys, "campaign", "status", "gone", "--state", state_url,
                    "--devices-file", devices)["coverage"] is None

    from ldpfleet import cli
    assert cli.main(["campaign", "status", "cpu", "--state", state_url, "--devices-file",
                     str(devices)]) == 0
    assert ("coverage: 40 of 50 provisioned devices reported (80.0%); `ldpfleet devices "
            "silent` lists the others") in capsys.readouterr().out

    silent = cli_json(capsys, "devices", "silent", "cpu", "--state", state_url,
                      "--devices-file", devices)
    assert silent["silent"] == FLEET[40:] and silent["reported"] == 40
    assert [(p["phase"], p["expected"], p["reported"]) for p in silent["phases"]] == [(1, 50, 40)]

    silent = cli_json(capsys, "devices", "silent", "lm", "--state", state_url,
                      "--devices-file", devices)
    one, two = silent["phases"]
    assert one["silent"] == FLEET[30:] and two["silent"] == FLEET[20:]
    assert silent["silent"] == FLEET[30:]  # silent in every phase it was asked in

    silent = cli_json(capsys, "devices", "silent", "lc", "--state", state_url,
                      "--devices-file", devices)
    one, two = silent["phases"]
    assert 0 < len(asked) < 50 and one["expected"] == len(asked)
    assert one["silent"] == ["dev0"] if "dev0" in asked else one["silent"] == []
    assert two == {"phase": 2, "open": False, "expected": 50 - len(asked), "reported": 0,
                   "silent": None}

    assert cli.main(["devices", "silent", "cpu", "--state", state_url, "--devices-file",
                     str(devices)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("campaign cpu (open, phase 1): 40 of 50 provisioned devices "
                                   "reported, 10 silent in every open phase")
    assert out.splitlines()[1:] == FLEET[40:]
    assert cli.main(["devices", "silent", "gone", "--state", state_url, "--devices-file",
                     str(devices)]) == 2
    assert "purged" in capsys.readouterr().err


def test_devices_silent_says_it_reveals_nothing_about_values(capsys):
    from ldpfleet import cli
    with pytest.raises(SystemExit):
        cli.main(["devices", "silent", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "does not depend on its value" in text and "reveals nothing about values" in text
    assert "keyed hashes" in text


def test_a_bad_devices_file_is_refused_naming_the_option(tmp_path, capsys):
    from ldpfleet import cli
    bad = tmp_path / "devices.txt"
    bad.write_text("dev-1\nnot a device\n")
    state = "sqlite:///" + str(tmp_path / "s.db")
    Store(state).close()
    assert cli.main(["devices", "silent", "x", "--state", state, "--devices-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "devices_file" in err and "devices.txt:2" in err


def test_api_and_metrics_show_coverage(tmp_path):
    state = "sqlite:///" + str(tmp_path / "state.db")
    devices, _ = populate(state, tmp_path)
    fleet = ProvisionedFleet(str(devices))
    port = free_port()
    metrics = ServiceMetrics(state_url=state, fleet=fleet)
    server = start_http(create_app(state, metrics=metrics, tokens=ApiTokens(read="r" * 20),
                                   fleet=fleet), "127.0.0.1", port)
    try:
        req = urllib.request.Request("http://127.0.0.1:%d/campaigns/cpu" % port,
                                     headers={"Authorization": "Bearer " + "r" * 20})
        status = json.loads(urllib.request.urlopen(req, timeout=30).read())
        assert status["coverage"] == {"reported": 40, "provisioned": 50, "ratio": 0.8}
        text = metrics.text()
        for line in ('ldpfleet_campaign_devices_provisioned{campaign="cpu"} 50.0',
                     'ldpfleet_campaign_devices_reported{campaign="cpu"} 40.0',
                     'ldpfleet_campaign_coverage_ratio{campaign="cpu"} 0.8',
                     'ldpfleet_campaign_coverage_ratio{campaign="lm"} 0.6',
                     'ldpfleet_campaign_devices{campaign="cpu"} 42.0'):
            assert line in text, text
        assert 'coverage_ratio{campaign="gone"}' not in text  # purged: unknown
        with Store(state) as store:
            ends = store.require_campaign("cpu").config["not_after"]
        line = next(line for line in text.splitlines()
                    if line.startswith('ldpfleet_campaign_ends_timestamp_seconds{campaign="cpu"} '))
        assert float(line.split()[-1]) == ends
        # the fleet file is re-read when it changes: boards were added
        devices.write_text("\n".join(FLEET + ["dev50", "dev51"]) + "\n")
        os.utime(devices, (time.time() + 5, time.time() + 5))
        status = json.loads(urllib.request.urlopen(req, timeout=30).read())
        assert status["coverage"] == {"reported": 40, "provisioned": 52, "ratio": 40 / 52}
    finally:
        server.should_exit = True


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.mark.skipif(not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
                    reason="needs Debian's chromium and chromium-driver (tools/setup.sh)")
def test_the_dashboard_shows_accepted_of_n_provisioned(mosquitto, tmp_path, monkeypatch):
    pytest.importorskip("selenium", reason="the test extra")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    state = "sqlite:///" + str(tmp_path / "state.db")
    devices, _ = populate(state, tmp_path)
    token = tmp_path / "read.token"
    token.write_text("dashboard-token-0123456789\n")
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log"), extra_args=[
        "--http", "127.0.0.1:%d" % port, "--http-token-file", str(token), "--devices-file",
        str(devices), "--no-broker-check"]).start(timeout=120)
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get("http://127.0.0.1:%d/?token=dashboard-token-0123456789" % port)
        deadline = time.monotonic() + 30
        while driver.execute_script("return document.body.dataset.state") != "ok":
            assert time.monotonic() < deadline, driver.find_element("tag name", "body").text
            time.sleep(0.1)
        fields = {e["field"]: e for e in driver.execute_script(
            "return Array.from(document.querySelectorAll('[data-field]')).map(e => ({field: "
            "e.getAttribute('data-field'), value: e.getAttribute('data-value'), text: "
            "e.textContent}))")}
        cards = driver.execute_script(
            "return Array.from(document.querySelectorAll('.coverage')).map(e => e.textContent)")
    finally:
        driver.quit()
        assert serve.stop() == 0, serve.log()
    assert float(fields["campaign.cpu.coverage.reported"]["value"]) == 40
    assert float(fields["campaign.cpu.coverage.provisioned"]["value"]) == 50
    assert float(fields["campaign.cpu.coverage.ratio"]["value"]) == 0.8
    assert "40 devices accepted of 50 provisioned (80.0%)" in cards
    assert fields["campaign.lm.coverage.provisioned"]["text"] == "50"
