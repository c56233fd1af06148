/* Memoised (longitudinal) mechanisms on the C client: see mech_longitudinal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "envelope.h"
#include "ldp_longitudinal.h"
#include "ldp_report.h"
#include "ldp_thresholds.h"
#include "mech.h"

#define W64 (1ull << 32)

int ldpc_long_is(int id)
{
    return LDP_MECHANISM_LONGITUDINAL(id);
}

static int long_param(const cJSON *params, const char *name, int64_t lo, int64_t hi, uint32_t *out,
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

static int thresholds_failed(int rc, const char *what, struct ldpc_reason *why)
{
    if (rc == LDP_THRESH_OK)
        return 0;
    ldpc_reason_set(why, "phases.params", "no %s threshold for this eps_milli / eps1_milli", what);
    return -1;
}

int ldpc_long_init(struct ldpc_mech *mech, const cJSON *params, struct ldpc_reason *why)
{
    struct ldpc_long_params *p = &mech->lon;
    uint32_t eps = mech->eps_milli, n;
    memset(p, 0, sizeof *p);
    if (eps < 2 || eps > LDP_EPS_MILLI_MAX) {
        ldpc_reason_set(why, "phases.eps_milli", "a memoised mechanism needs 2 <= eps_milli <= %u",
                        LDP_EPS_MILLI_MAX);
        return -1;
    }
    if (long_param(params, "eps1_milli", 1, (int64_t)eps - 1, &mech->eps1_milli, why) != 0)
        return -1;
    n = mech->domain_size <= 0xffffffffull ? (uint32_t)mech->domain_size : 0;
    switch (mech->id) {
    case LDP_MECHANISM_ID_LOSUE:
    case LDP_MECHANISM_ID_LSUE:
        if (n < 2 || n > LDP_LUE_N_MAX) {
            ldpc_reason_set(why, "domain.size", "%s needs 2 <= n <= %u", mech->name, LDP_LUE_N_MAX);
            return -1;
        }
        if (mech->id == LDP_MECHANISM_ID_LOSUE) {
            p->t_p = LDP_T_OUE_P;
            if (thresholds_failed(ldp_t_oue_q(eps, &p->t_q), "permanent", why) != 0)
                return -1;
        } else {
            if (thresholds_failed(ldp_t_flip(eps, &p->t_q), "permanent", why) != 0)
                return -1;
            p->t_p = (uint32_t)(W64 - p->t_q);
        }
        mech->body_size = ((size_t)n + 7) / 8;
        mech->words = n;
        p->classes = n;
        p->state_size = (size_t)n * mech->body_size;
        p->enrol_words = (size_t)n * n;
        return thresholds_failed(ldp_t_lue_inst(p->t_p, p->t_q, mech->eps1_milli, &p->t_flip), "flip", why);
    case LDP_MECHANISM_ID_LGRR:
    case LDP_MECHANISM_ID_LOLOHA:
        if (mech->id == LDP_MECHANISM_ID_LGRR) {
            if (n < 2 || n > LDP_LGRR_N_MAX) {
                ldpc_reason_set(why, "domain.size", "lgrr needs 2 <= n <= %u", LDP_LGRR_N_MAX);
                return -1;
            }
            p->g = n;
            mech->body_size = 4;
            p->state_size = n;
            p->enrol_words = 2 * (size_t)n;
        } else {
            if (long_param(params, "g", 2, LDP_LOLOHA_G_MAX, &p->g, why) != 0)
                return -1;
            mech->body_size = 6;
            p->state_size = 4 + (size_t)p->g;
            p->enrol_words = 1 + 2 * (size_t)p->g;
        }
        mech->words = 2;
        p->classes = p->g;
        if (thresholds_failed(ldp_t_grr(eps, p->g, &p->t_perm), "permanent", why) != 0)
            return -1;
        return thresholds_failed(ldp_t_grr_inst(p->g, p->t_perm, mech->eps1_milli, &p->t_inst), "keep", why);
    case LDP_MECHANISM_ID_LBITMEAN:
        if (long_param(params, "s", 1, LDP_LBITMEAN_S_MAX, &p->s, why) != 0)
            return -1;
        if (n < 2 || p->s > n - 1) {
            ldpc_reason_set(why, "phases.params", "lbitmean needs 1 <= s <= m = d - 1");
            return -1;
        }
        mech->body_size = 1;
        mech->words = 1;
        p->classes = (size_t)p->s + 1;
        p->state_size = 4 + ((size_t)p->s + 8) / 8;
        p->enrol_words = 2 + (size_t)p->s;
        if (thresholds_failed(ldp_t_oue_q(eps, &p->t0), "permanent", why) != 0)
            return -1;
        return thresholds_failed(ldp_t_bit_inst(p->t0, mech->eps1_milli, &p->t_flip), "flip", why);
    default:
        ldpc_reason_set(why, "phases.mechanism", "%s is not a memoised mechanism", mech->name);
        return -1;
    }
}

int ldpc_long_enrol(const struct ldpc_mech *mech, const uint32_t *words, uint8_t *state)
{
    const struct ldpc_long_params *p = &mech->lon;
    switch (mech->id) {
    case LDP_MECHANISM_ID_LOSUE:
    case LDP_MECHANISM_ID_LSUE:
        return ldp_lue_enrol(1, (uint32_t)mech->domain_size, p->t_p, p->t_q, words, state, p->state_size);
    case LDP_MECHANISM_ID_LGRR:
        return ldp_lgrr_enrol(1, p->g, p->t_perm, words, state, p->state_size);
    case LDP_MECHANISM_ID_LOLOHA:
        return ldp_loloha_enrol(1, p->g, p->t_perm, words, state, p->state_size);
    case LDP_MECHANISM_ID_LBITMEAN:
        return ldp_lbitmean_enrol(1, p->s, p->t0, words, state, p->state_size);
    default:
        return -1;
    }
}

uint64_t ldpc_long_charge_milli(const struct ldpc_mech *mech, uint32_t rounds)
{
    uint64_t classes = mech->lon.classes;
    if (rounds != 0 && rounds < classes)
        classes = rounds;
    return classes * mech->eps_milli;
}

int ldpc_long_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const uint32_t *words,
                     uint8_t *body)
{
    const struct ldpc_long_params *p = &mech->lon;
    uint32_t x;
    if (in->state == NULL || in->state_len != p->state_size)
        return -1;
    switch (mech->id) {
    case LDP_MECHANISM_ID_LOSUE:
    case LDP_MECHANISM_ID_LSUE:
        return ldp_lue_perturb(&in->index, 1, (uint32_t)mech->domain_size, p->t_flip, in->state, 0, words,
                               body, 0);
    case LDP_MECHANISM_ID_LGRR:
        return ldp_lgrr_perturb(&in->index, 1, p->g, p->t_inst, in->state, 0, words, body, 0);
    case LDP_MECHANISM_ID_LOLOHA:
        return ldp_loloha_perturb(&in->key, 1, p->g, p->t_inst, in->state, 0, words, body, 0);
    case LDP_MECHANISM_ID_LBITMEAN:
        x = in->index > mech->domain_size - 1 ? (uint32_t)(mech->domain_size - 1) : in->index;
        return ldp_lbitmean_perturb(&x, 1, (uint32_t)(mech->domain_size - 1), p->s, p->t_flip, in->state, 0,
                                    words, body, 0);
    default:
        return -1;
    }
}

#ifdef LDPC_TEST_MODES
#define STATE_MAX (LDP_LUE_N_MAX * LDP_LUE_N_MAX / 8)

static uint8_t vector_state[STATE_MAX];

int ldpc_long_vector_input(const struct ldpc_mech *mech, const cJSON *value, struct ldpc_input *in)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(value, "value");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(value, "state");
    int64_t x;
    memset(in, 0, sizeof *in);
    if (!cJSON_IsString(st) || strlen(st->valuestring) != 2 * mech->lon.state_size
        || mech->lon.state_size > STATE_MAX
        || ldpc_hex_decode(st->valuestring, vector_state, mech->lon.state_size) != 0
        || !ldpc_json_int(v, &x))
        return -1;
    if (mech->id == LDP_MECHANISM_ID_LBITMEAN) /* the counter, clamped as the device does */
        x = x < 0 ? 0 : (x > (int64_t)mech->domain_size - 1 ? (int64_t)mech->domain_size - 1 : x);
    if (x < 0 || x > 0xffffffffll)
        return -1;
    in->index = in->key = (uint32_t)x;
    in->state = vector_state;
    in->state_len = mech->lon.state_size;
    return 0;
}

