"""LDPLCM phase 2, the learned count-mean sketch (protocol_spec/v2 §3, id 9).

Zhang, Lin, Yin, "Local Differentially Private Frequency Estimation based on Learned
Sketches": client Alg. 2 (phase 2), estimator Alg. 4, Theorems 1-3. Phase 1 of an LDPLCM campaign is plain `cms`; training the frequency model g and
the boundary P is not done here (the model decides each user's `high` flag and supplies the
high items' predictions at estimate time).

Client: a low-frequent item is encoded exactly as CMS; a high-frequent one (g(d) >= P) as the
all -1 vector; row choice and flips are the same (same words, same T_flip).

Aggregator: the CMS state. For a low-frequent item (realised q, pi_j, gamma as in `cms`):
    S(d)  = sum_j X_j(d) / (k pi_j),   E S(d) = F(d) + gamma (n_low - F(d))   (Theorem 2)
    f^(d) = (S(d) - gamma n_low) / (1 - gamma)                               (Alg. 4, line 4)
with n_low = (1 - theta) n when theta (the high-frequent users' share) is given, or else
n_low estimated from the sketch itself: every low user contributes exactly one +1, so
n^_low = sum_j sum_c X_j(c) / (k pi_j) is unbiased; the resulting estimator needs no theta and
has slightly lower variance (its flip noise is reduced by (1-gamma)^2 + (m-1) gamma^2 = 1 - 1/m).
"""
import numpy as np

from ..errors import ConfigError
from .base import as_keys
from .cms import CmsMechanism, CmsSketch, collision_probability, row_weights


def split_value(value):
    """(key, high) from a vector value: an int key (low-frequent) or {"key": .., "high": ..}."""
    if isinstance(value, dict):
        return int(as_keys(value["key"])[0]), bool(value.get("high", False))
    return int(as_keys(value)[0]), False


class LcmMechanism(CmsMechanism):
    """LDPLCM phase 2: `k` rows, width `m` (as CMS).

    perturb_batch(keys, rng, high=None): keys a 1-D array of u32 item keys, `high` a bool array
    of the same length (True: the model calls the user's item high-frequent)."""

    name = "lcm"
    default_phase = 2

    def reference_report(self, value, words, seq: int = 0) -> bytes:
        key, high = split_value(value)
        return self._reference(key, high, words, seq)

    def c_report(self, value, words, seq: int = 0) -> bytes:
        key, high = split_value(value)
        return self._c_one(key, high, words, seq)

    def perturb_batch(self, keys, rng, seq_start: int = 0, high=None) -> np.ndarray:
        return self._perturb(keys, rng, seq_start, high=high)

    def new_sketch(self) -> "LcmSketch":
        return LcmSketch(self)

    def variance(self, n: int, freqs=None, high=None, theta_known: bool = False) -> float:
        """Mean over the low-frequent items of item_variances(...)."""
        return float(np.nanmean(self.item_variances(n, freqs, high, theta_known)))

    def item_variances(self, n: int, freqs=None, high=None, theta_known: bool = False):
        """Exact variance of f^(d)/n for low-frequent d over random hashes, rows and flips
        (LDPLCM Theorem 3 / Lemmas 1-2 with realised q, pi_j, gamma; Sigma' = sum over the other
        low items of F'^2, n_low = n - high users):
          theta given:  Var S = n A V + F (A-1) + (n_low - F)(gamma A - gamma(1-gamma)/k - gamma^2)
                                + gamma(1-gamma)/k Sigma'
          self-normed:  Var   = n A V G + F (1-gamma)^2 (A-1) + (n_low - F) gamma(1-gamma)(A - 1/k)
                                + gamma(1-gamma)/k Sigma',   G = (1-gamma)^2 + (m-1) gamma^2
        both divided by (1-gamma)^2. `freqs`: true fractions; `high`: bool mask of the items the
        model calls high-frequent (their users encode all -1; their entries are NaN: Alg. 4
        answers them from the model)."""
        v, a, g = self._noise_terms()
        k, m = self.k, self.m
        if freqs is None:
            f, mask, sq, low_share = np.zeros(1), np.zeros(1, bool), 0.0, 1.0
        else:
            f = np.asarray(freqs, np.float64).ravel()
            mask = np.zeros(f.size, bool) if high is None else np.asarray(high, bool).ravel()
            if mask.shape != f.shape:
                raise ValueError("high has %d entries for %d freqs" % (mask.size, f.size))
            low_share = 1.0 - float(np.sum(f[mask]))
            sq = float(np.sum(f[~mask] ** 2))
        n_low, big_f = n * low_share, n * f
        others = g * (1 - g) / k * n * n * (sq - f * f)
        if theta_known:
            var = (n * a * v + big_f * (a - 1)
                   + (n_low - big_f) * (g * a - g * (1 - g) / k - g * g) + others)
        else:
            spread = (1 - g) ** 2 + (m - 1) * g * g
            var = (n * a * v * spread + big_f * (1 - g) ** 2 * (a - 1)
                   + (n_low - big_f) * g * (1 - g) * (a - 1.0 / k) + others)
        return np.where(mask, np.nan, var / (1 - g) ** 2 / (n * n))


class LcmSketch(CmsSketch):
    """The CMS state; estimate() is LDPLCM Alg. 4."""

    def low_users(self) -> float:
        """n^_low: unbiased estimate of the users that encoded a low-frequent item."""
        mech = self.mechanism
        q = mech.flip_probability
        rows = self.ones.sum(axis=1) - q * mech.m * self.row_counts
        return float(np.dot(row_weights(mech.k), rows)) / (1 - 2 * q)

    def estimate(self, keys, theta=None, high_mask=None, high_counts=None) -> np.ndarray:
        """Estimated counts (float64) for `keys`.

        theta: share of this phase's users whose item is high-frequent (Alg. 4's theta); None
        (default) estimates the low users from the sketch instead. high_mask: bool per key,
        True for keys the model calls high-frequent; those get `high_counts` (the model's
        predictions g(d) as counts, Alg. 4 line 2) or NaN when none are given."""
        mech = self.mechanism
        g = collision_probability(mech.m)
        if theta is None:
            n_low = self.low_users()
        else:
            if not 0.0 <= float(theta) <= 1.0:
                raise ConfigError("theta", "must be in [0, 1], got %r" % (theta,))
            n_low = (1.0 - float(theta)) * self.n
        est = (self.row_sums(keys) - g * n_low) / (1 - g)
        if high_mask is not None:
            high_mask = np.asarray(high_mask, bool).ravel()
            if high_mask.shape != est.shape:
                raise ValueError("high_mask has %d entries for %d keys"
                                 % (high_mask.size, est.size))
            fill = np.nan if high_counts is None else np.asarray(high_counts, np.float64).ravel()
            est = np.where(high_mask, fill, est)
        return est


MECHANISM = LcmMechanism
