"""A private Mosquitto on a free loopback port, stopped by its PID (never the shared one)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateMosquitto:
    """Start with `start()`; `stop()` kills by PID; `restart()` keeps the port (and, with
    persistence on, the broker's queued messages)."""

    def __init__(self, extra_conf: str = "", port: int = None, persistence: bool = True):
        if shutil.which("mosquitto") is None and not os.path.exists("/usr/sbin/mosquitto"):
            raise RuntimeError("mosquitto binary not found (apt-get install mosquitto)")
        self.binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="ldpfleet-mosq-")
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        lines = [
            "listener %d 127.0.0.1" % self.port,
            "allow_anonymous true",
            "max_queued_messages 1000000",
            "max_queued_bytes 0",
            "max_inflight_messages 0",
            "log_dest file %s" % os.path.join(self.dir, "mosquitto.log"),
        ]
        if os.geteuid() == 0:
            # As root mosquitto drops to the 'mosquitto' user and then cannot write its
            # private directory (persistence silently off, no log); keep it as root.
            lines.append("user root")
        if persistence:
            lines += ["persistence true", "persistence_location %s/" % self.dir]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n" + extra_conf)
        self.proc = None

    @property
    def url(self) -> str:
        return "mqtt://127.0.0.1:%d" % self.port

    def start(self, timeout: float = 10.0):
        self.proc = subprocess.Popen([self.binary, "-c", self.conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("mosquitto exited with %s; log: %s" % (self.proc.returncode, self.log()))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not listen on %d" % self.port)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self):
        self.stop()
        return self.start()

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "mosquitto.log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
