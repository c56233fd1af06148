"""deploy/: the Grafana dashboard asks only for series a real `serve` exports (and the exporter
puts no device data in labels), the systemd units use options the programs really have (and
`systemd-analyze verify` accepts them where it exists), the compose pilot's files fit together
(and `docker compose config` accepts it where the compose plugin exists)."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ldpfleet.core import protocol
from support.brokers import free_port
from support.service import ServeProcess, new_campaign, publisher, report_messages
from support.service import scrape_metrics_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "ldpfleet-dashboard.json"
UNITS = DEPLOY / "systemd"
LABELS = {"campaign", "phase", "round", "reason", "status", "le", "version", "protocol",
          "python"}
"""The only label names the exporter may use: never a device id or an item value."""
METRIC = re.compile(r"\bldpfleet_[A-Za-z0-9_]*[A-Za-z0-9]")
SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? \S+$')
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


# --- the dashboard against a real exporter --------------------------------------------------

def dashboard_panels():
    doc = json.loads(DASHBOARD.read_text())
    assert 36 <= doc["schemaVersion"] <= 41
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = []
    for panel in doc["panels"]:
        panels += [panel] + panel.get("panels", [])
    return doc, [p for p in panels if p["type"] != "row"]


def panel_exprs(panel) -> list:
    return [t["expr"] for t in panel.get("targets", []) if t.get("expr", "").strip()]


def metric_names(expr: str) -> set:
    """ldpfleet_* identifiers of a PromQL expression (metric names: the dashboard has no label
    or label value that starts with ldpfleet_)."""
    return set(METRIC.findall(expr))


def test_metric_names_are_parsed_out_of_promql():
    expr = ('histogram_quantile(0.99, sum by (le) (rate(ldpfleet_batch_seconds_bucket{instance=~'
            '"$instance"}[$__rate_interval]))) / max(ldpfleet_x_total) + ldpfleet_backlog_reports')
    assert metric_names(expr) == {"ldpfleet_batch_seconds_bucket", "ldpfleet_x_total",
                                  "ldpfleet_backlog_reports"}


def test_every_panel_has_a_query_and_the_datasource_variable():
    doc, panels = dashboard_panels()
    titles = [p["title"] for p in panels]
    assert len(set(titles)) == len(titles)
    for panel in panels:
        assert panel_exprs(panel), "panel %r has no PromQL expression" % panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    wanted = {  # what the dashboard must show, by the series that shows it
        "ldpfleet_campaign_reports_accepted_total", "ldpfleet_campaign_reports_rejected_total",
        "ldpfleet_backlog_reports", "ldpfleet_batch_seconds_bucket",
        "ldpfleet_broker_messages_dropped", "ldpfleet_acks_published_total", "ldpfleet_build_info"}
    used = set().union(*(metric_names(e) for p in panels for e in panel_exprs(p)))
    assert wanted <= used, wanted - used
    assert any(e.startswith("histogram_quantile(") and "ldpfleet_batch_seconds_bucket" in e
               for p in panels for e in panel_exprs(p))


def scrape_samples(text: str):
    """[(name, {label: value})] of every sample line, and the family names of # TYPE lines."""
    samples, families = [], set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.add(line.split()[2])
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, line
            samples.append((m.group(1), dict(LABEL.findall(m.group(2) or ""))))
    return samples, families


