"""The true strings of simulated devices in a `strings` campaign (protocol_spec/v2 §3.5, PEM):
a vocabulary and the probabilities devices draw it with, and each device's phase-1 key (the
prefix key of its group's level, from its id) -- the device face of mechanisms/pem.py, batched.

`--dist zipf:S[,WORDS[,LENGTH]]` (default zipf:1.1,200 and strings of max_len symbols):
`eval.pem_sim.zipf_strings`, random strings over a 27-symbol alphabet, drawn from a generator
seeded with the campaign id (public), so both phases' runs see the same vocabulary; or a FILE
with one `string [weight]` per line (weight 1 if absent; `#` starts a comment line).
"""
import math
import os

import numpy as np

from ..core import strings_domain
from ..core.errors import ConfigError
from ..core.protocols import pem as pem_protocol

DEFAULT_WORDS = 200


def _zipf(spec: str, doc: dict):
    head, _sep, rest = spec.partition(":")
    parts = [p for p in rest.split(",") if p]
    try:
        s = float(parts[0]) if parts else 1.1
        words = int(parts[1]) if len(parts) > 1 else DEFAULT_WORDS
        length = int(parts[2]) if len(parts) > 2 else int(doc["domain"]["max_len"])
    except ValueError:
        raise ConfigError("dist", "expected zipf:S[,WORDS[,LENGTH]], got %r" % spec) from None
    if head != "zipf" or not s > 0 or not 1 <= words <= 1 << 20 or not 1 <= length <= 64:
        raise ConfigError("dist", "a strings campaign draws zipf:S[,WORDS[,LENGTH]] (S > 0) or "
                          "a FILE of `string [weight]` lines, got %r" % spec)
    from ..eval.pem_sim import zipf_strings
    vocab_rng = np.random.default_rng(int(doc["campaign_id"]))
    return zipf_strings(words, length, s, vocab_rng)


def _strings_file(path: str):
    items, weights = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = line.rstrip("\r\n")
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            weight = 1.0
            head, _sep, tail = text.rpartition(" ")
            if head.strip():
                try:
                    weight, text = float(tail), head
                except ValueError:
                    pass
            if not (math.isfinite(weight) and weight >= 0):
                raise ConfigError("dist", "%s:%d: weight must be a number >= 0" % (path, lineno))
            items.append(text)
            weights.append(weight)
    w = np.asarray(weights, np.float64)
    if not items or w.sum() <= 0:
        raise ConfigError("dist", "%s gives no string a positive weight" % path)
    return items, w / w.sum()


class StringDistribution:
    """Strings (`items`), their codes and phase-2 keys (`keys`: strings_domain.code_key), and
    the probabilities devices draw them with (items.ItemDistribution's interface)."""

    def __init__(self, items, probs, max_len: int):
        self.max_len = int(max_len)
        self.items = list(items)
        self.codes = pem_protocol.encode_batch(self.items, self.max_len)
        self.keys = np.array([strings_domain.code_key(c.tobytes()) for c in self.codes], np.uint32)
        self.probs = np.asarray(probs, np.float64)

    def value(self, index):
        """A device's value as value.json holds it: the string."""
        return self.items[int(np.ravel(index)[0])]

    def add_counts(self, counts: dict, indices):
        """Add how many devices hold each string to `counts`."""
        for idx, c in zip(*np.unique(np.asarray(indices).ravel(), return_counts=True)):
            counts[self.items[int(idx)]] = counts.get(self.items[int(idx)], 0) + int(c)

    def phase1_keys(self, mech, device_ids, indices) -> np.ndarray:
        """key_λ of each device's string at its group's level (spec §3.5; C prefix kernel)."""
        groups = mech.groups_of(device_ids)
        out = np.zeros(len(device_ids), np.uint32)
        codes = self.codes[np.asarray(indices).ravel()]
        for i, bits in enumerate(mech.levels):
            rows = groups == i
            if rows.any():
                out[rows] = pem_protocol.prefix_keys(codes[rows], bits)
        return out


def string_distribution(dist, doc: dict) -> StringDistribution:
    """A strings campaign's devices' strings (module docstring)."""
    spec = dist or "zipf:1.1"
    if os.path.exists(spec):
        items, probs = _strings_file(spec)
    else:
        items, probs = _zipf(spec, doc)
    return StringDistribution(items, probs, doc["domain"]["max_len"])
