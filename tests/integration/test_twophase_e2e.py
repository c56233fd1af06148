"""Two-phase protocols end to end through real parts: a private mosquitto, `ldpfleet serve` as a
subprocess, campaigns made and advanced with the CLI (`campaign create --protocol`, `campaign
advance`, `estimate`), the fleet generator's simulated devices (C kernels), real MicroPython
device processes (device/) and C client processes (device/c_client), both of which keep their
own budget ledgers.

* LDPMiner (`ldpminer-rappor`: sampling SH over the domain, then sampling RAPPOR over the
  k_max candidates): every device reports in both phases; the real devices' ledgers hold
  eps1 + eps2; the answer's top-k are the two planted heavy hitters, and their phase-2
  frequencies lie within z = Phi^-1(1 - alpha/4), alpha = 1e-4, standard deviations of the
  truth, with the srappor estimator's exact variance (`SrapporMechanism.item_variances`, LDPMiner
  Prop. 3 with the realised flip probability; unbiased because after trimming (§4.4) no device
  holds more than l2 = k_max candidates). Devices that skipped the trimming would report their
  6-item sets with the phase-2 l = 4, which shrinks the estimates by 4/6 (about 0.3 here, ~6
  standard deviations), so the bound checks the trimming too.
* LDPLCM (cms for the sampled devices, then lcm for the others): the public sampling rule
  splits the fleet (real devices of both kinds in both phases, by the salt), each ledger holds
  only its own phase's eps, honest devices are never `wrong_phase_device`, a report from the
  wrong side of the rule is (in both directions); the final estimates are finite and the model
  calls the Zipf head high-frequent.

* svim's flat branch (spec §5.4 `fallback`): on flat data `campaign advance` publishes
  `"fallback": true`, phase-2 devices of every kind report the fallback over the whole domain,
  and `estimate` pools both phases within its standard deviations of the truth.

* LDPMiner-SH with correlated phases (`ldpminer-sh-opt`, mechanism `shc` in both phases, spec
  §3.1): real MicroPython and C devices run across both phases in one --once process each,
  beside simulated devices made by the aggregator's own `ShcMechanism` (phase 2 from each
  device's kept (t, y1, x)); the real devices report phase 2 from their ledgers (the phase-1
  row, x in the ledger, eps1 + eps2 spent), the answer's top-k are the planted items within z
  standard deviations of the truth (sh's variance at shc's phase-2 keep probability).

Both: accepted == sent in each phase (the per-phase sketch counts), nothing lost, a phase-2
report before `campaign advance` is counted as `phase_not_open`. The simulated devices draw from
fixed seeds and the campaigns have fixed salts; only the few real devices use the OS RNG.
"""
import math
import shutil

import numpy as np
import pytest
from scipy import stats

from support.c_client import build_client, start_client
from ldpfleet.provision import device_runner
from support.devices import read_ledger
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.core.protocols import ldplcm
from ldpfleet.service import BrokerSettings, Store
from support.service import cli_json, ServeProcess
from ldpfleet.mqtt.client import publish
from ldpfleet.core.signing import write_signing_key

pytestmark = pytest.mark.skipif(shutil.which("micropython") is None,
                                reason="micropython binary not installed")

SEED = 4242
DEVICES = 3000
ALPHA = 1e-4
PLANTED = (7, 42)


@pytest.fixture
def service(mosquitto, tmp_path):
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log")).start()
    key_file = str(tmp_path / "fleet.key")
    key = write_signing_key(key_file)
    yield mosquitto, serve, state, key_file, key
    serve.stop()


@pytest.fixture
def run_cli(capsys):
    """`ldpfleet ...` in this process; returns the parsed JSON it printed."""
    return lambda *args: cli_json(capsys, *args)


def settled(total):
    """Every sent message is accounted for once: accepted or rejected (duplicates aside)."""
    return lambda c: sum(v for k, v in c.items() if k not in ("received", "duplicate")) >= total


