/* Aggregator batch check and fold of the longitudinal (memoised) mechanisms' reports,
 * protocol v2 §3 (header) and §3.2 (bodies): one call per batch checks every report's header
 * and body field and, only if all are valid, adds the batch to the sketch's counts.
 *
 * The header rule of one mechanism in one phase (the first 8 bytes must equal `expect`:
 * version, mechanism id, phase, flags 0, campaign id u32 LE) and its faults, first one named
 * in this order (protocol.header_checks' order for a single phase):
 *   1 version, 2 phase, 3 mechanism, 4 flags, 5 campaign_id, 6 the body field.
 * Body rules (`kind`, `limit`):
 *   LDP_LONG_BITMAP  a bitmap of `limit` bits (2..128) whose padding bits are 0 (L-OSUE, L-SUE);
 *                    fold: counts[b] += bit b
 *   LDP_LONG_U32     y:u32 < limit (L-GRR, limit <= 256); fold: counts[y] += 1
 *   LDP_LONG_SEED_U16 seed:u32, y:u16 with y < limit (LOLOHA, limit <= 65535); check only
 *   LDP_LONG_BIT     y:u8 <= 1 (the memoised one-bit mean); fold: counts[0] += y
 * Portable C99; no allocation (scratch on the stack). */
#ifndef LDP_LONG_FOLD_H
#define LDP_LONG_FOLD_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
enum { LDP_LONG_BITMAP = 1, LDP_LONG_U32 = 2, LDP_LONG_SEED_U16 = 3, LDP_LONG_BIT = 4 };
int64_t ldp_long_fold(const uint8_t *reports, size_t n, size_t stride, const uint8_t *expect,
                      int kind, uint32_t limit, uint8_t *faults, int64_t *counts);
/* cdef-end */

/* Returns the number of invalid reports (then `counts` is untouched), or -1 (nothing done) if
 * `kind`, `limit` or `stride` (the report size: 12 + the body) do not fit. `faults` (n bytes,
 * or NULL): every report's fault code, 0 if valid. `counts` (NULL: check only): the sketch's
 * counts, added to when every report is valid. */

#endif
