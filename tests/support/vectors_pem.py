"""PEM vectors (protocol_spec/v2 §3.5): reports_pem.json / parse_pem.json (through
`vectors.CASES["pem"]`) and strings.json (config cases for strings domains, codes of values,
their phase-2 keys and elements, groups of device ids, prefix keys), from the reference rules in
ldpfleet.core.strings_domain and ldpfleet.core.mechanisms.pem.

A report case's `value` is {"device": id, "value": v} (the report depends on both); it also
shows the device's `group`, the `code_hex` of v, `lambda` (the group's level) and `key_lambda`.
"""
import copy

from ldpfleet.core import config as campaign_config
from ldpfleet.core import strings_domain as sd
from ldpfleet.core.errors import ConfigError
from ldpfleet.core.mechanisms.base import W
from ldpfleet.core.mechanisms.pem import PemMechanism

from .vectors import parse_case, parse_cases_for, report_case

NB, NA = 1790000000, 1790000000 + 30 * 86400
DEVICES = ["dev-0", "dev-1", "board_17", "esp32-a4cf12", "fleet/0042", "fleet/0043", "x",
           "sensor-north-7", "gw_01", "fleet/9999"]
VALUES = ["hello", "", "héllo wörld", "ab", "exactly8", "longer than the maximum", None, 42,
          ["a"], "日本語テキスト", "a\u0000b", "\U0001f600 smile", True, 3.5]


