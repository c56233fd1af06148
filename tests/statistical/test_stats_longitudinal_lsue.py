"""The averaging attack on L-SUE (RAPPOR's permanent + instantaneous chain), which
test_stats_longitudinal.py runs on L-GRR, LOLOHA and L-OSUE: a device with a constant value
over 365 rounds, memoised bitmap kept (the shipped C kernels, `enrol_batch` / `report_batch`,
words from a fixed aggregator-side seed)."""
import numpy as np

from ldpfleet.core import protocol
from ldpfleet.core.mechanisms import make_mechanism

ROUNDS = 365


def test_averaging_attack_lsue():
    """L-SUE (k = 10, ε∞ = 2, ε1 = 1): the item with the most 1 bits over 365 reports is the
    value no more often than the best guess from the permanent bitmap alone (a set bit at
    random, any item if none is set: with uniform values every set bit is equally likely the
    value) + 1 % (20,000 devices)."""
    mech = make_mechanism("lsue", 2000, 10, eps1_milli=1000)
    rng = np.random.default_rng(368)
    n = 20000
    values = rng.integers(0, 10, n).astype(np.uint32)
    states = mech.enrol_batch(n, rng)
    sums = np.zeros((n, 10), np.int32)
    for _ in range(ROUNDS):
        body = np.ascontiguousarray(mech.report_batch(values, states, rng)[:, protocol.HEADER_SIZE:])
        sums += np.unpackbits(body, axis=1, bitorder="little")[:, :10]
    ties = rng.random((n, 10)) * 0.5  # ties broken at random, as a guess among set bits would
    hit = float(np.mean((sums + ties).argmax(axis=1) == values))
    rows = states.reshape(n, 10, mech.row_bytes)[np.arange(n), values]
    memo = np.unpackbits(rows, axis=1, bitorder="little")[:, :10]
    set_bits = memo.sum(axis=1)
    own = memo[np.arange(n), values]
    memo_alone = float(np.mean(np.where(set_bits == 0, 0.1, own / np.maximum(set_bits, 1))))
    assert hit <= memo_alone + 0.01, (hit, memo_alone)
    # the attack does recover the memoised bitmap (what it is bounded by), so the check has teeth
    assert hit >= memo_alone - 0.03, (hit, memo_alone)
