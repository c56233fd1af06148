/* Batch helpers of the aggregator's ingest (aggregator/ldpfleet/service): gather fixed-width
 * spans of a receive buffer (headers, report rows, names), and the SQLite state's in-memory
 * dedupe index (service/seen_log.py) as an open-addressing hash table of 128-bit keys.
 * Portable C99, no allocation, no globals; nothing is read or written beyond the given sizes. */
#ifndef LDP_INGEST_H
#define LDP_INGEST_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
int64_t ldp_gather_spans(const uint8_t *buf, size_t buf_len, const int64_t *off,
                         const int64_t *len, size_t n_items, const int64_t *idx, size_t n,
                         size_t width, uint8_t *out);
void ldp_seen_find(const uint64_t *slots, uint64_t mask, const uint64_t *qhi,
                   const uint64_t *qlo, size_t n, int64_t *prior);
int64_t ldp_seen_insert(uint64_t *slots, uint64_t mask, const uint64_t *khi,
                        const uint64_t *klo, const uint64_t *ktag, size_t n);
/* cdef-end */

#endif
