/* Longitudinal (memoised) mechanisms, protocol v2 §3.2 (see ldp_longitudinal.h).
 * Arcolezi et al., "Improving the utility of locally differentially private protocols for
 * longitudinal and multidimensional frequency estimates" (DCN 2022) §3-4 (L-GRR, L-OSUE,
 * L-SUE); Arcolezi et al., "Frequency estimation of evolving data under local differential
 * privacy" (EDBT 2023) §4 (LOLOHA); Ding, Kulkarni, Yekhanin, "Collecting telemetry data
 * privately" (NeurIPS 2017) §3 (1BitMean, alpha-point rounding, memoisation, output
 * perturbation). */
#include "ldp_bignum.h"
#include "ldp_bytes.h"
#include "ldp_hash.h"
#include "ldp_longitudinal.h"
#include "ldp_thresholds.h"

#define W64 (1ull << 32)

/* GRR over n outputs from `c`: keep iff w_keep < t, else r = bucket(w_other, n-1), r + (r >= c). */
static uint32_t grr_step(uint32_t c, uint32_t n, uint32_t t, uint32_t w_keep, uint32_t w_other)
{
    uint32_t r;
    if (w_keep < t)
        return c;
    r = ldp_bucket_inline(w_other, n - 1u);
    return r + (r >= c ? 1u : 0u);
}

/* n_out GRR entries: entry b = grr_step(b, n_out, t, w[2b], w[2b+1]), one byte each. */
static void grr_table(uint32_t n_out, uint32_t t, const uint32_t *w, uint8_t *out)
{
    uint32_t b;
    for (b = 0; b < n_out; b++)
        out[b] = (uint8_t)grr_step(b, n_out, t, w[2 * b], w[2 * b + 1]);
}

int ldp_lgrr_enrol(size_t n, uint32_t N, uint32_t t_perm, const uint32_t *words, uint8_t *out,
                   size_t stride)
{
    size_t i;
    if (N < 2u || N > LDP_LGRR_N_MAX)
        return -1;
    for (i = 0; i < n; i++)
        grr_table(N, t_perm, words + i * 2u * N, out + i * stride);
    return 0;
}

/* y = GRR_N(state[x]) with w0 (keep) and w1 (other); body y:u32. */
int ldp_lgrr_perturb(const uint32_t *x, size_t n, uint32_t N, uint32_t t_inst, const uint8_t *states,
                     size_t state_stride, const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t i;
    if (N < 2u || N > LDP_LGRR_N_MAX)
        return -1;
    for (i = 0; i < n; i++)
        if (x[i] >= N || states[i * state_stride + x[i]] >= N)
            return -1;
    for (i = 0; i < n; i++) {
        uint32_t c = states[i * state_stride + x[i]];
        put_le32(out + i * stride, grr_step(c, N, t_inst, words[2 * i], words[2 * i + 1]));
    }
    return 0;
}

/* seed = w0 (public, reported), then the g-entry table of permanent outputs from w1..w2g. */
int ldp_loloha_enrol(size_t n, uint32_t g, uint32_t t_perm, const uint32_t *words, uint8_t *out,
                     size_t stride)
{
    size_t i;
    if (g < 2u || g > LDP_LOLOHA_G_MAX)
        return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + i * (1u + 2u * (size_t)g);
        put_le32(out + i * stride, w[0]);
        grr_table(g, t_perm, w + 1, out + i * stride + 4);
    }
    return 0;
}

/* b = bucket(Hs(key, seed), g), c = table[b], y = GRR_g(c) with w0, w1; body seed:u32, y:u16. */
int ldp_loloha_perturb(const uint32_t *keys, size_t n, uint32_t g, uint32_t t_inst,
                       const uint8_t *states, size_t state_stride, const uint32_t *words, uint8_t *out,
                       size_t stride)
{
    size_t i;
    uint32_t b;
    if (g < 2u || g > LDP_LOLOHA_G_MAX)
        return -1;
    for (i = 0; i < n; i++)
        for (b = 0; b < g; b++)
            if (states[i * state_stride + 4 + b] >= g)
                return -1;
    for (i = 0; i < n; i++) {
        const uint8_t *st = states + i * state_stride;
        uint32_t seed = get_le32(st), y;
        b = ldp_bucket_inline(ldp_hash_key(keys[i], seed), g);
        y = grr_step(st[4 + b], g, t_inst, words[2 * i], words[2 * i + 1]);
        put_le32(out + i * stride, seed);
        out[i * stride + 4] = (uint8_t)y;
        out[i * stride + 5] = (uint8_t)(y >> 8);
    }
    return 0;
}

