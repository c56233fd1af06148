"""PEM (protocols.pem; Wang, Li, Jha, "Locally Differentially Private Heavy Hitter
Identification", TDSC 2019, §4): encoding, prefix keys (C against the Python reference),
public group draw, candidate extension, and the extension step finding planted heavy hitters
with a margin derived from OLH's variance."""
import math

import numpy as np
import pytest

from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms.flh import TABLE_MAX as FLH_TABLE_MAX
from ldpfleet.core.mechanisms.olh import default_g
from ldpfleet.core.protocols import pem
from ldpfleet.eval import pem_sim


def test_encoding_round_trip_cut_and_pad():
    for s in ["", "a", "hello", "héllo wörld", "ten chars!"]:
        code = pem.encode(s, 16)
        assert len(code) == 16
        assert pem.decode(code) == s
    assert pem.encode("abcdefghijkl", 4) == b"abcd"            # cut on bytes
    assert pem.encode("ab", 4) == b"ab\0\0"                     # NUL padded
    assert pem.decode(pem.encode("é", 1)) == "\ufffd"           # a cut character is replaced
    codes = pem.encode_batch(["x", "yz"], 3)
    assert codes.tolist() == [[120, 0, 0], [121, 122, 0]]


def test_prefix_keys_c_match_reference_and_ignore_later_bits():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, (50, 10), dtype=np.uint8)
    for bits in (1, 7, 8, 13, 16, 80):
        ref = [pem.prefix_key(bytes(c), bits) for c in codes]
        assert pem.prefix_keys(codes, bits).tolist() == ref
    # bits past the prefix do not matter; the length does
    a = np.array([[0b10110000, 1, 2]], np.uint8)
    b = np.array([[0b10111111, 9, 9]], np.uint8)
    assert pem.prefix_keys(a, 4)[0] == pem.prefix_keys(b, 4)[0]
    assert pem.prefix_keys(a, 5)[0] != pem.prefix_keys(b, 5)[0]
    assert pem.prefix_keys(a, 3)[0] != pem.prefix_keys(a, 4)[0]
    with pytest.raises(ConfigError):
        pem.prefix_keys(a, 25)


def test_group_assignment_is_public_and_value_independent():
    plan = pem.PemPlan(2000, max_len=4, step=8, validate_share=0.2)
    shares = plan.shares()
    assert len(shares) == len(plan.level_bits()) + 1 and math.isclose(shares.sum(), 1.0)
    # the group is a function of the public word alone (the value is not an argument), and
    # the draw follows the shares
    words = np.random.default_rng(1).integers(0, 1 << 32, 200_000, dtype=np.uint64)
    groups = pem.group_of(words, shares)
    assert groups.min() == 0 and groups.max() == len(shares) - 1
    freq = np.bincount(groups) / words.size
    assert np.allclose(freq, shares, atol=4 * math.sqrt(0.25 / words.size))
    assert pem.group_of([0], shares)[0] == 0 and pem.group_of([(1 << 32) - 1], shares)[0] == 4
    w = pem.device_word("board-17", 99)
    assert w == pem.device_word("board-17", 99) and w != pem.device_word("board-17", 100)


def test_extend_enumerates_every_segment():
    codes = np.array([[0b10100000, 0], [0b01000000, 0]], np.uint8)
    out = pem.extend(codes, 3, 2)
    assert out.shape == (8, 2)
    assert [r[0] >> 3 for r in out] == [0b10100, 0b10101, 0b10110, 0b10111,
                                        0b01000, 0b01001, 0b01010, 0b01011]
    plan = pem.PemPlan(2000, max_len=3, alphabet="ab")
    grown = pem.grow(plan, np.zeros((1, 3), np.uint8), 0, 16)
    assert sorted(bytes(r[:2]) for r in grown) == sorted(
        bytes([x, y]) for x in b"\0ab" for y in b"\0ab" if x or not y)


def test_plan_rejects_bad_settings():
    for kw in ({"max_len": 0}, {"step": 0}, {"keep": 5, "top": 10},
               {"validate_share": 1.0}, {"first": 30}, {"alphabet": "ab", "step": 4}):
        with pytest.raises(ConfigError):
            pem.PemPlan(2000, **kw)


