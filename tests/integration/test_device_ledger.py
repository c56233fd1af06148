"""The device's privacy-budget ledger on the real MicroPython interpreter (spec §7.2, §7.4): one
report per (campaign, phase), spent and memoised on flash before it leaves; a repeated trigger
re-sends the memo; an exhausted budget means no report; a reset at any step of a ledger write
never lowers the spend nor loses a memo (two checksummed generations, nothing deleted or
renamed, so FAT's delete-then-rename cannot bite); a device without a valid ledger stops.

`shc` (spec §3.1, §7.4), on both clients (the MicroPython interpreter and the C client): the
phase-1 bit x is in the very generation that holds the phase-1 memo (a reset after that commit
finds both, a reset half-way through it neither), it survives restarts, and a device restarted
between the phases -- by the same client or the other one, on the same state directory --
reports phase 2 from its ledger (the phase-1 row, whatever value it is started with now)."""
import json
import subprocess

import pytest

from support.c_client import build_client, client_cmd, client_env, run_client
from support.devices import SIGNING_KEY, ReportCollector, config_doc
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core import protocol
from ldpfleet.core.protocols import ldpminer


def device(tmp_path, budget=10000, cap=4000, value=9, name="dev-1"):
    return device_runner.prepare_device(tmp_path / name, name, SIGNING_KEY, value=value,
                                        eps_cap_milli=cap, lifetime_budget_milli=budget)


def run(state, broker, campaign, **kw):
    return run_device(state, "127.0.0.1", broker.port, campaign, wait=40, **kw)


def start_campaign(collector, name, eps_milli=2000):
    doc = config_doc(name, eps_milli=eps_milli)
    collector.publish("ldp/%s/config" % name, campaign_config.sign(doc, SIGNING_KEY))
    return doc


def ledger_files(state):
    return {name: (state / name).read_bytes() for name in device_runner.LEDGER_FILES
            if (state / name).exists()}


def test_provisioning_writes_generation_zero(tmp_path):
    state = device(tmp_path)
    (gen, doc), = device_runner.ledger_generations(state)
    assert gen == 0 and doc == {"spent_milli": 0, "reports": {}, "closed": []}
    device(tmp_path)  # provisioning again never overwrites a ledger
    assert device_runner.ledger_generations(state) == [(0, doc)]


def test_repeated_trigger_resends_the_memoised_report(mosquitto, tmp_path):
    state = device(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        doc = start_campaign(collector, "temp")
        first = run(state, mosquitto, "temp")
        assert first.returncode == 0 and "spent phase=1 eps_milli=2000" in first.stdout, first.stdout
        ledger = read_ledger(state)
        second = run(state, mosquitto, "temp")
        assert second.returncode == 0 and "memo phase=1" in second.stdout, second.stdout
        assert "spent" not in second.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    assert len(reports) == 2 and reports[0] == reports[1]
    assert read_ledger(state) == ledger
    nonce = int.from_bytes(reports[0][1][8:12], "little")  # the header's dedupe field (spec §3)
    assert ledger["spent_milli"] == 2000
    assert ledger["reports"] == {"%d:1" % doc["campaign_id"]: [nonce, 2000, reports[0][1].hex()]}


def test_exhausted_budget_means_no_report(mosquitto, tmp_path):
    state = device(tmp_path, budget=3000)
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "first")
        assert run(state, mosquitto, "first").returncode == 0
        before = ledger_files(state)
        start_campaign(collector, "second")
        refused = run(state, mosquitto, "second")
        assert refused.returncode == device_runner.EXIT_REFUSED, refused.stdout
        assert "refused config lifetime_budget:" in refused.stdout
        assert ledger_files(state) == before
        # the memo of the first campaign still goes out: re-sending spends nothing
        again = run(state, mosquitto, "first")
        assert again.returncode == 0 and "memo phase=1" in again.stdout, again.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    assert [t for t, _ in reports] == ["ldp/first/r/dev-1"] * 2
    assert reports[0] == reports[1]
    assert ledger_files(state) == before


