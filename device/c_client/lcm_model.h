/* LDPLCM frequency model on the C client (protocol_spec/v2/ldplcm-model.md; LDPLCM Alg. 2
 * line 4, Zhang, Lin, Yin, "Local Differentially Private Frequency Estimation based on Learned Sketches"): decides whether the device's item is
 * high-frequent, g(x) >= P, with integers only -- the same integer as the aggregator's
 * `ldplcm.evaluate_int` and the MicroPython device's ldp/lcm_model.py.
 *
 * The model is the "model" object of the signed phase-2 message: boosted trees flattened in
 * preorder, tree t from roots[t] to the next root; node i is a leaf iff right[i] == -1 (then
 * split[i] is its value), else the walk goes to i + 1 when x <= split[i] and to right[i]
 * otherwise; g(x) = init + the reached leaf of every tree; x is the item's domain index.
 * `ldpc_lcm_model_parse` applies the validity rules of ldplcm-model.md (refusing with field
 * "model"), so every walk moves forward inside its tree and ends at a leaf, and every partial
 * sum stays in [-2^30, 2^30). */
#ifndef LDPC_LCM_MODEL_H
#define LDPC_LCM_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

#define LDPC_LCM_FORMAT "ldplcm-gbr"
#define LDPC_LCM_VERSION 1
#define LDPC_LCM_MAX_NODES 65536
#define LDPC_LCM_MAX_TREES 4096
#define LDPC_LCM_MAX_SCALE_BITS 30

struct ldpc_lcm_model {
    int32_t scale_bits, init, boundary;
    size_t trees, nodes;
    int32_t *roots, *split, *right; /* heap arrays of `trees`, `nodes`, `nodes` entries */
    int32_t *depth;                 /* D_t of every tree (ldplcm-model.md "Constant steps") */
};

/* Validate a model document and load it; 0, or -1 with field "model" (nothing allocated). */
int ldpc_lcm_model_parse(struct ldpc_lcm_model *model, const cJSON *doc, struct ldpc_reason *why);
void ldpc_lcm_model_free(struct ldpc_lcm_model *model);

/* g(x) in fixed point with `scale_bits` fractional bits (x: the item's domain index, d for ⊥).
 * Every tree is walked for its full depth D_t whatever x is (spec §7.1): a step at a leaf stays. */
int64_t ldpc_lcm_model_evaluate(const struct ldpc_lcm_model *model, uint32_t x);

/* Alg. 2 line 4: 1 iff g(x) >= P (the device then sends the all -1 vector), else 0. */
int ldpc_lcm_model_is_high(const struct ldpc_lcm_model *model, uint32_t x);

#endif