def test_dashboard_series_are_served_and_labels_carry_no_device_data(tmp_path, mosquitto):
    items = ["app-%02d" % i for i in range(12)]
    words = tmp_path / "apps.txt"
    words.write_text("\n".join(items) + "\n")
    state, camp = new_campaign(tmp_path, mosquitto.url, "apps", "grr", 1.0, str(words))
    rng = np.random.default_rng(15)
    n = 40
    truth = rng.integers(0, len(items), n)
    reports = camp.mechanism(1).perturb_batch([protocol.item_key(items[i]) for i in truth], rng)
    good = report_messages("apps", reports, prefix="devx")
    bad = [("ldp/apps/r/devy0", reports[0].tobytes()[:-1]),       # size
           ("ldp/nosuch/r/devy1", reports[1].tobytes())]           # unknown_campaign
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, batch_ms=20, metrics_port=port).start()
    try:
        pub = publisher(mosquitto.url, "pub-deploy")
        pub.publish_all(good + bad + good[:3])                      # + 3 duplicates
        pub.wait_acked()
        pub.close()
        serve.wait_counts(None, lambda c: c.get("received", 0) >= n + 5)
        text = scrape_metrics_until(port, [
            'ldpfleet_campaign_reports_accepted_total{campaign="apps",phase="1"} %d.0' % n,
            'ldpfleet_campaign_reports_rejected_total{campaign="apps",reason="size"} 1.0',
            'ldpfleet_campaign_reports_rejected_total{campaign="apps",reason="duplicate"} 3.0',
            'ldpfleet_campaign_reports_rejected_total{campaign="",reason="unknown_campaign"} 1.0',
            'ldpfleet_campaign_reports_received_total{campaign="apps"} %d.0' % (n + 4),
            'ldpfleet_campaign_devices{campaign="apps"} %d.0' % n,
            'ldpfleet_campaign_phase{campaign="apps"} 1.0',
            'ldpfleet_campaign_open{campaign="apps"} 1.0',
            'ldpfleet_reports_accepted_total{campaign="apps"} %d.0' % n,
            'ldpfleet_reports_rejected_total{reason="size"} 1.0',
            "ldpfleet_store_up 1.0"])
        assert serve.alive()
    finally:
        assert serve.stop() == 0, serve.log()

    samples, families = scrape_samples(text)
    served = {name for name, _ in samples} | families
    _, panels = dashboard_panels()
    for panel in panels:
        for expr in panel_exprs(panel):
            missing = metric_names(expr) - served
            assert not missing, "panel %r asks for %s, not served; served: %s" % (
                panel["title"], sorted(missing), sorted(served))
    build = [labels for name, labels in samples if name == "ldpfleet_build_info"]
    assert build and build[0]["protocol"] == str(protocol.PROTOCOL_VERSION)

    device_data = set(items) | {t.rsplit("/", 1)[1] for t, _ in good + bad}  # items, device ids
    for name, labels in samples:
        assert set(labels) <= LABELS, (name, labels)
        assert not set(labels.values()) & device_data, (name, labels)
    # names that were no metric before the dashboard keep their meaning
    assert "ldpfleet_reports_received_total" in served


def test_an_unreadable_state_is_reported_not_a_failed_scrape(tmp_path):
    from ldpfleet.service.http.metrics import ServiceMetrics
    metrics = ServiceMetrics(state_url="sqlite:///%s" % (tmp_path / "missing.db"))
    text = metrics.text()
    assert "ldpfleet_store_up 0.0" in text and "ldpfleet_build_info{" in text
    assert not (tmp_path / "missing.db").exists()       # a scrape never creates a state


def test_workers_on_postgres_serve_the_committed_totals_of_the_whole_state(
        tmp_path, mosquitto, postgres_url):
    """Two `serve --group` workers on one PostgreSQL state: each one's own counters show its
    share, the ldpfleet_campaign_* series of both show the totals of every worker's commits."""
    from ldpfleet.service import BrokerSettings, Store, create_campaign
    from ldpfleet.core.signing import write_signing_key
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(postgres_url) as store:
        camp = create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "pool", "olh",
                               2.0, "0-255", params={"g": 6})
    rng = np.random.default_rng(1515)
    n = 3000
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 256, n), rng)
    messages = report_messages("pool", reports)
    ports = [free_port(), free_port()]
    workers = [ServeProcess(mosquitto.url, postgres_url, client_id="w%d" % i, batch_size=100,
                            batch_ms=10, metrics_port=ports[i],
                            log_path=str(tmp_path / ("w%d.log" % i)),
                            extra_args=["--group", "pool", "--no-broker-check"]).start()
               for i in range(2)]
    try:
        pub = publisher(mosquitto.url, "pub-pool")
        pub.publish_all(messages)
        pub.wait_acked()
        pub.close()
        for w in workers:
            w.wait_counts("pool", lambda c: c.get("accepted", 0) >= n)
        texts = [scrape_metrics_until(port, [
            'ldpfleet_campaign_reports_accepted_total{campaign="pool",phase="1"} %d.0' % n,
            'ldpfleet_campaign_reports_received_total{campaign="pool"} %d.0' % n,
            'ldpfleet_campaign_devices{campaign="pool"} %d.0' % n]) for port in ports]
        deadline = time.monotonic() + 30   # own counters follow each worker's acks
        while True:
            own = []
            for port in ports:
                text = scrape_metrics_until(port, ["ldpfleet_store_up 1.0"])
                m = re.search(r'^ldpfleet_reports_accepted_total\{campaign="pool"\} (\S+)$',
                              text, re.M)
                own.append(float(m.group(1)) if m else 0.0)
            if sum(own) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        for w in workers:
            w.stop()
    assert len(texts) == 2
    assert sum(own) == n and min(own) > 0, own      # each worker's own share, the sum is all


