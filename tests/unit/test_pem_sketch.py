"""PEM's aggregator face (protocol_spec/v2 §3.5): the per-group FLH sketch is linear (update of
the whole = merge of halves), survives serialize/deserialize, and its C estimator equals a
pure-Python FLH support over the spec's formula; the exact privacy of a pem report through the
shipped code paths (enumeration over word intervals, as tests/unit/test_privacy_grr_olh_flh_oue.py
does for flh)."""
import itertools
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from ldpfleet.core import protocol
from ldpfleet.core import strings_domain as sd
from ldpfleet.core.errors import SketchMismatch
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import Sketch
from ldpfleet.core.protocols import pem as pem_protocol

W = protocol.WORD
LEVELS = [8, 16, 24, 32]


def mechanism(**kw):
    args = dict(g=5, kp=16, levels=LEVELS, salt=0xFFFFFFF7, campaign_id=77, phase=1)
    args.update(kw)
    return make_mechanism("pem", args.pop("eps_milli", 2000), W - 1, **args)


def fleet(mech, n, seed):
    rng = np.random.default_rng(seed)
    words = ["abcd", "abzz", "hello", "hi", "xyzw"]
    devices = ["dev-%d" % i for i in range(n)]
    values = [words[i] for i in rng.choice(len(words), n, p=[.4, .2, .2, .1, .1])]
    groups = np.array([mech.group(d) for d in devices])
    codes = pem_protocol.encode_batch(values, mech.max_len)
    keys = np.zeros(n, np.uint32)
    for i in range(len(LEVELS)):
        rows = groups == i
        if rows.any():
            keys[rows] = pem_protocol.prefix_keys(codes[rows], LEVELS[i])
    # the prefix keys through the FLH batch kernel: the same bytes as report_for (checked below)
    reports = mech.perturb_batch(keys, rng)
    return devices, values, groups, reports


def test_batch_reports_equal_the_device_face():
    mech = mechanism()
    devices, values, groups, reports = fleet(mech, 50, 1)
    rng = np.random.default_rng(9)
    for d, v in zip(devices[:10], values[:10]):
        words = [int(w) for w in rng.integers(0, W, 3)]
        one = mech.report_for(d, v, words, 5)
        assert one == mech.c_report({"device": d, "value": v}, words, 5)
        flh = make_mechanism("flh", 2000, W - 1, g=5, kp=16, salt=mech.salt, campaign_id=77)
        assert one[12:] == flh.reference_report(mech.prefix_key(d, v), words, 5)[12:]


def test_update_equals_merge_of_halves_and_serializes():
    mech = mechanism()
    devices, _, groups, reports = fleet(mech, 4000, 2)
    whole = mech.new_sketch()
    whole.update(reports, devices=devices)
    assert whole.n == 4000 and whole.sizes.sum() == 4000
    assert np.array_equal(whole.sizes, np.bincount(groups, minlength=len(LEVELS)))
    a, b = mech.new_sketch(), mech.new_sketch()
    a.update(reports[:1500], groups=groups[:1500])
    b.update(reports[1500:], groups=groups[1500:])
    a.merge(b)
    assert np.array_equal(a.counts, whole.counts) and np.array_equal(a.sizes, whole.sizes)
    back = Sketch.deserialize(whole.serialize())
    assert np.array_equal(back.counts, whole.counts) and back.n == whole.n
    assert np.array_equal(back.sizes, whole.sizes)
    other = mechanism(salt=1).new_sketch()
    with pytest.raises(SketchMismatch):
        whole.merge(other)


def reference_support(mech, counts, key):
    """Spec §3.5: sum_j count[j][bucket(Hs(key, salt + j), g)]."""
    return sum(int(counts[j][protocol.bucket(protocol.keyed_hash(key, protocol.row_seed(
        mech.salt, j)), mech.g)]) for j in range(mech.kp))


