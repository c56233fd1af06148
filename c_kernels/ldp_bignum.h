/* Fixed-width unsigned integers of LDP_BIG_LIMBS 32-bit limbs (512 bits), for the thresholds
 * whose exact definitions need more than 128 bits: `shc`'s T_shc_a, T_shc_b and shc_ok
 * (protocol v2 §3.1), where E(eps1 + eps2) reaches 2^157 and the products 2^379.
 *
 * Portable C99 on 32-bit limbs (64-bit intermediates only), no allocation, no globals; used at
 * configuration time only (the division is bit by bit). Functions that can overflow return 1
 * on success and 0 on overflow (the output is then unspecified). Outputs may alias inputs.
 * Not bound by cffi: the thresholds built on it are (ldp_thresholds.h). */
#ifndef LDP_BIGNUM_H
#define LDP_BIGNUM_H
#include <stdint.h>

#define LDP_BIG_LIMBS 16

typedef struct {
    uint32_t w[LDP_BIG_LIMBS]; /* little-endian limbs */
} ldp_big;

void ldp_big_set_u64(ldp_big *r, uint64_t v);
int ldp_big_is_zero(const ldp_big *a);
int ldp_big_cmp(const ldp_big *a, const ldp_big *b);
int ldp_big_add(ldp_big *r, const ldp_big *a, const ldp_big *b);
int ldp_big_sub(ldp_big *r, const ldp_big *a, const ldp_big *b); /* 0 if a < b */
int ldp_big_mul(ldp_big *r, const ldp_big *a, const ldp_big *b);
int ldp_big_mul_u32(ldp_big *r, const ldp_big *a, uint32_t m);
uint32_t ldp_big_div_u32(ldp_big *q, const ldp_big *a, uint32_t d); /* remainder; d > 0 */
void ldp_big_shr(ldp_big *r, const ldp_big *a, unsigned bits);
int ldp_big_div(ldp_big *q, const ldp_big *a, const ldp_big *d); /* floor; 0 if d == 0 */
int ldp_big_to_u64(const ldp_big *a, uint64_t *out);             /* 0 if a >= 2^64 */
int ldp_big_exp_lower(uint32_t a, uint32_t b, ldp_big *out);     /* E(a, b) of spec §2 */

#endif
