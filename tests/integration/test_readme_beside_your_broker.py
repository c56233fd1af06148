"""README "Running it beside your broker", run as written against a private Mosquitto whose config
holds only `listener` and `allow_anonymous` (the packaged limits: max_inflight_messages 20,
max_queued_messages 1000): the commands of its code block, in order, with only the broker's
address and the metrics port replaced (the block's last command, broker-config, is the next
section's and needs certificates: tests/test_broker_config_tls.py). The campaign gets its
default `delivery` (acknowledgements, retry 30 s, the spread `campaign create` picks), `fleet`
gets no retry override and no `--rate`: all 10,000 simulated and 5 MicroPython reports are
acknowledged, `fleet` exits 0 and shows its progress on stderr, and nothing was dropped."""
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ldpfleet.broker.embedded import free_port
from support.brokers import PrivateMosquitto

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list:
    """The argv of every command in the section's first sh block (continuations joined,
    comments dropped), and whether it ends with `&`."""
    section = README.read_text().split("## Running it beside your broker", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            background = words[-1] == "&"
            commands.append((words[:-1] if background else words, background))
    return commands


def test_the_readme_block_delivers_every_report_behind_packaged_limits(tmp_path):
    commands = readme_commands()
    assert [argv[:2] for argv, _bg in commands] == [
        ["ldpfleet", "campaign"], ["ldpfleet", "ack-key"], ["ldpfleet", "serve"],
        ["ldpfleet", "campaign"],
        ["ldpfleet", "fleet"], ["ldpfleet", "campaign"], ["ldpfleet", "estimate"],
        ["ldpfleet", "broker-config"]]
    joined = " ".join(" ".join(argv) for argv, _bg in commands)
    assert "--retry" not in joined and "--rate" not in joined and "--spread-s" not in joined
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    metrics = str(free_port())
    serve = None
    with PrivateMosquitto(stock=True, persistence=False, extra_conf="sys_interval 1\n") as mosq:
        conf = Path(mosq.conf).read_text()
        assert "max_inflight" not in conf and "max_queued" not in conf  # packaged limits
        outputs = {}
        try:
            for argv, background in commands[:-1]:
                argv = [mosq.url if a == "mqtt://127.0.0.1:1883" else
                        metrics if a == "9108" else a for a in argv]
                cmd = [sys.executable, "-m", "ldpfleet.cli"] + argv[1:]
                if background:
                    log = open(tmp_path / "serve.log", "w")
                    serve = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log,
                                             stderr=subprocess.STDOUT)
                    deadline = time.monotonic() + 30
                    while "subscribed to" not in (tmp_path / "serve.log").read_text():
                        assert serve.poll() is None and time.monotonic() < deadline, \
                            (tmp_path / "serve.log").read_text()
                        time.sleep(0.1)
                    continue
                started = time.monotonic()
                done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                                      timeout=300)
                outputs[" ".join(argv[1:3])] = (done, time.monotonic() - started)
                assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-3000:])
        finally:
            if serve is not None:
                serve.terminate()
                serve.wait(30)
    created, _ = outputs["campaign create"]
    assert re.search(r"delivery\.spread_s 10: 10000 devices \(--fleet-size\)", created.stdout)
    fleet, seconds = outputs["fleet --broker"]
    result = json.loads(fleet.stdout)
    print("fleet: %.1f s, acks %s" % (seconds, result["acks"]))
    assert result["sent_by_kind"] == {"simulated": 10000, "micropython": 5}
    assert result["acks"]["acknowledged"] == 10005 and result["acks"]["unacknowledged"] == 0
    assert "acknowledged" in fleet.stderr  # its progress lines while it waited
    status, _ = outputs["campaign status"]
    assert "accepted 10005" in status.stdout, status.stdout
    assert "dropped" not in status.stdout, status.stdout  # the broker dropped nothing
    estimate, _ = outputs["estimate cpu-load"]
    assert json.loads(estimate.stdout)
