"""Workers on broker-config's hardened broker (use_username_as_clientid: a client id is its
login). `broker-config --workers N` makes one aggregator login per `serve --group` worker with the
aggregator's ACL, which also serves the `$share/<group>/...` subscription; two workers with their
own logins, one killed -9 and restarted mid-burst, accept every report exactly once and the
broker never closes a connection for another with the same login. Two serves that share one
login used to take each other's connection over about five times a second, forever: now the
one taken over says so in one line and stops: on repeated drops right after connecting (what
Mosquitto 2.0.11 does in both versions: it closes the old connection without a reason), or at
once on an MQTT 5 DISCONNECT with reason 0x8E "session taken over" (brokers that send it)."""
import csv
import getpass
import ipaddress
import threading
import time

import pytest
from cryptography import x509

from ldpfleet.broker.embedded import MosquittoProcess, free_port
from ldpfleet import cli
from ldpfleet.loadgen import FleetOptions, run_fleet
from ldpfleet.service import BrokerSettings, Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.core.signing import read_signing_key, write_signing_key
from support.service import ServeProcess, wait_counts
from test_tls import make_ca, make_server_cert

TAKEN_OVER = ("login agg is connected from elsewhere: each worker needs its own login; "
              "broker-config --workers N makes them")


def hardened_broker(tmp_path, extra_args, tls=False):
    """broker-config's broker on a free loopback port: (process, url, credentials, CA path)."""
    devices = tmp_path / "devices.txt"
    devices.write_text("dev-a\n")
    port = free_port()
    args = ["broker-config", "--out", str(tmp_path / "broker"), "--devices-file", str(devices),
            "--port", str(port), "--bind", "127.0.0.1", "--run-as", getpass.getuser(),
            "--log-file", str(tmp_path / "mosquitto.log")] + extra_args
    ca_path = None
    if tls:
        ca_path, ca_cert, ca_key = make_ca(tmp_path, "workers-ca")
        cert, key = make_server_cert(tmp_path, "srv", ca_cert, ca_key,
                                     [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        args += ["--certfile", str(cert), "--keyfile", str(key), "--cafile", str(ca_path)]
    else:
        args.append("--insecure-plaintext")
    assert cli.main(args) == 0
    with open(tmp_path / "broker" / "credentials.csv") as f:
        creds = {row["username"]: row["password"] for row in csv.DictReader(f)}
    proc = MosquittoProcess(str(tmp_path / "broker" / "mosquitto.conf"), port,
                            log_path=str(tmp_path / "mosquitto.log")).start()
    url = "%s://127.0.0.1:%d" % ("mqtts" if tls else "mqtt", port)
    return proc, url, creds, ca_path and str(ca_path)


def login_args(tmp_path, user, creds, ca=None):
    pw = tmp_path / ("%s.pw" % user)
    pw.write_text(creds[user] + "\n")
    pw.chmod(0o600)
    return ["--username", user, "--password-file", str(pw)] + (["--cafile", ca] if ca else [])


def test_workers_config_makes_one_login_each(tmp_path):
    devices = tmp_path / "devices.txt"
    devices.write_text("dev-a\n")
    base = ["broker-config", "--devices-file", str(devices), "--insecure-plaintext",
            "--run-as", getpass.getuser()]
    assert cli.main(base + ["--out", str(tmp_path / "a"), "--aggregator-user", "agg",
                            "--workers", "3"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "a" / "credentials.csv")))
    assert [r["username"] for r in rows if r["role"] == "aggregator"] == ["agg", "agg-2", "agg-3"]
    acl = (tmp_path / "a" / "acl").read_text()
    for user in ("agg", "agg-2", "agg-3"):
        block = acl.split("user %s\n" % user, 1)[1].split("\n\n", 1)[0]
        assert "topic readwrite ldp/#" in block and "messages/dropped" in block
    assert cli.main(base + ["--out", str(tmp_path / "b"), "--aggregator-user", "pool-a",
                            "--aggregator-user", "pool-b"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "b" / "credentials.csv")))
    assert [r["username"] for r in rows if r["role"] == "aggregator"] == ["pool-a", "pool-b"]
    assert cli.main(base + ["--out", str(tmp_path / "c"), "--aggregator-user", "x",
                            "--aggregator-user", "y", "--workers", "3"]) == 2
    assert cli.main(base + ["--out", str(tmp_path / "d"), "--aggregator-user", "x",
                            "--aggregator-user", "x"]) == 2