def test_crash_between_ledger_write_and_publish_resends_on_restart(mosquitto, tmp_path):
    state = device(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "crashy")
        crashed = run(state, mosquitto, "crashy", extra_args=["--crash-point", "after-commit"])
        assert crashed.returncode == device_runner.EXIT_CRASH_POINT, crashed.stdout
        assert collector.barrier() == []  # the report never left
        ledger = read_ledger(state)
        assert ledger["spent_milli"] == 2000
        (memo,) = ledger["reports"].values()
        restarted = run(state, mosquitto, "crashy")
        assert restarted.returncode == 0, restarted.stdout
        assert "memo phase=1" in restarted.stdout and "spent" not in restarted.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    assert [p.hex() for _, p in reports] == [memo[2]]
    assert read_ledger(state) == ledger


def test_reset_half_way_through_a_ledger_write_loses_nothing(mosquitto, tmp_path):
    """A reset at every step of a commit, on the real interpreter: before it (nothing written),
    half-way through writing the next generation (a torn file: the previous generation is
    intact, nothing was published), after it but before the publish (the memo goes out on
    restart). Spend never goes down and no memo is lost, whatever the filesystem's rename does:
    the ledger never renames or deletes."""
    state = device(tmp_path, budget=10000)
    collector = ReportCollector(mosquitto.port)
    spends = []
    try:
        start_campaign(collector, "one", eps_milli=1000)
        assert run(state, mosquitto, "one").returncode == 0
        committed = read_ledger(state)
        spends.append(committed["spent_milli"])
        start_campaign(collector, "two", eps_milli=1000)
        torn = run(state, mosquitto, "two", extra_args=["--crash-point", "mid-ledger-write"])
        assert torn.returncode == device_runner.EXIT_CRASH_POINT, torn.stdout
        assert collector.barrier()[1:] == []  # only campaign one's report ever left
        assert len(device_runner.ledger_generations(state)) == 1  # the torn file is invalid
        assert read_ledger(state) == committed  # spend and memos as before
        spends.append(read_ledger(state)["spent_milli"])
        again = run(state, mosquitto, "one")  # the memo of campaign one survived the tear
        assert again.returncode == 0 and "memo phase=1" in again.stdout, again.stdout
        done = run(state, mosquitto, "two")
        assert done.returncode == 0 and "spent phase=1" in done.stdout, done.stdout
        spends.append(read_ledger(state)["spent_milli"])
        reports = collector.barrier()
    finally:
        collector.close()
    assert spends == sorted(spends) and spends[-1] == 2000
    assert [t for t, _ in reports] == ["ldp/one/r/dev-1", "ldp/one/r/dev-1", "ldp/two/r/dev-1"]
    assert reports[0] == reports[1]


@pytest.mark.parametrize("damage", ["both-corrupt", "missing"])
def test_no_valid_ledger_stops_the_device(mosquitto, tmp_path, damage):
    state = device(tmp_path)
    for name in device_runner.LEDGER_FILES:
        path = state / name
        if damage == "missing":
            path.unlink(missing_ok=True)
        else:
            path.write_text('{"gen": 1, "doc": {"spent_milli": 0, "reports": {}, "closed": []}, '
                            '"sha256": "00"}')
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "temp")
        proc = run(state, mosquitto, "temp")
        assert proc.returncode == device_runner.EXIT_CORRUPT_LEDGER, proc.stdout
        assert "stopped ledger:" in proc.stdout, proc.stdout
        assert ("no valid generation" if damage == "both-corrupt" else "no ledger") in proc.stdout
        assert collector.barrier() == []
    finally:
        collector.close()
    assert not (state / "ledger.0").exists() or damage == "both-corrupt"


