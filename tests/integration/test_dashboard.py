"""The live dashboard (service/http/dashboard/) in headless Chromium against a real
`serve --http` subprocess on a real mosquitto: every number the page shows (its `data-field`
and `data-value`, and the text a user reads) equals the API's JSON — reports accepted per
phase, rejections by reason, the heavy hitters with their intervals, the chart's bars and
error bars, a two-phase protocol's answer — with no console error and no request off this
machine; a screenshot goes to tests/artifacts/dashboard.png. And `ldpfleet demo --dashboard`
prints a working URL (with a fresh read token), keeps its broker and serve up until SIGINT,
then exits 0 and leaves no process behind.

Chromium and its WebDriver are Debian's `chromium` and `chromium-driver` (tools/setup.sh
installs them); Selenium drives them by explicit path with SE_OFFLINE, so nothing is
downloaded."""
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from ldpfleet.broker.embedded import free_port
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
from ldpfleet.service.campaigns.protocols import ProtocolOptions, create_protocol_campaign
from ldpfleet.core.signing import write_signing_key
from support.service import ServeProcess, publisher, report_messages

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(TESTS, "artifacts")  # tests/artifacts, ignored by git
TOKEN = "dashboard-read-token-0123456789"
SEED = 1915
TABLE_TOP, CHART_TOP = 10, 32  # app.js: the heavy-hitters table and the chart

needs_browser = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
    reason="needs Debian's chromium and chromium-driver (tools/setup.sh installs them)")


# --- the browser ------------------------------------------------------------------------------

@pytest.fixture
def browser(monkeypatch):
    """Headless Chromium through chromedriver, both by path (selenium-manager stays offline),
    with the console and the network (performance) logs."""
    pytest.importorskip("selenium", reason="the test extra: pip install -e '.[test]'")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_rendered(driver, renders=1, timeout=30.0):
    """Until the page has drawn `renders` times from the API (body[data-renders])."""
    deadline = time.monotonic() + timeout
    while True:
        state = driver.execute_script("return [document.body.dataset.renders || '0', "
                                      "document.body.dataset.state || '']")
        if int(state[0]) >= renders and state[1] == "ok":
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the dashboard did not render (state %r): %s"
                               % (state, driver.find_element("tag name", "body").text[:2000]))
        time.sleep(0.1)


# Every element with data-field at one instant (the page redraws every few seconds).
COLLECT = """
return Array.from(document.querySelectorAll('[data-field]')).map(e => ({
  field: e.getAttribute('data-field'), value: e.getAttribute('data-value'),
  low: e.getAttribute('data-low'), high: e.getAttribute('data-high'),
  text: e.textContent, tag: e.tagName}));
"""


def page_fields(driver) -> dict:
    fields = {}
    for e in driver.execute_script(COLLECT):
        assert e["field"] not in fields, "data-field %s shown twice" % e["field"]
        fields[e["field"]] = e
    return fields


def shown_number(text: str):
    """(value, half a unit of the last digit shown) of a number as the page writes it:
    `1,500`, `485.8`, `-0.69%` (a fraction)."""
    t = text.strip().replace(",", "")
    percent = t.endswith("%")
    t = t.rstrip("%")
    assert re.fullmatch(r"-?\d+(\.\d+)?", t), text
    decimals = len(t.split(".")[1]) if "." in t else 0
    scale = 0.01 if percent else 1.0
    return float(t) * scale, 0.5 * 10 ** -decimals * scale


def assert_shows(fields: dict, field: str, expected):
    """The page shows `expected` at `field`: exactly in data-value, rounded in the text."""
    assert field in fields, "the page has no %s (it has %s)" % (field, sorted(fields)[:40])
    e = fields[field]
    assert float(e["value"]) == pytest.approx(expected, rel=1e-12, abs=1e-12), (field, e, expected)
    value, half_unit = shown_number(e["text"])
    assert abs(value - expected) <= half_unit * (1 + 1e-9) + 1e-12, (field, e["text"], expected)


# --- the API ----------------------------------------------------------------------------------

def get(port, path, token=TOKEN):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def get_json(port, path):
    status, body = get(port, path)
    assert status == 200, (path, status, body)
    return json.loads(body)


# --- the campaigns ----------------------------------------------------------------------------

