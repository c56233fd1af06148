"""`ldpfleet simulate --data FILE`, `--users N` resampling, variable-size sets and `--repeat`
for the LDPMiner family: the CSV loader (ldpfleet.eval.datafile), its typed errors and
exit code, the default padded length l (90th percentile of the set sizes, LDPMiner §3), and
runs through the CLI in process (`ldpfleet.cli.main`).

Statistics: on the easy dataset every user holds at most l items, so the final estimates are
unbiased with the exact item variances of the mechanism producing them (`item_variances`, as
in test_simulate_protocols). With z = Phi^-1(1 - alpha/(2d)), alpha = 1e-4, every estimate is
within z sigma except with probability <= alpha (Bonferroni, normal approximation); the test
first checks the true top-k lead every other item by more than 2 z sigma (phase 1 and the final
phase), so recall 1 is then decisive.
"""
import csv
import json

import numpy as np
import pytest
from scipy import stats

from ldpfleet import cli
from ldpfleet.eval import datafile, datasets
from ldpfleet.core.errors import DataFileError
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.sh import KeySets, check_distinct
from ldpfleet.core.protocols import ldpminer
from ldpfleet.eval import ldpminer_sim

ALPHA = 1e-4


def write_csv(path, rows, header=("device", "item")):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        if header is not None:
            w.writerow(header)
        w.writerows(rows)
    return str(path)


@pytest.fixture
def run(capsys):
    """`ldpfleet simulate ...` in this process: (exit status, stdout, stderr)."""
    def call(*args):
        capsys.readouterr()
        try:
            status = cli.main(["simulate", *map(str, args)])
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
        out, err = capsys.readouterr()
        return status, out, err
    return call


@pytest.fixture
def run_json(run):
    def call(*args):
        status, out, err = run(*args, "--json")
        assert status == 0, err
        return json.loads(out)
    return call


def table_code(exc):
    """The exit code cli.exit_codes gives this exception (first match)."""
    return next(code for kinds, code, _ in cli.exit_codes() if isinstance(exc, kinds))


# --- loader --------------------------------------------------------------------------------

def test_string_items_and_devices_without_items(tmp_path):
    path = write_csv(tmp_path / "a.csv", [("d1", "pear"), ("d2", "apple"), ("d1", "kiwi"),
                                          ("dev7", ""), ("d3", "apple")])
    data = datafile.load_item_csv(path)
    assert data.labels == ["apple", "kiwi", "pear"] and data.domain == 3
    assert data.devices == ["d1", "d2", "dev7", "d3"] and data.users == 4
    assert data.set_sizes().tolist() == [2, 1, 0, 1]
    held = [sorted(data.labels[k] for k in data.sets.keys[a:b])
            for a, b in zip(data.sets.offsets[:-1], data.sets.offsets[1:])]
    assert held == [["kiwi", "pear"], ["apple"], [], ["apple"]]
    assert data.sets.keys.dtype == np.uint32 and data.sets.offsets.dtype == np.uint64


def test_int_items_sort_numerically(tmp_path):
    data = datafile.load_item_csv(write_csv(tmp_path / "i.csv", [("a", 10), ("b", 9), ("c", 100)]))
    assert data.labels == [9, 10, 100]
    assert data.sets.keys.tolist() == [1, 0, 2]
    mixed = datafile.load_item_csv(write_csv(tmp_path / "m.csv", [("a", 10), ("b", "x")]))
    assert mixed.labels == ["10", "x"]


