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
