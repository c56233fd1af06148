"""In-process ingest timing of a recurring campaign's reports beside a one-shot campaign's
(protocol_spec/v2 §3.4): what the round header costs the aggregator.

Both campaigns run over one SQLite state in one `Ingestor` (no broker: the fold path alone —
routing, the header rule, body checks, dedupe, the sketch update, COMMIT): `loloha` (g = 4,
recurring, 16-byte round header) and `olh` (g = 4, one-shot): bodies of the same 6 bytes over
the same domain. Every batch brings fresh devices (no duplicates); the two campaigns' batches
alternate, the first two of each are left out, the median time per batch is taken.
`split_round_rows_share` is the cut of the round field (core.schedule.split_round_rows) alone,
over a recurring batch's time.

    python tools/bench_recurring_ingest.py [--batch 10000] [--batches 12]

Prints one JSON object. Not a test: no assertion on timing.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from ldpfleet.core import schedule
from ldpfleet.core.signing import write_signing_key
from ldpfleet.service import Store, create_campaign
from ldpfleet.service.campaigns.manage import Issuance
from ldpfleet.service.campaigns.recurring import Recurrence
from ldpfleet.service.ingest.batch import ReportBatch
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--batches", type=int, default=12)
    args = ap.parse_args(argv)
    size = args.batch
    tmp = tempfile.mkdtemp(prefix="bench-recurring-")
    key = os.path.join(tmp, "k.key")
    write_signing_key(key)
    state = "sqlite:///" + os.path.join(tmp, "s.db")
    with Store(state) as store:
        create_campaign(store, None, key, "rec", "loloha", 2.0, "64", params={"g": 4},
                        issue=Issuance(recurrence=Recurrence(3600, rounds=3,
                                                             start=int(time.time()) - 5)))
        create_campaign(store, None, key, "one", "olh", 2.0, "64", params={"g": 4})
    ingest = Ingestor(state, options=IngestOptions(client_id="bench"))
    ingest.folder.refresh_campaigns()
    rng = np.random.default_rng(1)

    def batch(name, first):
        mech = ingest.folder.campaigns[name].mechanism(1)
        rows = mech.perturb_batch(rng.integers(0, 64, size), rng, seq_start=first)
        if name == "rec":  # round 1's reports: flags 1, round:u32 after the header
            rnd = np.zeros((size, 4), np.uint8)
            rnd[:, 0] = 1
            rows = np.concatenate([rows[:, :12], rnd, rows[:, 12:]], axis=1)
            rows[:, 3] = schedule.ROUND_FLAG
        return ReportBatch.from_pairs([("ldp/%s/r/d%d" % (name, first + i), r.tobytes())
                                       for i, r in enumerate(rows)])

    times = {"rec": [], "one": []}
    for k in range(args.batches):
        for name in (("rec", "one") if k % 2 else ("one", "rec")):
            b = batch(name, k * size)
            start = time.perf_counter()
            counts = ingest.process_batch(b)
            times[name].append(time.perf_counter() - start)
            assert counts[(name, "accepted")] == size, counts
    ingest.store.close()
    rows = np.zeros((size, 22), np.uint8)
    start = time.perf_counter()
    for _ in range(20):
        schedule.split_round_rows(rows)
    split = (time.perf_counter() - start) / 20
    med = {n: statistics.median(v[2:]) for n, v in times.items()}
    print(json.dumps({"batch": size, "batches": args.batches,
                      "recurring_reports_per_s": round(size / med["rec"]),
                      "one_shot_reports_per_s": round(size / med["one"]),
                      "recurring_time_over_one_shot": round(med["rec"] / med["one"], 3),
                      "split_round_rows_share": round(split / med["rec"], 4)}))


if __name__ == "__main__":
    main()
