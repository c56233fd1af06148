/* `shc` perturbation kernels, protocol v2 §3.1 (ldp_shc.h). */
#include "ldp_shc.h"
#include "ldp_bytes.h"
#include "ldp_hash.h"

#define SHC_HALF 0x80000000u

void ldp_shc_perturb1(const ldp_shc_params *p, const uint32_t *keys, const uint64_t *offsets,
                      size_t n, const uint32_t *words, uint8_t *out, size_t stride,
                      uint8_t *x_out)
{
    size_t u;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + 4 * u;
        uint8_t *o = out + u * stride;
        uint64_t s = offsets[u + 1] - offsets[u];
        uint32_t big = s > (uint64_t)p->l ? (uint32_t)s : p->l;
        uint32_t i = ldp_bucket_inline(w[0], big);
        uint32_t t = ldp_bucket_inline(w[1], p->m);
        unsigned x, keep;
        if ((uint64_t)i < s)
            x = ldp_hash_mixed(ldp_key_mix(keys[offsets[u] + i]), p->salt + t) < SHC_HALF;
        else
            x = w[3] < SHC_HALF;
        keep = w[2] < p->t_rr;
        put_le32(o, t);
        o[4] = (uint8_t)(x == keep);
        x_out[u] = (uint8_t)x;
    }
}

void ldp_shc_perturb2(const ldp_shc_params *p, const uint32_t *t, const uint8_t *y1,
                      const uint8_t *x, size_t n, const uint32_t *words, uint8_t *out,
                      size_t stride)
{
    size_t u;
    for (u = 0; u < n; u++) {
        uint8_t *o = out + u * stride;
        unsigned xb = x[u] != 0;
        uint32_t thr = (unsigned)(y1[u] != 0) == xb ? p->t_a : p->t_b;
        unsigned keep = words[u] < thr;
        put_le32(o, t[u]);
        o[4] = (uint8_t)(xb == keep);
    }
}
