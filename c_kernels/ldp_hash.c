/* MurmurHash3_x86_32 (Austin Appleby, public domain), protocol v2 §1. */
#include "ldp_hash.h"

uint32_t ldp_murmur3_32(const uint8_t *data, size_t len, uint32_t seed)
{
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    uint32_t h = seed, k;
    size_t nblocks = len / 4, i;
    const uint8_t *tail;

    for (i = 0; i < nblocks; i++) {
        const uint8_t *p = data + 4 * i;
        k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        k *= c1;
        k = ldp_rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = ldp_rotl32(h, 13);
        h = h * 5u + 0xe6546b64u;
    }
    tail = data + 4 * nblocks;
    k = 0;
    switch (len & 3u) {
    case 3: k ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: k ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = ldp_rotl32(k, 15);
        k *= c2;
        h ^= k;
        break;
    default:
        break;
    }
    h ^= (uint32_t)len;
    return ldp_fmix32(h);
}

uint32_t ldp_hash_key(uint32_t key, uint32_t seed)
{
    return ldp_hash_mixed(ldp_key_mix(key), seed);
}

uint32_t ldp_bucket(uint32_t h, uint32_t n)
{
    return ldp_bucket_inline(h, n);
}

void ldp_hash_keys(const uint32_t *keys, size_t n, uint32_t seed, uint32_t *out)
{
    size_t i;
    for (i = 0; i < n; i++)
        out[i] = ldp_hash_mixed(ldp_key_mix(keys[i]), seed);
}
