"""Recurring campaigns in the HTTP API and the Prometheus metrics, in process (the ASGI app
called directly, the StoreCollector scraped into text): `/campaigns/{name}/series` answers
what `estimate --series --json` prints and fits its response model, `estimate?round=R` the
round's estimate, typed errors name the field (404 unknown campaign, 400 not recurring or a
round outside 1..R), and the metrics carry per-round accepted reports for the latest
ROUND_WINDOW rounds only (bounded labels), the open round, and no per-round `phase` label."""
import asyncio
import json
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ldpfleet.service import create_campaign
from ldpfleet.service.campaigns.estimates import EstimateQuery
from ldpfleet.service.campaigns.query import estimate
from ldpfleet.service.campaigns.rounds import compute_series
from ldpfleet.service.http import api, metrics
from ldpfleet.service.http import models as m
from support.recurring_store import Store, evolving_fleet, new_state, put_round, recurring_campaign

EVERY = 600  # round 12 stays open for 5 min after the fixture: no race with the clock


def get(app, path, query=""):
    """(status, body: JSON or text) of `GET path?query` on the ASGI app."""
    sent, requested = [], []

    async def receive():
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query.encode(), "root_path": "", "client": ("127.0.0.1", 50000),
             "server": ("127.0.0.1", 8080), "headers": [(b"host", b"127.0.0.1:8080")]}
    asyncio.run(app(scope, receive, send))
    start = next(x for x in sent if x["type"] == "http.response.start")
    body = b"".join(x.get("body", b"") for x in sent if x["type"] == "http.response.body")
    ctype = dict(start["headers"]).get(b"content-type", b"").decode()
    return start["status"], json.loads(body) if "json" in ctype else body.decode()


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """`daily`: lgrr, 20 rounds of 10 min; round 12 open now; reports in rounds 1-3 and 9-11.
    `oneshot`: an OLH campaign."""
    tmp = tmp_path_factory.mktemp("rounds_http")
    url, key = new_state(tmp)
    start = int(time.time()) - 11 * EVERY - EVERY // 2
    rng = np.random.default_rng(7)
    with Store(url) as store:
        camp = recurring_campaign(store, key, "daily", "lgrr", 6, rounds=20, every_s=EVERY,
                                  start=start)
        fleet = evolving_fleet(camp.mechanism(1), 800, 11, np.array([.4, .3, .1, .1, .05, .05]),
                               0.2, rng)
        for r in (1, 2, 3, 9, 10, 11):
            put_round(store, "daily", r, fleet.round_sketch(r, rng, devices=400 + 10 * r))
        create_campaign(store, None, key, "oneshot", "olh", 2.0, "0-7")
    return url


def test_series_endpoint_is_the_cli_series(state):
    app = api.create_app(state, dashboard=None)
    status, doc = get(app, "/campaigns/daily/series", "top=3")
    assert status == 200, doc
    m.Series.model_validate(doc)
    assert doc["campaign"] == "daily" and doc["every_s"] == EVERY and doc["rounds"] == 20
    assert doc["current_round"] == 12
    assert [e["round"] for e in doc["series"]] == list(range(1, 13))
    assert [e["n"] for e in doc["series"]] == [410, 420, 430] + [0] * 5 + [490, 500, 510, 0]
    with Store(state) as store:
        expected = compute_series(store, "daily", top=3).to_json()
    assert doc == expected
    for entry in doc["series"]:
        m.SeriesRound.model_validate(entry)
        assert len(entry["estimates"]) == (3 if entry["n"] else 0)
    status, text = get(app, "/campaigns/daily/series", "format=csv&last=2")
    assert status == 200 and text.splitlines()[0].startswith("round,opens,closes,n,item")
    assert {line.split(",")[0] for line in text.splitlines()[1:]} == {"11"}


def test_estimate_of_a_round(state):
    app = api.create_app(state, dashboard=None)
    status, doc = get(app, "/campaigns/daily/estimate", "round=2&top=4")
    assert status == 200, doc
    m.Estimate.model_validate(doc)
    with Store(state) as store:
        table = estimate(store, "daily", EstimateQuery(round=2, top=4))
    assert doc == json.loads(json.dumps(table.to_json()))
    assert doc["round"] == 2 and doc["n"] == 420 and doc["round_chosen"] is None
    status, doc = get(app, "/campaigns/daily/estimate")
    assert status == 200 and doc["round"] == 11 and doc["round_chosen"]


@pytest.mark.parametrize("path,query,code,field", [
    ("/campaigns/nope/series", "", 404, "name"),
    ("/campaigns/oneshot/series", "", 400, "schedule"),
    ("/campaigns/oneshot/estimate", "round=1", 400, "round"),
    ("/campaigns/daily/estimate", "round=0", 400, "round"),
    ("/campaigns/daily/estimate", "round=21", 400, "round"),
    ("/campaigns/daily/series", "last=0", 400, "last"),
    ("/campaigns/daily/series", "items=99", 400, "items"),
])
def test_typed_errors(state, path, query, code, field):
    status, doc = get(api.create_app(state, dashboard=None), path, query)
    assert status == code, doc
    m.Problem.model_validate(doc)
    assert doc["field"] == field, doc


def test_metrics_per_round_bounded(state):
    collector = metrics.StoreCollector(state)
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    rounds = {}
    for line in text.splitlines():
        if line.startswith("ldpfleet_round_reports{") and 'campaign="daily"' in line:
            label = line.split('round="')[1].split('"')[0]
            rounds[int(label)] = float(line.rsplit(" ", 1)[1])
    # the latest 8 rounds that opened (5..12), zeros included; never rounds 1-4
    assert rounds == {5: 0, 6: 0, 7: 0, 8: 0, 9: 490, 10: 500, 11: 510, 12: 0}
    assert 'ldpfleet_campaign_round{campaign="daily"} 12.0' in text
    accepted = [line for line in text.splitlines()
                if line.startswith('ldpfleet_campaign_reports_accepted_total{campaign="daily"')]
    assert accepted == ['ldpfleet_campaign_reports_accepted_total{campaign="daily",phase="1"} '
                        '%s' % float(410 + 420 + 430 + 490 + 500 + 510)]
    assert 'ldpfleet_campaign_round{campaign="oneshot"}' not in text
    assert "ldpfleet_store_up 1.0" in text


def test_status_of_a_recurring_campaign(state):
    """`campaign status` (GET /campaigns/NAME): the schedule, the phase's reports summed over
    the rounds, and the expected error of one round (the latest with reports)."""
    status, doc = get(api.create_app(state, dashboard=None), "/campaigns/daily")
    assert status == 200, doc
    m.CampaignStatus.model_validate(doc)
    sched = doc["schedule"]
    assert (sched["rounds"], sched["every_s"], sched["current_round"], sched["opened"]) == (
        20, EVERY, 12, 12)
    assert (sched["latest_round"], sched["latest_reports"]) == (11, 510)
    [phase] = doc["phases"]
    assert phase["reports"] == sched["reports"] == 410 + 420 + 430 + 490 + 500 + 510
    assert phase["expected_error"]["n"] == 510
    status, doc = get(api.create_app(state, dashboard=None), "/campaigns/oneshot")
    assert status == 200 and "schedule" not in doc
