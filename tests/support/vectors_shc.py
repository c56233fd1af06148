"""The `shc` vectors (spec §3 id 12, §3.1): reports_shc.json, parse_shc.json and
thresholds_shc.json, from the plain-Python reference (`ShcMechanism.reference_phase1/2`,
`protocol.shc_thresholds`).

Report cases carry the mechanism's description as every vector does (`mechanism`, `eps_milli`,
`domain_size`, `salt`, `campaign_id`, `phase`, `params`), `value`, `nonce`, `words` and
`report_hex`, plus the campaign's pair `eps1_milli`, `eps2_milli` and a `case` label:
- phase 1: `value` the set of item keys, `words` w0..w3, and `x` the bit the device keeps in
  its ledger (1 = +1);
- phase 2: `eps_milli` = eps2, `params` also `eps1_milli`; `value` {"t", "y1", "x"} (y1 the
  phase-1 sign byte, x the ledger bit; 1 = +1), `words` [w0]; `thresholds` {T1, T_shc_a,
  T_shc_b} for reference.
"""
from ldpfleet.core import protocol
from ldpfleet.core.mechanisms.base import W
from ldpfleet.core.mechanisms.sh import HALF
from ldpfleet.core.mechanisms.shc import ShcMechanism

from .vectors import bucket_first, header_parse_cases, parse_case, set_body_byte, word_stream

CONFIGS = [
    dict(eps1=500, eps2=1500, domain_size=16, salt=0x1234, campaign_id=51, m=4, l=1),
    dict(eps1=1000, eps2=1000, domain_size=1000, salt=0xFFFFFFFF, campaign_id=52, m=65536, l=3),
    dict(eps1=2000, eps2=6000, domain_size=1 << 20, salt=7, campaign_id=53, m=1000, l=2),
    dict(eps1=1, eps2=1, domain_size=5, salt=0, campaign_id=54, m=2, l=2),
]


def mechanisms(cfg):
    """(phase-1, phase-2) ShcMechanism of one CONFIGS entry."""
    common = dict(domain_size=cfg["domain_size"], salt=cfg["salt"],
                  campaign_id=cfg["campaign_id"], m=cfg["m"], l=cfg["l"])
    return (ShcMechanism(cfg["eps1"], phase=1, **common),
            ShcMechanism(cfg["eps2"], phase=2, eps1_milli=cfg["eps1"], **common))


def phase1_sets(mech):
    """(label, keys): sizes 0, < l, = l, > l; keys at the domain's ends and outside it."""
    d, l = mech.domain_size, mech.l
    items = [3, 0, d - 1, 7 % d, 1]
    short = [("short", items[:l - 1])] if l > 1 else []
    return [("empty", [])] + short + [
        ("exact", items[:l]), ("long", items[:l + 2]), ("outside", [0xDEADBEEF]),
        ("long-outside", [0xFFFFFFFF] + items[:l])]


