/* Batch check and fold of longitudinal reports (see ldp_long_fold.h).
 *
 * Bit counting of the unary encodings (L-OSUE, L-SUE: bodies of at most 128 bits): a
 * bit-sliced counter, plane p holding bit p of every body bit's count, fed by carry-save adders
 * (Harley and Seal's population count, as in Muła, Kurz, Lemire, "Faster population counts
 * using AVX2 instructions", The Computer Journal 2018): 15 bodies are first compressed to
 * four planes of weights 1, 2, 4, 8 by 11 full adders, then added to the counter; the counter
 * is read out into integers every 65535 reports and at the end. A 128-bit body is one GCC/clang
 * vector of two u64 lanes (portable struct fallback elsewhere, or with -DLDP_NO_VECTOR_EXT). */
#include <string.h>

#include "ldp_long_fold.h"

#define HDR 12u
#define FLUSH_EVERY 65535u /* counts per counter lane: 16 planes */
#define PLANES 16

#if defined(__GNUC__) && !defined(LDP_NO_VECTOR_EXT)
/* GCC and clang: two u64 lanes in one 128-bit vector (one SSE2 / NEON instruction per op) */
typedef uint64_t v2 __attribute__((vector_size(16)));
#define LO(x) ((x)[0])
#define HI(x) ((x)[1])
static inline v2 vxor(v2 a, v2 b) { return a ^ b; }
static inline v2 vand(v2 a, v2 b) { return a & b; }
static inline v2 vor(v2 a, v2 b) { return a | b; }
static inline v2 vmake(uint64_t lo, uint64_t hi) { v2 r = {lo, hi}; return r; }
#else
typedef struct {
    uint64_t lo, hi;
} v2;
#define LO(x) ((x).lo)
#define HI(x) ((x).hi)
static inline v2 vxor(v2 a, v2 b) { v2 r; r.lo = a.lo ^ b.lo; r.hi = a.hi ^ b.hi; return r; }
static inline v2 vand(v2 a, v2 b) { v2 r; r.lo = a.lo & b.lo; r.hi = a.hi & b.hi; return r; }
static inline v2 vor(v2 a, v2 b) { v2 r; r.lo = a.lo | b.lo; r.hi = a.hi | b.hi; return r; }
static inline v2 vmake(uint64_t lo, uint64_t hi) { v2 r; r.lo = lo; r.hi = hi; return r; }
#endif