def test_extension_finds_planted_heavy_hitters():
    """Five planted strings at 10 % each among 50,000 devices (the rest unique noise), eps = 4,
    4-byte codes, 4 levels (12,500 devices each). OLH's standard deviation per level is
    sigma = sqrt(Var/n_level); a planted prefix sits at f/sigma standard deviations while the
    noise of the keep * 2^8 empty candidates stays below sqrt(2 ln(candidates)) + 2 of them
    (union bound, P < 1e-3 per level), so every level keeps every planted prefix."""
    eps_milli, n, max_len = 4000, 50_000, 4
    plan = pem.PemPlan(eps_milli, max_len=max_len, top=5, step=8, keep=16, validate_share=0.0)
    mech = plan.mechanism()
    n_level = n / len(plan.level_bits())
    sigma = math.sqrt(float(mech.item_variances(int(n_level), [0.0])[0]))
    bound = (math.sqrt(2 * math.log(plan.keep << plan.step)) + 2) * sigma
    planted = ["heat", "fan!", "oops", "wifi", "boot"]
    f = 0.10
    assert f - 3 * sigma > bound          # the margin the assertion below relies on
    rng = np.random.default_rng(7)
    noise = ["%04x" % i for i in rng.permutation(1 << 16)[: int(n * (1 - len(planted) * f))]]
    values = planted * int(n * f) + noise
    r = pem_sim.simulate_strings(plan, values, seed=11)
    assert set(r["top_items"]) == set(planted)
    assert r["recall"] == 1.0


def test_identify_refuses_wrong_group_count():
    plan = pem.PemPlan(2000, max_len=2)
    with pytest.raises(ConfigError):
        pem.identify(plan, [np.zeros((0, plan.mechanism().report_size), np.uint8)])


