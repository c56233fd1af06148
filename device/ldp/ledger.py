"""Persistent privacy-budget ledger (spec §6).

The device's own limits (per-report ε cap, lifetime budget, from its identity file) bound
every report whatever a config says. A report is produced once per (campaign_id, phase):
the spend, the next sequence number and the report bytes are written to flash atomically
(temp file + os.rename) BEFORE the report leaves, and any later trigger of the same
campaign phase re-sends those memoised bytes instead of spending again.

File (JSON): {"spent_milli": int, "next_seq": int,
              "reports": {"<campaign_id>:<phase>": [seq, eps_milli, "<report hex>"]}}
"""
import json
import os
from binascii import hexlify, unhexlify

from .errors import BudgetExceeded, LedgerCorrupt

FILE = "ledger.json"


class Ledger:
    def __init__(self, state_dir, eps_cap_milli, lifetime_budget_milli):
        self.path = state_dir + "/" + FILE if state_dir else FILE
        self.tmp = self.path + ".tmp"
        self.eps_cap_milli = eps_cap_milli
        self.lifetime_budget_milli = lifetime_budget_milli
        self.spent_milli = 0
        self.next_seq = 0
        self.reports = {}
        self._load()

    def _load(self):
        # A leftover temp file is a write that never committed (the crash came before the
        # rename, so that report never left either): the committed file is the truth.
        try:
            os.remove(self.tmp)
        except OSError:
            pass
        try:
            f = open(self.path)
        except OSError:
            return  # a fresh device: nothing spent yet
        try:
            with f:
                doc = json.load(f)
            spent, seq, reports = doc["spent_milli"], doc["next_seq"], doc["reports"]
        except (ValueError, KeyError, TypeError) as exc:
            # never reset a budget silently: the device stops until someone looks
            raise LedgerCorrupt("ledger", "%s cannot be read: %r" % (self.path, exc))
        self.spent_milli = spent
        self.next_seq = seq
        self.reports = reports

    @property
    def remaining_milli(self):
        return self.lifetime_budget_milli - self.spent_milli

    def memo(self, campaign_id, phase):
        """The report already produced for this campaign phase, or None."""
        entry = self.reports.get("%d:%d" % (campaign_id, phase))
        return None if entry is None else unhexlify(entry[2])

    def check(self, eps_milli):
        """BudgetExceeded unless a fresh report of `eps_milli` fits the device's limits."""
        if eps_milli > self.eps_cap_milli:
            raise BudgetExceeded("eps_cap", "eps_milli %d above the device cap %d"
                                 % (eps_milli, self.eps_cap_milli))
        if eps_milli > self.remaining_milli:
            raise BudgetExceeded("lifetime_budget", "eps_milli %d above the remaining budget %d"
                                 % (eps_milli, self.remaining_milli))

    def commit(self, campaign_id, phase, eps_milli, seq, report):
        """Record the spend and the report bytes durably (call before publishing)."""
        self.check(eps_milli)
        key = "%d:%d" % (campaign_id, phase)
        if key in self.reports:
            raise BudgetExceeded("memo", "campaign %s phase already reported" % key)
        reports = dict(self.reports)
        reports[key] = [seq, eps_milli, hexlify(report).decode()]
        doc = {"spent_milli": self.spent_milli + eps_milli, "next_seq": (seq + 1) & 0xFFFFFFFF,
               "reports": reports}
        with open(self.tmp, "w") as f:
            json.dump(doc, f)
        os.rename(self.tmp, self.path)
        self.spent_milli = doc["spent_milli"]
        self.next_seq = doc["next_seq"]
        self.reports = reports
