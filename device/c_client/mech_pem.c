/* Strings domains and PEM's phase-1 input: see mech_pem.h. */
#include <string.h>

#include "envelope.h"
#include "ldp_hash.h"
#include "ldp_pem.h"
#include "ldp_thresholds.h"
#include "mech_pem.h"

static int is_int(const cJSON *v, int64_t *out)
{
    return v != NULL && ldpc_json_int(v, out);
}

int ldpc_is_strings(const cJSON *domain)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(domain, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, "strings") == 0;
}

int ldpc_pem_check_domain(const cJSON *domain, struct ldpc_reason *why)
{
    int64_t L = 0;
    if (!is_int(cJSON_GetObjectItemCaseSensitive(domain, "max_len"), &L) || L < 1 || L > LDPC_PEM_MAX_LEN) {
        ldpc_reason_set(why, "domain.max_len", "max_len must be an integer in 1..%d", LDPC_PEM_MAX_LEN);
        return -1;
    }
    return (int)L;
}

static int check_levels(const cJSON *levels, int64_t max_len, struct ldpc_pem *p, struct ldpc_reason *why)
{
    const cJSON *b;
    int64_t prev = 0, v = 0;
    int n = cJSON_IsArray(levels) ? cJSON_GetArraySize(levels) : 0, ok = n >= 1 && n <= LDPC_PEM_LEVELS_MAX;
    if (ok) {
        cJSON_ArrayForEach(b, levels) {
            if (!is_int(b, &v) || v <= prev || v > 8 * max_len) {
                ok = 0;
                break;
            }
            if (p != NULL)
                p->levels[p->nlevels++] = (uint32_t)v;
            prev = v;
        }
        ok = ok && prev == 8 * max_len;
    }
    if (!ok) {
        ldpc_reason_set(why, "params.levels", "levels must be 1..%d strictly increasing bit lengths >= 1 ending "
                        "at 8 * max_len = %lld", LDPC_PEM_LEVELS_MAX, (long long)(8 * max_len));
        return -1;
    }
    return 0;
}

int ldpc_pem_params(struct ldpc_pem *p, const cJSON *params, struct ldpc_reason *why)
{
    const cJSON *levels = cJSON_GetObjectItemCaseSensitive(params, "levels"), *last;
    int64_t top = 0;
    memset(p, 0, sizeof *p);
    last = cJSON_IsArray(levels) ? cJSON_GetArrayItem(levels, cJSON_GetArraySize(levels) - 1) : NULL;
    if (!is_int(last, &top) || top % 8 != 0 || top < 8 || top > 8 * LDPC_PEM_MAX_LEN) {
        ldpc_reason_set(why, "params.levels", "levels must end at 8 * max_len");
        return -1;
    }
    p->max_len = (uint32_t)(top / 8);
    return check_levels(levels, top / 8, p, why);
}

static const char *mech_name(const cJSON *ph)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(ph, "mechanism");
    return cJSON_IsString(m) ? m->valuestring : "";
}

int ldpc_pem_check_phases(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(doc, "phases"), *ph, *first, *second, *params, *l;
    int n = cJSON_GetArraySize(phases), has_pem = 0, count = 0;
    int64_t g = 0, kp = 0, eps = 0, L, lv = 0;
    cJSON_ArrayForEach(ph, phases)
        has_pem |= strcmp(mech_name(ph), "pem") == 0;
    if (!ldpc_is_strings(cJSON_GetObjectItemCaseSensitive(doc, "domain"))) {
        if (has_pem) {
            ldpc_reason_set(why, "phases.mechanism", "pem runs only on a strings domain (spec §3.5)");
            return -1;
        }
        return 0;
    }
    first = cJSON_GetArrayItem(phases, 0);
    second = cJSON_GetArrayItem(phases, 1);
    if (n != 2 || strcmp(mech_name(first), "pem") != 0 || strcmp(mech_name(second), "psgrr") != 0) {
        ldpc_reason_set(why, "phases.mechanism", "a strings domain takes pem in phase 1 and psgrr in phase 2 (spec §3.5)");
        return -1;
    }
    cJSON_ArrayForEach(ph, phases) {
        if (cJSON_GetObjectItemCaseSensitive(ph, "sample_rate_ppm") == NULL) {
            ldpc_reason_set(why, "phases.sample_rate_ppm", "a PEM campaign splits its devices between the phases "
                            "by sample_rate_ppm (spec §3.5, §5.4)");
            return -1;
        }
    }
    L = ldpc_pem_check_domain(cJSON_GetObjectItemCaseSensitive(doc, "domain"), why);
    if (L < 0)
        return -1;
    params = cJSON_GetObjectItemCaseSensitive(first, "params");
    cJSON_ArrayForEach(ph, params)
        count++;
    if (!cJSON_IsObject(params) || count != 3 || cJSON_GetObjectItemCaseSensitive(params, "g") == NULL
        || cJSON_GetObjectItemCaseSensitive(params, "kp") == NULL
        || cJSON_GetObjectItemCaseSensitive(params, "levels") == NULL) {
        ldpc_reason_set(why, "phases.params", "pem takes exactly g, kp and levels (spec §3.5)");
        return -1;
    }
    is_int(cJSON_GetObjectItemCaseSensitive(first, "eps_milli"), &eps);
    if (!is_int(cJSON_GetObjectItemCaseSensitive(params, "g"), &g) || g < 2 || g > 65536) {
        ldpc_reason_set(why, "params.g", "g must be an integer in 2..65536");
        return -1;
    }
    if (ldp_grr_ok((uint32_t)eps, (uint64_t)g) != 1) {
        ldpc_reason_set(why, "params.g", "GRR over %lld outputs is not exactly eps-LDP at eps_milli %lld (spec §2)",
                        (long long)g, (long long)eps);
        return -1;
    }
    if (!is_int(cJSON_GetObjectItemCaseSensitive(params, "kp"), &kp) || kp < 1 || kp > 65536) {
        ldpc_reason_set(why, "params.kp", "kp must be an integer in 1..65536");
        return -1;
    }
    if (check_levels(cJSON_GetObjectItemCaseSensitive(params, "levels"), L, NULL, why) != 0)
        return -1;
    params = cJSON_GetObjectItemCaseSensitive(second, "params");
    count = 0;
    cJSON_ArrayForEach(ph, params)
        count++;
    l = cJSON_GetObjectItemCaseSensitive(params, "l");
    if (!cJSON_IsObject(params) || count != 1 || !is_int(l, &lv) || lv != 1) {
        ldpc_reason_set(why, "params.l", "a PEM campaign's phase 2 is psgrr with params {\"l\": 1} (spec §3.5)");
        return -1;
    }
    return 0;
}