def miner_campaign(state, broker_url, key):
    """`miner`: an LDPMiner campaign folded in process (400 devices per phase) and advanced to
    phase 2 by the CLI: a two-phase protocol whose estimate is its answer."""
    from ldpfleet import cli
    rng = np.random.default_rng(SEED)
    with Store(state) as store:
        camp = create_protocol_campaign(store, BrokerSettings.from_url(broker_url), key, "miner",
                                        "ldpminer-rappor", 6.0, "64",
                                        ProtocolOptions(set_size=4, top=3))
    sets = [sorted({3, 9} | set((rng.zipf(1.5, 2) % 64).tolist())) for _ in range(400)]
    fold(state, report_messages("miner", camp.mechanism(1).perturb_batch(sets, rng), "m1-"))
    assert cli.main(["campaign", "advance", "miner", "--state", state, "--broker", broker_url,
                     "--json"]) == 0
    with Store(state) as store:
        phase2 = store.require_campaign("miner").mechanism(2)
    fold(state, report_messages("miner", phase2.perturb_batch(sets, rng), "m1-"))


def fold(state, messages):
    ingestor = Ingestor(state, options=IngestOptions(client_id="fold"))
    try:
        ingestor.process_batch(messages)
    finally:
        ingestor.store.close()


def bad_reports(camp, rng):
    """{reason: count} and the messages: truncated reports, a wrong version, wrong flags."""
    good = [row.tobytes() for row in camp.mechanism(1).perturb_batch(rng.integers(0, 64, 30), rng)]
    messages, want = [], {"size": 7, "version": 5, "flags": 3}
    for i in range(7):
        messages.append(("ldp/cpu-load/r/trunc%d" % i, good[i][:5 + i]))
    for i in range(5):
        messages.append(("ldp/cpu-load/r/ver%d" % i, bytes([9]) + good[7 + i][1:]))
    for i in range(3):
        messages.append(("ldp/cpu-load/r/flag%d" % i, good[12 + i][:3] + bytes([0x80])
                         + good[12 + i][4:]))
    return messages, want