@pytest.mark.parametrize("rows, header, field, needle", [
    ([("d1", "a"), ("d2", "b"), ("d1", "a")], ("device", "item"), "duplicate",
     "line 4 repeats line 2"),
    ([("d1", ""), ("d1", "")], ("device", "item"), "duplicate", "line 3 repeats line 2"),
    ([("d1", "a"), ("d2", "b", "c")], ("device", "item"), "row", "line 3: expected 2 columns"),
    ([("d1",)], ("device", "item"), "row", "line 2: expected 2 columns"),
    ([("d1", "a")], ("dev", "item"), "header", "line 1: expected the header"),
    ([("d1", "a"), ("d2", "b")], ("device", "item", "x"), "header", "expected the header"),
    ([("d1", "a"), ("", "b")], ("device", "item"), "device", "line 3: empty device id"),
    ([("d1", "a"), ("d2", "a")], ("device", "item"), "item", "at least 2 distinct items"),
    ([("d1", "a"), ("d1", ""), ("d2", "b")], ("device", "item"), "row",
     "line 3 says it holds none"),
    ([], None, "header", "empty file"),
    ([], ("device", "item"), "row", "no rows"),
])
def test_malformed_files_are_typed_errors(tmp_path, rows, header, field, needle):
    path = write_csv(tmp_path / "bad.csv", rows, header)
    with pytest.raises(DataFileError) as info:
        datafile.load_item_csv(path)
    assert info.value.field == field and needle in str(info.value), str(info.value)
    assert "bad.csv" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_duplicate_row_through_the_cli_exits_with_the_table_code(tmp_path, run):
    path = write_csv(tmp_path / "dup.csv", [("d1", "a"), ("d2", "b"), ("d1", "a")])
    status, out, err = run("--protocol", "sampling-rappor", "--data", path, "--epsilon", 4,
                           "--top", 1, "--json")
    assert status == table_code(DataFileError("duplicate", "x")) == 2
    assert "dup.csv line 4" in err and "repeats line 2" in err and "Traceback" not in err
    assert out == ""
    status, _, err = run("--mechanism", "grr", "--data", write_csv(tmp_path / "h.csv", [("d", "a")],
                                                                   ("id", "item")),
                         "--epsilon", 2)
    assert status == 2 and "header" in err and "h.csv line 1" in err


def test_resampling_is_seeded_and_keeps_sets(tmp_path):
    rows = [("u%d" % u, "i%d" % i) for u in range(50) for i in range(u % 4)] + [("empty", "")]
    data = datafile.load_item_csv(write_csv(tmp_path / "r.csv", rows))
    a = data.resample(1000, np.random.default_rng(5))
    b = data.resample(1000, np.random.default_rng(5))
    c = data.resample(1000, np.random.default_rng(6))
    assert a.offsets.size == 1001 and np.array_equal(a.keys, b.keys)
    assert np.array_equal(a.offsets, b.offsets) and not np.array_equal(a.offsets, c.offsets)
    check_distinct(a.keys, a.offsets)
    sizes = np.diff(a.offsets.astype(np.int64))
    assert set(sizes.tolist()) <= {0, 1, 2, 3} and (sizes == 0).any()


def test_chunks_of_keysets_and_true_frequencies():
    sets = datasets.draw_variable_sets(1000, "geometric:3", 40, "zipf:1.1",
                                       np.random.default_rng(2))
    parts = [ldpminer_sim.chunk_of(sets, a, min(1000, a + 300)) for a in range(0, 1000, 300)]
    assert np.array_equal(np.concatenate([p.keys for p in parts]), sets.keys)
    assert all(p.offsets[0] == 0 and p.offsets[-1] == p.keys.size for p in parts)
    data = ldpminer_sim.set_data(sets, 40)
    holders = [set() for _ in range(40)]
    for u, (a, b) in enumerate(zip(sets.offsets[:-1], sets.offsets[1:])):
        for k in sets.keys[a:b]:
            holders[k].add(u)
    assert np.allclose(data.f_true, [len(h) / 1000 for h in holders])


# --- CLI: protocols ------------------------------------------------------------------------

def easy_rows(rng, n=5000):
    """Three very frequent items, 20 rare ones (a device holds at most one), 100 empty devices."""
    heavy = {"apple": 0.95, "pear": 0.9, "kiwi": 0.85}
    rows = []
    for u in range(n):
        rows += [("d%d" % u, it) for it, p in heavy.items() if rng.random() < p]
        if rng.random() < 0.5:
            rows.append(("d%d" % u, "rare%02d" % rng.integers(20)))
    return rows + [("e%d" % u, "") for u in range(100)]


def sds(core, eps_milli, d, l, n, f, k):
    """(phase-1 sd or None, final sd) per item: the mechanisms' exact item variances."""
    if core == "rp":
        return None, np.sqrt(make_mechanism("srappor", eps_milli, d, l=l).item_variances(n, f))
    eps1, eps2 = ldpminer.split_budget(eps_milli)
    phase1 = make_mechanism("sh", eps1, d, l=l, m=ldpminer.DEFAULT_M)
    final = make_mechanism("srappor", eps2, d, l=ldpminer.phase2_length(l, 2 * k),
                           candidates=list(range(2 * k)))
    return np.sqrt(phase1.item_variances(n, f)), np.sqrt(final.item_variances(n, f))