/* Row v, bit j (LSB first, ceil(N/8) bytes a row) = w[vN + j] < (j == v ? t_p : t_q). */
int ldp_lue_enrol(size_t n, uint32_t N, uint32_t t_p, uint32_t t_q, const uint32_t *words, uint8_t *out,
                  size_t stride)
{
    size_t i, v, j;
    const size_t row = ((size_t)N + 7u) / 8u;
    if (N < 2u || N > LDP_LUE_N_MAX)
        return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + i * (size_t)N * N;
        uint8_t *st = out + i * stride;
        for (v = 0; v < N; v++) {
            uint8_t *r = st + v * row;
            for (j = 0; j < row; j++)
                r[j] = 0;
            for (j = 0; j < N; j++)
                if (w[v * N + j] < (j == v ? t_p : t_q))
                    r[j >> 3] = (uint8_t)(r[j >> 3] | (1u << (j & 7u)));
        }
    }
    return 0;
}

/* Body bit j = (row x of the state, bit j) XOR (w_j < t_flip). */
int ldp_lue_perturb(const uint32_t *x, size_t n, uint32_t N, uint32_t t_flip, const uint8_t *states,
                    size_t state_stride, const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t i, j, k;
    const size_t row = ((size_t)N + 7u) / 8u, full = N / 8u, rem = N % 8u;
    if (N < 2u || N > LDP_LUE_N_MAX)
        return -1;
    for (i = 0; i < n; i++)
        if (x[i] >= N)
            return -1;
    for (i = 0; i < n; i++) {
        const uint8_t *r = states + i * state_stride + x[i] * row;
        const uint32_t *w = words + i * (size_t)N;
        uint8_t *o = out + i * stride;
        for (j = 0; j < full; j++) {
            unsigned b = 0;
            for (k = 0; k < 8; k++)
                b |= (unsigned)(w[8 * j + k] < t_flip) << k;
            o[j] = (uint8_t)(r[j] ^ b);
        }
        if (rem) {
            unsigned b = 0;
            for (k = 0; k < rem; k++)
                b |= (unsigned)(w[8 * full + k] < t_flip) << k;
            o[full] = (uint8_t)((r[full] ^ b) & ((1u << rem) - 1u));
        }
    }
    return 0;
}

/* T_j = t0 + floor(j (W - 2 t0) / s): grid point j's permanent bit is 1 iff w < T_j. */
static uint32_t bit_threshold(uint32_t j, uint32_t s, uint32_t t0)
{
    return t0 + (uint32_t)(((uint64_t)j * (W64 - 2u * (uint64_t)t0)) / s);
}

/* alpha = w0; bit j of the bitmap = w[1 + j] < T_j, j = 0..s. */
int ldp_lbitmean_enrol(size_t n, uint32_t s, uint32_t t0, const uint32_t *words, uint8_t *out,
                       size_t stride)
{
    size_t i;
    uint32_t j;
    if (s < 1u || s > LDP_LBITMEAN_S_MAX || t0 == 0 || t0 > W64 / 2)
        return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + i * (2u + (size_t)s);
        uint8_t *st = out + i * stride;
        put_le32(st, w[0]);
        for (j = 0; j <= s / 8u; j++)
            st[4 + j] = 0;
        for (j = 0; j <= s; j++)
            if (w[1 + j] < bit_threshold(j, s, t0))
                st[4 + (j >> 3)] = (uint8_t)(st[4 + (j >> 3)] | (1u << (j & 7u)));
    }
    return 0;
}

/* x in [0, m]: j = x s / m, rho = x s mod m, up to j + 1 iff alpha < floor(rho W / m)
 * (alpha-point rounding, E[j] = x s / m); y = bit j XOR (w0 < t_flip); body y:u8. */