static void print_thresholds(const struct ldpc_mech *mech)
{
    const struct ldpc_long_params *p = &mech->lon;
    if (mech->id == LDP_MECHANISM_ID_LOSUE || mech->id == LDP_MECHANISM_ID_LSUE)
        printf("{\"t_p\": %lu, \"t_q\": %lu, \"t_flip\": %lu}", (unsigned long)p->t_p, (unsigned long)p->t_q,
               (unsigned long)p->t_flip);
    else if (mech->id == LDP_MECHANISM_ID_LBITMEAN)
        printf("{\"t0\": %lu, \"t_flip\": %lu}", (unsigned long)p->t0, (unsigned long)p->t_flip);
    else
        printf("{\"t_perm\": %lu, \"t_inst\": %lu}", (unsigned long)p->t_perm, (unsigned long)p->t_inst);
}

static void print_hex(const uint8_t *data, size_t len)
{
    char *out = malloc(2 * len + 1);
    if (out == NULL)
        return;
    ldpc_hex_encode(data, len, out);
    printf("\"%s\"", out);
    free(out);
}

/* [[rounds, charge], ...] for the rounds of the case's "charge_milli" list (null: unbounded). */
static void print_charges(const struct ldpc_mech *mech, const cJSON *c)
{
    const cJSON *pair;
    int first = 1;
    printf("[");
    cJSON_ArrayForEach(pair, cJSON_GetObjectItemCaseSensitive(c, "charge_milli")) {
        const cJSON *r = cJSON_GetArrayItem(pair, 0);
        int64_t rounds = 0;
        if (!cJSON_IsNull(r) && (!ldpc_json_int(r, &rounds) || rounds < 1 || rounds > 0xffffffffll))
            continue;
        if (cJSON_IsNull(r))
            printf("%s[null, %llu]", first ? "" : ", ", (unsigned long long)ldpc_long_charge_milli(mech, 0));
        else
            printf("%s[%lld, %llu]", first ? "" : ", ", (long long)rounds,
                   (unsigned long long)ldpc_long_charge_milli(mech, (uint32_t)rounds));
        first = 0;
    }
    printf("]");
}

