"""Vector cases of the longitudinal (memoised) mechanisms, spec §3.2 (losue, lsue, lgrr, loloha,
lbitmean): report vectors whose value is {"value": v, "state": hex of the enrolment state},
parse vectors, and the enrolment vectors (vectors/enrol_longitudinal.json: words -> state,
the thresholds and the enrolment charge for several round counts)."""
from ldpfleet.core import protocol
from ldpfleet.core.mechanisms import make_mechanism
from ldpfleet.core.mechanisms.base import W

from .vectors import bucket_first, parse_case, parse_cases_for, report_case, word_stream

CONFIGS = {
    "losue": [(2000, 5, {"eps1_milli": 1000}), (1000, 9, {"eps1_milli": 300}),
              (4000, 16, {"eps1_milli": 3999}), (500, 2, {"eps1_milli": 1}),
              (2000, 33, {"eps1_milli": 1700}), (3000, 128, {"eps1_milli": 1000})],
    "lsue": [(2000, 5, {"eps1_milli": 1000}), (1000, 9, {"eps1_milli": 300}),
             (4000, 16, {"eps1_milli": 3999}), (500, 2, {"eps1_milli": 1}),
             (2000, 33, {"eps1_milli": 1700})],
    "lgrr": [(2000, 2, {"eps1_milli": 1000}), (2000, 5, {"eps1_milli": 1000}),
             (1000, 101, {"eps1_milli": 500}), (8000, 256, {"eps1_milli": 4000}),
             (500, 3, {"eps1_milli": 499}), (64000, 7, {"eps1_milli": 1})],
    "loloha": [(2000, 100, {"eps1_milli": 1000}), (2000, 1000, {"eps1_milli": 1000, "g": 2}),
               (4000, 50, {"eps1_milli": 3000, "g": 7}), (8000, 10, {"eps1_milli": 100, "g": 256}),
               (6000, 1 << 20, {"eps1_milli": 5000})],
    "lbitmean": [(2000, 101, {"eps1_milli": 1000}), (1000, 11, {"eps1_milli": 400, "s": 4}),
                 (4000, 2, {"eps1_milli": 2000}), (2000, 0xFFFFFFFF, {"eps1_milli": 1999, "s": 255}),
                 (3000, 1001, {"eps1_milli": 1500, "s": 7})],
}
ENROL_MAX_WORDS = 600
"""Enrolment vectors only where the words stay readable (the UE states grow as n^2)."""
ROUNDS = [1, 2, 3, 365, None]


def mechanisms(name):
    for i, (eps, n, params) in enumerate(CONFIGS[name]):
        yield make_mechanism(name, eps, n, salt=0x5A17 + i, campaign_id=0xC0DE0000 + 16 * i,
                             phase=1, **params)


def permanent_thresholds(mech) -> list:
    """Thresholds the permanent step compares enrolment words with."""
    if mech.name in ("losue", "lsue"):
        return [mech.t_p, mech.t_q]
    if mech.name == "lbitmean":
        return [mech.t0, W - mech.t0]
    return [mech.t_perm]


def instant_threshold(mech) -> int:
    return mech.t_flip if mech.name in ("losue", "lsue", "lbitmean") else mech.t_inst


def thresholds(mech) -> dict:
    if mech.name in ("losue", "lsue"):
        return {"t_p": mech.t_p, "t_q": mech.t_q, "t_flip": mech.t_flip}
    if mech.name == "lbitmean":
        return {"t0": mech.t0, "t_flip": mech.t_flip}
    return {"t_perm": mech.t_perm, "t_inst": mech.t_inst}


