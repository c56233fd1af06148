"""Persistent privacy-budget ledger that fails closed (spec §7.2, §7.4).

The device's own limits (per-report ε cap, lifetime budget, from its identity file) bound
every report whatever a config says. A report is produced once per (campaign_id, phase): the
spend, the report's nonce and bytes are committed BEFORE the report leaves, and any later
trigger of the same campaign phase re-sends those memoised bytes instead of spending again.

Storage: two generations, `ledger.0` and `ledger.1`, each one JSON line
{"gen": G, "doc": {...}, "sha256": hex(SHA-256(canonical JSON of doc))}. A commit writes
generation G+1 over the OLDER file and syncs it; nothing is ever deleted or renamed, so a reset
at any point leaves the previous generation intact, on FAT (whose rename deletes the target
first) as on LittleFS. At start the valid generation with the highest G wins; no valid one at
all is `LedgerMissing` / `LedgerCorrupt`: the device stops instead of starting from zero.
Provisioning writes generation 0 (`provision`, the device runner); `ldpfleet flash` stages it as
`ledger.init`, which a board adopts only while it has no ledger file at all.

doc: {"spent_milli": int, "reports": {"<campaign_id>:<phase>": [nonce, eps_milli, "<hex>"]},
      "closed": [campaign_id, ...],
      "keys": {"serial": int, "keys": [{"kid", "pub"}, ...], "sha256": "<hex of the message>"},
      "shc": {"<campaign_id>": 0 | 1}}
("keys" appears with the first key rotation the device applies, spec §5.3; "shc" with the first
`shc` phase-1 report: its bit x, committed with that report's memo, spec §3.1.)
"""
import json
import os
from binascii import hexlify, unhexlify

try:
    from hashlib import sha256
except ImportError:  # pragma: no cover - every port we run has it
    sha256 = None

from .errors import BudgetExceeded, LedgerCorrupt, LedgerMissing

FILES = ("ledger.0", "ledger.1")
MAX_CLOSED = 64  # closed campaign ids remembered (oldest dropped first)
CRASH_STEP = None  # tests only: (step name) at which `commit` raises SystemExit


def _canonical(doc):
    """Sorted-key JSON without spaces (the checksum's input; both clients use it)."""
    if isinstance(doc, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _canonical(doc[k]) for k in sorted(doc)) + "}"
    if isinstance(doc, list):
        return "[" + ",".join(_canonical(v) for v in doc) + "]"
    return json.dumps(doc)


def _digest(doc):
    return hexlify(sha256(_canonical(doc).encode()).digest()).decode()


def _sync():
    sync = getattr(os, "sync", None)
    if sync is not None:
        sync()


def _path(state_dir, name):
    return state_dir + "/" + name if state_dir else name


