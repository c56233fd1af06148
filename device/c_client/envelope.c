/* Envelope verification (spec §5) and config checks (spec §5, §6); see envelope.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "envelope.h"
#include "mech_pem.h"
#include "mech_longitudinal.h"
#include "ldp_hash.h"
#include "ldp_report.h"
#include "ldp_thresholds.h"
#include "mech_numeric.h"
#include "schedule.h"

#define PROTOCOL LDP_PROTOCOL_VERSION

/* Number tokens of `text` in document order: 1 where the token is written with a fraction or an
 * exponent (a JSON float: 86400.0, 1e3), else 0; *n tokens (heap, NULL when none or no memory). */
static uint8_t *number_forms(const char *text, size_t len, size_t *n)
{
    size_t i = 0, cap = 0;
    uint8_t *forms = NULL;
    *n = 0;
    while (i < len) {
        char c = text[i];
        if (c == '"') { /* a string: skip it, escapes included */
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\')
                    i++;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            uint8_t is_float = 0;
            for (; i < len && strchr("0123456789+-.eE", text[i]) != NULL && text[i] != '\0'; i++)
                is_float |= text[i] == '.' || text[i] == 'e' || text[i] == 'E';
            if (*n == cap) {
                uint8_t *grown = realloc(forms, cap = cap ? 2 * cap : 16);
                if (grown == NULL) {
                    free(forms);
                    *n = 0;
                    return NULL;
                }
                forms = grown;
            }
            forms[(*n)++] = is_float;
        } else {
            i++;
        }
    }
    return forms;
}

/* Mark the number items (pre-order: document order) that are floats in the text. */
static void mark_floats(cJSON *item, const uint8_t *forms, size_t n, size_t *next)
{
    for (; item != NULL; item = item->next) {
        if (cJSON_IsNumber(item) && *next < n && forms[(*next)++])
            item->type |= LDPC_JSON_FLOAT;
        if (item->child != NULL)
            mark_floats(item->child, forms, n, next);
    }
}

/* Parse a whole buffer as one JSON value, nothing but whitespace after it (as json.loads). A
 * number written as a float (86400.0) is marked (LDPC_JSON_FLOAT): Python's json.loads gives a
 * float there, which no integer field takes, so ldpc_json_int refuses it too. */
static cJSON *parse_exact(const char *text, size_t len)
{
    const char *end = NULL;
    cJSON *doc;
    uint8_t *forms;
    size_t n = 0, next = 0;
    if (memchr(text, '\0', len) != NULL)
        return NULL;
    doc = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (doc == NULL)
        return NULL;
    forms = number_forms(text, len, &n);
    mark_floats(doc, forms, n, &next);
    free(forms);
    return doc;
}

static void kid_of(const uint8_t pub[32], char out[17])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest(pub, 32, md, &mdlen, EVP_sha256(), NULL);
    ldpc_hex_encode(md, 8, out);
    out[16] = '\0';
}

static int load_key(struct ldpc_trusted_key *k, const cJSON *e)
{
    const cJSON *kid = cJSON_GetObjectItemCaseSensitive(e, "kid");
    const cJSON *pub = cJSON_GetObjectItemCaseSensitive(e, "pub");
    char want[17];
    if (!cJSON_IsObject(e) || !cJSON_IsString(kid) || !cJSON_IsString(pub)
        || strlen(pub->valuestring) != 64 || ldpc_hex_decode(pub->valuestring, k->pub, 32) != 0)
        return -1;
    kid_of(k->pub, want);
    if (strcmp(want, kid->valuestring) != 0)
        return -1;
    memcpy(k->kid, want, sizeof k->kid);
    return 0;
}

int ldpc_keyset_load(struct ldpc_keyset *set, const cJSON *entries, struct ldpc_reason *why)
{
    const cJSON *e;
    memset(set, 0, sizeof *set);
    if (cJSON_IsObject(entries)) {
        if (load_key(&set->keys[0], entries) != 0)
            goto bad;
        set->n = 1;
        return 0;
    }
    if (!cJSON_IsArray(entries) || cJSON_GetArraySize(entries) < 1
        || cJSON_GetArraySize(entries) > LDPC_MAX_TRUSTED)
        goto bad;
    cJSON_ArrayForEach(e, entries) {
        if (load_key(&set->keys[set->n], e) != 0)
            goto bad;
        set->n++;
    }
    return 0;
bad:
    set->n = 0;
    ldpc_reason_set(why, "trusted_keys", "need 1 to %d {kid, pub} entries, each kid matching its key",
                    LDPC_MAX_TRUSTED);
    return -1;
}

