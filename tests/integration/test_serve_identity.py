"""Two `serve` processes on one broker. With the old fixed default client id they
took each other's session ~5 times a second, logged only as "Unspecified error". Now the default
id is derived from the state file, a second serve on the same state file is refused, and two
serves that are given the same id explicitly say so in an ERROR line."""
import subprocess
import sys
import time

from support.service import ServeProcess
from ldpfleet.service.ingest.loop import default_client_id
from ldpfleet.service.state.store import state_path

TAKEOVER = "another client uses client id"


def test_two_serves_with_their_own_state_keep_their_sessions(mosquitto, tmp_path):
    a = ServeProcess(mosquitto.url, "sqlite:///%s" % (tmp_path / "a.db")).start()
    b = ServeProcess(mosquitto.url, "sqlite:///%s" % (tmp_path / "b.db")).start()
    try:
        time.sleep(6)  # the old ping-pong disconnected both many times in this window
        assert a.alive() and b.alive()
        for serve, name in ((a, "a.db"), (b, "b.db")):
            log = serve.log()
            assert "as %s" % default_client_id(str(tmp_path / name)) in log, log
            assert "disconnected" not in log and TAKEOVER not in log, log
    finally:
        a.stop()
        b.stop()
    assert default_client_id(str(tmp_path / "a.db")) != default_client_id(str(tmp_path / "b.db"))
    assert default_client_id(str(tmp_path / "a.db")) == default_client_id(state_path(
        "sqlite:///%s" % (tmp_path / "a.db")))


def test_a_second_serve_on_the_same_state_is_refused(mosquitto, tmp_path):
    state = "sqlite:///%s" % (tmp_path / "one.db")
    first = ServeProcess(mosquitto.url, state).start()
    try:
        second = subprocess.run([sys.executable, "-m", "ldpfleet.cli", "serve", "--broker", mosquitto.url,
                                 "--state", state], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert "already served by ldpfleet serve pid %d" % first.pid in second.stderr
        assert first.alive()
    finally:
        first.stop()
    # the lock goes with the process, kill -9 included: a restart is not refused
    again = ServeProcess(mosquitto.url, state).start()
    again.kill()
    ServeProcess(mosquitto.url, state).start().stop()


def test_the_same_explicit_client_id_is_named_in_an_error(mosquitto, tmp_path):
    a = ServeProcess(mosquitto.url, "sqlite:///%s" % (tmp_path / "x.db"), client_id="shared-id").start()
    b = ServeProcess(mosquitto.url, "sqlite:///%s" % (tmp_path / "y.db"), client_id="shared-id",
                     ).start(wait_ready=False)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if any(TAKEOVER + " shared-id" in s.log() for s in (a, b)):
                break
            time.sleep(0.5)
        assert any(TAKEOVER + " shared-id" in s.log() for s in (a, b)), a.log() + b.log()
    finally:
        a.stop()
        b.stop()