@pytest.mark.parametrize("name, core", [("sampling-rappor", "rp"), ("ldpminer-rappor", "lm-rp")])
def test_protocols_find_the_true_top_items_of_a_file(tmp_path, run_json, name, core):
    path = write_csv(tmp_path / "easy.csv", easy_rows(np.random.default_rng(1)))
    data = datafile.load_item_csv(path)
    n, d, k = data.users, data.domain, 3
    sizes = data.set_sizes()
    l = int(np.percentile(sizes, 90, method="higher"))
    assert l == sizes.max() == 4  # nobody holds more than l items: unbiased estimates
    f = np.bincount(data.sets.keys, minlength=d) / n
    order = np.argsort(-f, kind="stable")
    z = stats.norm.ppf(1 - ALPHA / (2 * d))
    sd1, sd = sds(core, 4000, d, l, n, f, k)
    for s in ([sd] if sd1 is None else [sd1, sd]):
        assert f[order[k - 1]] - f[order[k]] > 2 * z * s.max()

    r = run_json("--protocol", name, "--data", path, "--epsilon", 4, "--top", k, "--seed", 3)
    assert (r["users"], r["domain"], r["data"], r["dist"]) == (n, d, path, None)
    assert r["l"] == r["set_size_p90"] == l and r["set_size"] is None
    assert r["set_size_mean"] == pytest.approx(sizes.mean())
    assert r["recall"] == 1.0
    assert sorted(r["top_items"]) == sorted(r["true_top_items"]) == ["apple", "kiwi", "pear"]


def test_l_is_the_90th_percentile_and_set_size_overrides(tmp_path, run_json):
    rows = [("u%d" % u, "i%d" % i) for u in range(200) for i in range(1 + u % 20)]
    path = write_csv(tmp_path / "p.csv", rows)
    sizes = datafile.load_item_csv(path).set_sizes()
    p90 = int(np.percentile(sizes, 90, method="higher"))
    assert p90 == 19 and sizes.max() == 20  # sizes 1..20, ten users each: the 181st of 200
    base = ["--protocol", "sampling-sh", "--data", path, "--epsilon", 4, "--top", 2]
    r = run_json(*base)
    assert r["l"] == r["set_size_p90"] == p90
    assert run_json(*base, "--set-size", 3)["l"] == 3
    assert ldpminer_sim.default_l(KeySets(np.zeros(0, np.uint32), np.zeros(3, np.uint64))) == 1


def test_users_resamples_seeded_and_repeat_reports_means(tmp_path, run_json):
    path = write_csv(tmp_path / "easy.csv", easy_rows(np.random.default_rng(4), n=800))
    base = ["--protocol", "ldpminer-sh", "--data", path, "--users", 3000, "--epsilon", 4,
            "--top", 2]
    a = run_json(*base, "--seed", 1)
    assert a["users"] == 3000 and a["repeat"] == 1
    assert run_json(*base, "--seed", 1) == a
    assert run_json(*base, "--seed", 2)["set_size_mean"] != a["set_size_mean"]
    r = run_json(*base, "--seed", 1, "--repeat", 3)
    for key in ("re", "re_list", "ndcg", "recall"):
        assert len(r[key + "_per_repeat"]) == 3
        assert r[key] == pytest.approx(np.mean(r[key + "_per_repeat"]))
    assert r["re_per_repeat"][0] == a["re"]  # repeat 0 is the single run