def test_nonces_are_random_per_campaign_not_a_counter(mosquitto, tmp_path):
    """The header's nonce is drawn from the OS RNG per (campaign, phase) (spec §3): it neither
    counts the device's past reports nor links its campaigns."""
    state = device(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        for name in ("a", "b", "c"):
            start_campaign(collector, name, eps_milli=1000)
            assert run(state, mosquitto, name).returncode == 0
        reports = collector.barrier()
    finally:
        collector.close()
    nonces = [int.from_bytes(p[8:12], "little") for _, p in reports]
    assert len(set(nonces)) == 3 and nonces != [0, 1, 2]  # P(collision) ~ 3/2^32
    ledger = read_ledger(state)
    assert ledger["spent_milli"] == 3000
    assert sorted(v[0] for v in ledger["reports"].values()) == sorted(nonces)
    assert "next_seq" not in json.dumps(ledger)


@pytest.mark.parametrize("step", ["before-ledger-write", "mid-ledger-write", "after-ledger-write"])
def test_reset_at_every_step_of_a_ledger_commit(mosquitto, tmp_path, step):
    """The same three steps as the C client's test (tests/test_c_client.py): before the file is
    opened, half-way through writing it, after it is written and synced. The spend never goes
    below what was committed, the older generation's memo survives, a complete generation counts
    (its report goes out from the memo, not drawn again), and the campaign is spent exactly once.
    The ledger never renames or deletes, so a filesystem whose rename deletes the target first
    (FAT) has no window in which the only copy is gone."""
    state = device(tmp_path, budget=10000)
    collector = ReportCollector(mosquitto.port)
    try:
        start_campaign(collector, "one", eps_milli=1000)
        assert run(state, mosquitto, "one").returncode == 0
        committed = read_ledger(state)
        start_campaign(collector, "two", eps_milli=1000)
        crashed = run(state, mosquitto, "two", extra_args=["--crash-point", step])
        assert crashed.returncode == device_runner.EXIT_CRASH_POINT, crashed.stdout
        assert [t for t, _ in collector.barrier()] == ["ldp/one/r/dev-1"]  # nothing of "two" left
        after = read_ledger(state)
        assert after["spent_milli"] >= committed["spent_milli"]
        assert after["reports"]["%d:1" % config_doc("one")["campaign_id"]] == \
            committed["reports"]["%d:1" % config_doc("one")["campaign_id"]]
        resumed = run(state, mosquitto, "two")
        assert resumed.returncode == 0, resumed.stdout
        reports = collector.barrier()
    finally:
        collector.close()
    final = read_ledger(state)
    assert final["spent_milli"] == 2000  # campaign two spent exactly once
    assert [t for t, _ in reports] == ["ldp/one/r/dev-1", "ldp/two/r/dev-1"]
    if step == "after-ledger-write":
        assert after == final and "memo phase=1" in resumed.stdout
    else:
        assert after == committed and "spent phase=1" in resumed.stdout


# --- shc: the phase-1 bit x in the ledger (spec §3.1, §7.4) -----------------------------------

SHC_CANDIDATES = [3, 8, 21]


def shc_campaign(name):
    return config_doc(name, phases=ldpminer.campaign_phases("lm-sho", 3000, 2, 3, 128),
                      domain={"type": "int", "size": 32})


def run_client_kind(kind, state, broker, campaign, value, crash=None, wait=40):
    """One --once run of the MicroPython device or the C client; (exit code, output). `crash`: a
    ledger step (before-ledger-write / mid-ledger-write / after-ledger-write) or after-commit.
    Before the phase-2 message is out a --once device waits for it: give it a short `wait`
    (it then exits EXIT_TIMEOUT having delivered phase 1)."""
    if kind == "micropython":
        extra = ["--crash-point", crash] if crash else []
        proc = run_device(state, "127.0.0.1", broker.port, campaign, value=value,
                                        wait=wait, extra_args=extra)
        return proc.returncode, proc.stdout
    env = client_env()
    extra = []
    if crash == "after-commit":
        extra = ["--crash-point", "after-commit"]
    elif crash:
        env = dict(env, LDPC_LEDGER_CRASH=crash.replace("-ledger", ""))
    argv = client_cmd(build_client(), state, broker.port, campaign, value, once=True,
                      timeout=max(1, wait - 5), extra=extra)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=wait, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def shc_state(tmp_path, name="shc-1"):
    return device(tmp_path, budget=20000, cap=8000, value=None, name=name)


@pytest.mark.parametrize("crash", ["after-commit", "after-ledger-write", "mid-ledger-write"])
@pytest.mark.parametrize("kind", ["micropython", "c"])
def test_shc_bit_is_committed_with_the_phase1_memo(mosquitto, tmp_path, kind, crash):
    """A reset right after the phase-1 commit (before the report leaves) finds memo and x in
    the same new generation; a reset half-way through writing it finds neither (the torn file
    is invalid, generation 0 stands). The restarted device then completes phase 1 exactly once:
    from the memo after a full commit (x unchanged), fresh after the torn one."""
    cfg = shc_campaign("shc-crash")
    cid = cfg["campaign_id"]
    state = shc_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % cfg["campaign"], campaign_config.sign(cfg, SIGNING_KEY))
        code, out = run_client_kind(kind, state, mosquitto, cfg["campaign"], [3, 4, 5], crash)
        assert code == device_runner.EXIT_CRASH_POINT, out
        assert collector.barrier() == []  # the report never left
        gens = dict(device_runner.ledger_generations(state))
        if crash == "mid-ledger-write":
            assert list(gens) == [0] and read_ledger(state) is None
        else:
            assert sorted(gens) == [0, 1]  # one commit: memo, spend and x together
            doc = gens[1]
            assert list(doc["reports"]) == ["%d:1" % cid] and doc["spent_milli"] == 1500
            assert list(doc["shc"]) == [str(cid)] and doc["shc"][str(cid)] in (0, 1)
        code, out = run_client_kind(kind, state, mosquitto, cfg["campaign"], [3, 4, 5], wait=10)
        assert code == device_runner.EXIT_TIMEOUT, out  # phase 1 delivered, waits for phase 2
        reports = collector.barrier()
    finally:
        collector.close()
    final = read_ledger(state)
    assert [p[2] for _, p in reports] == [1] and reports[0][1].hex() == final["reports"]["%d:1" % cid][2]
    assert final["spent_milli"] == 1500 and list(final["shc"]) == [str(cid)]
    if crash != "mid-ledger-write":
        assert final == gens[1] and "memo phase=1" in out and "spent" not in out