static const struct ldpc_trusted_key *find_key(const struct ldpc_keyset *keys, const char *kid)
{
    int i;
    for (i = 0; i < keys->n; i++)
        if (strcmp(keys->keys[i].kid, kid) == 0)
            return &keys->keys[i];
    return NULL;
}

/* Ed25519 (RFC 8032 §5.1.7) over the 44-byte signed message of a body whose SHA-256 is
 * `body_sha256` (spec §5.1). */
static int signature_ok(const uint8_t pub[32], const uint8_t body_sha256[32], const uint8_t sig[64])
{
    static const char tag[] = "ldpfleet-v2";
    uint8_t msg[sizeof tag + 32];
    EVP_PKEY *pkey;
    EVP_MD_CTX *ctx;
    int ok = 0;
    memcpy(msg, tag, sizeof tag); /* 11 bytes + the terminating NUL = the spec's \x00 */
    memcpy(msg + sizeof tag, body_sha256, 32);
    pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
    ctx = EVP_MD_CTX_new();
    if (pkey != NULL && ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1)
        ok = EVP_DigestVerify(ctx, sig, 64, msg, sizeof msg) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pkey);
    return ok;
}

cJSON *ldpc_envelope_verify(const uint8_t *payload, size_t len, const struct ldpc_keyset *keys,
                            struct ldpc_reason *why)
{
    return ldpc_envelope_open(payload, len, keys, NULL, why);
}

cJSON *ldpc_envelope_open(const uint8_t *payload, size_t len, const struct ldpc_keyset *keys,
                          char body_digest[LDPC_BODY_DIGEST_HEX], struct ldpc_reason *why)
{
    const struct ldpc_trusted_key *key;
    const cJSON *body, *kid, *sig;
    uint8_t raw[64], body_sha256[32];
    unsigned int mdlen = 0;
    cJSON *env, *doc;
    char *text;

    text = malloc(len + 1);
    if (text == NULL) {
        ldpc_reason_set(why, "envelope", "out of memory");
        return NULL;
    }
    memcpy(text, payload, len);
    text[len] = '\0';
    env = parse_exact(text, len);
    free(text);
    if (env == NULL) {
        ldpc_reason_set(why, "envelope", "not JSON");
        return NULL;
    }
    body = cJSON_GetObjectItemCaseSensitive(env, "body");
    kid = cJSON_GetObjectItemCaseSensitive(env, "kid");
    sig = cJSON_GetObjectItemCaseSensitive(env, "sig");
    if (!cJSON_IsObject(env) || cJSON_GetArraySize(env) != 3 || !cJSON_IsString(body)
        || !cJSON_IsString(kid) || !cJSON_IsString(sig)) {
        cJSON_Delete(env);
        ldpc_reason_set(why, "envelope", "expected exactly {\"body\": str, \"kid\": str, \"sig\": str}");
        return NULL;
    }
    key = find_key(keys, kid->valuestring);
    if (key == NULL) {
        cJSON_Delete(env);
        ldpc_reason_set(why, "kid", "signed by a key this device does not trust");
        return NULL;
    }
    if (EVP_Digest(body->valuestring, strlen(body->valuestring), body_sha256, &mdlen, EVP_sha256(), NULL) != 1
        || mdlen != 32 || strlen(sig->valuestring) != 128 || ldpc_hex_decode(sig->valuestring, raw, 64) != 0
        || !signature_ok(key->pub, body_sha256, raw)) {
        cJSON_Delete(env);
        ldpc_reason_set(why, "sig", "signature does not verify");
        return NULL;
    }
    doc = parse_exact(body->valuestring, strlen(body->valuestring));
    cJSON_Delete(env);
    if (body_digest != NULL)
        ldpc_hex_encode(body_sha256, LDPC_BODY_DIGEST_BYTES, body_digest);
    if (doc == NULL) {
        ldpc_reason_set(why, "body", "not JSON");
        return NULL;
    }
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        ldpc_reason_set(why, "body", "body must be a JSON object");
        return NULL;
    }
    return doc;
}