def sketch_counts(state, name):
    """Reports folded into each phase's committed sketch."""
    with Store(state) as store:
        return [(store.sketch_blob(name, phase) or (0, None))[0] for phase in (1, 2)]


def ledger(workdir, kind, device_id):
    return read_ledger("%s/%s/%s" % (workdir, kind, device_id))


def test_ldpminer_two_phases_find_the_planted_heavy_hitters(service, run_cli, tmp_path):
    broker, serve, state, key_file, key = service
    dist = tmp_path / "planted.txt"  # two heavy items, 62 light ones (weight 1 each)
    dist.write_text("".join("%d %d\n" % (i, 40 if i in PLANTED else 1) for i in range(64)))
    made = run_cli("campaign", "create", "--broker", broker.url, "--state", state,
                   "--signing-key", key_file, "--name", "lm", "--protocol", "ldpminer-rappor",
                   "--epsilon", 6, "--domain", 64, "--set-size", 6, "--top", 2, "--salt", 11)
    assert made["protocol"] == {"protocol": "ldpminer-rappor", "k": 2, "k_max": 4, "set_size": 6,
                                "budget_split": 0.5}
    phases = made["config"]["phases"]
    assert [(p["mechanism"], p["eps_milli"], p["params"]["l"]) for p in phases] == [
        ("sh", 3000, 6), ("srappor", 3000, 4)]
    workdir = str(tmp_path / "devices")
    run = dict(devices=DEVICES, micropython=3, c_clients=2, dist=str(dist), seed=SEED,
               workdir=workdir, c_client=str(build_client()))

    first = run_fleet(broker.url, "lm", key, FleetOptions(phase=1, **run))
    assert first.sent_by_kind == {"simulated": DEVICES, "micropython": 3, "c": 2}
    counters = serve.wait_counts("lm", settled(first.sent), timeout=60)
    assert counters.get("accepted") == first.sent and sketch_counts(state, "lm") == [first.sent, 0]

    early = bytearray(phase1_report(state, "lm"))  # a phase-2 report before `advance`
    early[2] = 2
    publish(BrokerSettings.from_url(broker.url), "ldp/lm/r/early-bird", bytes(early), retain=False)
    counters = serve.wait_counts("lm", settled(first.sent + 1), timeout=60)
    assert counters.get("phase_not_open") == 1

    advanced = run_cli("campaign", "advance", "lm", "--state", state, "--broker", broker.url)
    assert advanced["phase1_reports"] == first.sent and len(advanced["candidates"]) == 4
    assert set(PLANTED) <= set(advanced["candidates"])

    second = run_fleet(broker.url, "lm", key, FleetOptions(phase=2, **run))
    assert second.phase == 2 and second.sent_by_kind == first.sent_by_kind
    assert second.true_counts == first.true_counts  # the same devices hold the same sets
    counters = serve.wait_counts("lm", settled(first.sent + 1 + second.sent), timeout=60)
    assert counters.get("accepted") == first.sent + second.sent
    assert sketch_counts(state, "lm") == [first.sent, second.sent]
    rejected = {k: v for k, v in counters.items() if k not in ("received", "accepted", "duplicate")}
    assert rejected == {"phase_not_open": 1}  # lost 0; no wrong_phase_device, nothing malformed

    status = run_cli("campaign", "status", "lm", "--state", state)
    assert status["phase"] == 2 and [p["reports"] for p in status["phases"]] == [first.sent,
                                                                                   second.sent]
    for kind, dirname in (("micropython", "mp"), ("c", "c")):
        for device_id in second.device_ids[kind]:
            book = ledger(workdir, dirname, device_id)
            assert book["spent_milli"] == 6000, device_id  # eps1 + eps2
            assert sorted(book["reports"]) == ["%d:%d" % (made["campaign_id"], p) for p in (1, 2)]

    answer = run_cli("estimate", "lm", "--state", state)
    assert answer["protocol"] == "ldpminer-rappor" and answer["phase_reports"] == [first.sent,
                                                                                    second.sent]
    top = {row["item"]: row["frequency"] for row in answer["items"]}
    assert set(top) == set(PLANTED)
    with Store(state) as store:
        mech = store.require_campaign("lm").mechanism(2)
    n = second.sent
    z = stats.norm.ppf(1 - ALPHA / 4)
    for item in PLANTED:
        f = first.true_counts[item] / n
        sd = math.sqrt(float(mech.item_variances(n, [f])[0]))
        assert abs(top[item] - f) <= z * sd, (item, top[item], f, sd)
        assert abs(f * 4 / 6 - f) > z * sd  # untrimmed sets would be caught


