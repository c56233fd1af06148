/* Integer thresholds of protocol v2 §2 (protocol_spec/v2/README.md, table "Thresholds").
 *
 * W = 2^32, S = 2^64. The definitions use products such as E*W*c that exceed 128 bits, so
 * they are evaluated through exact identities (W integer, floor(W - x) = W - ceil(x)):
 *   floor(E*W / (S + E))              = W - ceil(2^96 / (S + E))
 *   floor(E*W*c / (W*S + E*c))        = W - ceil(2^128 / (2^96 + E*c))
 *   ceil(2^128 / D)                   = floor((2^128 - 1) / D) + 1        (D >= 1)
 */
#include "ldp_thresholds.h"
#include "ldp_bignum.h"

/* ---- 128-bit unsigned arithmetic: native where available, two 64-bit words otherwise ---- */

#if defined(__SIZEOF_INT128__) && !defined(LDP_NO_INT128)

__extension__ typedef unsigned __int128 u128;

static u128 u128_make(uint64_t hi, uint64_t lo) { return ((u128)hi << 64) | lo; }
static uint64_t u128_hi(u128 a) { return (uint64_t)(a >> 64); }
static uint64_t u128_lo(u128 a) { return (uint64_t)a; }

static int u128_add(u128 a, u128 b, u128 *out)
{
    u128 s = a + b;
    if (s < a)
        return 0;
    *out = s;
    return 1;
}

static int u128_mul64(u128 a, uint64_t m, u128 *out)
{
    if (m != 0 && a > (~(u128)0) / m)
        return 0;
    *out = a * m;
    return 1;
}

static void u128_divmod(u128 a, u128 d, u128 *q, u128 *r)
{
    *q = a / d;
    *r = a % d;
}

#else

typedef struct {
    uint64_t hi, lo;
} u128;

static u128 u128_make(uint64_t hi, uint64_t lo)
{
    u128 v;
    v.hi = hi;
    v.lo = lo;
    return v;
}
static uint64_t u128_hi(u128 a) { return a.hi; }
static uint64_t u128_lo(u128 a) { return a.lo; }
static int u128_lt(u128 a, u128 b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }

static int u128_add(u128 a, u128 b, u128 *out)
{
    u128 s;
    s.lo = a.lo + b.lo;
    s.hi = a.hi + b.hi + (s.lo < a.lo);
    if (s.hi < a.hi || (s.hi == a.hi && s.lo < a.lo))
        return 0;
    *out = s;
    return 1;
}

/* Schoolbook product on 32-bit limbs; fails if the result needs more than 128 bits. */
static int u128_mul64(u128 a, uint64_t m, u128 *out)
{
    uint32_t x[4], y[2];
    uint64_t acc[6] = {0, 0, 0, 0, 0, 0};
    int i, j;
    x[0] = (uint32_t)a.lo;
    x[1] = (uint32_t)(a.lo >> 32);
    x[2] = (uint32_t)a.hi;
    x[3] = (uint32_t)(a.hi >> 32);
    y[0] = (uint32_t)m;
    y[1] = (uint32_t)(m >> 32);
    for (i = 0; i < 4; i++) {
        for (j = 0; j < 2; j++) {
            uint64_t p = (uint64_t)x[i] * y[j];
            int k = i + j;
            acc[k] += p & 0xffffffffu;
            acc[k + 1] += p >> 32;
        }
    }
    for (i = 0; i < 5; i++) {
        acc[i + 1] += acc[i] >> 32;
        acc[i] &= 0xffffffffu;
    }
    if (acc[4] != 0 || acc[5] != 0)
        return 0;
    out->lo = acc[0] | (acc[1] << 32);
    out->hi = acc[2] | (acc[3] << 32);
    return 1;
}

