"""Mechanisms over an explicit domain of item keys: what GRR, OLH, FLH and OUE share.

`DomainMechanism` (client and parameters), batch plumbing for their C kernels, and the sketches:
`DomainSketch` (int64 counts plus, for a string domain, its keys) and `SupportSketch`, the
support-count sketch of a pure protocol (Wang, Blocki, Li, Jha, "Locally Differentially Private
Protocols for Frequency Estimation", USENIX Security 2017, §3; restated in [NH] =
Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Consistent and Accurate Frequency Oracles under Local Differential Privacy" (NDSS 2020) §2, Eq. 4-7).

Domain choice: an int domain is the keys 0..d-1 (the item index is the key). A string domain
is passed as `domain_keys=` (u32 item keys in domain order, no duplicates). The keys are kept
out of `describe()` / `config_params()` (they can be large and the config already carries the
domain); instead a sketch stores them as a state array, so they travel through
`serialize()` / `deserialize()`, and `merge` refuses sketches whose domains differ.
"""
import numpy as np

from .. import kernels, protocol
from ..errors import ConfigError, SketchMismatch
from .base import (W, IntStateSketch, Mechanism, Sketch, body_ptr, check_words,
                   report_array, run_chunks)


def item_keys(keys) -> np.ndarray:
    """Item keys (ints, or str items hashed per spec §1) as a 1-D int64 array."""
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        return keys.astype(np.int64, copy=False).ravel()
    if isinstance(keys, (int, str, np.integer)):
        keys = [keys]
    out = []
    for k in keys:
        if isinstance(k, (str, bytes)):
            out.append(protocol.item_key(k))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            out.append(int(k))
        else:
            raise TypeError("item key must be int or str, got %r" % (k,))
    return np.array(out, dtype=np.int64)


def u32_keys(keys) -> np.ndarray:
    """`item_keys` as uint32 (ValueError for a key outside [0, 2^32))."""
    keys = item_keys(keys)
    if keys.size and (keys.min() < 0 or keys.max() >= W):
        raise ConfigError("items", "item keys must be u32")
    return keys.astype(np.uint32)


