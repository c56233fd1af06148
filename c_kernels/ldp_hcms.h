/* Apple Hadamard count-mean sketch (HCMS, id 6), protocol v2 §3.
 *
 * Body: j:u16, l:u16, sign:u8 (1 = +1, 0 = -1). Words per user (user-major): R = 3;
 * j = bucket(w0, k), c = bucket(Hs(key, salt + j), m), l = bucket(w1, m),
 * h = (-1)^popcount(l & c), sign = h if w2 < t_rr else -h.
 *
 * Aggregation keeps per (j, l) the integer sum of signs; at estimate time the rows go through
 * the fast Walsh-Hadamard transform (Sylvester order, H[l][c] = (-1)^popcount(l & c)).
 * Portable C99, no allocation, no globals. */
#ifndef LDP_HCMS_H
#define LDP_HCMS_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
void ldp_hcms_perturb(const uint32_t *keys, size_t n, uint32_t salt, uint32_t k, uint32_t m,
                      uint32_t t_rr, const uint32_t *words, uint8_t *out, size_t stride);
size_t ldp_hcms_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t k, uint32_t m,
                           int64_t *sums);
void ldp_fwht_i64(int64_t *data, size_t rows, uint32_t m);
void ldp_fwht_f64(double *data, size_t rows, uint32_t m);
/* cdef-end */

#endif
