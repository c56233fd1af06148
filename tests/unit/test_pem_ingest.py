"""PEM reports through the real ingest path in process (protocol_spec/v2 §3.5, §4): each report
is folded into the group of its TOPIC's device id -- for a load generator's `<login>/<id>` topic
the whole `<login>/<id>`, the id its simulated device hashed for its own group -- so the stored
per-group sketch equals a direct sketch of the same reports with the reference group rule;
re-sends count once, devices the public split puts in phase 2 and malformed bodies are
rejected and counted by reason."""
import numpy as np

from ldpfleet.core import strings_domain
from ldpfleet.core.protocols.options import ProtocolOptions
from ldpfleet.core.signing import write_signing_key
from ldpfleet.core.protocols.ldplcm import reports_in_phase
from ldpfleet.loadgen.campaign import CampaignView, phase_mechanism
from ldpfleet.loadgen.items import item_distribution
from ldpfleet.loadgen.simulated import simulated_device_ids, simulated_reports
from ldpfleet.service import Store
from ldpfleet.service.campaigns.estimates import load_sketch
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.service.campaigns.protocols import create_protocol_campaign
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor


def test_pem_reports_fold_into_the_group_of_their_topic_device_id(tmp_path):
    url = "sqlite:///%s" % (tmp_path / "s.db")
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    with Store(url) as store:
        camp = create_protocol_campaign(store, None, key, "s", "pem", 3.0, "strings:max_len=4",
                                        options=ProtocolOptions(top=3), issue=Issuance(salt=7))
    view = CampaignView(camp.config, 1, None)
    mech = phase_mechanism(view)
    assert mech.groups == 4
    ids = simulated_device_ids(600, "gen/sim")  # a load generator logged in as `gen`
    chosen, _counts, reports = simulated_reports(view, mech, item_distribution(
        "zipf:1.2,20,4", camp.config), ids, np.random.default_rng(3))
    msgs = [("ldp/s/r/%s" % ids[i], reports[i].tobytes()) for i in chosen.tolist()]
    # the group of `gen/sim-i` differs from that of `sim-i` for many devices: the rule is seen
    full = [strings_domain.group_of(ids[i], camp.config["salt"], 4) for i in chosen.tolist()]
    short = [strings_domain.group_of(ids[i].split("/", 1)[1], camp.config["salt"], 4)
             for i in chosen.tolist()]
    assert sum(a != b for a, b in zip(full, short)) > len(full) // 2
    phase2 = [i for i in range(len(ids)) if i not in set(chosen.tolist())][:5]
    assert not reports_in_phase([ids[i] for i in phase2], camp.config, 1).any()
    bad = reports[chosen[0]].copy()
    bad[12:16] = np.frombuffer(np.uint32(mech.kp).tobytes(), np.uint8)  # seed index >= kp
    extra = [("ldp/s/r/%s" % ids[i], reports[chosen[0]].tobytes()) for i in phase2] \
        + [("ldp/s/r/gen/other-1", bad.tobytes())] + msgs[:10]  # re-sends of 10
    ingest = Ingestor(url, options=IngestOptions(client_id="w1"))
    try:
        counts = ingest.process_batch(msgs + extra)
    finally:
        ingest.store.close()
    got = {reason: n for (c, reason), n in counts.items() if c == "s"}
    assert got["accepted"] == len(msgs) and got["duplicate"] == 10
    assert got["wrong_phase_device"] == len(phase2) and got["seed_index"] == 1
    with Store(url) as store:
        sketch = load_sketch(store, "s", 1)
    direct = mech.new_sketch()
    direct.update(reports[chosen], groups=np.array(full))
    assert np.array_equal(sketch.sizes, direct.sizes) and np.array_equal(sketch.counts,
                                                                         direct.counts)
    assert sketch.sizes.tolist() == np.bincount(full, minlength=4).tolist()
