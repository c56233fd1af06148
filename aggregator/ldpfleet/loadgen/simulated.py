"""Simulated CPython devices: true items drawn aggregator-side, reports made in batches by
the mechanism's C kernels (`perturb_batch`); schedule.py publishes them over one connection."""
import numpy as np

from ..core.protocols.ldplcm import reports_in_phase
from .campaign import CampaignView
from .items import ItemDistribution, draw_indices

BATCH_DEVICES = 1 << 14


def simulated_device_ids(n: int, prefix: str) -> list:
    return ["%s-%d" % (prefix, i) for i in range(n)]


def _lcm_high(view: CampaignView, mech, indices) -> dict:
    """LDPLCM phase 2 (Alg. 2 line 4): each device evaluates the phase-2 model on its item's
    domain index; high-frequent items are encoded as the all -1 vector."""
    if mech.name != "lcm" or view.phase2 is None or "model" not in view.phase2:
        return {}
    from ..core.protocols import ldplcm
    return {"high": ldplcm.high_mask(ldplcm.check_model(view.phase2["model"]), indices)}


def _phase2_sets(view: CampaignView, mech, keys):
    """LDPMiner phase 2 (§4.4): a device's set trimmed to the candidates (KeySets)."""
    if not mech.set_valued or view.phase2 is None or "candidates" not in view.phase2:
        return keys
    from ..core.protocols import ldpminer
    return ldpminer.trim_sets(keys, view.phase2["candidates"])


def _shc_memos(view: CampaignView, dist: ItemDistribution, device_ids: list, chosen,
               all_indices, rng):
    """`shc` phase 2 (spec §3.1): a simulated device re-reports from what it kept in phase 1,
    (t, y1, x). The load generator keeps no state between its runs, so it replays phase 1
    exactly as the phase-1 run made it -- the same --seed, devices and chunks draw the same
    items and words -- and keeps every device's memo (6 bytes) before phase 2 draws any word.
    A run with another seed than phase 1's sends phase-2 reports of other memos: valid
    reports, but not those devices' (the load generator's own limit, not the protocol's)."""
    from ..core import config as campaign_config
    from ..core.mechanisms.shc import ShcMemo, memo_from_reports
    if not np.array_equal(np.flatnonzero(reports_in_phase(device_ids, view.config, 1)), chosen):
        raise ValueError("shc phase 2: the devices of phase 1 and 2 differ (a sampling rule)")
    mech1 = campaign_config.mechanism_for_phase(view.config, 1)
    parts = []
    for start in range(0, len(chosen), BATCH_DEVICES):
        keys = np.ascontiguousarray(dist.keys[all_indices[start:start + BATCH_DEVICES]])
        parts.append(memo_from_reports(*mech1.perturb_phase1(keys, rng)))
    if not parts:
        return ShcMemo(np.zeros(0, np.uint32), np.zeros(0, np.uint8), np.zeros(0, np.uint8))
    return ShcMemo(*(np.concatenate(column) for column in zip(*parts)))


def simulated_reports(view: CampaignView, mech, dist: ItemDistribution, device_ids: list,
                      rng: np.random.Generator, set_size: int = 0):
    """One report per simulated device the sampling rule puts in this phase (nonce field =
    phase - 1: a re-run with the same seed makes identical bytes); returns (fleet indices of
    those devices, their true counts, reports: one row per fleet index, zero for the others).
    Every device's item is drawn before the first perturbation word, so the same seed gives a
    device the same item in both phases."""
    doc, phase = view.config, view.phase
    chosen = np.flatnonzero(reports_in_phase(device_ids, doc, phase))
    counts = {}
    nonce = np.frombuffer(np.uint32(phase - 1).astype("<u4").tobytes(), np.uint8)
    all_indices = draw_indices(len(chosen), dist, rng, set_size)
    memos = None
    if mech.name == "shc" and phase == 2:
        memos = _shc_memos(view, dist, device_ids, chosen, all_indices, rng)
    out = np.zeros((len(device_ids), mech.report_size), np.uint8)
    for start in range(0, len(chosen), BATCH_DEVICES):
        indices = all_indices[start:start + BATCH_DEVICES]
        if getattr(dist, "numeric", False):  # readings: the grid points devices report
            keys = np.ascontiguousarray(dist.grid(indices))
        elif mech.name == "pem":  # key_λ of the device's group (spec §3.5)
            ids = [device_ids[i] for i in chosen[start:start + BATCH_DEVICES].tolist()]
            keys = dist.phase1_keys(mech, ids, indices)
        else:
            keys = np.ascontiguousarray(dist.keys[indices])
        if memos is not None:
            reports = mech.perturb_batch(type(memos)(*(a[start:start + BATCH_DEVICES]
                                                        for a in memos)), rng)
        else:
            reports = mech.perturb_batch(_phase2_sets(view, mech, keys), rng,
                                         **_lcm_high(view, mech, indices))
        reports[:, 8:12] = nonce
        dist.add_counts(counts, indices)
        out[chosen[start:start + BATCH_DEVICES]] = reports
    return chosen, counts, out
