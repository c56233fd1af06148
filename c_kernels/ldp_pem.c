/* PEM prefix keys (Wang, Li, Jha, "Locally Differentially Private Heavy Hitter
 * Identification", IEEE TDSC 2019, §4 "Prefix Extending Method"): one batch per call, for the
 * aggregator's candidate prefixes and for simulated (or real) devices' own prefixes. */
#include <string.h>

#include "ldp_hash.h"
#include "ldp_pem.h"

/* out[i] = murmur3_32(le16(bits) || prefix of row i, seed) for rows codes + i * stride.
 * Returns 0, or -1 (nothing written) unless 1 <= bits and ceil(bits/8) <= min(stride, 255). */
int ldp_pem_prefix_keys(const uint8_t *codes, size_t n, size_t stride, uint32_t bits,
                        uint32_t seed, uint32_t *out)
{
    uint8_t buf[2 + LDP_PEM_MAX_BYTES];
    size_t nbytes, i;
    uint8_t mask = (bits % 8u) ? (uint8_t)(0xFFu << (8u - bits % 8u)) : (uint8_t)0xFFu;
    if (bits < 1u || bits > 8u * LDP_PEM_MAX_BYTES)  /* before the byte count: no wrap */
        return -1;
    nbytes = ((size_t)bits + 7u) / 8u;
    if (nbytes > stride)
        return -1;
    buf[0] = (uint8_t)bits;
    buf[1] = (uint8_t)(bits >> 8);
    for (i = 0; i < n; i++) {
        memcpy(buf + 2, codes + i * stride, nbytes);
        buf[1 + nbytes] &= mask;
        out[i] = ldp_murmur3_32(buf, nbytes + 2u, seed);
    }
    return 0;
}

/* Spec §3.5: the public group of each device id data[off[i] .. off[i] + len[i]) (UTF-8, as on
 * its report topic): bucket(murmur3_32(id, seed), groups), seed = (salt + 1) mod 2^32.
 * Returns 0, or -1 (nothing written) for groups == 0 or a negative span. */
int ldp_pem_groups(const uint8_t *data, const int64_t *off, const int64_t *len, size_t n,
                   uint32_t seed, uint32_t groups, int64_t *out)
{
    size_t i;
    if (groups == 0u)
        return -1;
    for (i = 0; i < n; i++)
        if (off[i] < 0 || len[i] < 0)
            return -1;
    for (i = 0; i < n; i++) {
        uint32_t h = ldp_murmur3_32(data + off[i], (size_t)len[i], seed);
        out[i] = (int64_t)(((uint64_t)h * groups) >> 32);
    }
    return 0;
}

/* PEM's per-group FLH tables in one call: report i (body at bodies + i * stride: seed_index
 * u32, y u16, little-endian) adds 1 at counts[groups[i]][seed_index][y] (ngroups x kp x g
 * int64, row-major; FLH's table per group, Cormode, Maddock, Maple, VLDB 2021 §4.2). Returns
 * the rows skipped for a field or group out of range (validated reports never are). */
int64_t ldp_pem_count(const uint8_t *bodies, size_t n, size_t stride, const int64_t *groups,
                      uint32_t ngroups, uint32_t kp, uint32_t g, int64_t *counts)
{
    size_t i;
    int64_t bad = 0;
    size_t table = (size_t)kp * g;
    for (i = 0; i < n; i++) {
        const uint8_t *b = bodies + i * stride;
        uint32_t idx = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16)
                       | ((uint32_t)b[3] << 24);
        uint32_t y = (uint32_t)b[4] | ((uint32_t)b[5] << 8);
        int64_t grp = groups[i];
        if (idx < kp && y < g && grp >= 0 && grp < (int64_t)ngroups)
            counts[(size_t)grp * table + (size_t)idx * g + y] += 1;
        else
            bad += 1;
    }
    return bad;
}
