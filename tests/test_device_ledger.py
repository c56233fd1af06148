"""The device's privacy-budget ledger on the real MicroPython interpreter (spec §6): one report
per (campaign, phase), spent and memoised on flash before it leaves; a repeated trigger re-sends
the memo; an exhausted budget means no report; a crash between the ledger write and the publish
re-sends the memo on restart instead of spending again; a corrupt ledger stops the device."""
import json

from device_support import FLEET_KEY, ReportCollector, config_doc
from ldpfleet import config as campaign_config
from ldpfleet import device_runner


def device(tmp_path, budget=10000, cap=4000, value=9, name="dev-1"):
    return device_runner.prepare_device(tmp_path / name, name, FLEET_KEY, value=value,
                                        eps_cap_milli=cap, lifetime_budget_milli=budget)


def run(state, broker, campaign, **kw):
    return device_runner.run_device(state, "127.0.0.1", broker.port, campaign, wait=40, **kw)


def start_campaign(collector, name, eps_milli=2000):
    doc = config_doc(name, eps_milli=eps_milli)
    collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, FLEET_KEY))
    return doc


def test_repeated_trigger_resends_the_memoised_report(mosquitto, tmp_path):
    state = device(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        doc = start_campaign(collector, "temp")
        first = run(state, mosquitto, "temp")
        assert first.returncode == 0 and "spent phase=1 seq=0" in first.stdout, first.stdout
        ledger = device_runner.read_ledger(state)
        second = run(state, mosquitto, "temp")
        assert second.returncode == 0 and "memo phase=1" in second.stdout, second.stdout
        assert "spent" not in second.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    assert len(reports) == 2 and reports[0] == reports[1]
    assert device_runner.read_ledger(state) == ledger
    assert ledger["spent_milli"] == 2000 and ledger["next_seq"] == 1
    assert ledger["reports"] == {"%d:1" % doc["campaign_id"]: [0, 2000, reports[0][1].hex()]}


def test_exhausted_budget_means_no_report(mosquitto, tmp_path):
    state = device(tmp_path, budget=3000)
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "first")
        assert run(state, mosquitto, "first").returncode == 0
        before = (state / "ledger.json").read_bytes()
        start_campaign(collector, "second")
        refused = run(state, mosquitto, "second")
        assert refused.returncode == device_runner.EXIT_REFUSED, refused.stdout
        assert "refused config lifetime_budget:" in refused.stdout
        assert (state / "ledger.json").read_bytes() == before
        # the memo of the first campaign still goes out: re-sending spends nothing
        again = run(state, mosquitto, "first")
        assert again.returncode == 0 and "memo phase=1" in again.stdout, again.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    assert [t for t, _ in reports] == ["ldp/first/r/dev-1"] * 2
    assert reports[0] == reports[1]
    assert (state / "ledger.json").read_bytes() == before


def test_crash_between_ledger_write_and_publish_resends_on_restart(mosquitto, tmp_path):
    state = device(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "crashy")
        crashed = run(state, mosquitto, "crashy", extra_args=["--crash-point", "after-commit"])
        assert crashed.returncode == device_runner.EXIT_CRASH_POINT, crashed.stdout
        assert collector.barrier() == []  # the report never left
        ledger = device_runner.read_ledger(state)
        assert ledger["spent_milli"] == 2000
        (memo,) = ledger["reports"].values()
        # a crash in the middle of a later ledger write leaves a stray temp file: ignored
        (state / "ledger.json.tmp").write_text('{"spent_milli": 0, "next')
        restarted = run(state, mosquitto, "crashy")
        assert restarted.returncode == 0, restarted.stdout
        assert "memo phase=1" in restarted.stdout and "spent" not in restarted.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    assert [p.hex() for _, p in reports] == [memo[2]]
    assert device_runner.read_ledger(state) == ledger
    assert not (state / "ledger.json.tmp").exists()


def test_corrupt_ledger_stops_the_device(mosquitto, tmp_path):
    state = device(tmp_path)
    (state / "ledger.json").write_text('{"spent_milli": 12')
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "temp")
        proc = run(state, mosquitto, "temp")
        assert proc.returncode == device_runner.EXIT_CORRUPT_LEDGER, proc.stdout
        assert "stopped ledger:" in proc.stdout and "cannot be read" in proc.stdout, proc.stdout
        assert collector.barrier() == []
    finally:
        collector.close()
    assert (state / "ledger.json").read_text() == '{"spent_milli": 12'


def test_sequence_numbers_rise_across_campaigns(mosquitto, tmp_path):
    state = device(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        for name in ("a", "b", "c"):
            start_campaign(collector, name, eps_milli=1000)
            assert run(state, mosquitto, name).returncode == 0
        reports = collector.barrier()
    finally:
        collector.close()
    assert [int.from_bytes(p[8:12], "little") for _, p in reports] == [0, 1, 2]
    ledger = device_runner.read_ledger(state)
    assert ledger["spent_milli"] == 3000 and ledger["next_seq"] == 3
    assert json.dumps(sorted(v[0] for v in ledger["reports"].values())) == "[0, 1, 2]"
