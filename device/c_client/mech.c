/* Mechanism dispatch of the C client: see mech.h. Parameter ranges and messages follow
 * device/ldp/<mechanism>.py; the perturbation itself is the shared kernels' code. */
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "ldp_cms.h"
#include "ldp_grr.h"
#include "ldp_hash.h"
#include "ldp_hcms.h"
#include "ldp_olh.h"
#include "ldp_oue.h"
#include "ldp_report.h"
#include "ldp_select.h"
#include "ldp_sh.h"
#include "ldp_shc.h"
#include "ldp_thresholds.h"
#include "mech.h"

#define MAX_ROWS 65536
#define MAX_BITS 65536
#define MAX_CANDIDATES 65536 /* as ldpfleet.mechanisms.srappor */
#define PS_MAX_DOMAIN 16777216u /* psgrr/psolh without a list: d <= 2^24 (ldpfleet.mechanisms.psfo) */

static int param(const cJSON *params, const char *name, int64_t lo, int64_t hi, uint32_t *out,
                 struct ldpc_reason *why)
{
    int64_t v;
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(params, name), &v) || v < lo || v > hi) {
        ldpc_reason_set(why, "phases.params", "%s must be an integer in [%lld, %lld]", name, (long long)lo,
                        (long long)hi);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int threshold_rc(int rc, struct ldpc_reason *why)
{
    if (rc != LDP_THRESH_OK)
        ldpc_reason_set(why, "phases.eps_milli", "eps_milli outside what the thresholds support (1..%u)",
                        LDP_EPS_MILLI_MAX);
    return rc == LDP_THRESH_OK ? 0 : -1;
}

static int cmp_pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

int ldpc_candidates_parse(struct ldpc_candidates *c, const cJSON *list, struct ldpc_reason *why)
{
    const cJSON *item;
    uint32_t *pairs, i, kc;
    int64_t v;
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1;
    memset(c, 0, sizeof *c);
    if (n < 1 || n > MAX_CANDIDATES) {
        ldpc_reason_set(why, "candidates", "need 1..65536 distinct u32 candidate keys");
        return -1;
    }
    kc = (uint32_t)n;
    pairs = malloc(2 * sizeof *pairs * kc);
    c->sorted = malloc(sizeof *c->sorted * kc);
    c->index = malloc(sizeof *c->index * kc);
    if (pairs == NULL || c->sorted == NULL || c->index == NULL) {
        free(pairs);
        ldpc_candidates_free(c);
        ldpc_reason_set(why, "candidates", "out of memory");
        return -1;
    }
    i = 0;
    cJSON_ArrayForEach(item, list) {
        if (!ldpc_json_int(item, &v) || v < 0 || v > 0xffffffffll) {
            free(pairs);
            ldpc_candidates_free(c);
            ldpc_reason_set(why, "candidates", "need 1..65536 distinct u32 candidate keys");
            return -1;
        }
        pairs[2 * i] = (uint32_t)v;
        pairs[2 * i + 1] = i;
        i++;
    }
    qsort(pairs, kc, 2 * sizeof *pairs, cmp_pair);
    for (i = 0; i < kc; i++) {
        if (i > 0 && pairs[2 * i] == pairs[2 * i - 2]) {
            ldpc_reason_set(why, "candidates", "candidate %lu listed twice", (unsigned long)pairs[2 * i]);
            free(pairs);
            ldpc_candidates_free(c);
            return -1;
        }
        c->sorted[i] = pairs[2 * i];
        c->index[i] = pairs[2 * i + 1];
    }
    free(pairs);
    c->kc = kc;
    for (c->steps = 0; (1ull << c->steps) < kc; c->steps++)
        ;
    c->steps++;
    return 0;
}

void ldpc_candidates_free(struct ldpc_candidates *c)
{
    free(c->sorted);
    free(c->index);
    memset(c, 0, sizeof *c);
}

uint32_t ldpc_candidates_position(const struct ldpc_candidates *c, uint32_t key)
{
    uint32_t base = 0, size = c->kc, k;
    for (k = 0; k < c->steps; k++) {
        uint32_t half = size >> 1;
        base += half & ldp_mask(c->sorted[base + half] <= key);
        size -= half;
    }
    return ldp_select(c->sorted[base] == key, c->index[base], c->kc);
}

void ldpc_trim_to_candidates(const uint32_t *keys, uint8_t *live, size_t n, const struct ldpc_candidates *c)
{
    size_t j;
    for (j = 0; j < n; j++)
        live[j] &= (uint8_t)(ldpc_candidates_position(c, keys[j]) != c->kc);
}

/* The sampled element of a set (spec §3): s live slots, i = bucket(w0, max(l, s)); *key and
 * *c (its index among the mechanism's items: candidate position, or without a list the key if
 * < D; D for the dummy) found over every slot with the same work; returns 1 for a set element
 * (i < s), 0 for the dummy. */
static uint32_t set_sample(const struct ldpc_mech *mech, const struct ldpc_input *in, uint32_t w0, uint32_t *key,
                           uint32_t *c)
{
    uint32_t s = 0, rank = 0, i, real, items = mech->cand.kc ? mech->cand.kc : mech->items;
    size_t j;
    for (j = 0; j < in->nslots; j++)
        s += in->live[j];
    i = ldp_bucket_inline(w0, s > mech->l ? s : mech->l);
    *key = 0;
    *c = 0;
    for (j = 0; j < in->nslots; j++) {
        uint32_t k = in->keys[j], pos, hit;
        pos = mech->cand.kc ? ldpc_candidates_position(&mech->cand, k) : ldp_select(k < items, k, items);
        hit = ldp_mask(in->live[j] & (rank == i));
        *key |= k & hit;
        *c |= pos & hit;
        rank += in->live[j];
    }
    real = i < s;
    *c = ldp_select(real, *c, items);
    return real;
}

/* PSFO's items (ldpfleet.mechanisms.psfo): the candidate list (phase 2), or without one the
 * int domain 0..d-1 (c = key), refused above 2^24 items; then "l" in 1..65536. */
static int init_ps_items(struct ldpc_mech *mech, const cJSON *cands, const cJSON *params,
                         struct ldpc_reason *why)
{
    if (cands == NULL)
        cands = cJSON_GetObjectItemCaseSensitive(params, "candidates");
    if (cands == NULL) {
        if (mech->domain_size > PS_MAX_DOMAIN) {
            ldpc_reason_set(why, "domain.size", "%s without a candidate list needs a domain of at most %u items",
                            mech->name, PS_MAX_DOMAIN);
            return -1;
        }
        mech->items = (uint32_t)mech->domain_size;
    } else {
        if (ldpc_candidates_parse(&mech->cand, cands, why) != 0)
            return -1;
        mech->items = mech->cand.kc;
    }
    return param(params, "l", 1, MAX_BITS, &mech->l, why);
}

/* Sampling RAPPOR's candidates: the phase-2 list, and params' optional "kc" must agree. */
static int init_candidates(struct ldpc_mech *mech, const cJSON *cands, const cJSON *params,
                           struct ldpc_reason *why)
{
    int64_t v;
    if (ldpc_candidates_parse(&mech->cand, cands, why) != 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(params, "kc") != NULL
        && (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(params, "kc"), &v) || v != (int64_t)mech->cand.kc)) {
        ldpc_reason_set(why, "phases.params", "kc does not match the candidate list");
        return -1;
    }
    return 0;
}

