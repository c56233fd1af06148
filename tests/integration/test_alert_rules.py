"""deploy/prometheus/alerts.yml: promtool accepts the rules and the scrape config that loads
them, its unit tests (alerts.test.yml) pass, every alert has a case where it fires — and the
tests fail when that alert never fires —, and every ldpfleet series the rules ask for is one a
real `serve` exports. promtool is Debian's `prometheus` package (tools/setup.sh installs it)."""
import re
import shutil
import subprocess

import numpy as np
import pytest
import yaml

from ldpfleet.broker.embedded import free_port
from ldpfleet.service import Store, create_campaign

from support.service import ServeProcess, fold_batch, report_messages, scrape_metrics_until

from test_deploy import DEPLOY, metric_names, scrape_samples

PROM = DEPLOY / "prometheus"
RULES = PROM / "alerts.yml"
TESTS = PROM / "alerts.test.yml"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus "
                                                          "package; tools/setup.sh installs it)")


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def alerts() -> dict:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"]
            for r in g["rules"] if "alert" in r}


def test_promtool_checks_the_rules_and_the_config_that_loads_them():
    proc = promtool("check", "rules", RULES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: %d rules found" % len(alerts()) in proc.stdout
    proc = promtool("check", "config", PROM / "prometheus.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alerts.yml" in proc.stdout
    compose = (DEPLOY / "compose.yaml").read_text()
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in compose


def test_the_unit_tests_pass_and_cover_every_alert():
    proc = promtool("test", "rules", TESTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    fired = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            if check.get("exp_alerts"):
                fired.add(check["alertname"])
    assert fired == set(alerts()), set(alerts()) - fired
    assert {"LdpfleetBrokerDroppedReports", "LdpfleetIngestStalled", "LdpfleetWorkerDown",
            "LdpfleetStoreDown", "LdpfleetCoverageLowAtEnd"} <= set(alerts())


@pytest.mark.parametrize("name", sorted(alerts()) if PROMTOOL else [])
def test_the_unit_tests_fail_when_an_alert_never_fires(name, tmp_path):
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                rule["expr"] = "vector(0) > 1"  # never true
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    shutil.copy(TESTS, tmp_path / "alerts.test.yml")
    proc = promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert proc.returncode != 0 and name in proc.stdout + proc.stderr, proc.stdout


def test_every_series_the_rules_use_is_exported(mosquitto, tmp_path):
    names = set().union(*(metric_names(r["expr"]) for r in alerts().values()))
    assert "ldpfleet_campaign_coverage_ratio" in names and "ldpfleet_ingest_subscribed" in names
    key = str(tmp_path / "fleet.key")
    from ldpfleet.core.signing import write_signing_key
    write_signing_key(key)
    state = "sqlite:///" + str(tmp_path / "state.db")
    with Store(state) as store:
        camp = create_campaign(store, None, key, "cpu", "olh", "2", "16")
    rng = np.random.default_rng(3)
    fold_batch(state, report_messages("cpu", camp.mechanism(1).perturb_batch(
        rng.integers(0, 16, 30).astype(np.uint32), rng)))
    devices = tmp_path / "devices.txt"
    devices.write_text("\n".join("dev%d" % i for i in range(40)) + "\n")
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, metrics_port=port,
                         extra_args=["--devices-file", str(devices), "--no-broker-check"])
    serve.start(timeout=120)
    try:
        text = scrape_metrics_until(port, ['ldpfleet_campaign_coverage_ratio{campaign="cpu"} 0.75',
                                           "ldpfleet_ingest_subscribed 1.0"])
    finally:
        assert serve.stop() == 0, serve.log()
    samples, families = scrape_samples(text)
    served = {n for n, _ in samples} | families
    assert names <= served, names - served
    for rule in alerts().values():  # labels the rules group by exist on those series
        for label in re.findall(r"by \((\w+)\)|on \((\w+)\)", rule["expr"]):
            label = "".join(label)
            assert any(label in labels for n, labels in samples if n in metric_names(rule["expr"]))
