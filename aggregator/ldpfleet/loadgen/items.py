"""The devices' true items: a distribution over the campaign's domain (a `datasets` spec or
a weights file) and the draws from it (`datasets.draw_from` / `draw_sets_from`)."""
import math
import os
from dataclasses import dataclass

import numpy as np

from ..core import config as campaign_config
from ..eval import datasets
from ..core.errors import ConfigError

MAX_SIMULATED_DOMAIN = 1 << 24


@dataclass
class ItemDistribution:
    """Domain items (as the config lists them), their keys, and the probabilities devices
    draw them with."""

    items: list
    keys: np.ndarray
    probs: np.ndarray

    def value(self, index):
        """A device's value as value.json holds it: the item, or a list of items (a set)."""
        if np.ndim(index):
            return [self.items[int(i)] for i in index]
        return self.items[int(index)]

    def add_counts(self, counts: dict, indices):
        """Add how many devices hold each item (`indices`: items or sets) to `counts`."""
        for idx, c in zip(*np.unique(np.asarray(indices).ravel(), return_counts=True)):
            item = self.items[int(idx)]
            counts[item] = counts.get(item, 0) + int(c)


def _weights_file(path: str, items, domain_type: str) -> np.ndarray:
    """Weights of a FILE with one `item [weight]` per line (weight 1 if absent; `#` starts a
    comment line; an item may hold spaces; items outside the domain are refused)."""
    weights = np.zeros(len(items))
    if domain_type == "str":
        index = {item: i for i, item in enumerate(items)}.get
    else:
        def index(text):
            return int(text) if text.isdigit() and int(text) < len(items) else None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            i, weight = index(text), 1.0
            if i is None and len(text.split()) > 1:
                head, tail = text.rsplit(None, 1)
                i = index(head.strip())
                try:
                    weight = float(tail)
                except ValueError:
                    i = None
            if i is None:
                raise ConfigError("dist", "%s:%d: %r is not an item of the campaign's domain "
                                  "(optionally followed by a weight)" % (path, lineno, text))
            if not (math.isfinite(weight) and weight >= 0):
                raise ConfigError("dist", "%s:%d: weight must be a number >= 0" % (path, lineno))
            weights[i] += weight
    if weights.sum() <= 0:
        raise ConfigError("dist", "%s gives no item a positive weight" % path)
    return weights


def item_distribution(dist: str, doc: dict) -> ItemDistribution:
    """`zipf:S` (or any `datasets` spec) over the domain in config order, or a FILE of
    `item [weight]` lines (`_weights_file`); a numeric campaign's readings
    (numeric.NumericDistribution: `beta:A,B`, ...). None: zipf:1.1, numeric beta:2,5."""
    domain = doc["domain"]
    if domain["type"] in campaign_config.NUMERIC_DOMAINS:
        from .numeric import NumericDistribution
        return NumericDistribution(dist, domain)
    if domain["type"] == "strings":  # strings nobody listed (spec §3.5)
        from .strings import string_distribution
        return string_distribution(dist, doc)
    dist = dist or "zipf:1.1"
    if domain["type"] == "int":
        if domain["size"] > MAX_SIMULATED_DOMAIN:
            raise ConfigError("domain.size", "the fleet draws from a table over the whole domain; "
                              "%d items is above its limit of %d" % (domain["size"], MAX_SIMULATED_DOMAIN))
        items = range(domain["size"])
        keys = np.arange(domain["size"], dtype=np.uint32)
    else:
        items = list(domain["items"])
        keys = np.asarray(campaign_config.domain_keys(doc), dtype=np.uint32)
    if os.path.exists(dist):
        weights = _weights_file(dist, items, domain["type"])
        probs = weights / weights.sum()
    else:
        probs = datasets.probabilities(dist, len(items))
    return ItemDistribution(items, keys, probs)


def campaign_set_size(doc: dict) -> int:
    """The set length devices of a set-valued campaign hold, as its signed config carries it:
    the largest `l` of its phases and of phase 2's fallback (LDPMiner: phase 1's l; svim: its
    phase 1 samples one item, phase 2 runs at min(l, k_max), the fallback at the declared l)."""
    phases = list(doc["phases"]) + [p["fallback"] for p in doc["phases"] if p.get("fallback")]
    return max([int(p.get("params", {}).get("l", 1)) for p in phases] + [1])


def draw_indices(n: int, dist: ItemDistribution, rng: np.random.Generator, set_size: int = 0):
    """(n,) item indices, or (n, set_size) distinct indices per device for set-valued phases
    (`datasets.draw_sets_from`: successive sampling without replacement); a numeric
    campaign's readings ((n,) or (n, d) floats)."""
    if getattr(dist, "numeric", False):
        return dist.draw(n, rng)
    if not set_size:
        return datasets.draw_from(dist.probs, n, rng)
    with_mass = int(np.count_nonzero(dist.probs))
    if not 1 <= set_size <= with_mass:
        raise ConfigError("set_size", "need 1 <= set size <= %d items with mass, got %d"
                          % (with_mass, set_size))
    return datasets.draw_sets_from(dist.probs, n, set_size, rng)
