"""The one header rule (`protocol.header_faults`, spec §3): every fault alone is found under
its own name, two faults report the one checked first, and `Mechanism.validate` and the
service's ingest both apply it."""
import itertools

import numpy as np

from ldpfleet.core import protocol
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import ERROR_FIELDS

CID = 0xCAFEBABE
RULE = protocol.HeaderRule(CID, (protocol.MECHANISM_IDS["sh"], protocol.MECHANISM_IDS["srappor"]),
                           (20, 30), open_phase=1)
GOOD = protocol.pack_header("sh", 1, CID, 7) + bytes(8)

# One corruption per fault, each leaving the other fields valid.
CORRUPT = {
    "size": lambda r: r[:11],
    "version": lambda r: bytes([1]) + r[1:],
    "phase": lambda r: r[:2] + bytes([3]) + r[3:],
    "phase_not_open": lambda r: protocol.pack_header("srappor", 2, CID, 7) + bytes(18),
    "mechanism": lambda r: r[:1] + bytes([protocol.MECHANISM_IDS["olh"]]) + r[2:],
    "flags": lambda r: r[:3] + b"\x01" + r[4:],
    "campaign_id": lambda r: r[:4] + (CID ^ 1).to_bytes(4, "little") + r[8:],
}


def fault_names(reports, rule=RULE):
    faults, _ = protocol.header_faults(reports, rule)
    return [protocol.HEADER_FAULTS[f] if f >= 0 else None for f in faults.tolist()]


def test_each_fault_alone_and_a_valid_report():
    cases = [GOOD, GOOD + b"\x00", b""] + [bad(GOOD) for bad in CORRUPT.values()]
    assert fault_names(cases) == [None, "size", "size"] + list(CORRUPT)


def test_two_faults_name_the_one_checked_first():
    order = ["version", "phase", "mechanism", "flags", "campaign_id"]
    for first, second in itertools.combinations(order, 2):
        report = CORRUPT[second](CORRUPT[first](GOOD))
        assert fault_names([report]) == [first], (first, second)
    # the exact size is checked last, the short size first
    assert fault_names([CORRUPT["flags"](GOOD) + b"\x00"]) == ["flags"]
    assert fault_names([CORRUPT["version"](GOOD)[:5]]) == ["size"]


def test_mechanism_validate_applies_the_same_rule():
    mech = make_mechanism("grr", 1000, 8, salt=1, campaign_id=CID)
    good = mech.perturb(3)
    rows = [good,
            bytes([1]) + good[1:],                                   # version
            good[:1] + bytes([protocol.MECHANISM_IDS["olh"]]) + good[2:],  # mechanism
            good[:2] + b"\x02" + good[3:],                            # phase
            bytes([1]) + good[1:2] + b"\x02" + good[3:]]              # version and phase
    codes = mech.validate(np.frombuffer(b"".join(rows), np.uint8).reshape(len(rows), -1))
    assert [ERROR_FIELDS[c] if c >= 0 else None for c in codes.tolist()] == [
        None, "version", "mechanism", "phase", "version"]