def mechanisms():
    """(eps_milli, max_len, g, kp, levels, salt) of the report vectors."""
    return [(3000, 8, 21, 16, [8, 16, 24, 32, 40, 48, 56, 64], 0xFFFFFFF0),
            (1000, 4, 4, 1024, [3, 12, 20, 32], 0),
            (500, 6, 2, 1, [48], 0xA5A5A5A5),
            (8000, 16, 2982, 7, [16, 40, 64, 128], 12),
            (2000, 3, 65536, 65536 // 65536, [1, 2, 3, 7, 8, 13, 24], 0xFFFFFFFF)]


def pem_mechanism(eps_milli, max_len, g, kp, levels, salt):
    return PemMechanism(eps_milli, W - 1, g=g, kp=kp, levels=levels, salt=salt,
                        campaign_id=salt ^ 0x2222, phase=1)


def pem_report_case(mech, device, value, words, nonce):
    case = report_case(mech, {"device": device, "value": value}, words, nonce)
    group = mech.group(device)
    code = sd.code_of(value, mech.max_len)
    case.update(device=device, group=group, code_hex=code.hex(), **{
        "lambda": mech.levels[group], "key_lambda": sd.prefix_key(code, mech.levels[group])})
    return case


def pem_cases():
    reports, parses = [], []
    nonce = 22000
    for spec in mechanisms():
        mech = pem_mechanism(*spec)
        t = mech.t_keep
        words = [[0, 0, 0], [W - 1, t - 1, W - 1], [123456789, t, 0], [0xDEADBEEF, W - 1, W - 1],
                 [2 ** 31, t, W // 2], [7, t - 1, 1]]
        for i, device in enumerate(DEVICES):
            for j in range(2):
                value = VALUES[(2 * i + j) % len(VALUES)]
                nonce += 1
                reports.append(pem_report_case(mech, device, value, words[(i + j) % len(words)],
                                               nonce))
        valid = mech.reference_report({"device": "dev-1", "value": "hello"},
                                       [W - 1, mech.t_keep, W - 1], 3)
        kp = mech.kp
        body_errors = [("seed_index", valid[:12] + kp.to_bytes(4, "little") + valid[16:]),
                       ("seed_index", valid[:12] + b"\xff\xff\xff\xff" + valid[16:])]
        if mech.g < 65536:
            body_errors.append(("y", valid[:16] + mech.g.to_bytes(2, "little")))
        parses += parse_cases_for(mech, valid, body_errors)
        edge = valid[:12] + (kp - 1).to_bytes(4, "little") + (mech.g - 1).to_bytes(2, "little")
        parses.append(parse_case(mech, edge))
    return reports, parses


# --- strings.json ---------------------------------------------------------------------------

def base_config() -> dict:
    """A valid PEM campaign: strings of at most 8 bytes, byte levels, 90 % in phase 1."""
    return {"type": "config", "protocol": 2, "campaign": "crash-sigs", "campaign_id": 287454020,
            "salt": 3735928559, "not_before": NB, "not_after": NA,
            "domain": {"type": "strings", "max_len": 8}, "metric": "crash_sig",
            "delivery": {"ack": True, "retry_s": 30, "retry_max_s": 3600},
            "phases": [{"phase": 1, "mechanism": "pem", "eps_milli": 3000,
                        "sample_rate_ppm": 900000,
                        "params": {"g": 21, "kp": 1024, "levels": [8, 16, 24, 32, 40, 48, 56, 64]}},
                       {"phase": 2, "mechanism": "psgrr", "eps_milli": 3000,
                        "sample_rate_ppm": 900000, "params": {"l": 1}}]}


def _p1(**kw):
    return lambda d: d["phases"][0]["params"].update(kw)


def _variant(name, edit):
    doc = copy.deepcopy(base_config())
    edit(doc)
    try:
        campaign_config.check_config(doc, now=NB + 100)
        error = None
    except ConfigError as e:
        error = e.field
    return {"name": name, "now": NB + 100, "body": doc, "error": error}


def _dom(**kw):
    return lambda d: d["domain"].update(kw)


def config_cases():
    ph = lambda i, **kw: (lambda d: d["phases"][i].update(kw))  # noqa: E731
    cases = [
        ("valid", lambda d: None),
        ("valid-max-len-1", lambda d: (_dom(max_len=1)(d), _p1(levels=[1, 4, 8])(d))),
        ("valid-max-len-64-one-level", lambda d: (_dom(max_len=64)(d), _p1(levels=[512])(d))),
        ("valid-64-levels", lambda d: (_dom(max_len=8)(d), _p1(levels=list(range(1, 65)))(d))),
        ("valid-g-2-kp-1", _p1(g=2, kp=1)),
        ("valid-g-65536-kp-65536", _p1(g=65536, kp=65536)),
        ("max-len-0", _dom(max_len=0)),
        ("max-len-65", _dom(max_len=65)),
        ("max-len-string", _dom(max_len="8")),
        ("max-len-bool", _dom(max_len=True)),
        ("max-len-missing", lambda d: d["domain"].pop("max_len")),
        ("pem-on-int-domain", lambda d: d.update(domain={"type": "int", "size": 100})),
        ("pem-on-str-domain", lambda d: d.update(domain={"type": "str", "items": ["a", "b"]})),
        ("strings-olh-phase-1", ph(0, mechanism="olh", params={"g": 21})),
        ("strings-one-phase", lambda d: d["phases"].pop()),
        ("strings-phase-2-srappor", ph(1, mechanism="srappor", params={"l": 1})),
        ("strings-psgrr-phase-1", ph(0, mechanism="psgrr", params={"l": 1})),
        ("psgrr-l-2", ph(1, params={"l": 2})),
        ("psgrr-l-bool", ph(1, params={"l": True})),
        ("psgrr-l-float", ph(1, params={"l": 1.0})),
        ("psgrr-no-params", lambda d: d["phases"][1].pop("params")),
        ("no-sample-rate", lambda d: [p.pop("sample_rate_ppm") for p in d["phases"]]),
        ("levels-missing", lambda d: d["phases"][0]["params"].pop("levels")),
        ("kp-missing", lambda d: d["phases"][0]["params"].pop("kp")),
        ("g-missing", lambda d: d["phases"][0]["params"].pop("g")),
        ("extra-param", _p1(l=1)),
        ("g-1", _p1(g=1)),
        ("g-65537", _p1(g=65537)),
        ("g-bool", _p1(g=True)),
        ("kp-0", _p1(kp=0)),
        ("kp-65537", _p1(kp=65537)),
        ("levels-empty", _p1(levels=[])),
        ("levels-last-short", _p1(levels=[8, 16, 56])),
        ("levels-last-long", _p1(levels=[8, 16, 72])),
        ("levels-not-increasing", _p1(levels=[8, 8, 64])),
        ("levels-decreasing", _p1(levels=[16, 8, 64])),
        ("levels-zero", _p1(levels=[0, 8, 64])),
        ("levels-65", lambda d: (_dom(max_len=64)(d), _p1(levels=list(range(1, 65)) + [512])(d))),
        ("levels-not-list", _p1(levels=64)),
        ("levels-float", _p1(levels=[8.0, 64])),
        ("levels-bool", _p1(levels=[True, 64])),
        ("unknown-domain-type", lambda d: d.update(domain={"type": "text", "max_len": 8})),
    ]
    return [_variant(name, edit) for name, edit in cases]


def code_cases():
    out = []
    for max_len in (1, 4, 8, 16):
        for value in VALUES + ["ñ", "aé", "abc€", "€€€€€€"]:
            code = sd.code_of(value, max_len)
            out.append({"max_len": max_len, "value": value, "code_hex": code.hex(),
                        "string": sd.code_string(code), "key": sd.code_key(code),
                        "phase2_set": sd.phase2_element(code)})
    return out


def group_cases():
    out = []
    for salt in (0, 3735928559, 0xFFFFFFFF):
        for groups in (1, 2, 7, 8, 64):
            for device in DEVICES:
                out.append({"device": device, "salt": salt, "groups": groups,
                            "group": sd.group_of(device, salt, groups)})
    return out


def prefix_cases():
    out = []
    for value, max_len in (("hello", 8), ("héllo wörld", 16), ("", 4), ("\xff\x80z", 4)):
        code = sd.code_of(value, max_len)
        for bits in sorted({1, 2, 3, 7, 8, 9, 12, 15, 16, 17, 8 * max_len - 1, 8 * max_len}):
            out.append({"code_hex": code.hex(), "bits": bits, "key": sd.prefix_key(code, bits)})
    return out


def phase2_cases():
    """A PEM campaign's phase-2 bodies (of base_config()): 1..1024 distinct u32 candidates,
    else refused with field `candidates` (spec §3.5)."""
    doc = base_config()
    keys = [sd.code_key(sd.code_of("w%d" % i, 8)) for i in range(1025)]
    cases = [("one", keys[:1]), ("max-1024", keys[:1024]), ("empty", []),
             ("too-many-1025", keys), ("duplicate", [keys[0], keys[1], keys[0]]),
             ("negative", [-1]), ("above-u32", [1 << 32]), ("string", ["abc"]),
             ("bool", [True]), ("missing", None)]
    out = []
    for name, cand in cases:
        body = campaign_config.make_phase2(doc)
        if cand is not None:
            body["candidates"] = cand
        try:
            sd.check_pem_phase2(body)
            error = None
        except ConfigError as e:
            error = e.field
        out.append({"name": name, "config": doc, "body": body, "error": error})
    return out


def strings_vectors():
    return {"configs": config_cases(), "codes": code_cases(), "groups": group_cases(),
            "prefix_keys": prefix_cases(), "phase2": phase2_cases()}
