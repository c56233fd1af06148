"""What `serve` tells its log (service/ingest/progress.py, service/campaigns/events.py), read from a real
serve subprocess on a private Mosquitto: a progress line per campaign while it receives
(accepted and per second, duplicates, rejected by reason, broker drops), at most once per
--progress-interval and only when something changed; every advance and close with where it
came from (the CLI's user@host, the API token's name); and its shutdown (why, and what it
committed)."""
import getpass
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime

import numpy as np

from ldpfleet.broker.embedded import free_port
from ldpfleet.service import Store
from ldpfleet.service.campaigns.protocols import ProtocolOptions, create_protocol_campaign
from ldpfleet.service import BrokerSettings

from support.service import ServeProcess, new_campaign, publisher, report_messages

WRITE = "write-token-of-alice-0123456789"
PROGRESS = re.compile(
    r"^(\S+ \S+) ldpfleet.service INFO progress: campaign (\S+): ([\d,]+) accepted in ([\d.]+) s "
    r"\(([\d,]+)/s\), ([\d,]+) duplicates, ([\d,]+) rejected(?: \(([^)]*)\))?; ([\d,]+) accepted "
    r"since serve started; broker drops \(all campaigns\) \+([\d,]+)$")


def number(text: str) -> int:
    return int(text.replace(",", ""))


def full_log(serve) -> str:
    """The whole log (ServeProcess.log() is its tail)."""
    with open(serve.log_path, encoding="utf-8", errors="replace") as f:
        return f.read()


def log_lines(serve, pattern):
    return [m for m in map(pattern.match, full_log(serve).splitlines()) if m]


