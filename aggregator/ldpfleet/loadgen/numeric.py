"""The simulated fleet's readings for a numeric campaign (spec §1.1): values drawn from a
distribution over each metric's range, the grid points the devices report, and the true
distribution the run summarises (for the operator to compare with `estimate`).

Distributions (`--dist`): `beta:A,B` (Beta(A, B) scaled into [lo, hi]; the default, Beta(2, 5)
as in Li et al.'s Square Wave evaluation), `uniform`, `normal:MU,SD` (in the metric's units,
clipped by the devices like any reading), `constant:V`. hm's several metrics draw independently
from the same spec (scaled into each metric's own range)."""
import numpy as np

from ..core.errors import ConfigError
from ..core.mechanisms.numeric import NumericDomain

DEFAULT_DIST = "beta:2,5"


def _params(spec: str, count: int) -> list:
    head, _, rest = spec.partition(":")
    try:
        values = [float(v) for v in rest.split(",")] if rest else []
    except ValueError:
        values = None
    if values is None or len(values) != count:
        raise ConfigError("dist", "%s takes %d number(s), got %r" % (head, count, spec))
    if not all(np.isfinite(values)):
        raise ConfigError("dist", "%s takes finite numbers, got %r" % (head, spec))
    return values


class NumericDistribution:
    """Readings over a numeric domain: `draw(n, rng)` -> (n,) or (n, d) readings; the
    ItemDistribution interface the fleet uses (`value`, `add_counts`, `grid`)."""

    numeric = True

    def __init__(self, spec: str, domain: dict):
        self.spec = spec or DEFAULT_DIST
        self.domain = NumericDomain(domain)
        self.metrics = len(self.domain.metrics)
        self.kind = self.spec.partition(":")[0]
        if self.kind == "beta":
            self.args = _params(self.spec, 2)
            if min(self.args) <= 0:
                raise ConfigError("dist", "beta:A,B needs A, B > 0")
        elif self.kind == "normal":
            self.args = _params(self.spec, 2)
            if self.args[1] <= 0:
                raise ConfigError("dist", "normal:MU,SD needs SD > 0")
        elif self.kind == "constant":
            self.args = _params(self.spec, 1)
        elif self.spec == "uniform":
            self.args = []
        else:
            raise ConfigError("dist", "a numeric campaign's readings come from beta:A,B, uniform, "
                              "normal:MU,SD or constant:V, got %r" % self.spec)

    def _one(self, n: int, metric: int, rng) -> np.ndarray:
        lo, hi, dec = self.domain.metrics[metric]
        low, high = lo / 10 ** dec, hi / 10 ** dec
        if self.kind == "beta":
            return low + (high - low) * rng.beta(self.args[0], self.args[1], size=n)
        if self.kind == "normal":
            return rng.normal(self.args[0], self.args[1], size=n)
        if self.kind == "constant":
            return np.full(n, self.args[0])
        return rng.uniform(low, high, size=n)

    def draw(self, n: int, rng) -> np.ndarray:
        """(n,) readings, or (n, d) for a domain of d metrics (hm)."""
        cols = [self._one(int(n), a, rng) for a in range(self.metrics)]
        return cols[0] if self.metrics == 1 else np.stack(cols, axis=1)

    def grid(self, readings) -> np.ndarray:
        """The grid points the devices report (spec §1.1, the same float64 steps)."""
        r = np.asarray(readings, dtype=np.float64)
        if self.metrics == 1:
            return self.domain.grid_points(r).astype(np.uint32)
        return np.stack([self.domain.grid_points(r[:, a], a) for a in range(self.metrics)],
                        axis=1).astype(np.uint32)

    def value(self, reading):
        """A device's value as value.json holds it: the reading (a list for several metrics)."""
        r = np.asarray(reading, dtype=np.float64)
        return [float(v) for v in r] if r.ndim else float(r)

    def add_counts(self, counts: dict, readings):
        """How many devices hold each grid value: key "<value>" ("<metric>:<value>" with
        several metrics), the reading as the device reports it (its grid point's value)."""
        x = np.atleast_1d(self.grid(np.atleast_1d(readings) if self.metrics == 1
                                    else np.atleast_2d(readings)))
        x = x.reshape(-1, self.metrics)
        for a in range(self.metrics):
            for v, c in zip(*np.unique(x[:, a], return_counts=True)):
                key = "%.10g" % float(self.domain.value(int(v), a))
                key = key if self.metrics == 1 else "%d:%s" % (a, key)
                counts[key] = counts.get(key, 0) + int(c)
