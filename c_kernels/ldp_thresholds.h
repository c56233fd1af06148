/* Integer thresholds, protocol v2 §2. Portable C99, no allocation, no globals.
 *
 * E(a, b) is the floor-sum fixed-point lower bound of S * e^(a/b), S = 2^64; it needs
 * 128-bit arithmetic (unsigned __int128 where the compiler has it, a two-word fallback
 * elsewhere, e.g. 32-bit ARM boards; define LDP_NO_INT128 to force the fallback).
 * Every threshold below is computed exactly as protocol_spec/v2/README.md §2 defines it
 * and cross-checked against ldpfleet.protocol and vectors/thresholds.json.
 *
 * Functions return LDP_THRESH_OK (0) and write the result, or a negative error code
 * and leave the output untouched.
 */
#ifndef LDP_THRESHOLDS_H
#define LDP_THRESHOLDS_H
#include <stdint.h>

#define LDP_THRESH_OK 0
#define LDP_THRESH_EINVAL (-1) /* eps_milli == 0, n < 2, b == 0 */
#define LDP_THRESH_ERANGE (-2) /* eps above LDP_EPS_MILLI_MAX, or a 128-bit overflow */

/* Largest per-report epsilon (milli-nats): the spec's limit (spec §2, registry
 * limits.eps_milli_max). Above eps ~ 44.36 E_full no longer fits in 128 bits; every threshold
 * has reached its limit there (T_rr = T_grr = 2^32 - 1, T_oue_q = 1) and the code saturates. */
#define LDP_EPS_MILLI_MAX 64000u

/* `shc` (spec §3.1): ldp_t_shc writes T1 = T_rr(eps1), T_shc_a and T_shc_b, or returns
 * LDP_THRESH_EINVAL (an eps of 0) / LDP_THRESH_ERANGE (eps above the limit, eps1 + eps2 > 64000,
 * or A, B outside 0 < T < 2^32); ldp_shc_ok(eps1, eps2) is 1 iff shc_ok holds, else 0 (also for
 * eps outside the ranges: the predicate includes them). Exact at every eps (512-bit
 * arithmetic, ldp_bignum.h). */

#define LDP_T_OUE_P 0x80000000u
#define LDP_T_HALF 0x80000000u

/* cdef-begin */
int ldp_exp_lower(uint32_t a, uint32_t b, uint64_t *hi, uint64_t *lo);
int ldp_t_rr(uint32_t eps_milli, uint32_t *t);
int ldp_t_grr(uint32_t eps_milli, uint64_t n, uint32_t *t);
int ldp_t_oue_q(uint32_t eps_milli, uint32_t *t);
int ldp_t_flip(uint32_t eps_milli, uint32_t *t);
uint32_t ldp_t_oue_p(void);
uint32_t ldp_t_half(void);
uint64_t ldp_cmin(uint64_t n);
int ldp_grr_ok(uint32_t eps_milli, uint64_t n);
uint64_t ldp_bucket_count(uint64_t r, uint64_t n);
int ldp_t_shc(uint32_t eps1_milli, uint32_t eps2_milli, uint32_t *t1, uint32_t *a, uint32_t *b);
int ldp_shc_ok(uint32_t eps1_milli, uint32_t eps2_milli);
/* cdef-end */

#endif