def phase1_report(state, name):
    """A well-formed phase-1 report of the campaign (header fields right, body valid)."""
    with Store(state) as store:
        mech = store.require_campaign(name).mechanism(1)
    value = [[0, 1]] if mech.set_valued else np.array([0], np.uint32)
    return mech.perturb_batch(value, np.random.default_rng(1))[0].tobytes()


def test_ldplcm_sampled_phases_and_the_wrong_phase_rule(service, run_cli, tmp_path):
    broker, serve, state, key_file, key = service
    salt, ppm = 3, 300000
    made = run_cli("campaign", "create", "--broker", broker.url, "--state", state,
                   "--signing-key", key_file, "--name", "lc", "--protocol", "ldplcm",
                   "--epsilon", 4, "--domain", 64, "--sample-rate", 0.3, "--theta", 0.5,
                   "--sketch-k", 16, "--sketch-m", 64, "--salt", salt)
    cid = made["campaign_id"]
    assert [p["sample_rate_ppm"] for p in made["config"]["phases"]] == [ppm, ppm]
    assert made["protocol"]["theta"] == 0.5
    real = {kind: ["sim%d-%s-%d" % (SEED, kind, i) for i in range(count)]
            for kind, count in (("mp", 4), ("c", 6))}
    in_first = {d: ldplcm.in_phase1(d, salt, ppm) for ids in real.values() for d in ids}
    for ids in real.values():  # real devices of each kind in both phases
        assert any(in_first[d] for d in ids) and not all(in_first[d] for d in ids)
    workdir = str(tmp_path / "devices")
    run = dict(devices=DEVICES, micropython=4, c_clients=6, dist="zipf:1.1", seed=SEED,
               workdir=workdir, c_client=str(build_client()))
    bus = BrokerSettings.from_url(broker.url)

    first = run_fleet(broker.url, "lc", key, FleetOptions(phase=1, **run))
    assert first.sent_by_kind["micropython"] == sum(in_first[d] for d in real["mp"])
    assert first.sent_by_kind["c"] == sum(in_first[d] for d in real["c"])
    assert 0 < first.sent_by_kind["simulated"] < DEVICES and first.skipped_by_sampling > 0
    counters = serve.wait_counts("lc", settled(first.sent), timeout=60)
    assert counters.get("accepted") == first.sent and counters.get("wrong_phase_device", 0) == 0

    outsider = next("x%d" % i for i in range(100) if not ldplcm.in_phase1("x%d" % i, salt, ppm))
    publish(bus, "ldp/lc/r/" + outsider, phase1_report(state, "lc"), retain=False)
    early = bytearray(phase1_report(state, "lc"))
    early[2] = 2
    publish(bus, "ldp/lc/r/" + outsider, bytes(early), retain=False)
    counters = serve.wait_counts("lc", settled(first.sent + 2), timeout=60)
    assert counters.get("wrong_phase_device") == 1 and counters.get("phase_not_open") == 1

    advanced = run_cli("campaign", "advance", "lc", "--state", state, "--broker", broker.url)
    assert advanced["phase1_reports"] == first.sent and advanced["high_items"] >= 1
    assert 0 < advanced["theta_measured"] <= 0.5

    second = run_fleet(broker.url, "lc", key, FleetOptions(phase=2, **run))
    assert second.sent_by_kind["micropython"] == 4 - first.sent_by_kind["micropython"]
    assert second.sent_by_kind["c"] == 6 - first.sent_by_kind["c"]
    assert first.sent_by_kind["simulated"] + second.sent_by_kind["simulated"] == DEVICES
    counters = serve.wait_counts("lc", settled(first.sent + 2 + second.sent), timeout=60)
    assert counters.get("accepted") == first.sent + second.sent
    assert sketch_counts(state, "lc") == [first.sent, second.sent]
    assert counters.get("wrong_phase_device") == 1  # honest devices never

    insider = next("y%d" % i for i in range(100) if ldplcm.in_phase1("y%d" % i, salt, ppm))
    with Store(state) as store:
        lcm = store.require_campaign("lc").mechanism(2)
    late = lcm.perturb_batch(np.array([5], np.uint32), np.random.default_rng(2))[0].tobytes()
    publish(bus, "ldp/lc/r/" + insider, late, retain=False)
    counters = serve.wait_counts("lc", settled(first.sent + 3 + second.sent), timeout=60)
    assert counters.get("wrong_phase_device") == 2 and counters.get("accepted") == first.sent + second.sent
    rejected = {k: v for k, v in counters.items() if k not in ("received", "accepted", "duplicate")}
    assert rejected == {"wrong_phase_device": 2, "phase_not_open": 1}

    for kind, ids in real.items():
        for device_id in ids:
            book = ledger(workdir, kind, device_id)
            assert book["spent_milli"] == 4000, device_id  # only its own phase's eps
            assert list(book["reports"]) == ["%d:%d" % (cid, 1 if in_first[device_id] else 2)]

    answer = run_cli("estimate", "lc", "--state", state)
    assert answer["phase_reports"] == [first.sent, second.sent]
    freqs = np.array([row["frequency"] for row in answer["items"]])
    assert freqs.size == 64 and np.all(np.isfinite(freqs))
    assert answer["high_items"] and 0 in answer["high_items"]  # the Zipf head (f ~ 0.2)
    assert [row["item"] for row in answer["items"] if row["high"]] == answer["high_items"]


