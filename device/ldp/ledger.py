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
      "closed": [[campaign_id, not_before], ...], "closed_floor": int,
      "keys": {"serial": int, "keys": [{"kid", "pub"}, ...], "sha256": "<hex of the message>"},
      "shc": {"<campaign_id>": 0 | 1}, "bound": {"<campaign_id>": "<32 hex>"},
      "enrol": {"<campaign_id>": {"state": "<hex>", "charge_milli": int}},
      "rounds": {"<campaign_id>": [round, nonce, "<report hex>"]}}
("enrol" and "rounds" appear when the device first enrols in a recurring campaign, spec §3.4:
its permanent state and charge, committed with the spend and the binding in one generation, and
the latest round's memo, which each round's commit replaces; a close drops both for its id.
"keys" appears with the first key rotation the device applies, spec §5.3; "shc" with the first
`shc` phase-1 report: its bit x, committed with that report's memo, spec §3.1; "bound" with the
first spend: each campaign id's config digest, committed with the id's first spend, spec §7.2;
"closed_floor" with the first closed id evicted from the bounded list, spec §7.3. A closed entry
written before closes carried `not_before` is a bare campaign id.)
"""
import json
import os
from binascii import hexlify, unhexlify

try:
    from hashlib import sha256
except ImportError:  # pragma: no cover - every port we run has it
    sha256 = None

from .errors import BudgetExceeded, ConfigError, LedgerCorrupt, LedgerMissing

FILES = ("ledger.0", "ledger.1")
MAX_CLOSED = 64  # closed ids listed; past it the oldest (lowest not_before) raises closed_floor
OPTIONAL = ("keys", "shc", "bound", "closed_floor", "enrol", "rounds")  # absent until first written


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
        if not isinstance(doc.get("shc", {}), dict) or not isinstance(doc.get("bound", {}), dict):
            return None
        if not isinstance(doc.get("closed_floor", 0), int):
            return None
        if not isinstance(doc.get("enrol", {}), dict) or not isinstance(doc.get("rounds", {}), dict):
            return None
        return gen, doc
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_generation(state_dir, gen, doc):
    """Write generation `gen` of `doc` into its file (gen mod 2) and sync."""
    text = json.dumps({"gen": gen, "doc": doc, "sha256": _digest(doc)})
    with open(_path(state_dir, FILES[gen % 2]), "w") as f:
        f.write(text)
        flush = getattr(f, "flush", None)
        if flush is not None:
            flush()
    _sync()


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
        self.bound = doc.get("bound")  # {"<campaign_id>": config digest} (spec §7.2), or None
        self.closed_floor = doc.get("closed_floor")  # spec §7.3 watermark, or None
        self.enrol = doc.get("enrol")  # {"<campaign_id>": {"state", "charge_milli"}} (§3.4), or None
        self.rounds = doc.get("rounds")  # {"<campaign_id>": [round, nonce, hex]} (§3.4), or None

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

    def memo_eps_milli(self, campaign_id, phase):
        """The eps_milli this campaign phase was reported (and charged) at, or None."""
        entry = self.reports.get("%d:%d" % (campaign_id, phase))
        return None if entry is None else entry[1]

    def is_closed(self, campaign_id):
        """The id is in the closed list (entries [campaign_id, not_before], or a bare id)."""
        for entry in self.closed:
            if (entry[0] if isinstance(entry, list) else entry) == campaign_id:
                return True
        return False

    def below_floor(self, not_before):
        """A config issued at or before the closed-campaign watermark (spec §7.3)."""
        return self.closed_floor is not None and not_before <= self.closed_floor

    def bound_digest(self, campaign_id):
        """The digest of the config this id is bound to (its first spend), or None."""
        return (self.bound or {}).get("%d" % campaign_id)

    def check(self, eps_milli):
        """BudgetExceeded unless a fresh report of `eps_milli` fits the device's limits."""
        if eps_milli > self.eps_cap_milli:
            raise BudgetExceeded("eps_cap", "eps_milli %d above the device cap %d"
                                 % (eps_milli, self.eps_cap_milli))
        if eps_milli > self.remaining_milli:
            raise BudgetExceeded("lifetime_budget", "eps_milli %d above the remaining budget %d"
                                 % (eps_milli, self.remaining_milli))

    def _commit(self, **changes):
        """Write the next generation: the current document with `changes` applied."""
        doc = {"spent_milli": self.spent_milli, "reports": self.reports, "closed": self.closed}
        for name in OPTIONAL:
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        doc.update(changes)
        write_generation(self.state_dir, self.gen + 1, doc)
        self.gen += 1
        self.spent_milli, self.reports, self.closed = doc["spent_milli"], doc["reports"], doc["closed"]
        for name in OPTIONAL:
            setattr(self, name, doc.get(name))

    @property
    def keys_serial(self):
        return self.keys["serial"] if self.keys else 0

    def set_keys(self, serial, keys, digest):
        """Persist a key rotation (spec §5.3) and the SHA-256 hex of its message before the
        device uses the new set."""
        self._commit(keys={"serial": serial, "keys": keys, "sha256": digest})

    def commit(self, campaign_id, phase, eps_milli, nonce, report, digest, shc_bit=None):
        """Record the spend, nonce and report bytes durably (call before publishing). The id is
        bound to `digest` (hex, its config's, spec §7.2) in the same generation when this is its
        first spend; a spend under another config of a bound id is refused (`bound`). With
        `shc_bit` (an shc phase-1 report's x, spec §3.1) the same generation records it."""
        self.check(eps_milli)
        key = "%d:%d" % (campaign_id, phase)
        if key in self.reports:
            raise BudgetExceeded("memo", "campaign %s phase already reported" % key)
        cid = "%d" % campaign_id
        held = self.bound_digest(campaign_id)
        if not isinstance(digest, str) or len(digest) != 32:
            raise ConfigError("bound", "no config digest to bind campaign id %s to" % cid)
        if held is not None and held != digest:
            raise ConfigError("bound", "campaign id %s is bound to another config" % cid)
        reports = dict(self.reports)
        reports[key] = [nonce, eps_milli, hexlify(report).decode()]
        changes = {"spent_milli": self.spent_milli + eps_milli, "reports": reports}
        if held is None:
            bound = dict(self.bound or {})
            bound[cid] = digest
            changes["bound"] = bound
        if shc_bit is not None:
            shc = dict(self.shc or {})
            shc[cid] = shc_bit
            changes["shc"] = shc
        self._commit(**changes)

    # --- recurring campaigns (spec §3.4) -------------------------------------------------------
    def enrolment(self, campaign_id):
        """The permanent state (bytes) of a recurring campaign this device enrolled in, or None."""
        entry = (self.enrol or {}).get("%d" % campaign_id)
        return None if entry is None else unhexlify(entry["state"])

    def check_enrol(self, eps_milli, charge_milli):
        """BudgetExceeded unless enrolling (ε∞ `eps_milli`, charge `charge_milli`) fits the
        device's ε cap and remaining lifetime budget (spec §3.4): checked before anything is
        drawn."""
        if eps_milli > self.eps_cap_milli:
            raise BudgetExceeded("eps_cap", "eps_milli %d above the device cap %d"
                                 % (eps_milli, self.eps_cap_milli))
        if charge_milli > self.remaining_milli:
            raise BudgetExceeded("lifetime_budget", "enrolment charge eps_milli %d above the "
                                 "remaining budget %d" % (charge_milli, self.remaining_milli))

    def enrol_commit(self, campaign_id, eps_milli, charge_milli, state, digest):
        """Enrol in a recurring campaign in ONE generation (spec §3.4): spent_milli += charge,
        enrol[id] = {state, charge_milli} and the id's binding to `digest` (spec §7.2)."""
        self.check_enrol(eps_milli, charge_milli)
        cid = "%d" % campaign_id
        if cid in (self.enrol or {}):
            raise BudgetExceeded("memo", "campaign %s already enrolled" % cid)
        held = self.bound_digest(campaign_id)
        if not isinstance(digest, str) or len(digest) != 32:
            raise ConfigError("bound", "no config digest to bind campaign id %s to" % cid)
        if held is not None and held != digest:
            raise ConfigError("bound", "campaign id %s is bound to another config" % cid)
        enrol = dict(self.enrol or {})
        enrol[cid] = {"state": hexlify(state).decode(), "charge_milli": charge_milli}
        bound = dict(self.bound or {})
        bound[cid] = digest
        self._commit(spent_milli=self.spent_milli + charge_milli, enrol=enrol, bound=bound)

    def round_memo(self, campaign_id):
        """(round, nonce, report bytes) of the latest round reported, or None."""
        entry = (self.rounds or {}).get("%d" % campaign_id)
        return None if entry is None else (entry[0], entry[1], unhexlify(entry[2]))

    def commit_round(self, campaign_id, rnd, nonce, report):
        """The round's memo, replacing the previous round's (no spend: enrolment paid for
        every round). Refused unless the id is enrolled."""
        cid = "%d" % campaign_id
        if cid not in (self.enrol or {}):
            raise BudgetExceeded("memo", "campaign %s is not enrolled" % cid)
        rounds = dict(self.rounds or {})
        rounds[cid] = [rnd, nonce, hexlify(report).decode()]
        self._commit(rounds=rounds)

    def shc_bit(self, campaign_id):
        """The x bit of this campaign's shc phase-1 report (spec §3.1), or None."""
        return (self.shc or {}).get("%d" % campaign_id)

    def close(self, campaign_id, not_before=0):
        """Remember a closed campaign id with its not_before (spec §5.4, §7.3; 0: unknown):
        never spent on again. Past MAX_CLOSED entries the one with the lowest not_before is
        dropped and closed_floor rises to it: configs issued at or before the floor are refused
        unless their id is bound."""
        if self.is_closed(campaign_id):
            return
        closed = self.closed + [[campaign_id, not_before]]
        floor = self.closed_floor
        while len(closed) > MAX_CLOSED:
            low = 0
            for i in range(1, len(closed)):
                if _not_before(closed[i]) < _not_before(closed[low]):
                    low = i
            evicted = _not_before(closed.pop(low))
            if evicted > 0 and (floor is None or evicted > floor):
                floor = evicted
        changes = {"closed": closed}
        if floor is not None:
            changes["closed_floor"] = floor
        cid = "%d" % campaign_id
        for name in ("enrol", "rounds"):  # spec §3.4: a close ends a recurring campaign
            held = getattr(self, name)
            if held and cid in held:
                held = dict(held)
                del held[cid]
                changes[name] = held
        self._commit(**changes)


def _not_before(entry):
    """not_before of a closed entry (0 for a bare id, written before closes carried it)."""
    return entry[1] if isinstance(entry, list) else 0
