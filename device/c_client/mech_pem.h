/* Strings nobody listed (spec §3.5): the `strings` domain's config rules (the aggregator's
 * core/strings_domain.py, device/ldp/strings.py), the code of a value, its phase-2 key, a
 * device's public group, and PEM's phase-1 input: key_λ of the prefix of λ = levels[group]
 * bits of the code, reported by FLH (spec §3 id 3; c_kernels ldp_flh_perturb).
 *
 * Wang, Li, Jha et al., "Locally differentially private heavy hitter identification", IEEE
 * TDSC 2019, §4. Constant work (spec §7.1): the code is built in exactly max_len byte slots,
 * the phase-2 key by a MurmurHash3 that mixes every block of the code and selects (by masks)
 * the state finalised at the code's own length. */
#ifndef LDPC_MECH_PEM_H
#define LDPC_MECH_PEM_H
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

#define LDPC_PEM_MAX_LEN 64       /* max_len of a strings domain: 1..64 bytes */
#define LDPC_PEM_LEVELS_MAX 64
#define LDPC_PEM_CANDIDATES_MAX 1024
#define LDPC_PEM_CODE_SLOTS (LDPC_PEM_MAX_LEN + 4) /* a code and 4 NUL slots past it */

struct ldpc_pem {
    uint32_t max_len, nlevels;
    uint32_t levels[LDPC_PEM_LEVELS_MAX];
};

/* 1 if `domain` is {"type": "strings", ...}. */
int ldpc_is_strings(const cJSON *domain);
/* max_len in 1..64, else -1 (field domain.max_len). */
int ldpc_pem_check_domain(const cJSON *domain, struct ldpc_reason *why);
/* pem only on a strings domain; a strings domain takes exactly pem then psgrr {"l": 1}, both
 * with sample_rate_ppm; pem's g, kp, levels (check_strings_phases). 0 or -1. */
int ldpc_pem_check_phases(const cJSON *doc, struct ldpc_reason *why);
/* A PEM phase-2 body: 1..1024 distinct u32 candidates (field candidates). 0 or -1. */
int ldpc_pem_check_phase2(const cJSON *body, struct ldpc_reason *why);
/* pem's params (g, kp checked by the caller): levels into `p`. 0 or -1 (params.levels). */
int ldpc_pem_params(struct ldpc_pem *p, const cJSON *params, struct ldpc_reason *why);

/* The value's first LDPC_PEM_MAX_LEN UTF-8 bytes (0 past its end; all 0 for a non-string),
 * read in exactly LDPC_PEM_MAX_LEN slots (the string's NUL ends it). */
void ldpc_pem_source(const cJSON *value, uint8_t src[LDPC_PEM_MAX_LEN]);
/* The code: src cut to max_len, NUL-padded to LDPC_PEM_CODE_SLOTS, every slot visited. */
void ldpc_pem_code(const uint8_t src[LDPC_PEM_MAX_LEN], uint32_t max_len, uint8_t code[LDPC_PEM_CODE_SLOTS]);
/* H(code without its trailing NULs, KEY_SEED) with the same work for every code; *live = the
 * code is not all NUL (the phase-2 element; else the dummy). */
uint32_t ldpc_pem_code_key(const uint8_t code[LDPC_PEM_CODE_SLOTS], uint32_t max_len, uint8_t *live);
/* bucket(H(utf8(device), (salt + 1) mod 2^32), groups): public. */
uint32_t ldpc_pem_group(const char *device, uint32_t salt, uint32_t groups);
/* key_λ of the device's group for the value's source bytes. */
uint32_t ldpc_pem_prefix_key(const struct ldpc_pem *p, uint32_t salt, const char *device,
                             const uint8_t src[LDPC_PEM_MAX_LEN]);

#endif
