"""Each campaign's counters over time (service/state/history.py, schema 7's `counter_history`): the
ingest path appends the campaign totals at most once a minute, several workers (PostgreSQL)
keep one row a minute, re-sends and rejections are kept apart, and `campaign trend` / the
API's /trend answer them (oldest first, the counters now last)."""
import json

import numpy as np
import pytest

from ldpfleet import cli
from ldpfleet.service import Store, create_campaign
from ldpfleet.service.state.history import HistoryRecorder, trend
from ldpfleet.service.ingest.loop import IngestOptions, Ingestor
from ldpfleet.core.signing import write_signing_key
from support.service import report_messages


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_history_appends_once_a_minute_and_the_trend_reads_it(backend, tmp_path, request,
                                                              capsys):
    if backend == "postgresql":
        state = request.getfixturevalue("postgres_url")
    else:
        state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    with Store(state) as store:
        camp = create_campaign(store, None, key, "cpu", "olh", 2.0, "0-63")
    rng = np.random.default_rng(1)
    reports = camp.mechanism(1).perturb_batch(rng.integers(0, 64, 300).astype(np.uint32), rng)
    messages = report_messages("cpu", reports)
    clock = Clock(6000 * 60 + 5.0)
    workers = [Ingestor(state, options=IngestOptions(client_id=w)) for w in ("w1", "w2")]
    try:
        for ing in workers:
            ing.folder.history = HistoryRecorder(clock=clock)
        workers[0].process_batch(messages[:100])             # minute M: a row (100 accepted)
        clock.t += 20
        workers[0].process_batch(messages[100:200])          # same minute: no new row
        workers[1].process_batch(messages[200:250])          # another worker, same minute
        clock.t += 60
        workers[1].process_batch(messages[250:] + messages[:40])  # minute M+1: 40 re-sends
        workers[1].process_batch([("ldp/cpu/r/bad", b"\x01")])    # M+1 again: no row
        clock.t += 3600
        workers[0].process_batch([("ldp/cpu/r/late", b"\x02\x03")])  # an hour later: a row
    finally:
        for ing in workers:
            ing.store.close()
    with Store(state) as store:
        rows = store.db.execute("SELECT minute, received, accepted, duplicates, rejected FROM "
                                "counter_history WHERE campaign='cpu' ORDER BY minute").fetchall()
        out = trend(store, "cpu")
    assert [tuple(int(v) for v in r) for r in rows] == [
        (6000, 100, 100, 0, 0), (6001, 340, 300, 40, 0), (6061, 342, 300, 40, 2)]
    points = out["points"]
    assert [p["accepted"] for p in points] == [100, 300, 300, 300]
    assert points[-1] == dict(points[-1], received=342, duplicates=40, rejected=2)
    assert points[0]["at"] == pytest.approx(6000 * 60 + 5.0)
    capsys.readouterr()
    assert cli.main(["campaign", "trend", "cpu", "--state", state, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["points"][:3] == points[:3]
    # campaign status says the re-sends apart from the rejections too
    assert cli.main(["campaign", "status", "cpu", "--state", state]) == 0
    text = capsys.readouterr().out
    assert "accepted 300  rejected 2  re-sent 40 (duplicates" in text, text
    assert "rejected duplicate" not in text


def test_trend_thins_long_histories_to_evenly_spaced_points(tmp_path):
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "k.key")
    write_signing_key(key)
    with Store(state) as store:
        create_campaign(store, None, key, "cpu", "olh", 2.0, "0-63")
        with store.batch():
            store.db.executemany("INSERT INTO counter_history VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 [("cpu", m, m * 60.0, m, m, 0, 0) for m in range(1000)])
        points = trend(store, "cpu", max_points=50)["points"]
    assert len(points) == 50
    accepted = [p["accepted"] for p in points[:-1]]
    assert accepted == sorted(accepted) and accepted[-1] == 999 and accepted[0] < 30
