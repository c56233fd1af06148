"""Set-valued inputs (spec §3, LDPMiner §3): s distinct item keys, padded or sampled to L;
in LDPMiner's phase 2 (§4.4) the set is first trimmed to the signed candidate list."""
from micropython import const

from .errors import ConfigError

MAX_CANDIDATES = const(65536)


def distinct_keys(keys):
    """The set's keys without repeats, first occurrence order kept."""
    out = []
    for k in keys:
        if k not in out:
            out.append(k)
    return out


def candidate_index(cands):
    """{key: position} of a phase-2 candidate list (1..65536 distinct u32 keys), else
    ConfigError("candidates") -- the aggregator's rules (ldpfleet.mechanisms.srappor)."""
    if not isinstance(cands, list) or not 1 <= len(cands) <= MAX_CANDIDATES:
        raise ConfigError("candidates", "need 1..%d candidate keys" % MAX_CANDIDATES)
    index = {}
    for c, key in enumerate(cands):
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key <= 0xFFFFFFFF:
            raise ConfigError("candidates", "candidate keys must be u32")
        if key in index:
            raise ConfigError("candidates", "candidate keys must be distinct")
        index[key] = c
    return index


def trim(keys, index):
    """LDPMiner §4.4's phase-2 input: the set's distinct keys that are candidates, in the
    set's own order (ldpfleet.protocols.ldpminer.trim_to_candidates)."""
    return [k for k in distinct_keys(keys) if k in index]
