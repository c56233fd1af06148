/* SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012): the keyed
 * hash of the aggregator's dedupe keys (the state holds a PRF of each device id and of each
 * report's nonce, never the id or the nonce). Portable C99, no allocation, no globals. */
#ifndef LDP_SIPHASH_H
#define LDP_SIPHASH_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
/* SipHash-2-4 with 64-bit output of data[0..len) under the 16-byte key (k0, k1 little-endian),
 * exactly the reference implementation's `siphash(.., outlen 8)`. */
uint64_t ldp_siphash24(const uint8_t *key, const uint8_t *data, size_t len);
/* For i < n: out[16 i .. 16 i + 16) = SipHash-2-4(key[0..16), span) || SipHash-2-4(key[16..32),
 * span), each little-endian, of the span buf[off[i] .. off[i] + len[i]): a 128-bit PRF under a
 * 32-byte key, one call per batch. */
void ldp_siphash_spans(const uint8_t *key, const uint8_t *buf, const uint32_t *off,
                       const uint32_t *len, size_t n, uint8_t *out);
/* For i < n: out[i] = SipHash-2-4(key[0..16), the 4 little-endian bytes of v[i]) (the keyed tags
 * of a batch's report nonces, one call per batch). */
void ldp_siphash_u32s(const uint8_t *key, const uint32_t *v, size_t n, uint64_t *out);
/* cdef-end */

#endif
