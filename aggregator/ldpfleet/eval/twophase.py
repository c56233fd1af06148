"""What the two-phase protocol simulations share (ldpminer_sim, svim_sim): users' item sets as an
(n, l) array or KeySets, taken chunk by chunk through a mechanism's C kernels, and the `Answer`
a simulated run gives (Qin et al., "Heavy Hitter Estimation over Set-Valued Data with Local
Differential Privacy", CCS 2016 §5.1.3 scores it; Wang, Li, Jha, "Locally Differentially Private
Frequent Itemset Mining", S&P 2018 §5 for svim)."""
from collections import namedtuple

import numpy as np

from ..core.mechanisms.cms import as_keys
from ..core.mechanisms.sh import KeySets, derived_sets
from ..core.protocols.ldpminer import frequencies, trim_sets  # noqa: F401 (frequencies: shared)

CHUNK_USERS = 1 << 16
SIM_SALT_BITS = 32


Answer = namedtuple("Answer", "top_index top_freq order estimates")
Answer.__doc__ = ("A simulated run's answer over an int domain 0..d-1: the top-k indices and "
                  "frequencies; `order`, the whole domain ranked (for NDCG); `estimates`, the "
                  "collector's best frequency estimate of every item (final estimate for "
                  "candidates, phase-1 estimate otherwise).")


def users_of(sets) -> int:
    """Number of users of an (n, l) array or of KeySets."""
    return sets.offsets.size - 1 if isinstance(sets, KeySets) else int(sets.shape[0])


def chunk_of(sets, start: int, stop: int):
    """Users start..stop-1: rows of an (n, l) array, or KeySets with rebased offsets."""
    if not isinstance(sets, KeySets):
        return as_keys(sets[start:stop]).reshape(-1, sets.shape[1])
    off = sets.offsets[start:stop + 1]
    return derived_sets(sets, sets.keys[int(off[0]):int(off[-1])], off - off[0])


def set_sizes(sets) -> np.ndarray:
    """Items per user (int64)."""
    if isinstance(sets, KeySets):
        return np.diff(sets.offsets.astype(np.int64))
    return np.full(users_of(sets), sets.shape[1], np.int64)


def default_l(sets) -> int:
    """The padded set length l when none is given: an (n, l) array's width; for variable-size
    sets the 90th percentile of the sizes, at least 1 (LDPMiner §3: longer sets are sampled)."""
    if not isinstance(sets, KeySets):
        return int(sets.shape[1])
    sizes = set_sizes(sets)
    return max(1, int(np.percentile(sizes, 90, method="higher"))) if sizes.size else 1


def run_phase(mech, sets, rng, candidates=None):
    """All users through `mech` (C kernels), chunk by chunk; phase-2 sets trimmed first.
    `sets`: an (n, l) array or KeySets (variable sizes, empty sets report the dummy)."""
    sketch = mech.new_sketch()
    n = users_of(sets)
    for start in range(0, n, CHUNK_USERS):
        chunk = chunk_of(sets, start, min(n, start + CHUNK_USERS))
        values = chunk if candidates is None else trim_sets(chunk, candidates)
        sketch.update(mech.perturb_batch(values, rng))
    return sketch


def ranked(first, rest_scores, rest_index):
    """Whole-domain ranking: `first` (already ordered), then `rest_index` by `rest_scores`."""
    tail = rest_index[np.argsort(-rest_scores, kind="stable")]
    return np.concatenate([first, tail])
