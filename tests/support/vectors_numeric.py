"""The vectors of the numeric mechanisms (spec §1.1, §3.3): reports_{duchi,pm,hm,sw}.json,
parse_*.json and numeric_grid.json, from the plain-Python reference (`reference_report`,
`numeric.grid_point`).

Report cases carry the mechanism's description (`domain_size` = N grid points), `value` (the
grid point; hm: the list of the device's grid points), `nonce`, `words`, `report_hex`. Words sit
on both sides of every threshold and bucket edge the value's report depends on.
numeric_grid.json: {"domain", "metric", "reading" (a JSON value; with "float": "nan" | "inf" |
"-inf" the reading is that float), "x"}.
"""
import math

from ldpfleet.core import protocol
from ldpfleet.core.mechanisms import numeric
from ldpfleet.core.mechanisms.base import W
from ldpfleet.core.mechanisms.duchi import DuchiMechanism
from ldpfleet.core.mechanisms.hm import HmMechanism
from ldpfleet.core.mechanisms.pm import PmMechanism
from ldpfleet.core.mechanisms.sw import SwMechanism

from .vectors import (bucket_first, header_parse_cases, parse_case, report_case, set_body_byte,
                      word_stream)


def points(n: int) -> list:
    """Grid points at both ends, the middle and next to them."""
    return sorted({0, 1 % n, n // 2, n - 2, n - 1})


def duchi_cases():
    reports, parses = [], []
    configs = [(1000, 2, 1), (500, 1251, 0xFFFFFFFF), (4000, 65536, 7), (1, 3, 8), (64000, 101, 9),
               (2500, 17, 10)]
    seq = 0
    for eps_milli, n, cid in configs:
        mech = DuchiMechanism(eps_milli, n, salt=3, campaign_id=cid)
        for x in points(n):
            t = mech.threshold(x)
            for w0 in (t - 1, t, 0, W - 1):
                seq += 1
                reports.append(report_case(mech, x, [w0], seq))
        valid = mech.reference_report(n - 1, [0], 4)
        parses += header_parse_cases(mech, valid, [("y", set_body_byte(valid, 0, 2)),
                                                   ("y", set_body_byte(valid, 0, 0xFF))])
        parses.append(parse_case(mech, set_body_byte(valid, 0, 0)))
    return reports, parses


def window_words(mech, p: int, case: int) -> list:
    """(w0, w1) of variant `case` at position p: w0 at T - 1 / T / the extremes, w1 at the edges
    of bucket(., L) and of bucket(., D) around p (r = p - 1, p)."""
    t, L, D = mech.t_in, mech.width, mech.span
    w0 = [t - 1, t, 0, W - 1][case % 4]
    w1 = [0, W - 1, bucket_first(min(p, D - 1), D), max(bucket_first(min(p, D - 1), D) - 1, 0),
          bucket_first(L - 1, L), max(bucket_first(L // 2, L) - 1, 0), 0x9E3779B9][case % 7]
    return [w0, w1]


def window_cases(mechs, seq: int):
    reports, parses = [], []
    for mech in mechs:
        n = mech.domain_size
        for x in points(n):
            p = x * mech.mul // mech.div
            for case in range(8):
                seq += 1
                reports.append(report_case(mech, x, window_words(mech, p, case + x), seq))
        valid = mech.reference_report(n - 1, [W - 1, W - 1], 4)
        size = mech.out_bytes
        top = (mech.cells - 1).to_bytes(size, "little")
        bad = mech.cells.to_bytes(size, "little")
        parses += header_parse_cases(mech, valid, [("y", valid[:12] + bad),
                                                   ("y", valid[:12] + b"\xff" * size)])
        parses.append(parse_case(mech, valid[:12] + top))
    return reports, parses


def pm_cases():
    mechs = [PmMechanism(eps, n, salt=1, campaign_id=cid) for eps, n, cid in
             [(1000, 1251, 21), (2000, 2, 22), (500, 65536, 23), (8000, 3, 24), (1, 17, 25),
              (64000, 101, 26)]]
    return window_cases(mechs, 0)


def sw_cases():
    mechs = [SwMechanism(eps, n, salt=2, campaign_id=cid, **params) for eps, n, cid, params in
             [(1000, 65536, 31, {"bins": 256}), (500, 101, 32, {}), (4000, 1251, 33, {}),
              (2000, 2, 34, {}), (1000, 1000, 35, {"bins": 1000, "window": 2000}),
              (8000, 4097, 36, {"bins": 300, "window": 1})]]
    return window_cases(mechs, 1000)


def hm_words(mech, xs, n_case: int, seq: int) -> list:
    """hm words: sampling words at bucket edges, each entry's choice at T_hm - 1 / T_hm and its
    w0 at its own Duchi or window threshold."""
    k, d = mech.sampled, mech.metrics
    specials = []
    for i in range(k):
        r = (n_case + i) % (d - i)
        specials.append((i, [bucket_first(r, d - i), max(bucket_first(r + 1, d - i) - 1, 0)][
            (n_case + i) % 2] if d > 1 else [0, W - 1][n_case % 2]))
    words = word_stream(seq * 4099 + mech.eps_milli, mech.random_words, specials)
    chosen = mech.sampled_metrics(words)
    for i, a in enumerate(chosen):
        tc = mech.t_choice
        wc = [tc - 1, tc, 0, W - 1][(n_case + i) % 4] if tc else [0, W - 1][(n_case + i) % 2]
        pm_side = wc < tc
        t0 = mech.t_in if pm_side else mech.base + mech.slope * xs[a]
        w0 = [t0 - 1, t0, 0, W - 1][(n_case // 2 + i) % 4]
        p = xs[a] * mech.u
        w1 = [bucket_first(min(p, mech.span - 1), mech.span), 0, W - 1,
              bucket_first(mech.width - 1, mech.width)][(n_case + 3 * i) % 4]
        words[k + 3 * i:k + 3 * i + 3] = [wc, w0, w1]
    return words


def hm_cases():
    reports, parses = [], []
    configs = [(1000, 1001, 1), (1000, 101, 10), (500, 1251, 1), (8000, 65536, 3), (6000, 2, 5),
               (64000, 17, 64), (611, 3, 2)]
    seq = 0
    for eps_milli, n, d in configs:
        mech = HmMechanism(eps_milli, n, salt=4, campaign_id=40 + d, metrics=d)
        for n_case in range(8):
            xs = [points(n)[(n_case + a) % len(points(n))] for a in range(d)]
            seq += 1
            value = xs[0] if d == 1 and n_case % 2 else xs
            reports.append(report_case(mech, value, hm_words(mech, xs, n_case, seq), seq))
        valid = bytes.fromhex(reports[-1]["report_hex"])
        errors = [("attr", set_body_byte(valid, 0, d)), ("attr", set_body_byte(valid, 0, 0xFF)),
                  ("kind", set_body_byte(valid, 1, 2))]
        if mech.sampled > 1:
            errors.append(("attr", set_body_byte(valid, 6, valid[12])))
        duchi = set_body_byte(valid, 1, 0)
        errors.append(("y", duchi[:14] + (2).to_bytes(4, "little") + duchi[18:]))
        if mech.t_choice:
            pm = set_body_byte(valid, 1, 1)
            errors.append(("y", pm[:14] + mech.cells.to_bytes(4, "little") + pm[18:]))
            parses.append(parse_case(mech, pm[:14] + (mech.cells - 1).to_bytes(4, "little")
                                     + pm[18:]))
        else:
            errors.append(("kind", set_body_byte(valid, 1, 1)))
        parses += header_parse_cases(mech, valid, errors)
        parses.append(parse_case(mech, duchi[:14] + (1).to_bytes(4, "little") + duchi[18:]))
    return reports, parses


GRID_DOMAINS = [
    {"type": "range", "lo": -400, "hi": 850, "resolution": 1, "decimals": 1},
    {"type": "range", "lo": 3000, "hi": 4200, "resolution": 10, "decimals": 3},
    {"type": "range", "lo": 0, "hi": 65535, "resolution": 1},
    {"type": "range", "lo": -10 ** 15, "hi": 10 ** 15, "resolution": 2 * 10 ** 15},
    {"type": "ranges", "points": 1001, "metrics": [{"lo": 0, "hi": 100, "name": "humidity"},
                                                   {"lo": -12345, "hi": 67890, "decimals": 4}]},
]
READINGS = [0, 1, -1, 23.7, -40.0, 85.0, -40.05, 85.05, 21.449999, 21.45, 21.46, 3.3, 3.2951,
            4.2049, 4.205, 1e300, -1e300, 10 ** 400, -(10 ** 400), 50, 99.95, 100.0, 0.05, 0.049,
            -1.2345, 6.789, 12345.678, None, "23.7", True, False, [1], {"v": 1},
            {"float": "nan"}, {"float": "inf"}, {"float": "-inf"}]


def reading_value(case_reading):
    if isinstance(case_reading, dict) and set(case_reading) == {"float"}:
        return float(case_reading["float"])
    return case_reading


def grid_vectors() -> list:
    out = []
    for dom in GRID_DOMAINS:
        domain = numeric.NumericDomain(dom)
        for metric in range(len(domain.metrics)):
            for r in READINGS:
                case = {"domain": dom, "metric": metric}
                if isinstance(r, dict) and set(r) == {"float"}:
                    case["reading"], case["float"] = None, r["float"]
                else:
                    case["reading"] = r
                x = domain.grid_point(reading_value(r if "float" not in case else
                                                    {"float": case["float"]}), metric)
                case["x"] = x
                out.append(case)
    assert any(c["x"] == 0 for c in out) and any(c.get("float") == "nan" for c in out)
    assert math.isfinite(sum(c["x"] for c in out))
    return out


assert protocol.MECHANISM_IDS["duchi"] == 13
