/* Fixed-width unsigned big integers (ldp_bignum.h): 16 limbs of 32 bits. */
#include "ldp_bignum.h"

#define N LDP_BIG_LIMBS

void ldp_big_set_u64(ldp_big *r, uint64_t v)
{
    int i;
    for (i = 0; i < N; i++)
        r->w[i] = 0;
    r->w[0] = (uint32_t)v;
    r->w[1] = (uint32_t)(v >> 32);
}

int ldp_big_is_zero(const ldp_big *a)
{
    int i;
    for (i = 0; i < N; i++)
        if (a->w[i] != 0)
            return 0;
    return 1;
}

int ldp_big_cmp(const ldp_big *a, const ldp_big *b)
{
    int i;
    for (i = N - 1; i >= 0; i--) {
        if (a->w[i] != b->w[i])
            return a->w[i] < b->w[i] ? -1 : 1;
    }
    return 0;
}

int ldp_big_add(ldp_big *r, const ldp_big *a, const ldp_big *b)
{
    uint64_t carry = 0;
    int i;
    for (i = 0; i < N; i++) {
        uint64_t s = (uint64_t)a->w[i] + b->w[i] + carry;
        r->w[i] = (uint32_t)s;
        carry = s >> 32;
    }
    return carry == 0;
}

int ldp_big_sub(ldp_big *r, const ldp_big *a, const ldp_big *b)
{
    uint32_t borrow = 0;
    int i;
    for (i = 0; i < N; i++) {
        uint64_t sub = (uint64_t)b->w[i] + borrow;
        uint64_t ai = a->w[i];
        borrow = ai < sub;
        r->w[i] = (uint32_t)(ai - sub); /* mod 2^32 */
    }
    return borrow == 0;
}

int ldp_big_mul(ldp_big *r, const ldp_big *a, const ldp_big *b)
{
    uint32_t acc[2 * N];
    int i, j;
    for (i = 0; i < 2 * N; i++)
        acc[i] = 0;
    for (i = 0; i < N; i++) {
        uint64_t carry = 0;
        if (a->w[i] == 0)
            continue;
        for (j = 0; j < N; j++) {
            uint64_t t = (uint64_t)a->w[i] * b->w[j] + acc[i + j] + carry;
            acc[i + j] = (uint32_t)t;
            carry = t >> 32;
        }
        acc[i + N] = (uint32_t)carry;
    }
    for (i = N; i < 2 * N; i++)
        if (acc[i] != 0)
            return 0;
    for (i = 0; i < N; i++)
        r->w[i] = acc[i];
    return 1;
}

int ldp_big_mul_u32(ldp_big *r, const ldp_big *a, uint32_t m)
{
    uint64_t carry = 0;
    int i;
    for (i = 0; i < N; i++) {
        uint64_t t = (uint64_t)a->w[i] * m + carry;
        r->w[i] = (uint32_t)t;
        carry = t >> 32;
    }
    return carry == 0;
}

uint32_t ldp_big_div_u32(ldp_big *q, const ldp_big *a, uint32_t d)
{
    uint64_t rem = 0;
    int i;
    for (i = N - 1; i >= 0; i--) {
        uint64_t cur = (rem << 32) | a->w[i];
        q->w[i] = (uint32_t)(cur / d);
        rem = cur % d;
    }
    return (uint32_t)rem;
}

void ldp_big_shr(ldp_big *r, const ldp_big *a, unsigned bits)
{
    unsigned limbs = bits / 32, sh = bits % 32, i;
    for (i = 0; i < N; i++) {
        uint64_t lo = i + limbs < N ? a->w[i + limbs] : 0;
        uint64_t hi = i + limbs + 1 < N ? a->w[i + limbs + 1] : 0;
        r->w[i] = (uint32_t)(((hi << 32) | lo) >> sh);
    }
}

/* r = 2 r + bit; 0 if the top bit was set (overflow). */
static int shl1(ldp_big *r, uint32_t bit)
{
    uint32_t out = r->w[N - 1] >> 31;
    int i;
    for (i = N - 1; i > 0; i--)
        r->w[i] = (r->w[i] << 1) | (r->w[i - 1] >> 31);
    r->w[0] = (r->w[0] << 1) | bit;
    return out == 0;
}

/* Restoring division, one bit of the dividend per step. The remainder stays below d, so
 * 2 rem + 1 overflows only if d >= 2^511: then the true 2 rem + 1 >= d and the wrapped
 * subtraction still gives the right remainder (mod 2^512). */
int ldp_big_div(ldp_big *q, const ldp_big *a, const ldp_big *d)
{
    ldp_big quo, rem;
    int bit;
    if (ldp_big_is_zero(d))
        return 0;
    ldp_big_set_u64(&quo, 0);
    ldp_big_set_u64(&rem, 0);
    for (bit = 32 * N - 1; bit >= 0; bit--) {
        int fits = shl1(&rem, (a->w[bit / 32] >> (bit % 32)) & 1u);
        shl1(&quo, 0);
        if (!fits || ldp_big_cmp(&rem, d) >= 0) {
            ldp_big_sub(&rem, &rem, d);
            quo.w[0] |= 1u;
        }
    }
    *q = quo;
    return 1;
}

int ldp_big_to_u64(const ldp_big *a, uint64_t *out)
{
    int i;
    for (i = 2; i < N; i++)
        if (a->w[i] != 0)
            return 0;
    *out = ((uint64_t)a->w[1] << 32) | a->w[0];
    return 1;
}

/* E(a, b) = S + sum_i floor(term_{i-1} a / (b i)), term_0 = S = 2^64 (spec §2); the division by
 * b i is done as two floors (floor(floor(x / b) / i) = floor(x / (b i))). 0 if b == 0 or on
 * overflow (never for a / b <= 64 + 64: E < 2^250). */
int ldp_big_exp_lower(uint32_t a, uint32_t b, ldp_big *out)
{
    ldp_big term, total;
    uint32_t i = 1;
    if (b == 0)
        return 0;
    ldp_big_set_u64(&term, 0);
    term.w[2] = 1; /* 2^64 */
    total = term;
    while (!ldp_big_is_zero(&term)) {
        if (!ldp_big_mul_u32(&term, &term, a))
            return 0;
        ldp_big_div_u32(&term, &term, b);
        ldp_big_div_u32(&term, &term, i);
        if (!ldp_big_add(&total, &total, &term))
            return 0;
        i++;
    }
    *out = total;
    return 1;
}