@pytest.mark.parametrize("kinds", [(0, 0), (3, 2)], ids=["simulated", "with-real-devices"])
def test_auto_picks_svim_and_it_finds_the_planted_heavy_hitters(service, run_cli, tmp_path, kinds):
    """`campaign create --protocol auto` for a fleet: svim (protocols.svim) is predicted better
    than LDPMiner-RAPPOR here and chosen; the public split sends each device to one phase only
    (ledger: eps once), phase 1 (PSOLH, l = 1) finds the planted items among the candidates and
    phase 2 (PSGRR over the 4 candidates, l2 = 4) estimates them within z standard deviations of
    the exact PSGRR variance (unbiased: nobody holds more than 4 candidates after trimming)."""
    broker, serve, state, key_file, key = service
    mp, cc = kinds
    dist = tmp_path / "planted.txt"
    dist.write_text("".join("%d %d\n" % (i, 40 if i in PLANTED else 1) for i in range(64)))
    made = run_cli("campaign", "create", "--broker", broker.url, "--state", state,
                   "--signing-key", key_file, "--name", "sv", "--protocol", "auto",
                   "--fleet-size", DEVICES, "--epsilon", 2, "--domain", 64, "--set-size", 6,
                   "--top", 2, "--salt", 5)
    proto = made["protocol"]
    assert proto["protocol"] == "svim" and proto["plan"]["chosen_protocol"] == "svim"
    assert proto["plan"]["predicted_error"] == min(
        r["predicted_sd"] for r in proto["plan"]["rows"]
        if r["feasible"] and r["protocol"] in ("lm-rp", "svim"))
    phases = made["config"]["phases"]
    assert [(p["mechanism"], p["eps_milli"], p["params"]["l"]) for p in phases] == [
        ("psolh", 2000, 1), ("psgrr", 2000, 4)]
    ppm = phases[0]["sample_rate_ppm"]
    workdir = str(tmp_path / "devices")
    run = dict(devices=DEVICES, micropython=mp, c_clients=cc, dist=str(dist), seed=SEED,
               workdir=workdir, c_client=str(build_client()) if cc else None)

    first = run_fleet(broker.url, "sv", key, FleetOptions(phase=1, **run))
    counters = serve.wait_counts("sv", settled(first.sent), timeout=60)
    assert counters.get("accepted") == first.sent and 0 < first.sent < DEVICES + mp + cc
    advanced = run_cli("campaign", "advance", "sv", "--state", state, "--broker", broker.url)
    assert set(PLANTED) <= set(advanced["candidates"]) and len(advanced["candidates"]) == 4

    second = run_fleet(broker.url, "sv", key, FleetOptions(phase=2, **run))
    assert first.sent + second.sent == DEVICES + mp + cc  # each device in exactly one phase
    counters = serve.wait_counts("sv", settled(first.sent + second.sent), timeout=60)
    assert counters.get("accepted") == first.sent + second.sent
    assert counters.get("wrong_phase_device", 0) == 0
    for kind, dirname in (("micropython", "mp"), ("c", "c")):
        for device_id in first.device_ids.get(kind, []) + second.device_ids.get(kind, []):
            book = ledger(workdir, dirname, device_id)
            phase = 1 if ldplcm.in_phase1(device_id, 5, ppm) else 2
            assert book["spent_milli"] == 2000 and list(book["reports"]) == [
                "%d:%d" % (made["campaign_id"], phase)], device_id

    answer = run_cli("estimate", "sv", "--state", state)
    top = {row["item"]: row["frequency"] for row in answer["items"]}
    assert set(top) == set(PLANTED)
    with Store(state) as store:
        mech = store.require_campaign("sv").mechanism(2)
    n = second.sent
    z = stats.norm.ppf(1 - ALPHA / 4)
    for item in PLANTED:
        f = second.true_counts[item] / n
        sd = math.sqrt(float(mech.item_variances(n, [f])[0]))
        assert abs(top[item] - f) <= z * sd, (item, top[item], f, sd)


