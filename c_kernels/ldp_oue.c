/* OUE client perturbation and aggregator bit counting, protocol v2 §3 (id 4).
 * Wang et al., "Locally Differentially Private Protocols for Frequency Estimation"
 * (USENIX Security 2017) §4.3. */
#include <stdlib.h>

#include "ldp_oue.h"

/* 8-bit counter lanes are flushed to the int64 counts after this many reports. */
#define LDP_OUE_LANE_MAX 255

/* n users, item indices x[i] < d, d words each (user-major); bit b of body i is 1 iff
 * w_b < (b == x ? t_p : t_q). Returns 0, or -1 (nothing written) if d == 0 or some x[i] >= d. */
int ldp_oue_perturb(const uint32_t *x, size_t n, uint32_t d, uint32_t t_p, uint32_t t_q,
                    const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t i, j, k;
    const size_t full = d / 8u, rem = d % 8u;
    if (d == 0)
        return -1;
    for (i = 0; i < n; i++)
        if (x[i] >= d)
            return -1;
    for (i = 0; i < n; i++) {
        const uint32_t *w = words + i * (size_t)d;
        uint8_t *o = out + i * stride;
        uint32_t xi = x[i];
        uint8_t mask;
        for (j = 0; j < full; j++) {
            unsigned b = 0;
            for (k = 0; k < 8; k++)
                b |= (unsigned)(w[8 * j + k] < t_q) << k;
            o[j] = (uint8_t)b;
        }
        if (rem) {
            unsigned b = 0;
            for (k = 0; k < rem; k++)
                b |= (unsigned)(w[8 * full + k] < t_q) << k;
            o[full] = (uint8_t)b;
        }
        mask = (uint8_t)(1u << (xi & 7u));
        if (w[xi] < t_p)
            o[xi >> 3] = (uint8_t)(o[xi >> 3] | mask);
        else
            o[xi >> 3] = (uint8_t)(o[xi >> 3] & (uint8_t)~mask);
    }
    return 0;
}

/* Bit counting: 8 body bytes are read as one u64 x (byte j in bits 8j..8j+7); for bit k of
 * every byte at once, (x >> k) & 0x0101..01 has lane j = bit k of byte j, so the counter of
 * body bit 64w + 8j + k is byte lane j of acc[8w + k]. Lanes are flushed every 255 reports. */
static uint64_t load_le(const uint8_t *p, size_t len)
{
    uint64_t x = 0;
    size_t j;
    for (j = 0; j < len; j++)
        x |= (uint64_t)p[j] << (8 * j);
    return x;
}

static void add_lanes(uint64_t *restrict acc, const uint8_t *restrict body, size_t nbytes)
{
    const uint64_t ones = 0x0101010101010101ull;
    size_t w, k;
    for (w = 0; 8 * w < nbytes; w++) {
        size_t len = nbytes - 8 * w < 8 ? nbytes - 8 * w : 8;
        uint64_t x = len == 8 ? load_le(body + 8 * w, 8) : load_le(body + 8 * w, len);
        for (k = 0; k < 8; k++)
            acc[8 * w + k] += (x >> k) & ones;
    }
}

static void flush_lanes(uint64_t *acc, size_t nwords, uint32_t d, int64_t *counts)
{
    size_t w, j, k;
    for (w = 0; w < nwords; w++) {
        for (k = 0; k < 8; k++) {
            for (j = 0; j < 8; j++) {
                size_t bit = 64 * w + 8 * j + k;
                if (bit < d)
                    counts[bit] += (int64_t)((acc[8 * w + k] >> (8 * j)) & 0xFFu);
            }
            acc[8 * w + k] = 0;
        }
    }
}

/* counts[b] += bit b of every body (b < d; padding bits ignored). Returns 0, or -1 if the
 * scratch allocation fails (counts untouched). */
int ldp_oue_count(const uint8_t *bodies, size_t n, size_t stride, uint32_t d, int64_t *counts)
{
    const size_t nbytes = ((size_t)d + 7u) / 8u, nwords = (nbytes + 7u) / 8u;
    uint64_t *acc;
    size_t i, in_lane = 0;
    if (n == 0 || d == 0)
        return 0;
    acc = (uint64_t *)calloc(8 * nwords, sizeof(uint64_t));
    if (acc == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        add_lanes(acc, bodies + i * stride, nbytes);
        if (++in_lane == LDP_OUE_LANE_MAX) {
            flush_lanes(acc, nwords, d, counts);
            in_lane = 0;
        }
    }
    flush_lanes(acc, nwords, d, counts);
    free(acc);
    return 0;
}
