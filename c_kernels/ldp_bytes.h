/* Little-endian 32-bit load and store (protocol v2 §3: every multi-byte field is
 * little-endian). Portable C99, no allocation. */
#ifndef LDP_BYTES_H
#define LDP_BYTES_H
#include <stdint.h>

static inline void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#endif