FLAT_DEVICES = 20000
FLAT_SET = 6


@pytest.mark.parametrize("kinds", [(3, 2)], ids=["with-real-devices"])
def test_svim_flat_branch_end_to_end(service, run_cli, tmp_path, kinds):
    """Adaptive svim on flat data (spec §3, §5.4 `fallback`): every device holds 6 distinct
    items drawn uniformly from 64, so phase 1 cannot separate a head; `campaign advance`
    publishes `"fallback": true` and the phase-2 devices (simulated, MicroPython, C) report the
    config's fallback listless over the whole domain at l = 6 with its own mechanism id (the
    header rule follows: nothing is rejected). Each device reports once (ledger: one report, eps
    once); `estimate` pools both phases and every item's estimate lies within z of its own
    standard deviation (Bonferroni over the 64 items) of the truth; `campaign status --json`
    shows the branch."""
    broker, serve, state, key_file, key = service
    mp, cc = kinds
    dist = tmp_path / "flat.txt"
    dist.write_text("".join("%d 1\n" % i for i in range(64)))
    made = run_cli("campaign", "create", "--broker", broker.url, "--state", state,
                   "--signing-key", key_file, "--name", "fl", "--protocol", "svim",
                   "--epsilon", 2, "--domain", 64, "--set-size", FLAT_SET, "--top", 2,
                   "--salt", 5)
    phases = made["config"]["phases"]
    fallback = phases[1]["fallback"]
    assert fallback["params"]["l"] == FLAT_SET and phases[1]["params"]["l"] == 4
    ppm = phases[0]["sample_rate_ppm"]
    workdir = str(tmp_path / "devices")
    run = dict(devices=FLAT_DEVICES, micropython=mp, c_clients=cc, dist=str(dist), seed=SEED,
               workdir=workdir, c_client=str(build_client()), set_size=FLAT_SET)

    first = run_fleet(broker.url, "fl", key, FleetOptions(phase=1, **run))
    serve.wait_counts("fl", settled(first.sent), timeout=60)
    advanced = run_cli("campaign", "advance", "fl", "--state", state, "--broker", broker.url)
    assert advanced["branch"] == "flat" and "candidates" not in advanced
    assert advanced["separation"]["z"] < 1, advanced["separation"]

    second = run_fleet(broker.url, "fl", key, FleetOptions(phase=2, **run))
    assert second.mechanism == fallback["mechanism"]
    total = FLAT_DEVICES + mp + cc
    assert first.sent + second.sent == total  # each device in exactly one phase
    counters = serve.wait_counts("fl", settled(total), timeout=60)
    assert counters.get("accepted") == total, counters
    assert sketch_counts(state, "fl") == [first.sent, second.sent]
    for kind, dirname in (("micropython", "mp"), ("c", "c")):
        ids = first.device_ids.get(kind, []) + second.device_ids.get(kind, [])
        assert len(ids) == (mp if kind == "micropython" else cc)
        for device_id in ids:
            book = ledger(workdir, dirname, device_id)
            phase = 1 if ldplcm.in_phase1(device_id, 5, ppm) else 2
            assert book["spent_milli"] == 2000 and list(book["reports"]) == [
                "%d:%d" % (made["campaign_id"], phase)], device_id

    status = run_cli("campaign", "status", "fl", "--state", state)
    assert status["branch"] == "flat" and status["protocol"]["branch"] == "flat"
    assert status["phases"][1]["fallback"] is True
    assert status["phases"][1]["mechanism"] == fallback["mechanism"]

    answer = run_cli("estimate", "fl", "--state", state, "--top", 64)
    assert answer["branch"] == "flat" and answer["phase_reports"] == [first.sent, second.sent]
    assert len(answer["items"]) == 64
    z = stats.norm.ppf(1 - ALPHA / (2 * 64))
    n = first.sent + second.sent
    for row in answer["items"]:
        truth = (first.true_counts.get(row["item"], 0) + second.true_counts.get(row["item"], 0)) / n
        assert abs(row["frequency"] - truth) <= z * row["stddev"], (row, truth)
    assert max(row["stddev"] for row in answer["items"]) < 0.05  # the bound has teeth


