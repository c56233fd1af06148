"""`ldpfleet serve` end to end on a private Mosquitto: every sent report is accepted once, the
stored sketch equals an in-process sketch fed the same reports (exact integer state), and the
status / estimate / list commands print what they document."""
import csv
import io
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from support.brokers import free_port
from ldpfleet.core import protocol
from ldpfleet.core.mechanisms.base import Sketch
from ldpfleet.service import Store, compute_estimates
from support.service import ServeProcess
from support.service import (publisher, direct_sketch, new_campaign, report_messages,
                             scrape_metrics_until)

SEED = 20240611


def run_cli(*args):
    """The real `ldpfleet` entry point in a subprocess."""
    out = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def cli(capsys):
    """`ldpfleet.cli.main` in this process (the same parser and code, without the interpreter
    start-up per call); returns what it printed."""
    from ldpfleet.cli import main

    def call(*args):
        capsys.readouterr()
        assert main(list(args)) == 0
        return capsys.readouterr().out
    return call


@pytest.fixture
def two_campaigns(tmp_path, mosquitto):
    """An OLH campaign over ints and a GRR campaign over strings in one state file."""
    words = tmp_path / "apps.txt"
    items = ["app-%02d" % i for i in range(40)]
    words.write_text("\n".join(items) + "\n")
    state, olh = new_campaign(tmp_path, mosquitto.url, "cpu", "olh", 2.0, "0-255", params={"g": 6})
    _, grr = new_campaign(tmp_path, mosquitto.url, "apps", "grr", 1.5, str(words))
    return state, olh, grr, items


def test_accepted_equals_sent_and_sketch_is_exact(tmp_path, mosquitto, two_campaigns):
    state, olh, grr, items = two_campaigns
    rng = np.random.default_rng(SEED)
    n_olh, n_grr = 12000, 9000
    true_olh = rng.zipf(1.3, n_olh) % 256
    true_grr = rng.integers(0, len(items), n_grr)
    mech_olh, mech_grr = olh.mechanism(1), grr.mechanism(1)
    reports_olh = mech_olh.perturb_batch(true_olh, rng)
    reports_grr = mech_grr.perturb_batch([protocol.item_key(items[i]) for i in true_grr], rng)
    messages = report_messages("cpu", reports_olh, "d") + report_messages("apps", reports_grr, "d")
    order = rng.permutation(len(messages))

    serve = ServeProcess(mosquitto.url, state, batch_size=700, batch_ms=50).start()
    try:
        pub = publisher(mosquitto.url, "pub-ingest")
        pub.publish_all(messages[i] for i in order)
        pub.wait_acked()
        pub.close()
        got_olh = serve.wait_counts("cpu", lambda c: c.get("accepted", 0) >= n_olh)
        got_grr = serve.wait_counts("apps", lambda c: c.get("accepted", 0) >= n_grr)
        assert serve.alive()
    finally:
        assert serve.stop() == 0, serve.log()
    assert got_olh == {"received": n_olh, "accepted": n_olh}
    assert got_grr == {"received": n_grr, "accepted": n_grr}

    with Store(state) as store:
        for name, mech, reports in (("cpu", mech_olh, reports_olh), ("apps", mech_grr, reports_grr)):
            n, blob = store.sketch_blob(name, 1)
            want = direct_sketch(mech, reports)
            assert n == reports.shape[0]
            assert blob == want.serialize()
            stored = Sketch.deserialize(blob)
            for key, arr in want._state().items():
                np.testing.assert_array_equal(stored._state()[key], arr)
            assert store.seen_count(name, 1) == reports.shape[0]
        assert store.counters() == {"received": n_olh + n_grr, "accepted": n_olh + n_grr}

        table = compute_estimates(store, "apps")
        # the domain's items, then the reserved item ⊥ shown as "other" (spec §1)
        keys = [protocol.item_key(i) for i in items] + [protocol.EMPTY_KEY]
        want = direct_sketch(mech_grr, reports_grr).estimate(keys)
        assert [r["item"] for r in table.rows] == items + ["other"]
        assert [r["estimate"] for r in table.rows] == [float(v) for v in want]
        # each item's interval from its own variance at its (clipped) estimate
        z = stats.norm.ppf(0.975)
        for row in table.rows:
            f = min(max(row["frequency"], 0.0), 1.0)
            sd = math.sqrt(float(mech_grr.item_variances(n_grr, [f])[0]))
            assert row["ci_high"] - row["frequency"] == pytest.approx(z * sd, rel=1e-12)
            assert row["frequency"] - row["ci_low"] == pytest.approx(z * sd, rel=1e-12)


