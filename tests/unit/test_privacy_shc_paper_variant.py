"""Why `shc` (spec §3.1) never switches items: LDPMiner §4.4's optimisation as the paper writes it
(Qin et al., CCS 2016) is not (eps1+eps2)-LDP, by exact enumeration with ideal probabilities.

Construction. Items 0, 1, 2; SH projection with m = 2 rows, phi(t, v) = PHI[t][v], whose columns
are the distinct sign patterns (+,+), (+,-), (-,+); candidate lists {0} and {0, 1}; every set of
0..2 items (padded with the dummy to L = max(l, s), sampled uniformly), l = 1 and 2.
Phase 1 (sampling SH at eps1, paper §4.3 Alg. 2, as `shc`'s phase 1): element v uniform from the
padded set, row t uniform, x = phi(t, v) (a fair bit for the dummy), y1 = x with probability
k1 = e^eps1/(1+e^eps1).
Phase 2, three variants:
- "safe" (`shc`): always keep v, t and x; (y1, y2) is the chain x -> y2 -> y1 of spec §3.1, y2 =
  RR(x) at p = e^(eps1+eps2)/(1+e^(eps1+eps2)), y1 = RR(y2) at q with pq + (1-p)(1-q) = k1 (so y1's
  marginal is phase 1's), phase-2 report (t, y2);
- "paper": if v is a candidate, the same correlated pair on the same row; otherwise (a non-candidate
  or the dummy) y1 stays the independent phase-1 sign and phase 2 is plain sampling SH at eps2 over
  the set trimmed to the candidates and padded with the dummy to l (§4.4): a fresh row t2, a new
  element, y2 = RR(phi(t2, v2)) at k2 = e^eps2/(1+e^eps2) (a fair sign for the dummy);
- "paper_same_row": as "paper" but the switched report keeps the phase-1 row (t2 = t), so that the
  leak is not only the row.
The joint output is (t1, y1, t2, y2). At eps1 = eps2 = 1.5 the paper's variants exceed e^3 = 20.09:
with a fresh row t2 != t1 is impossible when the element is always re-used (l = 1, set {0}) and
possible otherwise (ratio infinite); with the row kept, set {1} (switches: y2 a fair sign) against
set {0} (re-used, phi(t, 0) = phi(t, 1)) on (y1 = x, y2 = -x) gives k1/2 / ((1-p)(1-q)) = 57.79,
since the chain makes "y1 agrees, y2 disagrees" its rarest output (spec §3.1 quotes these).
Whether the device switched depends on its set, and Theorem 4.3 bounds phase 2
alone. The safe variant stays <= e^3 (tight at l = 1).
"""
import itertools
import math
from collections import defaultdict

import pytest

EPS1 = EPS2 = 1.5
BOUND = math.exp(EPS1 + EPS2)
ITEMS = (0, 1, 2)
PHI = ((+1, +1, -1), (+1, -1, +1))  # PHI[t][v]: m = 2 rows, distinct columns
M = len(PHI)
CANDIDATE_LISTS = ({0}, {0, 1})
SETS = [s for n in range(3) for s in itertools.combinations(ITEMS, n)]
DUMMY = None


def keep_prob(eps):
    return math.exp(eps) / (1 + math.exp(eps))


K1, K2, P = keep_prob(EPS1), keep_prob(EPS2), keep_prob(EPS1 + EPS2)
Q = (K1 - (1 - P)) / (2 * P - 1)  # y1 = RR(y2) at Q: P(y1 = x) = K1


def rr(k, agree):
    return k if agree else 1 - k


def sample(elements, l):
    """[(element, probability)]: uniform over the set padded with the dummy to max(l, s)."""
    padded = list(elements) + [DUMMY] * max(0, l - len(elements))
    return [(v, 1 / len(padded)) for v in padded]


def bits(v, t):
    """[(x, probability)]: phi(t, v), or a fair bit for the dummy (Alg. 2 line 7)."""
    return [(+1, 0.5), (-1, 0.5)] if v is DUMMY else [(PHI[t][v], 1.0)]


def joint(items, l, candidates, variant):
    """{(t1, y1, t2, y2): probability} of both reports of a device holding `items`."""
    out = defaultdict(float)
    for v, pv in sample(items, l):
        for t in range(M):
            for x, px in bits(v, t):
                w = pv * px / M
                if variant == "safe" or v in candidates:  # correlated pair, same row
                    for y1, y2 in itertools.product((1, -1), repeat=2):
                        out[(t, y1, t, y2)] += w * rr(P, y2 == x) * rr(Q, y1 == y2)
                    continue
                trimmed = [u for u in items if u in candidates]
                rows = [t] if variant == "paper_same_row" else range(M)
                for y1, (v2, pv2), t2 in itertools.product((1, -1), sample(trimmed, l), rows):
                    for x2, px2 in bits(v2, t2):
                        for y2 in (1, -1):
                            out[(t, y1, t2, y2)] += (w * rr(K1, y1 == x) * pv2 / len(rows)
                                                     * px2 * rr(K2, y2 == x2))
    assert abs(sum(out.values()) - 1) < 1e-12
    return out


def worst_ratio(l, variant):
    """max over candidate lists, ordered pairs of sets and outputs of P(o | a) / P(o | b)."""
    worst = 1.0
    for candidates in CANDIDATE_LISTS:
        dists = [joint(s, l, candidates, variant) for s in SETS]
        outputs = set().union(*dists)
        for da, db in itertools.permutations(dists, 2):
            for o in outputs:
                pa, pb = da.get(o, 0.0), db.get(o, 0.0)
                if pa > 0:
                    worst = max(worst, math.inf if pb == 0 else pa / pb)
    return worst


@pytest.mark.parametrize("l", [1, 2])
@pytest.mark.parametrize("variant", ["paper", "paper_same_row"])
def test_paper_switching_variant_is_not_eps1_plus_eps2_ldp(l, variant):
    """Re-use the phase-1 element if it is a candidate, else switch: joint ratio > e^(eps1+eps2)."""
    assert worst_ratio(l, variant) > BOUND


def test_paper_variant_worst_case_is_the_closed_form():
    """l = 1, row kept: set {1} (switches) against {0} (re-used), output (t, x, t, -x)."""
    closed_form = (K1 / 2) / ((1 - P) * (1 - Q))
    assert closed_form > BOUND
    assert worst_ratio(1, "paper_same_row") == pytest.approx(closed_form, rel=1e-12)
    d0, d1 = joint((0,), 1, {0}, "paper_same_row"), joint((1,), 1, {0}, "paper_same_row")
    assert d1[(0, 1, 0, -1)] / d0[(0, 1, 0, -1)] == pytest.approx(closed_form, rel=1e-12)
    assert worst_ratio(1, "paper") == math.inf  # the switched report's fresh row


@pytest.mark.parametrize("l", [1, 2])
def test_safe_variant_never_switches_and_is_private(l):
    """shc's rule (keep element, row and bit): the joint is (eps1+eps2)-LDP, tight at l = 1."""
    worst = worst_ratio(l, "safe")
    assert worst <= BOUND + 1e-9
    if l == 1:
        assert worst >= BOUND - 1e-9


if __name__ == "__main__":
    for l_, variant_ in itertools.product((1, 2), ("paper", "paper_same_row", "safe")):
        print(f"l={l_} {variant_}: {worst_ratio(l_, variant_):.4f} (e^3 = {BOUND:.4f})")