int ldp_lbitmean_perturb(const uint32_t *x, size_t n, uint32_t m, uint32_t s, uint32_t t_flip,
                         const uint8_t *states, size_t state_stride, const uint32_t *words, uint8_t *out,
                         size_t stride)
{
    size_t i;
    if (m < 1u || s < 1u || s > LDP_LBITMEAN_S_MAX)
        return -1;
    for (i = 0; i < n; i++)
        if (x[i] > m)
            return -1;
    for (i = 0; i < n; i++) {
        const uint8_t *st = states + i * state_stride;
        uint64_t xs = (uint64_t)x[i] * s;
        uint32_t j = (uint32_t)(xs / m), rho = (uint32_t)(xs % m);
        uint32_t up = (uint32_t)(((uint64_t)rho << 32) / m);
        unsigned bit;
        if (get_le32(st) < up)
            j += 1u;
        bit = (st[4 + (j >> 3)] >> (j & 7u)) & 1u;
        out[i * stride] = (uint8_t)(bit ^ (unsigned)(words[i] < t_flip));
    }
    return 0;
}

/* Number of bodies with y = 1; -1 if some y > 1 (the sketch validates first). */
int64_t ldp_lbitmean_count(const uint8_t *bodies, size_t n, size_t stride)
{
    size_t i;
    int64_t ones = 0;
    for (i = 0; i < n; i++) {
        uint8_t y = bodies[i * stride];
        if (y > 1u)
            return -1;
        ones += y;
    }
    return ones;
}

/* ---- thresholds (spec §3.2): the instantaneous step, exact in 512-bit integers ---------- */

static void big(ldp_big *r, uint64_t v) { ldp_big_set_u64(r, v); }

/* 2^64 (S, and W^2) */
static void big_2_64(ldp_big *r)
{
    ldp_big_set_u64(r, 0);
    r->w[2] = 1;
}

/* hi * S <= e1 * lo (0 on overflow, which the ranges here never reach) */
static int ratio_ok(const ldp_big *hi, const ldp_big *lo, const ldp_big *e1)
{
    ldp_big a, b, s;
    big_2_64(&s);
    if (!ldp_big_mul(&a, hi, &s) || !ldp_big_mul(&b, e1, lo))
        return 0;
    return ldp_big_cmp(&a, &b) <= 0;
}

/* x (W - f) + (W - x) f: a bit that is 1 w.p. x/W, flipped iff w < f, is 1 w.p. this / W^2. */
static void mix(ldp_big *r, uint64_t x, uint64_t f)
{
    ldp_big a, b;
    big(&a, x);
    big(&b, W64 - f);
    ldp_big_mul(&a, &a, &b);
    big(r, W64 - x);
    big(&b, f);
    ldp_big_mul(r, r, &b);
    ldp_big_add(r, r, &a);
}

static int lue_ok(uint64_t t_p, uint64_t t_q, uint64_t f, const ldp_big *e1)
{
    ldp_big ps, qs, w2, a, b, ps_c, qs_c;
    mix(&ps, t_p, f);
    mix(&qs, t_q, f);
    big_2_64(&w2); /* W^2 */
    ldp_big_sub(&ps_c, &w2, &ps);
    ldp_big_sub(&qs_c, &w2, &qs);
    if (!ldp_big_mul(&a, &ps, &qs_c) || !ldp_big_mul(&b, &qs, &ps_c))
        return 0;
    return ratio_ok(&a, &b, e1) && ratio_ok(&b, &a, e1);
}

static int bit_ok(uint64_t t0, uint64_t f, const ldp_big *e1)
{
    ldp_big hi, lo;
    mix(&hi, W64 - t0, f);
    mix(&lo, t0, f);
    return ratio_ok(&hi, &lo, e1);
}

static int eps1_big(uint32_t eps1_milli, ldp_big *e1)
{
    if (eps1_milli == 0)
        return LDP_THRESH_EINVAL;
    if (eps1_milli > LDP_EPS_MILLI_MAX || !ldp_big_exp_lower(eps1_milli, 1000u, e1))
        return LDP_THRESH_ERANGE;
    return LDP_THRESH_OK;
}

int ldp_t_lue_inst(uint32_t t_p, uint32_t t_q, uint32_t eps1_milli, uint32_t *f)
{
    ldp_big e1;
    int64_t lo = -1, hi = (int64_t)(W64 / 2);
    int rc = eps1_big(eps1_milli, &e1);
    if (rc != LDP_THRESH_OK)
        return rc;
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (lue_ok(t_p, t_q, (uint64_t)mid, &e1))
            hi = mid;
        else
            lo = mid;
    }
    *f = (uint32_t)hi;
    return LDP_THRESH_OK;
}

