/* Numeric metrics, protocol v2 §1.1 and §3.3 (see ldp_numeric.h). */
#include "ldp_numeric.h"

#include <math.h>

#include "ldp_bignum.h"
#include "ldp_bytes.h"
#include "ldp_hash.h"
#include "ldp_thresholds.h"

/* ---- spec §1.1: the grid point of a reading ------------------------------------------------ */

static const double POW10[10] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};

/* x = floor(t + 1/2), t = (reading * 10^decimals - lo) * (N - 1) / (hi - lo) in double, clipped to
 * [0, N-1]; not a number (is_number == 0) or NaN: the midpoint (N-1)/2. Each step is rounded to
 * double (volatile: no fused multiply-add), as Python and MicroPython evaluate it. */
uint32_t ldp_grid_point(double reading, int is_number, int64_t lo, int64_t hi, uint32_t decimals,
                        uint32_t n)
{
    volatile double a, b, c, t;
    double mid = (double)((n - 1u) / 2u), top = (double)(n - 1u);
    a = reading * POW10[decimals > 9u ? 9u : decimals];
    b = a - (double)lo;
    c = b * top;
    t = c / (double)(hi - lo);
    t = (is_number && t == t) ? t : mid;
    t = t < 0.0 ? 0.0 : t;
    t = t > top ? top : t;
    return (uint32_t)floor(t + 0.5);
}

/* ---- spec §3.3: thresholds ------------------------------------------------------------------ */

static void big_w(ldp_big *r) { ldp_big_set_u64(r, 1ull << 32); }

static void big_s(ldp_big *r)
{
    ldp_big_set_u64(r, 0);
    r->w[2] = 1; /* 2^64 */
}

static uint64_t cmax(uint64_t n) { return ldp_cmin(n) + ((1ull << 32) % n != 0); }

static int eps_ok(uint32_t eps_milli)
{
    if (eps_milli == 0)
        return LDP_THRESH_EINVAL;
    return eps_milli > LDP_EPS_MILLI_MAX ? LDP_THRESH_ERANGE : LDP_THRESH_OK;
}

/* s = 2 floor((2 T_rr - 2^32) / (2 (N-1))), base = T(0) = 2^31 - (s/2)(N-1). */
int ldp_duchi_slope(uint32_t eps_milli, uint32_t n, uint32_t *slope, uint32_t *base)
{
    uint32_t t;
    uint64_t delta, s;
    int rc;
    if (n < 2 || n > LDP_GRID_MAX)
        return LDP_THRESH_EINVAL;
    rc = ldp_t_rr(eps_milli, &t);
    if (rc != LDP_THRESH_OK)
        return rc;
    delta = 2ull * t - (1ull << 32);
    s = 2ull * (delta / (2ull * (n - 1u)));
    *slope = (uint32_t)s;
    *base = (uint32_t)((1ull << 31) - (s / 2u) * (n - 1u));
    return LDP_THRESH_OK;
}

/* duchi_ok: s >= 2 and T(N-1) S <= E_full T(0) (T(N-1) = 2^32 - T(0)). 1, 0 or an error. */
int ldp_duchi_ok(uint32_t eps_milli, uint32_t n)
{
    ldp_big e, lhs, rhs, s;
    uint32_t slope, base;
    int rc = ldp_duchi_slope(eps_milli, n, &slope, &base);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (slope < 2 || base == 0)
        return 0;
    if (!ldp_big_exp_lower(eps_milli, 1000u, &e))
        return LDP_THRESH_ERANGE;
    ldp_big_set_u64(&lhs, (uint64_t)base + (uint64_t)slope * (n - 1u));
    big_s(&s);
    ldp_big_set_u64(&rhs, base);
    if (!ldp_big_mul(&lhs, &lhs, &s) || !ldp_big_mul(&rhs, &rhs, &e))
        return LDP_THRESH_ERANGE;
    return ldp_big_cmp(&lhs, &rhs) <= 0;
}