@pytest.mark.parametrize("first,second", [("micropython", "micropython"), ("c", "c"),
                                          ("micropython", "c"), ("c", "micropython")])
def test_shc_restarted_between_phases_reports_phase2_from_its_ledger(mosquitto, tmp_path, first,
                                                                     second):
    """Phase 1 while only the config is out; the device stops. The phase-2 message comes; the
    device starts again (the same client or the other one on the same state directory, with
    another value): it re-sends its phase-1 memo, reports phase 2 with the phase-1 row and
    spends eps2 once; x stays in the ledger. A third start re-sends both memos."""
    cfg = shc_campaign("shc-restart")
    cid = cfg["campaign_id"]
    eps1, eps2 = (ph["eps_milli"] for ph in cfg["phases"])
    state = shc_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/%s/config" % cfg["campaign"], campaign_config.sign(cfg, SIGNING_KEY))
        code, out1 = run_client_kind(first, state, mosquitto, cfg["campaign"], [3, 8, 9], wait=10)
        assert code == device_runner.EXIT_TIMEOUT and "spent phase=1" in out1, out1
        after1 = read_ledger(state)
        phase1 = collector.barrier()
        collector.publish("ldp/%s/phase2" % cfg["campaign"],
                          campaign_config.sign(ldpminer.phase2_message(cfg, SHC_CANDIDATES), SIGNING_KEY))
        code, out2 = run_client_kind(second, state, mosquitto, cfg["campaign"], [30, 31])
        assert code == 0, out2
        after2 = read_ledger(state)
        both = collector.barrier()
        code, out3 = run_client_kind(first, state, mosquitto, cfg["campaign"], None)
        assert code == 0, out3
        third = collector.barrier()[len(both):]
    finally:
        collector.close()
    assert "memo phase=1" in out2 and "spent phase=2 eps_milli=%d" % eps2 in out2, out2
    assert "spent phase=1" not in out2
    assert [p[2] for _, p in phase1] == [1]
    p1, p2 = phase1[0][1], both[-1][1]
    assert both[:-1] == phase1 + phase1 and p2[2] == 2  # phase 1 again (the memo), then phase 2
    assert p2[1] == p1[1] == protocol.MECHANISM_IDS["shc"] and p2[12:16] == p1[12:16]
    ldpminer.phase2_mechanism(cfg, SHC_CANDIDATES).check(p2)
    assert after2["shc"] == after1["shc"] and after1["shc"][str(cid)] in (0, 1)
    assert after2["spent_milli"] == eps1 + eps2
    assert after2["reports"]["%d:1" % cid] == after1["reports"]["%d:1" % cid]
    assert after2["reports"]["%d:2" % cid][2] == p2.hex()
    assert sorted(p for _, p in third) == sorted([p1, p2]) and "spent" not in out3
    assert read_ledger(state) == after2
