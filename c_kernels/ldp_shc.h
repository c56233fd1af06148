/* `shc` (id 12): sampling SH with correlated phases, protocol v2 §3 and §3.1 — LDPMiner (Qin et
 * al., "Heavy Hitter Estimation over Set-Valued Data with Local Differential Privacy", CCS 2016)
 * §4.4's optimisation in an exactly private form: the device keeps its phase-1 element, row t
 * and bit x, and its phase-2 sign is drawn given (x, y1) so that (y1, y2) is (eps1+eps2)-LDP.
 *
 * Body of both phases: t:u32, sign:u8 (1 = +1), as `sh`; the aggregator folds both with
 * ldp_sh_accumulate / ldp_sh_decode.
 *
 * Phase 1, R = 4 words per user (user-major), sets passed flat as for ldp_sh_perturb:
 *   L = max(l, s), i = bucket(w0, L), t = bucket(w1, m);
 *   x = phi(t, key_i) (+1 iff Hs(key_i, salt + t) < 2^31) for a real element (i < s),
 *   x = +1 iff w3 < 2^31 for the dummy (i >= s);
 *   sign = x if w2 < t_rr else -x.  x_out[u] = 1 for +1, 0 for -1 (the ledger's `shc` bit).
 * Phase 2, R = 1: from the user's t, y1 (its phase-1 sign byte) and x (bits, 1 = +1):
 *   sign = x if w0 < (y1 == x ? t_a : t_b) else -x; the body repeats t.
 * Portable C99, no allocation, no globals. */
#ifndef LDP_SHC_H
#define LDP_SHC_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
typedef struct {
    uint32_t l;    /* set length (padding / sampling) */
    uint32_t salt; /* row seeds salt + t */
    uint32_t m;    /* projection rows */
    uint32_t t_rr; /* phase 1: T_rr(eps1) */
    uint32_t t_a;  /* phase 2: T_shc_a (y1 == x) */
    uint32_t t_b;  /* phase 2: T_shc_b (y1 != x) */
} ldp_shc_params;

void ldp_shc_perturb1(const ldp_shc_params *p, const uint32_t *keys, const uint64_t *offsets,
                      size_t n, const uint32_t *words, uint8_t *out, size_t stride,
                      uint8_t *x_out);
void ldp_shc_perturb2(const ldp_shc_params *p, const uint32_t *t, const uint8_t *y1,
                      const uint8_t *x, size_t n, const uint32_t *words, uint8_t *out,
                      size_t stride);
/* cdef-end */

/* Phase 1 of one user given the sampled element (`real` 1 for a set element with key `key`,
 * 0 for the dummy), both bits computed and one kept (spec §7.1); returns x (1 = +1). The
 * batch kernel calls it. */
uint8_t ldp_shc_body1(const ldp_shc_params *p, uint32_t key, uint32_t real, const uint32_t *w,
                      uint8_t *out);

#endif
