/* GRR (generalized randomized response), protocol v2 §3 mechanism id 1.
 * Body: y:u32 (LE). Words per user: 2 (w0 keep test, w1 uniform among the others).
 * Portable C99, no allocation, no globals. */
#ifndef LDP_GRR_H
#define LDP_GRR_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
int ldp_grr_perturb(const uint32_t *x, size_t n, uint32_t d, uint32_t t_keep,
                    const uint32_t *words, uint8_t *out, size_t stride);
int64_t ldp_grr_count(const uint8_t *bodies, size_t n, size_t stride, uint32_t d,
                      int64_t *counts);
/* cdef-end */

#endif
