"""C thresholds (c_kernels/ldp_thresholds.c) == ldpfleet.core.protocol == vectors/thresholds.json
(spec §2), and the C header packer (c_kernels/ldp_report.c) == protocol.pack_header."""
import json
from pathlib import Path

import pytest

from ldpfleet.core import protocol
from ldpfleet._kernels import ffi, lib

VECTORS = Path(__file__).resolve().parents[2] / "protocol_spec" / "v2" / "vectors"
ROWS = json.loads((VECTORS / "thresholds.json").read_text())
EPS_MAX = protocol.MAX_EPS_MILLI  # LDP_EPS_MILLI_MAX in ldp_thresholds.h = spec §2's 64000


def c_exp_lower(a, b):
    hi, lo = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    assert lib.ldp_exp_lower(a, b, hi, lo) == 0
    return (hi[0] << 64) | lo[0]


def c_threshold(fn, *args):
    out = ffi.new("uint32_t *")
    rc = fn(*args, out)
    assert rc == 0, "rc=%d for %s%r" % (rc, fn, args)
    return out[0]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "eps%d" % r["eps_milli"])
def test_c_thresholds_match_vectors_and_python(row):
    e = row["eps_milli"]
    assert c_exp_lower(e, 1000) == row["E_full"] == protocol.exp_lower(e, 1000)
    assert c_exp_lower(e, 2000) == row["E_half"] == protocol.exp_lower(e, 2000)
    assert c_threshold(lib.ldp_t_rr, e) == row["T_rr"] == protocol.t_rr(e)
    assert c_threshold(lib.ldp_t_oue_q, e) == row["T_oue_q"] == protocol.t_oue_q(e)
    assert c_threshold(lib.ldp_t_flip, e) == row["T_flip"] == protocol.t_flip(e)
    for n, t in row["T_grr"].items():
        assert c_threshold(lib.ldp_t_grr, e, int(n)) == t == protocol.t_grr(e, int(n))


EXTRA_EPS = [2, 3, 7, 999, 1001, 1386, 2500, 3141, 5000, 6931, 10000, 12000, 15000, 19999, 20001,
             22180, 22181, 30000, 33300, 40000, 44361, 44362, 50000, 63999, EPS_MAX]
"""Includes the range where E_full outgrows 128 bits (eps ~ 44.36) and the C code saturates."""
EXTRA_N = [2, 3, 4, 6, 7, 16, 255, 256, 257, 1000, 65536, 65537, 1 << 20, (1 << 31) + 1,
           (1 << 32) - 1, 1 << 32]


@pytest.mark.parametrize("e", EXTRA_EPS)
def test_c_thresholds_match_python_across_range(e):
    """Beyond the vector rows: every n class (c = cmin(n-1) from 2^31 down to 1) up to the cap."""
    if protocol.exp_lower(e, 1000) < 1 << 128:
        assert c_exp_lower(e, 1000) == protocol.exp_lower(e, 1000)
    else:  # E_full needs more than 128 bits: ldp_exp_lower says so, the thresholds saturate
        hi, lo = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        assert lib.ldp_exp_lower(e, 1000, hi, lo) == -2
    assert c_threshold(lib.ldp_t_rr, e) == protocol.t_rr(e)
    assert c_threshold(lib.ldp_t_oue_q, e) == protocol.t_oue_q(e)
    assert c_threshold(lib.ldp_t_flip, e) == protocol.t_flip(e)
    for n in EXTRA_N:
        assert c_threshold(lib.ldp_t_grr, e, n) == protocol.t_grr(e, n), n


def test_exp_lower_general_arguments():
    for a, b in [(0, 1), (1, 1), (5, 7), (123456, 10000), (30, 1)]:
        assert c_exp_lower(a, b) == protocol.exp_lower(a, b)


def test_grr_pairwise_bound_matches_the_reference():
    """ldp_grr_ok == protocol.grr_ok (spec §2 "every pair of outputs") at the bucket boundaries:
    n - 1 dividing 2^32, one off, and the largest domains."""
    ns = [2, 3, 5, 1 << 16, (1 << 16) + 1, (1 << 16) + 2, 4294967, 4294968, 10 ** 7, (1 << 31) + 1,
          (1 << 31) + 2, (1 << 32) - 1, 1 << 32]
    for e in [1, 10, 100, 500, 693, 694, 1000, 8000, 44362, EPS_MAX]:
        for n in ns:
            assert lib.ldp_grr_ok(e, n) == int(protocol.grr_ok(e, n)), (e, n)
    assert lib.ldp_grr_ok(1000, 1) == -1
    assert lib.ldp_grr_ok(EPS_MAX + 1, 10 ** 7) == -2


def test_threshold_errors_instead_of_wrong_values():
    out = ffi.new("uint32_t *")
    out[0] = 12345
    assert lib.ldp_t_rr(0, out) == -1
    assert lib.ldp_t_grr(1000, 1, out) == -1
    assert lib.ldp_t_grr(1000, (1 << 32) + 1, out) == -1
    assert lib.ldp_t_rr(EPS_MAX + 1, out) == -2
    assert lib.ldp_t_grr(EPS_MAX + 1, 3, out) == -2
    assert lib.ldp_t_flip(EPS_MAX + 1, out) == -2
    assert out[0] == 12345
    hi, lo = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    assert lib.ldp_exp_lower(1, 0, hi, lo) == -1
    assert lib.ldp_exp_lower(100, 1, hi, lo) == -2  # S * e^100 needs more than 128 bits


