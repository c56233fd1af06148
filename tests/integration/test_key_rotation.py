"""Ed25519 trust and key rotation (spec §5.1-§5.3), against a private Mosquitto.

* `campaign rotate-keys` publishes the new trusted set signed by the old key, signs every
  campaign's retained messages again with the new key, and refuses the retired key afterwards.
* Both clients (real MicroPython, C): a device provisioned with key A applies a rotation to B
  (persisted in its ledger), then accepts B's config and reports; A's signatures are refused from
  then on, also after a restart; a rotation with a lower serial is skipped; a rotation signed by
  an untrusted key is refused without ending the run.
"""
import hashlib
import json
import subprocess
import sys
import time

import pytest

from support.c_client import build_client, run_client
from support.devices import OTHER_KEY, SIGNING_KEY, ReportCollector, config_doc, write_key_files
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.service.state.store import Store
from ldpfleet.core.signing import SigningKey

NEW_KEY = SigningKey.from_seed(bytes(range(2, 34)))
KEYS_TOPIC = "ldpfleet/keys"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpfleet.cli"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=120)


def rotation(serial, keys, signer):
    return campaign_config.sign(campaign_config.make_keys(serial, [k.public for k in keys]), signer)


def test_rotate_keys_re_signs_campaigns_and_retires_the_old_key(mosquitto, tmp_path):
    old, new = tmp_path / "a.key", tmp_path / "b.key"
    write_key_files(old, SIGNING_KEY)
    write_key_files(new, NEW_KEY)
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    base = ["--broker", mosquitto.url, "--state", state]
    for name in ("one", "two"):
        made = cli("campaign", "create", *base, "--signing-key", old, "--name", name,
                   "--mechanism", "olh", "--epsilon", 2, "--domain", 16)
        assert made.returncode == 0, made.stderr
    assert cli("campaign", "close", "two", *base).returncode == 0
    out = cli("campaign", "rotate-keys", *base, "--signing-key", old, "--new-key", new, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary == {"serial": 1, "trusted": [NEW_KEY.kid], "signed_by": SIGNING_KEY.kid,
                       "campaigns_resigned": ["one", "two"]}
    collector = ReportCollector(mosquitto.port, topic="#")
    try:
        retained = dict(collector.barrier())
    finally:
        collector.close()
    keys = campaign_config.check_keys(campaign_config.verify(retained[KEYS_TOPIC], SIGNING_KEY))
    assert keys["serial"] == 1 and keys["keys"] == [NEW_KEY.public.to_doc()]
    assert campaign_config.verify(retained["ldp/one/config"], NEW_KEY)["type"] == "config"
    assert campaign_config.verify(retained["ldp/two/config"], NEW_KEY)["type"] == "close"
    with pytest.raises(Exception):
        campaign_config.verify(retained["ldp/one/config"], SIGNING_KEY)
    # the retired key signs nothing any more; the new one is used by default
    refused = cli("campaign", "create", *base, "--signing-key", old, "--name", "three",
                  "--mechanism", "olh", "--epsilon", 2, "--domain", 16)
    assert refused.returncode == 2 and "retired by key rotation 1" in refused.stderr, refused.stderr
    again = cli("campaign", "rotate-keys", *base, "--signing-key", old, "--new-key", new)
    assert again.returncode == 2 and "signing_key" in again.stderr
    assert cli("campaign", "close", "one", *base).returncode == 0
    with Store(state) as store:
        assert store.meta("keys.serial") == "1"
        assert campaign_config.verify(store.require_campaign("one").config_payload, NEW_KEY)


def run(client, state, port, campaign, value=3, wait=30):
    if client == "c":
        proc = run_client(build_client(), state, port, campaign, value, wait=wait)
        return proc.returncode, proc.stdout + proc.stderr
    proc = run_device(state, "127.0.0.1", port, campaign, value=value, wait=wait)
    return proc.returncode, proc.stdout


@pytest.mark.parametrize("client", ["micropython", "c"])
def test_devices_follow_a_rotation(mosquitto, tmp_path, client):
    state = device_runner.prepare_device(tmp_path / client, "rot-" + client, SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=50000)
    collector = ReportCollector(mosquitto.port)
    try:
        # a rotation signed by a key the device does not trust changes nothing
        collector.publish(KEYS_TOPIC, rotation(5, [OTHER_KEY], OTHER_KEY))
        collector.publish("ldp/rot1/config", campaign_config.sign(config_doc("rot1"), SIGNING_KEY))
        code, out = run(client, state, mosquitto.port, "rot1")
        assert code == 0 and "refused keys kid" in out and "published" in out, out
        assert "keys" not in read_ledger(state)

        # A signs the rotation to B; B signs the config: applied, persisted, accepted
        collector.publish(KEYS_TOPIC, rotation(1, [NEW_KEY], SIGNING_KEY))
        collector.publish("ldp/rot2/config", campaign_config.sign(config_doc("rot2"), NEW_KEY))
        code, out = run(client, state, mosquitto.port, "rot2")
        assert code == 0 and "keys serial=1 trusted=1" in out and "published" in out, out
        held = read_ledger(state)["keys"]
        assert held == {"serial": 1, "keys": [NEW_KEY.public.to_doc()],
                        "sha256": hashlib.sha256(rotation(1, [NEW_KEY], SIGNING_KEY)).hexdigest()}

        # after a restart: the same rotation is skipped, A's config is refused (kid)
        collector.publish("ldp/rot3/config", campaign_config.sign(config_doc("rot3"), SIGNING_KEY))
        code, out = run(client, state, mosquitto.port, "rot3")
        assert code == device_runner.EXIT_REFUSED, out
        assert "keys skip serial=1" in out and "refused config kid" in out, out
        assert "published" not in out
        reports = collector.barrier()
    finally:
        collector.close()
    assert sorted(t for t, _ in reports) == ["ldp/rot1/r/rot-" + client, "ldp/rot2/r/rot-" + client]


def test_status_is_signed_and_a_forged_one_is_ignored(mosquitto, tmp_path):
    """The retained status (spec §5.4) is a signed envelope of type status; the load generator
    verifies it like the config and ignores one that does not verify (a forged "phase 2")."""
    from ldpfleet.loadgen.campaign import fetch_campaign
    key = tmp_path / "a.key"
    write_key_files(key, SIGNING_KEY)
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    made = cli("campaign", "create", "--broker", mosquitto.url, "--state", state, "--signing-key",
               key, "--name", "st", "--protocol", "ldpminer-rappor", "--epsilon", 2,
               "--domain", "0-31", "--set-size", 4, "--top", 2)
    assert made.returncode == 0, made.stderr
    collector = ReportCollector(mosquitto.port, topic="#")
    try:
        retained = dict(collector.barrier())
        status = campaign_config.verify(retained["ldp/st/status"], SIGNING_KEY)
        assert status["type"] == "status" and status["campaign"] == "st" and status["phase"] == 1
        assert fetch_campaign(mosquitto.url, "st", SIGNING_KEY).phase == 1
        collector.publish("ldp/st/status", json.dumps(dict(status, phase=2)).encode())
        assert fetch_campaign(mosquitto.url, "st", SIGNING_KEY).phase == 1
        collector.publish("ldp/st/status", campaign_config.sign(dict(status, phase=2), OTHER_KEY))
        assert fetch_campaign(mosquitto.url, "st", SIGNING_KEY).phase == 1
        collector.publish("ldp/st/status", campaign_config.sign(dict(status, phase=2), SIGNING_KEY))
        with pytest.raises(Exception) as err:  # a genuine phase 2 without its message
            fetch_campaign(mosquitto.url, "st", SIGNING_KEY)
        assert getattr(err.value, "field", None) == "phase2"
    finally:
        collector.close()


@pytest.mark.parametrize("client", ["agent", "c-agent"])
def test_agents_follow_a_rotation(mosquitto, tmp_path, client):
    """A live-metric agent (spec §5.4; MicroPython ldp.agent, C --metric): a discovered config
    signed by a key it does not trust yet is refused (kid), tried again once the rotation to
    that key arrives, and joined; afterwards a config signed by the retired key is refused."""
    from test_device_equivalence import agent_cmd, c_agent_cmd
    state = device_runner.prepare_device(tmp_path / client, "rot-" + client, SIGNING_KEY,
                                         eps_cap_milli=8000, lifetime_budget_milli=50000)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/rota/config",
                          campaign_config.sign(dict(config_doc("rota"), metric="temp"), NEW_KEY))
        argv, env = (agent_cmd if client == "agent" else c_agent_cmd)(tmp_path, state,
                                                                      mosquitto.port, None, 2)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        time.sleep(3)
        collector.publish(KEYS_TOPIC, rotation(1, [NEW_KEY], SIGNING_KEY))
        collector.publish("ldp/rotb/config",
                          campaign_config.sign(dict(config_doc("rotb"), metric="temp"), SIGNING_KEY))
        out, _ = proc.communicate(timeout=60)
        reports = collector.barrier()
    finally:
        collector.close()
    assert proc.returncode == 0, out
    assert "refused config rota kid" in out and "keys serial=1 trusted=1" in out, out
    assert "joined campaign rota metric temp" in out and "refused config rotb kid" in out, out
    assert read_ledger(state)["keys"]["serial"] == 1
    assert sorted(t for t, _ in reports) == ["ldp/rota/r/rot-" + client]
