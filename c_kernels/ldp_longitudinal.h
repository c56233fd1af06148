/* Longitudinal (memoised) mechanisms, protocol v2 §3.2: L-OSUE (17), L-SUE (18), L-GRR (19),
 * LOLOHA (20), the memoised one-bit mean (21).
 *
 * Enrolment (`*_enrol`) draws a device's permanent state from words (the OS RNG on a device):
 * every permanent randomised response it can ever use, for every value or bucket. A report
 * (`*_perturb`) is the instantaneous randomisation of the memoised response of the current
 * value, read from the state (never written). States (little-endian):
 *   lgrr      N bytes: entry v = permanent output of value v            (N <= 256, 2N words)
 *   loloha    seed:u32, g bytes: entry b = permanent output of bucket b (g <= 256, 1 + 2g words)
 *   losue/lsue N rows of ceil(N/8) bytes: row v = permanent bitmap of v (N <= 128, N*N words)
 *   lbitmean  alpha:u32, bitmap of s+1 bits: bit j = permanent bit of grid point j (2 + s words)
 * Batch functions: n devices, device i's words at words + i*R, state at states + i*state_stride,
 * body at out + i*stride. Return 0, or -1 (nothing written) if a parameter or input is out of
 * range. Client paths: no allocation, no globals. The thresholds (configuration time) use the
 * 512-bit integers of ldp_bignum.h. */
#ifndef LDP_LONGITUDINAL_H
#define LDP_LONGITUDINAL_H
#include <stddef.h>
#include <stdint.h>

#define LDP_LGRR_N_MAX 256u
#define LDP_LOLOHA_G_MAX 256u
#define LDP_LUE_N_MAX 128u
#define LDP_LBITMEAN_S_MAX 255u

/* cdef-begin */
int ldp_lgrr_enrol(size_t n, uint32_t N, uint32_t t_perm, const uint32_t *words, uint8_t *out,
                   size_t stride);
int ldp_lgrr_perturb(const uint32_t *x, size_t n, uint32_t N, uint32_t t_inst, const uint8_t *states,
                     size_t state_stride, const uint32_t *words, uint8_t *out, size_t stride);
int ldp_loloha_enrol(size_t n, uint32_t g, uint32_t t_perm, const uint32_t *words, uint8_t *out,
                     size_t stride);
int ldp_loloha_perturb(const uint32_t *keys, size_t n, uint32_t g, uint32_t t_inst,
                       const uint8_t *states, size_t state_stride, const uint32_t *words, uint8_t *out,
                       size_t stride);
int ldp_lue_enrol(size_t n, uint32_t N, uint32_t t_p, uint32_t t_q, const uint32_t *words, uint8_t *out,
                  size_t stride);
int ldp_lue_perturb(const uint32_t *x, size_t n, uint32_t N, uint32_t t_flip, const uint8_t *states,
                    size_t state_stride, const uint32_t *words, uint8_t *out, size_t stride);
int ldp_lbitmean_enrol(size_t n, uint32_t s, uint32_t t0, const uint32_t *words, uint8_t *out,
                       size_t stride);
int ldp_lbitmean_perturb(const uint32_t *x, size_t n, uint32_t m, uint32_t s, uint32_t t_flip,
                         const uint8_t *states, size_t state_stride, const uint32_t *words, uint8_t *out,
                         size_t stride);
int64_t ldp_lbitmean_count(const uint8_t *bodies, size_t n, size_t stride);
int ldp_t_lue_inst(uint32_t t_p, uint32_t t_q, uint32_t eps1_milli, uint32_t *f);
int ldp_t_bit_inst(uint32_t t0, uint32_t eps1_milli, uint32_t *f);
int ldp_t_grr_inst(uint32_t N, uint32_t t_perm, uint32_t eps1_milli, uint32_t *t);
/* cdef-end */

#endif