def phase1_words(mech, keys, n):
    """Words of case variant n for a set: w0 in the real or the dummy slot (bucket edges), w1 at
    row edges, w2 at T1 - 1 / T1 (y1 == x or not), w3 at 2^31 - 1 / 2^31 (dummy x = +1 / -1)."""
    big = max(mech.l, len(keys))
    s = len(keys)
    w0 = [0, W - 1, bucket_first(big - 1, big), max(bucket_first(big - 1, big) - 1, 0),
          bucket_first(min(s, big - 1), big)][n % 5]
    w1 = [0, W - 1, bucket_first(mech.m - 1, mech.m), 0x9E3779B9][n % 4]
    w2 = [mech.t_rr - 1, mech.t_rr, 0, W - 1][(n // 2) % 4]
    w3 = [HALF - 1, HALF, 0, W - 1][n % 4]
    return [w0, w1, w2, w3]


def shc_report_cases() -> list:
    cases = []
    seq = 0
    for cfg in CONFIGS:
        mech1, mech2 = mechanisms(cfg)
        pair = {"eps1_milli": cfg["eps1"], "eps2_milli": cfg["eps2"]}
        kept = []
        for label, keys in phase1_sets(mech1):
            for n in range(4):
                words = phase1_words(mech1, keys, n + len(label))
                seq += 1
                report, x = mech1.reference_phase1(keys, words, seq)
                cases.append(dict(mech1.describe(), case="phase1 " + label, value=keys,
                                  nonce=seq, words=words, report_hex=report.hex(), x=x, **pair))
                kept.append((report, x))
        t1, a, b = mech2.t_rr, mech2.t_a, mech2.t_b
        w0s = [a - 1, a, b - 1, b, 0, W - 1]
        for n, (report, x) in enumerate(kept[:8]):
            t = int.from_bytes(report[12:16], "little")
            for y1 in (0, 1):  # y1 == x and y1 != x for every memo
                for w0 in (w0s[(2 * n + y1) % 6], w0s[(2 * n + y1 + 3) % 6]):
                    seq += 1
                    value = {"t": t, "y1": y1, "x": x}
                    out = mech2.reference_phase2(value, [w0], seq)
                    cases.append(dict(mech2.describe(), case="phase2 y1%sx" % ("==" if y1 == x
                                                                              else "!="),
                                      value=value, nonce=seq, words=[w0],
                                      report_hex=out.hex(), thresholds={
                                          "T1": t1, "T_shc_a": a, "T_shc_b": b}, **pair))
        for w0 in (a - 1, a, b - 1, b):  # the row's ends and every threshold edge
            for y1, x in ((0, 0), (1, 1), (0, 1), (1, 0)):
                seq += 1
                value = {"t": mech2.m - 1 if w0 % 2 else 0, "y1": y1, "x": x}
                out = mech2.reference_phase2(value, [w0], seq)
                cases.append(dict(mech2.describe(), case="phase2 edge", value=value, nonce=seq,
                                  words=[w0], report_hex=out.hex(),
                                  thresholds={"T1": t1, "T_shc_a": a, "T_shc_b": b}, **pair))
    return cases


def shc_parse_cases() -> list:
    parses = []
    for cfg in CONFIGS[:3]:
        for mech in mechanisms(cfg):
            if mech.phase == 1:
                valid = mech.reference_phase1([3, 1], word_stream(mech.campaign_id, 4), 9)[0]
            else:
                valid = mech.reference_phase2({"t": mech.m - 1, "y1": 1, "x": 0}, [12345], 9)
            m = mech.m
            errors = [("t", valid[:12] + m.to_bytes(4, "little") + valid[16:]),
                      ("t", valid[:12] + (W - 1).to_bytes(4, "little") + valid[16:]),
                      ("sign", set_body_byte(valid, 4, 2)), ("sign", set_body_byte(valid, 4, 0xFF))]
            parses += header_parse_cases(mech, valid, errors)
            edge = valid[:12] + (m - 1).to_bytes(4, "little") + b"\x00"
            parses += [parse_case(mech, edge), parse_case(mech, set_body_byte(edge, 4, 1))]
    return parses


def shc_cases():
    return shc_report_cases(), shc_parse_cases()


SHC_EPS = [1, 2, 500, 1000, 1500, 2000, 3000, 8000, 20000, 22181, 44362, 63999]


def shc_threshold_vectors() -> list:
    """thresholds_shc.json: T1, T_shc_a, T_shc_b, p2's numerator T1 A + (W - T1) B and shc_ok
    over a grid of (eps1, eps2) including eps = 1 and eps1 + eps2 = 64000; pairs outside the
    ranges have shc_ok false and no thresholds."""
    rows = []
    pairs = [(e1, e2) for e1 in SHC_EPS for e2 in SHC_EPS if e1 + e2 <= protocol.MAX_EPS_MILLI]
    pairs += [(1, 63999), (63999, 1), (32000, 32000), (13, 63987)]
    for e1, e2 in pairs:
        t1, a, b = protocol.shc_thresholds(e1, e2)
        rows.append({"eps1_milli": e1, "eps2_milli": e2,
                     "E2": protocol.exp_lower(e1 + e2, 1000), "T1": t1, "T_shc_a": a,
                     "T_shc_b": b, "p2_num": t1 * a + (W - t1) * b,
                     "shc_ok": protocol.shc_ok(e1, e2)})
    for e1, e2 in [(0, 1000), (1000, 0), (32000, 32001), (64000, 1), (1, 64000)]:
        rows.append({"eps1_milli": e1, "eps2_milli": e2, "shc_ok": protocol.shc_ok(e1, e2)})
    return rows
