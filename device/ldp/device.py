"""The device's decisions (spec §4-§7), with no network code: which messages it accepts, which
phases it takes part in, what it reports, what the ledger is charged, when a queued report is due
and when an unacknowledged one is re-sent. `ldp/session.py` is the MQTT loop around it (connect,
subscribe, keep alive, reconnect) and hands its client to `flush` / `resend_due`, which publish
through it; the C client keeps `device.c` apart from `session.c` the same way.

Every accepted trigger (a config or phase-2 message, including the retained copy the
broker sends on every reconnect) (re)publishes the campaign phase's report: fresh and
ledgered the first time, the memoised bytes ever after. The aggregator dedupes by
(device id, nonce).

Acknowledgements (spec §6, when the config's `delivery.ack` is true): after publishing, the
device re-sends the identical bytes after retry_s x U[0.5, 1.5) seconds (OS RNG), doubling up
to retry_max_s, until an acknowledgement for exactly that (campaign_id, phase, nonce) arrives
on its own ack topic, the campaign is closed, or its not_after passes (logged `undelivered`).
Re-sends cost no ε; the waits depend only on the config and the OS RNG.

Spreading (spec §6, the config's `delivery.spread_s`): every publish a trigger queues (a fresh
report, or a memo re-published after a reconnect or a re-delivered config) waits its own
U[0, spread_s) from the OS RNG, drawn at the trigger, after the report is made and ledgered;
acknowledgement re-sends keep their own timers.

Privacy of behaviour (spec §7.1): nothing the device does depends on its value. An item or set
value is prepared once at start (`domain.DeviceValue`), or, for a live metric (ldp/agent.py),
read from its provider once per fresh report and prepared in place; a numeric reading is kept
as given and taken to its grid point at each fresh report by the same steps and heap whatever
it is (a number, NaN, inf, missing or not a number: `numeric_domain.grid_point`); an
out-of-domain value reports ⊥ (never a refusal); the ledger memo is checked before the value is
touched; lookups and the LDPLCM model take the same steps for every value; log lines carry no
value-derived text.
"""
import os
import time
from micropython import const

from . import config as cfg
from .domain import SET_CAPACITY, DeviceValue, DomainIndex
from .envelope import KEYS_TOPIC, Verifier, trusted_keys
from .keys import apply_keys
from .errors import BudgetExceeded, ConfigError
from .hash import murmur3
from .ledger import Ledger
from .mechanisms import BY_INDEX, LISTED, NUMERIC, SET_VALUED, make
from .numeric_domain import domain_metrics, grid_point
from .ack import ACK_MAC_SIZE, ack_accepts, ack_pads
from .report import ACK_SIZE
from .rounds import Rounds
from .sets import candidate_index, trim

EXIT_DONE = const(0)
EXIT_REFUSED = const(2)
MAX_ACKS_PENDING = const(8)


def join(state_dir, name):
    return state_dir + "/" + name if state_dir else name