SHO_SIMULATED = 4000


def planted_sets(n, rng, size=2):
    """`n` sets of `size` distinct items of 0..63, the PLANTED items weighted 40, others 1."""
    w = np.array([40.0 if i in PLANTED else 1.0 for i in range(64)])
    return [[int(v) for v in rng.choice(64, size=size, replace=False, p=w / w.sum())]
            for _ in range(n)]


def publish_simulated(broker, campaign, ids, reports):
    from ldpfleet.loadgen.bulk import BulkPublisher
    pub = BulkPublisher(BrokerSettings.from_url(broker.url))
    try:
        pub.publish_rows(["ldp/%s/r/%s" % (campaign, d) for d in ids], reports)
        pub.wait_acked(60)
    finally:
        pub.close()


def test_ldpminer_sh_opt_real_devices_report_phase2_from_their_ledgers(service, run_cli, tmp_path):
    from ldpfleet.core.mechanisms.shc import memo_from_reports
    from ldpfleet.core.protocols import ldpminer
    broker, serve, state, key_file, key = service
    made = run_cli("campaign", "create", "--broker", broker.url, "--state", state,
                   "--signing-key", key_file, "--name", "so", "--protocol", "ldpminer-sh-opt",
                   "--epsilon", 6, "--domain", 64, "--set-size", 2, "--top", 2, "--salt", 13)
    cfg = made["config"]
    cid = cfg["campaign_id"]
    phases = cfg["phases"]
    assert [p["mechanism"] for p in phases] == ["shc", "shc"]
    assert phases[0]["params"] == phases[1]["params"] and phases[0]["params"]["l"] == 2
    eps1, eps2 = phases[0]["eps_milli"], phases[1]["eps_milli"]
    assert eps1 + eps2 == 6000

    rng = np.random.default_rng(SEED)
    real_sets = {"mp-0": [7, 42], "mp-1": [42, 3], "mp-2": [9, 7], "c-0": [7, 11], "c-1": [42, 7],
                 "c-2": [60, 42]}
    workdir = tmp_path / "devices"
    procs = {}
    for dev, value in real_sets.items():
        st = device_runner.prepare_device(workdir / dev, dev, key, eps_cap_milli=8000,
                                          lifetime_budget_milli=100000)
        log = str(workdir / (dev + ".log"))
        if dev.startswith("mp"):
            procs[dev] = (st, log, device_runner.start_device(
                st, "127.0.0.1", broker.port, "so", log_path=log, value=value, once=True,
                timeout=240))
        else:
            procs[dev] = (st, log, start_client(build_client(), st, broker.port, "so", value, log,
                                                once=True, timeout=240))
    try:
        sim_ids = ["sim-%d" % i for i in range(SHO_SIMULATED)]
        sim_sets = planted_sets(SHO_SIMULATED, rng)
        mech1 = ldpminer.phase1_mechanism(cfg)
        reports1, x = mech1.perturb_phase1(sim_sets, rng)
        publish_simulated(broker, "so", sim_ids, reports1)
        total = SHO_SIMULATED + len(real_sets)
        counters = serve.wait_counts("so", settled(total), timeout=120)
        assert counters.get("accepted") == total and sketch_counts(state, "so") == [total, 0]

        advanced = run_cli("campaign", "advance", "so", "--state", state, "--broker", broker.url)
        cands = advanced["candidates"]
        assert set(PLANTED) <= set(cands)
        mech2 = ldpminer.phase2_mechanism(cfg, cands)
        reports2 = mech2.perturb_phase2(memo_from_reports(reports1, x), rng)
        publish_simulated(broker, "so", sim_ids, reports2)
        for dev, (st, log, proc) in procs.items():
            assert proc.wait(180) == 0, open(log).read()
        counters = serve.wait_counts("so", settled(2 * total), timeout=120)
    finally:
        for _, _, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    assert counters.get("accepted") == 2 * total
    rejected = {k: v for k, v in counters.items() if k not in ("received", "accepted", "duplicate")}
    assert rejected == {}
    assert sketch_counts(state, "so") == [total, total]

    for dev, (st, log, _) in procs.items():
        book = read_ledger(st)
        assert book["spent_milli"] == eps1 + eps2, dev
        assert sorted(book["reports"]) == ["%d:1" % cid, "%d:2" % cid], dev
        r1, r2 = (bytes.fromhex(book["reports"]["%d:%d" % (cid, p)][2]) for p in (1, 2))
        assert r1[1] == r2[1] == 12 and r1[12:16] == r2[12:16], dev  # phase 2: the phase-1 row
        assert book["shc"] == {str(cid): book["shc"][str(cid)]} and book["shc"][str(cid)] in (0, 1)
        text = open(log).read()
        assert "spent phase=2 eps_milli=%d" % eps2 in text and "skip" not in text, text

    answer = run_cli("estimate", "so", "--state", state)
    assert answer["phase_reports"] == [total, total]
    top = {row["item"]: row["frequency"] for row in answer["items"]}
    assert set(top) == set(PLANTED)
    n = total
    z = stats.norm.ppf(1 - ALPHA / 4)
    for item in PLANTED:
        f = (sum(item in s for s in sim_sets) + sum(item in s for s in real_sets.values())) / n
        sd = math.sqrt(float(mech2.item_variances(n, [f])[0]))
        assert abs(top[item] - f) <= z * sd, (item, top[item], f, sd)
