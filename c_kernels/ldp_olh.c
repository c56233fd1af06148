/* OLH / FLH client perturbation and aggregator decoding, protocol v2 §3 (ids 2, 3).
 * OLH: Wang et al., "Locally Differentially Private Protocols for Frequency Estimation"
 * (USENIX Security 2017) §4.4; FLH: Cormode, Maddock, Maple, "Frequency Estimation under
 * Local Differential Privacy" (VLDB 2021) §4 (k' public hash functions). */
#include "ldp_bytes.h"
#include "ldp_olh.h"
#include "ldp_hash.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define LDP_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LDP_HOT
#endif

/* Reports per block of the decoder: the block's three u32 arrays stay in L1. */
#define LDP_OLH_BLOCK 2048

/* GRR over [0, g): keep v iff w_keep < t_keep, else r = bucket(w_other, g-1), r + (r >= v). */
static uint32_t grr_over(uint32_t v, uint32_t g, uint32_t t_keep, uint32_t w_keep, uint32_t w_other)
{
    uint32_t r;
    if (w_keep < t_keep)
        return v;
    r = ldp_bucket_inline(w_other, g - 1u);
    return r + (r >= v ? 1u : 0u);
}

static void put_body(uint8_t *o, uint32_t first, uint32_t y)
{
    put_le32(o, first);
    o[4] = (uint8_t)y;
    o[5] = (uint8_t)(y >> 8);
}

/* OLH: seed = w0; v = bucket(Hs(key, seed), g); y = GRR_g(v) with w1, w2.
 * Returns 0, or -1 (nothing written) unless 2 <= g <= 65536. */
int ldp_olh_perturb(const uint32_t *keys, size_t n, uint32_t g, uint32_t t_keep,
                    const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t i;
    if (g < 2u || g > 65536u)
        return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + 3 * i;
        uint32_t v = ldp_bucket_inline(ldp_hash_key(keys[i], w[0]), g);
        put_body(out + i * stride, w[0], grr_over(v, g, t_keep, w[1], w[2]));
    }
    return 0;
}

/* FLH: seed_index = bucket(w0, kp), seed = salt + seed_index; then OLH with w1, w2.
 * Returns 0, or -1 (nothing written) unless 2 <= g <= 65536 and kp >= 1. */
int ldp_flh_perturb(const uint32_t *keys, size_t n, uint32_t g, uint32_t kp, uint32_t salt,
                    uint32_t t_keep, const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t i;
    if (g < 2u || g > 65536u || kp < 1u)
        return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + 3 * i;
        uint32_t idx = ldp_bucket_inline(w[0], kp);
        uint32_t v = ldp_bucket_inline(ldp_hash_key(keys[i], salt + idx), g);
        put_body(out + i * stride, idx, grr_over(v, g, t_keep, w[1], w[2]));
    }
    return 0;
}

/* Smallest h with bucket(h, g) >= y, as a 64-bit value (2^32 for y = g). */
static uint64_t bucket_start(uint32_t y, uint32_t g)
{
    return (((uint64_t)y << 32) + g - 1u) / g;
}

/* Split OLH bodies into decoder arrays: rseed = rotl(seed, 13) and the word interval
 * [lo, lo + width) that bucket(., g) maps to y, so bucket(h, g) == y iff (h - lo) < width
 * (u32 arithmetic). A body with y >= g gets width 0 (supports nothing) and is counted. */
int64_t ldp_olh_prepare(const uint8_t *bodies, size_t n, size_t stride, uint32_t g,
                        uint32_t *rseed, uint32_t *lo, uint32_t *width)
{
    size_t i;
    int64_t bad = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *b = bodies + i * stride;
        uint32_t y = (uint32_t)b[4] | ((uint32_t)b[5] << 8);
        rseed[i] = ldp_rotl32(get_le32(b), 13);
        if (y < g) {
            uint64_t start = bucket_start(y, g);
            lo[i] = (uint32_t)start;
            width[i] = (uint32_t)(bucket_start(y + 1u, g) - start);
        } else {
            lo[i] = 0;
            width[i] = 0;
            bad += 1;
        }
    }
    return bad;
}

