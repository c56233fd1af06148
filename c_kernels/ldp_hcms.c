/* HCMS client, aggregation and the fast Walsh-Hadamard transform, protocol v2 §3 (id 6). */
#include "ldp_hcms.h"
#include "ldp_hash.h"

static unsigned hcms_parity(uint32_t x)
{
    x ^= x >> 16;
    x ^= x >> 8;
    x ^= x >> 4;
    x ^= x >> 2;
    x ^= x >> 1;
    return (unsigned)(x & 1u);
}

void ldp_hcms_perturb(const uint32_t *keys, size_t n, uint32_t salt, uint32_t k, uint32_t m,
                      uint32_t t_rr, const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t u;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + 3 * u;
        uint8_t *o = out + u * stride;
        uint32_t j = ldp_bucket_inline(w[0], k);
        uint32_t c = ldp_bucket_inline(ldp_hash_mixed(ldp_key_mix(keys[u]), salt + j), m);
        uint32_t l = ldp_bucket_inline(w[1], m);
        unsigned plus = hcms_parity(l & c) == 0u;     /* h = +1 */
        unsigned keep = w[2] < t_rr;
        o[0] = (uint8_t)(j & 0xffu);
        o[1] = (uint8_t)(j >> 8);
        o[2] = (uint8_t)(l & 0xffu);
        o[3] = (uint8_t)(l >> 8);
        o[4] = (uint8_t)(plus == keep);
    }
}

size_t ldp_hcms_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t k, uint32_t m,
                           int64_t *sums)
{
    size_t u, skipped = 0;
    for (u = 0; u < n; u++) {
        const uint8_t *b = bodies + u * stride;
        uint32_t j = (uint32_t)b[0] | ((uint32_t)b[1] << 8);
        uint32_t l = (uint32_t)b[2] | ((uint32_t)b[3] << 8);
        if (j >= k || l >= m || b[4] > 1u) {
            skipped++;
            continue;
        }
        sums[(size_t)j * m + l] += b[4] ? 1 : -1;
    }
    return skipped;
}

void ldp_fwht_i64(int64_t *data, size_t rows, uint32_t m)
{
    size_t r;
    uint32_t h, i, t;
    for (r = 0; r < rows; r++) {
        int64_t *x = data + r * m;
        for (h = 1; h < m; h <<= 1)
            for (i = 0; i < m; i += 2 * h)
                for (t = i; t < i + h; t++) {
                    int64_t a = x[t], b = x[t + h];
                    x[t] = a + b;
                    x[t + h] = a - b;
                }
    }
}

void ldp_fwht_f64(double *data, size_t rows, uint32_t m)
{
    size_t r;
    uint32_t h, i, t;
    for (r = 0; r < rows; r++) {
        double *x = data + r * m;
        for (h = 1; h < m; h <<= 1)
            for (i = 0; i < m; i += 2 * h)
                for (t = i; t < i + h; t++) {
                    double a = x[t], b = x[t + h];
                    x[t] = a + b;
                    x[t + h] = a - b;
                }
    }
}
