"""The dashboard with recurring campaigns (headless Chromium, the harness of test_dashboard.py;
the API in process, no broker: the rounds are written into the state as the ingest stores them,
tests/support/recurring_store.py): the per-round chart draws, for every round with reports,
each followed item's estimate with its interval and noise flag exactly as the API's /series
answers (a round without reports leaves a gap in the line), lbitmean's chart its mean per
round, the card names the round open now and the round its estimate is of, with no console
error and no request off this machine; a screenshot goes to tests/artifacts/dashboard-rounds.png."""
import os
import time

import numpy as np
import pytest

from ldpfleet.broker.embedded import free_port
from ldpfleet.service.http.api import ApiTokens, create_app, start_http
from support.recurring_store import Store, evolving_fleet, new_state, put_round, recurring_campaign
from test_dashboard import (ARTIFACTS, TOKEN, assert_shows, browser, get_json,  # noqa: F401
                            needs_browser, page_fields, requested_urls, wait_rendered)

EVERY = 600
P = np.array([0.3, 0.22, 0.15, 0.1, 0.08, 0.06, 0.05, 0.04])


def build(state, key):
    """`fw` (loloha, 8 items): reports in rounds 1-3 and 5, round 6 open now; `cnt`
    (lbitmean) rounds 1-5."""
    start = int(time.time()) - 5 * EVERY - EVERY // 2
    rng = np.random.default_rng(4242)
    with Store(state) as store:
        fw = recurring_campaign(store, key, "fw", "loloha", 8, every_s=EVERY, start=start)
        fleet = evolving_fleet(fw.mechanism(1), 3000, 5, P, 0.2, rng)
        for r in (1, 2, 3, 5):
            put_round(store, "fw", r, fleet.round_sketch(r, rng))
        cnt = recurring_campaign(store, key, "cnt", "lbitmean", 31, every_s=EVERY, start=start,
                                 params={"s": 3})
        counters = evolving_fleet(cnt.mechanism(1), 2000, 5, np.linspace(1, 3, 31) / np.linspace(
            1, 3, 31).sum(), 0.3, rng)
        for r in range(1, 6):
            put_round(store, "cnt", r, counters.round_sketch(r, rng))


@needs_browser
def test_per_round_chart_draws_the_apis_series(tmp_path, browser):  # noqa: F811
    state, key = new_state(tmp_path)
    build(state, key)
    port = free_port()
    server = start_http(create_app(state, tokens=ApiTokens(read=TOKEN)), "127.0.0.1", port)
    try:
        browser.set_window_size(1280, 1000)
        browser.get("http://127.0.0.1:%d/?token=%s" % (port, TOKEN))
        wait_rendered(browser)
        fields = page_fields(browser)

        series = get_json(port, "/campaigns/fw/series?format=json&last=30&top=5")
        assert series["current_round"] == 6 and len(series["items"]) == 5
        assert [e["n"] for e in series["series"]] == [3000, 3000, 3000, 0, 3000, 0]
        drawn = {f for f in fields if f.startswith("series.fw.")}
        want = set()
        for entry in series["series"]:
            for est in entry["estimates"]:
                field = "series.fw.%s.r%d" % (est["item"], entry["round"])
                want.add(field)
                e = fields[field]
                assert float(e["value"]) == pytest.approx(est["frequency"], rel=1e-12)
                assert float(e["low"]) == pytest.approx(est["low"], rel=1e-12)
                assert float(e["high"]) == pytest.approx(est["high"], rel=1e-12)
                noise = browser.execute_script(
                    "return document.querySelector('[data-field=\"%s\"]').getAttribute("
                    "'data-noise')" % field)
                assert noise == str(est["noise"]).lower()
        assert drawn == want and len(want) == 5 * 4
        # round 4 has no reports: every item's line breaks there (rounds 1-3, then 5 alone)
        runs = browser.execute_script("""
            return Array.from(document.querySelectorAll(
              'section[data-campaign="fw"] svg.series-chart g.series-line'))
              .map(g => g.querySelectorAll('polyline').length);""")
        assert runs == [1] * 5
        assert_shows(fields, "campaign.fw.current_round", 6)
        assert_shows(fields, "campaign.fw.rounds", 10)
        card = browser.find_element("css selector", 'section[data-campaign="fw"]').text
        assert "round 5 of 10" in card and "every 10 min" in card
        est = get_json(port, "/campaigns/fw/estimate?format=json&top=32")
        assert est["round"] == 5
        for row in est["items"][:10]:
            assert_shows(fields, "estimate.fw.%s.frequency" % row["item"], row["frequency"])

        means = get_json(port, "/campaigns/cnt/series?format=json&last=30")
        for entry in means["series"]:
            if entry["n"]:
                e = fields["series.cnt.mean.r%d" % entry["round"]]
                assert float(e["value"]) == pytest.approx(entry["mean"]["mean"], rel=1e-12)
                assert float(e["low"]) == pytest.approx(entry["mean"]["low"], rel=1e-12)
        assert len([f for f in fields if f.startswith("series.cnt.")]) == 5
        mean = get_json(port, "/campaigns/cnt/estimate?format=json")
        [m] = mean["numeric"]["means"]
        assert float(fields["numeric.cnt.0.mean"]["value"]) == m["mean"]

        width = browser.execute_script("return [document.documentElement.scrollWidth, "
                                       "document.documentElement.clientWidth]")
        assert width[0] <= width[1], width
        text = browser.find_element("tag name", "body").text
        for junk in ("[object", "undefined", "NaN"):
            assert junk not in text, junk
        os.makedirs(ARTIFACTS, exist_ok=True)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1280, min(height + 140, 9000))
        time.sleep(0.3)
        browser.save_screenshot(os.path.join(ARTIFACTS, "dashboard-rounds.png"))
        console = browser.get_log("browser")
        assert not [e for e in console if e["level"] == "SEVERE"], console
        off = [u for u in requested_urls(browser)
               if not u.startswith(("http://127.0.0.1:%d/" % port, "data:"))]
        assert not off, off
    finally:
        server.should_exit = True
