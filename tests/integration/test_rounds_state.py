"""Recurring campaigns' read side on both state backends (SQLite, and the machine's
PostgreSQL, where several workers share the state): per-round partials of two workers merge
into the round's estimate, the series and status read the rounds' counts (summed per round
across workers), and the metrics scrape serves the per-round series."""
import time

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from ldpfleet.core.signing import write_signing_key
from ldpfleet.service.campaigns.estimates import EstimateQuery
from ldpfleet.service.campaigns.manage import campaign_status
from ldpfleet.service.campaigns.query import estimate
from ldpfleet.service.campaigns.rounds import compute_series
from ldpfleet.service.http.metrics import StoreCollector
from support.recurring_store import Store, evolving_fleet, put_round, recurring_campaign

EVERY = 600  # round 2 open for 5 minutes after the campaign is made: no race with the clock


def test_rounds_of_two_workers(state_url, tmp_path):
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    rng = np.random.default_rng(5)
    with Store(state_url) as store:
        camp = recurring_campaign(store, key, "wk", "losue", 6, every_s=EVERY,
                                  start=int(time.time()) - EVERY - EVERY // 2)
        mech = camp.mechanism(1)
        fleet = evolving_fleet(mech, 600, 2, np.full(6, 1 / 6), 0.5, rng)
        whole = {}
        for r in (1, 2):
            parts = [mech.new_sketch(), mech.new_sketch()]
            parts[0].update(mech.report_batch(fleet.values[r - 1][:250], fleet.states[:250], rng))
            parts[1].update(mech.report_batch(fleet.values[r - 1][250:], fleet.states[250:], rng))
            put_round(store, "wk", r, parts[0], worker="a")
            put_round(store, "wk", r, parts[1], worker="b")
            whole[r] = mech.new_sketch()
            whole[r].merge(parts[0])
            whole[r].merge(parts[1])
        for r in (1, 2):
            table = estimate(store, "wk", EstimateQuery(round=r), now=time.time())
            assert table.n == 600
            keys = [row["key"] for row in table.rows]
            assert [row["estimate"] for row in table.rows] == list(
                np.asarray(whole[r].estimate(keys), np.float64))
        series = compute_series(store, "wk", now=time.time())
        assert [(e["round"], e["n"]) for e in series.series] == [(1, 600), (2, 600)]
        status = campaign_status(store, "wk")
        assert status["phases"][0]["reports"] == 1200 and status["schedule"]["latest_round"] == 2
    registry = CollectorRegistry()
    registry.register(StoreCollector(state_url))
    text = generate_latest(registry).decode()
    assert 'ldpfleet_round_reports{campaign="wk",round="1"} 600.0' in text
    assert 'ldpfleet_round_reports{campaign="wk",round="2"} 600.0' in text
    assert 'ldpfleet_campaign_reports_accepted_total{campaign="wk",phase="1"} 1200.0' in text
