/* OUE (optimized unary encoding), protocol v2 §3 mechanism id 4.
 * Body: bitmap of d bits, LSB first, padding bits 0. Words per user: d.
 * Client path: no allocation, no globals. */
#ifndef LDP_OUE_H
#define LDP_OUE_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
int ldp_oue_perturb(const uint32_t *x, size_t n, uint32_t d, uint32_t t_p, uint32_t t_q,
                    const uint32_t *words, uint8_t *out, size_t stride);
int ldp_oue_count(const uint8_t *bodies, size_t n, size_t stride, uint32_t d, int64_t *counts);
/* cdef-end */

#endif