/* T_win = floor(E_full W cmin(D) / (S cmax(L) + E_full cmin(D))), within [1, 2^32 - 1]. */
int ldp_window_threshold(uint32_t eps_milli, uint32_t width, uint32_t span, uint32_t *t)
{
    ldp_big e, num, den, tmp, q;
    uint64_t v;
    int rc = eps_ok(eps_milli);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (width == 0 || span == 0)
        return LDP_THRESH_EINVAL;
    if (!ldp_big_exp_lower(eps_milli, 1000u, &e))
        return LDP_THRESH_ERANGE;
    ldp_big_set_u64(&tmp, ldp_cmin(span));     /* cmin(D) <= 2^32: not a u32 */
    if (!ldp_big_mul(&num, &e, &tmp))
        return LDP_THRESH_ERANGE;
    den = num;                                  /* E cmin(D) */
    big_s(&tmp);
    ldp_big_set_u64(&q, cmax(width));
    if (!ldp_big_mul(&tmp, &tmp, &q) || !ldp_big_add(&den, &den, &tmp))
        return LDP_THRESH_ERANGE;
    big_w(&tmp);
    if (!ldp_big_mul(&num, &num, &tmp) || !ldp_big_div(&q, &num, &den))
        return LDP_THRESH_ERANGE;
    if (!ldp_big_to_u64(&q, &v) || v > 0xffffffffull)
        v = 0xffffffffull;
    *t = v == 0 ? 1u : (uint32_t)v;
    return LDP_THRESH_OK;
}

/* window_ok: largest count * S <= E_full * smallest count over the outputs' counts
 * T cnt_L(.) and (W - T) cnt_D(.). 1 if so, 0 if not, or a negative error. */
int ldp_window_ok(uint32_t eps_milli, uint32_t width, uint32_t span, uint32_t t)
{
    ldp_big e, lhs, rhs, tmp;
    uint64_t hi_max, hi_min, lo_max, lo_min, top, bottom;
    int rc = eps_ok(eps_milli);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (width == 0 || span == 0 || (uint64_t)width + span > (1ull << 32) || t == 0)
        return 0;
    hi_max = (uint64_t)t * cmax(width);
    hi_min = (uint64_t)t * ldp_cmin(width);
    lo_max = ((1ull << 32) - t) * cmax(span);
    lo_min = ((1ull << 32) - t) * ldp_cmin(span);
    top = hi_max > lo_max ? hi_max : lo_max;
    bottom = hi_min < lo_min ? hi_min : lo_min;
    if (bottom == 0)
        return 0;
    if (!ldp_big_exp_lower(eps_milli, 1000u, &e))
        return LDP_THRESH_ERANGE;
    ldp_big_set_u64(&lhs, top);
    big_s(&tmp);
    ldp_big_set_u64(&rhs, bottom);
    if (!ldp_big_mul(&lhs, &lhs, &tmp) || !ldp_big_mul(&rhs, &rhs, &e))
        return LDP_THRESH_ERANGE;
    return ldp_big_cmp(&lhs, &rhs) <= 0;
}

/* pm over N points: u = floor(65536 / (N-1)), D = u (N-1), L = max(1, floor(D S / E_half)). */
int ldp_pm_shape(uint32_t eps_milli, uint32_t n, uint32_t *u, uint32_t *span, uint32_t *width)
{
    ldp_big e, num, q;
    uint64_t v;
    int rc = eps_ok(eps_milli);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (n < 2 || n > LDP_GRID_MAX)
        return LDP_THRESH_EINVAL;
    if (!ldp_big_exp_lower(eps_milli, 2000u, &e))
        return LDP_THRESH_ERANGE;
    *u = LDP_PM_SPAN / (n - 1u);
    *span = *u * (n - 1u);
    big_s(&num);
    if (!ldp_big_mul_u32(&num, &num, *span) || !ldp_big_div(&q, &num, &e) || !ldp_big_to_u64(&q, &v))
        return LDP_THRESH_ERANGE;
    *width = v == 0 ? 1u : (uint32_t)v;
    return LDP_THRESH_OK;
}

/* T_hm = 2^32 - ceil(2^32 S / E_half) for eps_milli >= 611, else 0. */
int ldp_hm_choice_threshold(uint32_t eps_milli, uint32_t *t)
{
    ldp_big e, num, q, one;
    uint64_t v;
    int rc = eps_ok(eps_milli);
    if (rc != LDP_THRESH_OK)
        return rc;
    if (eps_milli < LDP_HM_PM_FROM) {
        *t = 0;
        return LDP_THRESH_OK;
    }
    if (!ldp_big_exp_lower(eps_milli, 2000u, &e))
        return LDP_THRESH_ERANGE;
    ldp_big_set_u64(&num, 0);
    num.w[3] = 1; /* W S = 2^96 */
    ldp_big_set_u64(&one, 1);
    ldp_big_sub(&num, &num, &one);                   /* W S - 1 */
    if (!ldp_big_div(&q, &num, &e) || !ldp_big_to_u64(&q, &v))
        return LDP_THRESH_ERANGE;
    v += 1;                                          /* ceil(W S / E_half) */
    *t = v >= (1ull << 32) ? 0u : (uint32_t)((1ull << 32) - v);
    return LDP_THRESH_OK;
}

