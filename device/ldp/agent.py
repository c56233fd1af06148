"""Live metrics and campaign discovery for the application (protocol_spec/v2 §5.4 `metric`).

    import ldp.agent
    agent = ldp.agent.Agent(identity)          # identity.json's dict; state dir "" (the root)
    agent.metric("temp", read_temp)            # read_temp() -> the current reading
    agent.run()                                # the broker of identity["broker"]

The agent subscribes to `ldp/+/config` and takes part in every campaign whose valid signed
config names a metric it provides: one `Device` (ldp/device.py: the decisions, unchanged) per
such campaign, all over one ledger and one trusted key set, run by the usual loop
(ldp/session.py: the agent stands where a Device stands). A provider is called once per fresh
report, when the report is made; what it returns, or a raise, is prepared as a fixed value is
(Device._read). Which campaigns the agent joins depends only on the metric names registered
(public), never on readings: a config without `metric`, or with one not provided, is skipped
(logged `skip`, nothing spent). Ledger, ε cap and lifetime budget work per campaign exactly as
for a device flashed for one campaign.
"""
import hashlib

from . import config as cfg
from .device import Device
from .envelope import KEYS_TOPIC, Verifier, trusted_keys
from .errors import ConfigError
from .keys import apply_keys
from .ledger import Ledger

MAX_CAMPAIGNS = 32  # campaigns joined at once; configs beyond are skipped (logged `skip`)


class Agent:
    """Runs providers of named metrics (`metric(name, fn)`) against every campaign that asks
    for one. `identity` as Device takes it; `state_dir` holds the ledger; `log(event,
    detail)` as Device's."""

    def __init__(self, identity, state_dir="", log=None):
        self.device_id = identity["device_id"]
        if not cfg.valid_name(self.device_id):
            raise ValueError("device id must match [A-Za-z0-9_-]{1,64}")
        self.identity = identity
        self.state_dir = state_dir
        self.ledger = Ledger(state_dir, identity["eps_cap_milli"], identity["lifetime_budget_milli"])
        held = self.ledger.keys
        self.verifier = Verifier(trusted_keys(held["keys"] if held else identity.get("trusted_keys")))
        self.providers = {}
        self.log = log or self._print
        self.topic_keys = KEYS_TOPIC
        self.topic_config = "ldp/+/config"
        self.topic_phase2 = "ldp/+/phase2"
        self.topic_ack = "ldp/+/a/" + self.device_id
        self.devices = {}  # campaign -> Device
        self.joined = []  # the same Devices: the loop iterates a list (no view allocated)
        self.judged = {}  # campaign -> SHA-256 of the config payload skipped (not verified again)
        self.pending = {}  # campaign -> config payload of a campaign not joined yet
        self.pending2 = {}  # campaign -> its phase-2 payload, kept until the config is judged
        self.inbox = {}
        self.kid_refused = {}
        self.once = False
        self.exit_code = None

    def _print(self, event, detail=""):
        print("ldp %s %s %s" % (self.device_id, event, detail))

    def metric(self, name, provider):
        """Provide metric `name` ([a-z][a-z0-9_]{0,31}): `provider()` returns its reading."""
        if not cfg.valid_metric(name) or not callable(provider):
            raise ValueError("metric name must match [a-z][a-z0-9_]{0,31}, provider callable")
        self.providers[name] = provider
        return self

    # --- what Session calls on the device it runs ---------------------------------------------
    def on_message(self, topic, msg):
        if topic == KEYS_TOPIC:
            self.inbox["keys"] = msg
            return
        parts = topic.split("/")
        if len(parts) < 3 or parts[0] != "ldp":
            return
        dev = self.devices.get(parts[1])
        if dev is not None:
            dev.on_message(topic, msg)
        elif parts[2] == "config" and msg:
            self.pending[parts[1]] = msg
        elif parts[2] == "phase2" and msg and parts[1] not in self.judged \
                and len(self.pending2) < MAX_CAMPAIGNS:
            self.pending2[parts[1]] = msg  # a retained phase 2 may come before the config is judged

    def process_inbox(self):
        msg = self.inbox.pop("keys", None)
        if msg is not None:
            apply_keys(self, msg)  # shared verifier and ledger: every Device trusts the new set
            for what, payload in self.inbox.items():
                if what != "keys":
                    self.pending.setdefault(what, payload)
            self.inbox = {}
            for dev in self.joined:
                for what, payload in dev.kid_refused.items():
                    dev.inbox.setdefault(what, payload)
                dev.kid_refused = {}
        while self.pending:
            campaign, payload = self.pending.popitem()
            self.discover(campaign, payload)
        for dev in self.joined:
            dev.process_inbox()

    def discover(self, campaign, payload):
        """A config on `ldp/<campaign>/config` of a campaign not joined: verified and checked;
        joined iff its `metric` is provided (public), else skipped until another config
        arrives on that topic."""
        digest = hashlib.sha256(payload).digest()
        phase2 = self.pending2.pop(campaign, None)
        if self.judged.get(campaign) == digest:
            return
        self.judged[campaign] = digest
        try:
            doc = self.verifier.open(payload)
            if doc.get("type") != "config":  # a close of a campaign never joined
                return
            cfg.check_config(doc)
        except ConfigError as exc:
            if exc.field == "kid":  # tried again after a key rotation (apply_keys)
                self.kid_refused[campaign] = payload
                del self.judged[campaign]
            self.log("refused", "config %s %s" % (campaign, exc))
            return
        metric = doc.get("metric")
        if doc["campaign"] != campaign or metric not in self.providers:
            self.log("skip", "campaign %s (metric %s not provided)" % (campaign, metric))
            return
        if len(self.devices) >= MAX_CAMPAIGNS:
            self.log("skip", "campaign %s (%d campaigns joined)" % (campaign, MAX_CAMPAIGNS))
            return
        del self.judged[campaign]
        dev = Device(self.state_dir, self.identity, campaign, None, log=self.log,
                     shared=(self.ledger, self.verifier, self.providers))
        self.devices[campaign] = dev
        self.joined.append(dev)
        self.log("joined", "campaign %s metric %s" % (campaign, metric))
        dev.on_message(dev.topic_config, payload)
        dev.process_inbox()
        if phase2 is not None:
            dev.on_message(dev.topic_phase2, phase2)
            dev.process_inbox()

    def flush(self, out):
        for dev in self.joined:
            dev.flush(out)

    def resend_due(self, out):
        for dev in self.joined:
            dev.resend_due(out)

    def done(self):
        return self.exit_code is not None

    # --- running ------------------------------------------------------------------------------
    def run(self, host=None, port=None, run_for=None, keepalive=30, backoff_max=30.0, ssl=None):
        """Run against the broker (host/port, else identity["broker"]) until `run_for`
        seconds have passed (None: for ever); returns the exit code."""
        from .session import Session
        broker = self.identity.get("broker", {})
        host = host or broker.get("host", "127.0.0.1")
        port = int(port or broker.get("port", 8883 if ssl else 1883))
        return Session(self, host, port, keepalive=keepalive, backoff_max=backoff_max,
                       run_for=run_for, user=broker.get("user"), password=broker.get("password"),
                       ssl=ssl).run()
