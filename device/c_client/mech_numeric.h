/* Numeric mechanisms of the C client (spec §1.1, §3.3): duchi, pm, hm, sw. Parameters and
 * refusals as device/ldp/{numeric,duchi,pm,hm,sw}.py; the reports are the shared c_kernels
 * (ldp_numeric.c) with n = 1; the numeric domain rules are the aggregator's
 * config.check_numeric_domain. */
#ifndef LDPC_MECH_NUMERIC_H
#define LDPC_MECH_NUMERIC_H
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ldp_numeric.h"

struct ldpc_mech;
struct ldpc_input;
struct ldpc_reason;

/* The kernels' parameters of one numeric mechanism (the one of its id is used). */
struct ldpc_numeric {
    ldp_duchi_params duchi;
    ldp_window_params window; /* pm, sw */
    ldp_hm_params hm;
};

int ldpc_numeric_id(int id); /* 1 for duchi, pm, hm, sw */

/* mech->id, eps_milli and domain_size (N) set: checks N and the parameters, fills mech->num,
 * body_size and words. 0, or -1 with the reason. */
int ldpc_numeric_init(struct ldpc_mech *mech, const cJSON *params, struct ldpc_reason *why);

/* The body from mech->words words: in->index is the grid point (duchi, pm, sw); hm takes
 * in->keys[0..metrics) (in->nslots == metrics). 0, or -1 if the input does not fit. */
int ldpc_numeric_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const uint32_t *words,
                        uint8_t *body);

/* A vector's "value": a grid point, or for hm a list of `metrics` grid points (or one point when
 * metrics is 1), into `in` (*points: the allocated list, the caller frees). 0 or -1. */
int ldpc_numeric_vector_input(const struct ldpc_mech *mech, const cJSON *value, struct ldpc_input *in,
                              uint32_t **points);

/* Spec §1.1: a `range` or `ranges` domain; its grid points N, or -1 with the reason. */
int64_t ldpc_numeric_check_domain(const cJSON *domain, struct ldpc_reason *why);

/* Numeric mechanisms on numeric domains only; hm's params.metrics equals the domain's; sw
 * spells out bins and window. */
int ldpc_numeric_check_phases(const cJSON *doc, struct ldpc_reason *why);

/* The grid point of a JSON reading for metric `metric` of a checked numeric domain (spec §1.1;
 * a non-number reads the midpoint). */
uint32_t ldpc_numeric_grid_point(const cJSON *domain, int metric, const cJSON *reading);

#endif
