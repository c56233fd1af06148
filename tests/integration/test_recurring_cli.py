"""`ldpfleet campaign create --every` against a real broker (protocol_spec/v2 §3.4, §5.4): the
retained signed config carries the schedule and passes check_config with the right R; `campaign
list`, `campaign status` and the signed status message show the schedule, R and the round open
now; `--protocol auto --every` publishes the planner's memoised mechanism."""
import time

from ldpfleet.core import config as cfgmod
from ldpfleet.core import schedule
from ldpfleet.core.signing import read_signing_key, write_signing_key
from ldpfleet.service import Store
from ldpfleet.service.campaigns.manage import status_document
from support.devices import ReportCollector
from support.service import cli_json


def test_create_list_status_of_a_recurring_campaign(mosquitto, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LDPFLEET_CONFIG", raising=False)
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    state = "sqlite:///%s" % (tmp_path / "s.db")
    common = ["--broker", mosquitto.url, "--state", state, "--signing-key", key]
    before = int(time.time())
    made = cli_json(capsys, "campaign", "create", *common, "--name", "fw", "--mechanism",
                    "lgrr", "--epsilon", "2", "--eps1", "0.8", "--domain", "12", "--every",
                    "10m", "--rounds", "6", "--metric", "fw_version")
    doc = made["config"]
    assert doc["schedule"]["every_s"] == 600 and doc["schedule"]["rounds"] == 6
    assert before <= doc["schedule"]["start"] <= int(time.time())
    assert doc["not_after"] == doc["schedule"]["start"] + 6 * 600
    assert doc["phases"][0]["params"]["eps1_milli"] == 800
    assert cfgmod.check_config(doc) and schedule.check_schedule(doc) == 6

    auto = cli_json(capsys, "campaign", "create", *common, "--name", "err", "--protocol", "auto",
                    "--epsilon", "2", "--domain", "500", "--every", "1d", "--until",
                    str(before + 7 * 86400))
    assert auto["config"]["phases"][0]["mechanism"] == "loloha"  # n > 256: the only one that fits
    assert schedule.check_schedule(auto["config"]) == 7

    rows = {r["campaign"]: r for r in cli_json(capsys, "campaign", "list", "--state", state)}
    assert rows["fw"]["rounds"] == 6 and rows["fw"]["round"] == 1
    assert rows["fw"]["schedule"] == doc["schedule"]
    status = cli_json(capsys, "campaign", "status", "fw", "--state", state)
    assert status["schedule"]["rounds"] == 6 and status["schedule"]["round"] == 1
    assert status["schedule"]["per_round"] == []

    collector = ReportCollector(mosquitto.port, topic="ldp/#")  # the barrier's sentinel too
    try:
        retained = dict(collector.barrier())
    finally:
        collector.close()
    signer = read_signing_key(key).public
    assert cfgmod.verify(retained["ldp/fw/config"], signer) == doc
    published = cfgmod.verify(retained["ldp/fw/status"], signer)
    assert published["round"] == 1
    with Store(state) as store:
        assert status_document(store, store.require_campaign("fw"))["round"] == 1
