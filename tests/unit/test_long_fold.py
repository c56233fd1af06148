"""The longitudinal sketches' one-call check and fold (c_kernels/ldp_long_fold.c) against the
plain numpy rules it replaces: the same fault code for every report (header rule, then the body
field), the same ReportFormatError from `update` with nothing folded, and the same counts as
the one-shot kernels (OUE bit counts, GRR counts, the one-bit mean's ones) on batch sizes
around the 15-report blocks of the bit-sliced counter and past its 65535-report read-out."""
import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet.core.errors import ReportFormatError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import ERROR_FIELDS, Mechanism
from ldpfleet.core.mechanisms.grr import GrrSketch
from ldpfleet.core.mechanisms.oue import OueSketch

CASES = [("losue", 2, {}), ("losue", 7, {}), ("losue", 8, {}), ("losue", 9, {}), ("lsue", 64, {}),
         ("lsue", 65, {}), ("losue", 100, {}), ("losue", 127, {}), ("losue", 128, {}),
         ("lgrr", 2, {}), ("lgrr", 100, {}), ("lgrr", 256, {}), ("loloha", 50, {}),
         ("loloha", 50, {"g": 2}), ("lbitmean", 11, {"s": 3})]
SIZES = [0, 1, 14, 15, 16, 29, 31, 1000]


def reports(mech, n, rng, states=4):
    """n reports of random values from `states` enrolled states (in turn)."""
    values = rng.integers(0, mech.domain_size, n)
    enrolled = mech.enrol_batch(states, rng)
    return mech.report_batch(values, enrolled[np.arange(n) % states], rng)


def reference_counts(mech, arr):
    if mech.name in ("losue", "lsue", "lgrr"):
        ref = (GrrSketch if mech.name == "lgrr" else OueSketch)(mech)
        if arr.shape[0]:
            ref._fold(arr)
        return ref.support
    if mech.name == "lbitmean":
        return np.array([int(arr[:, protocol.HEADER_SIZE].sum())])
    return None


@pytest.mark.parametrize("name,d,params", CASES)
def test_fold_counts_equal_the_one_shot_kernels(name, d, params):
    mech = make_mechanism(name, 2000, d, campaign_id=77, eps1_milli=1000, **params)
    rng = np.random.default_rng(d)
    for n in SIZES:
        arr = reports(mech, n, rng)
        sketch = mech.new_sketch()
        assert sketch.update(arr) == n and sketch.n == n
        ref = reference_counts(mech, arr)
        if ref is not None:
            got = sketch.ones if name == "lbitmean" else sketch.support
            assert np.array_equal(got, ref), (name, d, n)


@pytest.mark.parametrize("name,d,params", CASES)
def test_faults_and_errors_equal_the_numpy_rules(name, d, params):
    mech = make_mechanism(name, 2000, d, campaign_id=77, eps1_milli=1000, **params)
    rng = np.random.default_rng(100 + d)
    for n in SIZES[1:]:
        good = reports(mech, n, rng)
        bad = good.copy()
        for i in rng.integers(0, n, min(n, 40)):
            pos = int(rng.integers(0, mech.report_size))
            if 8 <= pos < 12:  # the nonce is free
                pos = 12 + pos % mech.body_size
            bad[i, pos] ^= np.uint8(1 << int(rng.integers(0, 8)))
        assert np.array_equal(mech.validate(bad), Mechanism.validate(mech, bad))
        assert (mech.validate(good) == -1).all()
        sketch = mech.new_sketch()
        if not (Mechanism.validate(mech, bad) >= 0).any():  # the flips missed every rule
            assert sketch.update(bad) == n
            continue
        with pytest.raises(ReportFormatError) as want:
            Mechanism.check(mech, bad)
        with pytest.raises(ReportFormatError) as got:
            sketch.update(bad)
        assert (got.value.field, str(got.value)) == (want.value.field, str(want.value))
        assert sketch.n == 0 and not any(v.any() for v in sketch._state().values())


def test_every_header_fault_in_order():
    """One report per fault (and one with two faults: the first in the rule's order)."""
    mech = make_mechanism("lgrr", 2000, 10, campaign_id=5, phase=1, eps1_milli=1000)
    base = bytearray(mech.reference_report({"value": 3, "state": bytes(range(10))}, [0, 0]))
    rows = []
    for pos, val in ((0, 9), (2, 2), (1, 0), (3, 1), (4, 6), (12, 10)):
        r = bytearray(base)
        r[pos] = val
        rows.append(bytes(r))
    both = bytearray(base)
    both[1], both[2] = 0, 2  # mechanism and phase wrong: phase comes first
    rows.append(bytes(both))
    arr = mech.as_report_array(rows)
    codes = mech.validate(arr)
    assert np.array_equal(codes, Mechanism.validate(mech, arr))
    assert [ERROR_FIELDS[c] for c in codes] == ["version", "phase", "mechanism", "flags",
                                                "campaign_id", "y", "phase"]


def test_bit_counter_read_out_past_65535_reports():
    """L-OSUE at d = 128 over 70,001 reports: the counter's 16 planes are read out mid-batch."""
    mech = make_mechanism("losue", 2000, 128, eps1_milli=1000)
    arr = reports(mech, 70_001, np.random.default_rng(9))
    sketch = mech.new_sketch()
    sketch.update(arr)
    assert np.array_equal(sketch.support, reference_counts(mech, arr))