int ldpc_json_int(const cJSON *v, int64_t *out)
{
    double x;
    if (!cJSON_IsNumber(v) || (v->type & LDPC_JSON_FLOAT))
        return 0;
    x = v->valuedouble;
    if (!(x >= -9007199254740992.0 && x <= 9007199254740992.0) || floor(x) != x)
        return 0;
    *out = (int64_t)x;
    return 1;
}

static const cJSON *need_int(const cJSON *doc, const char *key, const char *field, int64_t *out,
                             struct ldpc_reason *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    if (!ldpc_json_int(v, out)) {
        ldpc_reason_set(why, field, "missing or not int");
        return NULL;
    }
    return v;
}

static int str_equals(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

uint32_t ldpc_string_key(const char *s)
{
    return ldp_murmur3_32((const uint8_t *)s, strlen(s), LDP_KEY_SEED);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int check_domain(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *domain = cJSON_GetObjectItemCaseSensitive(doc, "domain");
    const cJSON *type, *items, *item;
    int64_t size;
    if (!cJSON_IsObject(domain)) {
        ldpc_reason_set(why, "domain", "missing or not dict");
        return -1;
    }
    type = cJSON_GetObjectItemCaseSensitive(domain, "type");
    if (str_equals(type, "int")) {
        if (!need_int(domain, "size", "domain.size", &size, why))
            return -1;
        if (size < 2 || size > 0xffffffffll) {
            ldpc_reason_set(why, "domain.size", "must be in [2, 2^32 - 1] (the reserved item 'other' "
                            "takes index d, spec §1)");
            return -1;
        }
        return 0;
    }
    if (str_equals(type, "str")) {
        uint32_t *keys;
        size_t n = 0, i;
        int dup = 0;
        items = cJSON_GetObjectItemCaseSensitive(domain, "items");
        if (!cJSON_IsArray(items)) {
            ldpc_reason_set(why, "domain.items", "missing or not list");
            return -1;
        }
        cJSON_ArrayForEach(item, items) {
            if (!cJSON_IsString(item) || item->valuestring[0] == '\0') {
                ldpc_reason_set(why, "domain.items", "need >= 2 non-empty strings");
                return -1;
            }
            n++;
        }
        if (n < 2) {
            ldpc_reason_set(why, "domain.items", "need >= 2 non-empty strings");
            return -1;
        }
        keys = malloc((n + 1) * sizeof *keys);
        if (keys == NULL) {
            ldpc_reason_set(why, "domain.items", "too many items for this device");
            return -1;
        }
        n = 0;
        cJSON_ArrayForEach(item, items)
            keys[n++] = ldpc_string_key(item->valuestring);
        keys[n++] = ldpc_string_key(""); /* key(⊥) of a string domain, spec §1 */
        qsort(keys, n, sizeof *keys, cmp_u32);
        for (i = 1; i < n; i++)
            dup |= keys[i] == keys[i - 1];
        free(keys);
        if (dup) {
            ldpc_reason_set(why, "domain.items", "two items share a 32-bit key (or one shares the key of "
                            "the reserved item 'other'); rename one");
            return -1;
        }
        return 0;
    }
    if (str_equals(type, "range") || str_equals(type, "ranges"))
        return ldpc_numeric_check_domain(domain, why) < 0 ? -1 : 0;
    if (str_equals(type, "strings")) /* spec §3.5 */
        return ldpc_pem_check_domain(domain, why) < 0 ? -1 : 0;
    ldpc_reason_set(why, "domain.type", "must be 'int', 'str', 'range', 'ranges' or 'strings'");
    return -1;
}

static int check_phases(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(doc, "phases"), *ph;
    int64_t i = 0, number, eps, ppm, first_ppm = -1;
    int count;
    if (!cJSON_IsArray(phases)) {
        ldpc_reason_set(why, "phases", "missing or not list");
        return -1;
    }
    count = cJSON_GetArraySize(phases);
    if (count < 1 || count > 2) {
        ldpc_reason_set(why, "phases", "one or two phases");
        return -1;
    }
    cJSON_ArrayForEach(ph, phases) {
        const cJSON *mech, *params, *rate;
        i++;
        if (!cJSON_IsObject(ph) || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "phase"), &number)
            || number != i) {
            ldpc_reason_set(why, "phases", "phase entries must be numbered 1, 2 in order");
            return -1;
        }
        mech = cJSON_GetObjectItemCaseSensitive(ph, "mechanism");
        if (!cJSON_IsString(mech) || ldp_mechanism_id(mech->valuestring) == 0) {
            ldpc_reason_set(why, "phases.mechanism", "unknown mechanism %s",
                            cJSON_IsString(mech) ? mech->valuestring : "(not a string)");
            return -1;
        }
        if (ldpc_schedule_phase_kind(mech->valuestring, ldpc_is_recurring(doc), why) != 0) /* spec §3.4 */
            return -1;
        if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "eps_milli"), &eps) || eps <= 0) {
            ldpc_reason_set(why, "phases.eps_milli", "must be a positive integer");
            return -1;
        }
        if (eps > LDPC_MAX_EPS_MILLI) {
            ldpc_reason_set(why, "phases.eps_milli", "must be at most %d", LDPC_MAX_EPS_MILLI);
            return -1;
        }
        params = cJSON_GetObjectItemCaseSensitive(ph, "params");
        if (params != NULL && !cJSON_IsObject(params)) {
            ldpc_reason_set(why, "phases.params", "must be an object");
            return -1;
        }
        rate = cJSON_GetObjectItemCaseSensitive(ph, "sample_rate_ppm");
        if (rate != NULL && (!ldpc_json_int(rate, &ppm) || ppm <= 0 || ppm >= LDPC_PPM)) {
            ldpc_reason_set(why, "phases.sample_rate_ppm", "must be an integer in (0, 10^6)");
            return -1;
        }
        if (rate != NULL && first_ppm >= 0 && ppm != first_ppm) {
            ldpc_reason_set(why, "phases.sample_rate_ppm",
                            "the phases disagree on the sampling rate (one public split, spec §5)");
            return -1;
        }
        if (rate != NULL)
            first_ppm = ppm;
    }
    return 0;
}

