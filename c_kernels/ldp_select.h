/* Branch-free selection for work that must not depend on secret data (spec §7.1: a device's
 * work takes the same steps whatever its value). Portable C99. */
#ifndef LDP_SELECT_H
#define LDP_SELECT_H
#include <stdint.h>

/* 0xffffffff for bit 1, 0 for bit 0. */
static inline uint32_t ldp_mask(uint32_t bit)
{
    return 0u - (bit & 1u);
}

/* a if bit else b. */
static inline uint32_t ldp_select(uint32_t bit, uint32_t a, uint32_t b)
{
    uint32_t m = ldp_mask(bit);
    return (a & m) | (b & ~m);
}

#endif
