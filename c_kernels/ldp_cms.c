/* CMS / LCM client and aggregation kernels, protocol v2 §3 (ids 5 and 9). */
#include "ldp_cms.h"
#include "ldp_hash.h"

#if defined(__GNUC__) && defined(__x86_64__)
#define CMS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CMS_CLONES
#endif

/* Bits i in [0, m) of the flip mask: bit i is 1 iff w[i] < t (spec §2 Bernoulli(t)).
 * Groups of 32 words make one u32 mask (vectorizes), the tail goes bit by bit. */
CMS_CLONES
void ldp_flip_bitmap(const uint32_t *w, uint32_t m, uint32_t t, uint8_t *bits)
{
    uint32_t groups = m >> 5, g, b, i;
    for (g = 0; g < groups; g++) {
        const uint32_t *wg = w + 32 * (size_t)g;
        uint32_t v = 0;
        for (b = 0; b < 32; b++)
            v |= (uint32_t)(wg[b] < t) << b;
        bits[4 * (size_t)g] = (uint8_t)(v & 0xffu);
        bits[4 * (size_t)g + 1] = (uint8_t)((v >> 8) & 0xffu);
        bits[4 * (size_t)g + 2] = (uint8_t)((v >> 16) & 0xffu);
        bits[4 * (size_t)g + 3] = (uint8_t)(v >> 24);
    }
    for (i = groups << 5; i < m; i++) {
        if ((i & 7u) == 0)
            bits[i >> 3] = 0;
        bits[i >> 3] |= (uint8_t)((unsigned)(w[i] < t) << (i & 7u));
    }
}

void ldp_cms_perturb(const uint32_t *keys, const uint8_t *high, size_t n, uint32_t salt,
                     uint32_t k, uint32_t m, uint32_t t_flip, const uint32_t *words,
                     uint8_t *out, size_t stride)
{
    size_t u, per_user = 1 + (size_t)m;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + u * per_user;
        uint8_t *o = out + u * stride;
        uint32_t j = ldp_bucket_inline(w[0], k);
        o[0] = (uint8_t)(j & 0xffu);
        o[1] = (uint8_t)(j >> 8);
        ldp_flip_bitmap(w + 1, m, t_flip, o + 2);
        if (high == NULL || high[u] == 0) {
            uint32_t c = ldp_bucket_inline(ldp_hash_mixed(ldp_key_mix(keys[u]), salt + j), m);
            o[2 + (c >> 3)] ^= (uint8_t)(1u << (c & 7u));
        }
    }
}

/* row[i] += bit i of the bitmap: whole u32 groups of 32 bits (vectorizes), then the tail. */
CMS_CLONES
static void add_bits(const uint8_t *bits, uint32_t m, int64_t *row)
{
    uint32_t groups = m >> 5, g, b, i;
    for (g = 0; g < groups; g++) {
        const uint8_t *p = bits + 4 * (size_t)g;
        uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
                     | ((uint32_t)p[3] << 24);
        int64_t *r = row + 32 * (size_t)g;
        for (b = 0; b < 32; b++)
            r[b] += (int64_t)((v >> b) & 1u);
    }
    for (i = groups << 5; i < m; i++)
        row[i] += (bits[i >> 3] >> (i & 7u)) & 1u;
}

size_t ldp_cms_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t k, uint32_t m,
                          int64_t *row_counts, int64_t *ones)
{
    size_t u, skipped = 0;
    for (u = 0; u < n; u++) {
        const uint8_t *b = bodies + u * stride;
        uint32_t j = (uint32_t)b[0] | ((uint32_t)b[1] << 8);
        if (j >= k) {
            skipped++;
            continue;
        }
        row_counts[j] += 1;
        add_bits(b + 2, m, ones + (size_t)j * m);
    }
    return skipped;
}

void ldp_sketch_gather(const int64_t *matrix, uint32_t k, uint32_t m, uint32_t salt,
                       const double *row_weight, const uint32_t *keys, size_t nkeys, double *out)
{
    size_t i;
    uint32_t j;
    for (i = 0; i < nkeys; i++) {
        uint32_t kmix = ldp_key_mix(keys[i]);
        double s = 0.0;
        for (j = 0; j < k; j++) {
            uint32_t c = ldp_bucket_inline(ldp_hash_mixed(kmix, salt + j), m);
            s += row_weight[j] * (double)matrix[(size_t)j * m + c];
        }
        out[i] = s;
    }
}
