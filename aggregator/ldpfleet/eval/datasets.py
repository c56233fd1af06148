"""True-value generators for simulations and benchmarks (aggregator side only).

A distribution spec is a short string:

* ``zipf:S`` — finite Zipf over the d items: P(i) proportional to 1/(i+1)^S. Items are **not**
  shuffled: item 0 is the most frequent, item d-1 the rarest (rank = item index).
* ``uniform`` — P(i) = 1/d.
* ``normal:MU,SIGMA`` — a normal density discretised over the domain: P(i) proportional to
  Phi((i+0.5-MU)/SIGMA) - Phi((i-0.5-MU)/SIGMA), MU and SIGMA in item-index units, renormalised
  over 0..d-1 (the mass outside the domain is dropped).
* ``laplace:MU,B`` — the same with a Laplace(MU, B) distribution.

Values are item indices 0..d-1, which are also the item keys of an integer domain (spec §1).
Everything is drawn from a caller-provided numpy Generator, so a fixed seed reproduces a run.
"""
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..core.errors import ConfigError


@dataclass(frozen=True)
class Population:
    """A simulated campaign's public setting: ε, `users` devices holding items of `dist` over
    the int domain 0..domain-1, drawn from `seed` (the same seed: the same dataset for every
    protocol, so comparisons are paired)."""

    eps: float
    users: int
    domain: int
    dist: str
    seed: int

    def generators(self, repeat: int = 0):
        """(data rng, noise rng): independent streams spawned from the seed. Repeat r >= 1 of
        a `--repeat` run uses the streams of the seed's child r + 1 (repeat 0: the seed's own,
        so a single run and the first repeat agree)."""
        seq = np.random.SeedSequence(self.seed)
        if repeat:
            seq = np.random.SeedSequence(self.seed, spawn_key=(int(repeat) + 1,))
        data_seq, noise_seq = seq.spawn(2)
        return np.random.default_rng(data_seq), np.random.default_rng(noise_seq)


DIST_HELP = "zipf:S | uniform | normal:MU,SIGMA | laplace:MU,B"


@dataclass(frozen=True)
class Distribution:
    """A parsed distribution spec: `kind` and its numeric parameters."""

    kind: str
    params: tuple

    def __str__(self):
        if not self.params:
            return self.kind
        return "%s:%s" % (self.kind, ",".join("%g" % p for p in self.params))


_ARITY = {"zipf": 1, "uniform": 0, "normal": 2, "laplace": 2}


def parse_dist(spec) -> Distribution:
    """Parse a spec string (see the module docstring); ConfigError (field "dist") says what is wrong."""
    if isinstance(spec, Distribution):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("dist", "must be one of %s, got %r" % (DIST_HELP, spec))
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in _ARITY:
        raise ConfigError("dist", "unknown distribution %r (expected %s)" % (spec, DIST_HELP))
    parts = [p for p in rest.split(",")] if rest else []
    if len(parts) != _ARITY[kind]:
        raise ConfigError("dist", "distribution %r takes %d parameter(s): %s"
                          % (kind, _ARITY[kind], DIST_HELP))
    try:
        params = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError("dist", "distribution %r has a non-numeric parameter" % spec) from None
    if not all(np.isfinite(params)):
        raise ConfigError("dist", "distribution %r has a non-finite parameter" % spec)
    if kind == "zipf" and params[0] < 0:
        raise ConfigError("dist", "zipf exponent S must be >= 0, got %g" % params[0])
    if kind in ("normal", "laplace") and params[1] <= 0:
        raise ConfigError("dist", "%s scale must be > 0, got %g" % (kind, params[1]))
    return Distribution(kind, params)


def probabilities(spec, domain_size: int) -> np.ndarray:
    """P(item = i) for i in 0..d-1 (float64, sums to 1)."""
    dist = parse_dist(spec)
    d = int(domain_size)
    if d < 1:
        raise ConfigError("domain", "must be >= 1, got %d" % d)
    idx = np.arange(d, dtype=np.float64)
    if dist.kind == "uniform":
        weights = np.ones(d)
    elif dist.kind == "zipf":
        weights = (idx + 1.0) ** -dist.params[0]
    else:
        mu, scale = dist.params
        law = stats.norm if dist.kind == "normal" else stats.laplace
        weights = law.cdf(idx + 0.5, loc=mu, scale=scale) - law.cdf(idx - 0.5, loc=mu, scale=scale)
    total = weights.sum()
    if not total > 0:
        raise ConfigError("dist", "distribution %s puts no mass on items 0..%d" % (dist, d - 1))
    return weights / total


def draw_values(n: int, domain_size: int, spec, rng: np.random.Generator) -> np.ndarray:
    """n i.i.d. item indices (uint32) from the distribution."""
    return draw_from(probabilities(spec, domain_size), n, rng)