int ldp_t_bit_inst(uint32_t t0, uint32_t eps1_milli, uint32_t *f)
{
    ldp_big e1;
    int64_t lo = -1, hi = (int64_t)(W64 / 2);
    int rc = eps1_big(eps1_milli, &e1);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (t0 == 0 || t0 > W64 / 2)
        return LDP_THRESH_EINVAL;
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (bit_ok(t0, (uint64_t)mid, &e1))
            hi = mid;
        else
            lo = mid;
    }
    *f = (uint32_t)hi;
    return LDP_THRESH_OK;
}

/* Bounds of GRR(t_perm) then GRR(t_inst) over N outputs (units W^4), as
 * ldpfleet.mechanisms.longitudinal.grr_chain_bounds; all four ratios <= e1/S. */
static int grr_chain_ok(uint64_t N, uint64_t t_perm, uint64_t t_inst, const ldp_big *e1)
{
    uint64_t c_lo = ldp_cmin(N - 1), c_hi = c_lo + ((W64 % (N - 1)) ? 1u : 0u);
    ldp_big w, w2, k1, k2, o1lo, o1hi, o2lo, o2hi, r1, t, u, s_lo, s_hi, x_lo, x_hi;
    big(&w, W64);
    big_2_64(&w2);
    big(&k1, t_perm);
    ldp_big_mul(&k1, &k1, &w);
    big(&k2, t_inst);
    ldp_big_mul(&k2, &k2, &w);
    big(&t, W64 - t_perm);
    big(&u, c_lo);
    ldp_big_mul(&o1lo, &t, &u);
    big(&u, c_hi);
    ldp_big_mul(&o1hi, &t, &u);
    big(&t, W64 - t_inst);
    big(&u, c_lo);
    ldp_big_mul(&o2lo, &t, &u);
    big(&u, c_hi);
    ldp_big_mul(&o2hi, &t, &u);
    if (!ldp_big_sub(&r1, &w2, &k1) || ldp_big_cmp(&k2, &o2hi) < 0)
        return 0;
    ldp_big_mul(&t, &k1, &k2);
    ldp_big_mul(&u, &r1, &o2lo);
    ldp_big_add(&s_lo, &t, &u);
    ldp_big_mul(&u, &r1, &o2hi);
    ldp_big_add(&s_hi, &t, &u);
    ldp_big_sub(&t, &k2, &o2lo);
    ldp_big_mul(&t, &o1lo, &t);
    ldp_big_mul(&u, &w2, &o2lo);
    ldp_big_add(&x_lo, &t, &u);
    ldp_big_sub(&t, &k2, &o2hi);
    ldp_big_mul(&t, &o1hi, &t);
    ldp_big_mul(&u, &w2, &o2hi);
    ldp_big_add(&x_hi, &t, &u);
    return ratio_ok(&s_hi, &x_lo, e1) && ratio_ok(&x_hi, &s_lo, e1) && ratio_ok(&x_hi, &x_lo, e1)
           && ratio_ok(&s_hi, &s_lo, e1);
}

int ldp_t_grr_inst(uint32_t N, uint32_t t_perm, uint32_t eps1_milli, uint32_t *t)
{
    ldp_big e1;
    uint64_t c_hi, lo, hi;
    int rc = eps1_big(eps1_milli, &e1);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (N < 2u)
        return LDP_THRESH_EINVAL;
    c_hi = ldp_cmin(N - 1) + ((W64 % (N - 1)) ? 1u : 0u);
    { /* lo = ceil(W c_hi / (W + c_hi)): the least t with t W >= (W - t) c_hi */
        ldp_big num, den, q;
        big(&num, c_hi);
        big(&den, W64);
        ldp_big_mul(&num, &num, &den);
        big(&den, W64 + c_hi - 1u);
        ldp_big_add(&num, &num, &den);
        big(&den, W64 + c_hi);
        ldp_big_div(&q, &num, &den);
        ldp_big_to_u64(&q, &lo);
    }
    if (!grr_chain_ok(N, t_perm, lo, &e1))
        return LDP_THRESH_ERANGE;
    hi = W64;
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (grr_chain_ok(N, t_perm, mid, &e1))
            lo = mid;
        else
            hi = mid;
    }
    *t = (uint32_t)lo;
    return LDP_THRESH_OK;
}