/* Murmur3 of a 4-byte key after the key/seed mixing: x = rotl(seed ^ kmix, 13). */
static inline uint32_t hash_after_rotl(uint32_t x)
{
    return ldp_fmix32((x * 5u + 0xe6546b64u) ^ 4u);
}

/* support[v] += #{i in block : bucket(Hs(keys[v], seed_i), g) == y_i}. */
LDP_HOT
static void olh_support_block(const uint32_t *rseed, const uint32_t *lo, const uint32_t *width,
                              size_t n, const uint32_t *keys, size_t d, int64_t *support)
{
    size_t v, i;
    for (v = 0; v < d; v++) {
        const uint32_t rk = ldp_rotl32(ldp_key_mix(keys[v]), 13);
        uint32_t hits = 0;
        for (i = 0; i < n; i++) {
            uint32_t h = hash_after_rotl(rseed[i] ^ rk);
            hits += (uint32_t)(h - lo[i]) < width[i];
        }
        support[v] += hits;
    }
}

/* OLH support counts over d domain keys from n prepared reports (Wang et al. §4.4:
 * item v is supported by report (seed, y) iff bucket(Hs(v, seed), g) == y). */
void ldp_olh_support(const uint32_t *rseed, const uint32_t *lo, const uint32_t *width, size_t n,
                     const uint32_t *keys, size_t d, int64_t *support)
{
    size_t start;
    for (start = 0; start < n; start += LDP_OLH_BLOCK) {
        size_t m = n - start < LDP_OLH_BLOCK ? n - start : LDP_OLH_BLOCK;
        olh_support_block(rseed + start, lo + start, width + start, m, keys, d, support);
    }
}

/* FLH: counts[seed_index * g + y] += 1 (kp x g table). Bodies out of range are skipped and
 * counted in the result. */
int64_t ldp_flh_count(const uint8_t *bodies, size_t n, size_t stride, uint32_t kp, uint32_t g,
                      int64_t *counts)
{
    size_t i;
    int64_t bad = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *b = bodies + i * stride;
        uint32_t idx = get_le32(b);
        uint32_t y = (uint32_t)b[4] | ((uint32_t)b[5] << 8);
        if (idx < kp && y < g)
            counts[(size_t)idx * g + y] += 1;
        else
            bad += 1;
    }
    return bad;
}

/* One public seed's row of the FLH table added to a block of items (rk = rotl(kmix, 13)). */
static inline void flh_row(const int64_t *restrict row, uint32_t rs, uint32_t g,
                           const uint32_t *restrict rk, size_t m, int64_t *restrict acc)
{
    size_t v;
    for (v = 0; v < m; v++)
        acc[v] += row[ldp_bucket_inline(hash_after_rotl(rs ^ rk[v]), g)];
}

/* FLH support: support[v] += sum_s counts[s, bucket(Hs(keys[v], salt + s), g)]. Items are
 * taken LDP_FLH_BLOCK at a time so their mixed keys and partial sums stay on the stack. */
#define LDP_FLH_BLOCK 512
LDP_HOT
void ldp_flh_support(const int64_t *counts, uint32_t kp, uint32_t g, uint32_t salt,
                     const uint32_t *keys, size_t d, int64_t *support)
{
    uint32_t rk[LDP_FLH_BLOCK];
    int64_t acc[LDP_FLH_BLOCK];
    size_t start, v;
    uint32_t s;
    for (start = 0; start < d; start += LDP_FLH_BLOCK) {
        size_t m = d - start < LDP_FLH_BLOCK ? d - start : LDP_FLH_BLOCK;
        for (v = 0; v < m; v++) {
            rk[v] = ldp_rotl32(ldp_key_mix(keys[start + v]), 13);
            acc[v] = 0;
        }
        for (s = 0; s < kp; s++)
            flh_row(counts + (size_t)s * g, ldp_rotl32(salt + s, 13), g, rk, m, acc);
        for (v = 0; v < m; v++)
            support[start + v] += acc[v];
    }
}
