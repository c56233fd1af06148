/* Numeric metrics, protocol v2 §1.1 and §3.3: the grid point of a reading, Duchi's one-bit
 * (`duchi`, id 13), the sliding-window channel of the Piecewise Mechanism (`pm`, id 14) and
 * Square Wave (`sw`, id 16), and the Hybrid Mechanism with metric sampling (`hm`, id 15).
 * Portable C99, no allocation, no globals. Perturbations take their random words from the
 * caller and choose between their outputs with masks, not branches on the value.
 *
 * Thresholds (configuration time, exact at every eps through ldp_bignum) return
 * LDP_THRESH_OK (0) or a negative ldp_thresholds.h error. */
#ifndef LDP_NUMERIC_H
#define LDP_NUMERIC_H
#include <stddef.h>
#include <stdint.h>

#define LDP_GRID_MAX 65536u    /* grid points of a numeric domain */
#define LDP_PM_SPAN 65536u     /* pm: u = floor(65536 / (N - 1)) cells per grid step */
#define LDP_METRICS_MAX 64u    /* hm: metrics per campaign */
#define LDP_HM_PM_FROM 611u    /* hm mixes in PM iff its per-metric eps_milli >= 611 */
#define LDP_HM_SAMPLE 2500u    /* hm: k = max(1, min(d, eps_milli / 2500)) */

/* cdef-begin */
typedef struct {
    uint32_t grid;          /* N, grid points */
    uint32_t base, slope;   /* bit = 1 iff w0 < base + slope * x */
} ldp_duchi_params;

typedef struct {
    uint32_t grid;          /* N */
    uint32_t mul, div;      /* window position p = x * mul / div (pm: u, 1; sw: B, N) */
    uint32_t span, width;   /* D cells outside the window, L inside */
    uint32_t t_in;          /* the output is in the window iff w0 < t_in */
    uint32_t out_bytes;     /* the body's y: 2 (u16) or 4 (u32) bytes */
} ldp_window_params;

typedef struct {
    uint32_t metrics, sampled;  /* d, k */
    uint32_t t_choice;          /* PM iff w < t_choice (0: Duchi only) */
    ldp_duchi_params duchi;
    ldp_window_params pm;
} ldp_hm_params;

uint32_t ldp_grid_point(double reading, int is_number, int64_t lo, int64_t hi, uint32_t decimals,
                        uint32_t n);

int ldp_duchi_slope(uint32_t eps_milli, uint32_t n, uint32_t *slope, uint32_t *base);
int ldp_duchi_ok(uint32_t eps_milli, uint32_t n);
int ldp_window_threshold(uint32_t eps_milli, uint32_t width, uint32_t span, uint32_t *t);
int ldp_window_ok(uint32_t eps_milli, uint32_t width, uint32_t span, uint32_t t);
int ldp_pm_shape(uint32_t eps_milli, uint32_t n, uint32_t *u, uint32_t *span, uint32_t *width);
int ldp_hm_choice_threshold(uint32_t eps_milli, uint32_t *t);

int ldp_duchi_perturb(const ldp_duchi_params *p, const uint32_t *x, size_t n, const uint32_t *words,
                      uint8_t *out, size_t stride);
int64_t ldp_duchi_count(const uint8_t *bodies, size_t n, size_t stride, int64_t *ones);
int ldp_window_perturb(const ldp_window_params *p, const uint32_t *x, size_t n, const uint32_t *words,
                       uint8_t *out, size_t stride);
int64_t ldp_window_sums(const ldp_window_params *p, const uint8_t *bodies, size_t n, size_t stride,
                        int64_t *sums);
int64_t ldp_window_hist(const ldp_window_params *p, const uint8_t *bodies, size_t n, size_t stride,
                        int64_t *counts);
int ldp_hm_perturb(const ldp_hm_params *p, const uint32_t *x, size_t n, const uint32_t *words, uint8_t *out,
                   size_t stride);
int64_t ldp_hm_fold(const ldp_hm_params *p, const uint8_t *bodies, size_t n, size_t stride, int64_t *acc);
/* cdef-end */

#endif