/* full adder: s = a + b + c mod 2, *cy = the carry */
static inline v2 fa(v2 *cy, v2 a, v2 b, v2 c)
{
    v2 u = vxor(a, b);
    *cy = vor(vand(a, b), vand(u, c));
    return vxor(u, c);
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = ((x & 0x00000000FFFFFFFFull) << 32) | (x >> 32);
    x = ((x & 0x0000FFFF0000FFFFull) << 16) | ((x >> 16) & 0x0000FFFF0000FFFFull);
    x = ((x & 0x00FF00FF00FF00FFull) << 8) | ((x >> 8) & 0x00FF00FF00FF00FFull);
#endif
    return x;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The fault of one report (0: valid), in the header rule's order, then the body. */
static int classify(const uint8_t *r, const uint8_t *e, int body_bad)
{
    if (r[0] != e[0])
        return 1;
    if (r[2] != e[2])
        return 2;
    if (r[1] != e[1])
        return 3;
    if (r[3] != 0)
        return 4;
    if (memcmp(r + 4, e + 4, 4) != 0)
        return 5;
    return body_bad ? 6 : 0;
}

/* ---- bitmaps ------------------------------------------------------------------------------ */

typedef struct {
    v2 plane[PLANES];
    uint64_t mask_lo, mask_hi; /* the body's bytes within the 16 loaded */
    size_t nbytes;
} bitcount;

/* The body of report `i` as 128 bits (bit b of the body at bit b), reading 16 bytes when they
 * lie within the batch, else byte by byte. */
static inline v2 load_body(const bitcount *bc, const uint8_t *reports, size_t i, size_t stride,
                           size_t total)
{
    const uint8_t *b = reports + i * stride + HDR;
    if (i * stride + HDR + 16u <= total)
        return vmake(le64(b) & bc->mask_lo, le64(b + 8) & bc->mask_hi);
    {
        uint8_t tmp[16] = {0};
        memcpy(tmp, b, bc->nbytes);
        return vmake(le64(tmp), le64(tmp + 8));
    }
}

/* counter += x at plane `level` (x's lanes have weight 2^level) */
static inline void ripple(bitcount *bc, v2 x, int level)
{
    int p;
    for (p = level; p < PLANES; p++) {
        v2 cy = vand(bc->plane[p], x);
        bc->plane[p] = vxor(bc->plane[p], x);
        if ((LO(cy) | HI(cy)) == 0)
            return;
        x = cy;
    }
}

/* counter += ones + 2 twos + 4 fours + 8 eights */
static inline void add4(bitcount *bc, v2 ones, v2 twos, v2 fours, v2 eights)
{
    v2 cy = vand(bc->plane[0], ones), c2;
    bc->plane[0] = vxor(bc->plane[0], ones);
    bc->plane[1] = fa(&c2, bc->plane[1], twos, cy);
    bc->plane[2] = fa(&cy, bc->plane[2], fours, c2);
    bc->plane[3] = fa(&c2, bc->plane[3], eights, cy);
    if ((LO(c2) | HI(c2)) != 0)
        ripple(bc, c2, 4);
}

/* tmp[b] += the counter's count of bit b (b < bits); the counter is emptied */
static void readout(bitcount *bc, uint32_t bits, int64_t *tmp)
{
    int p;
    uint32_t b;
    for (p = 0; p < PLANES; p++) {
        v2 x = bc->plane[p];
        if ((LO(x) | HI(x)) == 0)
            continue;
        for (b = 0; b < bits; b++) {
            uint64_t w = b < 64u ? LO(x) : HI(x);
            tmp[b] += (int64_t)((w >> (b & 63u)) & 1u) << p;
        }
        bc->plane[p] = vmake(0, 0);
    }
}

static int64_t fold_bitmap(const uint8_t *reports, size_t n, size_t stride, uint64_t expect,
                           uint32_t bits, int64_t *tmp)
{
    bitcount bc;
    const size_t total = n * stride;
    const uint8_t pad = (uint8_t)((0xFFu << (bits - 8u * ((bits - 1u) / 8u))) & 0xFFu);
    size_t i = 0, since = 0, j;
    int64_t bad = 0;
    memset(&bc, 0, sizeof bc);
    bc.nbytes = (bits + 7u) / 8u;
    bc.mask_lo = bc.nbytes >= 8u ? ~0ull : (1ull << (8u * bc.nbytes)) - 1u;
    bc.mask_hi = bc.nbytes <= 8u ? 0 : bc.nbytes >= 16u ? ~0ull : (1ull << (8u * (bc.nbytes - 8u))) - 1u;
    while (i < n) {
        v2 x[15], c[10], s, ones, twos, fours, eights;
        if (n - i < 15u) {
            for (; i < n; i++) {
                const uint8_t *r = reports + i * stride;
                bad += (le64(r) != expect) | ((r[HDR + bc.nbytes - 1u] & pad) != 0);
                ripple(&bc, load_body(&bc, reports, i, stride, total), 0);
            }
            break;
        }
        for (j = 0; j < 15u; j++) {
            const uint8_t *r = reports + (i + j) * stride;
            bad += (le64(r) != expect) | ((r[HDR + bc.nbytes - 1u] & pad) != 0);
            x[j] = load_body(&bc, reports, i + j, stride, total);
        }
        /* 15 inputs of weight 1 -> ones, twos, fours, eights (11 full adders) */
        s = fa(&c[0], x[0], x[1], x[2]);
        x[0] = fa(&c[1], x[3], x[4], x[5]);
        x[1] = fa(&c[2], x[6], x[7], x[8]);
        x[2] = fa(&c[3], x[9], x[10], x[11]);
        x[3] = fa(&c[4], x[12], x[13], x[14]);
        s = fa(&c[5], s, x[0], x[1]);
        ones = fa(&c[6], s, x[2], x[3]);
        s = fa(&c[7], c[0], c[1], c[2]);
        x[4] = fa(&c[8], c[3], c[4], c[5]);
        twos = fa(&c[9], s, x[4], c[6]);
        fours = fa(&eights, c[7], c[8], c[9]);
        add4(&bc, ones, twos, fours, eights);
        i += 15u;
        since += 15u;
        if (since > FLUSH_EVERY - 15u) {
            readout(&bc, bits, tmp);
            since = 0;
        }
    }
    readout(&bc, bits, tmp);
    return bad;
}

/* ---- the others ---------------------------------------------------------------------------- */

static int64_t fold_u32(const uint8_t *reports, size_t n, size_t stride, uint64_t expect,
                        uint32_t limit, int64_t *tmp)
{
    int64_t h[4][256]; /* four interleaved histograms: no store-to-load chain on a popular y */
    size_t i;
    uint32_t v;
    int64_t bad = 0;
    memset(h, 0, sizeof h);
    for (i = 0; i < n; i++) {
        const uint8_t *r = reports + i * stride;
        uint32_t y = le32(r + HDR);
        if ((le64(r) != expect) | (y >= limit))
            bad++;
        else
            h[i & 3u][y]++;
    }
    for (v = 0; v < limit; v++)
        tmp[v] = h[0][v] + h[1][v] + h[2][v] + h[3][v];
    return bad;
}

/* The checks alone (no fold) of the bitmap and u32 rules. */
static int64_t check_only(const uint8_t *reports, size_t n, size_t stride, uint64_t expect,
                          int kind, uint32_t limit)
{
    size_t i;
    int64_t bad = 0;
    if (kind == LDP_LONG_BITMAP) {
        const size_t last = HDR + (limit + 7u) / 8u - 1u;
        const uint8_t pad = (uint8_t)((0xFFu << (limit - 8u * ((limit - 1u) / 8u))) & 0xFFu);
        for (i = 0; i < n; i++) {
            const uint8_t *r = reports + i * stride;
            if ((le64(r) != expect) | ((r[last] & pad) != 0))
                bad++;
        }
    } else {
        for (i = 0; i < n; i++) {
            const uint8_t *r = reports + i * stride;
            if ((le64(r) != expect) | (le32(r + HDR) >= limit))
                bad++;
        }
    }
    return bad;
}

static int64_t check_u16(const uint8_t *reports, size_t n, size_t stride, uint64_t expect,
                         uint32_t limit)
{
    size_t i;
    int64_t bad = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *r = reports + i * stride;
        uint32_t y = (uint32_t)r[HDR + 4u] | ((uint32_t)r[HDR + 5u] << 8);
        bad += (le64(r) != expect) | (y >= limit);
    }
    return bad;
}