/* Restoring binary long division, 128 steps (used at configuration time only). */
static void u128_divmod(u128 a, u128 d, u128 *q, u128 *r)
{
    u128 quo = u128_make(0, 0), rem = u128_make(0, 0);
    int bit;
    for (bit = 127; bit >= 0; bit--) {
        uint64_t in = bit >= 64 ? (a.hi >> (bit - 64)) & 1u : (a.lo >> bit) & 1u;
        rem.hi = (rem.hi << 1) | (rem.lo >> 63);
        rem.lo = (rem.lo << 1) | in;
        quo.hi = (quo.hi << 1) | (quo.lo >> 63);
        quo.lo <<= 1;
        /* rem < 2d after the shift: exact while d <= 2^127 (callers' divisors are < 2^125). */
        if (!u128_lt(rem, d)) {
            uint64_t borrow = rem.lo < d.lo;
            rem.lo -= d.lo;
            rem.hi -= d.hi + borrow;
            quo.lo |= 1u;
        }
    }
    *q = quo;
    *r = rem;
}

#endif

/* ceil(num / d) for quotients that fit in 64 bits. */
static uint64_t ceil_div_small(u128 num, u128 d)
{
    u128 q, r;
    u128_divmod(num, d, &q, &r);
    return u128_lo(q) + (u128_hi(r) != 0 || u128_lo(r) != 0);
}

/* ---- spec §2 ------------------------------------------------------------------------------ */

#define LDP_THRESH_SATURATED 1 /* internal: E >= 2^128, every threshold at its limit */

/* E(a, b) of spec §2. Each step computes floor(term * a / (b * i)) as
 * q1 * a + floor(r1 * a / (b * i)) with q1, r1 = divmod(term, b * i), so no intermediate
 * exceeds the result; LDP_THRESH_SATURATED when E itself needs more than 128 bits
 * (e^(a/b) >= 2^64, i.e. eps above about 44.36, where every threshold has reached its limit). */
static int exp_lower128(uint32_t a, uint32_t b, u128 *out)
{
    u128 term = u128_make(1, 0), total = u128_make(1, 0), q, r, step, rest;
    uint64_t i = 1;
    if (b == 0)
        return LDP_THRESH_EINVAL;
    while (u128_hi(term) != 0 || u128_lo(term) != 0) {
        uint64_t div = (uint64_t)b * i;
        u128_divmod(term, u128_make(0, div), &q, &r);
        if (!u128_mul64(q, a, &step))
            return LDP_THRESH_SATURATED;
        /* r < div < 2^64 and a < 2^32: r * a fits in 128 bits, and the quotient in 64. */
        if (!u128_mul64(r, a, &rest))
            return LDP_THRESH_ERANGE;
        u128_divmod(rest, u128_make(0, div), &q, &r);
        if (!u128_add(step, q, &term))
            return LDP_THRESH_SATURATED;
        if (!u128_add(total, term, &total))
            return LDP_THRESH_SATURATED;
        i++;
    }
    *out = total;
    return LDP_THRESH_OK;
}

int ldp_exp_lower(uint32_t a, uint32_t b, uint64_t *hi, uint64_t *lo)
{
    u128 e;
    int rc = exp_lower128(a, b, &e);
    if (rc == LDP_THRESH_SATURATED)
        return LDP_THRESH_ERANGE;
    if (rc != LDP_THRESH_OK)
        return rc;
    *hi = u128_hi(e);
    *lo = u128_lo(e);
    return LDP_THRESH_OK;
}

/* E_full (b = 1000) or E_half (b = 2000) of eps_milli; LDP_THRESH_SATURATED if >= 2^128. */
static int eps_exp(uint32_t eps_milli, uint32_t b, u128 *e)
{
    if (eps_milli == 0)
        return LDP_THRESH_EINVAL;
    if (eps_milli > LDP_EPS_MILLI_MAX)
        return LDP_THRESH_ERANGE;
    return exp_lower128(eps_milli, b, e);
}

