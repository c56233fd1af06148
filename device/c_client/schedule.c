/* Recurring campaigns: see schedule.h (aggregator/ldpfleet/core/schedule.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "envelope.h"
#include "ldp_report.h"
#include "mech_longitudinal.h"
#include "schedule.h"

static const char *const KEYS[] = {"start", "every_s", "rounds", NULL};

int ldpc_is_recurring(const cJSON *doc)
{
    return cJSON_GetObjectItemCaseSensitive(doc, "schedule") != NULL;
}

int ldpc_schedule_phase_kind(const char *mechanism, int recurring, struct ldpc_reason *why)
{
    int memoised = ldpc_long_is(ldp_mechanism_id(mechanism));
    if (memoised && !recurring) {
        ldpc_reason_set(why, "phases.mechanism", "%s is a memoised mechanism: it runs in recurring campaigns "
                        "only (a config with a schedule, spec §3.4)", mechanism);
        return -1;
    }
    if (recurring && !memoised) {
        ldpc_reason_set(why, "phases.mechanism", "a recurring campaign takes a memoised mechanism (lbitmean, "
                        "lgrr, loloha, losue, lsue), not %s: a one-shot mechanism would spend eps every round "
                        "(spec §3.4)", mechanism);
        return -1;
    }
    return 0;
}

static int sched_int(const cJSON *s, const char *key, int64_t lo, int64_t hi, int64_t *out, struct ldpc_reason *why)
{
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(s, key), out) || *out < lo || *out > hi) {
        ldpc_reason_set(why, "schedule", "schedule.%s must be an integer in [%lld, %lld]", key, (long long)lo,
                        (long long)hi);
        return -1;
    }
    return 0;
}

int64_t ldpc_round_count(int64_t start, int64_t every_s, int64_t not_after, int has_rounds, int64_t rounds)
{
    int64_t span = not_after - start;
    if (has_rounds)
        return rounds;
    if (every_s <= 0)
        return 0;
    /* ceil(span / every_s) with floor division, as Python's -((start - not_after) // every_s) */
    return span >= 0 ? (span + every_s - 1) / every_s : -((-span) / every_s);
}

int ldpc_schedule_check(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc, "schedule"), *e;
    int64_t not_before = 0, not_after = 0, start, every, rounds = 0, r;
    int has_rounds;
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "not_before"), &not_before);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "not_after"), &not_after);
    if (!cJSON_IsObject(s)) {
        ldpc_reason_set(why, "schedule", "schedule must be an object");
        return -1;
    }
    cJSON_ArrayForEach(e, s) {
        int i, known = 0;
        for (i = 0; KEYS[i] != NULL; i++)
            known |= e->string != NULL && strcmp(e->string, KEYS[i]) == 0;
        if (!known) {
            ldpc_reason_set(why, "schedule", "unknown schedule key '%.60s'", e->string ? e->string : "");
            return -1;
        }
    }
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "phases")) != 1) {
        ldpc_reason_set(why, "phases", "a recurring campaign has exactly one phase (spec §3.4)");
        return -1;
    }
    has_rounds = cJSON_GetObjectItemCaseSensitive(s, "rounds") != NULL;
    if (sched_int(s, "start", not_before, not_after - 1, &start, why) != 0
        || sched_int(s, "every_s", LDPC_EVERY_S_MIN, LDPC_EVERY_S_MAX, &every, why) != 0
        || (has_rounds && sched_int(s, "rounds", 1, LDPC_ROUNDS_MAX, &rounds, why) != 0))
        return -1;
    r = ldpc_round_count(start, every, not_after, has_rounds, rounds);
    if (r < 1 || r > LDPC_ROUNDS_MAX) {
        ldpc_reason_set(why, "schedule", "%lld rounds: a schedule has 1..%d", (long long)r, LDPC_ROUNDS_MAX);
        return -1;
    }
    if (start + (r - 1) * every >= not_after) {
        ldpc_reason_set(why, "schedule", "round %lld would open at %lld, at or after not_after %lld", (long long)r,
                        (long long)(start + (r - 1) * every), (long long)not_after);
        return -1;
    }
    return 0;
}

void ldpc_schedule_of(const cJSON *doc, struct ldpc_schedule *out)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc, "schedule");
    int64_t rounds = 0, r;
    int has_rounds = cJSON_GetObjectItemCaseSensitive(s, "rounds") != NULL;
    memset(out, 0, sizeof *out);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(s, "start"), &out->start);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(s, "every_s"), &out->every_s);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "not_after"), &out->not_after);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(s, "rounds"), &rounds);
    r = ldpc_round_count(out->start, out->every_s, out->not_after, has_rounds, rounds);
    out->rounds = r < 0 ? 0 : r > LDPC_ROUNDS_MAX ? LDPC_ROUNDS_MAX : (uint32_t)r;
}

uint32_t ldpc_round_at(const struct ldpc_schedule *s, int64_t t)
{
    int64_t r;
    if (s->every_s <= 0 || !(s->start <= t && t < s->not_after))
        return 0;
    r = (t - s->start) / s->every_s + 1;
    return r <= (int64_t)s->rounds ? (uint32_t)r : 0;
}

void ldpc_round_window(const struct ldpc_schedule *s, uint32_t r, int64_t *opens, int64_t *closes)
{
    *opens = s->start + ((int64_t)r - 1) * s->every_s;
    *closes = *opens + s->every_s < s->not_after ? *opens + s->every_s : s->not_after;
}

void ldpc_with_round(const uint8_t *report, size_t len, uint32_t r, uint8_t *out)
{
    memcpy(out, report, LDP_HEADER_SIZE);
    out[3] = LDPC_ROUND_FLAG;
    out[LDP_HEADER_SIZE] = (uint8_t)r;
    out[LDP_HEADER_SIZE + 1] = (uint8_t)(r >> 8);
    out[LDP_HEADER_SIZE + 2] = (uint8_t)(r >> 16);
    out[LDP_HEADER_SIZE + 3] = (uint8_t)(r >> 24);
    memcpy(out + LDPC_ROUND_HEADER, report + LDP_HEADER_SIZE, len - LDP_HEADER_SIZE);
}

#ifdef LDPC_TEST_MODES
int ldpc_schedule_vector(int argc, char **argv)
{
    static const char *const options[] = {"--cases-file", NULL};
    static const char *const flags[] = {NULL};
    const char *file = ldpc_opt(argc, argv, "--cases-file");
    const cJSON *c;
    size_t len;
    char *text;
    cJSON *cases;
    int first = 1;
    if (!ldpc_check_args(argc, argv, options, flags) || file == NULL || (text = ldpc_read_file(file, &len)) == NULL)
        return ldpc_usage("rounds needs --cases-file F (a JSON list of {schedule, not_after, t})");
    cases = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsArray(cases)) {
        cJSON_Delete(cases);
        return ldpc_usage("rounds: the cases file must hold a JSON list");
    }
    printf("[");
    cJSON_ArrayForEach(c, cases) {
        struct ldpc_schedule s;
        int64_t t = 0;
        uint32_t r;
        ldpc_schedule_of(c, &s); /* {schedule, not_after}: the fields a config has */
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(c, "t"), &t);
        r = ldpc_round_at(&s, t);
        printf("%s{\"rounds\": %lu, \"round\": ", first ? "" : ", ", (unsigned long)s.rounds);
        if (r)
            printf("%lu}", (unsigned long)r);
        else
            printf("null}");
        first = 0;
    }
    printf("]\n");
    cJSON_Delete(cases);
    return 0;
}
#endif