int ldpc_mech_init(struct ldpc_mech *mech, const char *name, int64_t eps_milli, uint64_t domain_size,
                   uint32_t salt, uint32_t campaign_id, int phase, const cJSON *params,
                   const cJSON *candidates, struct ldpc_reason *why)
{
    uint32_t eps;
    memset(mech, 0, sizeof *mech);
    mech->id = ldp_mechanism_id(name);
    if (mech->id == 0) {
        ldpc_reason_set(why, "phases.mechanism", "unknown mechanism %s", name);
        return -1;
    }
    if (eps_milli <= 0 || eps_milli > 0xffffffffll) {
        ldpc_reason_set(why, "phases.eps_milli", "must be a positive integer");
        return -1;
    }
    if (phase != 1 && phase != 2) {
        ldpc_reason_set(why, "phase", "phase must be 1 or 2");
        return -1;
    }
    eps = (uint32_t)eps_milli;
    mech->name = ldp_mechanism_name(mech->id);
    mech->phase = (uint8_t)phase;
    mech->eps_milli = eps;
    mech->salt = salt;
    mech->campaign_id = campaign_id;
    mech->domain_size = domain_size;
    switch (mech->id) {
    case LDP_MECHANISM_ID_GRR:
        if (domain_size < 2 || domain_size > 0xffffffffull) {
            ldpc_reason_set(why, "domain.size", "GRR needs 2 <= d < 2^32");
            return -1;
        }
        mech->body_size = 4;
        mech->words = 2;
        return threshold_rc(ldp_t_grr(eps, domain_size, &mech->t_keep), why);
    case LDP_MECHANISM_ID_OLH:
    case LDP_MECHANISM_ID_FLH:
        mech->body_size = 6;
        mech->words = 3;
        if (param(params, "g", 2, MAX_BITS, &mech->g, why) != 0)
            return -1;
        if (mech->id == LDP_MECHANISM_ID_FLH && param(params, "kp", 1, 0xffffffffll, &mech->kp, why) != 0)
            return -1;
        return threshold_rc(ldp_t_grr(eps, mech->g, &mech->t_keep), why);
    case LDP_MECHANISM_ID_PEM: /* spec §3.5: FLH over key_λ */
        mech->body_size = 6;
        mech->words = 3;
        if (param(params, "g", 2, MAX_BITS, &mech->g, why) != 0 || param(params, "kp", 1, 65536, &mech->kp, why) != 0
            || ldpc_pem_params(&mech->pem, params, why) != 0)
            return -1;
        return threshold_rc(ldp_t_grr(eps, mech->g, &mech->t_keep), why);
    case LDP_MECHANISM_ID_OUE:
        if (domain_size < 2 || domain_size > MAX_BITS) {
            ldpc_reason_set(why, "domain.size", "OUE on a device needs 2 <= d <= %d", MAX_BITS);
            return -1;
        }
        mech->body_size = (size_t)(domain_size + 7) / 8;
        mech->words = (size_t)domain_size;
        return threshold_rc(ldp_t_oue_q(eps, &mech->t_q), why);
    case LDP_MECHANISM_ID_CMS:
    case LDP_MECHANISM_ID_LCM:
        if (param(params, "k", 1, MAX_ROWS, &mech->k, why) != 0 || param(params, "m", 1, MAX_BITS, &mech->m, why) != 0)
            return -1;
        mech->body_size = 2 + ((size_t)mech->m + 7) / 8;
        mech->words = 1 + (size_t)mech->m;
        return threshold_rc(ldp_t_flip(eps, &mech->t_flip), why);
    case LDP_MECHANISM_ID_HCMS:
        mech->body_size = 5;
        mech->words = 3;
        if (param(params, "k", 1, MAX_ROWS, &mech->k, why) != 0 || param(params, "m", 1, MAX_BITS, &mech->m, why) != 0)
            return -1;
        if (mech->m & (mech->m - 1)) {
            ldpc_reason_set(why, "phases.params", "m must be a power of two");
            return -1;
        }
        return threshold_rc(ldp_t_rr(eps, &mech->t_keep), why);
    case LDP_MECHANISM_ID_SH:
        mech->body_size = 5;
        mech->words = 3;
        if (param(params, "m", 1, MAX_BITS, &mech->m, why) != 0 || param(params, "l", 1, MAX_BITS, &mech->l, why) != 0)
            return -1;
        return threshold_rc(ldp_t_rr(eps, &mech->t_keep), why);
    case LDP_MECHANISM_ID_SHC: /* spec §3.1: phase 1 R = 4 at T_rr(eps1); phase 2 R = 1 */
        mech->body_size = 5;
        if (param(params, "m", 2, MAX_BITS, &mech->m, why) != 0 || param(params, "l", 1, MAX_BITS, &mech->l, why) != 0)
            return -1;
        if (phase == 1) {
            mech->words = 4;
            return threshold_rc(ldp_t_rr(eps, &mech->t_keep), why);
        }
        mech->words = 1;
        if (param(params, "eps1_milli", 1, LDP_EPS_MILLI_MAX, &mech->eps1_milli, why) != 0)
            return -1;
        if (ldp_shc_ok(mech->eps1_milli, eps) != 1
            || ldp_t_shc(mech->eps1_milli, eps, &mech->t_keep, &mech->t_a, &mech->t_b) != LDP_THRESH_OK) {
            ldpc_reason_set(why, "phases.eps_milli", "shc phases eps_milli %lu, %lu fail shc_ok (spec §3.1)",
                            (unsigned long)mech->eps1_milli, (unsigned long)eps);
            return -1;
        }
        return 0;
    case LDP_MECHANISM_ID_SRAPPOR:
        if (candidates == NULL)
            candidates = cJSON_GetObjectItemCaseSensitive(params, "candidates");
        if (init_candidates(mech, candidates, params, why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        if (param(params, "l", 1, MAX_BITS, &mech->l, why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        mech->body_size = ((size_t)mech->cand.kc + 8) / 8;
        mech->words = (size_t)mech->cand.kc + 2;
        if (threshold_rc(ldp_t_flip(eps, &mech->t_flip), why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        return 0;
    case LDP_MECHANISM_ID_PSGRR:
        mech->body_size = 4;
        mech->words = 3;
        if (init_ps_items(mech, candidates, params, why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        if (ldp_grr_ok(eps, (uint64_t)mech->items + 1) != 1) {
            ldpc_reason_set(why, "domain.size", "GRR over %lu outputs is not eps-LDP with integer thresholds "
                            "(spec §2)", (unsigned long)mech->items + 1);
            ldpc_mech_free(mech);
            return -1;
        }
        if (threshold_rc(ldp_t_grr(eps, (uint64_t)mech->items + 1, &mech->t_keep), why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        return 0;
    case LDP_MECHANISM_ID_PSOLH:
        mech->body_size = 6;
        mech->words = 4;
        if (init_ps_items(mech, candidates, params, why) != 0 || param(params, "g", 2, MAX_BITS, &mech->g, why) != 0
            || threshold_rc(ldp_t_grr(eps, mech->g, &mech->t_keep), why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        return 0;
    default:
        if (ldpc_long_is(mech->id))
            return ldpc_long_init(mech, params, why);
        if (ldpc_numeric_id(mech->id))
            return ldpc_numeric_init(mech, params, why);
        ldpc_reason_set(why, "phases.mechanism", "unknown mechanism %s", name);
        return -1;
    }
}

void ldpc_mech_free(struct ldpc_mech *mech)
{
    ldpc_candidates_free(&mech->cand);
}

size_t ldpc_mech_report_size(const struct ldpc_mech *mech)
{
    return LDP_HEADER_SIZE + mech->body_size;
}

int ldpc_mech_index_valued(const struct ldpc_mech *mech)
{
    return LDP_MECHANISM_BY_INDEX(mech->id);
}

int ldpc_mech_set_valued(const struct ldpc_mech *mech)
{
    return LDP_MECHANISM_SET_VALUED(mech->id);
}

int ldpc_mech_set_valued_name(const char *name)
{
    return LDP_MECHANISM_SET_VALUED(ldp_mechanism_id(name));
}

int ldpc_mech_listed_name(const char *name)
{
    return LDP_MECHANISM_LISTED(ldp_mechanism_id(name));
}

int ldpc_mech_shc_x(const struct ldpc_mech *mech, const uint32_t *words, const uint8_t *report)
{
    int y1;
    if (mech->id != LDP_MECHANISM_ID_SHC || mech->phase != 1)
        return -1;
    y1 = report[LDP_HEADER_SIZE + 4] != 0;
    return words[2] < mech->t_keep ? y1 : !y1;
}

int ldpc_shc_memo_input(const uint8_t *memo, size_t len, int x, struct ldpc_input *in)
{
    const uint8_t *b;
    if (memo == NULL || len != LDP_HEADER_SIZE + 5 || memo[1] != LDP_MECHANISM_ID_SHC || memo[2] != 1
        || memo[LDP_HEADER_SIZE + 4] > 1 || (x != 0 && x != 1))
        return -1;
    b = memo + LDP_HEADER_SIZE;
    memset(in, 0, sizeof *in);
    in->shc_t = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
    in->shc_y1 = b[4];
    in->shc_x = x;
    return 0;
}

int ldpc_mech_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const uint32_t *words,
                     uint32_t nonce, uint8_t *report)
{
    uint8_t *body = report + LDP_HEADER_SIZE;
    ldp_shc_params shc;
    uint8_t high, x, y1;
    uint32_t key = 0, c = 0, real = 0;
    int rc = 0;
    high = (uint8_t)(in->high != 0);
    if (ldpc_mech_set_valued(mech) && !(mech->id == LDP_MECHANISM_ID_SHC && mech->phase == 2))
        real = set_sample(mech, in, words[0], &key, &c);
    memset(report, 0, ldpc_mech_report_size(mech));
    ldp_header_pack(report, (uint8_t)mech->id, mech->phase, mech->campaign_id, nonce);
    switch (mech->id) {
    case LDP_MECHANISM_ID_GRR:
        rc = ldp_grr_perturb(&in->index, 1, (uint32_t)mech->domain_size, mech->t_keep, words, body, 0);
        break;
    case LDP_MECHANISM_ID_OLH:
        rc = ldp_olh_perturb(&in->key, 1, mech->g, mech->t_keep, words, body, 0);
        break;
    case LDP_MECHANISM_ID_FLH:
    case LDP_MECHANISM_ID_PEM: /* key_λ (spec §3.5) */
        rc = ldp_flh_perturb(&in->key, 1, mech->g, mech->kp, mech->salt, mech->t_keep, words, body, 0);
        break;
    case LDP_MECHANISM_ID_OUE:
        rc = ldp_oue_perturb(&in->index, 1, (uint32_t)mech->domain_size, LDP_T_OUE_P, mech->t_q, words, body, 0);
        break;
    case LDP_MECHANISM_ID_CMS:
        ldp_cms_perturb(&in->key, NULL, 1, mech->salt, mech->k, mech->m, mech->t_flip, words, body, 0);
        break;
    case LDP_MECHANISM_ID_LCM:
        ldp_cms_perturb(&in->key, &high, 1, mech->salt, mech->k, mech->m, mech->t_flip, words, body, 0);
        break;
    case LDP_MECHANISM_ID_HCMS:
        ldp_hcms_perturb(&in->key, 1, mech->salt, mech->k, mech->m, mech->t_keep, words, body, 0);
        break;
    case LDP_MECHANISM_ID_SH:
        ldp_sh_body(key, real, mech->salt, mech->m, mech->t_keep, words, body);
        break;
    case LDP_MECHANISM_ID_SHC:
        shc.l = mech->l;
        shc.salt = mech->salt;
        shc.m = mech->m;
        shc.t_rr = mech->t_keep;
        shc.t_a = mech->t_a;
        shc.t_b = mech->t_b;
        if (mech->phase == 1) {
            ldp_shc_body1(&shc, key, real, words, body);
        } else {
            y1 = (uint8_t)(in->shc_y1 != 0);
            x = (uint8_t)(in->shc_x != 0);
            ldp_shc_perturb2(&shc, &in->shc_t, &y1, &x, 1, words, body, 0);
        }
        break;
    case LDP_MECHANISM_ID_SRAPPOR:
        ldp_srappor_body(c, mech->cand.kc, mech->t_flip, words, body);
        break;
    case LDP_MECHANISM_ID_PSGRR:
        ldp_psgrr_body(c, mech->items, mech->t_keep, words, body);
        break;
    case LDP_MECHANISM_ID_PSOLH: /* a real element: any key without a list, a candidate with one */
        ldp_psolh_body(key, real & ((c < mech->items) | (mech->cand.kc == 0)), mech->g, mech->t_keep, words, body);
        break;
    default:
        rc = ldpc_long_is(mech->id) ? ldpc_long_report(mech, in, words, body)
             : ldpc_numeric_id(mech->id) ? ldpc_numeric_report(mech, in, words, body) : -1;
    }
    return rc;
}