def _read(path):
    """(gen, doc) of one generation file, or None if it is missing or invalid."""
    try:
        with open(path) as f:
            rec = json.loads(f.read())
        doc, gen = rec["doc"], rec["gen"]
        if not isinstance(gen, int) or rec["sha256"] != _digest(doc):
            return None
        doc["spent_milli"], doc["reports"], doc["closed"]  # noqa: B018 (shape check)
        if not isinstance(doc.get("shc", {}), dict):
            return None
        return gen, doc
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_generation(state_dir, gen, doc):
    """Write generation `gen` of `doc` into its file (gen mod 2) and sync."""
    text = json.dumps({"gen": gen, "doc": doc, "sha256": _digest(doc)})
    if CRASH_STEP == "before-write":  # tests: a reset before the file is opened
        raise SystemExit(75)
    with open(_path(state_dir, FILES[gen % 2]), "w") as f:
        if CRASH_STEP == "mid-write":  # tests: a reset half-way through the write
            f.write(text[:len(text) // 2])
            f.close()
            raise SystemExit(75)
        f.write(text)
        flush = getattr(f, "flush", None)
        if flush is not None:
            flush()
    _sync()
    if CRASH_STEP == "after-write":  # tests: a reset once the generation is on flash
        raise SystemExit(75)


def provision(state_dir):
    """Generation 0 of a new device (ldpfleet flash, the device runner)."""
    write_generation(state_dir, 0, {"spent_milli": 0, "reports": {}, "closed": []})


class Ledger:
    def __init__(self, state_dir, eps_cap_milli, lifetime_budget_milli):
        self.state_dir = state_dir
        self.eps_cap_milli = eps_cap_milli
        self.lifetime_budget_milli = lifetime_budget_milli
        found = [r for r in (_read(_path(state_dir, n)) for n in FILES) if r is not None]
        if not found:
            found = self._adopt_initial(state_dir)
        if not found:
            present = []
            for n in FILES:
                try:
                    os.stat(_path(state_dir, n))
                    present.append(n)
                except OSError:
                    pass
            if present:
                raise LedgerCorrupt("ledger", "no valid generation in %s (checksum or format): "
                                    "the device stops rather than reset its budget" % present)
            raise LedgerMissing("ledger", "no ledger in %r: provision the device (ldpfleet flash) "
                                "-- it never starts again from zero" % (state_dir or "."))
        gen, doc = found[0]
        for g, d in found[1:]:
            if g > gen:
                gen, doc = g, d
        self.gen = gen
        self.spent_milli = doc["spent_milli"]
        self.reports = doc["reports"]
        self.closed = doc["closed"]
        self.keys = doc.get("keys")  # the last rotation applied (spec §5.3), or None
        self.shc = doc.get("shc")  # {"<campaign_id>": x bit} of shc phase-1 reports, or None

    @staticmethod
    def _adopt_initial(state_dir):
        """A freshly flashed board: `ldpfleet flash` stages generation 0 as ledger.init, used
        only when neither generation file exists at all (re-flashing a board that has a ledger
        changes nothing). Returns [(0, doc)] or []."""
        for n in FILES:
            try:
                os.stat(_path(state_dir, n))
                return []
            except OSError:
                pass
        init = _read(_path(state_dir, "ledger.init"))
        if init is None or init[0] != 0 or init[1]["spent_milli"] != 0 or init[1]["reports"]:
            return []
        write_generation(state_dir, 0, init[1])
        return [init]

    @property
    def remaining_milli(self):
        return self.lifetime_budget_milli - self.spent_milli

    def memo(self, campaign_id, phase):
        """(nonce, report bytes) already produced for this campaign phase, or None."""
        entry = self.reports.get("%d:%d" % (campaign_id, phase))
        return None if entry is None else (entry[0], unhexlify(entry[2]))

    def is_closed(self, campaign_id):
        return campaign_id in self.closed

    def check(self, eps_milli):
        """BudgetExceeded unless a fresh report of `eps_milli` fits the device's limits."""
        if eps_milli > self.eps_cap_milli:
            raise BudgetExceeded("eps_cap", "eps_milli %d above the device cap %d"
                                 % (eps_milli, self.eps_cap_milli))
        if eps_milli > self.remaining_milli:
            raise BudgetExceeded("lifetime_budget", "eps_milli %d above the remaining budget %d"
                                 % (eps_milli, self.remaining_milli))

    def _commit(self, spent, reports, closed, keys=None, shc=None):
        keys = keys or self.keys
        shc = shc or self.shc
        doc = {"spent_milli": spent, "reports": reports, "closed": closed}
        if keys is not None:
            doc["keys"] = keys
        if shc is not None:
            doc["shc"] = shc
        write_generation(self.state_dir, self.gen + 1, doc)
        self.gen += 1
        self.spent_milli, self.reports, self.closed, self.keys = spent, reports, closed, keys
        self.shc = shc

    @property
    def keys_serial(self):
        return self.keys["serial"] if self.keys else 0

    def set_keys(self, serial, keys, digest):
        """Persist a key rotation (spec §5.3) and the SHA-256 hex of its message before the
        device uses the new set."""
        self._commit(self.spent_milli, self.reports, self.closed,
                     {"serial": serial, "keys": keys, "sha256": digest})

    def commit(self, campaign_id, phase, eps_milli, nonce, report, shc_bit=None):
        """Record the spend, nonce and report bytes durably (call before publishing); with
        `shc_bit` (an shc phase-1 report's x, spec §3.1) the same generation records it."""
        self.check(eps_milli)
        key = "%d:%d" % (campaign_id, phase)
        if key in self.reports:
            raise BudgetExceeded("memo", "campaign %s phase already reported" % key)
        reports = dict(self.reports)
        reports[key] = [nonce, eps_milli, hexlify(report).decode()]
        shc = None
        if shc_bit is not None:
            shc = dict(self.shc or {})
            shc["%d" % campaign_id] = shc_bit
        self._commit(self.spent_milli + eps_milli, reports, self.closed, shc=shc)

    def shc_bit(self, campaign_id):
        """The x bit of this campaign's shc phase-1 report (spec §3.1), or None."""
        return (self.shc or {}).get("%d" % campaign_id)

    def close(self, campaign_id):
        """Remember a closed campaign id (spec §5.4): never spent on again."""
        if campaign_id in self.closed:
            return
        closed = (self.closed + [campaign_id])[-MAX_CLOSED:]
        self._commit(self.spent_milli, self.reports, closed)
