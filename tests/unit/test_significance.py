"""Lists of top items that control false discoveries (service/campaigns/significance.py).

An operator's OLH campaign (eps 2, d = 1,024, 5,000 devices of a Zipf fleet) listed items that
nobody holds at ranks 6 and 9 of its top 10, with `warnings: []`, and `--threshold auto`
(Bonferroni with alpha = 2) still kept some. Now every list tests all d + 1 estimated items
(H0: count = 0, one-sided z at each item's f = 0 deviation) with Benjamini-Hochberg at 5 %:
`--threshold auto` lists the discoveries, `--top` rows that are not discoveries carry `noise`
and the answer a warning.

Everything runs in process (aggregator-side seeds, the campaign's own sketch in a SQLite
state, `query.estimate` as the CLI and the API call it): 60 seeds in a few seconds.
"""
import os

import numpy as np
import pytest
from scipy import stats

from ldpfleet.eval import datasets
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.service import Store, create_campaign
from ldpfleet.service.campaigns.estimates import EstimateQuery
from ldpfleet.service.campaigns.query import estimate
from ldpfleet.service.campaigns.significance import discoveries, null_stddevs
from ldpfleet.core.signing import write_signing_key

D, N, EPS, SEEDS, LEVEL = 1024, 5000, 2.0, 60, 0.05


@pytest.fixture(scope="module")
def olh_campaign(tmp_path_factory):
    """(state, mechanism) of an OLH campaign (eps 2, d = 1,024), no broker."""
    d = tmp_path_factory.mktemp("significance")
    key = str(d / "k.key")
    write_signing_key(key)
    state = "sqlite:///" + str(d / "state.db")
    with Store(state) as store:
        camp = create_campaign(store, None, key, "truth", "olh", EPS, "0-%d" % (D - 1))
    return state, camp.mechanism(1)


def fleet_sketch(mech, seed: int):
    """(true counts over the d + 1 keys, sketch) of N devices drawn from Zipf(1.1)."""
    rng = np.random.default_rng(20_000 + seed)
    values = datasets.draw_from(datasets.probabilities("zipf:1.1", D), N, rng)
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(values.astype(np.uint32), rng))
    return np.bincount(values, minlength=D + 1), sketch


def test_auto_lists_control_the_false_discovery_rate_over_60_seeds(olh_campaign):
    """At --threshold auto the share of listed items whose true count is 0 averages at most
    the 5 % level (the mean over 60 seeds, plus 3 of its standard errors from the seeds'
    spread), and every top-10 row that is not listed carries `noise` with a warning. The
    unflagged top 10 (what the operator got) fails the same bound by far."""
    state, mech = olh_campaign
    fdp, top_fdp, listed, noise_rows, zero_rows, zero_flagged = [], [], 0, 0, 0, 0
    with Store(state) as store:
        for seed in range(SEEDS):
            true, sketch = fleet_sketch(mech, seed)
            store.put_sketch("truth", 1, sketch.n, sketch.serialize())
            auto = estimate(store, "truth", EstimateQuery(threshold="auto"))
            keys = [r["key"] for r in auto.rows]
            assert auto.significance.procedure == "benjamini-hochberg"
            assert auto.significance.tested == D + 1 and auto.significance.discoveries == len(keys)
            false = sum(1 for k in keys if true[k] == 0)
            fdp.append(false / max(len(keys), 1))
            listed += len(keys)

            top = estimate(store, "truth", EstimateQuery(top=10))
            found = set(keys)
            for row in top.rows:
                assert row["noise"] == (row["key"] not in found), (seed, row)
                zero_rows += true[row["key"]] == 0
                zero_flagged += true[row["key"]] == 0 and row["noise"]
            top_fdp.append(sum(1 for r in top.rows if true[r["key"]] == 0) / len(top.rows))
            flagged = [r for r in top.rows if r["noise"]]
            noise_rows += len(flagged)
            if flagged:
                assert any("not stand out of the noise" in w for w in top.warnings), top.warnings
                assert all("(item %s)" % r["item"] in " ".join(top.warnings) for r in flagged[:8])
            else:
                assert top.warnings == []
            text = top.to_text()
            assert text.count("  noise") == len(flagged)
            csv_rows = top.to_csv().splitlines()[1:]
            assert [line.endswith(",true") for line in csv_rows] == [r["noise"] for r in top.rows]
    fdp, top_fdp = np.array(fdp), np.array(top_fdp)
    bound = LEVEL + 3 * fdp.std(ddof=1) / np.sqrt(SEEDS)
    assert listed >= 3 * SEEDS  # the heavy items are found
    assert fdp.mean() <= bound, (fdp.mean(), bound)
    assert top_fdp.mean() > LEVEL + 3 * top_fdp.std(ddof=1) / np.sqrt(SEEDS), top_fdp.mean()
    # the top 10 of this fleet does hold items nobody has (what the operator saw), and the
    # flag catches them: at most the false discoveries (<= ~5 % of the listed) escape it
    assert zero_rows >= SEEDS and noise_rows >= zero_rows
    assert zero_rows - zero_flagged <= 0.05 * listed + 3 * np.sqrt(0.05 * listed)
    print("FDP %.4f (bound %.4f), unflagged top-10 %.3f, listed %d, top-10 rows of count 0: %d, "
          "flagged %d" % (fdp.mean(), bound, top_fdp.mean(), listed, zero_rows, zero_flagged))