/* Spec §2 "every pair of outputs": a GRR phase (n = d + 1) or an OLH/FLH phase (n = g) whose
 * 'other' outputs' bucket counts differ by more than e^eps is refused (ldp_grr_ok). */
static int check_grr_bound(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *ph;
    cJSON_ArrayForEach(ph, cJSON_GetObjectItemCaseSensitive(doc, "phases")) {
        const char *mech = cJSON_GetObjectItemCaseSensitive(ph, "mechanism")->valuestring;
        int64_t eps = 0, g = 0, number = 0;
        uint64_t n = 0;
        const char *field = NULL;
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "eps_milli"), &eps);
        if (strcmp(mech, "grr") == 0) {
            n = ldpc_domain_size(doc) + 1;
            field = "domain.size";
        } else if ((strcmp(mech, "olh") == 0 || strcmp(mech, "flh") == 0 || strcmp(mech, "psolh") == 0)
                   && ldpc_json_int(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ph, "params"), "g"), &g)
                   && g >= 2 && g <= 0xffffffffll) {
            n = (uint64_t)g;
            field = "params.g";
        }
        if (field != NULL && ldp_grr_ok((uint32_t)eps, n) != 1) {
            ldpc_reason_set(why, field, "GRR over %llu outputs is not exactly eps-LDP at eps_milli %lld (spec §2)",
                            (unsigned long long)n, (long long)eps);
            return -1;
        }
        /* the aggregator's check_listless_domain: psgrr/psolh in phase 1 (no candidate list) run
         * over the integer items 0..d-1 */
        if ((strcmp(mech, "psgrr") == 0 || strcmp(mech, "psolh") == 0)
            && ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "phase"), &number) && number == 1
            && !str_equals(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "domain"), "type"),
                           "int")) {
            ldpc_reason_set(why, "domain.type", "%s in phase 1 (no candidate list) needs an integer domain", mech);
            return -1;
        }
    }
    return 0;
}