def test_two_workers_with_their_own_logins_kill9_restart(postgres_url, tmp_path):
    """broker-config --workers 2 on TLS; the fleet publishes through the load-generator login
    while worker a is killed -9 and restarted: every report accepted exactly once, both workers
    took part, and the broker log shows no connection closed for another one."""
    n = 8000
    proc, url, creds, ca = hardened_broker(tmp_path, ["--aggregator-user", "agg", "--workers", "2",
                                                      "--loadgen-user", "loadgen"], tls=True)
    try:
        key_file = str(tmp_path / "fleet.key")
        write_signing_key(key_file)
        admin = BrokerSettings.from_url(url, username="agg-admin", password=creds["agg-admin"],
                                        cafile=ca)
        with Store(postgres_url) as store:
            create_campaign(store, admin, key_file, "pool", "olh", "2", "64", issue=Issuance(
                delivery={"ack": True, "retry_s": 2, "retry_max_s": 4}))

        def worker(name, user):
            return ServeProcess(url, postgres_url, client_id=name, batch_size=500, batch_ms=50,
                                log_path=str(tmp_path / (name + ".log")),
                                extra_args=["--group", "pool", "--no-broker-check",
                                            "--status-interval", "0"]
                                + login_args(tmp_path, user, creds, ca))
        workers = [worker("pool-a", "agg").start(), worker("pool-b", "agg-2").start()]
        outcome = {}

        def fleet():
            try:
                outcome["result"] = run_fleet(
                    BrokerSettings.from_url(url, username="loadgen", password=creds["loadgen"],
                                            cafile=ca),
                    "pool", read_signing_key(key_file),
                    FleetOptions(devices=n, seed=11, ack_wait=120, max_inflight=500, rate=2000))
            except BaseException as exc:  # reported below
                outcome["error"] = exc
        runner = threading.Thread(target=fleet)
        try:
            runner.start()
            wait_counts(postgres_url, "pool", lambda c: c.get("accepted", 0) >= n // 4, timeout=60)
            workers[0].kill()  # mid-burst
            time.sleep(1.0)
            workers[0].start()
            runner.join(240)
            assert not runner.is_alive() and "error" not in outcome, outcome
            result = outcome["result"]
            assert result.acks["acknowledged"] == n, result.acks
            wait_counts(postgres_url, "pool", lambda c: c.get("accepted", 0) >= n, timeout=60)
            time.sleep(1.0)
            assert all(w.alive() for w in workers), [w.log() for w in workers]
        finally:
            runner.join(5)
            for w in workers:
                w.stop()
        with Store(postgres_url) as store:
            counters = store.counters("pool")
            seen = store.seen_count("pool", 1)
            partials = store.db.execute("SELECT worker, n FROM sketches WHERE campaign='pool'"
                                        " ORDER BY worker").fetchall()
        assert counters["accepted"] == n and seen == n, counters
        assert counters.get("second_report", 0) == 0, counters
        assert [w for w, _ in partials] == ["pool-a", "pool-b"] and min(k for _, k in partials) > 0
    finally:
        proc.stop()
    log = (tmp_path / "mosquitto.log").read_text()
    assert log.count("New client connected") >= 3  # a, b, a again (and the fleet, the admin)
    assert "already connected" not in log and "taken over" not in log, log[-3000:]


@pytest.mark.parametrize("version", ["5", "4"])
def test_a_serve_whose_login_is_taken_over_says_so_and_stops(tmp_path, version):
    """Two serves, one login (their client ids differ, the broker forces the login as id): one
    of them stops with exit 5 and the one-line reason; the other keeps serving. Neither log
    claims a client id the broker did not use."""
    proc, url, creds, _ca = hardened_broker(tmp_path, ["--aggregator-user", "agg"])
    serves = []
    try:
        for name in ("pool-a", "pool-b"):
            serves.append(ServeProcess(
                url, "sqlite:///%s" % (tmp_path / (name + ".db")), client_id=name,
                log_path=str(tmp_path / (name + ".log")),
                extra_args=["--mqtt", version, "--no-broker-check"]
                + login_args(tmp_path, "agg", creds)).start(wait_ready=name == "pool-a"))
            time.sleep(1.0)
        deadline = time.monotonic() + 60
        while all(s.alive() for s in serves) and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped = [s for s in serves if not s.alive()]
        assert len(stopped) == 1, [s.log() for s in serves]
        assert stopped[0].proc.returncode == 5
        log = stopped[0].log()
        assert TAKEN_OVER in log, log
        time.sleep(3.0)  # the other one is left alone
        survivor = next(s for s in serves if s.alive())
        for s in serves:
            text = s.log()
            assert "as login agg with client id %s" % s.client_id in text, text
            assert "connected to %s as %s" % (url, s.client_id) not in text
        assert survivor.alive()
    finally:
        for s in serves:
            if s.alive():
                s.stop()
        proc.stop()


def test_mqtt5_session_taken_over_stops_at_once(tmp_path):
    """The MQTT 5 DISCONNECT with reason 0x8E, as LeanClient reads it from the wire, stops a
    serve that logs in at the first drop (without a login it is a client-id clash: logged,
    and serve retries)."""
    import socket
    from ldpfleet.core.errors import LoginTakenOver
    from ldpfleet.mqtt.lean import LeanClient
    from ldpfleet.service.ingest.loop import IngestOptions, Ingestor

    def drop_with_0x8e():
        client = LeanClient(BrokerSettings.from_url("mqtt://127.0.0.1:1"), "w", protocol=5,
                            persistent=False)
        client.sock, broker_end = socket.socketpair()
        broker_end.sendall(b"\xe0\x02\x8e\x00")  # DISCONNECT, reason 0x8E, no properties
        try:
            with pytest.raises(ConnectionError) as err:
                client.poll(2.0)
            return err.value
        finally:
            broker_end.close()
            client.close()
    state = "sqlite:///%s" % (tmp_path / "s.db")
    settings = BrokerSettings.from_url("mqtt://127.0.0.1:1", username="agg", password="x")
    ingestor = Ingestor(state, settings, IngestOptions(client_id="w"))
    try:
        with pytest.raises(LoginTakenOver) as stop:
            ingestor._lost(drop_with_0x8e())
        assert TAKEN_OVER in str(stop.value) and "session taken over" in str(stop.value)
    finally:
        ingestor.store.close()
    anonymous = Ingestor(state, BrokerSettings.from_url("mqtt://127.0.0.1:1"),
                         IngestOptions(client_id="w"))
    try:
        anonymous._lost(drop_with_0x8e())  # logged, no stop
    finally:
        anonymous.store.close()