# --- systemd units --------------------------------------------------------------------------

def unit_sections(path: Path) -> dict:
    """{section: [(key, value)]} of a unit file (keys repeat: Environment=, LoadCredential=;
    a trailing backslash continues a line)."""
    sections, current, pending = {}, None, ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def values(sections, section, key) -> list:
    return [v for k, v in sections.get(section, []) if k == key]


def help_options(*command) -> set:
    out = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *command, "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", out.stdout))


def c_client_options() -> set:
    """Options and flags of `ldp_client run`, from its source (the first options/flags lists
    of device/c_client/ldp_client.c are run's)."""
    src = (ROOT / "device" / "c_client" / "ldp_client.c").read_text()
    opts = re.search(r"options\[\] = \{(.*?)\};", src, re.S).group(1)
    flags = re.search(r"flags\[\] = \{(.*?)\};", src, re.S).group(1)
    return set(re.findall(r'"(--[a-z0-9-]+)"', opts + flags))


UNIT_FILES = ["ldpfleet-serve.service", "ldpfleet-serve@.service", "ldpfleet-client.service"]
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
             "PrivateTmp": "yes", "CapabilityBoundingSet": "", "MemoryDenyWriteExecute": "yes",
             "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
             "SystemCallFilter": "@system-service"}


def exec_args(sections) -> list:
    (line,) = values(sections, "Service", "ExecStart")
    return shlex.split(line)


def check_options(args, known: set, unit: str):
    """Every --option of `args` is one the program has (a renamed option fails); returns them."""
    seen = [a for a in args if a.startswith("--")]
    assert seen, unit
    for arg in seen:
        assert arg.split("=")[0] in known, "%s: %s is no option of the program" % (unit, arg)
    return seen


@pytest.mark.parametrize("unit", UNIT_FILES)
def test_units_are_hardened_and_load_their_secrets_as_credentials(unit):
    sections = unit_sections(UNITS / unit)
    assert values(sections, "Install", "WantedBy") == ["multi-user.target"]
    service = dict(sections["Service"])
    for key, want in HARDENING.items():
        assert service.get(key) == want, (unit, key, service.get(key))
    assert service.get("User") == "ldpfleet" or service.get("DynamicUser") == "yes"
    assert service.get("Restart") in ("on-failure", "always")
    state_dir = service["StateDirectory"]
    assert "/var/lib/" + state_dir in values(sections, "Service", "ReadWritePaths")
    creds = {v.split(":", 1)[0] for v in values(sections, "Service", "LoadCredential")}
    assert creds, unit
    args = exec_args(sections)
    text = " ".join(args + values(sections, "Service", "Environment"))
    used = set(re.findall(r"(?:\$\{CREDENTIALS_DIRECTORY\}|%d)/([\w.-]+)", text))
    assert used == creds, (unit, used, creds)          # every credential loaded is used
    assert "--password" not in args                     # never a secret on the command line
    for i, arg in enumerate(args):                       # files of secrets: credentials only
        if arg.endswith("-file") or arg == "--identity":
            assert args[i + 1].startswith(("${CREDENTIALS_DIRECTORY}/", "%d/")), (unit, arg)
    defined = {v.split("=", 1)[0] for env in values(sections, "Service", "Environment")
               for v in shlex.split(env)} | {"CREDENTIALS_DIRECTORY", "STATE_DIRECTORY"}
    env_files = values(sections, "Service", "EnvironmentFile")
    for var in re.findall(r"\$\{(\w+)\}", " ".join(args)):
        assert var in defined or env_files, (unit, var)


