/* Hashing and bucketing, protocol v2 §1. Portable C99, no allocation, no globals. */
#ifndef LDP_HASH_H
#define LDP_HASH_H
#include <stddef.h>
#include <stdint.h>

#define LDP_KEY_SEED 0x6c647066u

/* cdef-begin */
uint32_t ldp_murmur3_32(const uint8_t *data, size_t len, uint32_t seed);
uint32_t ldp_hash_key(uint32_t key, uint32_t seed);
uint32_t ldp_bucket(uint32_t h, uint32_t n);
void ldp_hash_keys(const uint32_t *keys, size_t n, uint32_t seed, uint32_t *out);
/* cdef-end */

/* Inline forms for the hot loops. */
static inline uint32_t ldp_rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t ldp_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* The key-dependent half of MurmurHash3 for a 4-byte key: depends only on the key. */
static inline uint32_t ldp_key_mix(uint32_t key)
{
    uint32_t k = key * 0xcc9e2d51u;
    k = ldp_rotl32(k, 15);
    return k * 0x1b873593u;
}

/* H(le32(key), seed) given kmix = ldp_key_mix(key). */
static inline uint32_t ldp_hash_mixed(uint32_t kmix, uint32_t seed)
{
    uint32_t h = seed ^ kmix;
    h = ldp_rotl32(h, 13);
    h = h * 5u + 0xe6546b64u;
    h ^= 4u;
    return ldp_fmix32(h);
}

static inline uint32_t ldp_bucket_inline(uint32_t h, uint32_t n)
{
    return (uint32_t)(((uint64_t)h * (uint64_t)n) >> 32);
}

#endif