@needs_browser
def test_dashboard_shows_what_the_api_answers(mosquitto, tmp_path, browser):
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "fleet.key")
    trusted = write_signing_key(key).public
    miner_campaign(state, mosquitto.url, key)
    with Store(state) as store:
        camp = create_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "cpu-load",
                               "olh", 2.0, "0-63")
    token_file = tmp_path / "read.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log"), extra_args=[
        "--http", "127.0.0.1:%d" % port, "--http-token-file", str(token_file),
        "--no-broker-check"]).start()
    try:
        # 400 simulated devices through the broker, then 40 of them again (the same seed
        # re-sends byte-identical reports: duplicates), then a few malformed messages.
        fleet = run_fleet(mosquitto.url, "cpu-load", trusted,
                          FleetOptions(devices=400, dist="zipf:1.3", seed=SEED))
        assert fleet.sent == 400
        run_fleet(mosquitto.url, "cpu-load", trusted, FleetOptions(devices=40, dist="zipf:1.3",
                                                                   seed=SEED))
        messages, want = bad_reports(camp, np.random.default_rng(SEED + 1))
        pub = publisher(mosquitto.url, "dashboard-bad")
        try:
            pub.publish_all(messages)
            pub.wait_acked()
        finally:
            pub.close()
        serve.wait_counts("cpu-load", lambda c: c.get("accepted", 0) >= 400
                          and c.get("duplicate", 0) >= 40
                          and sum(c.get(k, 0) for k in want) >= sum(want.values()))

        browser.get("http://127.0.0.1:%d/?token=%s" % (port, TOKEN))
        wait_rendered(browser)
        # the token left the address bar (it stays in sessionStorage for this tab)
        assert "token" not in browser.current_url
        fields = page_fields(browser)

        rows = {r["campaign"]: r for r in get_json(port, "/campaigns")}
        assert set(rows) == {"miner", "cpu-load"}
        for name, row in rows.items():
            assert_shows(fields, "overview.%s.accepted" % name, row["accepted"])
            assert_shows(fields, "overview.%s.rejected_other" % name,
                         row["rejected"] - row["duplicates"])
            assert_shows(fields, "overview.%s.duplicates" % name, row["duplicates"])
            assert_shows(fields, "overview.%s.phase" % name, row["phase"])

        # cpu-load: one phase, its rejections, the heavy hitters and the chart
        status = get_json(port, "/campaigns/cpu-load")
        assert status["accepted"] == 400 and status["phase"] == 1
        assert {k: status["rejected"].get(k) for k in want} == want
        assert status["rejected"]["duplicate"] == 40
        assert_shows(fields, "campaign.cpu-load.accepted", status["accepted"])
        assert_shows(fields, "campaign.cpu-load.received", status["received"])
        assert_shows(fields, "campaign.cpu-load.rejected_other",
                     status["rejected_total"] - status["rejected"]["duplicate"])
        assert_shows(fields, "campaign.cpu-load.duplicates", status["rejected"]["duplicate"])
        assert_shows(fields, "campaign.cpu-load.accepted.phase1", status["phases"][0]["reports"])
        assert_shows(fields, "campaign.cpu-load.epsilon.phase1", 2.0)
        assert_shows(fields, "campaign.cpu-load.epsilon.total", 2.0)
        assert_shows(fields, "campaign.cpu-load.ci_halfwidth.phase1",
                     status["phases"][0]["expected_error"]["ci_halfwidth_count"])
        assert fields["campaign.cpu-load.state.phase1"]["text"] == "open"
        shown_reasons = {f.split(".")[-1] for f in fields
                         if f.startswith("campaign.cpu-load.rejected.")}
        assert shown_reasons == set(status["rejected"])
        for reason, count in status["rejected"].items():
            assert_shows(fields, "campaign.cpu-load.rejected.%s" % reason, count)

        est = get_json(port, "/campaigns/cpu-load/estimate?format=json&top=%d" % CHART_TOP)
        assert est["n"] == 400 and len(est["items"]) == CHART_TOP
        assert_shows(fields, "estimate.cpu-load.n", est["n"])
        shown_items = {f.split(".")[2] for f in fields if f.startswith("estimate.cpu-load.")
                       and f.endswith(".estimate")}
        assert shown_items == {str(r["item"]) for r in est["items"][:TABLE_TOP]}
        for row in est["items"][:TABLE_TOP]:
            prefix = "estimate.cpu-load.%s." % row["item"]
            for key in ("rank", "estimate", "frequency", "ci_low", "ci_high"):
                assert_shows(fields, prefix + key, row[key])
        bars = [f for f in fields if f.startswith("chart.cpu-load.") and f.endswith(".estimate")]
        assert len(bars) == CHART_TOP
        for row in est["items"]:
            bar = fields["chart.cpu-load.%s.estimate" % row["item"]]
            assert float(bar["value"]) == pytest.approx(row["estimate"])
            ci = fields["chart.cpu-load.%s.ci" % row["item"]]
            assert float(ci["low"]) == pytest.approx(row["ci_low"] * est["n"])
            assert float(ci["high"]) == pytest.approx(row["ci_high"] * est["n"])

        # miner: two phases (phase 2 current), epsilon per phase and per device, its answer
        status = get_json(port, "/campaigns/miner")
        assert status["phase"] == 2 and status["protocol"]["protocol"] == "ldpminer-rappor"
        for ph in status["phases"]:
            assert_shows(fields, "campaign.miner.accepted.phase%d" % ph["phase"], ph["reports"])
            assert_shows(fields, "campaign.miner.epsilon.phase%d" % ph["phase"], ph["epsilon"])
        assert_shows(fields, "campaign.miner.epsilon.total",
                     sum(ph["epsilon"] for ph in status["phases"]))
        assert fields["campaign.miner.state.phase1"]["text"] == "done"
        assert fields["campaign.miner.state.phase2"]["text"] == "open"
        answer = get_json(port, "/campaigns/miner/estimate?format=json")
        assert answer["protocol"] == "ldpminer-rappor" and answer["items"]
        assert_shows(fields, "answer.miner.n", answer["n"])
        for row in answer["items"]:
            for key in ("rank", "estimate", "frequency", "phase1_frequency"):
                assert_shows(fields, "answer.miner.%s.%s" % (row["item"], key), row[key])
        bars = [f for f in fields if f.startswith("chart.miner.") and f.endswith(".estimate")]
        assert len(bars) == len(answer["items"])  # the chart draws the answer, as the table
        for row in answer["items"]:
            bar = fields["chart.miner.%s.estimate" % row["item"]]
            assert float(bar["value"]) == pytest.approx(row["estimate"])

        # a later refresh redraws with the same numbers (the page polls by itself)
        wait_rendered(browser, renders=2, timeout=20)
        assert page_fields(browser)["campaign.cpu-load.accepted.phase1"]["value"] == "400"

        os.makedirs(ARTIFACTS, exist_ok=True)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1400, min(height + 140, 8000))
        time.sleep(0.3)
        browser.save_screenshot(os.path.join(ARTIFACTS, "dashboard.png"))

        console = browser.get_log("browser")
        assert not [e for e in console if e["level"] == "SEVERE"], console
        requested = requested_urls(browser)
        assert any(u.endswith("/campaigns") for u in requested), requested
        # nothing but this server (and data: URLs): no CDN, no font, no tracker
        off_machine = [u for u in requested if not u.startswith(("http://127.0.0.1:%d/" % port,
                                                                 "data:"))]
        assert not off_machine, off_machine

        # without a token (a fresh tab's storage): the page asks for one instead of failing
        browser.execute_script("sessionStorage.clear()")
        browser.get("http://127.0.0.1:%d/" % port)
        deadline = time.monotonic() + 20
        while browser.execute_script("return document.body.dataset.state") != "auth":
            assert time.monotonic() < deadline, browser.find_element("tag name", "body").text
            time.sleep(0.1)
        assert browser.find_element("id", "auth").is_displayed()
        assert serve.alive()
    finally:
        assert serve.stop() == 0, serve.log()