/* ceil(W*S / (S + E)) = ceil(2^96 / (2^64 + E)); 1 once E >= 2^96 (the quotient is below 1). */
static int complement_rr(uint32_t eps_milli, uint32_t b, uint64_t *q)
{
    u128 e, d;
    int rc = eps_exp(eps_milli, b, &e);
    if (rc == LDP_THRESH_SATURATED || (rc == LDP_THRESH_OK && u128_hi(e) >= (1ull << 32))) {
        *q = 1;
        return LDP_THRESH_OK;
    }
    if (rc != LDP_THRESH_OK)
        return rc;
    if (!u128_add(e, u128_make(1, 0), &d))
        return LDP_THRESH_ERANGE;
    *q = ceil_div_small(u128_make(1ull << 32, 0), d);
    return LDP_THRESH_OK;
}

static uint32_t keep_threshold(uint64_t complement)
{
    uint64_t t = (1ull << 32) - complement;
    return t > 0xffffffffull ? 0xffffffffu : (uint32_t)t;
}

/* T_rr = floor(E_full*W / (S + E_full)); realised ratio T/(W-T) <= e^eps. */
int ldp_t_rr(uint32_t eps_milli, uint32_t *t)
{
    uint64_t q;
    int rc = complement_rr(eps_milli, 1000u, &q);
    if (rc != LDP_THRESH_OK)
        return rc;
    *t = keep_threshold(q);
    return LDP_THRESH_OK;
}

/* T_grr(n) = floor(E_full*W*c / (W*S + E_full*c)) = W - ceil(2^128 / d), d = E_full*c + 2^96,
 * c = cmin(n-1); T_rr for n = 2. d >= 2^128 gives W - 1 and d in [2^127, 2^128) gives W - 2
 * (ceil(2^128/d) is 1 or 2 there), so the division below only sees d < 2^127. */
int ldp_t_grr(uint32_t eps_milli, uint64_t n, uint32_t *t)
{
    u128 e, ec, d, q, r;
    uint64_t c;
    int rc;
    if (n < 2 || n > (1ull << 32))
        return LDP_THRESH_EINVAL;
    if (n == 2)
        return ldp_t_rr(eps_milli, t);
    rc = eps_exp(eps_milli, 1000u, &e);
    if (rc == LDP_THRESH_SATURATED) {
        *t = 0xffffffffu;
        return LDP_THRESH_OK;
    }
    if (rc != LDP_THRESH_OK)
        return rc;
    c = ldp_cmin(n - 1);
    if (!u128_mul64(e, c, &ec) || !u128_add(ec, u128_make(1ull << 32, 0), &d)) {
        *t = 0xffffffffu;
        return LDP_THRESH_OK;
    }
    if (u128_hi(d) >= (1ull << 63)) {
        *t = 0xfffffffeu;
        return LDP_THRESH_OK;
    }
    u128_divmod(u128_make(~0ull, ~0ull), d, &q, &r);
    *t = keep_threshold(u128_lo(q) + 1u);
    return LDP_THRESH_OK;
}

/* grr_ok(eps_milli, n) of spec §2: 1 iff GRR over n outputs bounds EVERY pair of outputs by
 * e^eps: n == 2, or 2^32 mod (n-1) == 0, or cmax(n-1) * S <= E_full * cmin(n-1). 0 if not,
 * or a negative error code for invalid arguments. */
int ldp_grr_ok(uint32_t eps_milli, uint64_t n)
{
    u128 e, lhs, rhs;
    uint64_t c;
    int rc;
    if (n < 2 || n > (1ull << 32))
        return LDP_THRESH_EINVAL;
    if (n == 2 || (1ull << 32) % (n - 1) == 0)
        return 1;
    rc = eps_exp(eps_milli, 1000u, &e);
    if (rc == LDP_THRESH_SATURATED)
        return 1;
    if (rc != LDP_THRESH_OK)
        return rc;
    c = ldp_cmin(n - 1);
    lhs = u128_make(c + 1, 0); /* cmax * S, cmax = c + 1 here */
    if (!u128_mul64(e, c, &rhs))
        return 1;
    return u128_hi(rhs) > u128_hi(lhs) || (u128_hi(rhs) == u128_hi(lhs) && u128_lo(rhs) >= u128_lo(lhs));
}

