/* Set-valued mechanisms of LDPMiner (Qin et al., CCS'16 §4.2): sampling succinct histogram
 * (SH, id 7, Alg. 2) and sampling RAPPOR (SRAPPOR, id 8), protocol v2 §3.
 *
 * A batch of n users' item sets is passed flat: user u holds keys[offsets[u] .. offsets[u+1])
 * (s distinct keys, any s >= 0); L = max(l, s) and i = bucket(w0, L) picks the reported element,
 * i >= s being the dummy (padding). Words are user-major.
 *
 * SH body: t:u32, sign:u8; R = 3. t = bucket(w1, m); dummy: sign = +1 iff w2 < 2^31; else
 * phi = +1 iff Hs(key_i, salt + t) < 2^31 and sign = phi if w2 < t_rr else -phi.
 * SRAPPOR body: bitmap of kc + 1 bits; R = kc + 2. The chosen element sets bit c if it is
 * candidate c, else (non-candidate or dummy) bit kc; bit b is flipped iff w[1+b] < t_flip.
 * Candidates are passed sorted (cand_sorted) with their bit index (cand_index);
 * ldp_srappor_sort_candidates builds both from the phase-2 list (in place, no allocation).
 *
 * Padding-and-sampling frequency oracles (Wang, Li, Jha, "Locally Differentially Private
 * Frequent Itemset Mining", IEEE S&P 2018, §4 PSFO), ids 10 and 11. The sampled element's index
 * c among the D items (a candidate list of kc keys passed as above, D = kc; or, with
 * cand_sorted == NULL, the integer domain 0..kc-1 itself, c = key) is D for the dummy.
 * PSGRR body: y:u32; R = 3. GRR over D + 1 outputs: y = c iff w1 < t_keep, else
 * r = bucket(w2, D), y = r + (r >= c).
 * PSOLH body: seed:u32, y:u16; R = 4. seed = w1; a real item (any element without a list,
 * a candidate with one): v = bucket(Hs(key, seed), g),
 * y = v iff w2 < t_keep, else r = bucket(w3, g - 1), y = r + (r >= v); the dummy: y =
 * bucket(w3, g) (uniform, what every non-holder looks like to the estimator).
 * Portable C99, no allocation, no globals. */
#ifndef LDP_SH_H
#define LDP_SH_H
#include <stddef.h>
#include <stdint.h>

#include "ldp_select.h"

/* cdef-begin */
void ldp_sh_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                    uint32_t salt, uint32_t m, uint32_t t_rr, const uint32_t *words,
                    uint8_t *out, size_t stride);
size_t ldp_sh_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t m, int64_t *z);
void ldp_sh_decode(const uint32_t *ts, const int64_t *zs, size_t nt, uint32_t salt,
                   const uint32_t *keys, size_t nkeys, int64_t *out);
void ldp_srappor_sort_candidates(const uint32_t *candidates, uint32_t kc, uint32_t *cand_sorted,
                                 uint32_t *cand_index);
void ldp_srappor_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                         const uint32_t *cand_sorted, const uint32_t *cand_index, uint32_t kc,
                         uint32_t t_flip, const uint32_t *words, uint8_t *out, size_t stride);
void ldp_srappor_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t nbits,
                            int64_t *counts);
void ldp_psgrr_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                       const uint32_t *cand_sorted, const uint32_t *cand_index, uint32_t kc,
                       uint32_t t_keep, const uint32_t *words, uint8_t *out, size_t stride);
void ldp_psolh_perturb(const uint32_t *keys, const uint64_t *offsets, size_t n, uint32_t l,
                       const uint32_t *cand_sorted, const uint32_t *cand_index, uint32_t kc,
                       uint32_t g, uint32_t t_keep, const uint32_t *words, uint8_t *out,
                       size_t stride);
/* cdef-end */

/* One user's body given the sampled element (for a client that chooses element i itself,
 * over fixed slots): `real` 1 for a set element (i < s), 0 for the dummy; `key` its key
 * (any value for the dummy), `c` its index among the items (D for the dummy or a non-item).
 * Every branch is computed and one kept with masks: the work does not depend on the element
 * (spec §7.1). The batch kernels above call these. w: the user's words (w[0], the index word,
 * is not read). */
void ldp_sh_body(uint32_t key, uint32_t real, uint32_t salt, uint32_t m, uint32_t t_rr,
                 const uint32_t *w, uint8_t *out);
void ldp_srappor_body(uint32_t c, uint32_t kc, uint32_t t_flip, const uint32_t *w, uint8_t *out);
void ldp_psgrr_body(uint32_t c, uint32_t kc, uint32_t t_keep, const uint32_t *w, uint8_t *out);
void ldp_psolh_body(uint32_t key, uint32_t real, uint32_t g, uint32_t t_keep, const uint32_t *w,
                    uint8_t *out);

#endif