def test_geometric_set_sizes_have_the_asked_mean(run_json):
    """Sizes ~ geometric on {1, 2, ...} with mean 5 (p = 1/5, variance (1-p)/p^2 = 20): the
    mean of n sizes lies within z sqrt(20/n) of 5, z = 4.5 (two-sided level ~7e-6); the cap
    (items with mass, 1000) is reached with probability 0.8^1000."""
    n, bound = 20000, 4.5 * np.sqrt(20 / 20000)
    sets = datasets.draw_variable_sets(n, "geometric:5", 1000, "zipf:1.1", np.random.default_rng(7))
    sizes = np.diff(sets.offsets.astype(np.int64))
    assert abs(sizes.mean() - 5) < bound and sizes.min() >= 1
    check_distinct(sets.keys, sets.offsets)
    assert sets.keys.max() < 1000
    r = run_json("--protocol", "sampling-rappor", "--users", n, "--domain", 1000,
                 "--set-size-dist", "geometric:5", "--epsilon", 4, "--top", 5, "--seed", 7)
    assert abs(r["set_size_mean"] - 5) < bound
    assert r["set_size_dist"] == "geometric:5" and r["set_size"] is None
    fixed = datasets.draw_variable_sets(10, "fixed:3", 50, "uniform", np.random.default_rng(1))
    assert np.diff(fixed.offsets.astype(np.int64)).tolist() == [3] * 10


# --- CLI: single-item mechanisms -----------------------------------------------------------

def test_mechanism_uses_the_file_values(tmp_path, run_json, run):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 8, 4000) ** 2  # int items 0, 1, 4, ..., 49
    path = write_csv(tmp_path / "one.csv", [("d%d" % u, int(v)) for u, v in enumerate(values)])
    r = run_json("--mechanism", "grr", "--data", path, "--epsilon", 2, "--seed", 1)
    assert (r["users"], r["domain"], r["data"], r["dist"]) == (4000, 8, path, None)
    assert 0 < r["mse"] < 10 * r["theory_variance"]
    r = run_json("--mechanism", "oue", "--data", path, "--users", 9000, "--epsilon", 2,
                 "--repeat", 2)
    assert r["users"] == 9000 and len(r["mse_per_repeat"]) == 2
    two = write_csv(tmp_path / "two.csv", [("a", 1), ("b", 2), ("b", 3)])
    status, out, err = run("--mechanism", "grr", "--data", two, "--epsilon", 2)
    assert status == 2 and "device 'b'" in err and "two.csv line 4" in err and out == ""


@pytest.mark.parametrize("extra, needle", [
    (["--domain", "10"], "--domain does not go with --data"),
    (["--dist", "uniform"], "--dist does not go with --data"),
    (["--set-size-dist", "geometric:3"], "--set-size-dist does not go with --data"),
])
def test_flags_that_do_not_go_with_data(tmp_path, run, extra, needle):
    path = write_csv(tmp_path / "a.csv", [("d1", "a"), ("d2", "b")])
    status, out, err = run("--protocol", "sampling-sh", "--data", path, "--epsilon", 2,
                           "--top", 1, *extra)
    assert status == 2 and needle in err and out == ""


@pytest.mark.parametrize("args, needle", [
    (["--protocol", "sampling-sh", "--top", "1", "--domain", "10"], "--users N is required"),
    (["--mechanism", "grr", "--users", "10"], "--domain N is required"),
    (["--mechanism", "grr", "--users", "10", "--domain", "8", "--set-size-dist", "fixed:2"],
     "--set-size-dist is for --protocol"),
    (["--protocol", "sampling-sh", "--top", "1", "--users", "10", "--domain", "8",
      "--set-size-dist", "poisson:2"], "set_size_dist"),
    (["--protocol", "cms", "--users", "10", "--domain", "8", "--repeat", "2"], "--repeat"),
])
def test_population_flag_errors(run, args, needle):
    status, out, err = run(*args, "--epsilon", 2)
    assert status == 2 and needle in err and out == "", err


def test_leading_zeros_keep_items_apart_as_strings(tmp_path):
    """'7' and '007' are different items (ZIP-like codes keep their zeros)."""
    data = datafile.load_item_csv(write_csv(tmp_path / "z.csv", [("a", "7"), ("b", "007"),
                                                                  ("a", "8")]))
    assert data.domain == 3 and sorted(data.labels) == ["007", "7", "8"]


@pytest.mark.parametrize("raw, field", [
    (b'device,item\nd1,"unterminated\nd2,x\n', "row"),
    (b"device,item\nd1,caf\xe9\n", "encoding"),
    (b"device,item\nd1,a\x00b\n", "row"),
])
def test_broken_csv_bytes_are_typed_errors_with_the_file(tmp_path, raw, field):
    path = tmp_path / "bad.csv"
    path.write_bytes(raw)
    with pytest.raises(DataFileError) as err:
        datafile.load_item_csv(path)
    assert err.value.field == field and str(path) in str(err.value)
