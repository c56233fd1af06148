"""PEM end to end (protocol_spec/v2 §3.5): a private mosquitto, `ldpfleet serve` as a
subprocess, `campaign create --domain strings:max_len=6` (PEM is a strings domain's protocol),
the fleet generator's simulated devices reporting strings nobody listed (Zipf over random
strings) in phase 1 (each device's prefix at its group's level, grouped by serve from the
topic's device id), `campaign advance` (the candidates' keys), phase 2 (psgrr over them), and
`estimate`: the validated top strings are the true ones, with intervals covering the truth.
Fixed seeds and salt; 20,000 devices at eps 3."""
import json

import pytest

from ldpfleet.core import strings_domain
from ldpfleet.core.signing import write_signing_key
from ldpfleet.loadgen import FleetOptions, run_fleet
from support.service import ServeProcess, cli_json

DEVICES = 20000
SEED = 77


@pytest.fixture
def service(mosquitto, tmp_path):
    state = "sqlite:///%s" % (tmp_path / "agg.db")
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log")).start()
    key_file = str(tmp_path / "fleet.key")
    key = write_signing_key(key_file)
    yield mosquitto, serve, state, key_file, key
    serve.stop()


def settled(total):
    return lambda c: sum(v for k, v in c.items() if k not in ("received", "duplicate")) >= total


def test_pem_finds_the_top_strings(service, capsys, tmp_path):
    broker, serve, state, key_file, key = service
    made = cli_json(capsys, "campaign", "create", "--broker", broker.url, "--state", state,
                    "--signing-key", key_file, "--name", "sigs", "--domain", "strings:max_len=6",
                    "--epsilon", 3, "--top", 5, "--salt", 12345)
    p1, p2 = made["config"]["phases"]
    assert (p1["mechanism"], p2["mechanism"], p2["params"]) == ("pem", "psgrr", {"l": 1})
    assert p1["params"]["levels"] == [8, 16, 24, 32, 40, 48]
    run = dict(devices=DEVICES, dist="zipf:1.1,50,6", seed=SEED)

    first = run_fleet(broker.url, "sigs", key, FleetOptions(phase=1, **run))
    assert 0.88 * DEVICES < first.sent < 0.92 * DEVICES  # the public 90 % split
    counters = serve.wait_counts("sigs", settled(first.sent), timeout=60)
    assert counters.get("accepted") == first.sent

    early = cli_json(capsys, "estimate", "sigs", "--state", state)
    assert early["validated"] is False and sum(early["group_reports"]) == first.sent
    truth = sorted(first.true_counts, key=lambda s: -first.true_counts[s])[:3]

    advanced = cli_json(capsys, "campaign", "advance", "sigs", "--state", state,
                        "--broker", broker.url)
    keys = {strings_domain.code_key(strings_domain.code_of(s, 6)) for s in truth}
    assert keys <= set(advanced["candidates"])  # the top strings became candidates

    counts_file = tmp_path / "truth.json"
    from ldpfleet import cli
    assert cli.main(["fleet", "--broker", broker.url, "--campaign", "sigs", "--trusted-keys",
                     key_file + ".pub", "--devices", str(DEVICES), "--dist", "zipf:1.1,50,6",
                     "--seed", str(SEED), "--phase", "2", "--true-counts", str(counts_file),
                     "--json"]) == 0
    second = json.loads(counts_file.read_text())
    assert second["phase"] == 2 and second["sent"] == DEVICES - first.sent
    counters = serve.wait_counts("sigs", settled(first.sent + second["sent"]), timeout=60)
    assert counters.get("accepted") == first.sent + second["sent"]

    answer = cli_json(capsys, "estimate", "sigs", "--state", state)
    assert answer["protocol"] == "pem" and answer["n"] == second["sent"]
    rows = {r["item"]: r for r in answer["items"]}
    n2 = second["sent"]
    for s in truth:
        assert s in rows and not rows[s]["noise"], (s, answer["items"])
        f = second["true_counts"][s] / n2
        assert rows[s]["ci_low"] - 0.01 <= f <= rows[s]["ci_high"] + 0.01
    assert [r["item"] for r in answer["items"][:2]] == truth[:2]
    status = cli_json(capsys, "campaign", "status", "sigs", "--state", state)
    assert status["domain"]["max_len"] == 6
    assert status["phase"] == 2 and [p["reports"] for p in status["phases"]] == [
        first.sent, second["sent"]]
    assert cli.main(["estimate", "sigs", "--state", state]) == 0
    text = capsys.readouterr().out
    assert "PEM candidates" in text and truth[0] in text
    assert cli.main(["estimate", "sigs", "--state", state, "--phase", "1"]) == 0
    assert "UNVALIDATED" in capsys.readouterr().out
    assert cli_json(capsys, "estimate", "sigs", "--state", state, "--phase", 2) == answer