def null_correlation(name: str, params: dict, reps: int = 400, users: int = 2000, d: int = 64):
    """Mean correlation between the estimates of two items nobody holds, over `reps` fleets
    in which every device holds item 0, and its standard error under independence
    (sqrt(2 / reps) / (m - 1) for m items: the sample variance of their standardised sum)."""
    rng = np.random.default_rng(77)
    mech = make_mechanism(name, 2000, d + 1, salt=3, campaign_id=1, phase=1, **params)
    values = np.zeros(users, np.uint32)
    rows = []
    for _ in range(reps):
        sketch = mech.new_sketch()
        sketch.update(mech.perturb_batch(values, rng))
        rows.append(np.asarray(sketch.estimate(np.arange(1, d)), np.float64))
    z = np.array(rows)
    z = (z - z.mean(0)) / z.std(0, ddof=1)
    m = z.shape[1]
    mean_offdiag = (np.var(z.sum(1), ddof=1) / m - 1) / (m - 1)
    return mean_offdiag, np.sqrt(2 / reps) / (m - 1), mech


def test_olh_and_oue_null_estimates_are_uncorrelated_and_grrs_are_not():
    """The dependence BH needs (significance.py): the estimates of items nobody holds are
    uncorrelated for OLH (a fresh hash seed per report) and OUE (independent bits), within 4
    standard errors of 0; GRR's are negatively correlated at -q/(1 - q) (one item per
    report), which this measurement sees (so lists of GRR campaigns use BY)."""
    for name, params in (("olh", {}), ("oue", {})):
        rho, se, mech = null_correlation(name, params)
        assert abs(rho) <= 4 * se, (name, rho, se)
        assert mech.estimate_dependence == "independent"
    rho, se, mech = null_correlation("grr", {})
    q = 1 / (np.exp(2.0) + 64)
    assert rho == pytest.approx(-q / (1 - q), abs=4 * se)
    assert rho < -8 * se and mech.estimate_dependence == "any"


def test_by_where_independence_is_not_shown_and_the_cutoffs():
    """GRR (and every mechanism not shown independent) gets Benjamini-Yekutieli: BH at
    q / H_m; the cutoff z of r discoveries is Phi^-1(1 - q r / m) (/ H_m for BY); with none,
    the z one item would need; an unknown deviation (NaN) is left out of the family."""
    freq = np.r_[0.5, 0.2, np.zeros(98)]
    sd = np.full(100, 0.05)
    noise, sig = discoveries(freq, sd, 0.05, "independent")
    assert noise.tolist() == [False, False] + [True] * 98
    assert sig.procedure == "benjamini-hochberg" and sig.discoveries == 2
    assert sig.z_cutoff == pytest.approx(stats.norm.isf(0.05 * 2 / 100))
    noise, sig = discoveries(freq, sd, 0.05, "any")
    harmonic = sum(1 / i for i in range(1, 101))
    assert sig.procedure == "benjamini-yekutieli" and sig.discoveries == 2
    assert sig.z_cutoff == pytest.approx(stats.norm.isf(0.05 * 2 / 100 / harmonic))
    noise, sig = discoveries(np.zeros(10), np.full(10, 0.05), 0.05, "independent")
    assert noise.all() and sig.discoveries == 0
    assert sig.z_cutoff == pytest.approx(stats.norm.isf(0.05 / 10))
    sd[1] = np.nan
    noise, sig = discoveries(freq, sd, 0.05, "independent")
    assert sig.tested == 99 and noise[1] and not noise[0]
    grr = make_mechanism("grr", 2000, 17, salt=1, campaign_id=1, phase=1)
    assert null_stddevs(grr, 1000, np.r_[0.5, np.zeros(16)]) == pytest.approx(
        np.full(17, np.sqrt(grr.variance(1000))))
    # a sketch's item nobody holds still collides with the heavy ones: its deviation grows
    cms = make_mechanism("cms", 2000, 1024, salt=1, campaign_id=1, phase=1)
    flat, heavy = null_stddevs(cms, 10000, np.zeros(1024)), null_stddevs(
        cms, 10000, np.r_[0.6, 0.3, np.zeros(1022)])
    assert heavy[0] > flat[0] and np.all(heavy == heavy[0])


@pytest.mark.parametrize("name,users", [("grr", 20000), ("cms", 20000)])
def test_by_lists_of_dependent_estimates_keep_the_level(name, users, tmp_path):
    """GRR (negatively correlated estimates) and CMS (collisions with the heavy items, in the
    f = 0 deviation) over 40 seeds of a fleet holding 32 of the 256 items (Zipf): the lists of
    Benjamini-Yekutieli stay at the level (mean share of listed items nobody holds <= 5 % + 3
    standard errors)."""
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    state = "sqlite:///" + str(tmp_path / "state.db")
    with Store(state) as store:
        mech = create_campaign(store, None, key, "c", name, 4.0, "0-255").mechanism(1)
        fdp, listed = [], 0
        for seed in range(40):
            rng = np.random.default_rng(30_000 + seed)
            probs = np.zeros(256)
            probs[:32] = datasets.probabilities("zipf:1.1", 32)
            values = datasets.draw_from(probs, users, rng)
            true = np.bincount(values, minlength=257)
            sketch = mech.new_sketch()
            sketch.update(mech.perturb_batch(values.astype(np.uint32), rng))
            store.put_sketch("c", 1, sketch.n, sketch.serialize())
            auto = estimate(store, "c", EstimateQuery(threshold="auto"))
            assert auto.significance.procedure == "benjamini-yekutieli"
            keys = [r["key"] for r in auto.rows]
            listed += len(keys)
            fdp.append(sum(1 for k in keys if true[k] == 0) / max(len(keys), 1))
    fdp = np.array(fdp)
    assert listed >= 3 * 40
    assert fdp.mean() <= LEVEL + 3 * fdp.std(ddof=1) / np.sqrt(len(fdp)), fdp.mean()
