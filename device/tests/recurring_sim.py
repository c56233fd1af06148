"""Drive an ldp.agent.Agent (or a one-campaign ldp.device.Device) through a recurring campaign
on a simulated clock, in-process on MicroPython (run by tests/integration/test_device_recurring.py).

  micropython recurring_sim.py JOB_JSON OUT_JSON

JOB: {"state": dir, "identity": {...}, "entry": "agent" | "device", "campaign": name,
"metric": name, "values": [reading per provider call, cycled] (a device: values[0], fixed),
"seed": int (the test-only "OS randomness": a seeded xorshift stream), "steps": [[t, [[topic,
payload], ...]], ...]}: at each step the clock reads t (unix seconds), the messages are
delivered (the clock-read gate of ldp/rounds.py opened: the clock jumps), then the loop's turn runs (process_inbox, flush, resend_due) and, with
"restart": true in a step's third slot, the entry point is built again over the same state
(a reset). OUT: {"log": [[t, event, detail]], "published": [[t, topic, hex]], "calls": provider
calls, "code": exit code or null}.
"""
import json
import sys

import ldp.config as cfg
import ldp.device as D
from ldp.agent import Agent
from stream import Stream  # tests/support/mp_stream.py STREAM_SOURCE, written by the test

CLOCK = [0]
cfg.unix_now = lambda: CLOCK[0]


def main(argv):
    with open(argv[0]) as f:
        job = json.load(f)
    rand = Stream(job["seed"])
    _init = D.Device.__init__

    def init(self, *args, **kw):
        _init(self, *args, **kw)
        self.rand = rand
    D.Device.__init__ = init
    log, published, calls = [], [], [0]
    values = job["values"]

    def read():
        v = values[calls[0] % len(values)]
        calls[0] += 1
        return v

    def record(event, detail=""):
        log.append([CLOCK[0], event, detail])

    class Out:
        def publish(self, topic, payload, qos=1):
            published.append([CLOCK[0], topic, "".join("%02x" % b for b in payload)])

    def build():
        if job["entry"] == "agent":
            a = Agent(job["identity"], job["state"], log=record)
            a.metric(job["metric"], read)
            return a
        return D.Device(job["state"], job["identity"], job["campaign"], values[0],
                        once=True, log=record)

    node, out = build(), Out()
    for step in job["steps"]:
        CLOCK[0] = step[0]
        if len(step) > 2 and step[2]:
            node = build()
        # the simulated clock jumps while ticks_ms hardly moves: every step reads the clock
        for dev in (node.joined if job["entry"] == "agent" else [node]):
            dev.round_gate = None
        for topic, payload in step[1]:
            node.on_message(topic, payload.encode())
        node.process_inbox()
        node.flush(out)
        node.resend_due(out)
    with open(argv[1], "w") as f:
        json.dump({"log": log, "published": published, "calls": calls[0],
                   "code": node.exit_code}, f)


main(sys.argv[1:])