int ldpc_long_vector(const struct ldpc_mech *mech, const cJSON *c, const char *words_hex)
{
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(c, "sequence");
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(c, "report_words"), *v, *ws;
    size_t n = mech->lon.state_size, i = 0;
    uint32_t *words = malloc(mech->lon.enrol_words * sizeof *words);
    uint32_t *rwords = malloc(mech->words * sizeof *rwords);
    uint8_t *state = malloc(n), *before = malloc(n), *report = malloc(ldpc_mech_report_size(mech));
    int code = LDPC_EXIT_USAGE, first = 1;
    if (words == NULL || rwords == NULL || state == NULL || before == NULL || report == NULL
        || ldpc_words_from_hex(words_hex, words, mech->lon.enrol_words) != 0
        || ldpc_long_enrol(mech, words, state) != 0) {
        fprintf(stderr, "ldp_client: --words-hex must hold exactly %lu enrolment words\n",
                (unsigned long)mech->lon.enrol_words);
        goto done;
    }
    memcpy(before, state, n);
    printf("{\"state_hex\": ");
    print_hex(state, n);
    printf(", \"state_bytes\": %lu, \"thresholds\": ", (unsigned long)n);
    print_thresholds(mech);
    printf(", \"charge_milli\": ");
    print_charges(mech, c);
    if (cJSON_IsArray(seq)) {
        printf(", \"reports\": [");
        cJSON_ArrayForEach(v, seq) {
            struct ldpc_input in;
            int64_t x;
            size_t j = 0;
            const cJSON *w;
            ws = cJSON_GetArrayItem(rw, (int)i++);
            memset(&in, 0, sizeof in);
            if (!ldpc_json_int(v, &x) || x < 0 || x > 0xffffffffll || cJSON_GetArraySize(ws) != (int)mech->words)
                goto done;
            cJSON_ArrayForEach(w, ws) {
                int64_t wv;
                if (!ldpc_json_int(w, &wv) || wv < 0 || wv > 0xffffffffll)
                    goto done;
                rwords[j++] = (uint32_t)wv;
            }
            in.index = in.key = (uint32_t)x;
            in.state = state;
            in.state_len = n;
            if (ldpc_mech_report(mech, &in, rwords, 0, report) != 0)
                goto done;
            printf("%s", first ? "" : ", ");
            print_hex(report, ldpc_mech_report_size(mech));
            first = 0;
        }
        printf("], \"state_after_hex\": ");
        print_hex(state, n);
    }
    printf("}\n");
    code = memcmp(before, state, n) == 0 ? LDPC_EXIT_DONE : LDPC_EXIT_USAGE;
done:
    free(words);
    free(rwords);
    free(state);
    free(before);
    free(report);
    return code;
}
#endif
