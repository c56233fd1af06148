"""Real device processes: MicroPython (`device/main.py --once` through
`ldpfleet.provision.device_runner`) and the C client (`ldp_client --once`), one per device, each with
its own OS RNG and ledger."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from ..provision import device_runner
from ..mqtt import client as mqtt
from ..core.config import acknowledged
from ..core.errors import ConfigError
from ..core.protocols.ldplcm import reports_in_phase
from .campaign import CampaignView
from .items import ItemDistribution


def c_client_binary() -> str:
    """The C client (device/c_client), built by its build.sh/Makefile, or `ldp_client` on PATH."""
    built = device_runner.DEVICE_DIR / "c_client" / "build" / "ldp_client"
    if os.access(built, os.X_OK):
        return str(built)
    found = shutil.which("ldp_client")
    if found:
        return found
    raise ConfigError("c_clients", "the C client is not built: run device/c_client/build.sh "
                      "(needs libmosquitto-dev libssl-dev libcjson-dev)")


class _DeviceProcess:
    """A running device process whose output is read by a thread; `published` is set when the
    device logs `ldp <id> published phase=<P> ...` (both clients log a report that way once the
    broker has acknowledged it), `acked` when it logs `ldp <id> acked phase=<P> ...` (the
    aggregator's end-to-end acknowledgement, spec §6)."""

    def __init__(self, device_id: str, proc: subprocess.Popen, phase: int, need_ack: bool):
        self.device_id, self.proc = device_id, proc
        self.lines = []
        self.published = threading.Event()
        self.acked = threading.Event()
        self.done = self.acked if need_ack else self.published
        self._marker = "ldp %s published phase=%d " % (device_id, phase)
        self._ack_marker = "ldp %s acked phase=%d " % (device_id, phase)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(self._marker):
                self.published.set()
            elif line.startswith(self._ack_marker):
                self.acked.set()
        self.proc.stdout.close()

    def settle(self, deadline: float):
        """Wait until the process exits or has delivered this phase's report (published, or
        acknowledged when the campaign asks for acks; then stop it: in a two-phase campaign it
        would wait for the next phase); kill it at the deadline."""
        while self.proc.poll() is None and not self.done.is_set():
            if time.monotonic() > deadline:
                break
            self.done.wait(0.05)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if self.published.is_set() else signal.SIGKILL)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)

    def output(self) -> str:
        return "".join(self.lines)[-400:]


@dataclass
class RealDevices:
    """One kind of real device (`micropython` or `c`) for one campaign phase.

    Each device gets its own state directory (identity.json, value.json, ledger files, the
    layout both clients share) under `workdir/<kind>` (kept, so a re-run re-sends the memoised
    reports) or a temporary directory. Devices the public sampling rule leaves out of this
    phase are not started. A device counts as sent once it logs that the broker acknowledged
    its report of this phase; it is then stopped if still running. One that does not publish
    within `wait` seconds is an error."""

    kind: str
    broker: mqtt.BrokerSettings
    view: CampaignView
    dist: ItemDistribution
    trusted_keys: list
    """The public keys the devices trust (signing.PublicKey list)."""
    id_prefix: str
    logins: list = None
    """[(username, password)] of provisioned devices, one per real device: on a broker that
    binds client ids to logins each device needs its own (its id is its login, spec §4).
    None: every device gets the load generator's own credentials (open lab brokers)."""
    workdir: str = None
    wait: float = 60.0
    binary: str = None
    """The C client binary (default `c_client_binary()`)."""
    ack_root: bytes = None
    """The fleet's ack root key: each device is provisioned with its own ack key (spec §6)."""
    acked: int = 0
    """After `run`: how many devices logged the aggregator's acknowledgement."""

    @property
    def tag(self) -> str:
        """In device ids and directory names: `mp` or `c`."""
        return "mp" if self.kind == "micropython" else self.kind

    def run(self, indices):
        """One device per row of `indices` (its item, or its set), all at once. Returns
        (device ids that sent, their true counts, how many sent)."""
        if self.workdir is None:
            with tempfile.TemporaryDirectory(prefix="ldpfleet-%s-" % self.tag) as root:
                return self._run_in(root, indices)
        root = os.path.join(self.workdir, self.tag)
        os.makedirs(root, exist_ok=True)
        return self._run_in(root, indices)

    def _launch(self, state, value) -> subprocess.Popen:
        b, campaign = self.broker, self.view.config["campaign"]
        timeout = max(1.0, self.wait - 5)
        if self.kind == "micropython":
            return device_runner.start_device(state, b.host, b.port, campaign, once=True,
                                              timeout=timeout)
        argv = [self.binary or c_client_binary(), "--host", b.host, "--port", str(b.port),
                "--campaign", campaign, "--state-dir", str(state), "--value", json.dumps(value),
                "--once", "--timeout", str(int(timeout))]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def _login(self, i: int) -> dict:
        """The `broker` entry of device i's identity.json: our address and its credentials."""
        b = self.broker
        login = {"host": b.host, "port": b.port}
        if self.logins is not None:
            login.update(user=self.logins[i][0], password=self.logins[i][1])
        elif b.username is not None:
            login.update(user=b.username, password=b.password)
        if b.tls:
            login["tls"] = {"ca_file": os.path.abspath(b.cafile)}
        return login

    def _run_in(self, root, indices):
        doc, phase = self.view.config, self.view.phase
        if self.logins is not None:
            if len(self.logins) < len(indices):
                raise ConfigError("device_logins", "%d %s devices need %d device logins, got %d"
                                  % (len(indices), self.tag, len(indices), len(self.logins)))
            ids = [user for user, _ in self.logins[:len(indices)]]
        else:
            ids = ["%s-%s-%d" % (self.id_prefix, self.tag, i) for i in range(len(indices))]
        running = []
        try:
            for i, ok in enumerate(reports_in_phase(ids, doc, phase)):
                if not ok:
                    continue
                value = self.dist.value(indices[i])
                state = device_runner.prepare_device(os.path.join(root, ids[i]), ids[i],
                                                     self.trusted_keys, value=value,
                                                     campaign=doc["campaign"], broker=self._login(i),
                                                     ack_root=self.ack_root)
                running.append((i, _DeviceProcess(ids[i], self._launch(state, value), phase,
                                                  acknowledged(doc))))
            deadline = time.monotonic() + self.wait
            sent, counts, failures = [], {}, []
            self.acked = 0
            for i, dev in running:
                dev.settle(deadline)
                self.acked += dev.acked.is_set()
                if dev.published.is_set():
                    sent.append(dev.device_id)
                    self.dist.add_counts(counts, indices[i])
                else:
                    failures.append("%s exited %s without publishing phase %d: %s"
                                    % (dev.device_id, dev.proc.returncode, phase, dev.output()))
        finally:
            for _, dev in running:
                if dev.proc.poll() is None:
                    dev.proc.kill()
                    dev.proc.wait()
        if failures:
            raise RuntimeError("%d %s device(s) failed:\n%s"
                               % (len(failures), self.tag, "\n".join(failures)))
        return sent, counts, len(sent)
