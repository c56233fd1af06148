/* Apple count-mean sketch (CMS, id 5) and LDPLCM phase 2 (LCM, id 9), protocol v2 §3.
 *
 * Body: j:u16 (LE), then a bitmap of m bits (bit i in byte i>>3 at position i&7).
 * Words per user (user-major): R = 1 + m; w0 picks the row j = bucket(w0, k), w[1+i] flips bit i
 * iff w[1+i] < t_flip. The encoded vector is -1 everywhere except +1 at
 * c = bucket(Hs(key, salt + j), m); an LCM user whose item the model calls high-frequent encodes
 * the all -1 vector (LDPLCM Alg. 2, lines 6-12). Bit 1 means +1.
 *
 * Aggregation keeps integer state: per row j the number of reports, per (j, i) the number of
 * 1 bits. ldp_flip_bitmap writes the bitmap of `bits` flips (bit i = 1 iff w[i] < t), shared with
 * sampling RAPPOR. Portable C99, no allocation, no globals. */
#ifndef LDP_CMS_H
#define LDP_CMS_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
void ldp_flip_bitmap(const uint32_t *w, uint32_t bits, uint32_t t, uint8_t *out);
void ldp_cms_perturb(const uint32_t *keys, const uint8_t *high, size_t n, uint32_t salt,
                     uint32_t k, uint32_t m, uint32_t t_flip, const uint32_t *words,
                     uint8_t *out, size_t stride);
size_t ldp_cms_accumulate(const uint8_t *bodies, size_t n, size_t stride, uint32_t k, uint32_t m,
                          int64_t *row_counts, int64_t *ones);
void ldp_sketch_gather(const int64_t *matrix, uint32_t k, uint32_t m, uint32_t salt,
                       const double *row_weight, const uint32_t *keys, size_t nkeys, double *out);
/* cdef-end */

#endif