/* ---- perturbation ------------------------------------------------------------------------- */

static inline uint32_t select32(uint32_t cond, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - cond; /* all ones iff cond == 1 */
    return (a & m) | (b & ~m);
}

/* The window channel at position p with words w0, w1 (both outputs computed, one kept). */
static inline uint32_t window_output(const ldp_window_params *p, uint32_t pos, uint32_t w0, uint32_t w1)
{
    uint32_t in = pos + ldp_bucket_inline(w1, p->width);
    uint32_t r = ldp_bucket_inline(w1, p->span);
    uint32_t out = r + (p->width & (0u - (uint32_t)(r >= pos)));
    return select32((uint32_t)(w0 < p->t_in), in, out);
}

static inline uint32_t window_position(const ldp_window_params *p, uint32_t x)
{
    return (uint32_t)(((uint64_t)x * p->mul) / p->div);
}

static void put_y(uint8_t *o, uint32_t y, uint32_t bytes)
{
    o[0] = (uint8_t)y;
    o[1] = (uint8_t)(y >> 8);
    if (bytes == 4) {
        o[2] = (uint8_t)(y >> 16);
        o[3] = (uint8_t)(y >> 24);
    }
}

static uint32_t get_y(const uint8_t *o, uint32_t bytes)
{
    uint32_t y = (uint32_t)o[0] | ((uint32_t)o[1] << 8);
    if (bytes == 4)
        y |= ((uint32_t)o[2] << 16) | ((uint32_t)o[3] << 24);
    return y;
}

/* Body b:u8 = 1 iff w0 < base + slope x. -1 (nothing written) if some x >= N. */
int ldp_duchi_perturb(const ldp_duchi_params *p, const uint32_t *x, size_t n, const uint32_t *words,
                      uint8_t *out, size_t stride)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (x[i] >= p->grid)
            return -1;
    for (i = 0; i < n; i++)
        out[i * stride] = (uint8_t)(words[i] < p->base + p->slope * x[i]);
    return 0;
}

/* ones += b over bodies b:u8; bodies with b > 1 are skipped and counted in the result. */
int64_t ldp_duchi_count(const uint8_t *bodies, size_t n, size_t stride, int64_t *ones)
{
    size_t i;
    int64_t skipped = 0, sum = 0;
    for (i = 0; i < n; i++) {
        uint8_t b = bodies[i * stride];
        if (b > 1u)
            skipped++;
        else
            sum += b;
    }
    *ones += sum;
    return skipped;
}

/* Body y (out_bytes) of the window channel from words 2i, 2i+1. -1 if some x >= N. */
int ldp_window_perturb(const ldp_window_params *p, const uint32_t *x, size_t n, const uint32_t *words,
                       uint8_t *out, size_t stride)
{
    size_t i;
    if (p->width == 0 || p->span == 0 || p->div == 0 || (p->out_bytes != 2 && p->out_bytes != 4))
        return -1;
    for (i = 0; i < n; i++)
        if (x[i] >= p->grid)
            return -1;
    for (i = 0; i < n; i++) {
        uint32_t y = window_output(p, window_position(p, x[i]), words[2 * i], words[2 * i + 1]);
        put_y(out + i * stride, y, p->out_bytes);
    }
    return 0;
}

/* sums[0] += y, sums[1] += y^2 >> 20, sums[2] += y^2 & (2^20 - 1); y >= D + L skipped (counted). */
int64_t ldp_window_sums(const ldp_window_params *p, const uint8_t *bodies, size_t n, size_t stride,
                        int64_t *sums)
{
    size_t i;
    int64_t skipped = 0, s = 0, hi = 0, lo = 0;
    uint32_t cells = p->span + p->width;
    for (i = 0; i < n; i++) {
        uint32_t y = get_y(bodies + i * stride, p->out_bytes);
        uint64_t sq;
        if (y >= cells) {
            skipped++;
            continue;
        }
        sq = (uint64_t)y * y;
        s += y;
        hi += (int64_t)(sq >> 20);
        lo += (int64_t)(sq & 0xfffffu);
    }
    sums[0] += s;
    sums[1] += hi;
    sums[2] += lo;
    return skipped;
}

