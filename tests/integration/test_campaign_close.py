"""Closing a campaign stops devices from spending (spec §5.4).

Before, `campaign close` left the signed config retained: a device that came later accepted it,
spent ε and published a report the aggregator then rejected as `closed_campaign`. Now the signed
close replaces the retained config and the retained phase-2 message is cleared: a device that
comes after the close (MicroPython and C) spends nothing, remembers the closed id in its ledger
and refuses a replay of the old config; `ldpfleet fleet` refuses a closed campaign.
"""
import json
import subprocess
import sys

import pytest

from support.c_client import build_client, run_client
from support.devices import SIGNING_KEY, ReportCollector, write_key_files
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.service.state.store import Store


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def closed_campaign(mosquitto, tmp_path):
    key = tmp_path / "signing.key"
    write_key_files(key)
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    made = cli("campaign", "create", "--broker", mosquitto.url, "--state", state, "--signing-key",
               str(key), "--name", "gone", "--mechanism", "olh", "--epsilon", "2", "--domain", "16")
    assert made.returncode == 0, made.stderr
    with Store(state) as store:
        camp = store.require_campaign("gone")
        config_payload, cid = camp.config_payload, camp.campaign_id
        not_before = camp.config["not_before"]
    closed = cli("campaign", "close", "gone", "--state", state, "--broker", mosquitto.url)
    assert closed.returncode == 0 and "signed close retained" in closed.stdout, closed.stderr
    return {"key": key, "state": state, "config": config_payload, "cid": cid,
            "not_before": not_before}


def test_close_replaces_the_retained_config(mosquitto, closed_campaign):
    collector = ReportCollector(mosquitto.port, topic="ldp/#")  # subscribes after the close
    try:
        retained = collector.barrier()
    finally:
        collector.close()
    configs = [p for t, p in retained if t == "ldp/gone/config"]
    assert len(configs) == 1
    body = campaign_config.verify(configs[0], SIGNING_KEY)
    assert body == {"type": "close", "protocol": 2, "campaign": "gone",
                    "campaign_id": closed_campaign["cid"], "not_before": closed_campaign["not_before"]}
    assert not [t for t, _ in retained if t == "ldp/gone/phase2"]


@pytest.mark.parametrize("client", ["micropython", "c"])
def test_a_device_that_comes_after_the_close_spends_nothing(mosquitto, tmp_path, closed_campaign,
                                                            client):
    state = device_runner.prepare_device(tmp_path / client, "late-" + client, SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=50000)

    def run():
        if client == "c":
            proc = run_client(build_client(), state, mosquitto.port, "gone", 3, wait=30)
            return proc.returncode, proc.stdout + proc.stderr
        proc = run_device(state, "127.0.0.1", mosquitto.port, "gone", value=3, wait=30)
        return proc.returncode, proc.stdout

    collector = ReportCollector(mosquitto.port)
    try:
        code, out = run()
        assert code == 0 and "closed campaign_id=%d" % closed_campaign["cid"] in out, out
        assert "spent" not in out and "published" not in out
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == 0
        assert ledger["closed"] == [[closed_campaign["cid"], closed_campaign["not_before"]]]
        # a replay of the old (validly signed) config is refused: the id was closed
        collector.publish("ldp/gone/config", closed_campaign["config"])
        code, out = run()
        assert code == device_runner.EXIT_REFUSED and "refused config closed:" in out, out
        assert collector.barrier() == []
    finally:
        collector.close()
    assert read_ledger(state)["spent_milli"] == 0


def test_fleet_refuses_a_closed_campaign(mosquitto, closed_campaign):
    proc = cli("fleet", "--broker", mosquitto.url, "--campaign", "gone", "--trusted-keys",
               str(closed_campaign["key"]) + ".pub", "--devices", "10")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is closed" in proc.stderr


def test_close_without_the_key_changes_nothing(mosquitto, tmp_path):
    key = tmp_path / "k.key"
    write_key_files(key)
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    assert cli("campaign", "create", "--broker", mosquitto.url, "--state", state, "--signing-key",
               str(key), "--name", "keep", "--mechanism", "olh", "--epsilon", "2",
               "--domain", "16").returncode == 0
    key.unlink()
    proc = cli("campaign", "close", "keep", "--state", state, "--broker", mosquitto.url)
    assert proc.returncode == 2 and "signing_key" in proc.stderr, proc.stderr
    with Store(state) as store:
        assert store.require_campaign("keep").state == "open"
    status = json.loads(cli("campaign", "status", "keep", "--state", state, "--json").stdout)
    assert status["state"] == "open"
