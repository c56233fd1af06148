/* One mechanism of one campaign phase on the C client: parameters checked as the MicroPython
 * client checks them (device/ldp/<mechanism>.py), integer thresholds from
 * c_kernels/ldp_thresholds.c, the report built by the shared c_kernels batch functions (n = 1). */
#ifndef LDPC_MECH_H
#define LDPC_MECH_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "mech_longitudinal.h"
#include "mech_numeric.h"
#include "mech_pem.h"
#include "util.h"

/* A phase-2 candidate list (LDPMiner §4.1, spec §5): 1..65536 distinct u32 keys. */
struct ldpc_candidates {
    uint32_t kc, steps;       /* steps: halvings that find any key (the same for every key) */
    uint32_t *sorted, *index; /* the keys ascending, and each one's position in the list */
};

/* Parse and check a JSON candidate list as the aggregator does (ldpfleet.mechanisms.srappor);
 * 0, or -1 with field "candidates". */
int ldpc_candidates_parse(struct ldpc_candidates *c, const cJSON *list, struct ldpc_reason *why);
void ldpc_candidates_free(struct ldpc_candidates *c);
/* The position of `key` in the list, kc if it is not a candidate: c->steps halvings for every
 * key, no branch on the key (spec §7.1). */
uint32_t ldpc_candidates_position(const struct ldpc_candidates *c, uint32_t key);

/* LDPMiner §4.4's phase-2 input (ldpminer.trim_to_candidates) over a set's n slots: live[j]
 * stays 1 only where keys[j] is a candidate; the set's own order is the slots'. Every slot
 * gets the same work. */
void ldpc_trim_to_candidates(const uint32_t *keys, uint8_t *live, size_t n, const struct ldpc_candidates *c);

struct ldpc_mech {
    int id;
    const char *name;
    uint8_t phase;
    uint32_t eps_milli, salt, campaign_id;
    uint64_t domain_size;
    uint32_t g, kp, k, m, l;          /* parameters (those the mechanism has) */
    uint32_t t_keep, t_q, t_flip;     /* integer thresholds, spec §2 */
    uint32_t eps1_milli, t_a, t_b;    /* shc phase 2: phase 1's eps, T_shc_a, T_shc_b (spec §3.1) */
    struct ldpc_candidates cand;      /* sampling RAPPOR, PSFO: the candidates (bit/item c = list[c]) */
    uint32_t items;                   /* PSFO: D, the candidates or (no list) the int domain 0..d-1 */
    struct ldpc_long_params lon;      /* the memoised mechanisms (spec §3.2, mech_longitudinal.h) */
    struct ldpc_numeric num;          /* duchi, pm, hm, sw (mech_numeric.h) */
    struct ldpc_pem pem;              /* pem: max_len and levels (mech_pem.h, spec §3.5) */
    size_t body_size, words;
};

/* The device's value in the form the mechanism takes (spec §3): a domain index (grr, oue),
 * an item key (olh, flh, cms, hcms, and lcm with the high-frequent flag), or a set (sh,
 * srappor, psgrr, psolh, shc phase 1) in `nslots` slots: keys[j] and live[j] (1 = a distinct
 * item of the set; the set's order is the slots'). shc phase 2 takes no value: the row t and
 * sign y1 of its phase-1 memo and the ledger's bit x (1 = +1, spec §3.1). */
struct ldpc_input {
    uint32_t index, key;
    int high;
    const uint32_t *keys;
    const uint8_t *live;
    size_t nslots;
    uint32_t shc_t;
    int shc_y1, shc_x;
    const uint8_t *state; /* the memoised mechanisms: the enrolment state (read only) */
    size_t state_len;
};

/* Build from a phase description. `params` is the phase's params object (may be NULL; shc
 * phase 2 also needs "eps1_milli", phase 1's eps, for its thresholds);
 * `candidates` (sampling RAPPOR, psgrr, psolh) the phase-2 candidate list (may be NULL: then
 * params' "candidates" is used; psgrr/psolh without either run over the int domain 0..d-1,
 * d <= 2^24). 0, or -1 with the reason. */
int ldpc_mech_init(struct ldpc_mech *mech, const char *name, int64_t eps_milli, uint64_t domain_size,
                   uint32_t salt, uint32_t campaign_id, int phase, const cJSON *params,
                   const cJSON *candidates, struct ldpc_reason *why);
void ldpc_mech_free(struct ldpc_mech *mech);

size_t ldpc_mech_report_size(const struct ldpc_mech *mech);
int ldpc_mech_index_valued(const struct ldpc_mech *mech); /* grr, oue */
int ldpc_mech_set_valued(const struct ldpc_mech *mech);   /* sh, srappor, psgrr, psolh, shc */
int ldpc_mech_set_valued_name(const char *name);          /* the same, by mechanism name */
int ldpc_mech_listed_name(const char *name);              /* srappor, psgrr, psolh: phase 2 takes the list */

/* Header + body into `report` (ldpc_mech_report_size bytes) from exactly `mech->words`
 * random words. A set's element i = bucket(w0, max(l, s)) is chosen over every slot and every
 * branch of the body computed (c_kernels ldp_*_body): the same work for every set (spec
 * §7.1). 0, or -1 if the input does not fit. */
int ldpc_mech_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const uint32_t *words,
                     uint32_t nonce, uint8_t *report);

/* shc phase 1: the bit x (1 = +1) of a report made from `words`, for the ledger (spec §7.4):
 * y1 = x iff w2 < T_rr, so x = y1 when kept and -y1 when not. -1 for every other mechanism
 * and phase. */
int ldpc_mech_shc_x(const struct ldpc_mech *mech, const uint32_t *words, const uint8_t *report);

/* shc phase 2's input from the phase-1 memo (a 17-byte shc phase-1 report) and the ledger's
 * bit x; 0, or -1 if the memo is not one or x is not a bit. */
int ldpc_shc_memo_input(const uint8_t *memo, size_t len, int x, struct ldpc_input *in);

#endif
