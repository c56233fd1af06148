"""Integer thresholds of protocol v2 spec §2 (integers only; identical to the aggregator's).

ε is carried as milli-nats. E(a, b) is the floor-sum lower bound of S·e^(a/b), S = 2^64;
every threshold realises a worst-case ratio <= E_full / S <= e^ε exactly.
"""
W = 1 << 32
S = 1 << 64
T_OUE_P = 1 << 31
T_HALF = 1 << 31


def exp_lower(a, b):
    """Lower bound of S·e^(a/b): Taylor series with every term rounded down (spec §2)."""
    term = total = S
    i = 1
    while term > 0:
        term = (term * a) // (b * i)
        total += term
        i += 1
    return total


def cmin(n):
    """Fewest words any bucket of bucket(., n) receives: floor(2^32 / n)."""
    return W // n


def grr_ok(eps_milli, n):
    """Spec §2 "every pair of outputs": GRR over n outputs bounds every pair by e^ε iff n == 2,
    or 2^32 mod (n-1) == 0, or cmax(n-1)·S <= E_full·cmin(n-1) (cmax = cmin + 1 here)."""
    if n == 2 or W % (n - 1) == 0:
        return True
    c = cmin(n - 1)
    return (c + 1) * S <= exp_lower(eps_milli, 1000) * c


def _ceil_div(a, b):
    return (a + b - 1) // b


def t_rr(eps_milli):
    """Binary randomized response: keep iff w < T, T/(W-T) <= e^ε."""
    e = exp_lower(eps_milli, 1000)
    return min((e * W) // (S + e), W - 1)


def t_grr(eps_milli, n):
    """GRR over n outputs: keep iff w0 < T, else bucket(w1, n-1) among the others."""
    if n == 2:
        return t_rr(eps_milli)
    e = exp_lower(eps_milli, 1000)
    c = cmin(n - 1)
    return min((e * W * c) // (W * S + e * c), W - 1)


def t_oue_q(eps_milli):
    """OUE: a non-true bit is 1 iff w < T, T = ceil(W·S / (S + E_full))."""
    e = exp_lower(eps_milli, 1000)
    return _ceil_div(W * S, S + e)


def t_flip(eps_milli):
    """Per-bit flip (CMS, LDPLCM, sampling RAPPOR): T = ceil(W·S / (S + E_half))."""
    e = exp_lower(eps_milli, 2000)
    return _ceil_div(W * S, S + e)


def shc_thresholds(eps1, eps2):
    """Spec §3.1: (T1, A, B, E2) of `shc` (id 12) -- T1 = T_rr(ε1), the phase-2 keep thresholds
    A = T_shc_a (y1 == x) and B = T_shc_b (y1 == -x), E2 = E(eps1 + eps2, 1000). Big integers,
    config time only."""
    e2 = exp_lower(eps1 + eps2, 1000)
    g = e2 - (e2 >> 16)
    t1 = t_rr(eps1)
    den = (S + g) * (g - S)
    a = W * g * (t1 * (S + g) - W * S) // (den * t1)
    b = W * g * (g * W - t1 * (S + g)) // (den * (W - t1))
    return t1, a, b, e2


def shc_ok(eps1, eps2):
    """Spec §3.1 `shc_ok`: both phases' signs are jointly (ε1+ε2)-LDP with integer thresholds."""
    if eps1 < 1 or eps2 < 1 or eps1 + eps2 > 64000:
        return False
    t1, a, b, e2 = shc_thresholds(eps1, eps2)
    if not (0 < a < W and 0 < b < W):
        return False
    u, v = W - t1, W - b  # phase-1 flip count, phase-2 flip count after a flipped y1
    return (t1 * a * S <= e2 * u * v and u * v * S <= e2 * t1 * a
            and t1 * (W - a) * S <= e2 * u * b and u * b * S <= e2 * t1 * (W - a))