def test_cli_output_shapes(tmp_path, mosquitto, two_campaigns, cli):
    state, olh, _grr, _items = two_campaigns
    rng = np.random.default_rng(SEED + 1)
    n = 3000
    reports = olh.mechanism(1).perturb_batch(rng.integers(0, 8, n), rng)
    bad = [("ldp/cpu/r/x%d" % i, reports[i].tobytes()[:-1]) for i in range(7)]
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, batch_ms=30, metrics_port=port).start()
    try:
        pub = publisher(mosquitto.url, "pub-cli")
        pub.publish_all(report_messages("cpu", reports) + bad)
        pub.wait_acked()
        pub.close()
        serve.wait_counts("cpu", lambda c: c.get("received", 0) >= n + 7)
        metrics = scrape_metrics_until(port, [
            "ldpfleet_reports_received_total %.1f" % (n + 7),
            'ldpfleet_reports_accepted_total{campaign="cpu"} %.1f' % n,
            'ldpfleet_reports_rejected_total{reason="size"} 7.0'])
    finally:
        serve.stop()
    assert "ldpfleet_batch_seconds_count" in metrics and "ldpfleet_backlog_reports" in metrics

    status = json.loads(run_cli("campaign", "status", "cpu", "--state", state, "--json"))
    assert status["accepted"] == n and status["received"] == n + 7
    assert status["rejected"] == {"size": 7} and status["rejected_total"] == 7
    assert status["state"] == "open" and status["phase"] == 1
    err = status["phases"][0]["expected_error"]
    assert err["n"] == n
    assert err["stddev_fraction"] == pytest.approx(math.sqrt(olh.mechanism(1).variance(n)))
    text = cli("campaign", "status", "cpu", "--state", state)
    assert "accepted %d" % n in text and "rejected size" in text

    listed = json.loads(cli("campaign", "list", "--state", state, "--json"))
    assert [(r["campaign"], r["accepted"], r["rejected"]) for r in listed] == [
        ("cpu", n, 7), ("apps", 0, 0)]

    est = json.loads(cli("estimate", "cpu", "--state", state, "--top", "5", "--json"))
    assert est["n"] == n and len(est["items"]) == 5
    values = [r["frequency"] for r in est["items"]]
    assert values == sorted(values, reverse=True)
    assert set(est["items"][0]) == {"rank", "item", "key", "estimate", "frequency", "ci_low",
                                    "ci_high", "noise"}

    rows = list(csv.DictReader(io.StringIO(cli("estimate", "cpu", "--state", state, "--csv"))))
    assert len(rows) == 256 + 1 and rows[-1]["item"] == "other" and rows[0].keys() == {
        "rank", "item", "key", "estimate", "frequency", "ci_low", "ci_high", "noise"}
    with Store(state) as store:
        direct = compute_estimates(store, "cpu")
    assert [float(r["estimate"]) for r in rows] == pytest.approx([r["estimate"] for r in direct.rows])

    auto = json.loads(cli("estimate", "cpu", "--state", state, "--threshold", "auto", "--json"))
    sig = auto["significance"]
    assert sig["procedure"] == "benjamini-hochberg" and sig["tested"] == 257
    assert sig["fdr"] == 0.05 and sig["discoveries"] == len(auto["items"])
    # BH's cutoff with r discoveries: z = Phi^-1(1 - 0.05 r / 257)
    assert sig["z_cutoff"] == pytest.approx(stats.norm.isf(0.05 * sig["discoveries"] / 257))
    assert auto["threshold"] == pytest.approx(sig["z_cutoff"] * est["stddev_fraction"])
    assert all(r["frequency"] >= auto["threshold"] and not r["noise"] for r in auto["items"])
    # 257 estimated items (256 + "other"). Items 0..7 hold ~1/8 each, > 7 sigma above the
    # cutoff (sigma ~0.016 here); the 248 empty ones pass with probability ~ 0.05 x 8/257 each
    found = {r["item"] for r in auto["items"]}
    assert set(range(8)) <= found
    assert len(found - set(range(8))) <= 3

    post = json.loads(cli("estimate", "cpu", "--state", state, "--post", "norm-sub", "--json"))
    assert sum(r["post"] for r in post["items"]) == pytest.approx(1.0)
    assert min(r["post"] for r in post["items"]) >= 0

    rows = json.loads(cli("estimate", "cpu", "--state", state, "--json"))["items"]
    full = {r["item"]: r["frequency"] for r in rows}
    z = stats.norm.ppf(0.975)
    # each item's interval is its own (plug-in variance): the held items' are wider
    item_sd = {r["item"]: (r["ci_high"] - r["ci_low"]) / (2 * z) for r in rows}
    assert min(item_sd[i] for i in range(8)) > max(item_sd[i] for i in range(8, 256))
    answer = json.loads(cli("estimate", "cpu", "--state", state, "--subset", "0,1,2,3",
                            "--post", "norm-sub", "--json"))
    query = answer["subset"]
    assert query["items"] == [0, 1, 2, 3]
    assert sorted(r["item"] for r in answer["items"]) == [0, 1, 2, 3]  # only the subset's rows
    text = cli("estimate", "cpu", "--state", state, "--subset", "0,1,2,3")
    assert len([line for line in text.splitlines() if line[:5].strip().isdigit()]) == 4
    assert query["frequency"] == pytest.approx(sum(full[i] for i in range(4)))
    assert query["ci_high"] - query["ci_low"] == pytest.approx(
        2 * z * math.sqrt(sum(item_sd[i] ** 2 for i in range(4))))
    sd = math.sqrt(sum(item_sd[i] ** 2 for i in range(4))) / 2
    # Half of the users hold items 0..3 (uniform over 8): sampling sd sqrt(.25/n), estimator
    # sd 2*sd for four independent item errors.
    assert abs(query["frequency"] - 0.5) < 5 * (2 * sd + math.sqrt(0.25 / n))
    assert 0 <= query["post"] <= 1
    from ldpfleet.cli import main as cli_main
    assert cli_main(["estimate", "cpu", "--state", state, "--subset", "0,999"]) == 2

    cli("campaign", "close", "cpu", "--state", state, "--broker", mosquitto.url)
    assert json.loads(cli("campaign", "status", "cpu", "--state", state, "--json"))["state"] == "closed"


