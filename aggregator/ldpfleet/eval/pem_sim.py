"""PEM simulated in process (`simulate --protocol pem`, tools/bench_heavy_hitters.py): n devices
hold strings, are split into the public groups of `protocols.pem`, compute their prefix keys
(C: ldp_pem_prefix_keys) and report through the shipped kernels of the plan's oracle (FLH by
default, spec §3.5: `ldp_flh_perturb`; OLH selectable with `oracle="olh"` for comparison); the
aggregator folds each group's FLH reports into its kp x g table and runs `pem.identify`
(`pem.flh_estimate` per level). The simulator's randomness (data, group draws, OLH words) is a seeded numpy
Generator on the aggregator side, as in ldpminer_sim; real devices use their own entropy.

Wang, Li, Jha, "Locally Differentially Private Heavy Hitter Identification" (IEEE TDSC 2019)
§4 (the protocol) and §6 (its Zipf evaluation; scored here by recall@k, the share of the true
top k found).
"""
import time

import numpy as np

from ..core.protocols import pem

ALPHABET = "abcdefghijklmnopqrstuvwxyz_"
CHUNK = 1 << 18


def zipf_strings(words: int, length: int, s: float, rng):
    """`words` distinct random strings of `length` symbols over ALPHABET (27 symbols) and
    their Zipf(s) probabilities, rank order."""
    out, seen = [], set()
    while len(out) < words:
        w = "".join(ALPHABET[i] for i in rng.integers(0, len(ALPHABET), length))
        if w not in seen:
            seen.add(w)
            out.append(w)
    p = 1.0 / np.arange(1, words + 1, dtype=np.float64) ** s
    return out, p / p.sum()


def draw_users(n: int, probs: np.ndarray, rng) -> np.ndarray:
    """Each user's word index (int32)."""
    return rng.choice(probs.size, size=int(n), p=probs).astype(np.int32)


def report_group(plan, mech, word_codes, users, bits, rng) -> np.ndarray:
    """Reports (FLH or OLH) of `users` (word indices) on the `bits`-bit prefixes of their strings; each
    device's key through the C prefix kernel on its own code."""
    parts = []
    for start in range(0, users.size, CHUNK):
        codes = word_codes[users[start:start + CHUNK]]
        parts.append(mech.perturb_batch(pem.prefix_keys(codes, bits), rng))
    if not parts:
        return np.zeros((0, mech.report_size), np.uint8)
    return np.concatenate(parts)


def simulate(plan: "pem.PemPlan", words: list, users: np.ndarray, seed: int = 0) -> dict:
    """One PEM campaign over `users` (indices into `words`); the answer, recall@top and timing."""
    rng = np.random.default_rng(seed)
    mech = plan.mechanism()
    word_codes = pem.encode_batch(words, plan.max_len)
    t0 = time.perf_counter()
    group = pem.group_of(rng.bit_generator.random_raw(users.size) & 0xFFFFFFFF, plan.shares())
    schedule = plan.level_bits() + ([plan.bits] if plan.validate_share > 0 else [])
    reports = [report_group(plan, mech, word_codes, users[group == i], bits, rng)
               for i, bits in enumerate(schedule)]
    t1 = time.perf_counter()
    answer = pem.identify(plan, reports, mech)
    t2 = time.perf_counter()
    counts = np.bincount(users, minlength=len(words))
    true_top = np.argsort(-counts, kind="stable")[:plan.top]
    truth = {pem.decode(pem.encode(words[i], plan.max_len)) for i in true_top}
    found = set(answer.strings)
    return {
        "protocol": "pem", "users": int(users.size), "epsilon": plan.eps_milli / 1000.0,
        "max_len": plan.max_len, "step": plan.step, "first": plan.first_bits, "keep": plan.keep,
        "validate_share": plan.validate_share, "g": mech.g, "k": plan.top, "seed": seed,
        "oracle": plan.oracle, "kp": plan.kp if plan.oracle == "flh" else None,
        "levels": len(plan.level_bits()), "level_bits": plan.level_bits(), "pool": plan.pool,
        "recall": len(truth & found) / float(plan.top),
        "top_items": answer.strings,
        "top_frequencies": [float(f) for f in answer.frequencies],
        "true_top_items": [words[i] for i in true_top],
        "true_top_frequencies": [float(counts[i]) / users.size for i in true_top],
        "candidates_per_level": [c for _, _, c in answer.levels],
        "client_seconds": t1 - t0, "decode_seconds": t2 - t1,
    }


def simulate_zipf(plan, n: int, words: int = 1000, length: int = 10, s: float = 1.1,
                  seed: int = 0, data_seed: int = None) -> dict:
    """PEM on `n` users drawing from Zipf(s) over `words` random `length`-symbol strings."""
    drng = np.random.default_rng(seed if data_seed is None else data_seed)
    vocab, probs = zipf_strings(words, length, s, drng)
    out = simulate(plan, vocab, draw_users(n, probs, drng), seed=seed + 1)
    out.update(dist="zipf:%g" % s, words=words, length=length, seed=seed)
    return out


def simulate_strings(plan, values: list, seed: int = 0) -> dict:
    """PEM on one user per entry of `values` (strings)."""
    vocab, users = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
    return simulate(plan, list(vocab), users.astype(np.int32), seed=seed)
