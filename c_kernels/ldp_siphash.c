/* SipHash-2-4 after the public-domain reference implementation (CC0,
 * github.com/veorq/SipHash, siphash.c), 64-bit output. */
#include "ldp_siphash.h"

#define LDP_ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define LDP_SIPROUND                                                                  \
    do {                                                                              \
        v0 += v1; v1 = LDP_ROTL64(v1, 13); v1 ^= v0; v0 = LDP_ROTL64(v0, 32);        \
        v2 += v3; v3 = LDP_ROTL64(v3, 16); v3 ^= v2;                                  \
        v0 += v3; v3 = LDP_ROTL64(v3, 21); v3 ^= v0;                                  \
        v2 += v1; v1 = LDP_ROTL64(v1, 17); v1 ^= v2; v2 = LDP_ROTL64(v2, 32);        \
    } while (0)

static uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static void store_le64(uint8_t *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t siphash24(uint64_t k0, uint64_t k1, const uint8_t *in, size_t len)
{
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ k1;
    uint64_t b = ((uint64_t)len) << 56;
    const uint8_t *end = in + len - (len % 8);
    size_t left = len & 7, i;
    uint64_t m;

    for (; in != end; in += 8) {
        m = load_le64(in);
        v3 ^= m;
        LDP_SIPROUND;
        LDP_SIPROUND;
        v0 ^= m;
    }
    for (i = 0; i < left; i++)
        b |= ((uint64_t)in[i]) << (8 * i);
    v3 ^= b;
    LDP_SIPROUND;
    LDP_SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    LDP_SIPROUND;
    LDP_SIPROUND;
    LDP_SIPROUND;
    LDP_SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t ldp_siphash24(const uint8_t *key, const uint8_t *data, size_t len)
{
    return siphash24(load_le64(key), load_le64(key + 8), data, len);
}

void ldp_siphash_spans(const uint8_t *key, const uint8_t *buf, const uint32_t *off,
                       const uint32_t *len, size_t n, uint8_t *out)
{
    uint64_t a0 = load_le64(key), a1 = load_le64(key + 8);
    uint64_t b0 = load_le64(key + 16), b1 = load_le64(key + 24);
    size_t i;
    for (i = 0; i < n; i++) {
        const uint8_t *p = buf + off[i];
        store_le64(out + 16 * i, siphash24(a0, a1, p, len[i]));
        store_le64(out + 16 * i + 8, siphash24(b0, b1, p, len[i]));
    }
}

void ldp_siphash_u32s(const uint8_t *key, const uint32_t *v, size_t n, uint64_t *out)
{
    uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    uint8_t le[4];
    size_t i;
    for (i = 0; i < n; i++) {
        le[0] = (uint8_t)v[i];
        le[1] = (uint8_t)(v[i] >> 8);
        le[2] = (uint8_t)(v[i] >> 16);
        le[3] = (uint8_t)(v[i] >> 24);
        out[i] = siphash24(k0, k1, le, 4);
    }
}
