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