@pytest.mark.parametrize("unit", ["ldpfleet-serve.service", "ldpfleet-serve@.service"])
def test_serve_units_use_options_serve_has(unit):
    sections = unit_sections(UNITS / unit)
    args = exec_args(sections)
    assert args[0].endswith("/ldpfleet") and args[1] == "serve", args
    used = check_options(args[2:], help_options("serve"), unit)
    # the rest comes from the config file; LDPFLEET_<OPTION> variables would set options too
    ldpfleet_env = [v for v in values(sections, "Service", "Environment") if "LDPFLEET_" in v]
    assert ldpfleet_env == ["LDPFLEET_CONFIG=/etc/ldpfleet/ldpfleet.toml"], unit
    if unit.endswith("@.service"):
        assert {"--group", "--metrics-port", "--username", "--password-file"} <= set(used)
        client_id = args[args.index("--client-id") + 1]
        assert "%i" in client_id, "each worker needs its own client id"


def test_client_unit_uses_options_the_c_client_has():
    sections = unit_sections(UNITS / "ldpfleet-client.service")
    args = exec_args(sections)
    assert args[0].endswith("/ldp_client") and args[1] == "run", args
    used = check_options(args[2:], c_client_options(), "ldpfleet-client.service")
    assert {"--campaign", "--value-file", "--state-dir"} <= set(used)
    assert "--value" not in used  # a value on the command line shows in /proc/PID/cmdline
    assert "--once" not in used                # device/c_client/README.md: run it without --once
    assert dict(sections["Service"])["Restart"] == "always"


