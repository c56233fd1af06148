/* OLH and FLH (local hashing), protocol v2 §3 mechanism ids 2 and 3.
 * OLH body: seed:u32, y:u16; FLH body: seed_index:u32, y:u16 (LE). Words per user: 3.
 * Client paths: no allocation, no globals. The OLH decoder is the O(n·d) hot loop. */
#ifndef LDP_OLH_H
#define LDP_OLH_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
int ldp_olh_perturb(const uint32_t *keys, size_t n, uint32_t g, uint32_t t_keep,
                    const uint32_t *words, uint8_t *out, size_t stride);
int ldp_flh_perturb(const uint32_t *keys, size_t n, uint32_t g, uint32_t kp, uint32_t salt,
                    uint32_t t_keep, const uint32_t *words, uint8_t *out, size_t stride);
int64_t ldp_olh_prepare(const uint8_t *bodies, size_t n, size_t stride, uint32_t g,
                        uint32_t *rseed, uint32_t *lo, uint32_t *width);
void ldp_olh_support(const uint32_t *rseed, const uint32_t *lo, const uint32_t *width, size_t n,
                     const uint32_t *keys, size_t d, int64_t *support);
int64_t ldp_flh_count(const uint8_t *bodies, size_t n, size_t stride, uint32_t kp, uint32_t g,
                      int64_t *counts);
void ldp_flh_support(const int64_t *counts, uint32_t kp, uint32_t g, uint32_t salt,
                     const uint32_t *keys, size_t d, int64_t *support);
/* cdef-end */

#endif
