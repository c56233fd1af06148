"""The cases of the wire-contract vectors (protocol_spec/v2/vectors/reports_*.json and
parse_*.json), written by tools/gen_vectors.py from the plain-Python reference
implementations; `CASES[name]() -> (report cases, parse cases)`.

report case: the mechanism's description, the value, the header nonce, the random words and
the report they give; parse case: the description, a report and the field it is rejected
for (None: accepted).
"""
import struct

from ldpfleet.core import protocol
from ldpfleet.core.mechanisms.base import W, Mechanism, bitmap_bytes
from ldpfleet.core.mechanisms.cms import CmsMechanism
from ldpfleet.core.mechanisms.flh import FlhMechanism
from ldpfleet.core.mechanisms.grr import GrrMechanism
from ldpfleet.core.mechanisms.hcms import HcmsMechanism
from ldpfleet.core.mechanisms.lcm import LcmMechanism
from ldpfleet.core.mechanisms.olh import G_MAX, LocalHashMechanism, OlhMechanism
from ldpfleet.core.mechanisms.oue import OueMechanism
from ldpfleet.core.mechanisms.sh import HALF, ShMechanism
from ldpfleet.core.mechanisms.srappor import SrapporMechanism


def word_stream(seed: int, count: int, specials=()) -> list:
    """Deterministic words for vectors: a fixed LCG stream with `specials` = [(index, word)]."""
    x = seed & 0xFFFFFFFF
    out = []
    for _ in range(count):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(x ^ (x >> 13))
    for i, w in specials:
        out[i] = w
    return out


def report_case(mech: Mechanism, value, words, nonce: int) -> dict:
    """A report vector: `value` encoded from `words` with header `nonce` by `reference_report`."""
    return dict(mech.describe(), value=value, nonce=nonce, words=words,
                report_hex=mech.reference_report(value, words, nonce).hex())


def parse_case(mech: Mechanism, report: bytes, error=None) -> dict:
    """A parse vector: `report` is rejected naming field `error`, or accepted (None)."""
    return dict(mech.describe(), report_hex=report.hex(), error=error)


def set_body_byte(report: bytes, offset: int, value: int) -> bytes:
    """`report` with body byte `offset` replaced by `value`."""
    b = bytearray(report)
    b[protocol.HEADER_SIZE + offset] = value
    return bytes(b)


def parse_cases(mech: Mechanism, valid: bytes, header_edits, body_errors) -> list:
    """Parse vectors: the valid report, then wrong sizes, each header edit
    `(field, byte offset, value)`, a wrong campaign id, and `body_errors` [(field, report)]."""
    def with_byte(pos, value):
        b = bytearray(valid)
        b[pos] = value
        return bytes(b)

    bad = [("size", valid[:-1]), ("size", valid + b"\x00"), ("size", valid[:protocol.HEADER_SIZE])]
    bad += [(field, with_byte(pos, value)) for field, pos, value in header_edits]
    bad.append(("campaign_id",
                valid[:4] + struct.pack("<I", (mech.campaign_id + 1) % W) + valid[8:]))
    bad += list(body_errors)
    return [parse_case(mech, valid)] + [parse_case(mech, r, field) for field, r in bad]


def other_mechanism_id(mech: Mechanism) -> int:
    """A registered mechanism id that is not `mech`'s."""
    return protocol.MECHANISM_IDS[mech.name] % 9 + 1


def parse_cases_for(mech: Mechanism, valid: bytes, body_errors) -> list:
    """Standard parse vectors (GRR, OLH, FLH, OUE): one bad value per header field."""
    edits = [("version", 0, 1), ("mechanism", 1, other_mechanism_id(mech)),
             ("phase", 2, 3 - mech.phase), ("phase", 2, 0), ("flags", 3, 1)]
    return parse_cases(mech, valid, edits, body_errors)


def header_parse_cases(mech: Mechanism, valid: bytes, body_errors) -> list:
    """Parse vectors of the sketch mechanisms (CMS, HCMS, SH, SRAPPOR, LCM): both ends of the
    header fields' bad values."""
    edits = [("version", 0, 0), ("version", 0, 1),
             ("mechanism", 1, other_mechanism_id(mech)), ("mechanism", 1, 0),
             ("phase", 2, 3 - mech.phase), ("phase", 2, 3), ("flags", 3, 0x80)]
    return parse_cases(mech, valid, edits, body_errors)