class DomainMechanism(Mechanism):
    """A mechanism whose aggregator estimates over a fixed domain of item keys (optionally
    explicit: `domain_keys`, the u32 keys in domain order)."""

    def __init__(self, eps_milli: int, domain_size: int, domain_keys=None, **kw):
        super().__init__(eps_milli, domain_size, **kw)
        self._domain_keys = None
        self._sorted = None
        if domain_keys is not None:
            keys = item_keys(domain_keys)
            if keys.size != self.domain_size:
                raise ValueError("domain_keys has %d keys, domain_size is %d"
                                 % (keys.size, self.domain_size))
            if keys.size and (keys.min() < 0 or keys.max() >= W):
                raise ConfigError("domain_keys", "domain keys must be u32")
            order = np.argsort(keys, kind="stable")
            dup = np.flatnonzero(np.diff(keys[order]) == 0)
            if dup.size:
                raise ConfigError("domain_keys", "domain key %d appears twice" % keys[order][dup[0]])
            self._domain_keys = keys.astype(np.uint32)
            self._sorted = (keys[order], order)

    @property
    def explicit_domain(self) -> bool:
        return self._domain_keys is not None

    def domain_key_array(self) -> np.ndarray:
        """The domain's item keys in domain order (u32)."""
        if self._domain_keys is None:
            return np.arange(self.domain_size, dtype=np.uint32)
        return self._domain_keys

    def with_domain_keys(self, domain_keys):
        """The same mechanism over an explicit key domain."""
        return type(self)(self.eps_milli, self.domain_size, salt=self.salt,
                          campaign_id=self.campaign_id, phase=self.phase,
                          domain_keys=domain_keys, **self.params)

    def key_indices(self, keys) -> np.ndarray:
        """Domain index of every key; ValueError naming the first key not in the domain."""
        keys = item_keys(keys)
        if self._domain_keys is None:
            bad = (keys < 0) | (keys >= self.domain_size)
            idx = keys
        else:
            sorted_keys, order = self._sorted
            pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
            bad = sorted_keys[pos] != keys
            idx = order[pos]
        if bad.any():
            raise ConfigError("item", "item key %d is not in the domain of %d items"
                              % (keys[np.flatnonzero(bad)[0]], self.domain_size))
        return idx.astype(np.int64)

    def key_index(self, value) -> int:
        return int(self.key_indices([protocol.item_key(value)])[0])

    def check_words(self, words) -> list:
        return check_words(words, self.random_words, self.name)

    def run_batch(self, inputs: np.ndarray, rng, seq_start: int, kernel) -> np.ndarray:
        """Reports for every row of `inputs` (u32): words from `rng` in chunks, then
        `kernel(inputs_chunk, n, words_chunk, out_ptr, stride)` writes the bodies."""
        out = report_array(self, inputs.shape[0], seq_start)

        def write(start, stop, words):
            chunk = np.ascontiguousarray(inputs[start:stop], dtype=np.uint32)
            if kernel(kernels.ptr(chunk), stop - start, kernels.ptr(words), body_ptr(out, start),
                      out.shape[1]) != 0:
                raise ValueError("%s kernel rejected its input" % self.name)

        run_chunks(self, rng, inputs.shape[0], write)
        return out

    def one_report(self, inputs, words, seq: int, kernel) -> bytes:
        """One report through the batch kernel (batch of one)."""
        arr = np.array([inputs], dtype=np.uint32)
        w = np.array(self.check_words(words), dtype=np.uint32)
        out = np.zeros(self.body_size, np.uint8)
        if kernel(kernels.ptr(arr), 1, kernels.ptr(w), kernels.byte_ptr(out), self.body_size) != 0:
            raise ValueError("%s kernel rejected its input" % self.name)
        return self.header(seq) + out.tobytes()

    def support_pq(self):
        """(p*, q*) as exact Fractions: P(report supports x | x) and P(supports v | x != v)."""
        raise NotImplementedError

    def item_variances(self, n: int, freqs) -> np.ndarray:
        """Exact variance of each item's estimated fraction, for true fractions `freqs`:
        (f p(1-p) + (1-f) q(1-q)) / (n (p-q)^2) with the realised p*, q* ([NH] Eq. 5;
        Wang et al. 2017 §3, the pure-protocol variance; at f = 0 [NH] Eq. 7)."""
        p, q = (float(v) for v in self.support_pq())
        f = np.asarray(freqs, dtype=np.float64).ravel()
        return (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)


class DomainSketch(IntStateSketch):
    """Sketch with int64 count arrays (`STATE`) and, for a string domain, its keys."""

    def _state(self) -> dict:
        state = super()._state()
        if self.mechanism.explicit_domain:
            state["domain_keys"] = self.mechanism.domain_key_array().copy()
        return state

    def _set_state(self, state: dict):
        state = dict(state)
        keys = state.pop("domain_keys", None)
        if keys is not None:
            self.mechanism = self.mechanism.with_domain_keys(keys)
        super()._set_state(state)

    def compatible(self, other: Sketch):
        super().compatible(other)
        a, b = self.mechanism, other.mechanism
        differ = a.explicit_domain != b.explicit_domain or (
            a.explicit_domain and not np.array_equal(a.domain_key_array(), b.domain_key_array()))
        if differ:
            raise SketchMismatch("domain_keys", "sketches are over different domains")

    def support_estimate(self, support) -> np.ndarray:
        """Unbiased counts from support counts: (support - n q*) / (p* - q*) ([NH] Eq. 4 form,
        Wang et al. 2017 §3)."""
        p, q = (float(v) for v in self.mechanism.support_pq())
        return (support - self.n * q) / (p - q)


class SupportSketch(DomainSketch):
    """Pure-protocol sketch: `support[v]` = reports supporting domain item v."""

    STATE = ("support",)

    def __init__(self, mechanism: DomainMechanism):
        super().__init__(mechanism)
        self.support = np.zeros(mechanism.domain_size, np.int64)

    def estimate(self, keys) -> np.ndarray:
        return self.support_estimate(self.support[self.mechanism.key_indices(keys)])

    def estimate_all(self) -> np.ndarray:
        """Estimated counts of every domain item, in domain order."""
        return self.support_estimate(self.support)