static int64_t fold_bit(const uint8_t *reports, size_t n, size_t stride, uint64_t expect,
                        int64_t *tmp)
{
    size_t i;
    int64_t bad = 0, ones = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *r = reports + i * stride;
        bad += (le64(r) != expect) | (r[HDR] > 1u);
        ones += r[HDR] & 1u;
    }
    tmp[0] = ones;
    return bad;
}

static size_t body_bytes(int kind, uint32_t limit)
{
    switch (kind) {
    case LDP_LONG_BITMAP: return (limit + 7u) / 8u;
    case LDP_LONG_U32: return 4;
    case LDP_LONG_SEED_U16: return 6;
    case LDP_LONG_BIT: return 1;
    default: return 0;
    }
}

static int body_bad(const uint8_t *body, int kind, uint32_t limit)
{
    switch (kind) {
    case LDP_LONG_BITMAP: {
        uint32_t nb = (limit + 7u) / 8u, spare = 8u * nb - limit;
        return spare != 0 && (body[nb - 1u] >> (8u - spare)) != 0;
    }
    case LDP_LONG_U32: return le32(body) >= limit;
    case LDP_LONG_SEED_U16: return ((uint32_t)body[4] | ((uint32_t)body[5] << 8)) >= limit;
    default: return body[0] > 1u;
    }
}

int64_t ldp_long_fold(const uint8_t *reports, size_t n, size_t stride, const uint8_t *expect,
                      int kind, uint32_t limit, uint8_t *faults, int64_t *counts)
{
    int64_t tmp[256];
    int64_t bad;
    uint32_t v, width;
    size_t i;
    const size_t body = body_bytes(kind, limit);
    if (body == 0 || stride != HDR + body)
        return -1;
    if ((kind == LDP_LONG_BITMAP && (limit < 2u || limit > 128u)) ||
        (kind == LDP_LONG_U32 && (limit < 1u || limit > 256u)) ||
        (kind == LDP_LONG_SEED_U16 && (limit < 1u || limit > 65535u)))
        return -1;
    if (n == 0)
        return 0;
    if (faults != NULL) {
        bad = 0;
        for (i = 0; i < n; i++) {
            const uint8_t *r = reports + i * stride;
            faults[i] = (uint8_t)classify(r, expect, body_bad(r + HDR, kind, limit));
            bad += faults[i] != 0;
        }
        if (bad != 0 || counts == NULL || kind == LDP_LONG_SEED_U16)
            return bad;
    }
    if (counts == NULL && (kind == LDP_LONG_BITMAP || kind == LDP_LONG_U32))
        return check_only(reports, n, stride, le64(expect), kind, limit);
    width = kind == LDP_LONG_BITMAP || kind == LDP_LONG_U32 ? limit : 1u;
    memset(tmp, 0, sizeof(int64_t) * width);
    switch (kind) {
    case LDP_LONG_BITMAP: bad = fold_bitmap(reports, n, stride, le64(expect), limit, tmp); break;
    case LDP_LONG_U32: bad = fold_u32(reports, n, stride, le64(expect), limit, tmp); break;
    case LDP_LONG_SEED_U16: return check_u16(reports, n, stride, le64(expect), limit);
    default: bad = fold_bit(reports, n, stride, le64(expect), tmp); break;
    }
    if (bad == 0 && counts != NULL)
        for (v = 0; v < width; v++)
            counts[v] += tmp[v];
    return bad;
}