/* T_oue_q = ceil(W*S / (S + E_full)); realised ratio (W-T)/T <= e^eps. */
int ldp_t_oue_q(uint32_t eps_milli, uint32_t *t)
{
    uint64_t q;
    int rc = complement_rr(eps_milli, 1000u, &q);
    if (rc != LDP_THRESH_OK)
        return rc;
    *t = (uint32_t)q;
    return LDP_THRESH_OK;
}

/* T_flip = ceil(W*S / (S + E_half)); realised ratio ((W-T)/T)^2 <= e^eps. */
int ldp_t_flip(uint32_t eps_milli, uint32_t *t)
{
    uint64_t q;
    int rc = complement_rr(eps_milli, 2000u, &q);
    if (rc != LDP_THRESH_OK)
        return rc;
    *t = (uint32_t)q;
    return LDP_THRESH_OK;
}

uint32_t ldp_t_oue_p(void) { return LDP_T_OUE_P; }

uint32_t ldp_t_half(void) { return LDP_T_HALF; }

/* cmin(n) = floor(2^32 / n): the fewest words any bucket of bucket(., n) receives (0 if n == 0). */
uint64_t ldp_cmin(uint64_t n)
{
    return n == 0 ? 0 : (1ull << 32) / n;
}

/* cnt_n(r) = ceil((r+1)*2^32/n) - ceil(r*2^32/n); 0 outside 0 <= r < n <= 2^32. */
uint64_t ldp_bucket_count(uint64_t r, uint64_t n)
{
    u128 den;
    if (n == 0 || n > (1ull << 32) || r >= n)
        return 0;
    den = u128_make(0, n);
    return ceil_div_small(u128_make((r + 1) >> 32, (r + 1) << 32), den)
           - ceil_div_small(u128_make(r >> 32, r << 32), den);
}

/* ---- spec §3.1: `shc`, LDPMiner-SH with correlated phases ---------------------------------- */

/* Big-integer values of one (eps1, eps2): T1, A, B, E2 = E(eps1 + eps2, 1000). */
typedef struct {
    ldp_big t1, a, b, e2;
} shc_values;

static int shc_compute(uint32_t eps1, uint32_t eps2, shc_values *v)
{
    ldp_big w, s, g, sg, gms, tmp, num, den, wt1;
    uint32_t t1;
    int rc;
    if (eps1 == 0 || eps2 == 0)
        return LDP_THRESH_EINVAL;
    if (eps1 > LDP_EPS_MILLI_MAX || eps2 > LDP_EPS_MILLI_MAX || eps1 + eps2 > LDP_EPS_MILLI_MAX)
        return LDP_THRESH_ERANGE;
    rc = ldp_t_rr(eps1, &t1);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (!ldp_big_exp_lower(eps1 + eps2, 1000u, &v->e2))
        return LDP_THRESH_ERANGE;
    ldp_big_set_u64(&v->t1, t1);
    ldp_big_set_u64(&w, 1ull << 32);
    ldp_big_set_u64(&s, 0);
    s.w[2] = 1;                                          /* S = 2^64 */
    ldp_big_shr(&tmp, &v->e2, 16);
    ldp_big_sub(&g, &v->e2, &tmp);                       /* G = E2 - (E2 >> 16) */
    if (!ldp_big_add(&sg, &s, &g) || !ldp_big_sub(&gms, &g, &s) || ldp_big_is_zero(&gms))
        return LDP_THRESH_ERANGE;
    ldp_big_set_u64(&wt1, (1ull << 32) - t1);            /* W - T1 >= 1 */
    /* A = floor(W G (T1 (S+G) - W S) / ((S+G) (G-S) T1)) */
    if (!ldp_big_mul(&num, &v->t1, &sg) || !ldp_big_mul(&tmp, &w, &s)
        || !ldp_big_sub(&num, &num, &tmp) || !ldp_big_mul(&num, &num, &g)
        || !ldp_big_mul(&num, &num, &w) || !ldp_big_mul(&den, &sg, &gms)
        || !ldp_big_mul(&den, &den, &v->t1) || !ldp_big_div(&v->a, &num, &den))
        return LDP_THRESH_ERANGE;
    /* B = floor(W G (G W - T1 (S+G)) / ((S+G) (G-S) (W-T1))) */
    if (!ldp_big_mul(&num, &g, &w) || !ldp_big_mul(&tmp, &v->t1, &sg)
        || !ldp_big_sub(&num, &num, &tmp) || !ldp_big_mul(&num, &num, &g)
        || !ldp_big_mul(&num, &num, &w) || !ldp_big_mul(&den, &sg, &gms)
        || !ldp_big_mul(&den, &den, &wt1) || !ldp_big_div(&v->b, &num, &den))
        return LDP_THRESH_ERANGE;
    return LDP_THRESH_OK;
}

