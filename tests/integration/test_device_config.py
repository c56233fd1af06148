"""Device-side config handling on the real MicroPython interpreter (spec §5, §6).

* The device's envelope verification (Ed25519 with key ids, spec §5.1) and config rules refuse exactly what the aggregator's
  (ldpfleet.core.config.verify / check_config) refuse, naming the same field.
* Real device processes against a private Mosquitto: a valid config is accepted and reported;
  an unsigned, HMAC-signed (v1), unknown-key, tampered, spliced, expired, malformed, other-protocol or over-cap config is
  refused with the reason logged, nothing is published and the ledger file is unchanged.
"""
import copy
import json
import subprocess
from pathlib import Path

import pytest

from support.devices import (OTHER_KEY, SIGNING_KEY, ReportCollector, config_doc, envelope,
                             hmac_envelope)
from ldpfleet.core import config as campaign_config
from ldpfleet.provision import device_runner
from support.devices import read_ledger, run_device
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms import make_mechanism

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "device" / "tests" / "config_rules.py"


def run_rules(tmp_path, cases):
    src, out = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text(json.dumps(cases))
    proc = subprocess.run([device_runner.micropython_binary(), str(RULES), str(src), str(out)],
                          env=device_runner.micropython_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def aggregator_field(fn, *args):
    try:
        fn(*args)
    except ConfigError as exc:
        return exc.field
    return None


def mutated_configs():
    base = config_doc("cpu-load")
    now = base["not_before"] + 10

    def m(fn, at=now):
        doc = copy.deepcopy(base)
        fn(doc)
        return [doc, at]

    def set_(path, value):
        def fn(doc):
            node = doc
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = value
        return fn

    def drop(path):
        def fn(doc):
            node = doc
            for p in path[:-1]:
                node = node[p]
            del node[path[-1]]
        return fn

    two = [{"phase": 1, "mechanism": "sh", "eps_milli": 1000, "params": {"m": 64, "l": 2}},
           {"phase": 2, "mechanism": "srappor", "eps_milli": 1000, "params": {"l": 2}}]
    cases = [
        m(lambda d: None),
        m(lambda d: None, base["not_after"]),
        m(lambda d: None, base["not_before"] - 1),
        m(lambda d: None, base["not_after"] + 1),
        m(set_(["type"], "phase2")), m(drop(["type"])),
        m(set_(["protocol"], 1)), m(set_(["protocol"], 3)), m(drop(["protocol"])), m(set_(["protocol"], "2")),
        m(set_(["campaign"], "bad name!")), m(set_(["campaign"], "")), m(set_(["campaign"], "x" * 65)),
        m(set_(["campaign"], "x" * 64)), m(set_(["campaign"], 5)), m(drop(["campaign"])),
        m(set_(["campaign_id"], -1)), m(set_(["campaign_id"], 2 ** 32)), m(set_(["campaign_id"], 2 ** 32 - 1)),
        m(set_(["campaign_id"], "7")), m(set_(["campaign_id"], True)), m(set_(["campaign_id"], 1.5)),
        m(drop(["salt"])), m(drop(["not_before"])), m(set_(["not_after"], "soon")),
        m(drop(["domain"])), m(set_(["domain"], [])), m(set_(["domain", "size"], 1)),
        m(set_(["domain", "size"], 2 ** 32)), m(set_(["domain", "size"], 2 ** 32 + 1)),
        m(set_(["domain", "size"], True)), m(set_(["domain", "type"], "float")),
        m(set_(["domain"], {"type": "str", "items": ["a"]})),
        m(set_(["domain"], {"type": "str", "items": ["a", 3]})),
        m(set_(["domain"], {"type": "str", "items": ["a", "b", "héllo"]})),
        m(set_(["domain"], {"type": "str", "items": "ab"})),
        m(set_(["phases"], [])), m(set_(["phases"], two)), m(set_(["phases"], two + two[:1])),
        m(set_(["phases"], two[::-1])), m(set_(["phases"], {"phase": 1})), m(set_(["phases"], [5])),
        m(set_(["phases", 0, "mechanism"], "foo")), m(drop(["phases", 0, "mechanism"])),
        # memoised mechanisms (spec §3.2) only in recurring campaigns
        m(set_(["phases"], [{"phase": 1, "mechanism": "lgrr", "eps_milli": 2000,
                             "params": {"eps1_milli": 1000}}])),
        m(set_(["phases"], [{"phase": 1, "mechanism": "loloha", "eps_milli": 2000,
                             "params": {"eps1_milli": 1000, "g": 3}}])),
        m(set_(["phases", 0, "eps_milli"], 0)), m(set_(["phases", 0, "eps_milli"], -5)),
        m(set_(["phases", 0, "eps_milli"], "1")), m(set_(["phases", 0, "eps_milli"], True)),
        m(set_(["phases", 0, "eps_milli"], 1.5)), m(set_(["phases", 0, "params"], [1])),
        m(set_(["phases", 0, "eps_milli"], 64000)), m(set_(["phases", 0, "eps_milli"], 64001)),
        m(set_(["phases", 0, "eps_milli"], 10 ** 12)),
        m(drop(["phases", 0, "params"])),
        # v2: d <= 2^32 - 1 (⊥ takes index d), non-empty strings, none with key(⊥) = H(b"")
        m(set_(["domain", "size"], 2 ** 32 - 1)),
        m(set_(["domain"], {"type": "str", "items": ["a", ""]})),
        # v2 §2, every pair of GRR outputs: refused at eps 0.001 for d = 10^7 and at eps 0.6
        # for d = 2^32 - 2 (field domain.size), accepted where the buckets are all equal or the
        # ratio fits; OLH's g is always fine (c >= 65537)
        m(set_(["phases"], [{"phase": 1, "mechanism": "grr", "eps_milli": 1, "params": {}}]),),
        m(lambda d: (set_(["phases"], [{"phase": 1, "mechanism": "grr", "eps_milli": 1, "params": {}}])(d),
                     set_(["domain", "size"], 10 ** 7)(d))),
        m(lambda d: (set_(["phases"], [{"phase": 1, "mechanism": "grr", "eps_milli": 600, "params": {}}])(d),
                     set_(["domain", "size"], 2 ** 32 - 2)(d))),
        m(lambda d: (set_(["phases"], [{"phase": 1, "mechanism": "grr", "eps_milli": 694, "params": {}}])(d),
                     set_(["domain", "size"], 2 ** 32 - 2)(d))),
        m(lambda d: (set_(["phases"], [{"phase": 1, "mechanism": "grr", "eps_milli": 1, "params": {}}])(d),
                     set_(["domain", "size"], 2 ** 16)(d))),
    ]
    return (cases + fallback_configs(m, set_) + delivery_configs(m, set_) + numeric_configs(m, set_)
            + metric_configs(m, set_) + recurring_configs() + strings_configs())


def strings_configs():
    """Spec §3.5: every config case of vectors/strings.json (strings domains, pem/psgrr)."""
    vec = json.loads((ROOT / "protocol_spec" / "v2" / "vectors" / "strings.json").read_text())
    return [[c["body"], c["now"]] for c in vec["configs"]]


def recurring_configs():
    """Spec §3.4, §5.4 `schedule`: the shared cases of vectors/recurring.json (accepted, or
    refused as schedule, phases or phases.mechanism), each at its own `now`."""
    vec = json.loads((ROOT / "protocol_spec" / "v2" / "vectors" / "recurring.json").read_text())
    cases = [[c["body"], c["now"]] for c in vec["configs"]]
    base, now = vec["configs"][0]["body"], vec["configs"][0]["now"]

    def v(edit):
        doc = copy.deepcopy(base)
        edit(doc)
        return [doc, now]
    olh = {"phase": 1, "mechanism": "olh", "eps_milli": 2000, "params": {"g": 4}}
    lgrr2 = {"phase": 2, "mechanism": "lgrr", "eps_milli": 2000, "params": {"eps1_milli": 1000}}
    sched = base["schedule"]
    cases += [
        v(lambda d: d.update(schedule=None)), v(lambda d: d.update(schedule={})),
        v(lambda d: d["schedule"].update(rounds=1.0)), v(lambda d: d["schedule"].update(every_s=None)),
        v(lambda d: d.update(schedule={"start": d["not_after"] - 1, "every_s": 10, "rounds": 1})),
        v(lambda d: d.update(schedule={"start": d["not_after"] - 1, "every_s": 10, "rounds": 2})),
        v(lambda d: d["schedule"].update(every_s=31536000, rounds=1)),
        v(lambda d: d["schedule"].update(rounds=100000, every_s=10)),
        v(lambda d: d.update(phases=[olh, lgrr2])),  # a one-shot phase 1 in a recurring config
        v(lambda d: d.update(phases=[dict(lgrr2, phase=1), lgrr2])),
        v(lambda d: (d.pop("schedule"), d.update(phases=[olh, lgrr2]))),
        v(lambda d: d.update(phases=[dict(lgrr2, phase=1, eps_milli=64001)])),
        v(lambda d: d.update(phases=[dict(lgrr2, phase=1, params=[1])])),
        v(lambda d: d.update(domain={"type": "range", "lo": 0, "hi": 100, "resolution": 1},
                             phases=[{"phase": 1, "mechanism": "lbitmean", "eps_milli": 2000,
                                      "params": {"eps1_milli": 1000, "s": 2}}])),
        v(lambda d: d.update(domain={"type": "range", "lo": 0, "hi": 100, "resolution": 1},
                             phases=[{"phase": 1, "mechanism": "duchi", "eps_milli": 2000,
                                      "params": {}}])),
        v(lambda d: d.update(schedule=dict(sched, start=d["not_before"]))),
        v(lambda d: d.update(metric="Bad")),
    ]
    return cases


def metric_configs(m, set_):
    """Spec §5.4 `metric` (optional): [a-z][a-z0-9_]{0,31}; anything else refuses the config
    with field `metric`."""
    good = ["temp", "fw_version", "a", "a" * 32, "rssi_bucket2"]
    bad = ["", "Temp", "1temp", "_x", "a" * 33, "te-mp", "te mp", "t\u00e9", 5, True, None,
           ["temp"], {"n": "temp"}]
    return [m(set_(["metric"], v)) for v in good + bad]


def delivery_configs(m, set_):
    """Spec §5.4 `delivery`: ack, retry_s, retry_max_s and the optional first-publish spread
    `spread_s` (0..86400); anything else refuses the config with its `delivery.*` field."""
    base = {"ack": True, "retry_s": 30, "retry_max_s": 3600}

    def d(**kw):
        return m(set_(["delivery"], dict(base, **kw)))
    no_spread = dict(base)
    return [m(set_(["delivery"], no_spread)), d(spread_s=0), d(spread_s=10), d(spread_s=86400),
            d(spread_s=86401), d(spread_s=-1), d(spread_s="10"), d(spread_s=True),
            d(spread_s=1.5), d(spread_s=None), d(spread_s=[10]), d(spread=10),
            d(spread_s=10, extra=1), m(set_(["delivery"], {"ack": True, "retry_s": 30,
                                                          "spread_s": 10})),
            d(ack="yes", spread_s=10), d(retry_s=0, spread_s=10)]


def svim_phases(fallback, eps2=2000, mech2="psgrr"):
    """A svim campaign's phases (public split) with phase 2's `fallback` (spec §5.4)."""
    p2 = {"phase": 2, "mechanism": mech2, "eps_milli": eps2, "sample_rate_ppm": 500000,
          "params": {"l": 2}}
    if fallback is not MISSING:
        p2["fallback"] = fallback
    return [{"phase": 1, "mechanism": "psolh", "eps_milli": 2000, "sample_rate_ppm": 500000,
             "params": {"l": 1, "g": 5}}, p2]


MISSING = object()


def fallback_configs(m, set_):
    """svim's `fallback` (spec §5.4): valid ones, and every rule refused as `phases.fallback`."""
    grr, olh = {"mechanism": "psgrr", "params": {"l": 4}}, {"mechanism": "psolh", "params": {"l": 4, "g": 5}}

    def fb(value, **kw):
        return m(set_(["phases"], svim_phases(value, **kw)))

    def with_params(base, **params):
        return dict(base, params=dict(base["params"], **params))

    on_phase1 = svim_phases(MISSING)
    on_phase1[0]["fallback"] = dict(grr)
    cases = [fb(MISSING), fb(grr), fb(olh), fb(with_params(grr, l=65536)),
             fb(with_params(olh, g=65536, l=1)), fb(olh, mech2="psolh"),
             m(set_(["phases"], on_phase1)), fb(grr, mech2="srappor"),
             fb("psgrr"), fb(None), fb([grr]), fb(dict(grr, eps_milli=2000)), fb({"mechanism": "psgrr"}),
             fb(dict(grr, mechanism="olh")), fb(dict(grr, mechanism="grr")), fb(dict(grr, mechanism=10)),
             fb(dict(grr, params=[4])), fb(with_params(grr, g=5)), fb(dict(olh, params={"l": 4})),
             fb(dict(olh, params={"g": 5})), fb(dict(grr, params={})),
             fb(with_params(grr, l=0)), fb(with_params(grr, l=65537)), fb(with_params(grr, l=True)),
             fb(with_params(grr, l="4")), fb(with_params(grr, l=1.5)), fb(with_params(grr, l=-1)),
             fb(with_params(olh, g=1)), fb(with_params(olh, g=65537)), fb(with_params(olh, g=False))]
    # grr_ok at phase 2's eps: psgrr over d + 1 = 10^7 + 1 outputs fails at eps_milli 1
    cases.append(m(lambda d: (set_(["phases"], svim_phases(grr, eps2=1))(d),
                              set_(["domain", "size"], 10 ** 7)(d))))
    cases.append(m(lambda d: (set_(["phases"], svim_phases(grr, eps2=2000))(d),
                              set_(["domain", "size"], 10 ** 7)(d))))
    # listless over an integer domain of at most 2^24 items
    cases.append(m(lambda d: (set_(["phases"], svim_phases(grr))(d),
                              set_(["domain", "size"], 2 ** 24 + 1)(d))))
    cases.append(m(lambda d: (set_(["phases"], svim_phases(grr))(d),
                              set_(["domain", "size"], 2 ** 24)(d))))
    return cases


def numeric_configs(m, set_):
    """Numeric domains and mechanisms (spec §1.1, §3.2): valid `range`/`ranges` configs, each
    domain rule refused with its field, and numeric mechanisms only on numeric domains."""
    temp = {"type": "range", "lo": -400, "hi": 850, "resolution": 1, "decimals": 1}
    many = {"type": "ranges", "points": 1001,
            "metrics": [{"lo": 0, "hi": 100, "name": "humidity"}, {"lo": -5, "hi": 5, "decimals": 1}]}

    def num(domain, mech="duchi", params=None, eps=1000):
        def fn(doc):
            doc["domain"] = domain
            doc["phases"] = [{"phase": 1, "mechanism": mech, "eps_milli": eps,
                              "params": {} if params is None else params}]
        return m(fn)

    def with_(**kw):
        return dict(temp, **kw)

    return [
        num(temp), num(temp, "pm"), num(temp, "sw", {"bins": 256, "window": 131}),
        num(temp, "sw", {"bins": 256}), num(temp, "sw", {"window": 131}), num(temp, "sw"),
        num(temp, "hm", {"metrics": 1}), num(temp, "hm", {}), num(many, "hm", {"metrics": 2}),
        num(many, "hm", {"metrics": 3}), num(many, "hm", {}), num(many, "pm"),
        num(temp, "grr"), num(temp, "olh", {"g": 8}), num(temp, "sh", {"m": 64, "l": 1}),
        m(set_(["phases"], [{"phase": 1, "mechanism": "duchi", "eps_milli": 1000, "params": {}}])),
        num(with_(lo=850)), num(with_(lo=851)), num(with_(lo=10 ** 15 + 1)), num(with_(hi=-10 ** 15 - 1)),
        num(with_(lo=-10 ** 15, hi=10 ** 15, resolution=2 * 10 ** 15)), num(with_(lo=1.5)),
        num(with_(lo="0")), num(with_(lo=True)), num(with_(resolution=0)), num(with_(resolution=3)),
        num(with_(resolution=-1)), num(with_(resolution=2 * 10 ** 15 + 1)),
        num(with_(lo=0, hi=65535, resolution=1, decimals=0)), num(with_(lo=0, hi=65536, resolution=1)),
        num(with_(decimals=9)), num(with_(decimals=10)), num(with_(decimals=-1)), num(with_(decimals="1")),
        num(with_(name="t")), num(with_(name="")), num(with_(name="x" * 65)), num(with_(unit="°C")),
        num(with_(unit=5)), num({k: v for k, v in temp.items() if k != "resolution"}),
        num({k: v for k, v in temp.items() if k != "hi"}),
        num(dict(many, points=1)), num(dict(many, points=65536), "hm", {"metrics": 2}),
        num(dict(many, points=65537)), num(dict(many, points="9")), num(dict(many, metrics=[])),
        num(dict(many, metrics=[{"lo": 0, "hi": 1}] * 64), "hm", {"metrics": 64}),
        num(dict(many, metrics=[{"lo": 0, "hi": 1}] * 65)), num(dict(many, metrics={"lo": 0})),
        num(dict(many, metrics=[{"lo": 1, "hi": 1}, {"lo": 0, "hi": 1}])),
        num(dict(many, metrics=[5, {"lo": 0, "hi": 1}])), num({"type": "ranges", "metrics": many["metrics"]}),
    ]


def envelopes():
    """(payload, trusted keys, the field every party refuses it with, or None): the shared
    vectors of spec §5.1 (signatures.json)."""
    from ldpfleet.core.signing import PublicKey
    cases = json.loads((ROOT / "protocol_spec" / "v2" / "vectors" / "signatures.json").read_text())
    return [(c["payload"].encode(), [PublicKey.from_doc(d) for d in c["trusted"]], c["error"])
            for c in cases["verify"]]


def test_rules_match_the_aggregator(tmp_path):
    checks = mutated_configs()
    envs = envelopes()
    got = run_rules(tmp_path, {"verify": [[p.hex(), [k.to_doc() for k in keys]] for p, keys, _ in envs],
                               "check": checks})
    want_verify = [aggregator_field(campaign_config.verify, p, keys) for p, keys, _ in envs]
    assert want_verify == [f for _, _, f in envs]  # the cases test what they claim
    assert got["verify"] == want_verify
    want_check = [aggregator_field(campaign_config.check_config, doc, now) for doc, now in checks]
    assert None in want_check and len(set(want_check)) > 10
    assert want_check.count("phases.fallback") >= 25  # svim's fallback rules (spec §5.4)
    assert want_check.count("schedule") >= 15  # recurring campaigns (spec §3.4)
    assert want_check.count("params.levels") >= 10  # strings domains (spec §3.5)
    assert got["check"] == want_check


# --- real device processes against a private broker ----------------------------------------

PRIOR_LEDGER = {"spent_milli": 1500, "closed": [],
                "reports": {"7:1": [3, 1500, "0202010007000000030000000000000000000000"]}}
PRIOR_GEN = 3


def ledger_files(state):
    return {n: (state / n).read_bytes() for n in device_runner.LEDGER_FILES if (state / n).exists()}


def refusal_cases():
    good = config_doc("cpu-load")
    key = SIGNING_KEY

    def body_without(field):
        doc = copy.deepcopy(good)
        del doc[field]
        return envelope(campaign_config.canonical(doc))

    expired = dict(copy.deepcopy(good), not_before=1_000_000, not_after=2_000_000)
    other = dict(copy.deepcopy(good), protocol=1)  # v1 is retired (spec §0)
    tampered = json.loads(campaign_config.sign(good, key))
    tampered["body"] = tampered["body"].replace('"g":8', '"g":9')
    return {
        "unsigned": (campaign_config.canonical(good).encode(), "envelope"),
        "unknown-key": (campaign_config.sign(good, OTHER_KEY), "kid"),
        "hmac-v1": (hmac_envelope(campaign_config.canonical(good)), "envelope"),
        "spliced-signature": (json.dumps(dict(json.loads(campaign_config.sign(good, key)),
                              sig=json.loads(campaign_config.sign(config_doc("other"), key))["sig"])).encode(),
                              "sig"),
        "other-campaign": (campaign_config.sign(config_doc("other"), key), "campaign"),
        "flipped-byte": (json.dumps(tampered).encode(), "sig"),
        "expired": (campaign_config.sign(expired, key), "validity"),
        "malformed-json": (b'{"body": "{", "sig": ', "envelope"),
        "malformed-body": (body_without("salt"), "salt"),
        "other-protocol": (envelope(campaign_config.canonical(other)), "protocol"),
        "eps-above-cap": (campaign_config.sign(config_doc("cpu-load", eps_milli=3000), key), "eps_cap"),
        "bad-params": (campaign_config.sign(config_doc("cpu-load", params={"g": 1}), key),
                       "phases.params"),
    }


def make_state(tmp_path, eps_cap_milli=2000):
    state = device_runner.prepare_device(tmp_path / "dev", "dev-1", SIGNING_KEY, value=5,
                                         campaign="cpu-load", eps_cap_milli=eps_cap_milli,
                                         lifetime_budget_milli=50000)
    device_runner.write_ledger(state, PRIOR_LEDGER, PRIOR_GEN)
    return state


@pytest.mark.parametrize("case", sorted(refusal_cases()))
def test_device_refuses_bad_config(mosquitto, tmp_path, case):
    payload, field = refusal_cases()[case]
    state = make_state(tmp_path)
    before = ledger_files(state)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", payload)
        proc = run_device(state, "127.0.0.1", mosquitto.port, wait=40)
        assert proc.returncode == device_runner.EXIT_REFUSED, proc.stdout
        assert "refused config %s:" % field in proc.stdout, proc.stdout
        assert "spent" not in proc.stdout and "published" not in proc.stdout
        assert collector.barrier(mosquitto.port) == []
    finally:
        collector.close()
    assert ledger_files(state) == before


def test_device_accepts_valid_config(mosquitto, tmp_path):
    doc = config_doc("cpu-load")
    state = make_state(tmp_path)
    collector = ReportCollector(mosquitto.port)
    try:
        collector.publish("ldp/cpu-load/config", campaign_config.sign(doc, SIGNING_KEY))
        proc = run_device(state, "127.0.0.1", mosquitto.port, wait=40)
        assert proc.returncode == device_runner.EXIT_DONE, proc.stdout
        reports = collector.barrier(mosquitto.port)
    finally:
        collector.close()
    assert [t for t, _ in reports] == ["ldp/cpu-load/r/dev-1"]
    report = reports[0][1]
    mech = make_mechanism("olh", 2000, 64, salt=doc["salt"], campaign_id=doc["campaign_id"], phase=1, g=8)
    mech.check(report)
    nonce = int.from_bytes(report[8:12], "little")  # drawn from the OS RNG (spec §3)
    ledger = read_ledger(state)
    assert ledger["spent_milli"] == PRIOR_LEDGER["spent_milli"] + 2000
    assert ledger["reports"]["%d:1" % doc["campaign_id"]] == [nonce, 2000, report.hex()]
    assert max(g for g, _ in device_runner.ledger_generations(state)) == PRIOR_GEN + 1
    assert ledger["reports"]["7:1"] == PRIOR_LEDGER["reports"]["7:1"]
