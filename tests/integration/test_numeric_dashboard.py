"""The dashboard with numeric campaigns (headless Chromium, the harness of test_dashboard.py):
a pm campaign shows its range and its mean with the interval the API answers (no top-k table,
no console error), an hm campaign one row per metric, an sw campaign its EMS histogram, one bar
per bin at the API's fraction."""
import numpy as np

from ldpfleet.broker.embedded import free_port
from ldpfleet.core.mechanisms.numeric import NumericDomain
from ldpfleet.core.signing import write_signing_key
from ldpfleet.service import Store, create_campaign
from support.service import ServeProcess
from test_dashboard import (TOKEN, assert_shows, browser, get_json, needs_browser,  # noqa: F401
                            page_fields, wait_rendered)

PAIR = {"type": "ranges", "points": 1001,
        "metrics": [{"lo": 0, "hi": 100, "name": "load"}, {"lo": -40, "hi": 85, "name": "temp"}]}


def fold(store, name, n, seed):
    camp = store.require_campaign(name)
    mech = camp.mechanism(1)
    dom = NumericDomain(camp.config["domain"])
    rng = np.random.default_rng(seed)
    if len(dom.metrics) > 1:
        x = np.stack([dom.grid_points(rng.uniform(0, 80, n), a) for a in range(2)], axis=1)
    else:
        x = dom.grid_points(-40 + 125 * rng.beta(2, 5, n))
    sketch = mech.new_sketch()
    sketch.update(mech.perturb_batch(x, rng))
    store.put_sketch(name, 1, sketch.n, sketch.serialize())


@needs_browser
def test_dashboard_shows_numeric_answers(mosquitto, tmp_path, browser):  # noqa: F811
    state = "sqlite:///" + str(tmp_path / "state.db")
    key = str(tmp_path / "fleet.key")
    write_signing_key(key)
    with Store(state) as store:
        for name, mech, domain, params in (("temp", "pm", "-40.0..85.0:0.1", None),
                                           ("hist", "sw", "-40.0..85.0:0.1", {"bins": 64}),
                                           ("pair", "hm", PAIR, None)):
            create_campaign(store, None, key, name, mech, 1.0, domain, params=params)
            fold(store, name, 3000, 5)
    token_file = tmp_path / "read.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    serve = ServeProcess(mosquitto.url, state, log_path=str(tmp_path / "serve.log"), extra_args=[
        "--http", "127.0.0.1:%d" % port, "--http-token-file", str(token_file),
        "--no-broker-check"]).start()
    try:
        browser.get("http://127.0.0.1:%d/?token=%s" % (port, TOKEN))
        wait_rendered(browser, timeout=60)
        fields = page_fields(browser)
        for name in ("temp", "pair"):
            est = get_json(port, "/campaigns/%s/estimate" % name)
            for m in est["numeric"]["means"]:
                for key_ in ("mean", "ci_low", "ci_high", "reports"):
                    field = "numeric.%s.%d.%s" % (name, m["metric"], key_)
                    assert float(fields[field]["value"]) == m[key_], field
        est = get_json(port, "/campaigns/hist/estimate")
        for b in est["numeric"]["histogram"]:
            assert float(fields["histogram.hist.%d" % b["bin"]]["value"]) == b["fraction"]
        text = browser.find_element("tag name", "body").text
        assert "numeric domain -40.0..85.0 by 0.1 (1251 points)" in text
        assert "load" in text and "temp" in text
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        serve.stop()