/* Spec §3.1 (device/ldp/config.py::check_shc): an `shc` campaign is two `shc` phases with the
 * same m and l, whose eps_milli pass shc_ok. */
static int check_shc(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(doc, "phases"), *ph;
    const cJSON *p1 = cJSON_GetArrayItem(phases, 0), *p2 = cJSON_GetArrayItem(phases, 1);
    static const char *const names[] = {"m", "l"};
    int64_t eps1 = 0, eps2 = 0;
    int n_shc = 0, i;
    cJSON_ArrayForEach(ph, phases)
        n_shc += strcmp(cJSON_GetObjectItemCaseSensitive(ph, "mechanism")->valuestring, "shc") == 0;
    if (n_shc == 0)
        return 0;
    if (n_shc != 2) {
        ldpc_reason_set(why, "phases.mechanism", "shc needs two shc phases (spec §3.1)");
        return -1;
    }
    for (i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p1, "params"), names[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p2, "params"), names[i]);
        cJSON *dflt = cJSON_CreateNumber(i ? 1 : 65536); /* the aggregator's sh defaults count as given */
        int same = dflt != NULL && cJSON_Compare(a ? a : dflt, b ? b : dflt, 1);
        cJSON_Delete(dflt);
        if (!same) {
            ldpc_reason_set(why, i ? "params.l" : "params.m", "both shc phases need the same %s (spec §3.1)",
                            names[i]);
            return -1;
        }
    }
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(p1, "eps_milli"), &eps1);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(p2, "eps_milli"), &eps2);
    if (ldp_shc_ok((uint32_t)eps1, (uint32_t)eps2) != 1) {
        ldpc_reason_set(why, "phases.eps_milli", "shc phases eps_milli %lld, %lld fail shc_ok (spec §3.1)",
                        (long long)eps1, (long long)eps2);
        return -1;
    }
    return 0;
}

/* Spec §5.4 `fallback` (device/ldp/config.py::check_fallback): only on a psgrr/psolh phase 2,
 * exactly {"mechanism": psgrr|psolh, "params": {"l"[, "g"]}}, an integer domain of at most 2^24
 * items, grr_ok at phase 2's eps. Every refusal names `phases.fallback`. */
static int check_fallback(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *ph;
    cJSON_ArrayForEach(ph, cJSON_GetObjectItemCaseSensitive(doc, "phases")) {
        const cJSON *fb = cJSON_GetObjectItemCaseSensitive(ph, "fallback"), *mech, *params, *domain;
        const char *own = cJSON_GetObjectItemCaseSensitive(ph, "mechanism")->valuestring;
        int64_t number = 0, eps = 0, l = 0, g = 0, size = 0;
        int psolh;
        uint64_t n;
        if (fb == NULL)
            continue;
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "phase"), &number);
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "eps_milli"), &eps);
        if (number != 2 || (strcmp(own, "psgrr") != 0 && strcmp(own, "psolh") != 0)) {
            ldpc_reason_set(why, "phases.fallback", "only phase 2 of a psgrr/psolh (svim) campaign has a fallback");
            return -1;
        }
        mech = cJSON_GetObjectItemCaseSensitive(fb, "mechanism");
        params = cJSON_GetObjectItemCaseSensitive(fb, "params");
        if (!cJSON_IsObject(fb) || cJSON_GetArraySize(fb) != 2 || mech == NULL || params == NULL) {
            ldpc_reason_set(why, "phases.fallback", "must be {mechanism, params}");
            return -1;
        }
        if (!str_equals(mech, "psgrr") && !str_equals(mech, "psolh")) {
            ldpc_reason_set(why, "phases.fallback", "mechanism must be psgrr or psolh");
            return -1;
        }
        psolh = str_equals(mech, "psolh");
        if (!cJSON_IsObject(params) || cJSON_GetArraySize(params) != (psolh ? 2 : 1)
            || cJSON_GetObjectItemCaseSensitive(params, "l") == NULL
            || (psolh && cJSON_GetObjectItemCaseSensitive(params, "g") == NULL)) {
            ldpc_reason_set(why, "phases.fallback", "%s params must be exactly %s", mech->valuestring,
                            psolh ? "g, l" : "l");
            return -1;
        }
        if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(params, "l"), &l) || l < 1 || l > 65536) {
            ldpc_reason_set(why, "phases.fallback", "params.l must be an integer in [1, 65536]");
            return -1;
        }
        if (psolh && (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(params, "g"), &g) || g < 2 || g > 65536)) {
            ldpc_reason_set(why, "phases.fallback", "params.g must be an integer in [2, 65536]");
            return -1;
        }
        domain = cJSON_GetObjectItemCaseSensitive(doc, "domain");
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(domain, "size"), &size);
        if (!str_equals(cJSON_GetObjectItemCaseSensitive(domain, "type"), "int") || size > 16777216) {
            ldpc_reason_set(why, "phases.fallback", "runs over the integer domain 0..d-1, d <= 2^24");
            return -1;
        }
        n = psolh ? (uint64_t)g : (uint64_t)size + 1;
        if (ldp_grr_ok((uint32_t)eps, n) != 1) {
            ldpc_reason_set(why, "phases.fallback", "GRR over %llu outputs is not exactly eps-LDP at eps_milli %lld "
                            "(spec §2)", (unsigned long long)n, (long long)eps);
            return -1;
        }
    }
    return 0;
}

