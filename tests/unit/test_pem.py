"""PEM (protocols.pem; Wang, Li, Jha, "Locally Differentially Private Heavy Hitter
Identification", TDSC 2019, §4): encoding, prefix keys (C against the Python reference),
public group draw, candidate extension, and the extension step finding planted heavy hitters
with a margin derived from OLH's variance."""
import math

import numpy as np
import pytest

from ldpfleet.core.errors import ConfigError
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
