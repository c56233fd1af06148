"""svim's size estimation in simulation (protocols.svim, svim_sim; Wang, Li, Jha, "Locally
Differentially Private Frequent Itemset Mining", IEEE S&P 2018, §5.2): a share of the phase-2
devices report their trimmed set size (candidate branch: phase 2's length l2 from it) or their
set size (flat branch: the scale of the phase-1 scores from it)."""
import numpy as np

from ldpfleet.eval import datasets
from ldpfleet.eval import ldpminer_sim, svim_sim
from ldpfleet.eval import svim_sizes as svim
from ldpfleet.core.protocols.ldpminer import trim_sets


def test_choose_l2_is_the_quantile_of_the_non_empty_sizes():
    # non-empty mass 0.35: sizes <= 1 hold 0.27 / 0.35 = 77 %, <= 2 hold 94 %
    assert svim.choose_l2([0.65, 0.27, 0.06, 0.015, 0.005], 4) == 2
    assert svim.choose_l2([0.65, 0.27, 0.06, 0.015, 0.005], 4, q=0.75) == 1
    assert svim.choose_l2([0.1, 0.0, 0.0, 0.9], 3) == 3  # every non-empty set is long
    assert svim.choose_l2([1.0, 0.0, 0.0], 2) == 1 and svim.choose_l2([1.2, -0.1, -0.1], 2) == 1
    # unclipped sums: a negative tail estimate lowers the total (0.49; sizes <= 2 hold 92 %)
    assert svim.choose_l2([0.5, 0.3, 0.15, 0.05, -0.01], 4) == 2
    assert svim.choose_l2([0.5, 0.3, 0.15, 0.05, 0.01], 4) == 3  # 0.45 / 0.51 = 88 %
    # noisy negative cells make the running sum go down: still the FIRST L reaching 90 %
    # (a binary search over the unsorted sums answered 7)
    assert svim.choose_l2([.3, .1, .85, -.1, 0, -.02, .05, .07, .03, .02], 9) == 2


def test_size_estimation_pays_only_for_short_trimmed_sets():
    # headlines (real dataset, k = 5): the top 10 words' phase-1 scores sum to ~0.06, l = 9
    assert svim.size_estimation_pays(np.full(10, 0.006), 9, 9)
    # Zipf(1) sets of mean 30 over 10^4 items: the top 10 hold ~30 % of a set, l = 69
    assert not svim.size_estimation_pays(np.full(10, 0.03), 69, 10)
    assert svim.size_estimation_pays(np.array([-1.0, 0.01]), 9, 9)  # negatives count as 0


def test_size_bits_ratio_is_unbiased_within_its_variance():
    """The flat branch's size group (svim_sim._size_bits: a fill bit and a held bit through
    binary randomized response): r = E[min(|set|, l)] / P(non-empty), z-scores over 30 seeds
    against the exact r of the sets."""
    from ldpfleet.core.mechanisms.sh import KeySets
    l, n = 8, 400000
    rng = np.random.default_rng(5)
    sizes = np.minimum(rng.geometric(1 / 4.0, n) - 1, 30)  # empty sets included
    offsets = np.zeros(n + 1, np.uint64)
    np.cumsum(sizes, out=offsets[1:])
    sets = KeySets(np.concatenate([np.arange(s, dtype=np.uint32) for s in sizes]), offsets)
    truth = np.minimum(sizes, l).mean() / np.mean(sizes > 0)
    assert 3 < truth < l - 1  # neither clip bound is near
    # at eps 4 the randomized response adds little, so the bits' own spread (a random half of
    # the devices, the fill bit's coin) dominates: leaving it out of the variance made the
    # z-scores spread 3.3 times too wide
    z = []
    for seed in range(40):
        rest, (r, var) = svim_sim._size_bits(sets, l, 4000, np.random.default_rng(100 + seed))
        z.append((r - truth) / np.sqrt(var))
    assert abs((rest.offsets.size - 1) / n - (1 - svim.FLAT_SIZE_SHARE)) < 0.01
    z = np.array(z)
    # mean of 40 z-scores: sd 1/sqrt(40); their sd within ~2.5 of its sampling sd (0.11) of 1
    assert abs(z.mean()) < 4 / np.sqrt(z.size), z.mean()
    assert 0.72 < z.std() < 1.28, z.std()
    # what 2.5 % of the devices buy: r to about 1 % at eps 1 on 10^6 devices of sets of l
    # (12,500 devices per half, a bit's variance ~ e / (e - 1)^2 = 0.92 per device)
    sd = svim.size_bits_ratio((1.0, 0.92 / 12500), (1.0, 0.92 / 12500), 50)[1] ** 0.5
    assert abs(sd - 50 * np.sqrt(2 * 0.92 / 12500)) < 1e-9 and sd / 50 < 0.013


def test_size_phase_finds_the_trimmed_sizes_quantile():
    """On short sets (geometric, mean 3, over 2,000 Zipf items) the top 10 items' trimmed sizes
    are mostly 0-2: the size group's l2 is the true 90th percentile of the non-empty ones,
    below min(l, k_max) = 10."""
    rng = np.random.default_rng(11)
    sets = datasets.draw_variable_sets(200000, "geometric:3", 2000, "zipf:1.0", rng)
    f = np.bincount(sets.keys, minlength=2000)[:2000]
    cand = np.argsort(-f)[:10].astype(np.uint32)
    m = np.diff(trim_sets(sets, cand).offsets.astype(np.int64))
    true_l2 = int(np.percentile(m[m > 0], 90, method="higher"))
    assert true_l2 < 10
    rest, l2 = svim_sim._size_phase(sets, cand, 10, 3000, np.random.default_rng(12))
    assert l2 == true_l2
    n_rest = rest.offsets.size - 1  # the size group's share left phase 2
    assert abs(n_rest / 200000 - (1 - svim.SIZE_SHARE)) < 4 * np.sqrt(0.16 / 200000)


def test_svim_on_short_sets_beats_its_fixed_length_phase2():
    """Same data and seeds: the candidate branch with the estimated l2 against the one padded
    to min(l, k_max) = 8 (svim_size False); over 4 seeds the mean RE of the estimated l2 is
    lower (phase-2 variance ~ l2^2, against 1 / 0.8 for the devices). A flat Zipf(0.6) head
    over 5,000 items: the top 10 hold ~7 % of a set, so the trimmed sets are short."""
    rng = np.random.default_rng(3)
    n, d = 200000, 5000
    sets = datasets.draw_variable_sets(n, "geometric:3", d, "zipf:0.6", rng)
    f = np.bincount(sets.keys, minlength=d)[:d] / n

    class T(ldpminer_sim.MinerTuning):
        pass
    res = {True: [], False: []}
    for size in (True, False):
        for seed in range(4):
            t = T(l=8)
            object.__setattr__(t, "svim_size", size)
            object.__setattr__(t, "svim_adaptive", False)
            ans = ldpminer_sim.run_ldpminer("svim", sets, d, 3000, [5], np.random.default_rng(seed), t)
            res[size].append(ldpminer_sim.score(f, ans[5], 5)["re"])
    assert np.mean(res[True]) < np.mean(res[False]), res