def requested_urls(driver) -> list:
    """Every URL the page asked for (Chromium's network events in the performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


# --- ldpfleet demo --dashboard ----------------------------------------------------------------

class Lines:
    """The stdout lines of a process, read by a thread (a select() on the pipe would miss
    lines already in the reader's buffer)."""

    def __init__(self, stream):
        self.queue, self.seen = queue.Queue(), []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.queue.put(line)
        self.queue.put(None)

    def until(self, pattern, timeout):
        """Lines until one matches `pattern`: its match."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError("no %r in the demo's output:\n%s" % (pattern, self.text()))
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def rest(self, timeout=10.0) -> str:
        """Everything up to the end of the stream."""
        try:
            while True:
                line = self.queue.get(timeout=timeout)
                if line is None:
                    break
                self.seen.append(line)
        except queue.Empty:
            pass
        return self.text()

    def text(self) -> str:
        return "".join(self.seen)


def test_demo_dashboard_stays_up_until_sigint(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ldpfleet.cli", "demo", "--dashboard", "--devices", "300",
         "--micropython", "0", "--domain", "16", "--seed", "5", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = Lines(proc.stdout)
        first = lines.until(r"dashboard\s+(http://\S+)", 120)
        # ... and, after the summary, the URL again with how to stop
        lines.until(r"Ctrl-C stops them", 120)
        text = lines.text()
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", text)]
        assert len(pids) == 2, text  # mosquitto and serve
        assert "lost 0" in text and "top 10 heavy hitters" in text
        url = urllib.parse.urlsplit(first.group(1))
        token = urllib.parse.parse_qs(url.query)["token"][0]
        assert len(token) >= 16 and token == (out / "dashboard.token").read_text().strip()
        assert oct((out / "dashboard.token").stat().st_mode & 0o777) == "0o600"
        assert url.hostname == "127.0.0.1"
        status, page = get(url.port, "/", token=None)
        assert status == 200 and 'src="static/app.js"' in page
        status, script = get(url.port, "/static/app.js", token=None)
        assert status == 200 and "data-field" in script
        assert get(url.port, "/campaigns", token=None)[0] == 401
        status, body = get(url.port, "/campaigns", token=token)
        assert status == 200, body
        [row] = json.loads(body)
        assert row["campaign"].startswith("demo-") and row["accepted"] == 300
        assert all(alive(pid) for pid in pids)

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
        assert "stopping" in lines.rest()
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if alive(pid)], "left running: %s" % pids
        leftover = [pid for pid in all_pids() if str(out) in cmdline(pid)]
        assert not leftover, [cmdline(pid) for pid in leftover]
        with pytest.raises(OSError):
            urllib.request.urlopen("http://127.0.0.1:%d/healthz" % url.port, timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


# --- every kind of campaign at 1280 px ----------------------------------------------------------

def simulate(state, name, devices, seed, dist="zipf:1.3", again=False):
    """`devices` simulated devices of the campaign's current phase, as `ldpfleet fleet` draws
    and perturbs them (the public phase split, the campaign's set length), folded in process;
    `again`: the same reports a second time (duplicates)."""
    from ldpfleet.loadgen.campaign import CampaignView, phase_mechanism
    from ldpfleet.loadgen.items import campaign_set_size, item_distribution
    from ldpfleet.loadgen.simulated import simulated_device_ids, simulated_reports
    with Store(state) as store:
        camp = store.require_campaign(name)
    view = CampaignView(camp.config, camp.phase, camp.phase2)
    mech = phase_mechanism(view)
    ids = simulated_device_ids(devices, "sim%d" % seed)
    chosen, _, reports = simulated_reports(
        view, mech, item_distribution(dist, camp.config), ids, np.random.default_rng(seed),
        campaign_set_size(camp.config) if mech.set_valued else 0)
    messages = [("ldp/%s/r/%s" % (name, ids[i]), reports[i].tobytes()) for i in chosen.tolist()]
    fold(state, messages)
    if again:
        fold(state, messages)


def five_campaigns(state, key):
    """One of every kind the dashboard draws: OLH with re-sends (`cpu`), LDPMiner, LDPLCM and
    svim in phase 2 (their answers), auto in phase 1 (its plan in the status)."""
    from ldpfleet.service.campaigns.protocols import advance_campaign
    with Store(state) as store:
        create_campaign(store, None, key, "cpu", "olh", 2.0, "0-63")
        for name, proto, eps, domain, opts in (
                ("miner", "ldpminer-rappor", 6.0, "64", ProtocolOptions(set_size=4, top=3)),
                ("lcm", "ldplcm", 4.0, "1024", ProtocolOptions(sample_rate=0.3, theta=0.5,
                                                               sketch_k=16, sketch_m=64)),
                ("sv", "svim", 4.0, "256", ProtocolOptions(set_size=4, top=4)),
                ("auto", "auto", 4.0, "256", ProtocolOptions(set_size=4, top=4,
                                                             fleet_size=3000))):
            create_protocol_campaign(store, None, key, name, proto, eps, domain, opts)
    simulate(state, "cpu", 500, SEED, again=True)
    for name, devices in (("miner", 1500), ("lcm", 3000), ("sv", 3000)):
        simulate(state, name, devices, SEED + 1)
        with Store(state) as store:
            advance_campaign(store, None, name)
        simulate(state, name, devices, SEED + 1)
    simulate(state, "auto", 3000, SEED + 2)


def drawn(driver, name):
    """The chart's bars of campaign `name` in drawing order: (item, value, noise)."""
    return driver.execute_script("""
        return Array.from(document.querySelectorAll(
            'section[data-campaign="' + arguments[0] + '"] svg.chart rect[data-field]'))
          .map(e => [e.getAttribute('data-field'), Number(e.getAttribute('data-value')),
                     e.getAttribute('data-noise')]);""", name)


@needs_browser
def test_every_chart_draws_the_apis_answer_at_1280px(tmp_path, browser):
    """At 1280 px the page does not scroll sideways; every campaign's chart draws exactly the
    rows of the API answer its table lists (LDPLCM's and svim's answers too, not phase 2's raw
    estimates), rows that do not stand out are marked `noise` in table and chart, protocol
    parameters are labelled fields (no raw JSON: auto's plan is one line), re-sends are shown
    apart from rejections, and the trend is the API's /trend."""
    from ldpfleet.service.http.api import ApiTokens, create_app, start_http
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    five_campaigns(state, key)
    port = free_port()
    server = start_http(create_app(state, tokens=ApiTokens(read=TOKEN)), "127.0.0.1", port)
    try:
        browser.set_window_size(1280, 1000)
        browser.get("http://127.0.0.1:%d/?token=%s" % (port, TOKEN))
        wait_rendered(browser)
        width = browser.execute_script("return [document.documentElement.scrollWidth, "
                                       "document.documentElement.clientWidth, window.innerWidth]")
        assert width[0] <= width[1] and width[2] == 1280, width
        fields = page_fields(browser)
        cards = {n: browser.find_element("css selector", 'section[data-campaign="%s"]' % n).text
                 for n in ("cpu", "miner", "lcm", "sv", "auto")}
        noise_rows = 0
        for name in cards:
            status = get_json(port, "/campaigns/%s" % name)
            assert '{"' not in cards[name] and '":' not in cards[name], cards[name][:600]
            for junk in ("[object", "undefined", "NaN"):
                assert junk not in cards[name], (junk, cards[name][:1500])
            proto = status["protocol"]
            if proto and status["phase"] == 2:
                answer = get_json(port, "/campaigns/%s/estimate?format=json%s" % (
                    name, "&top=%d" % CHART_TOP if proto["protocol"] == "ldplcm" else ""))
                prefix = "answer"
            else:
                answer = get_json(port, "/campaigns/%s/estimate?format=json&top=%d"
                                  % (name, CHART_TOP))
                prefix = "estimate"
            assert answer["items"] and answer["significance"]["tested"] > 0
            bars = drawn(browser, name)
            assert [b[0] for b in bars] == ["chart.%s.%s.estimate" % (name, r["item"])
                                            for r in answer["items"]], name
            assert [b[1] for b in bars] == pytest.approx([r["estimate"] for r in answer["items"]])
            assert [b[2] for b in bars] == [str(r["noise"]).lower() for r in answer["items"]]
            for row in answer["items"][:TABLE_TOP]:
                f = "%s.%s.%s." % (prefix, name, row["item"])
                for key in ("rank", "estimate", "frequency"):
                    assert_shows(fields, f + key, row[key])
                assert fields[f + "noise"]["value"] == str(row["noise"]).lower()
                assert fields[f + "noise"]["text"] == ("noise" if row["noise"] else "")
                noise_rows += row["noise"]
            assert_shows(fields, "%s.%s.discoveries" % (prefix, name),
                         answer["significance"]["discoveries"])
            trend = get_json(port, "/campaigns/%s/trend" % name)
            series = fields["trend.%s.accepted" % name]
            assert len(trend["points"]) >= 2
            shown = browser.execute_script(
                "return document.querySelector('[data-field=\"trend.%s.accepted\"]')"
                ".getAttribute('data-series')" % name)
            assert [int(v) for v in shown.split(",")] == [p["accepted"] for p in trend["points"]]
            assert int(series["value"]) == status["accepted"]
        assert noise_rows >= 1  # some listed row is noise, and it is marked

        # the protocol parameters: labelled fields, auto's plan in one line
        assert_shows(fields, "campaign.sv.protocol.k", 4)
        assert_shows(fields, "campaign.sv.protocol.set_size", 4)
        assert "separation" in cards["sv"] and "chosen by auto" in cards["auto"]
        plan = get_json(port, "/campaigns/auto")["protocol"]["plan"]
        assert fields["campaign.auto.protocol.plan.chosen"]["text"] == plan["chosen_protocol"]
        assert len(cards["auto"]) < 2500, len(cards["auto"])

        # re-sends apart from rejections (neutral, own label)
        status = get_json(port, "/campaigns/cpu")
        assert status["rejected"] == {"duplicate": status["accepted"]}
        assert_shows(fields, "campaign.cpu.duplicates", status["accepted"])
        assert_shows(fields, "campaign.cpu.rejected_other", 0)
        assert "warn" not in browser.find_element(
            "css selector", '[data-field="campaign.cpu.duplicates"]').get_attribute("class")
        assert_shows(fields, "overview.cpu.duplicates", status["accepted"])
        assert_shows(fields, "overview.cpu.rejected_other", 0)

        os.makedirs(ARTIFACTS, exist_ok=True)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1280, min(height + 140, 9000))
        time.sleep(0.3)
        browser.save_screenshot(os.path.join(ARTIFACTS, "dashboard-1280.png"))
        console = browser.get_log("browser")
        assert not [e for e in console if e["level"] == "SEVERE"], console
    finally:
        server.should_exit = True
