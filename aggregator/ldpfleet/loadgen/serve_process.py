"""`ldpfleet serve` as a subprocess: what the demo runs (and the tests and benchmarks, whose
support adds waiting on counters)."""
import json
import os
import subprocess
import sys
import time

from ..broker.child import ChildProcess
from ..service.state.store import Store, is_postgres, state_path


class ServeProcess(ChildProcess):
    """`ldpfleet serve` as a subprocess (`sys.executable -m ldpfleet.cli serve ...`), with its
    output in `log_path`. `start()` returns once it has subscribed (the state file's
    `ingest.ready` meta names its pid). `kill()` is SIGKILL by PID; `stop()` is SIGTERM (the
    pending batch is committed and acknowledged first)."""

    def __init__(self, broker_url: str, state_url: str, client_id: str = None, batch_size: int = None,
                 batch_ms: float = None, metrics_port: int = None, log_path: str = None,
                 extra_args=(), env: dict = None):
        self.state_url = state_url
        self.args = [sys.executable, "-m", "ldpfleet.cli", "serve", "--broker", broker_url,
                     "--state", state_url]
        for flag, value in (("--client-id", client_id), ("--batch-size", batch_size),
                            ("--batch-ms", batch_ms), ("--metrics-port", metrics_port)):
            if value is not None:
                self.args += [flag, str(value)]
        self.args += list(extra_args)
        self.client_id = client_id
        if log_path is None and is_postgres(state_url):
            import tempfile
            fd, log_path = tempfile.mkstemp(prefix="ldpfleet-serve-", suffix=".log")
            os.close(fd)
        self.log_path = log_path or state_path(state_url) + ".serve.log"
        self.env = env
        self.proc = None

    def start(self, timeout: float = 120.0, wait_ready: bool = True) -> "ServeProcess":
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        finally:
            log.close()
        if not wait_ready:
            return self
        deadline = time.monotonic() + timeout
        with Store(self.state_url) as store:
            while True:
                ready = store.meta("ingest.ready:" + self.client_id if self.client_id
                                   else "ingest.ready")
                if ready and json.loads(ready).get("pid") == self.proc.pid:
                    return self
                if self.proc.poll() is not None:
                    raise RuntimeError("serve exited with %s:\n%s" % (self.proc.returncode, self.log()))
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError("serve did not subscribe within %.0f s:\n%s" % (timeout, self.log()))
                time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid
