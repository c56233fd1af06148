/* Sampling SH and sampling RAPPOR kernels (LDPMiner §4.2, Alg. 2), protocol v2 §3 (ids 7, 8). */
#include "ldp_sh.h"
#include "ldp_cms.h"
#include "ldp_hash.h"
#include "ldp_bytes.h"

#define SH_HALF 0x80000000u
#define SH_TILE 256

#if defined(__GNUC__) && defined(__x86_64__)
#define SH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SH_CLONES
#endif

/* Index of the element reported by a user holding s keys: bucket(w0, max(l, s)). */
static uint32_t sampled_index(uint32_t w0, uint64_t s, uint32_t l)
{
    uint32_t big = s > (uint64_t)l ? (uint32_t)s : l;
    return ldp_bucket_inline(w0, big);
}

void ldp_sh_body(uint32_t key, uint32_t real, uint32_t salt, uint32_t m, uint32_t t_rr,
                 const uint32_t *w, uint8_t *o)
{
    uint32_t t = ldp_bucket_inline(w[1], m);
    uint32_t phi_plus = ldp_hash_mixed(ldp_key_mix(key), salt + t) < SH_HALF;
    uint32_t keep = w[2] < t_rr;
    uint32_t plus = ldp_select(real, phi_plus == keep, w[2] < SH_HALF);
    put_le32(o, t);
    o[4] = (uint8_t)plus;
}

void ldp_sh_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                    uint32_t salt, uint32_t m, uint32_t t_rr, const uint32_t *words,
                    uint8_t *out, size_t stride)
{
    size_t u;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + 3 * u;
        uint64_t s = offsets[u + 1] - offsets[u];
        uint32_t i = sampled_index(w[0], s, l);
        uint32_t real = (uint64_t)i < s;
        ldp_sh_body(real ? keys[offsets[u] + i] : 0u, real, salt, m, t_rr, w, out + u * stride);
    }
}

size_t ldp_sh_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t m, int64_t *z)
{
    size_t u, skipped = 0;
    for (u = 0; u < n; u++) {
        const uint8_t *b = bodies + u * stride;
        uint32_t t = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16)
                     | ((uint32_t)b[3] << 24);
        if (t >= m || b[4] > 1u) {
            skipped++;
            continue;
        }
        z[t] += b[4] ? 1 : -1;
    }
    return skipped;
}

/* out[i] = sum_t z_t * phi(t, key_i), phi = +1 iff Hs(key_i, salt + t) < 2^31: computed as
 * sum_t z_t - 2 * sum_{t: phi = -1} z_t, tiles of items against every nonzero position. */
SH_CLONES
void ldp_sh_decode(const uint32_t *ts, const int64_t *zs, size_t nt, uint32_t salt,
                   const uint32_t *keys, size_t nkeys, int64_t *out)
{
    uint32_t kmix[SH_TILE];
    int64_t acc[SH_TILE];
    int64_t total = 0;
    size_t base, t, i;
    for (t = 0; t < nt; t++)
        total += zs[t];
    for (base = 0; base < nkeys; base += SH_TILE) {
        size_t cnt = nkeys - base < SH_TILE ? nkeys - base : SH_TILE;
        for (i = 0; i < cnt; i++) {
            kmix[i] = ldp_key_mix(keys[base + i]);
            acc[i] = 0;
        }
        for (t = 0; t < nt; t++) {
            uint32_t seed = salt + ts[t];
            int64_t z = zs[t];
            for (i = 0; i < cnt; i++) {
                uint32_t h = ldp_hash_mixed(kmix[i], seed);
                int64_t mask = -(int64_t)(h >> 31);
                acc[i] += z & mask;
            }
        }
        for (i = 0; i < cnt; i++)
            out[base + i] = total - 2 * acc[i];
    }
}

static uint32_t candidate_bit(const uint32_t *sorted, const uint32_t *index, uint32_t kc,
                              uint32_t key)
{
    uint32_t lo = 0, hi = kc;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < kc && sorted[lo] == key) ? index[lo] : kc;
}

/* Heap sort of (key, index) pairs by key: O(kc log kc), no allocation. */
static void sift_down(uint32_t *keys, uint32_t *index, uint32_t root, uint32_t size)
{
    for (;;) {
        uint32_t child = 2 * root + 1, tk, ti;
        if (child >= size)
            return;
        if (child + 1 < size && keys[child + 1] > keys[child])
            child++;
        if (keys[root] >= keys[child])
            return;
        tk = keys[root];
        keys[root] = keys[child];
        keys[child] = tk;
        ti = index[root];
        index[root] = index[child];
        index[child] = ti;
        root = child;
    }
}

void ldp_srappor_sort_candidates(const uint32_t *candidates, uint32_t kc, uint32_t *cand_sorted,
                                 uint32_t *cand_index)
{
    uint32_t i, end;
    for (i = 0; i < kc; i++) {
        cand_sorted[i] = candidates[i];
        cand_index[i] = i;
    }
    for (i = kc / 2; i > 0; i--)
        sift_down(cand_sorted, cand_index, i - 1, kc);
    for (end = kc; end > 1; end--) {
        uint32_t tk = cand_sorted[0], ti = cand_index[0];
        cand_sorted[0] = cand_sorted[end - 1];
        cand_sorted[end - 1] = tk;
        cand_index[0] = cand_index[end - 1];
        cand_index[end - 1] = ti;
        sift_down(cand_sorted, cand_index, 0, end - 1);
    }
}

void ldp_srappor_body(uint32_t c, uint32_t kc, uint32_t t_flip, const uint32_t *w, uint8_t *o)
{
    ldp_flip_bitmap(w + 1, kc + 1, t_flip, o);
    o[c >> 3] ^= (uint8_t)(1u << (c & 7u));
}

void ldp_srappor_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                         const uint32_t *cand_sorted, const uint32_t *cand_index, uint32_t kc,
                         uint32_t t_flip, const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t u, per_user = (size_t)kc + 2;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + u * per_user;
        uint64_t s = offsets[u + 1] - offsets[u];
        uint32_t i = sampled_index(w[0], s, l);
        uint32_t bit = kc;
        if ((uint64_t)i < s)
            bit = candidate_bit(cand_sorted, cand_index, kc, keys[offsets[u] + i]);
        ldp_srappor_body(bit, kc, t_flip, w, out + u * stride);
    }
}

void ldp_srappor_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t nbits,
                            int64_t *counts)
{
    size_t u;
    uint32_t b;
    for (u = 0; u < n; u++) {
        const uint8_t *bits = bodies + u * stride;
        for (b = 0; b < nbits; b++)
            counts[b] += (bits[b >> 3] >> (b & 7u)) & 1u;
    }
}

/* Index of a user's sampled element among the D items, D for the dummy (ldp_sh.h). */
static uint32_t ps_index(const uint32_t *keys, const uint64_t *offsets, size_t u, uint32_t w0,
                         uint32_t l, const uint32_t *cand_sorted, const uint32_t *cand_index,
                         uint32_t kc)
{
    uint64_t s = offsets[u + 1] - offsets[u];
    uint32_t i = sampled_index(w0, s, l), key;
    if ((uint64_t)i >= s)
        return kc;
    key = keys[offsets[u] + i];
    if (cand_sorted == NULL)
        return key < kc ? key : kc;
    return candidate_bit(cand_sorted, cand_index, kc, key);
}

void ldp_psgrr_body(uint32_t c, uint32_t kc, uint32_t t_keep, const uint32_t *w, uint8_t *o)
{
    uint32_t r = ldp_bucket_inline(w[2], kc);
    put_le32(o, ldp_select(w[1] < t_keep, c, r + (r >= c)));
}

void ldp_psgrr_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                       const uint32_t *cand_sorted, const uint32_t *cand_index, uint32_t kc,
                       uint32_t t_keep, const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t u;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + 3 * u;
        uint32_t c = ps_index(keys, offsets, u, w[0], l, cand_sorted, cand_index, kc);
        ldp_psgrr_body(c, kc, t_keep, w, out + u * stride);
    }
}

void ldp_psolh_body(uint32_t key, uint32_t real, uint32_t g, uint32_t t_keep, const uint32_t *w,
                    uint8_t *o)
{
    uint32_t v = ldp_bucket_inline(ldp_hash_key(key, w[1]), g);
    uint32_t r = ldp_bucket_inline(w[3], g - 1u);
    uint32_t held = ldp_select(w[2] < t_keep, v, r + (r >= v));
    uint32_t y = ldp_select(real, held, ldp_bucket_inline(w[3], g));
    put_le32(o, w[1]);
    o[4] = (uint8_t)y;
    o[5] = (uint8_t)(y >> 8);
}

void ldp_psolh_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                       const uint32_t *cand_sorted, const uint32_t *cand_index, uint32_t kc,
                       uint32_t g, uint32_t t_keep, const uint32_t *words, uint8_t *out,
                       size_t stride)
{
    size_t u;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + 4 * u;
        uint64_t s = offsets[u + 1] - offsets[u];
        uint32_t i = sampled_index(w[0], s, l);
        uint32_t real = (uint64_t)i < s;
        uint32_t key = real ? keys[offsets[u] + i] : 0u;
        if (real && cand_sorted != NULL)
            real = candidate_bit(cand_sorted, cand_index, kc, key) != kc;
        ldp_psolh_body(key, real, g, t_keep, w, out + u * stride);
    }
}