def wait_log(serve, text, timeout=30.0):
    deadline = time.monotonic() + timeout
    while text not in full_log(serve):
        assert serve.alive(), full_log(serve)
        assert time.monotonic() < deadline, "no %r in the log:\n%s" % (text, full_log(serve))
        time.sleep(0.1)


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "ldpfleet.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def post(port, path, token):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method="POST")
    req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def test_serve_logs_progress_changes_and_its_shutdown(mosquitto, tmp_path):
    state, camp = new_campaign(tmp_path, mosquitto.url, "cpu", "olh", 2.0, "0-63")
    key = str(tmp_path / "fleet-cpu.key")
    with Store(state) as store:
        miner = create_protocol_campaign(store, BrokerSettings.from_url(mosquitto.url), key, "hh",
                                         "ldpminer-rappor", 4.0, "64",
                                         ProtocolOptions(set_size=2, top=2))
    rng = np.random.default_rng(30)
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 64, 1200).astype(np.uint32), rng)
    good = report_messages("cpu", reports, prefix="d")
    sets = [[int(a), int(b)] for a, b in zip(rng.integers(0, 32, 300), rng.integers(32, 64, 300))]
    miner_msgs = report_messages("hh", miner.mechanism(1).perturb_batch(sets, rng), prefix="m")
    tokens = tmp_path / "write.token"
    tokens.write_text("# operators\nops-alice:%s\n" % WRITE)
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, batch_ms=20, log_path=str(tmp_path / "serve.log"),
                         extra_args=["--progress-interval", "3", "--http", "127.0.0.1:%d" % port,
                                     "--http-write-token-file", str(tokens),
                                     "--no-broker-check"]).start(timeout=120)
    try:
        pub = publisher(mosquitto.url, "pub-log")
        # a burst: 1000 reports, 40 of them sent again, 3 truncated
        pub.publish_all(good[:1000] + good[:40] + [("ldp/cpu/r/bad%d" % i, p[:-1]) for i, (_, p)
                                                    in enumerate(good[:3])] + miner_msgs)
        pub.wait_acked()
        serve.wait_counts("cpu", lambda c: c.get("received", 0) >= 1043)
        wait_log(serve, "progress: campaign hh:")
        time.sleep(4)  # a quiet spell longer than the interval
        pub.publish_all(good[1000:])  # a second burst
        pub.wait_acked()
        serve.wait_counts("cpu", lambda c: c.get("accepted", 0) >= 1200)
        deadline = time.monotonic() + 20
        while sum(number(m.group(3)) for m in log_lines(serve, PROGRESS)
                  if m.group(2) == "cpu") < 1200:
            assert time.monotonic() < deadline, full_log(serve)
            time.sleep(0.2)
        pub.close()

        # an advance from the CLI, a close through the API with a named token
        cli("campaign", "advance", "hh", "--state", state, "--broker", mosquitto.url)
        wait_log(serve, "campaign hh advanced to phase 2 by cli %s@%s (4 candidates from 300 "
                        "phase-1 reports)" % (getpass.getuser(), socket.gethostname()))
        assert post(port, "/campaigns/cpu/close", WRITE) == 200
        wait_log(serve, "campaign cpu closed by api token ops-alice")
    finally:
        assert serve.stop() == 0, full_log(serve)

    log = full_log(serve)
    progress = [m for m in log_lines(serve, PROGRESS) if m.group(2) == "cpu"]
    assert sum(number(m.group(3)) for m in progress) == 1200
    assert sum(number(m.group(6)) for m in progress) == 40
    assert sum(number(m.group(7)) for m in progress) == 3
    assert any(m.group(8) == "size 3" for m in progress), log
    assert number(progress[-1].group(9)) == 1200  # accepted since serve started
    assert len(progress) >= 2  # the second burst came after a quiet spell: its own line
    times = [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") for m in progress]
    assert all((b - a).total_seconds() >= 3 - 0.01 for a, b in zip(times, times[1:])), times
    for m in progress:  # the rate is accepted over the window (shown to 0.1 s)
        rate, accepted, window = number(m.group(5)), number(m.group(3)), float(m.group(4))
        assert abs(rate - accepted / window) <= 0.05 / window * rate + 1, m.group(0)
    assert [m.group(2) for m in log_lines(serve, PROGRESS)].count("hh") >= 1
    stopped = [line for line in log.splitlines() if "serve stopped (SIGTERM)" in line]
    assert len(stopped) == 1, log
    assert re.search(r"serve stopped \(SIGTERM\) after \d+ s: committed 1,543 messages since it "
                     r"started \(cpu: 1,200 accepted, 40 duplicates, 3 rejected; hh: 300 "
                     r"accepted, 0 duplicates, 0 rejected\)$", stopped[0]), stopped[0]


def test_progress_is_quiet_when_nothing_changes_and_can_be_switched_off(mosquitto, tmp_path):
    state, camp = new_campaign(tmp_path, mosquitto.url, "cpu", "olh", 2.0, "0-63")
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log"),
                         extra_args=["--progress-interval", "1", "--no-broker-check"])
    serve.start(timeout=120)
    time.sleep(3)
    assert serve.stop() == 0
    assert "progress:" not in full_log(serve)
    assert "serve stopped (SIGTERM)" in full_log(serve)
    assert "committed 0 messages since it started\n" in full_log(serve)

    rng = np.random.default_rng(2)
    msgs = report_messages("cpu", camp.mechanism(1).perturb_batch(
        rng.integers(0, 64, 50).astype(np.uint32), rng))
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve2.log"),
                         extra_args=["--progress-interval", "0", "--no-broker-check"])
    serve.start(timeout=120)
    try:
        pub = publisher(mosquitto.url, "pub-off")
        pub.publish_all(msgs)
        pub.wait_acked()
        pub.close()
        serve.wait_counts("cpu", lambda c: c.get("accepted", 0) >= 50)
        time.sleep(1.5)
    finally:
        assert serve.stop() == 0
    assert "progress:" not in full_log(serve)
    assert "committed 50 messages since it started (cpu: 50 accepted" in full_log(serve)
    with Store(state) as store:
        assert json.loads(store.meta("ingest.ready"))["pid"] == serve.pid


def test_token_files_name_their_tokens(tmp_path):
    """`NAME:TOKEN` lines name each operator's token (what serve's log says); a bare token is
    named after its file; comments, short tokens and repeats are handled or refused."""
    import pytest
    from ldpfleet.core.errors import ConfigError
    from ldpfleet.service.http.api import ApiTokens

    class Creds:
        def __init__(self, token):
            self.credentials = token

    write = tmp_path / "http-write.token"
    write.write_text("# who may advance and close\nalice:%s\nbob:%s\n\n" % ("a" * 32, "b" * 32))
    read = tmp_path / "http-read.token"
    read.write_text("r" * 40 + "\n")
    tokens = ApiTokens.from_files(str(read), str(write))
    assert tokens.write == {"alice": "a" * 32, "bob": "b" * 32}
    assert tokens.read == {"http-read.token": "r" * 40}
    assert ApiTokens.grants(Creds("b" * 32), tokens.write) == "bob"
    assert ApiTokens.grants(Creds("b" * 31), tokens.write) is None
    assert ApiTokens.grants(None, tokens.write) is None
    for text, why in (("alice:short\n", "at least 16"), ("a:%s\na:%s\n" % ("x" * 20, "y" * 20),
                                                         "given twice"), ("# none\n", "no token")):
        write.write_text(text)
        with pytest.raises(ConfigError, match=why):
            ApiTokens.from_files(None, str(write))