/* The config's phase-2 fallback object, or NULL. */
const cJSON *ldpc_fallback_of(const cJSON *config)
{
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(config, "phases");
    if (cJSON_GetArraySize(phases) != 2)
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(phases, 1), "fallback");
}

int ldpc_phase2_is_fallback(const cJSON *p2)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p2, "fallback"));
}

/* Spec §5.4 `delivery` (absent: no acknowledgements): {ack, retry_s 1..86400,
 * retry_max_s retry_s..259200[, spread_s 0..86400]}. */
static int check_delivery(const cJSON *d, struct ldpc_reason *why)
{
    int64_t retry, top, spread;
    const cJSON *spread_item;
    if (d == NULL)
        return 0;
    spread_item = cJSON_GetObjectItemCaseSensitive(d, "spread_s");
    if (!cJSON_IsObject(d) || cJSON_GetArraySize(d) != 3 + (spread_item != NULL)
        || cJSON_GetObjectItemCaseSensitive(d, "ack") == NULL
        || cJSON_GetObjectItemCaseSensitive(d, "retry_s") == NULL
        || cJSON_GetObjectItemCaseSensitive(d, "retry_max_s") == NULL) {
        ldpc_reason_set(why, "delivery", "must be {ack, retry_s, retry_max_s[, spread_s]}");
        return -1;
    }
    if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(d, "ack"))) {
        ldpc_reason_set(why, "delivery.ack", "must be true or false");
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(d, "retry_s"), &retry) || retry < 1
        || retry > LDPC_RETRY_S_MAX) {
        ldpc_reason_set(why, "delivery.retry_s", "must be an integer in [1, %d]", LDPC_RETRY_S_MAX);
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(d, "retry_max_s"), &top) || top < retry
        || top > LDPC_RETRY_MAX_S_MAX) {
        ldpc_reason_set(why, "delivery.retry_max_s", "must be an integer in [retry_s, %d]",
                        LDPC_RETRY_MAX_S_MAX);
        return -1;
    }
    if (spread_item != NULL && (!ldpc_json_int(spread_item, &spread) || spread < 0
                                || spread > LDPC_SPREAD_S_MAX)) {
        ldpc_reason_set(why, "delivery.spread_s", "must be an integer in [0, %d]", LDPC_SPREAD_S_MAX);
        return -1;
    }
    return 0;
}

