"""A Device's part in a recurring campaign (protocol_spec/v2 §3.4): enrolment, one report per
round, the round memo, and the end of the rounds. `ldp/device.py` mixes this in; its config,
close, queue, acknowledgement and re-send machinery is shared with one-shot campaigns.

- Enrolment, at the first round open while the device holds the campaign's valid config (a
  device started, or a campaign discovered, mid-way joins the round open then): the charge
  min(classes, R)·ε∞ (`charge_milli`, from the config alone) is checked against the ε cap and
  the remaining lifetime budget (refusal `lifetime_budget`, nothing drawn), the permanent state
  is drawn from the OS RNG, and spend + enrol[id] + the id's binding are ONE ledger generation.
- Each round (its opening, a re-delivered config, a reconnect): memo first -- the ledger's
  round memo of the open round is re-sent untouched; else the value is read (a metric provider is
  called here, once per round), the report is made from the state with a fresh nonce and the
  round header (flags 1, le32 round after the 12-byte header), the memo committed (replacing the
  previous round's), then the spread wait and the publish. Re-sends stop at an ack, a close,
  not_after or the next round's opening (`undelivered round=<r>`).
- After round R (every window closed, nothing outstanding) the device logs `rounds-done`;
  `--once` exits 0.

Privacy (spec §7.1): whether and when the device enrols, reports, logs, writes its ledger or
re-sends depends on the config, the clock, the ledger, acknowledgements and the OS RNG only;
the value enters only `mech.report`, through the state it indexes. Nothing is charged per round.
"""
import time

from . import config as cfg
from . import schedule as sched
from .errors import BudgetExceeded, ConfigError

EXIT_DONE = 0
GATE_MAX_MS = 10000
"""Between rounds the clock is read at most every GATE_MAX_MS (and every loop turn in a
round's last second): a clock read allocates on most ports (the unix time is a big int), the
loop turns 4 times a second, and a clock set late (NTP) is noticed within 10 s."""


class Rounds:
    """Mixin for ldp.device.Device (which sets `round`, `rounds_done` and `round_mech`)."""

    def recurring(self):
        return self.config is not None and sched.is_recurring(self.config)

    def round_need(self, doc, mech):
        """What accepting a recurring config would charge now: the enrolment charge unless
        the device is enrolled in the id (a function of the config and the ledger); refused
        (`closed`) if the id is bound without an enrolment (spec §7.3)."""
        cid = doc["campaign_id"]
        if self.ledger.enrolment(cid) is not None:
            return 0
        if self.ledger.bound_digest(cid) is not None:
            # a recurring id is bound only by its enrolment, dropped only by its close: a
            # replay after the closed entry left the bounded list must not enrol (spend) again
            raise ConfigError("closed", "campaign id %d was enrolled in and closed" % cid)
        return mech.charge_milli(sched.round_count(doc))

    def round_tick(self, trigger=False):
        """Called at every loop turn (and with `trigger` for a (re)delivered config): the round
        open now gets its report once (memo first); a new round's opening ends the previous
        round's re-sends; after the last round, `rounds-done`."""
        if not self.recurring() or self.rounds_done:
            return
        ticks = time.ticks_ms()
        if not trigger and self.round_gate is not None \
                and time.ticks_diff(self.round_gate, ticks) > 0:
            return
        doc = self.config
        now = cfg.unix_now()
        self._gate(doc, now, ticks)
        r = sched.round_at(doc, now)
        if r is None:
            if now >= doc["schedule"]["start"]:
                self._rounds_over(doc, now)
            return
        if r != self.round:
            self._end_round()
            self.round = r
        elif not trigger:
            return
        self._round_report(doc, r)

    def _gate(self, doc, now, ticks):
        """When to read the clock next: `now` is whole seconds, so a boundary (the start or a
        round's end) two or more seconds away cannot pass before (boundary - now - 1) s."""
        s = doc["schedule"]
        if now < s["start"]:
            boundary = s["start"]
        elif sched.is_over(doc, now):  # the last round's re-sends end after not_after
            boundary = doc["not_after"] + 1
        else:
            boundary = sched.round_window(doc, (now - s["start"]) // s["every_s"] + 1)[1]
        wait = boundary - now - 1
        self.round_gate = None if wait < 1 else time.ticks_add(ticks, min(wait * 1000, GATE_MAX_MS))

    def _end_round(self):
        """The next round opened: the previous round's report is no longer sent."""
        if self.round is not None and (self.awaiting or self.outbox):
            self.log("undelivered", "round=%d" % self.round)
        self.awaiting = {}
        self.outbox = []

    def _rounds_over(self, doc, now):
        """No round is open and none will be: once the last report is settled (acknowledged,
        or given up at not_after by resend_due), the campaign is over for the device."""
        if self.outbox or self.awaiting or not sched.is_over(doc, now):
            return
        self.rounds_done = True
        self.log("rounds-done", "campaign_id=%d rounds=%d" % (doc["campaign_id"],
                                                             sched.round_count(doc)))
        if self.once:
            self.exit_code = EXIT_DONE

    def _round_report(self, doc, r):
        cid = doc["campaign_id"]
        memo = self.ledger.round_memo(cid)
        if memo is not None and memo[0] == r:  # memo first (spec §7.1)
            self.log("memo", "round=%d" % r)
            self._queue(1, memo[2])
            return
        if memo is not None and memo[0] > r:  # the clock went back: round r may have its report
            self.log("skip", "round=%d (the ledger holds round %d)" % (r, memo[0]))
            return
        mech = self.round_mech
        state = self.ledger.enrolment(cid)
        try:
            if state is None:
                state = self._enrol(doc, mech)
            value = self._input(doc, mech)
            nonce = int.from_bytes(self.rand(4), "little")
            report = sched.with_round(mech.report({"value": value, "state": state}, nonce,
                                                  self.rand), r)
            self.ledger.commit_round(cid, r, nonce, report)
        except (BudgetExceeded, ConfigError, ValueError) as exc:
            self._refuse("config", exc)
            self.config = None  # takes part no more until a config is accepted again
            return
        self.log("round", "round=%d bytes=%d" % (r, len(report)))
        self._queue(1, report)

    def _enrol(self, doc, mech):
        """Spec §3.4: check the charge first, then draw the state (OS RNG), then commit spend,
        state and binding in one generation. Returns the state."""
        charge = mech.charge_milli(sched.round_count(doc))
        self.ledger.check_enrol(mech.eps_milli, charge)
        state = mech.enrol(self.rand)
        self.ledger.enrol_commit(doc["campaign_id"], mech.eps_milli, charge, state,
                                 self.config_digest)
        self.log("enrolled", "campaign_id=%d charge_milli=%d remaining=%d"
                 % (doc["campaign_id"], charge, self.ledger.remaining_milli))
        return state

    def rounds_pending(self):
        """A recurring campaign held and not over (Device.done is False meanwhile)."""
        return self.recurring() and not self.rounds_done