def test_simulate_cli_pem(capsys, tmp_path):
    import json
    from ldpfleet import cli
    assert cli.main(["simulate", "--protocol", "pem", "--users", "20000", "--epsilon", "4",
                     "--top", "3", "--param", "words=20", "--param", "length=4",
                     "--param", "keep=8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["protocol"] == "pem" and r["users"] == 20000 and len(r["top_items"]) == 3
    data = tmp_path / "s.csv"
    data.write_text("device,item\n" + "".join("d%d,%s\n" % (i, "abc" if i % 2 else "x%d" % i)
                                                for i in range(2000)))
    assert cli.main(["simulate", "--protocol", "pem", "--data", str(data), "--epsilon", "4",
                     "--top", "1", "--param", "max_len=6", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["top_items"] == ["abc"] and r["data"] == str(data)
    assert cli.main(["simulate", "--protocol", "pem", "--users", "10", "--epsilon", "1",
                     "--param", "keep=0"]) == 2


def test_no_candidate_continues_after_padding():
    plan = pem.PemPlan(2000, max_len=3, alphabet="ab")
    grown = pem.grow(plan, np.zeros((1, 3), np.uint8), 0, 24)
    assert len(grown) == 1 + 2 + 4 + 8      # "", a, b, aa, ..., bbb
    assert all(pem.encode(pem.decode(c), 3) == bytes(c) for c in grown)
    kept = pem.padded_only(np.array([[0, 1, 0], [1, 0, 0], [1, 2, 0]], np.uint8), 16)
    assert kept.tolist() == [[1, 0, 0], [1, 2, 0]]


# --- FLH path (spec §3.5) -------------------------------------------------------------------

def _reference_flh_freqs(mech, counts, keys):
    """Pure-Python spec §3.5: support(c) = sum_j count[j][bucket(Hs(c, salt + j), g)],
    f = (support - n/g) / (n (p - 1/g))."""
    from ldpfleet.core import protocol
    n = int(counts.sum())
    p = mech.t_keep / protocol.WORD
    out = []
    for c in keys:
        support = sum(int(counts[j][protocol.bucket(protocol.keyed_hash(int(c),
                                                                        protocol.row_seed(mech.salt, j)),
                                                    mech.g)]) for j in range(mech.kp))
        out.append((support - n / mech.g) / (n * (p - 1.0 / mech.g)))
    return out


def test_flh_estimate_matches_pure_python_reference():
    plan = pem.PemPlan(1500, max_len=4, kp=7, g=5)
    mech = plan.mechanism(salt=0xFFFFFFFE)          # the seeds wrap past 2^32
    assert (mech.kp, mech.g, mech.salt) == (7, 5, 0xFFFFFFFE)
    rng = np.random.default_rng(5)
    codes = pem.encode_batch(["ab", "abc", "zz", "q"] * 50, 4)
    reports = mech.perturb_batch(pem.prefix_keys(codes, 16), rng)
    counts = pem.flh_counts(mech, reports)
    # the table is the count of (seed_index, y) pairs of the reports' bodies
    body = reports[:, 12:]
    idx = body[:, :4].copy().view("<u4").ravel()
    y = body[:, 4].astype(np.int64) | (body[:, 5].astype(np.int64) << 8)
    manual = np.zeros((7, 5), np.int64)
    np.add.at(manual, (idx, y), 1)
    assert np.array_equal(counts, manual) and counts.sum() == 200
    keys = np.concatenate([pem.prefix_keys(codes[:4], 16),
                           rng.integers(0, 1 << 32, 40, dtype=np.uint64).astype(np.uint32)])
    got = pem.flh_estimate(mech, counts, keys)
    assert np.allclose(got, _reference_flh_freqs(mech, counts, keys), rtol=0, atol=1e-12)
    # the group_estimate callable over per-group tables
    est = pem.flh_groups(mech, [counts, np.zeros_like(counts)])
    assert est.sizes == [200, 0]
    assert np.allclose(est(0, keys), got) and not est(1, keys).any()
    with pytest.raises(ValueError):
        pem.flh_estimate(mech, np.zeros((7, 4), np.int64), keys)


def test_flh_is_the_default_oracle_and_olh_stays_selectable():
    from ldpfleet.core.mechanisms.flh import FlhMechanism
    from ldpfleet.core.mechanisms.olh import OlhMechanism
    assert isinstance(pem.PemPlan(2000).mechanism(), FlhMechanism)
    assert isinstance(pem.PemPlan(2000, oracle="olh").mechanism(), OlhMechanism)
    with pytest.raises(ConfigError):
        pem.PemPlan(2000, oracle="hcms")
    with pytest.raises(ConfigError):
        pem.PemPlan(2000, kp=0)


def test_explicit_levels_and_for_fleet_schedule():
    alphabet = pem_sim.ALPHABET
    p6 = pem.PemPlan.for_fleet(10**6, 1000, 6, alphabet=alphabet)
    assert p6.level_bits() == [24, 48] and p6.pool and p6.oracle == "flh"
    p10 = pem.PemPlan.for_fleet(10**6, 1000, 10, alphabet=alphabet)
    assert p10.level_bits() == [24, 48, 64, 80]          # 3 + 3 + 2 + 2 characters
    assert pem.PemPlan.for_fleet(10**5, 2000, 4).level_bits() == [8, 16, 24, 32]  # bytes
    for plan in (p6, p10, pem.PemPlan.for_fleet(100, 8000, 3, alphabet="ab")):
        assert 1024 <= plan.kp <= 65536 and plan.kp & (plan.kp - 1) == 0
    # k' grows with the devices per group (the collision term stays a fixed share)
    assert pem.PemPlan.for_fleet(10**5, 1000, 6, alphabet=alphabet).kp < p6.kp
    for bad in ((8, 24), (16, 8, 32), (), (8, 16, 33)):
        with pytest.raises(ConfigError):
            pem.PemPlan(2000, max_len=4, levels=bad)
    with pytest.raises(ConfigError):       # an alphabet needs whole bytes per level
        pem.PemPlan(2000, max_len=2, levels=(12, 16), alphabet="ab")
    with pytest.raises(ConfigError):       # keep * 2^20 extensions is beyond the decode bound
        pem.PemPlan(2000, max_len=4, levels=(8, 28, 32), keep=16)


def test_pooled_ranking_borrows_a_prefix_only_without_a_significant_sibling():
    """Final candidates: 'aaX' heavy, its noise sibling 'aaY', 'bbZ' alone on its prefix, and
    'ccA', 'ccB', two significant strings sharing a prefix. 'aaY' must not borrow 'aa''s
    level-1 estimate (its sibling is significant); 'aaX' and 'bbZ' pool both groups in
    proportion to their reports; 'ccA' and 'ccB' are ranked on the last group alone."""
    plan = pem.PemPlan(2000, max_len=3, levels=(16, 24), pool=True, keep=2, top=2)
    codes = pem.encode_batch(["aaX", "aaY", "bbZ", "ccA", "ccB"], 3)
    first = dict(zip(pem.prefix_keys(codes, 16).tolist(), [0.30, 0.30, 0.10, 0.5, 0.5]))

    def group_estimate(i, keys):
        assert i == 0
        return np.array([first[k] for k in keys.tolist()])
    group_estimate.sizes = [1000, 3000]
    last = np.array([0.28, 0.02, 0.06, 0.2, 0.3])
    out = pem.pooled(plan, group_estimate, codes, last, threshold=0.1)
    assert out[0] == pytest.approx((3000 * 0.28 + 1000 * 0.30) / 4000)
    assert out[1] == pytest.approx(0.02)
    assert out[2] == pytest.approx((3000 * 0.06 + 1000 * 0.10) / 4000)
    assert out[3:].tolist() == pytest.approx([0.2, 0.3])
    assert pem.noise_threshold(np.array([0.5])) == float("inf")
    noise = np.random.default_rng(2).normal(0, 0.01, 20000)
    assert 0.01 * 4.0 < pem.noise_threshold(noise) < 0.01 * 4.9   # sd * sqrt(2 ln 20000)


def test_for_fleet_plan_finds_planted_strings_through_flh():
    """Four planted 6-character strings at 8 % each among 40,000 devices (the rest spread over
    4,000 other strings), eps = 3, the fleet plan (2 levels of 3 characters, FLH, pooled
    ranking): a planted string sits near 0.08 / 0.0037 = 21 standard deviations of one group's
    noise, far above the sqrt(2 ln 10^6) = 5.3 of the largest empty candidate."""
    alphabet = "abcdefgh"
    planted = ["abcdef", "hgfedc", "aaaaaa", "bad_ca".replace("_", "h")]
    rng = np.random.default_rng(9)
    others = ["".join(alphabet[i] for i in rng.integers(0, 8, 6)) for _ in range(4000)]
    values = planted * 3200 + [others[i] for i in rng.integers(0, 4000, 40000 - 12800)]
    plan = pem.PemPlan.for_fleet(len(values), 3000, 6, alphabet=alphabet, top=4)
    r = pem_sim.simulate_strings(plan, values, seed=4)
    assert r["oracle"] == "flh" and set(r["top_items"]) == set(planted)


@pytest.mark.parametrize("eps_milli", [1000, 3000, 5000, 8000])
@pytest.mark.parametrize("max_len", [16, 64])
@pytest.mark.parametrize("n", [10 ** 5, 10 ** 8])
def test_for_fleet_plan_fits_the_sketch_table(eps_milli, max_len, n):
    """The plan `campaign create` writes must be one the aggregator can fold: G x kp x g
    cells within the table limit (else PemMechanism refuses it and the campaign cannot be
    created, e.g. eps = 8 with 16-byte strings at any fleet size)."""
    from ldpfleet.core.mechanisms import make_mechanism
    plan = pem.PemPlan.for_fleet(n, eps_milli, max_len)
    g = plan.g or default_g(eps_milli)
    mech = make_mechanism("pem", eps_milli, 2 ** 32 - 1, g=g, kp=plan.kp,
                          levels=plan.level_bits(), salt=1, campaign_id=1, phase=1)
    assert mech.groups * mech.kp * mech.g <= FLH_TABLE_MAX
    assert plan.kp & (plan.kp - 1) == 0