int ldpc_pem_check_phase2(const cJSON *body, struct ldpc_reason *why)
{
    const cJSON *cand = cJSON_GetObjectItemCaseSensitive(body, "candidates"), *c, *d;
    int64_t v = 0, w = 0;
    int n = cJSON_IsArray(cand) ? cJSON_GetArraySize(cand) : 0;
    if (n < 1 || n > LDPC_PEM_CANDIDATES_MAX) {
        ldpc_reason_set(why, "candidates", "a PEM phase 2 carries 1..%d keys", LDPC_PEM_CANDIDATES_MAX);
        return -1;
    }
    cJSON_ArrayForEach(c, cand) {
        if (!is_int(c, &v) || v < 0 || v > 0xffffffffll) {
            ldpc_reason_set(why, "candidates", "candidate keys must be u32");
            return -1;
        }
        for (d = c->next; d != NULL; d = d->next) /* public: at most 1024^2 / 2 comparisons */
            if (is_int(d, &w) && w == v) {
                ldpc_reason_set(why, "candidates", "candidate keys must be distinct");
                return -1;
            }
    }
    return 0;
}

void ldpc_pem_source(const cJSON *value, uint8_t src[LDPC_PEM_MAX_LEN])
{
    static const char empty[1] = {0};
    const char *s = cJSON_IsString(value) && value->valuestring != NULL ? value->valuestring : empty;
    uint32_t alive = 1, j;
    for (j = 0; j < LDPC_PEM_MAX_LEN; j++) {
        /* a slot past the string's NUL reads s[0] and keeps 0: never beyond the string */
        uint8_t b = (uint8_t)s[j & (0u - alive)] & (uint8_t)(0u - alive);
        alive &= (uint32_t)(b != 0);
        src[j] = b;
    }
}

void ldpc_pem_code(const uint8_t src[LDPC_PEM_MAX_LEN], uint32_t max_len, uint8_t code[LDPC_PEM_CODE_SLOTS])
{
    uint32_t j;
    for (j = 0; j < LDPC_PEM_CODE_SLOTS; j++) {
        uint32_t inside = (uint32_t)(j < max_len);
        code[j] = src[j & (0u - inside) & (LDPC_PEM_MAX_LEN - 1u)] & (uint8_t)(0u - inside);
    }
}

uint32_t ldpc_pem_code_key(const uint8_t code[LDPC_PEM_CODE_SLOTS], uint32_t max_len, uint8_t *live)
{
    uint32_t n = 0, i, b, h = LDP_KEY_SEED, res = 0;
    for (i = 0; i < max_len; i++) {
        uint32_t nz = 0u - (uint32_t)(code[i] != 0);
        n = ((i + 1) & nz) | (n & ~nz);
    }
    for (b = 0; b <= (max_len >> 2); b++) {
        uint32_t o = b << 2, t = n - o;
        uint32_t sel = 0u - ((uint32_t)(n >= o) & (uint32_t)(t < 4u));
        uint32_t tail = (uint32_t)code[o] | ((uint32_t)code[o + 1] << 8) | ((uint32_t)code[o + 2] << 16);
        uint32_t blk = tail | ((uint32_t)code[o + 3] << 24);
        uint32_t full = 0u - (uint32_t)(o + 4 <= n), hb;
        res |= ldp_fmix32(h ^ ldp_key_mix(tail) ^ n) & sel;
        hb = ldp_rotl32(h ^ ldp_key_mix(blk), 13) * 5u + 0xe6546b64u;
        h = (hb & full) | (h & ~full);
    }
    *live = (uint8_t)(n > 0);
    return res;
}

uint32_t ldpc_pem_group(const char *device, uint32_t salt, uint32_t groups)
{
    return ldp_bucket(ldp_murmur3_32((const uint8_t *)device, strlen(device), salt + 1u), groups);
}

uint32_t ldpc_pem_prefix_key(const struct ldpc_pem *p, uint32_t salt, const char *device,
                             const uint8_t src[LDPC_PEM_MAX_LEN])
{
    uint8_t code[LDPC_PEM_CODE_SLOTS];
    uint32_t key = 0, bits = p->levels[ldpc_pem_group(device, salt, p->nlevels)];
    ldpc_pem_code(src, p->max_len, code);
    ldp_pem_prefix_keys(code, 1, p->max_len, bits, LDP_KEY_SEED, &key);
    return key;
}