/* A u32 strictly between 0 and 2^32, else 0. */
static uint32_t open_word(const ldp_big *x)
{
    uint64_t v;
    if (!ldp_big_to_u64(x, &v) || v == 0 || v >= (1ull << 32))
        return 0;
    return (uint32_t)v;
}

int ldp_t_shc(uint32_t eps1_milli, uint32_t eps2_milli, uint32_t *t1, uint32_t *a, uint32_t *b)
{
    shc_values v;
    uint32_t ta, tb;
    uint64_t t;
    int rc = shc_compute(eps1_milli, eps2_milli, &v);
    if (rc != LDP_THRESH_OK)
        return rc;
    ta = open_word(&v.a);
    tb = open_word(&v.b);
    if (ta == 0 || tb == 0)
        return LDP_THRESH_ERANGE;
    ldp_big_to_u64(&v.t1, &t);
    *t1 = (uint32_t)t;
    *a = ta;
    *b = tb;
    return LDP_THRESH_OK;
}

/* l1 * l2 * S <= E2 * r1 * r2: one output's joint count under x against the other x's. */
static int within(const ldp_big *l1, const ldp_big *l2, const ldp_big *e2, const ldp_big *r1,
                  const ldp_big *r2)
{
    ldp_big lhs, rhs, s;
    ldp_big_set_u64(&s, 0);
    s.w[2] = 1; /* S = 2^64 */
    if (!ldp_big_mul(&lhs, l1, l2) || !ldp_big_mul(&lhs, &lhs, &s) || !ldp_big_mul(&rhs, r1, r2)
        || !ldp_big_mul(&rhs, &rhs, e2))
        return 0;
    return ldp_big_cmp(&lhs, &rhs) <= 0;
}

int ldp_shc_ok(uint32_t eps1_milli, uint32_t eps2_milli)
{
    shc_values v;
    ldp_big w, wt1, wa, wb;
    if (shc_compute(eps1_milli, eps2_milli, &v) != LDP_THRESH_OK)
        return 0;
    if (open_word(&v.a) == 0 || open_word(&v.b) == 0)
        return 0;
    ldp_big_set_u64(&w, 1ull << 32);
    ldp_big_sub(&wt1, &w, &v.t1);
    ldp_big_sub(&wa, &w, &v.a);
    ldp_big_sub(&wb, &w, &v.b);
    /* every output pair between x = +1 and x = -1 (spec §3.1) */
    return within(&v.t1, &v.a, &v.e2, &wt1, &wb) && within(&wt1, &wb, &v.e2, &v.t1, &v.a)
           && within(&v.t1, &wa, &v.e2, &wt1, &v.b) && within(&wt1, &v.b, &v.e2, &v.t1, &wa);
}