def test_unit_option_check_catches_a_renamed_option():
    with pytest.raises(AssertionError, match="--metrics-prot"):
        check_options(["--metrics-prot", "9100"], help_options("serve"), "renamed")


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    # verify wants the ExecStart binaries to exist: point them at ones that do
    ldpfleet = shutil.which("ldpfleet") or os.path.join(os.path.dirname(sys.executable), "ldpfleet")
    assert os.path.exists(ldpfleet)
    for unit in UNIT_FILES:
        text = (UNITS / unit).read_text()
        text = text.replace("/opt/ldpfleet/bin/ldpfleet", ldpfleet)
        text = text.replace("/usr/local/bin/ldp_client", shutil.which("true"))
        name = unit.replace("@.service", "@worker1.service")
        (tmp_path / unit).write_text(text)
        if name != unit:
            (tmp_path / name).write_text(text)
        out = subprocess.run([analyze, "verify", "--man=no", str(tmp_path / name)],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        if out.returncode != 0 and re.search(r"[Ff]ailed to (connect|initialize|create)|"
                                             r"Operation not permitted", out.stderr):
            pytest.skip("systemd-analyze verify cannot run here: %s" % out.stderr.strip())
        assert out.returncode == 0 and not out.stderr.strip(), (unit, out.stderr)


# --- the compose pilot -----------------------------------------------------------------------

COMPOSE = DEPLOY / "compose.yaml"
SERVICES = ("mosquitto", "postgres", "serve", "prometheus", "grafana")


def compose_services() -> dict:
    """{service: its block of text} (two-space indented keys under `services:`)."""
    text = COMPOSE.read_text()
    body = re.search(r"^services:\n(.*?)(?=^\S)", text, re.S | re.M).group(1)
    parts = re.split(r"^  ([a-z][a-z0-9_-]*):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_compose_pilot_files_fit_together():
    services = compose_services()
    assert set(SERVICES) <= set(services), services.keys()
    for block in services.values():       # published ports on the loopback only
        for port in re.findall(r'^\s+- "?([\d.:]+)"?$', block, re.M):
            if port.count(":") == 2:
                assert port.startswith("127.0.0.1:"), port
    for src in re.findall(r"^\s+- (\./[^:\s]+):", COMPOSE.read_text(), re.M):
        assert (DEPLOY / src).exists(), src
    serve = services["serve"]
    assert "dockerfile: deploy/Dockerfile" in serve and "context: .." in serve
    args = re.findall(r"^      - (.+)$", serve.split("command:")[1].split("environment:")[0], re.M)
    args = [a.strip('"') for a in args]
    assert args[0] == "serve"
    check_options(args[1:], help_options("serve"), "compose serve")
    metrics_port = args[args.index("--metrics-port") + 1]
    assert args[args.index("--metrics-bind") + 1] == "0.0.0.0"   # Prometheus is another container
    assert '"serve:%s"' % metrics_port in (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    datasource = (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    assert "url: http://prometheus:9090" in datasource
    provider = (DEPLOY / "grafana/provisioning/dashboards/ldpfleet.yml").read_text()
    path = re.search(r"path: (\S+)", provider).group(1)
    assert "./grafana/ldpfleet-dashboard.json:%s/ldpfleet-dashboard.json:ro" % path \
        in services["grafana"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert '".[postgres]"' in dockerfile
    for src in re.findall(r"^COPY (?:--chmod=\d+ )?([^-\s]\S*) ", dockerfile, re.M):
        if src != ".":                                  # (COPY --from=build: the stage's)
            assert (ROOT / src).exists(), src
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert "**/.venv" in ignored and "**/*.so" in ignored


def test_compose_config_is_valid(tmp_path):
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI on this machine")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the docker CLI has no compose plugin (`docker compose version` failed)")
    for name in ("postgres_password", "grafana_admin_password"):
        (tmp_path / name).write_text("pilot-secret\n")
    env = dict(os.environ, LDPFLEET_SECRETS=str(tmp_path))
    out = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "-q"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr


def test_one_metrics_port_everywhere():
    """README, the sample config, compose, the units, the Dockerfile and Prometheus' scrape
    config use serve's one deployment metrics port (9100 was in some, 9108 in others)."""
    from ldpfleet.commands.serve import DEFAULT_METRICS_PORT
    port = str(DEFAULT_METRICS_PORT)
    readme = (ROOT / "README.md").read_text() + (DEPLOY / "README.md").read_text()
    given = re.findall(r"--metrics-port[ =](\d+)", readme)
    assert given and set(given) == {port}, given
    assert re.findall(r"^metrics_port = (\d+)", (DEPLOY / "ldpfleet.toml").read_text(), re.M) == [port]
    args = re.findall(r"^      - (.+)$", compose_services()["serve"], re.M)
    args = [a.strip('"') for a in args]
    assert args[args.index("--metrics-port") + 1] == port
    assert re.findall(r'"serve:(\d+)"', (DEPLOY / "prometheus" / "prometheus.yml").read_text()) == [port]
    assert re.findall(r"^Environment=METRICS_PORT=(\d+)$",
                      (UNITS / "ldpfleet-serve@.service").read_text(), re.M) == [port]
    assert re.findall(r"^EXPOSE (\d+)$", (DEPLOY / "Dockerfile").read_text(), re.M) == [port]
    everything = readme + "".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file()
                                  and p.suffix in ("", ".yml", ".yaml", ".toml", ".service", ".md"))
    assert "9100" not in everything


# --- the pilot broker: broker-config's logins and ACL, never anonymous publish ----------------------

def test_compose_pilot_broker_uses_broker_config_logins_and_acl():
    """compose installs broker-config's passwd and acl (secrets) for the mosquitto user before
    mosquitto starts; serve logs in as the aggregator and MACs its acks; no anonymous listener."""
    services = compose_services()
    conf = (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
    assert re.search(r"^allow_anonymous false$", conf, re.M)
    assert not re.search(r"^allow_anonymous true", conf, re.M)
    for line in ("password_file /mosquitto/config/passwd", "acl_file /mosquitto/config/acl",
                 "use_username_as_clientid true"):
        assert re.search("^%s$" % re.escape(line), conf, re.M), line
    mosq = services["mosquitto"]
    for name, path in (("broker_passwd", "/mosquitto/config/passwd"),
                       ("broker_acl", "/mosquitto/config/acl")):
        assert "- %s" % name in mosq
        assert "-m 0600 /run/secrets/%s %s" % (name, path) in mosq
    text = COMPOSE.read_text()
    assert "file: ${LDPFLEET_SECRETS:-./secrets}/broker/passwd" in text
    assert "file: ${LDPFLEET_SECRETS:-./secrets}/broker/acl" in text
    serve = services["serve"]
    args = [a.strip('"') for a in re.findall(r"^      - (.+)$", serve.split("command:")[1]
                                              .split("environment:")[0], re.M)]
    assert args[args.index("--username") + 1] == "ldp-aggregator"
    assert args[args.index("--password-file") + 1] == "/run/secrets/aggregator_password"
    assert "--ack-key" in args
    readme = (DEPLOY / "README.md").read_text()
    assert "--aggregator-user ldp-aggregator --admin-user ldp-admin" in readme
    assert "ack-key init /var/lib/ldpfleet/ack.key" in readme


class _Peer:
    """A paho client that records what it receives and how its CONNECT was answered."""

    def __init__(self, port, username=None, password=None):
        import queue
        import threading
        import paho.mqtt.client as paho
        self.messages, self.connected, self.reason = queue.Queue(), threading.Event(), None
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=username or "anon",
                                  protocol=paho.MQTTv311)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.client.on_connect = lambda c, u, f, rc, p: (setattr(self, "reason", rc),
                                                         self.connected.set())
        self.client.on_message = lambda c, u, m: self.messages.put((m.topic, m.payload))
        self.client.reconnect_delay_set(5, 5)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def ok(self):
        assert self.connected.wait(10), "no CONNACK"
        return not self.reason.is_failure

    def subscribe(self, topic):
        import threading
        done = threading.Event()
        self.client.on_subscribe = lambda *a: done.set()
        self.client.subscribe(topic, qos=1)
        assert done.wait(10)

    def publish(self, topic, payload):
        self.client.publish(topic, payload, qos=1).wait_for_publish(10)

    def until(self, topic, payload):
        seen = []
        while True:
            item = self.messages.get(timeout=10)
            seen.append(item)
            if item == (topic, payload):
                return seen

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def test_pilot_broker_refuses_anonymous_and_forged_acks(tmp_path):
    """deploy/mosquitto/mosquitto.conf with broker-config's passwd and acl, run by a real
    mosquitto (paths moved into a temporary directory, `user` set to ours: compose's install
    step hands the files to the broker's user): an anonymous client is refused; a device and the
    load generator cannot publish acknowledgements or configs (a device's own ack topic
    included); the aggregator can, and the device receives them."""
    import csv
    import getpass
    from ldpfleet.broker.embedded import MosquittoProcess
    from ldpfleet.broker import secured as broker
    out = tmp_path / "broker"
    broker.write_secured_config(str(out), broker.SecuredBroker(
        "ldp-aggregator", ["dev-1"], admin_user="ldp-admin", loadgen_user="ldp-loadgen",
        insecure_plaintext=True, run_as=getpass.getuser()))
    with open(out / "credentials.csv") as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    port = free_port()
    conf = (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
    conf = (conf.replace("listener 1883", "listener %d 127.0.0.1" % port)
            .replace("/mosquitto/config/passwd", str(out / "passwd"))
            .replace("/mosquitto/config/acl", str(out / "acl"))
            .replace("/mosquitto/data/", "%s/" % (tmp_path / "data"))
            .replace("log_dest stdout", "log_dest file %s" % (tmp_path / "mosquitto.log")))
    (tmp_path / "data").mkdir()
    (tmp_path / "pilot.conf").write_text("user %s\n" % getpass.getuser() + conf)
    proc = MosquittoProcess(str(tmp_path / "pilot.conf"), port,
                            log_path=str(tmp_path / "mosquitto.log")).start()
    peers = []
    try:
        anon = _Peer(port)
        peers.append(anon)
        assert not anon.ok(), "the pilot broker let an anonymous client in"
        agg, dev, gen = (_Peer(port, u, creds[u]) for u in ("ldp-aggregator", "dev-1", "ldp-loadgen"))
        peers += [agg, dev, gen]
        assert agg.ok() and dev.ok() and gen.ok()
        dev.subscribe("ldp/c1/a/dev-1")
        dev.subscribe("ldp/c1/config")
        for who in (dev, gen):
            who.publish("ldp/c1/a/dev-1", b"forged ack")
            who.publish("ldp/c1/a/ldp-loadgen/sim-1", b"forged ack")
            who.publish("ldp/c1/config", b"forged config")
        agg.publish("ldp/c1/config", b"signed config")
        agg.publish("ldp/c1/a/dev-1", b"the aggregator's ack")
        assert dev.until("ldp/c1/a/dev-1", b"the aggregator's ack") == [
            ("ldp/c1/config", b"signed config"), ("ldp/c1/a/dev-1", b"the aggregator's ack")]
    finally:
        for p in peers:
            p.close()
        proc.stop()
