/* See ldp_ingest.h. */
#include "ldp_ingest.h"

#include <string.h>

/* Row i of out (width bytes) = buf[off[j] .. off[j] + min(len[j], width)) for j = idx[i]
 * (idx NULL: j = i), zero-padded; a negative length (no topic / a payload dropped on arrival)
 * gives a zero row. Returns the number of rows zeroed because j is not below n_items or the
 * whole span off[j] .. off[j] + len[j] is not inside buf: 0 unless the caller is wrong. */
int64_t ldp_gather_spans(const uint8_t *buf, size_t buf_len, const int64_t *off,
                         const int64_t *len, size_t n_items, const int64_t *idx, size_t n,
                         size_t width, uint8_t *out)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t *row = out + i * width;
        size_t take = 0;
        int64_t j = idx ? idx[i] : (int64_t)i;
        if (j < 0 || (uint64_t)j >= n_items) {
            bad++;
        } else if (len[j] > 0) {
            int64_t o = off[j], l = len[j];
            if (o < 0 || (uint64_t)o > buf_len || (uint64_t)l > buf_len - (size_t)o) {
                bad++;
            } else {
                take = (size_t)l < width ? (size_t)l : width;
                memcpy(row, buf + o, take);
            }
        }
        if (take < width)
            memset(row + take, 0, width - take);
    }
    return bad;
}

/* The table: mask + 1 slots (a power of two) of three words each, (high word, low word,
 * USED | 63-bit nonce tag), so a probe touches one or two cache lines; linear probing from a mix
 * of both words (the keys are keyed hashes already; the mix only guards the slot choice). */
#define SEEN_USED (UINT64_C(1) << 63)

static uint64_t slot_of(uint64_t hi, uint64_t lo, uint64_t mask)
{
    uint64_t h = (hi ^ (lo * UINT64_C(0x9E3779B97F4A7C15))) * UINT64_C(0xBF58476D1CE4E5B9);
    return (h ^ (h >> 31)) & mask;
}

/* prior[i] = the nonce tag stored with key i (< 2^63), or -1 if the table does not hold it. */
void ldp_seen_find(const uint64_t *slots, uint64_t mask, const uint64_t *qhi,
                   const uint64_t *qlo, size_t n, int64_t *prior)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t s = slot_of(qhi[i], qlo[i], mask);
        const uint64_t *e = slots + 3 * s;
        prior[i] = -1;
        while (e[2] & SEEN_USED) {
            if (e[0] == qhi[i] && e[1] == qlo[i]) {
                prior[i] = (int64_t)(e[2] & ~SEEN_USED);
                break;
            }
            s = (s + 1) & mask;
            e = slots + 3 * s;
        }
    }
}

/* Insert the keys not held yet with their nonce tags (a key held keeps its tag; the tag's top
 * bit is ignored). The caller keeps the load below 1 (service/seen_log.py grows the table at
 * 70 %). Returns how many were inserted. */
int64_t ldp_seen_insert(uint64_t *slots, uint64_t mask, const uint64_t *khi,
                        const uint64_t *klo, const uint64_t *ktag, size_t n)
{
    int64_t added = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = slot_of(khi[i], klo[i], mask);
        uint64_t *e = slots + 3 * s;
        while ((e[2] & SEEN_USED) && !(e[0] == khi[i] && e[1] == klo[i])) {
            s = (s + 1) & mask;
            e = slots + 3 * s;
        }
        if (!(e[2] & SEEN_USED)) {
            e[0] = khi[i];
            e[1] = klo[i];
            e[2] = SEEN_USED | ktag[i];
            added++;
        }
    }
    return added;
}