def grr_cases():
    reports, parses = [], []
    configs = [(500, 2, 0), (1000, 5, 7), (2500, 8, 0xDEADBEEF), (5000, 1024, 42), (100, 3, 1)]
    seq = 0
    for eps_milli, d, cid in configs:
        mech = GrrMechanism(eps_milli, d, salt=0x1234, campaign_id=cid, phase=1)
        t = mech.t_keep
        for x, w0, w1 in [(0, 0, 0), (d - 1, t - 1, W - 1), (d // 2, t, 0), (1, W - 1, W - 1),
                          (d - 1, t, W // 3)]:
            words = [w0, w1]
            seq += 1
            reports.append(report_case(mech, x, words, seq))
        valid = mech.reference_report(d - 1, [t, W - 1], 5)
        bad_y = valid[:protocol.HEADER_SIZE] + d.to_bytes(4, "little")
        parses += parse_cases_for(mech, valid, [("y", bad_y)])
        top_y = valid[:protocol.HEADER_SIZE] + (d - 1).to_bytes(4, "little")
        parses.append(parse_case(mech, top_y))
    mech2 = GrrMechanism(1000, 5, campaign_id=3, phase=2)
    valid = mech2.reference_report(4, [0, 0], 9)
    parses += parse_cases_for(mech2, valid, [("y", valid[:12] + b"\xff\xff\xff\xff")])
    return reports, parses


def local_hash_report_cases(mech: LocalHashMechanism, seq: int) -> list:
    """OLH / FLH report vectors seq + 1 .. seq + 5: both sides of the keep threshold, the word
    extremes, first, middle and last items."""
    d, t = mech.domain_size, mech.t_keep
    cases = [(0, [0, 0, 0]), (d - 1, [W - 1, t - 1, W - 1]), (1, [123456789, t, 0]),
             (d // 2, [0xDEADBEEF, W - 1, W - 1]), (7 % d, [2 ** 31, t, W // 2])]
    return [report_case(mech, x, words, seq + i) for i, (x, words) in enumerate(cases, 1)]


def olh_cases():
    reports, parses = [], []
    configs = [(500, 16, None, 0), (1000, 1024, None, 17), (2000, 42178, None, 0xFFFFFFFF),
               (2000, 100, 2, 5), (5000, 1000, 65536, 6), (8000, 300, 100, 7)]
    seq = 1000
    for eps_milli, d, g, cid in configs:
        mech = OlhMechanism(eps_milli, d, g=g, salt=99, campaign_id=cid)
        reports += local_hash_report_cases(mech, seq)
        seq += 5
        valid = mech.reference_report(d - 1, [W - 1, mech.t_keep, W - 1], 3)
        body_errors = []
        if mech.g < G_MAX:
            body_errors.append(("y", valid[:16] + mech.g.to_bytes(2, "little")))
            body_errors.append(("y", valid[:16] + b"\xff\xff"))
        parses += parse_cases_for(mech, valid, body_errors)
        top = valid[:16] + (mech.g - 1).to_bytes(2, "little")
        parses.append(parse_case(mech, top))
    return reports, parses


def flh_cases():
    reports, parses = [], []
    configs = [(500, 16, None, 4, 0xFFFFFFF0), (1000, 1024, None, 10000, 0),
               (2000, 42178, None, 10000, 0xA5A5A5A5), (2000, 50, 2, 1, 12),
               (5000, 1000, 300, 100000, 1), (8000, 300, 65536, 7, 2)]
    seq = 2000
    for eps_milli, d, g, kp, salt in configs:
        mech = FlhMechanism(eps_milli, d, g=g, kp=kp, salt=salt, campaign_id=salt ^ 0x5555)
        reports += local_hash_report_cases(mech, seq)
        seq += 5
        valid = mech.reference_report(d - 1, [W - 1, mech.t_keep, W - 1], 3)
        body_errors = [("seed_index", valid[:12] + kp.to_bytes(4, "little") + valid[16:]),
                       ("seed_index", valid[:12] + b"\xff\xff\xff\xff" + valid[16:])]
        if mech.g < 65536:
            body_errors.append(("y", valid[:16] + mech.g.to_bytes(2, "little")))
        parses += parse_cases_for(mech, valid, body_errors)
        edge = valid[:12] + (kp - 1).to_bytes(4, "little") + (mech.g - 1).to_bytes(2, "little")
        parses.append(parse_case(mech, edge))
    return reports, parses


def oue_cases():
    reports, parses = [], []
    seq = 3000
    for eps_milli, d, cid in [(500, 8, 0), (1000, 5, 1), (2500, 13, 2), (5000, 16, 3),
                              (2000, 67, 0xFFFFFFFF), (100, 2, 4)]:
        mech = OueMechanism(eps_milli, d, salt=1, campaign_id=cid)
        tq, tp = mech.t_q, mech.t_p
        edge = [0, tq - 1, tq, tp - 1, tp, W - 1]
        patterns = [
            [0] * d, [W - 1] * d, [edge[i % 6] for i in range(d)],
            [edge[(i * 5 + 1) % 6] for i in range(d)],
            [(i * 2654435761 + 12345) % W for i in range(d)],
        ]
        for k, words in enumerate(patterns):
            for x in sorted({0, d - 1, (k * 3) % d}):
                seq += 1
                reports.append(report_case(mech, x, words, seq))
        valid = mech.reference_report(d - 1, patterns[2], 3)
        body_errors = []
        spare = 8 * mech.body_size - d
        if spare:
            top = bytearray(valid)
            top[-1] |= 0x80
            body_errors.append(("padding", bytes(top)))
            low = bytearray(valid)
            low[-1] |= 1 << (8 - spare)
            body_errors.append(("padding", bytes(low)))
        parses += parse_cases_for(mech, valid, body_errors)
        ones = valid[:12] + bytes(bitmap_bytes(d) - 1) + bytes([(1 << (d - 8 * (mech.body_size - 1))) - 1])
        parses.append(parse_case(mech, ones))
    return reports, parses


def bitmap_vector_cases(cls, values_for):
    """Report and parse vectors for the bitmap sketches (CMS, LCM); `values_for(mech)` lists
    the values to encode."""
    reports, parses = [], []
    configs = [(500, 64, 4, 8, 0x12345678, 1), (1000, 1000, 16, 13, 7, 1),
               (2000, 1024, 256, 64, 0xFFFFFFFF, 2), (4000, 50, 3, 2, 0, 1),
               (8000, 4096, 65536, 9, 0xDEADBEEF, 2)]
    seq = 0
    for eps_milli, d, k, m, salt, phase in configs:
        mech = cls(eps_milli, d, salt=salt, campaign_id=0xC0FFEE + k, phase=phase, k=k, m=m)
        t = mech.t_flip
        for n_case, value in enumerate(values_for(mech)):
            specials = [(0, [0, W - 1, W // 2, t, t - 1][n_case % 5])]
            specials += [(1 + (i % m), w) for i, w in enumerate([0, t - 1, t, W - 1])]
            words = word_stream(seq * 7919 + eps_milli, mech.random_words, specials)
            seq += 1
            reports.append(report_case(mech, value, words, seq))
        valid = bytes.fromhex(reports[-1]["report_hex"])
        errors = [("j", set_body_byte(set_body_byte(valid, 0, k & 0xFF), 1, (k >> 8) & 0xFF))
                  ] if k < 65536 else []
        if m % 8:
            errors.append(("padding", set_body_byte(valid, 1 + bitmap_bytes(m), valid[-1] | 0x80)))
        parses += header_parse_cases(mech, valid, errors)
        if k > 1:
            top = set_body_byte(set_body_byte(valid, 0, (k - 1) & 0xFF), 1, (k - 1) >> 8)
            parses.append(parse_case(mech, top))
    return reports, parses


def cms_cases():
    def values(mech):
        return [0, 1, mech.domain_size - 1, 12345, 0xFFFFFFFF, 7, 1 << 31, 99]
    return bitmap_vector_cases(CmsMechanism, values)


def hcms_cases():
    reports, parses = [], []
    configs = [(500, 64, 4, 8, 0x12345678, 1), (1000, 1000, 3, 1024, 7, 2),
               (2000, 1024, 256, 2, 0xFFFFFFFF, 1), (8000, 1 << 20, 65536, 65536, 0xDEADBEEF, 1)]
    seq = 0
    for eps_milli, d, k, m, salt, phase in configs:
        mech = HcmsMechanism(eps_milli, d, salt=salt, campaign_id=0xABCD + k, phase=phase, k=k, m=m)
        t = mech.t_rr
        for i, key in enumerate([0, 1, d - 1, 0xFFFFFFFF, 4242, 1 << 31]):
            specials = [(0, [0, W - 1, t, t - 1, W // 3, 5][i]),
                        (1, [W - 1, 0, 1, W // 2, t, 77][i]),
                        (2, [t - 1, t, 0, W - 1, t - 1, t][i])]
            words = word_stream(seq * 104729 + eps_milli, 3, specials)
            seq += 1
            reports.append(report_case(mech, key, words, seq))
        valid = bytes.fromhex(reports[-1]["report_hex"])
        errors = [("sign", set_body_byte(valid, 4, 2)), ("sign", set_body_byte(valid, 4, 0xFF))]
        if k < 65536:
            errors.append(("j", set_body_byte(set_body_byte(valid, 0, k & 0xFF), 1, k >> 8)))
        if m < 65536:
            errors.append(("l", set_body_byte(set_body_byte(valid, 2, m & 0xFF), 3, m >> 8)))
        parses += header_parse_cases(mech, valid, errors)
        edge = set_body_byte(set_body_byte(valid, 2, (m - 1) & 0xFF), 3, (m - 1) >> 8)
        parses.append(parse_case(mech, set_body_byte(edge, 4, 0)))
    return reports, parses


def set_vector_cases(cls, configs, sets_for, error_cases):
    """Report and parse vectors for a set-valued mechanism: `configs` are constructor kwargs,
    `sets_for(mech)` the sets to encode, `error_cases(mech, valid)` the body parse errors."""
    reports, parses = [], []
    seq = 0
    for cfg in configs:
        mech = cls(**cfg)
        thresholds = sorted({getattr(mech, "t_rr", 0), getattr(mech, "t_flip", 0), HALF} - {0})
        for n_case, keys in enumerate(sets_for(mech)):
            big = max(mech.l, len(keys))
            last = -((-(big - 1) * W) // big)  # first word of the last bucket
            w0_choices = [0, W - 1, last, max(last - 1, 0)]
            specials = [(0, w0_choices[n_case % 4])]
            t = thresholds[n_case % len(thresholds)]
            specials += [(1, [0, W - 1, t, t - 1][(n_case + 1) % 4]),
                         (mech.random_words - 1, [t - 1, t, 0, W - 1][n_case % 4])]
            words = word_stream(seq * 31337 + mech.eps_milli, mech.random_words, specials)
            seq += 1
            reports.append(report_case(mech, [int(k) for k in keys], words, seq))
        valid = bytes.fromhex(reports[-1]["report_hex"])
        parses += header_parse_cases(mech, valid, error_cases(mech, valid))
    return reports, parses


def sh_cases():
    configs = [dict(eps_milli=500, domain_size=16, salt=0x1234, campaign_id=11, phase=1, m=4, l=1),
               dict(eps_milli=1000, domain_size=1000, salt=0xFFFFFFFF, campaign_id=12, phase=1,
                    m=65536, l=3),
               dict(eps_milli=4000, domain_size=1 << 20, salt=7, campaign_id=13, phase=2, m=1000,
                    l=2)]

    def sets(mech):
        d = mech.domain_size
        return [[0], [d - 1], [], [3, 1], [5, 9, 2, 0xFFFFFFFF], [1, 2], [d - 1, 0, 7],
                [0xDEADBEEF], [4, 8, 15, 16, 23, 42]]

    def errors(mech, valid):
        m = mech.m
        bad_t = valid[:12] + m.to_bytes(4, "little") + valid[16:]
        max_t = valid[:12] + (W - 1).to_bytes(4, "little") + valid[16:]
        return [("t", bad_t), ("t", max_t), ("sign", set_body_byte(valid, 4, 2)),
                ("sign", set_body_byte(valid, 4, 0xFF))]

    reports, parses = set_vector_cases(ShMechanism, configs, sets, errors)
    mech = ShMechanism(**configs[1])
    edge = mech.reference_report([1], [0, W - 1, 0], 3)
    parses.append(parse_case(mech, edge))
    return reports, parses


def srappor_cases():
    configs = [dict(eps_milli=1000, domain_size=1 << 20, salt=1, campaign_id=21, phase=2, l=2,
                    candidates=[10, 3, 77]),
               dict(eps_milli=2000, domain_size=1000, salt=2, campaign_id=22, phase=2, l=1,
                    candidates=[5, 0xFFFFFFFF, 0, 999, 123456, 42, 7]),
               dict(eps_milli=4000, domain_size=12, salt=3, campaign_id=23, phase=1, l=3)]

    def sets(mech):
        c = [int(x) for x in mech.candidates]
        return [[c[0]], [c[-1]], [], [c[1], 555555], [555555], [c[0], c[1], c[2], 8888],
                [c[2], c[0]], [0xDEADBEEF, c[-1], c[0]]]

    def errors(mech, valid):
        spare = 8 * mech.body_size - (mech.kc + 1)
        if spare == 0:
            return []
        return [("padding", set_body_byte(valid, mech.body_size - 1, valid[-1] | 0x80))]

    return set_vector_cases(SrapporMechanism, configs, sets, errors)


def bucket_first(r: int, n: int) -> int:
    """The first word w with bucket(w, n) == r (spec §1: ceil(r 2^32 / n))."""
    return -((-r * W) // n)


def ps_vector_cases(cls, configs, word_choices, error_cases):
    """Report and parse vectors of a padding-and-sampling oracle (PSGRR, PSOLH): for each config
    (constructor kwargs) the sets of size 0, < l, = l, > l, with keys that are not items
    (not candidates, or outside the int domain); word 0 at the edges of bucket(., L) and the
    other words from `word_choices(mech, n_case)` [(index, word)] (threshold and bucket edges)."""
    reports, parses = [], []
    seq = 0
    for cfg in configs:
        mech = cls(**cfg)
        items = [int(c) for c in mech.candidates[:4]]
        outside = [555555, 0xFFFFFFFE] if mech.listed else [mech.kc, 0xFFFFFFFF]
        l = mech.l
        sets = [[], items[:1], [outside[0]], items[:max(l - 1, 1)], items[:l] if len(items) >= l
                else items + outside[:1], [outside[1]] + items[:l], items[::-1] + outside,
                [items[-1], outside[0], items[0]], items[1:2] + items[:1]]
        for n_case, keys in enumerate(sets):
            big = max(l, len(keys))
            w0 = [0, W - 1, bucket_first(big - 1, big), max(bucket_first(big - 1, big) - 1, 0),
                  bucket_first(big // 2, big)][n_case % 5]
            specials = [(0, w0)] + word_choices(mech, n_case)
            words = word_stream(seq * 7727 + mech.eps_milli, mech.random_words, specials)
            seq += 1
            reports.append(report_case(mech, keys, words, seq))
        valid = bytes.fromhex(reports[-1]["report_hex"])
        parses += header_parse_cases(mech, valid, error_cases(mech, valid))
    return reports, parses


def psgrr_cases():
    from ldpfleet.core.mechanisms.psfo import PsGrrMechanism
    configs = [dict(eps_milli=1000, domain_size=5, salt=1, campaign_id=31, phase=1, l=1),
               dict(eps_milli=2000, domain_size=1000, salt=2, campaign_id=32, phase=1, l=3),
               dict(eps_milli=8000, domain_size=1 << 24, salt=3, campaign_id=33, phase=1, l=2),
               dict(eps_milli=4000, domain_size=1 << 20, salt=4, campaign_id=34, phase=2, l=2,
                    candidates=[10, 3, 77]),
               dict(eps_milli=500, domain_size=1000, salt=5, campaign_id=35, phase=2, l=1,
                    candidates=[5, 0xFFFFFFFF, 0, 999, 123456, 42, 7])]

    def words(mech, n):
        t, d = mech.t_keep, mech.kc
        return [(1, [0, t - 1, t, W - 1, t // 2][n % 5]),
                (2, [0, W - 1, bucket_first(d // 2, d), bucket_first(d - 1, d),
                     max(bucket_first(d - 1, d) - 1, 0), bucket_first(1, d)][n % 6])]

    def errors(mech, valid):
        return [("y", valid[:12] + (mech.kc + 1).to_bytes(4, "little")),
                ("y", valid[:12] + b"\xff\xff\xff\xff")]

    reports, parses = ps_vector_cases(PsGrrMechanism, configs, words, errors)
    for cfg in configs:  # y = D (the dummy's output) is a valid body
        mech = PsGrrMechanism(**cfg)
        parses.append(parse_case(mech, mech.reference_report([], [0, 0, 0], 1)))
    return reports, parses


def psolh_cases():
    from ldpfleet.core.mechanisms.psfo import PsOlhMechanism
    configs = [dict(eps_milli=1000, domain_size=16, salt=1, campaign_id=41, phase=1, l=1, g=4),
               dict(eps_milli=2000, domain_size=1 << 24, salt=2, campaign_id=42, phase=1, l=3,
                    g=65536),
               dict(eps_milli=4000, domain_size=1 << 20, salt=3, campaign_id=43, phase=2, l=2, g=2,
                    candidates=[10, 3, 77]),
               dict(eps_milli=500, domain_size=1000, salt=4, campaign_id=44, phase=2, l=1, g=3,
                    candidates=[5, 0xFFFFFFFF, 0, 999, 123456, 42, 7])]

    def words(mech, n):
        t, g = mech.t_keep, mech.g
        return [(1, [0, W - 1, 0xDEADBEEF, 123456789][n % 4]),
                (2, [t - 1, t, 0, W - 1, t // 2][n % 5]),
                (3, [0, W - 1, bucket_first(g - 2, g - 1), bucket_first(g - 1, g),
                     max(bucket_first(g - 1, g) - 1, 0), bucket_first(1, g)][n % 6])]

    def errors(mech, valid):
        if mech.g >= 65536:
            return []
        return [("y", valid[:16] + mech.g.to_bytes(2, "little")),
                ("y", valid[:16] + b"\xff\xff")]

    reports, parses = ps_vector_cases(PsOlhMechanism, configs, words, errors)
    for cfg in configs:  # y = g - 1 is a valid body
        mech = PsOlhMechanism(**cfg)
        valid = mech.reference_report([], [0, 0, 0, 0], 1)
        parses.append(parse_case(mech, valid[:16] + (mech.g - 1).to_bytes(2, "little")))
    return reports, parses


def lcm_cases():
    def values(mech):
        d = mech.domain_size
        return [{"key": 0, "high": False}, {"key": 1, "high": True}, {"key": d - 1, "high": False},
                {"key": 0, "high": True}, {"key": 0xFFFFFFFF, "high": False},
                {"key": 12345, "high": False}, {"key": 7, "high": True},
                {"key": 1 << 31, "high": False}]
    return bitmap_vector_cases(LcmMechanism, values)


def shc_cases():
    from .vectors_shc import shc_cases as cases  # vectors_shc imports this module's helpers
    return cases()


def numeric_cases(name):
    """The numeric mechanisms' cases (vectors_numeric imports this module's helpers)."""
    def cases():
        from . import vectors_numeric
        return getattr(vectors_numeric, name + "_cases")()
    return cases


CASES = {"grr": grr_cases, "olh": olh_cases, "flh": flh_cases, "oue": oue_cases,
         "cms": cms_cases, "hcms": hcms_cases, "sh": sh_cases, "srappor": srappor_cases,
         "lcm": lcm_cases, "psgrr": psgrr_cases, "psolh": psolh_cases, "shc": shc_cases,
         "duchi": numeric_cases("duchi"), "pm": numeric_cases("pm"), "hm": numeric_cases("hm"),
         "sw": numeric_cases("sw")}


def longitudinal_cases(name):
    """The cases of a memoised mechanism (spec §3.2; support.vectors_longitudinal)."""
    def cases():
        from .vectors_longitudinal import report_cases  # it imports this module's helpers
        return report_cases(name)
    return cases


CASES.update({name: longitudinal_cases(name) for name in ("losue", "lsue", "lgrr", "loloha", "lbitmean")})


def pem_cases():
    """PEM's phase-1 cases (spec §3.5; support.vectors_pem)."""
    from .vectors_pem import pem_cases as cases  # it imports this module's helpers
    return cases()


CASES["pem"] = pem_cases
