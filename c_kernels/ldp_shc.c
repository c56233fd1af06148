/* `shc` perturbation kernels, protocol v2 §3.1 (ldp_shc.h). */
#include "ldp_shc.h"
#include "ldp_bytes.h"
#include "ldp_hash.h"
#include "ldp_select.h"

#define SHC_HALF 0x80000000u

uint8_t ldp_shc_body1(const ldp_shc_params *p, uint32_t key, uint32_t real, const uint32_t *w,
                      uint8_t *o)
{
    uint32_t t = ldp_bucket_inline(w[1], p->m);
    uint32_t phi = ldp_hash_mixed(ldp_key_mix(key), p->salt + t) < SHC_HALF;
    uint32_t x = ldp_select(real, phi, w[3] < SHC_HALF);
    uint32_t keep = w[2] < p->t_rr;
    put_le32(o, t);
    o[4] = (uint8_t)(x == keep);
    return (uint8_t)x;
}

void ldp_shc_perturb1(const ldp_shc_params *p, const uint32_t *keys, const uint64_t *offsets,
                      size_t n, const uint32_t *words, uint8_t *out, size_t stride,
                      uint8_t *x_out)
{
    size_t u;
    for (u = 0; u < n; u++) {
        const uint32_t *w = words + 4 * u;
        uint64_t s = offsets[u + 1] - offsets[u];
        uint32_t big = s > (uint64_t)p->l ? (uint32_t)s : p->l;
        uint32_t i = ldp_bucket_inline(w[0], big);
        uint32_t real = (uint64_t)i < s;
        x_out[u] = ldp_shc_body1(p, real ? keys[offsets[u] + i] : 0u, real, w, out + u * stride);
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