def draw_from(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n i.i.d. item indices (uint32) with P(i) = p[i] (inverse CDF of one uniform each)."""
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    u = rng.random(int(n))
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(p) - 1).astype(np.uint32)


def true_counts(values: np.ndarray, domain_size: int) -> np.ndarray:
    """How many users hold each item (values may be (n,) items or (n, L) sets)."""
    return np.bincount(np.asarray(values, dtype=np.int64).ravel(), minlength=domain_size)[:domain_size]


def draw_sets(n: int, set_size: int, domain_size: int, spec, rng: np.random.Generator,
              max_rounds: int = 64) -> np.ndarray:
    """(n, L) uint32: every user's L distinct items from the distribution (`draw_sets_from`)."""
    L, d = int(set_size), int(domain_size)
    if L < 1 or L > d:
        raise ConfigError("set_size", "must be in [1, %d], got %d" % (d, L))
    p = probabilities(spec, d)
    if np.count_nonzero(p) < L:
        raise ConfigError("set_size", "distribution %s has fewer than %d items with mass"
                          % (parse_dist(spec), L))
    return draw_sets_from(p, n, L, rng, max_rounds)


def draw_sets_from(p: np.ndarray, n: int, set_size: int, rng: np.random.Generator,
                   max_rounds: int = 64) -> np.ndarray:
    """(n, L) uint32: every user's L distinct items, drawn one after another from P(i) = p[i]
    restricted to the items not yet chosen (successive sampling without replacement), by
    vectorised rejection; a row still colliding after `max_rounds` redraws of one column draws
    that column from the renormalised remaining mass directly (same law). Needs at least L
    items with mass."""
    n, L, d = int(n), int(set_size), len(p)
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    out = np.empty((n, L), dtype=np.int64)

    def draw(count):
        return np.minimum(np.searchsorted(cdf, rng.random(count), side="right"), d - 1)

    for col in range(L):
        todo = np.arange(n)
        for _ in range(max_rounds):
            out[todo, col] = draw(todo.size)
            if col == 0:
                todo = todo[:0]
                break
            clash = (out[todo, :col] == out[todo, col:col + 1]).any(axis=1)
            todo = todo[clash]
            if todo.size == 0:
                break
        for row in todo:
            rest = np.ones(d, bool)
            rest[out[row, :col]] = False
            q = np.where(rest, p, 0.0)
            out[row, col] = rng.choice(d, p=q / q.sum())
    return out.astype(np.uint32)


# --- variable-size sets ------------------------------------------------------------------------

SIZES_HELP = "geometric:MEAN | fixed:L"


@dataclass(frozen=True)
class SetSizes:
    """A parsed set-size spec: ``geometric:MEAN`` (per-user size geometric on {1, 2, ...} with
    that mean, MEAN >= 1) or ``fixed:L``."""

    kind: str
    value: float

    def __str__(self):
        return "fixed:%d" % self.value if self.kind == "fixed" else "geometric:%g" % self.value


def parse_sizes(spec) -> SetSizes:
    """Parse a set-size spec; ConfigError (field "set_size_dist") says what is wrong."""
    if isinstance(spec, SetSizes):
        return spec
    kind, _, rest = str(spec).strip().partition(":")
    kind = kind.lower()
    try:
        value = int(rest) if kind == "fixed" else float(rest)
    except ValueError:
        value = None
    if kind not in ("geometric", "fixed") or value is None:
        raise ConfigError("set_size_dist", "expected %s, got %r" % (SIZES_HELP, spec))
    if not (np.isfinite(value) and value >= 1):
        raise ConfigError("set_size_dist", "%s needs a value >= 1, got %r" % (kind, rest))
    return SetSizes(kind, value)


def draw_sizes(n: int, sizes_spec, cap: int, rng: np.random.Generator) -> np.ndarray:
    """n per-user set sizes (int64) of the spec, capped at `cap` (fixed: ConfigError above)."""
    spec = parse_sizes(sizes_spec)
    if spec.kind == "fixed":
        if spec.value > cap:
            raise ConfigError("set_size_dist", "set size %d is larger than the %d items with mass"
                              % (spec.value, cap))
        return np.full(int(n), int(spec.value), np.int64)
    return np.minimum(rng.geometric(1.0 / spec.value, int(n)), cap).astype(np.int64)


def draw_variable_sets(n: int, sizes_spec, domain_size: int, spec, rng: np.random.Generator):
    """KeySets of n users' distinct items: sizes from `sizes_spec` (`parse_sizes`, capped at
    the number of items with mass), each size group drawn by `draw_sets_from` (successive
    sampling without replacement), so the cost is O(total items); users stay in the i.i.d.
    order of their sizes (a random order)."""
    from ..core.mechanisms.sh import KeySets
    p = probabilities(spec, int(domain_size))
    sizes = draw_sizes(n, sizes_spec, int(np.count_nonzero(p)), rng)
    offsets = np.zeros(sizes.size + 1, np.uint64)
    np.cumsum(sizes, out=offsets[1:])
    keys = np.empty(int(offsets[-1]), np.uint32)
    starts = offsets[:-1].astype(np.int64)
    for s in np.unique(sizes):
        users = np.flatnonzero(sizes == s)
        rows = draw_sets_from(p, users.size, int(s), rng)
        keys[(starts[users][:, None] + np.arange(s)).ravel()] = rows.ravel()
    return KeySets(keys, offsets)