def enrol_words(mech, k: int) -> list:
    """Enrolment words: a stream with the permanent thresholds' edges spread over it."""
    ts = permanent_thresholds(mech)
    edges = [0, W - 1] + [t + d for t in ts for d in (-1, 0) if 0 <= t + d < W]
    specials = [((7 * i + 3 * k) % mech.enrol_words, w) for i, w in enumerate(edges)]
    if mech.name in ("lgrr", "loloha"):  # the "other" words at the edges of bucket(., n - 1)
        n = mech.classes
        off = 1 if mech.name == "loloha" else 0
        for i, r in enumerate([0, n - 2, (n - 1) // 2]):
            b = (i + k) % n
            specials.append((off + 2 * b + 1, max(bucket_first(r, n - 1) - (k % 2), 0)))
            specials.append((off + 2 * b, min(ts[0] + (i % 2), W - 1)))
    return word_stream(0xE0 + 31 * k + mech.eps_milli + mech.domain_size, mech.enrol_words, specials)


def report_words(mech, k: int) -> list:
    t = instant_threshold(mech)
    specials = [(0, [t - 1, t, 0, W - 1, t // 2][k % 5])]
    if mech.name in ("lgrr", "loloha"):
        n = mech.classes
        specials.append((1, [0, W - 1, bucket_first(n - 2, n - 1), max(bucket_first(n - 2, n - 1) - 1, 0),
                             bucket_first((n - 1) // 2, n - 1)][k % 5]))
    elif mech.name in ("losue", "lsue"):
        specials += [((k + i) % mech.random_words, [t - 1, t, 0, W - 1][i]) for i in range(4)]
    return word_stream(0x77 + 131 * k + mech.eps_milli, mech.random_words, specials)


def values(mech) -> list:
    n = mech.domain_size
    if mech.name == "loloha":
        return [0, 1, n - 1, 0xFFFFFFFF, 123456789, 42 % n]
    if mech.name == "lbitmean":
        m = mech.m
        return [0, m, m // 2, 1, m - 1, (m * 3) // 7, -5, m + 9]
    return sorted({0, n - 1, n // 2, 1 % n})


def lbitmean_alphas(mech) -> list:
    """α words at the rounding thresholds of a few values, so both roundings are covered."""
    out = []
    for x in values(mech)[:6]:
        x = mech.clamp(x)
        _, rho = divmod(x * mech.s, mech.m)
        t = (rho * W) // mech.m
        out += [w for w in (t - 1, t) if 0 <= w < W]
    return out or [0, W - 1]


def report_cases(name):
    reports, parses = [], []
    nonce = 0x1000 * (protocol.MECHANISM_IDS[name] - 16)
    for mech in mechanisms(name):
        states = []
        for k in range(3):
            words = enrol_words(mech, k)
            if mech.name == "lbitmean":
                words[0] = lbitmean_alphas(mech)[k % len(lbitmean_alphas(mech))]
            states.append(mech.reference_enrol(words))
        k = 0
        for state in states:
            for v in values(mech):
                nonce += 1
                reports.append(report_case(mech, {"value": v, "state": state.hex()},
                                           report_words(mech, k), nonce))
                k += 1
        valid = bytes.fromhex(reports[-1]["report_hex"])
        parses += parse_cases_for(mech, valid, body_errors(mech, valid))
        parses += [parse_case(mech, r) for r in edge_bodies(mech, valid)]
    return reports, parses


def body_errors(mech, valid):
    if mech.name in ("losue", "lsue"):
        spare = 8 * mech.body_size - mech.domain_size
        if not spare:
            return []
        top = bytearray(valid)
        top[-1] |= 0x80
        return [("padding", bytes(top))]
    if mech.name == "lgrr":
        return [("y", valid[:12] + mech.domain_size.to_bytes(4, "little")),
                ("y", valid[:12] + b"\xff\xff\xff\xff")]
    if mech.name == "loloha":
        return [("y", valid[:16] + mech.g.to_bytes(2, "little")), ("y", valid[:16] + b"\xff\xff")]
    return [("y", valid[:12] + b"\x02"), ("y", valid[:12] + b"\xff")]


def edge_bodies(mech, valid):
    """Accepted bodies at the top of each field's range."""
    if mech.name == "lgrr":
        return [valid[:12] + (mech.domain_size - 1).to_bytes(4, "little")]
    if mech.name == "loloha":
        return [valid[:16] + (mech.g - 1).to_bytes(2, "little")]
    if mech.name == "lbitmean":
        return [valid[:12] + b"\x01", valid[:12] + b"\x00"]
    return [valid[:12] + b"\xff" * (mech.body_size - 1)
            + bytes([(1 << (mech.domain_size - 8 * (mech.body_size - 1))) - 1])]


def enrol_vectors() -> list:
    """vectors/enrol_longitudinal.json: per mechanism and config, enrolment words -> state, the
    thresholds and the charge for each of ROUNDS (null: an unbounded campaign)."""
    out = []
    for name in sorted(CONFIGS):
        for mech in mechanisms(name):
            if mech.enrol_words > ENROL_MAX_WORDS:
                continue
            for k in range(2):
                words = enrol_words(mech, k)
                out.append(dict(mech.describe(), words=words,
                                state_hex=mech.reference_enrol(words).hex(),
                                thresholds=thresholds(mech), state_bytes=mech.state_size,
                                charge_milli=[[r, mech.enrolment_charge_milli(r)] for r in ROUNDS]))
    return out