def test_two_phase_config_spells_out_phase2_parameters_before_candidates_exist():
    from ldpfleet.service.campaigns.manage import build_config
    cfg = build_config("big", ["sh", "srappor"], [1.0, 1.0], {"type": "int", "size": 100000},
                       params=[{"l": 4}, {}])
    phase2 = cfg["phases"][1]
    assert phase2["mechanism"] == "srappor"
    assert phase2["params"].get("l") == 1 and "candidates" not in phase2["params"]


def test_report_topics_name_a_device_or_a_load_generators_device():
    """Spec §4: `ldp/<c>/r/<id>` and a load generator's `ldp/<c>/r/<login>/<id>`; anything
    deeper, empty or with a bad name is not a report topic. The ack goes back to the same path."""
    from ldpfleet.core import protocol
    from ldpfleet.service.ingest.loop import parse_report_topic
    assert parse_report_topic("ldp/c1/r/dev-a") == ("c1", "dev-a")
    assert parse_report_topic("ldp/c1/r/loadgen/sim-7") == ("c1", "loadgen/sim-7")
    assert protocol.ack_topic(*parse_report_topic("ldp/c1/r/loadgen/sim-7")) == "ldp/c1/a/loadgen/sim-7"
    for bad in ["ldp/c1/r/a/b/c", "ldp/c1/r/loadgen/", "ldp/c1/r//x", "ldp/c1/r", "ldp/c1/x/dev",
                "ldp/c1/r/dev.a", "ldp/c 1/r/dev", "ldp/c1/r/" + "x" * 65, None]:
        assert parse_report_topic(bad) is None, bad