/* counts[y] += 1 (D + L counts); y >= D + L skipped (counted). */
int64_t ldp_window_hist(const ldp_window_params *p, const uint8_t *bodies, size_t n, size_t stride,
                        int64_t *counts)
{
    size_t i;
    int64_t skipped = 0;
    uint32_t cells = p->span + p->width;
    for (i = 0; i < n; i++) {
        uint32_t y = get_y(bodies + i * stride, p->out_bytes);
        if (y < cells)
            counts[y] += 1;
        else
            skipped++;
    }
    return skipped;
}

/* hm: x holds d grid points per device, words 4k per device (k sampling words, then w_choice,
 * w0, w1 per entry). Metrics a_0..a_{k-1} by a partial Fisher-Yates shuffle of 0..d-1 with
 * r = i + bucket(w_i, d - i); entry i: attr a_i, kind 1 (PM) iff w_choice < t_choice, y the PM
 * cell or Duchi's bit of x[a_i] at the per-metric eps. -1 if d, k or some x is out of range. */
int ldp_hm_perturb(const ldp_hm_params *p, const uint32_t *x, size_t n, const uint32_t *words, uint8_t *out,
                   size_t stride)
{
    size_t i, total = n * p->metrics;
    uint32_t d = p->metrics, k = p->sampled, j;
    uint8_t perm[LDP_METRICS_MAX];
    if (d < 1 || d > LDP_METRICS_MAX || k < 1 || k > d || p->pm.grid != p->duchi.grid
        || p->pm.out_bytes != 4 || p->pm.width == 0 || p->pm.span == 0 || p->pm.div == 0)
        return -1;
    for (i = 0; i < total; i++)
        if (x[i] >= p->duchi.grid)
            return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + i * 4u * k, *xi = x + i * d;
        uint8_t *o = out + i * stride;
        for (j = 0; j < d; j++)
            perm[j] = (uint8_t)j;
        for (j = 0; j < k; j++) {
            uint32_t r = j + ldp_bucket_inline(w[j], d - j);
            uint8_t tmp = perm[j];
            perm[j] = perm[r];
            perm[r] = tmp;
        }
        for (j = 0; j < k; j++) {
            uint32_t a = perm[j], xa = xi[a];
            uint32_t wc = w[k + 3u * j], w0 = w[k + 3u * j + 1u], w1 = w[k + 3u * j + 2u];
            uint32_t kind = (uint32_t)(wc < p->t_choice);
            uint32_t bit = (uint32_t)(w0 < p->duchi.base + p->duchi.slope * xa);
            uint32_t cell = window_output(&p->pm, window_position(&p->pm, xa), w0, w1);
            o[6u * j] = (uint8_t)a;
            o[6u * j + 1u] = (uint8_t)kind;
            put_le32(o + 6u * j + 2u, select32(kind, cell, bit));
        }
    }
    return 0;
}

/* Per metric a, acc[6a ..]: Duchi reports, Duchi ones, PM reports, sum of PM cells, sum of
 * cell^2 >> 20, sum of cell^2 & (2^20 - 1). Entries with attr >= d, kind > 1 or y out of range
 * are skipped and counted in the result. */
int64_t ldp_hm_fold(const ldp_hm_params *p, const uint8_t *bodies, size_t n, size_t stride, int64_t *acc)
{
    size_t i;
    uint32_t j, cells = p->pm.span + p->pm.width;
    int64_t skipped = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *b = bodies + i * stride;
        for (j = 0; j < p->sampled; j++) {
            uint32_t a = b[6u * j], kind = b[6u * j + 1u], y = get_le32(b + 6u * j + 2u);
            int64_t *m;
            if (a >= p->metrics || kind > 1u || (kind == 0u && y > 1u) || (kind == 1u && y >= cells)) {
                skipped++;
                continue;
            }
            m = acc + 6u * a;
            if (kind == 0u) {
                m[0] += 1;
                m[1] += y;
            } else {
                uint64_t sq = (uint64_t)y * y;
                m[2] += 1;
                m[3] += y;
                m[4] += (int64_t)(sq >> 20);
                m[5] += (int64_t)(sq & 0xfffffu);
            }
        }
    }
    return skipped;
}