def test_constants_cmin_and_bucket_counts():
    assert lib.ldp_t_oue_p() == protocol.T_OUE_P
    assert lib.ldp_t_half() == protocol.T_HALF
    for n in [1, 2, 3, 5, 7, 1000, 1 << 16, (1 << 32) - 1, 1 << 32]:
        assert lib.ldp_cmin(n) == protocol.cmin(n)
        rs = sorted(r for r in {0, 1, n // 2, n - 1} if r < n)
        for r in rs:
            assert lib.ldp_bucket_count(r, n) == protocol.bucket_count(r, n)
    for n in [3, 7, 10]:
        assert sum(lib.ldp_bucket_count(r, n) for r in range(n)) == 1 << 32
    assert lib.ldp_bucket_count(5, 5) == 0 and lib.ldp_cmin(0) == 0


def test_header_pack_matches_python():
    buf = ffi.new("uint8_t[12]")
    for name, mid in protocol.MECHANISM_IDS.items():
        assert lib.ldp_mechanism_id(name.encode()) == mid
        assert ffi.string(lib.ldp_mechanism_name(mid)).decode() == name
        for phase, cid, seq in [(1, 0, 0), (2, 0x12345678, 0xFFFFFFFF), (1, 305419896, 7)]:
            lib.ldp_header_pack(buf, mid, phase, cid, seq)
            assert bytes(ffi.buffer(buf)) == protocol.pack_header(name, phase, cid, seq)
    assert lib.ldp_mechanism_id(b"nope") == 0


SHC_GRID = [1, 2, 3, 7, 500, 999, 1000, 1001, 1386, 2500, 5000, 10000, 20000, 22180, 22181, 32000,
            44361, 44362, 50000, 63998, 63999]
"""`shc` (spec §3.1) eps of each phase: the edges eps = 1 and eps1 + eps2 = 64000 included,
and the range where E(eps1 + eps2) outgrows 128 (and 2^157 > E) bits."""


def c_shc(e1, e2):
    out = [ffi.new("uint32_t *") for _ in range(3)]
    rc = lib.ldp_t_shc(e1, e2, *out)
    return rc, tuple(o[0] for o in out)


@pytest.mark.parametrize("e1", SHC_GRID)
def test_c_shc_thresholds_match_python_on_a_grid(e1):
    """ldp_t_shc == protocol.shc_thresholds and ldp_shc_ok == protocol.shc_ok for every eps2 of
    the grid with eps1 + eps2 <= 64000, plus eps2 = 64000 - eps1 exactly; past the limit both say
    no (not ok; ldp_t_shc ERANGE, protocol.shc_thresholds ValueError)."""
    for e2 in sorted(set(SHC_GRID) | {EPS_MAX - e1}):
        if e2 < 1:
            continue
        rc, got = c_shc(e1, e2)
        ok = lib.ldp_shc_ok(e1, e2)
        if e1 + e2 > EPS_MAX:
            assert rc == -2 and ok == 0 and not protocol.shc_ok(e1, e2), (e1, e2)
            with pytest.raises(ValueError):
                protocol.shc_thresholds(e1, e2)
            continue
        assert rc == 0, (e1, e2, rc)
        t1, a, b = protocol.shc_thresholds(e1, e2)
        assert got == (t1, a, b) and t1 == protocol.t_rr(e1), (e1, e2)
        assert ok == int(protocol.shc_ok(e1, e2)) == 1, (e1, e2)
        assert 0 < b <= a < protocol.WORD  # y1 == x makes y2 == x likelier (or both saturate)


def test_c_shc_edges_and_errors():
    """eps1 = eps2 = 1 (the smallest pair), eps1 + eps2 = 64000 both ways; 0 is EINVAL and not
    ok, above the limit ERANGE and not ok; the outputs are untouched on errors."""
    for e1, e2 in [(1, 1), (1, EPS_MAX - 1), (EPS_MAX - 1, 1), (EPS_MAX // 2, EPS_MAX // 2)]:
        rc, got = c_shc(e1, e2)
        assert rc == 0 and got == protocol.shc_thresholds(e1, e2)
        assert lib.ldp_shc_ok(e1, e2) == 1 and protocol.shc_ok(e1, e2)
    out = [ffi.new("uint32_t *") for _ in range(3)]
    for o in out:
        o[0] = 777
    for e1, e2, rc in [(0, 1000, -1), (1000, 0, -1), (0, 0, -1), (EPS_MAX, 1, -2),
                       (1, EPS_MAX, -2), (32000, 32001, -2), (EPS_MAX + 1, 5, -2)]:
        assert lib.ldp_t_shc(e1, e2, *out) == rc, (e1, e2)
        assert lib.ldp_shc_ok(e1, e2) == 0 and not protocol.shc_ok(e1, e2)
    assert [o[0] for o in out] == [777] * 3
