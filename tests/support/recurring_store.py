"""A recurring campaign's rounds written straight into a state, as the ingest stores them
(protocol_spec/v2 §3.4: round r's reports folded into the campaign's one-phase sketch, stored
under phase = r): the read side's tests (estimate --round/--series, the API's series, the
dashboard's trend chart, the per-round metrics) need no broker and no ingest for that.

Devices are simulated with the longitudinal mechanisms' own batch faces (`enrol_batch` once,
then `report_batch` every round from the same permanent states, through the C kernels), from a
seeded numpy Generator (aggregator-side simulation, never a device's randomness)."""
from dataclasses import dataclass

import numpy as np

from ldpfleet.core import config as cfgmod
from ldpfleet.core.signing import read_signing_key, write_signing_key
from ldpfleet.service import Store  # noqa: F401 (the tests open states through it)
from ldpfleet.service.campaigns.manage import fresh_campaign_id

EVERY_S = 60
START = 1_795_000_000


def recurring_campaign(store, key_file, name, mechanism, domain_size, eps_milli=2000,
                       eps1_milli=1000, rounds=10, every_s=EVERY_S, start=START, params=None,
                       not_after=None):
    """Store (no broker) a recurring campaign whose schedule starts at `start`; returns it."""
    ph = {"phase": 1, "mechanism": mechanism, "eps_milli": eps_milli,
          "params": dict({"eps1_milli": eps1_milli}, **(params or {}))}
    schedule = {"start": start, "every_s": every_s, "rounds": rounds}
    not_after = start + rounds * every_s + 3600 if not_after is None else not_after
    doc = {"type": "config", "protocol": 2, "campaign": name,
           "campaign_id": fresh_campaign_id(store), "salt": 12345, "not_before": start - 60,
           "not_after": not_after, "domain": {"type": "int", "size": domain_size},
           "phases": [ph], "schedule": schedule}
    cfgmod.check_config(doc, now=start)
    return store.add_campaign(doc, cfgmod.sign(doc, read_signing_key(key_file)), key_file)


@dataclass
class Fleet:
    """n devices enrolled once; `values(r)` their values in round r."""

    mech: object
    states: np.ndarray
    values: list

    def round_sketch(self, r: int, rng, devices=None):
        vals = self.values[r - 1] if devices is None else self.values[r - 1][:devices]
        states = self.states if devices is None else self.states[:devices]
        sketch = self.mech.new_sketch()
        sketch.update(self.mech.report_batch(vals, states, rng))
        return sketch


def evolving_fleet(mech, n, rounds, probabilities, change_rate, rng) -> Fleet:
    """Values drawn from `probabilities`, each device redrawing with `change_rate` per round."""
    k = len(probabilities)
    values = [rng.choice(k, size=n, p=probabilities).astype(np.uint32)]
    for _ in range(rounds - 1):
        v = values[-1].copy()
        change = rng.random(n) < change_rate
        v[change] = rng.choice(k, size=int(change.sum()), p=probabilities)
        values.append(v)
    return Fleet(mech, mech.enrol_batch(n, rng), values)


def put_round(store, name, r, sketch, worker=""):
    """Round r's sketch as one worker's partial (what the ingest commits)."""
    old, store.worker = store.worker, worker
    try:
        with store.batch():
            store.put_sketch(name, r, int(sketch.n), sketch.serialize())
    finally:
        store.worker = old


def new_state(tmp_path):
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    return "sqlite:///" + str(tmp_path / "state.db"), key