int ldpc_valid_metric(const char *s)
{
    size_t i;
    if (s == NULL || !(s[0] >= 'a' && s[0] <= 'z'))
        return 0;
    for (i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        if (i >= LDPC_METRIC_MAX || !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

/* Spec §5.4 `metric` (optional): a string [a-z][a-z0-9_]{0,31}. */
static int check_metric(const cJSON *m, struct ldpc_reason *why)
{
    if (m == NULL)
        return 0;
    if (!cJSON_IsString(m) || !ldpc_valid_metric(m->valuestring)) {
        ldpc_reason_set(why, "metric", "must match [a-z][a-z0-9_]{0,31}");
        return -1;
    }
    return 0;
}

int ldpc_config_check(const cJSON *doc, int64_t now, struct ldpc_reason *why)
{
    const cJSON *name;
    int64_t protocol, cid, salt, not_before, not_after;
    if (!str_equals(cJSON_GetObjectItemCaseSensitive(doc, "type"), "config")) {
        ldpc_reason_set(why, "type", "not a config");
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "protocol"), &protocol) || protocol != PROTOCOL) {
        ldpc_reason_set(why, "protocol", "unsupported protocol");
        return -1;
    }
    name = cJSON_GetObjectItemCaseSensitive(doc, "campaign");
    if (!cJSON_IsString(name)) {
        ldpc_reason_set(why, "campaign", "missing or not str");
        return -1;
    }
    if (!ldpc_valid_name(name->valuestring)) {
        ldpc_reason_set(why, "campaign", "name must match [A-Za-z0-9_-]{1,64}");
        return -1;
    }
    if (!need_int(doc, "campaign_id", "campaign_id", &cid, why) || !need_int(doc, "salt", "salt", &salt, why)
        || !need_int(doc, "not_before", "not_before", &not_before, why)
        || !need_int(doc, "not_after", "not_after", &not_after, why))
        return -1;
    if (cid < 0 || cid > 0xffffffffll) {
        ldpc_reason_set(why, "campaign_id", "out of u32 range");
        return -1;
    }
    if (!(not_before <= now && now <= not_after)) {
        ldpc_reason_set(why, "validity", "outside validity window [%lld, %lld]", (long long)not_before,
                        (long long)not_after);
        return -1;
    }
    if (check_domain(doc, why) != 0 || check_phases(doc, why) != 0 || ldpc_numeric_check_phases(doc, why) != 0
        || ldpc_pem_check_phases(doc, why) != 0 || check_grr_bound(doc, why) != 0
        || check_shc(doc, why) != 0 || check_fallback(doc, why) != 0
        || check_metric(cJSON_GetObjectItemCaseSensitive(doc, "metric"), why) != 0
        || check_delivery(cJSON_GetObjectItemCaseSensitive(doc, "delivery"), why) != 0)
        return -1;
    return ldpc_is_recurring(doc) ? ldpc_schedule_check(doc, why) : 0;
}

int ldpc_keys_check(const cJSON *doc, struct ldpc_keyset *set, int64_t *serial, struct ldpc_reason *why)
{
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(doc, "keys");
    int64_t protocol;
    int i, j;
    if (!str_equals(cJSON_GetObjectItemCaseSensitive(doc, "type"), "keys")) {
        ldpc_reason_set(why, "type", "not a key-rotation message");
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "protocol"), &protocol) || protocol != PROTOCOL) {
        ldpc_reason_set(why, "protocol", "unsupported protocol");
        return -1;
    }
    if (!need_int(doc, "serial", "serial", serial, why))
        return -1;
    if (*serial < 1 || *serial >= 0x80000000ll) {
        ldpc_reason_set(why, "serial", "must be an integer in [1, 2^31)");
        return -1;
    }
    if (!cJSON_IsArray(keys) || ldpc_keyset_load(set, keys, why) != 0) {
        ldpc_reason_set(why, "keys", "1 to %d {kid, pub} entries, each kid matching its key", LDPC_MAX_TRUSTED);
        return -1;
    }
    for (i = 0; i < set->n; i++)
        for (j = 0; j < i; j++)
            if (strcmp(set->keys[i].kid, set->keys[j].kid) == 0) {
                ldpc_reason_set(why, "keys", "a key is listed twice");
                return -1;
            }
    return 0;
}

