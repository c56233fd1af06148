/* PEM (prefix extending method) prefix keys: the 32-bit item key of the first `bits` bits of
 * each fixed-length string code, the key a device's OLH report carries (Wang, Li, Jha,
 * "Locally Differentially Private Heavy Hitter Identification", IEEE TDSC 2019, §4).
 * key = murmur3_32(le16(bits) || the first ceil(bits/8) code bytes, bits past `bits` zeroed,
 * seed). Bits are taken most significant first. The work depends on `bits` and the code
 * length only, never on the code's contents. No allocation, no globals. */
#ifndef LDP_PEM_H
#define LDP_PEM_H
#include <stddef.h>
#include <stdint.h>

#define LDP_PEM_MAX_BYTES 255

/* cdef-begin */
int ldp_pem_prefix_keys(const uint8_t *codes, size_t n, size_t stride, uint32_t bits,
                        uint32_t seed, uint32_t *out);
int ldp_pem_groups(const uint8_t *data, const int64_t *off, const int64_t *len, size_t n,
                   uint32_t seed, uint32_t groups, int64_t *out);
int64_t ldp_pem_count(const uint8_t *bodies, size_t n, size_t stride, const int64_t *groups,
                      uint32_t ngroups, uint32_t kp, uint32_t g, int64_t *counts);
/* cdef-end */

#endif
