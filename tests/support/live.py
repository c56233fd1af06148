"""Long-running device processes of either client (MicroPython, C) with their log in a file,
for tests that feed a device several signed messages in sequence against a private broker."""
import time

from ldpfleet.provision import device_runner

from .c_client import build_client, start_client

CLIENTS = ["micropython", "c"]


def start(kind, state, port, campaign, log, value=3, once=False, timeout=40, keepalive=5):
    """One device process of `kind` on `state` (prepared with device_runner.prepare_device);
    without `once` it runs `timeout` seconds and exits 0."""
    if kind == "micropython":
        return device_runner.start_device(state, "127.0.0.1", port, campaign, log_path=log,
                                          value=value, once=once, timeout=timeout,
                                          keepalive=keepalive)
    return start_client(build_client(), state, port, campaign, value, log, once=once,
                        timeout=timeout, keepalive=keepalive)


def read_log(log) -> str:
    return log.read_text() if log.exists() else ""


def wait_log(log, text, count=1, timeout=30.0) -> str:
    """The log once it holds `text` `count` times (AssertionError with its tail otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        out = read_log(log)
        if out.count(text) >= count or time.monotonic() > deadline:
            assert out.count(text) >= count, "no %r x%d in:\n%s" % (text, count, out[-3000:])
            return out
        time.sleep(0.05)