def test_estimator_matches_python_reference_and_finds_the_head():
    mech = mechanism(eps_milli=4000, g=56, kp=256)
    devices, values, groups, reports = fleet(mech, 20000, 3)
    sk = mech.new_sketch()
    sk.update(reports, devices=devices)
    for i, bits in enumerate(LEVELS):
        codes = pem_protocol.encode_batch(["abcd", "hello", "qqqq", ""], mech.max_len)
        keys = pem_protocol.prefix_keys(codes, bits)
        got = sk.support(i, keys)
        assert [reference_support(mech, sk.counts[i], int(k)) for k in keys] == list(got)
        p, q = (float(x) for x in mech.support_pq())
        n = sk.sizes[i]
        assert np.allclose(sk.estimate(i, keys), (got - n * q) / (p - q))
        f = sk.frequencies(i, keys)
        truth = [np.mean([sd.prefix_key(sd.code_of(v, 4), bits) == sd.prefix_key(c.tobytes(), bits)
                          for v, g in zip(values, groups) if g == i]) for c in codes]
        # FLH's noise plus its public-seed collision term over these 5 strings (flh.py)
        sd_f = math.sqrt(mech.variance(int(n)) + 0.26 / ((mech.g - 1) * mech.kp))
        assert np.all(np.abs(f - truth) < 5 * sd_f + 0.01), (bits, f, truth)
    answer = pem_protocol.identify(pem_protocol.PemPlan(4000, max_len=4, keep=8, top=3),
                                   sk.group_estimate())
    assert set(answer.strings) == {"abcd", "abzz", "hello"[:4]}


# --- exact privacy through the shipped code paths ------------------------------------------

def intervals(cuts):
    cuts = [0] + sorted(set(cuts)) + [W]
    return [(a, b - 1, b - a) for a, b in zip(cuts, cuts[1:])]


def bucket_intervals(n):
    return [(-(-r * W // n), -(-r * W // n) + protocol.bucket_count(r, n) - 1,
             protocol.bucket_count(r, n)) for r in range(n)]


def distribution(mech, device, value):
    specs = [bucket_intervals(mech.kp), intervals([mech.t_keep]), bucket_intervals(mech.g - 1)]
    dist = defaultdict(int)
    for combo in itertools.product(*specs):
        first = mech.c_report({"device": device, "value": value}, [iv[0] for iv in combo], 1)
        last = mech.reference_report({"device": device, "value": value}, [iv[1] for iv in combo], 1)
        assert first == last, "report changes inside a word interval"
        dist[first] += math.prod(iv[2] for iv in combo)
    total = sum(dist.values())
    assert total == W ** 3
    return {r: Fraction(c, total) for r, c in dist.items()}


@pytest.mark.parametrize("eps_milli", [500, 2500])
@pytest.mark.parametrize("g,kp", [(2, 1), (3, 4), (4, 3)])
def test_pem_report_is_exactly_eps_ldp_for_any_two_values(eps_milli, g, kp):
    mech = mechanism(eps_milli=eps_milli, g=g, kp=kp)
    device = "dev-7"
    values = ["abcd", "abce", "", None, "\u00e9\u00e9\u00e9"]

    def bucket0(v):  # the bucket of v's key_λ under seed index 0
        return protocol.bucket(protocol.keyed_hash(mech.prefix_key(device, v), mech.salt), g)
    values.append(next(v for v in ("%c%c" % (65 + i, 97 + i) for i in range(26))
                       if bucket0(v) != bucket0(values[0])))  # a pair the report tells apart
    dists = [distribution(mech, device, v) for v in values]
    bound = Fraction(protocol.exp_lower(eps_milli, 1000), protocol.SCALE)
    reports = set().union(*dists)
    worst = Fraction(1)
    for r in reports:
        probs = [d.get(r, Fraction(0)) for d in dists]
        assert min(probs) > 0
        worst = max(worst, max(probs) / min(probs))
    assert worst <= bound and float(worst) <= math.exp(eps_milli / 1000) + 1e-12
    assert float(worst) > math.exp(eps_milli / 1000) * (1 - 1e-6)  # tight: the bound is reached


def test_c_groups_equal_the_reference_rule():
    mech = mechanism(levels=[1, 2, 3, 5, 8, 13, 21, 32])
    ids = ["dev-%d" % i for i in range(500)] + ["fleet/\u00e9t\u00e9-1", "x", ""]
    want = [sd.group_of(d, mech.salt, mech.groups) for d in ids]
    assert list(mech.groups_of(ids)) == want and len(set(want)) == mech.groups
    blob = b"".join(d.encode() for d in ids)
    lengths = np.array([len(d.encode()) for d in ids])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    data = np.frombuffer(blob, np.uint8)
    assert list(mech.groups_of_spans(data, offsets, lengths)) == want


def test_update_refuses_groups_out_of_range():
    mech = mechanism()
    _, _, groups, reports = fleet(mech, 10, 4)
    with pytest.raises(ValueError):
        mech.new_sketch().update(reports, groups=np.full(10, len(LEVELS)))
    with pytest.raises(ValueError):
        mech.new_sketch().update(reports, groups=groups[:5])
