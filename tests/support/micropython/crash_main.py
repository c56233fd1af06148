"""Test-only entry point of the MicroPython device: device/main.py with crash points.

    micropython crash_main.py --crash-point STEP <main.py's arguments>

STEP is `after-commit` (the device stops right after a report's ledger commit and its `spent`
log line, before the report is queued for publishing) or a step of the ledger's write:
`before-ledger-write` (before the generation file is opened), `mid-ledger-write` (half of the
file written: a torn generation), `after-ledger-write` (the generation written and synced). The
process exits 75, as a reset would leave the device. The shipped code has no hook for this:
this script patches `ldp.ledger.write_generation`, `Ledger.commit` and `Device._queue` before
running `ldp.app.main`. Only the tests' runner (tests/support/devices.py) starts it."""
import json
import sys

from ldp import ledger
from ldp.device import Device

EXIT_CRASH_POINT = 75
LEDGER_STEPS = ("before-ledger-write", "mid-ledger-write", "after-ledger-write")


def _crashing_write(step, write):
    def write_generation(state_dir, gen, doc):
        if step == "before-ledger-write":
            raise SystemExit(EXIT_CRASH_POINT)
        if step == "mid-ledger-write":
            text = json.dumps({"gen": gen, "doc": doc, "sha256": ledger._digest(doc)})
            with open(ledger._path(state_dir, ledger.FILES[gen % 2]), "w") as f:
                f.write(text[:len(text) // 2])
            raise SystemExit(EXIT_CRASH_POINT)
        write(state_dir, gen, doc)
        raise SystemExit(EXIT_CRASH_POINT)  # after-ledger-write
    return write_generation


def _crash_after_commit():
    committed = [False]
    commit, queue = ledger.Ledger.commit, Device._queue

    def commit_then_mark(self, *args):
        commit(self, *args)
        committed[0] = True

    def queue_or_crash(self, phase, report):
        if committed[0]:
            self.log("crash-point", "after-commit")
            raise SystemExit(EXIT_CRASH_POINT)
        queue(self, phase, report)

    ledger.Ledger.commit = commit_then_mark
    Device._queue = queue_or_crash


def install(argv):
    """Patch the crash point `--crash-point STEP` names; returns the other arguments."""
    if "--crash-point" not in argv:
        return argv
    i = argv.index("--crash-point")
    step = argv[i + 1]
    if step in LEDGER_STEPS:
        ledger.write_generation = _crashing_write(step, ledger.write_generation)
    elif step == "after-commit":
        _crash_after_commit()
    else:
        raise SystemExit("unknown crash point %r" % step)
    return argv[:i] + argv[i + 2:]


argv = install(sys.argv[1:])
from ldp.app import main  # noqa: E402  (after the patches)
sys.exit(main(argv))
