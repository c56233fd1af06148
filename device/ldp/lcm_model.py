"""LDPLCM frequency model on the device (Zhang, Lin, Yin, "Local Differentially Private Frequency Estimation based on Learned Sketches" Alg. 2
line 4): decides whether the device's item is high-frequent, g(x) >= P, with integers only.

The model is the "model" object of the phase-2 message (format "ldplcm-gbr" version 1, written
by aggregator/ldpfleet/core/protocols/ldplcm.py, which documents it): boosted trees flattened in
preorder, node i a leaf iff right[i] == -1 (split[i] is then its value), else left child i + 1
when x <= split[i] and right[i] otherwise; g(x) = init + the reached leaf of every tree, all in
fixed point; x is the item's domain index. `LcmModel(doc)` applies the aggregator's validity
rules (ConfigError("model", ...)), so every walk moves forward inside its tree and ends at a
leaf, and no partial sum leaves [-2^30, 2^30): `evaluate` allocates nothing and gives the same
integer as the aggregator's `evaluate_int`.
"""
from array import array

from .errors import ConfigError

FORMAT = "ldplcm-gbr"
VERSION = 1
SMALL_INT = 1 << 30
INT32 = 1 << 31
MAX_NODES = 65536
MAX_TREES = 4096
MAX_SCALE_BITS = 30


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _int_list(doc, name, limit):
    v = doc.get(name)
    if not isinstance(v, list) or not 1 <= len(v) <= limit:
        raise ConfigError("model", "%s must be a list of 1..%d integers" % (name, limit))
    for x in v:
        if not _is_int(x):
            raise ConfigError("model", "%s must be a list of 1..%d integers" % (name, limit))
    return v


class LcmModel:
    """A validated model: `evaluate(x)` -> fixed-point g(x), `is_high(x)` -> g(x) >= P."""

    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise ConfigError("model", "must be an object")
        if doc.get("format") != FORMAT or not _is_int(doc.get("version")) \
                or doc.get("version") != VERSION:
            raise ConfigError("model", "format must be %r version %d" % (FORMAT, VERSION))
        s, init, boundary = doc.get("scale_bits"), doc.get("init"), doc.get("boundary")
        if not _is_int(s) or not 0 <= s <= MAX_SCALE_BITS:
            raise ConfigError("model", "scale_bits must be an integer in [0, %d]" % MAX_SCALE_BITS)
        if not _is_int(init) or not _is_int(boundary) or not -SMALL_INT <= boundary < SMALL_INT:
            raise ConfigError("model", "init and boundary must be integers, boundary in [-2^30, 2^30)")
        roots = _int_list(doc, "roots", MAX_TREES)
        split = _int_list(doc, "split", MAX_NODES)
        right = _int_list(doc, "right", MAX_NODES)
        n = len(split)
        if len(right) != n:
            raise ConfigError("model", "split and right must have the same length")
        if roots[0] != 0 or roots[-1] >= n:
            raise ConfigError("model", "roots must rise from 0 and stay below the node count")
        for t in range(1, len(roots)):
            if roots[t] <= roots[t - 1]:
                raise ConfigError("model", "roots must rise from 0 and stay below the node count")
        bound = abs(init)
        for t in range(len(roots)):
            start = roots[t]
            end = roots[t + 1] if t + 1 < len(roots) else n
            largest = -1
            for i in range(start, end):
                v, r = split[i], right[i]
                if not -INT32 <= v < INT32:
                    raise ConfigError("model", "split[%d] does not fit int32" % i)
                if r == -1:
                    if abs(v) > largest:
                        largest = abs(v)
                elif not (i + 1 < r < end):
                    raise ConfigError("model", "right[%d] = %d is not inside tree (%d, %d)"
                                      % (i, r, i + 1, end))
            if largest < 0:
                raise ConfigError("model", "tree at %d has no leaf" % start)
            bound += largest
        if bound > SMALL_INT - 2:
            raise ConfigError("model", "|init| + sum of the largest leaves exceeds 2^30 - 2")
        self.scale_bits = s
        self.init = init
        self.boundary = boundary
        self.trees = len(roots)
        self.roots = array("i", roots)
        self.split = array("i", split)
        self.right = array("i", right)
        # depth D_t of every tree (ldplcm-model.md "Constant steps"): children come after their
        # parent in preorder, so one backward pass gives every node's height
        height = array("i", [0] * n)
        for i in range(n - 1, -1, -1):
            r = right[i]
            if r >= 0:
                a, b = height[i + 1], height[r]
                height[i] = 1 + (a if a > b else b)
        self.depths = array("i", [height[r] for r in roots])

    def evaluate(self, x):
        """g(x) in fixed point (x: the item's domain index, ⊥ = d). Every tree is walked for
        its full depth D_t whatever x is (spec §7.1): a step at a leaf stays there."""
        roots, split, right = self.roots, self.split, self.right  # (3 names: no tuple)
        depths = self.depths
        total = self.init
        t = 0
        while t < self.trees:
            i = roots[t]
            step = depths[t]
            while step > 0:  # (no range object: evaluation allocates nothing)
                r = right[i]
                nxt = i + 1 if x <= split[i] else r
                i = i if r < 0 else nxt
                step -= 1
            total += split[i]
            t += 1
        return total

    def is_high(self, x):
        """Alg. 2 line 4: high-frequent iff g(x) >= P (then the device sends all -1)."""
        return self.evaluate(x) >= self.boundary