int ldpc_close_check(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(doc, "campaign");
    int64_t protocol, cid, not_before;
    if (!str_equals(cJSON_GetObjectItemCaseSensitive(doc, "type"), "close")) {
        ldpc_reason_set(why, "type", "not a close message");
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "protocol"), &protocol) || protocol != PROTOCOL) {
        ldpc_reason_set(why, "protocol", "unsupported protocol");
        return -1;
    }
    if (!cJSON_IsString(name) || !ldpc_valid_name(name->valuestring)) {
        ldpc_reason_set(why, "campaign", "name must match [A-Za-z0-9_-]{1,64}");
        return -1;
    }
    if (!need_int(doc, "campaign_id", "campaign_id", &cid, why))
        return -1;
    if (cid < 0 || cid > 0xffffffffll) {
        ldpc_reason_set(why, "campaign_id", "out of u32 range");
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(doc, "not_before") != NULL
        && !need_int(doc, "not_before", "not_before", &not_before, why))
        return -1;
    return 0;
}

int ldpc_phase2_check(const cJSON *p2, const cJSON *config, struct ldpc_reason *why)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(config, "campaign");
    int64_t cid, want_cid = -1, phase, protocol;
    if (!str_equals(cJSON_GetObjectItemCaseSensitive(p2, "type"), "phase2")) {
        ldpc_reason_set(why, "type", "not a phase-2 message");
        return -1;
    }
    if (!str_equals(cJSON_GetObjectItemCaseSensitive(p2, "campaign"), name->valuestring)) {
        ldpc_reason_set(why, "campaign", "phase 2 of another campaign");
        return -1;
    }
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(config, "campaign_id"), &want_cid);
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(p2, "campaign_id"), &cid) || cid != want_cid) {
        ldpc_reason_set(why, "campaign_id", "phase 2 of another campaign id");
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(p2, "phase"), &phase) || phase != 2) {
        ldpc_reason_set(why, "phase", "phase must be 2");
        return -1;
    }
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(p2, "protocol"), &protocol) || protocol != PROTOCOL) {
        ldpc_reason_set(why, "protocol", "unsupported protocol");
        return -1;
    }
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(config, "phases")) != 2) {
        ldpc_reason_set(why, "phases", "the config has no phase 2");
        return -1;
    }
    /* spec §5.4: exactly one of `candidates` and `"fallback": true` when the config has a fallback */
    if (cJSON_GetObjectItemCaseSensitive(p2, "fallback") != NULL) {
        if (!ldpc_phase2_is_fallback(p2)) {
            ldpc_reason_set(why, "candidates", "fallback must be true");
            return -1;
        }
        if (ldpc_fallback_of(config) == NULL) {
            ldpc_reason_set(why, "candidates", "the config's phase 2 has no fallback");
            return -1;
        }
        if (cJSON_GetObjectItemCaseSensitive(p2, "candidates") != NULL) {
            ldpc_reason_set(why, "candidates", "a phase-2 message carries candidates or fallback, not both");
            return -1;
        }
    } else if (ldpc_fallback_of(config) != NULL && cJSON_GetObjectItemCaseSensitive(p2, "candidates") == NULL) {
        ldpc_reason_set(why, "candidates", "the phase-2 message carries neither candidates nor fallback");
        return -1;
    }
    if (ldpc_is_strings(cJSON_GetObjectItemCaseSensitive(config, "domain")))
        return ldpc_pem_check_phase2(p2, why); /* spec §3.5: 1..1024 distinct keys */
    return 0;
}

uint64_t ldpc_domain_size(const cJSON *config)
{
    const cJSON *domain = cJSON_GetObjectItemCaseSensitive(config, "domain");
    int64_t size = 0;
    if (str_equals(cJSON_GetObjectItemCaseSensitive(domain, "type"), "int")) {
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(domain, "size"), &size);
        return (uint64_t)size;
    }
    if (str_equals(cJSON_GetObjectItemCaseSensitive(domain, "type"), "range")
        || str_equals(cJSON_GetObjectItemCaseSensitive(domain, "type"), "ranges")) {
        struct ldpc_reason ignored;
        size = ldpc_numeric_check_domain(domain, &ignored); /* grid points N (spec §1.1) */
        return size < 0 ? 0 : (uint64_t)size;
    }
    if (ldpc_is_strings(domain)) /* any 32-bit key (spec §3.5): PEM works over candidates */
        return 0xffffffffull;
    return (uint64_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(domain, "items"));
}
