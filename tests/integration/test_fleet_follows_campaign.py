"""The load generator draws and verifies as the campaign's devices do: sets of the campaign's
declared length (an svim campaign's phase 1 samples one item of a set of --set-size items,
so the config's phase-1 `l = 1` is not the devices' set length), and the trusted keys after a
retained key rotation (spec §5.3), against a private Mosquitto (no serve: --no-ack)."""
import subprocess
import sys

import pytest

from ldpfleet.core import config as campaign_config
from ldpfleet.core.errors import ConfigError
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.loadgen.campaign import fetch_campaign
from ldpfleet.loadgen.items import campaign_set_size
from ldpfleet.core.signing import SigningKey, read_public_keys
from support.devices import OTHER_KEY, SIGNING_KEY, write_key_files

NEW_KEY = SigningKey.from_seed(bytes(range(2, 34)))


def cli(*args):
    out = subprocess.run([sys.executable, "-m", "ldpfleet.cli"] + [str(a) for a in args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def base(mosquitto, tmp_path):
    key = tmp_path / "a.key"
    write_key_files(key, SIGNING_KEY)
    return ["--broker", mosquitto.url, "--state", "sqlite:///%s" % (tmp_path / "agg.db"),
            "--signing-key", key]


def test_fleet_draws_the_campaigns_set_length_in_both_phases(mosquitto, base):
    """svim with --set-size 6: every simulated device holds 6 distinct items (was 1, the
    config's phase-1 l), in the phase it reports in; an LDPMiner campaign keeps its l; an
    explicit --set-size still wins."""
    cli("campaign", "create", *base, "--name", "sv", "--protocol", "svim", "--epsilon", 2,
        "--domain", "0-255", "--set-size", 6, "--top", 4, "--no-ack")
    cli("campaign", "create", *base, "--name", "lm", "--protocol", "ldpminer-rappor",
        "--epsilon", 4, "--domain", "0-255", "--set-size", 5, "--top", 4, "--no-ack")
    view = fetch_campaign(mosquitto.url, "sv", SIGNING_KEY.public)
    assert [p["params"]["l"] for p in view.config["phases"]] == [1, 6]
    assert view.config["phases"][1]["fallback"]["params"]["l"] == 6
    assert campaign_set_size(view.config) == 6
    for name, length, given in (("sv", 6, None), ("lm", 5, None), ("sv", 3, 3)):
        result = run_fleet(mosquitto.url, name, SIGNING_KEY.public, FleetOptions(
            devices=300, seed=5, set_size=given, ack_wait=0))
        reporting = len(result.device_ids["simulated"])
        assert reporting > 0
        assert sum(result.true_counts.values()) == length * reporting, (name, length)


def test_fleet_follows_a_key_rotation_as_devices_do(mosquitto, base, tmp_path):
    """After `campaign rotate-keys` from A to B the retained configs are signed by B: a fleet
    holding A applies the retained rotation (signed by A) and reports; one holding B already
    ignores the rotation it cannot verify and reports; one holding another key is refused."""
    new = tmp_path / "b.key"
    write_key_files(new, NEW_KEY)
    cli("campaign", "create", *base, "--name", "one", "--mechanism", "olh", "--epsilon", 2,
        "--domain", 16, "--no-ack")
    cli("campaign", "rotate-keys", *base[:4], "--signing-key", base[5], "--new-key", new)
    with pytest.raises(ConfigError) as refused:
        campaign_config.verify(_retained_config(mosquitto.url), SIGNING_KEY.public)
    assert refused.value.field == "kid"  # the config is B's now: A alone cannot verify it
    assert fetch_campaign(mosquitto.url, "one", [SIGNING_KEY.public]).config["campaign"] == "one"
    for trusted in (read_public_keys(str(tmp_path / "a.key.pub")), [NEW_KEY.public]):
        result = run_fleet(mosquitto.url, "one", trusted, FleetOptions(devices=20, seed=1,
                                                                      ack_wait=0))
        assert result.sent == 20
    with pytest.raises(ConfigError) as other:
        run_fleet(mosquitto.url, "one", [OTHER_KEY.public], FleetOptions(devices=5, ack_wait=0))
    assert other.value.field == "kid"


def _retained_config(url):
    """The raw retained config payload of campaign `one`."""
    from ldpfleet.loadgen.campaign import _retained
    from ldpfleet.mqtt.client import BrokerSettings
    return _retained(BrokerSettings.from_url(url), "one", 10.0)["config"]
