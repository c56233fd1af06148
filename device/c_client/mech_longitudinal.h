/* The memoised (longitudinal) mechanisms on the C client, spec §3.2: L-OSUE, L-SUE, L-GRR,
 * LOLOHA, the memoised one-bit mean. Parameters are checked as device/ldp/longitudinal.py
 * checks them; the thresholds, enrolment and reports are the shared c_kernels code
 * (ldp_longitudinal.c). */
#ifndef LDPC_MECH_LONGITUDINAL_H
#define LDPC_MECH_LONGITUDINAL_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

/* Thresholds and sizes of a memoised mechanism (zero for the others). */
struct ldpc_long_params {
    uint32_t t_perm, t_inst;     /* lgrr, loloha: GRR keep thresholds at eps_inf, then eps1 */
    uint32_t t_p, t_q, t_flip;   /* losue, lsue: permanent bit thresholds; every flip threshold */
    uint32_t t0, s, g;           /* lbitmean: grid point 0's threshold, segments; loloha: g */
    size_t state_size, enrol_words, classes;
};

struct ldpc_mech;
struct ldpc_input;

int ldpc_long_is(int id);            /* one of the memoised mechanisms */

/* Parameters (eps_milli = eps_inf, params "eps1_milli" in [1, eps_inf), "g", "s") and
 * thresholds into mech; 0, or -1 with the reason (fields as the MicroPython client). */
int ldpc_long_init(struct ldpc_mech *mech, const cJSON *params, struct ldpc_reason *why);

/* The permanent state (mech->lon.state_size bytes) from mech->lon.enrol_words words (the OS
 * RNG on a device): drawn once, at enrolment. 0, or -1. */
int ldpc_long_enrol(const struct ldpc_mech *mech, const uint32_t *words, uint8_t *state);

/* The enrolment charge (spec §3.2): min(classes, rounds) * eps_inf in milli-nats, rounds 0 =
 * unbounded. A function of the config only, never of a value. */
uint64_t ldpc_long_charge_milli(const struct ldpc_mech *mech, uint32_t rounds);

/* One report body from in->state (read only) and in->index / in->key (lbitmean: in->index is
 * the counter, clamped to [0, m]); 0, or -1 if the state or input does not fit. */
int ldpc_long_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const uint32_t *words,
                     uint8_t *body);

#ifdef LDPC_TEST_MODES
/* Vector input {"value": v, "state": hex} into `in` (the state into a static buffer); 0 or -1. */
int ldpc_long_vector_input(const struct ldpc_mech *mech, const cJSON *value, struct ldpc_input *in);
/* An enrolment vector ({..., "enrol": true}: prints {"state_hex", "thresholds", "state_bytes",
 * "charge_milli"} for the case's "charge_milli" round counts) or a sequence ({..., "sequence":
 * [values], "report_words": [[words]...]}: enrols once from the hex words, reports every value,
 * prints {"state_hex", "state_after_hex", "charge_milli", "reports"}). Exit code. */
int ldpc_long_vector(const struct ldpc_mech *mech, const cJSON *c, const char *words_hex);
#endif

#endif
