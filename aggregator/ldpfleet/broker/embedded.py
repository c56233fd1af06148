"""An embedded MQTT broker for `ldpfleet demo`, the tests and benchmarks: a private `mosquitto`
on a free loopback port, with sized queues and persistence in a temporary directory, started as
a subprocess and stopped by its PID (`MosquittoProcess` runs any config, e.g. one that
`broker-config` wrote). The production config itself is `broker.secured`.

Mosquitto drops QoS 1 messages for a slow subscriber once that subscriber's queue is full
even though the publisher got its PUBACK (default `max_queued_messages` 1000; eclipse/mosquitto
issue #3687), so every config written here sizes the
queue explicitly. There is no in-process fallback: without the binary, `BrokerUnavailable`
says how to install it.
"""
import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time

from .child import ChildProcess
from .secured import queue_lines

MOSQUITTO_PATHS = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto", "/opt/homebrew/sbin/mosquitto")


class BrokerUnavailable(RuntimeError):
    """No broker binary could be found or started."""


def mosquitto_binary() -> str:
    """Path of the `mosquitto` binary (PATH first, then the usual sbin directories)."""
    found = shutil.which("mosquitto")
    if found:
        return found
    for path in MOSQUITTO_PATHS:
        if os.access(path, os.X_OK):
            return path
    raise BrokerUnavailable(
        "the mosquitto broker is not installed: `apt-get install mosquitto` (Debian/Ubuntu), "
        "`brew install mosquitto` (macOS), or pass --broker mqtt://HOST:PORT of a running broker")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class MosquittoProcess(ChildProcess):
    """A mosquitto subprocess running a given config file; `start()` waits until it listens
    on (host, port); `stop()` signals its PID only."""

    def __init__(self, conf: str, port: int, host: str = "127.0.0.1", log_path: str = None):
        self.binary = mosquitto_binary()
        self.conf = conf
        self.host = host
        self.port = port
        self.log_path = log_path
        self.proc = None

    @property
    def url(self) -> str:
        return "mqtt://%s:%d" % (self.host, self.port)

    def start(self, timeout: float = 10.0):
        self.proc = subprocess.Popen([self.binary, "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise BrokerUnavailable("mosquitto exited with status %s; log:\n%s" % (code, self.log()))
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise BrokerUnavailable("mosquitto did not listen on %s:%d within %.0f s"
                                % (self.host, self.port, timeout))


class EmbeddedBroker(MosquittoProcess):
    """A private, anonymous mosquitto on a free loopback port with sized queues and
    persistence in its own temporary directory (removed by `close()`)."""

    def __init__(self, port: int = None, host: str = "127.0.0.1", persistence: bool = True,
                 max_queued_messages: int = 1_000_000, max_queued_bytes: int = 0,
                 extra_conf: str = "", workdir: str = None, queue_limits: bool = True):
        self._own_dir = workdir is None
        directory = workdir or tempfile.mkdtemp(prefix="ldpfleet-broker-")
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        port = port or free_port(host)
        conf = os.path.join(directory, "mosquitto.conf")
        log_path = os.path.join(directory, "mosquitto.log")
        lines = ["listener %d %s" % (port, host), "allow_anonymous true",
                 "log_dest file %s" % log_path]
        if queue_limits:  # False: Mosquitto's own defaults (what a stock install runs with)
            lines += queue_lines(max_queued_messages, max_queued_bytes)
        if os.geteuid() == 0:
            # As root mosquitto drops to the 'mosquitto' user and then cannot write this
            # private directory (persistence silently off, no log): keep it as root.
            lines.append("user root")
        if persistence:
            lines += ["persistence true", "persistence_location %s/" % directory,
                      "autosave_interval 60"]
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n" + extra_conf)
        super().__init__(conf, port, host, log_path)

    def restart(self):
        """Stop and start on the same port (with persistence on, queued messages survive)."""
        self.stop()
        return self.start()

    def close(self):
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(self, *exc):
        self.close()