class Device(Rounds):
    """One device taking part in one campaign: its decisions, fed messages by the session.
    A recurring campaign (spec §3.4: one report per round) runs through ldp/rounds.py.

    `identity`: {device_id, trusted_keys (public keys only, spec §5.2), eps_cap_milli, lifetime_budget_milli,
    set_capacity (optional), ack_key (optional: this device's acknowledgement key, spec §6)}.
    `value`: the device's item (int or str), a list of items for set-valued campaigns
    (anything else, or an item outside the campaign's domain, reports ⊥, spec §1); for a
    numeric campaign its reading (a number; hm: a list, one per metric), clipped to the grid;
    `high`: LDPLCM phase-2 decision when the phase-2 message carries no model.
    `once`: done when every phase this device takes part in has been delivered, or at the
    first refused config. `rand(n)`: the OS RNG (os.urandom), the only source of randomness.
    Reports leave through `flush(out)` and `resend_due(out)`: `out.publish(topic, bytes, qos=1)`
    is the session's MQTT client.
    """

    def __init__(self, state_dir, identity, campaign, value, *, high=False, once=False, log=None,
                 shared=None):
        self.device_id = identity["device_id"]
        if not cfg.valid_name(self.device_id) or not cfg.valid_name(campaign):
            raise ValueError("device id and campaign must match [A-Za-z0-9_-]{1,64}")
        # `shared` (ldp/agent.py): (ledger, verifier, providers) of an agent running one Device
        # per discovered campaign over one ledger; providers {metric: callable} (spec §5.4)
        self.providers = shared[2] if shared else None
        if shared:
            self.ledger, self.verifier = shared[0], shared[1]
        else:
            self.ledger = Ledger(state_dir, identity["eps_cap_milli"], identity["lifetime_budget_milli"])
            # the identity's keys (serial 0) until a rotation is applied (spec §5.2-§5.3)
            held = self.ledger.keys
            self.verifier = Verifier(trusted_keys(held["keys"] if held else identity.get("trusted_keys")))
        self.ack_pads = ack_pads(identity.get("ack_key"))  # spec §6: MAC'd acks only, with a key
        self.kid_refused = {}  # "config"/"phase2" -> payload refused for its key id
        self.last_payload = None
        self.campaign = campaign
        self.value = DeviceValue(value, identity.get("set_capacity", SET_CAPACITY))
        self.raw = value  # a strings campaign's value (spec §3.5): its code is built per report
        # numeric campaigns (spec §1.1): the reading(s) as given, one per metric for hm
        self.readings = value if isinstance(value, list) else [value]
        self.rand = os.urandom
        self.high = bool(high)
        self.once = once
        self.log = log or self._print
        self.topic_config = "ldp/%s/config" % campaign
        self.topic_phase2 = "ldp/%s/phase2" % campaign
        self.topic_report = "ldp/%s/r/%s" % (campaign, self.device_id)
        self.topic_ack = "ldp/%s/a/%s" % (campaign, self.device_id)
        self.topic_keys = KEYS_TOPIC
        self.inbox = {}
        self.acks = []
        self.awaiting = {}  # phase -> [report, due (ticks_ms), wait (s)]: unacknowledged
        self.outbox = []
        self.config = None
        self.config_digest = None  # the accepted config body's digest (spec §7.2 binding)
        self.domain = None
        self.domain_of = None
        self.phases = ()  # phases of the accepted config this device takes part in
        self.delivered = set()
        self.exit_code = None
        self.round = None  # the round of a recurring campaign handled last (spec §3.4)
        self.rounds_done = False
        self.round_mech = None  # the recurring campaign's memoised mechanism
        self.round_gate = None  # ticks_ms before which the clock need not be read (rounds.py)

    def _print(self, event, detail=""):
        print("ldp %s %s %s" % (self.device_id, event, detail))

    # --- messages ---------------------------------------------------------------------------
    def on_message(self, topic, msg):
        """Keep a received message (`topic` a str) for `process_inbox`: the last one per topic
        wins; at most MAX_ACKS_PENDING acknowledgements wait."""
        if topic == self.topic_keys:
            self.inbox["keys"] = msg
        elif topic == self.topic_config:
            self.inbox["config"] = msg
        elif topic == self.topic_phase2:
            self.inbox["phase2"] = msg
        elif topic == self.topic_ack and len(self.acks) < MAX_ACKS_PENDING:
            self.acks.append(msg)

    def process_inbox(self):
        while self.acks:
            self.on_ack(self.acks.pop(0))
        msg = self.inbox.pop("keys", None)
        if msg is not None:
            self.on_keys(msg)
        msg = self.inbox.pop("config", None)
        if msg is not None:
            self.on_config(msg)
        if self.config is not None:
            msg = self.inbox.pop("phase2", None)
            if msg is not None:
                self.on_phase2(msg)

    def on_keys(self, payload):
        apply_keys(self, payload)

    def _refuse(self, what, exc):
        if getattr(exc, "field", None) == "kid":
            self.kid_refused[what] = self.last_payload
        self.log("refused", "%s %s" % (what, exc))
        if self.once:
            self.exit_code = EXIT_REFUSED

    def participating(self, doc):
        """Phases of `doc` (checked by cfg.check_config) this device takes part in: all of
        them, unless the phases set `sample_rate_ppm` (LDPLCM, svim): then phase 1 iff
        H(utf8(device_id), salt) % 10^6 < sample_rate_ppm, phase 2 otherwise (spec §5) -- or,
        once it has reported one phase of the campaign id, that phase alone (what it recorded
        decides, whatever a config of the id says: never both phases)."""
        phases = doc["phases"]
        rates = cfg.sample_rates(phases)
        numbers = [ph["phase"] for ph in phases]
        if not rates or len(phases) == 1:
            return numbers
        for p in (1, 2):
            if self.ledger.memo(doc["campaign_id"], p) is not None:
                return [p]
        data = self.device_id.encode()
        sampled = murmur3(data, len(data), doc["salt"]) % cfg.PPM < rates[0]
        return [1] if sampled else [2]

    def on_close(self, doc):
        """A signed close (spec §5.4, §7.3): its id goes into the ledger with its not_before
        (the close's, else the held config's of that id; a replayed config of it is refused
        from then on). A close of the id the device holds (or of any id while it holds none)
        ends the campaign: nothing more is sent, `--once` is done. A close of another id (an
        older campaign of the same name) is only recorded: the campaign held goes on."""
        if doc["campaign"] != self.campaign:
            raise ConfigError("campaign", "close of campaign %r on our topic" % doc["campaign"])
        cid = doc["campaign_id"]
        held = self.config["campaign_id"] if self.config is not None else None
        not_before = doc.get("not_before")
        if not_before is None:
            not_before = self.config["not_before"] if held == cid else 0
        self.ledger.close(cid, not_before)
        if held is not None and held != cid:
            self.log("close-recorded", "campaign_id=%d (the campaign held, %d, goes on)" % (cid, held))
            return
        self.outbox = []
        self.awaiting = {}
        self.config = None
        self.config_digest = None
        self.round = None
        self.log("closed", "campaign_id=%d" % cid)
        if self.once:
            self.exit_code = EXIT_DONE

    def check_binding(self, doc, digest):
        """Spec §7.2-§7.3, public inputs only: a closed id, or a config issued at or before the
        closed-campaign watermark whose id this device is not bound to (`closed`); a bound id
        whose config body is not the one it spent under (`bound`)."""
        cid = doc["campaign_id"]
        bound = self.ledger.bound_digest(cid)
        if self.ledger.is_closed(cid):
            raise ConfigError("closed", "campaign id %d was closed" % cid)
        if bound is None and self.ledger.below_floor(doc["not_before"]):
            raise ConfigError("closed", "campaign id %d was issued (not_before %d) at or before "
                              "the closed-campaign watermark %d" % (cid, doc["not_before"],
                                                                   self.ledger.closed_floor))
        if bound is not None and bound != digest:
            raise ConfigError("bound", "campaign id %d is bound to the config this device "
                              "reported under (%s); this one differs (%s)" % (cid, bound, digest))

    def on_config(self, payload):
        self.last_payload = payload
        try:
            doc = self.verifier.open(payload)
            if doc.get("type") == "close":
                self.on_close(cfg.check_close(doc))
                return
            digest = self.verifier.body_digest
            doc = cfg.check_config(doc)
            if doc["campaign"] != self.campaign:
                raise ConfigError("campaign", "config of campaign %r on our topic" % doc["campaign"])
            if self.providers is not None and doc.get("metric") not in self.providers:
                raise ConfigError("metric", "this device provides no metric %r" % doc.get("metric"))
            self.check_binding(doc, digest)
            phases = self.participating(doc)
            recurring = "schedule" in doc
            # a recurring campaign (spec §3.4): its mechanism checks the parameters now; the
            # enrolment charge is due unless enrolled; the value is read only in a round
            round_mech = self._mechanism(doc, 1, {}) if recurring else None
            need = self.round_need(doc, round_mech) if recurring else 0
            for ph in doc["phases"]:
                if ph["eps_milli"] > self.ledger.eps_cap_milli:
                    raise BudgetExceeded("eps_cap", "phase %d eps_milli %d above the device cap %d"
                                         % (ph["phase"], ph["eps_milli"], self.ledger.eps_cap_milli))
                if not recurring and ph["phase"] in phases \
                        and self.ledger.memo(doc["campaign_id"], ph["phase"]) is None:
                    need += ph["eps_milli"]
            if need > self.ledger.remaining_milli:
                raise BudgetExceeded("lifetime_budget", "campaign needs eps_milli %d, %d remain"
                                     % (need, self.ledger.remaining_milli))
            # memo first (spec §7.1): a phase already paid for is re-sent untouched
            memo = self.ledger.memo(doc["campaign_id"], 1) if 1 in phases and not recurring else None
            mech = self._mechanism(doc, 1, {}) if 1 in phases and memo is None \
                and not recurring else None
            value = self._input(doc, mech) if mech is not None else None
        except (ConfigError, BudgetExceeded, ValueError) as exc:
            self._refuse("config", exc)
            return
        if self.config is None or self.config["campaign_id"] != doc["campaign_id"]:
            self.delivered = set()
            self.round = None
            self.rounds_done = False
        self.config = doc
        self.config_digest = digest
        self.phases = phases
        self.round_mech = round_mech
        self.log("accepted", "config campaign_id=%d phases=%s" % (doc["campaign_id"], phases))
        if recurring:
            self.round_tick(True)
        elif memo is not None:
            self._resend(1, memo)
        elif mech is not None:
            self.deliver(1, mech, value)

    def on_phase2(self, payload):
        self.last_payload = payload
        doc = self.config
        try:
            p2 = cfg.check_phase2(self.verifier.open(payload), doc)
            now = cfg.unix_now()
            if not doc["not_before"] <= now <= doc["not_after"]:
                raise ConfigError("validity", "the campaign's validity window has passed")
            if 2 not in self.phases:
                self.log("skip", "phase 2 (this device is not in it)")
                return
            memo = self.ledger.memo(doc["campaign_id"], 2)
            if memo is None:
                mech, value = self.phase2_input(doc, p2)
                if mech is None:  # shc without its phase-1 report: a function of the ledger
                    self.log("skip", "phase 2 (no shc phase-1 report of this campaign)")
                    self.phases = [p for p in self.phases if p != 2]
                    return
        except (ConfigError, BudgetExceeded, ValueError) as exc:
            self._refuse("phase2", exc)
            return
        detail = ""
        if "candidates" in p2:
            detail = " candidates=%d" % len(p2["candidates"])
        elif cfg.is_fallback(p2):
            detail = " fallback"
        self.log("accepted", "phase2 campaign_id=%d%s" % (doc["campaign_id"], detail))
        if memo is not None:
            self._resend(2, memo)
        else:
            self.deliver(2, mech, value)

    def phase2_input(self, doc, p2):
        """The phase-2 mechanism and this device's input for it, from an accepted config and
        a verified phase-2 body. LDPMiner (srappor, sh) and SVIM (psgrr, psolh): the set trimmed
        to the signed `candidates` (LDPMiner §4.4, ldpminer.trim_to_candidates), padded by the
        mechanism to the phase-2 `l`; the candidates are required and, for srappor, psgrr and
        psolh, also the items' order (LISTED).
        shc (spec §3.1): the candidates are checked, not used; the input is {"t", "y1", "x"}
        from the phase-1 memo and the ledger's bit, never the value, and the thresholds use the
        memo's eps1 (what phase 1 was charged), never a config's; (None, None) without them.
        LDPLCM: {"key", "high"} with high = g(index) >= P of the signed `model`.
        svim's flat branch (`"fallback": true`, spec §5.4): the config's fallback over the whole
        integer domain at the full l, on the untrimmed set."""
        name = doc["phases"][1]["mechanism"]
        if cfg.is_fallback(p2):  # svim's flat branch (spec §5.4): listless, no trimming
            mech = self._fallback_mechanism(doc)
            return mech, self._input(doc, mech)
        if name not in SET_VALUED:
            mech = self._mechanism(doc, 2, {})
            return mech, self._input(doc, mech, p2)
        if "candidates" not in p2:
            raise ConfigError("candidates", "the phase-2 message carries no candidate list")
        index = candidate_index(p2["candidates"])
        if name == "shc":
            return self._shc_phase2(doc)
        extra = {"candidates": p2["candidates"]} if name in LISTED else {}
        mech = self._mechanism(doc, 2, extra)
        return mech, trim(self._input(doc, mech), index)

    def _fallback_mechanism(self, doc):
        """The config's phase-2 fallback (psgrr/psolh over the integer domain, at phase 2's eps,
        phase byte 2, its own mechanism id in the header)."""
        fb = cfg.fallback_of(doc)
        ph = doc["phases"][1]
        return make(fb["mechanism"], ph["eps_milli"], cfg.domain_size(doc), doc["salt"],
                    doc["campaign_id"], 2, dict(fb["params"]))

    def _shc_phase2(self, doc):
        """shc phase 2's mechanism and input {"t", "y1", "x"}: the phase-1 memo's row and sign
        and the ledger's bit x (spec §3.1, §7.4), thresholds at the memo's eps1 (the ε phase 1
        was made with and charged); (None, None) if the memo or the bit is missing."""
        from .shc import memo_input
        cid = doc["campaign_id"]
        memo = self.ledger.memo(cid, 1)
        value = None if memo is None else memo_input(memo[1], self.ledger.shc_bit(cid))
        if value is None:
            return None, None
        return self._mechanism(doc, 2, {"eps1_milli": self.ledger.memo_eps_milli(cid, 1)}), value

    def _mechanism(self, doc, phase, extra):
        ph = doc["phases"][phase - 1]
        params = dict(ph.get("params", {}))
        params.update(extra)
        n = cfg.mechanism_domain_size(doc, ph["mechanism"])
        return make(ph["mechanism"], ph["eps_milli"], n, doc["salt"], doc["campaign_id"], phase,
                    params)

    def _domain(self, doc):
        """The accepted config's DomainIndex (built once per config: public work)."""
        if self.domain is None or self.domain_of != doc["campaign_id"]:
            self.domain = DomainIndex(doc["domain"])
            self.domain_of = doc["campaign_id"]
        return self.domain

    def _input(self, doc, mech, p2=None):
        """The device's value in the form `mech.report` takes (index, key, keys, or
        {"key", "high"}). Never refuses: ⊥ for a value outside the domain, out-of-domain set
        elements dropped (spec §1). LDPLCM's high/low decision: the phase-2 body's `model`,
        g(index) >= P in constant steps (ldp/lcm_model.py), or the caller's `high` when the body
        carries no model."""
        strings = doc["domain"]["type"] == "strings"
        if self.providers is not None:
            self._read(self.providers[doc["metric"]], not strings)
        name = mech.name
        if strings:  # spec §3.5: pem over the code's prefix; phase 2 the code's key
            if name == "pem":
                return {"device": self.device_id, "value": self.raw}
            from .pemkey import phase2_keyset
            return phase2_keyset(self.raw, doc["domain"]["max_len"])
        if name in NUMERIC:
            return self._grid_input(doc, name, mech.domain_size)
        dom = self._domain(doc)
        if name in SET_VALUED:
            return dom.set_keys(self.value)
        index, key = dom.single(self.value)
        if name in BY_INDEX:  # grr, oue and the memoised losue, lsue, lgrr (spec §3.2)
            return index
        if name == "lbitmean":  # the counter as given: the mechanism clamps it (spec §3.2)
            return self.readings[0] if self.value.single else None
        if name == "lcm":
            high = self.high
            if p2 is not None and "model" in p2:
                from .lcm_model import LcmModel
                high = LcmModel(p2["model"]).is_high(index)
            return {"key": key, "high": bool(high)}
        return key

    def _read(self, provider, prepare=True):
        """A live metric's reading (spec §5.4), read once per fresh report, when it is made:
        what the provider returns, None if it raises, prepared as a fixed value is (⊥ outside
        the domain, spec §1; the midpoint or the nearest end, §1.1). Nothing is logged. A
        strings campaign's reading is kept as given (`prepare` false: no item key hashed over
        the string's length); its code is built per report in max_len slots (spec §3.5)."""
        try:
            v = provider()
        except Exception:
            v = None
        self.raw = v
        if prepare:
            self.value.load(v)
        self.readings = v if isinstance(v, list) else [v]

    def _grid_input(self, doc, name, n):
        """The grid point of each metric's reading (spec §1.1; hm: the list of them, in domain
        order). Never refuses: a missing, non-numeric or NaN reading is the midpoint, one
        outside the range its end; every metric takes the same steps (`grid_point`), its
        reading picked by a slice (a list shorter than the metrics: None) rather than a branch."""
        readings = self.readings
        xs = []
        for a, (lo, hi, dec) in enumerate(domain_metrics(doc["domain"])):
            xs.append(grid_point((readings[a:a + 1] + [None])[0], lo, hi, dec, n))
        return xs if name == "hm" else xs[0]

    # --- reports ----------------------------------------------------------------------------
    def deliver(self, phase, mech, value):
        """Queue a fresh report of `phase`, ledgered first (spec §7.2); the nonce and the
        words come from the OS RNG."""
        cid = self.config["campaign_id"]
        try:
            self.ledger.check(mech.eps_milli)
        except BudgetExceeded as exc:
            self._refuse("report", exc)
            return
        nonce = int.from_bytes(self.rand(4), "little")
        report = mech.report(value, nonce, self.rand)
        # shc phase 1: its bit x goes into the same ledger generation as the memo (spec §7.4)
        bit = mech.x if mech.name == "shc" and phase == 1 else None
        try:  # binds the id to the config on its first spend (spec §7.2)
            self.ledger.commit(cid, phase, mech.eps_milli, nonce, report, self.config_digest, bit)
        except (BudgetExceeded, ConfigError) as exc:
            self._refuse("report", exc)
            return
        self.log("spent", "phase=%d eps_milli=%d remaining=%d"
                 % (phase, mech.eps_milli, self.ledger.remaining_milli))
        self._queue(phase, report)

    def _resend(self, phase, memo):
        """Queue the memoised report of `phase` (no spend, nothing computed from the value)."""
        self.log("memo", "phase=%d" % phase)
        self._queue(phase, memo[1])

    def _queue(self, phase, report):
        """Queue a trigger's publish of `phase`, after its own spread wait (spec §6): U[0,
        spread_s) from the OS RNG; nothing more while one of that phase is queued."""
        for entry in self.outbox:
            if entry[0] == phase:
                return
        due = None
        spread = cfg.spread_ms(self.config)
        if spread:
            ms = (spread * int.from_bytes(self.rand(4), "little")) >> 32
            self.log("wait", "phase=%d ms=%d" % (phase, ms))
            due = time.ticks_add(time.ticks_ms(), ms)
        self.outbox.append((phase, report, due))

    def flush(self, out):
        """Publish (`out.publish`, QoS 1) every queued report whose spread wait is over; one
        whose publish raises (a lost link) stays queued. A recurring campaign's round opening
        is noticed here first (the loop calls this every turn)."""
        self.round_tick()
        now = time.ticks_ms()
        i = 0
        while i < len(self.outbox):
            phase, report, due = self.outbox[i]
            if due is not None and time.ticks_diff(due, now) > 0:
                i += 1
                continue
            out.publish(self.topic_report, report, qos=1)
            self.outbox.pop(i)
            self.delivered.add(phase)
            self.log("published", "phase=%d bytes=%d" % (phase, len(report)))
            delivery = self.config.get("delivery") if self.config else None
            if delivery and delivery["ack"]:
                wait = delivery["retry_s"]
                self.awaiting[phase] = [report, self._due(wait), wait]

    # --- acknowledgements (spec §6) -----------------------------------------------------------
    def _due(self, wait):
        """ticks_ms after wait x U[0.5, 1.5) seconds (OS RNG)."""
        u = int.from_bytes(self.rand(2), "little")
        return time.ticks_add(time.ticks_ms(), (wait * (32768 + u) * 1000) >> 16)

    def on_ack(self, msg):
        """Stop re-sending the report an ack names: own topic (the subscription); with an
        `ack_key`, 28 bytes whose tag verifies, else 12 bytes (or a 28-byte ack's first 12);
        version 2, kind "A", (campaign_id, phase, nonce) of a report being re-sent."""
        entry = self.awaiting.get(msg[2]) if len(msg) in (ACK_SIZE, ACK_MAC_SIZE) else None
        if entry is not None and ack_accepts(msg, entry[0], self.ack_pads):
            del self.awaiting[msg[2]]
            self.log("acked", "phase=%d status=%d" % (msg[2], msg[3]))
            return
        self.log("ack-ignored", "bytes=%d" % len(msg))

    def resend_due(self, out):
        """Re-send (`out.publish`) what is due; give up at the campaign's not_after (logged
        `undelivered`)."""
        if not self.awaiting:
            return
        if self.config is None or cfg.unix_now() > self.config["not_after"]:
            for phase in list(self.awaiting):
                if self.recurring():
                    self.log("undelivered", "round=%d (campaign deadline passed)" % self.round)
                else:
                    self.log("undelivered", "phase=%d (campaign deadline passed)" % phase)
            self.awaiting = {}
            return
        delivery = self.config["delivery"]
        now = time.ticks_ms()
        for phase in list(self.awaiting):
            entry = self.awaiting[phase]
            if time.ticks_diff(entry[1], now) <= 0:
                out.publish(self.topic_report, entry[0], qos=1)
                entry[2] = min(entry[2] * 2, delivery["retry_max_s"])
                entry[1] = self._due(entry[2])
                self.log("resent", "phase=%d next_s=%d" % (phase, entry[2]))

    def done(self):
        if self.exit_code is not None:
            return True
        if self.rounds_pending():
            return False
        if not self.once or self.config is None or self.outbox or self.awaiting:
            return False
        for p in self.phases:
            if p not in self.delivered:
                return False
        return True
