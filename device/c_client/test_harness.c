/* The C client's test harness: see test_harness.h. Built with `make TEST_MODES=1` only.
 * One file over 500 lines: seven thin drivers of the client's own code, which share their JSON
 * helpers and nothing else with the client. */
#ifndef LDPC_TEST_MODES
#error "test_harness.c belongs to test builds only (make TEST_MODES=1)"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "device.h"
#include "envelope.h"
#include "lcm_model.h"
#include "ldp_bignum.h"
#include "ldp_report.h"
#include "ldp_thresholds.h"
#include "mech.h"
#include "schedule.h"
#include "test_harness.h"

static int str_is(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

static int json_u32(const cJSON *obj, const char *key, uint32_t *out)
{
    int64_t v;
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(obj, key), &v) || v < 0 || v > 0xffffffffll)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

/* A value as the device prepares it (value.c), its id set; "value_hex" (optional): the string's
 * UTF-8 bytes where JSON text through cJSON cannot carry them (an embedded NUL). */
static int pem_value(const cJSON *value, struct ldpc_value *v)
{
    const cJSON *device = cJSON_GetObjectItemCaseSensitive(value, "device");
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(value, "value_hex");
    size_t len;
    if (!cJSON_IsString(device))
        return -1;
    memset(v, 0, sizeof *v);
    ldpc_value_set_device(v, device->valuestring);
    ldpc_value_init(v, cJSON_GetObjectItemCaseSensitive(value, "value"));
    if (cJSON_IsString(hex)) {
        len = strlen(hex->valuestring) / 2;
        memset(v->pem_src, 0, sizeof v->pem_src);
        if (ldpc_hex_decode(hex->valuestring, v->pem_src, len < LDPC_PEM_MAX_LEN ? len : LDPC_PEM_MAX_LEN) != 0)
            return -1;
    }
    return 0;
}

static int pem_vector_input(const struct ldpc_mech *mech, const cJSON *value, struct ldpc_input *in)
{
    struct ldpc_value v;
    if (pem_value(value, &v) != 0)
        return -1;
    in->key = ldpc_pem_prefix_key(&mech->pem, mech->salt, v.device, v.pem_src);
    return 0;
}

/* `pem-code --case JSON`: {"device", "value"[, "value_hex"], "max_len", "salt", "groups"} ->
 * "<code hex> <key> <live> <group>" (spec §3.5: strings.json's codes and groups). */
static int pem_code(int argc, char **argv)
{
    static const char *const options[] = {"--case", NULL};
    static const char *const flags[] = {NULL};
    const char *text = ldpc_opt(argc, argv, "--case");
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    struct ldpc_value v;
    uint8_t code[LDPC_PEM_CODE_SLOTS], live;
    uint32_t max_len, salt, groups, key, j;
    if (!ldpc_check_args(argc, argv, options, flags) || c == NULL || pem_value(c, &v) != 0
        || !json_u32(c, "max_len", &max_len) || max_len < 1 || max_len > LDPC_PEM_MAX_LEN
        || !json_u32(c, "salt", &salt) || !json_u32(c, "groups", &groups) || groups < 1) {
        cJSON_Delete(c);
        return ldpc_usage("pem-code needs --case {device, value, max_len, salt, groups}");
    }
    ldpc_pem_code(v.pem_src, max_len, code);
    key = ldpc_pem_code_key(code, max_len, &live);
    for (j = 0; j < max_len; j++)
        printf("%02x", code[j]);
    printf(" %lu %u %lu\n", (unsigned long)key, (unsigned)live, (unsigned long)ldpc_pem_group(v.device, salt, groups));
    cJSON_Delete(c);
    return LDPC_EXIT_DONE;
}

/* The vector input (spec vectors' "value"): index (grr, oue), key, {"key", "high"} (lcm) or a
 * list of keys (sh, srappor, psgrr, psolh): one slot per element, live at its first occurrence
 * (the set's distinct keys in their order, as on the device). */
static int vector_input(const struct ldpc_mech *mech, const cJSON *value, struct ldpc_input *in, uint32_t **keys)
{
    const cJSON *item;
    int64_t v;
    memset(in, 0, sizeof *in);
    *keys = NULL;
    if (ldpc_long_is(mech->id)) /* {"value": v, "state": hex} */
        return ldpc_long_vector_input(mech, value, in);
    if (ldpc_numeric_id(mech->id)) /* a grid point; hm: the list of the metrics' grid points */
        return ldpc_numeric_vector_input(mech, value, in, keys);
    if (mech->id == LDP_MECHANISM_ID_PEM) /* {"device", "value"[, "value_hex"]} (spec §3.5) */
        return pem_vector_input(mech, value, in);
    if (mech->id == LDP_MECHANISM_ID_SHC && mech->phase == 2) { /* {"t", "y1", "x"}, bits 1 = +1 */
        uint32_t y1, x;
        if (!json_u32(value, "t", &in->shc_t) || !json_u32(value, "y1", &y1) || !json_u32(value, "x", &x)
            || y1 > 1 || x > 1)
            return -1;
        in->shc_y1 = (int)y1;
        in->shc_x = (int)x;
        return 0;
    }
    if (ldpc_mech_set_valued(mech)) {
        size_t n = 0, j, size = cJSON_IsArray(value) ? (size_t)cJSON_GetArraySize(value) : 0;
        uint8_t *live;
        if (!cJSON_IsArray(value))
            return -1;
        *keys = malloc((size + 1) * (sizeof **keys + 1));
        if (*keys == NULL)
            return -1;
        live = (uint8_t *)(*keys + size + 1);
        cJSON_ArrayForEach(item, value) {
            if (!ldpc_json_int(item, &v) || v < 0 || v > 0xffffffffll)
                return -1;
            (*keys)[n] = (uint32_t)v;
            live[n] = 1;
            for (j = 0; j < n; j++)
                live[n] &= (uint8_t)((*keys)[j] != (uint32_t)v);
            n++;
        }
        in->keys = *keys;
        in->live = live;
        in->nslots = n;
        return 0;
    }
    if (cJSON_IsObject(value)) {
        const cJSON *high = cJSON_GetObjectItemCaseSensitive(value, "high");
        if (!json_u32(value, "key", &in->key) || !cJSON_IsBool(high))
            return -1;
        in->high = cJSON_IsTrue(high);
        return 0;
    }
    if (!ldpc_json_int(value, &v) || v < 0 || v > 0xffffffffll)
        return -1;
    in->key = in->index = (uint32_t)v;
    return 0;
}

/* Sampling RAPPOR without a candidate list: the Python API's default, the integer domain
 * 0..d-1 (d <= 65536), added to the case so the vector is reproduced (a device always gets the
 * list in the signed phase-2 message). */
static const cJSON *default_candidates(cJSON *c, int64_t d)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
    cJSON *list;
    int64_t i;
    if (cJSON_GetObjectItemCaseSensitive(c, "candidates") != NULL)
        return cJSON_GetObjectItemCaseSensitive(c, "candidates");
    if (!str_is(cJSON_GetObjectItemCaseSensitive(c, "mechanism"), "srappor")
        || cJSON_GetObjectItemCaseSensitive(params, "candidates") != NULL || d < 1 || d > 65536)
        return NULL;
    list = cJSON_AddArrayToObject(c, "candidates");
    for (i = 0; list != NULL && i < d; i++)
        cJSON_AddItemToArray(list, cJSON_CreateNumber((double)i));
    return list;
}

/* Report hex of `mech` on `in` from exactly mech->words words given as hex; exit code. With
 * `print_x`, an shc phase-1 report is followed by a line "x=<bit>": what the device ledgers. */
static int print_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const char *hex, uint32_t nonce,
                        int print_x, uint32_t round)
{
    uint32_t *words = malloc(mech->words * sizeof *words);
    size_t size = ldpc_mech_report_size(mech) + (round ? 4 : 0);
    uint8_t *report = malloc(size), *one = malloc(size);
    char *out = malloc(2 * size + 1);
    int code = LDPC_EXIT_USAGE;
    if (words == NULL || report == NULL || one == NULL || out == NULL)
        fprintf(stderr, "ldp_client: out of memory\n");
    else if (ldpc_words_from_hex(hex, words, mech->words) != 0)
        fprintf(stderr, "ldp_client: --words-hex must hold exactly %lu little-endian u32 words\n",
                (unsigned long)mech->words);
    else if (ldpc_mech_report(mech, in, words, nonce, round ? one : report) != 0)
        fprintf(stderr, "ldp_client: value does not fit %s\n", mech->name);
    else {
        if (round) /* a recurring campaign's report of that round (spec §3.4): the device's own step */
            ldpc_with_round(one, ldpc_mech_report_size(mech), round, report);
        ldpc_hex_encode(report, size, out);
        puts(out);
        if (print_x)
            printf("x=%d\n", ldpc_mech_shc_x(mech, words, report));
        code = LDPC_EXIT_DONE;
    }
    free(words);
    free(report);
    free(one);
    free(out);
    return code;
}

/* `key` of `obj` as an integer, or `fallback` when absent or not one. */
static int64_t int_or(const cJSON *obj, const char *key, int64_t fallback)
{
    int64_t v;
    return ldpc_json_int(cJSON_GetObjectItemCaseSensitive(obj, key), &v) ? v : fallback;
}

/* shc phase 2 through the live device's own code (ldpc_shc_phase2_input): the case's
 * "memo_hex" (the phase-1 report, may be absent) and "x" (the ledger's bit, -1 or absent: none)
 * stand for the ledger. No memo or bit prints "skip phase 2" and exits 0. */
static int shc_device_vector(const cJSON *c, const cJSON *config, const cJSON *p2, const char *hex, uint32_t nonce)
{
    const cJSON *memo_hex = cJSON_GetObjectItemCaseSensitive(c, "memo_hex");
    struct ldpc_shc_memo m1;
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    uint8_t memo[64];
    size_t len = 0;
    int64_t x = -1;
    int rc, code;
    if (cJSON_IsString(memo_hex)) {
        len = strlen(memo_hex->valuestring) / 2;
        if (len > sizeof memo || ldpc_hex_decode(memo_hex->valuestring, memo, len) != 0)
            return ldpc_usage("memo_hex must be at most 64 bytes of hex");
    }
    if (cJSON_GetObjectItemCaseSensitive(c, "x") != NULL && !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(c, "x"), &x))
        return ldpc_usage("x must be an integer");
    m1.report = len ? memo : NULL;
    m1.len = len;
    m1.x = (int)x;
    m1.eps1_milli = int_or(c, "memo_eps_milli",
                           (int64_t)cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(config, "phases"), 0),
                               "eps_milli")->valuedouble);
    rc = ldpc_shc_phase2_input(config, p2, &m1, &mech, &in, &why);
    if (rc == 1) {
        puts("skip phase 2");
        return LDPC_EXIT_DONE;
    }
    if (rc != 0) {
        printf("refused %s: %s\n", why.field, why.message);
        return LDPC_EXIT_REFUSED;
    }
    code = print_report(&mech, &in, hex, nonce, 0, 0);
    ldpc_mech_free(&mech);
    return code;
}

/* A phase-2 vector through the live device's own code: {"config": body, "phase2": body,
 * "value": the device's value (as --value), "high": caller's flag (optional), "nonce": N}. The
 * bodies pass the device's checks (config rules at the current time, phase-2 rules), then
 * ldpc_phase2_input builds the mechanism and input (LDPMiner trimming, LDPLCM model); shc's
 * phase 2 takes the ledger's part from the case (shc_device_vector). A refusal prints
 * "refused field: why" and exits 2, as verify-config. */
static int device_vector(const cJSON *c, const char *hex)
{
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(c, "config");
    const cJSON *p2 = cJSON_GetObjectItemCaseSensitive(c, "phase2");
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    struct ldpc_value value;
    uint32_t nonce, *keys = NULL;
    int64_t now = ldpc_unix_now();
    int code;
    if (!cJSON_IsObject(config) || !cJSON_IsObject(p2) || !json_u32(c, "nonce", &nonce))
        return ldpc_usage("a phase-2 vector case needs config, phase2, value and nonce");
    if (cJSON_GetObjectItemCaseSensitive(c, "now") != NULL /* optional: the case's clock */
        && !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(c, "now"), &now))
        return ldpc_usage("now must be an integer");
    if (ldpc_config_check(config, now, &why) == 0 && ldpc_phase2_check(p2, config, &why) == 0
        && ldpc_phase2_is_shc(config))
        return shc_device_vector(c, config, p2, hex, nonce);
    if (cJSON_GetObjectItemCaseSensitive(c, "value") == NULL)
        return ldpc_usage("a phase-2 vector case needs config, phase2, value and nonce");
    memset(&value, 0, sizeof value);
    ldpc_value_init(&value, cJSON_GetObjectItemCaseSensitive(c, "value")); /* as the device at start */
    if (ldpc_config_check(config, now, &why) != 0 || ldpc_phase2_check(p2, config, &why) != 0
        || ldpc_phase2_input(config, p2, &value,
                             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "high")), &mech, &in, &keys,
                             &why) != 0) {
        printf("refused %s: %s\n", why.field, why.message);
        return LDPC_EXIT_REFUSED;
    }
    code = print_report(&mech, &in, hex, nonce, 0, 0);
    ldpc_mech_free(&mech);
    free(keys);
    return code;
}

static int vector(int argc, char **argv)
{
    static const char *const options[] = {"--case", "--words-hex", NULL};
    static const char *const flags[] = {"--print-x", NULL};
    const char *case_text = ldpc_opt(argc, argv, "--case"), *hex = ldpc_opt(argc, argv, "--words-hex");
    const cJSON *mname;
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    uint32_t salt, cid, phase, nonce, round = 0, *keys = NULL;
    int64_t eps, d;
    cJSON *c;
    int code = LDPC_EXIT_USAGE;
    if (!ldpc_check_args(argc, argv, options, flags) || case_text == NULL || hex == NULL)
        return ldpc_usage("vector needs --case JSON --words-hex HEX");
    c = cJSON_Parse(case_text);
    if (cJSON_GetObjectItemCaseSensitive(c, "config") != NULL) {
        code = device_vector(c, hex);
        cJSON_Delete(c);
        return code;
    }
    mname = cJSON_GetObjectItemCaseSensitive(c, "mechanism");
    if (!cJSON_IsString(mname) || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(c, "eps_milli"), &eps)
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(c, "domain_size"), &d) || d < 0
        || !json_u32(c, "salt", &salt) || !json_u32(c, "campaign_id", &cid) || !json_u32(c, "phase", &phase)
        || !json_u32(c, "nonce", &nonce)) {
        cJSON_Delete(c);
        return ldpc_usage("--case must be a vector case (mechanism, eps_milli, domain_size, salt, campaign_id, "
                     "phase, params, value, nonce)");
    }
    if (ldpc_mech_init(&mech, mname->valuestring, eps, (uint64_t)d, salt, cid, (int)phase,
                       cJSON_GetObjectItemCaseSensitive(c, "params"), default_candidates(c, d), &why) != 0) {
        fprintf(stderr, "ldp_client: %s: %s\n", why.field, why.message);
        cJSON_Delete(c);
        return LDPC_EXIT_REFUSED;
    }
    if (ldpc_long_is(mech.id) && (cJSON_GetObjectItemCaseSensitive(c, "enrol") != NULL
                                  || cJSON_GetObjectItemCaseSensitive(c, "sequence") != NULL))
        code = ldpc_long_vector(&mech, c, hex); /* enrolment vector or a value sequence */
    else if (vector_input(&mech, cJSON_GetObjectItemCaseSensitive(c, "value"), &in, &keys) != 0)
        fprintf(stderr, "ldp_client: value does not fit %s\n", mech.name);
    else if (cJSON_GetObjectItemCaseSensitive(c, "round") != NULL
             && (!json_u32(c, "round", &round) || round == 0 || !ldpc_long_is(mech.id)))
        fprintf(stderr, "ldp_client: round must be in [1, 2^32 - 1], on a memoised mechanism\n");
    else
        code = print_report(&mech, &in, hex, nonce, ldpc_flag(argc, argv, "--print-x") && mech.id == LDP_MECHANISM_ID_SHC
                                                        && mech.phase == 1, round);
    free(keys);
    ldpc_mech_free(&mech);
    cJSON_Delete(c);
    return code;
}

/* Operator tool (and the model parity test): check an LDPLCM model document as a device does
 * (ldplcm-model.md) and print g(x) and the high/low decision of every index x < d as JSON
 * {"values": [...], "high": [0|1, ...]}, or "refused model: why" (exit 2). */
static int check_model(int argc, char **argv)
{
    static const char *const options[] = {"--model-file", "--d", NULL};
    static const char *const flags[] = {NULL};
    const char *file = ldpc_opt(argc, argv, "--model-file");
    struct ldpc_lcm_model model;
    struct ldpc_reason why;
    double d = 0;
    size_t len;
    uint32_t x;
    char *text;
    cJSON *doc;
    int rc;
    if (!ldpc_check_args(argc, argv, options, flags)
        || (ldpc_opt(argc, argv, "--d") && !ldpc_parse_number(ldpc_opt(argc, argv, "--d"), 0, 16777216.0, &d))
        || d != (double)(uint64_t)d)
        return ldpc_usage("check-model needs [--model-file F] [--d D], D an integer in [0, 2^24]");
    text = ldpc_read_file(file ? file : "/dev/stdin", &len);
    if (text == NULL)
        return ldpc_usage("cannot read the model");
    doc = cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    free(text);
    rc = ldpc_lcm_model_parse(&model, doc, &why);
    cJSON_Delete(doc);
    if (rc != 0) {
        printf("refused %s: %s\n", why.field, why.message);
        return LDPC_EXIT_REFUSED;
    }
    fputs("{\"values\": [", stdout);
    for (x = 0; x < (uint64_t)d; x++)
        printf("%s%lld", x ? ", " : "", (long long)ldpc_lcm_model_evaluate(&model, x));
    fputs("], \"high\": [", stdout);
    for (x = 0; x < (uint64_t)d; x++)
        printf("%s%d", x ? ", " : "", ldpc_lcm_model_is_high(&model, x));
    puts("]}");
    ldpc_lcm_model_free(&model);
    return LDPC_EXIT_DONE;
}

/* Operator tool (and the config-rules parity test): verify one envelope and check its body as
 * a device would before the device-specific checks; prints "accepted" or "refused field: msg". */
static int verify_config(int argc, char **argv)
{
    static const char *const options[] = {"--trusted-keys", "--now", "--payload-file", NULL};
    static const char *const flags[] = {"--envelope-only", "--print-digest", NULL};
    const char *keys_file = ldpc_opt(argc, argv, "--trusted-keys"), *file = ldpc_opt(argc, argv, "--payload-file");
    char digest[LDPC_BODY_DIGEST_HEX] = "";
    struct ldpc_keyset keys;
    struct ldpc_reason why;
    double now = (double)ldpc_unix_now();
    size_t len;
    char *payload, *keys_text;
    cJSON *doc, *keys_doc;
    int rc;
    if (!ldpc_check_args(argc, argv, options, flags) || keys_file == NULL
        || (ldpc_opt(argc, argv, "--now") && !ldpc_parse_number(ldpc_opt(argc, argv, "--now"), -9e15, 9e15, &now)))
        return ldpc_usage("verify-config needs --trusted-keys FILE [--now T] [--payload-file F]");
    keys_text = ldpc_read_file(keys_file, &len);
    keys_doc = keys_text ? cJSON_ParseWithLength(keys_text, len) : NULL;
    free(keys_text);
    rc = ldpc_keyset_load(&keys, keys_doc, &why);
    cJSON_Delete(keys_doc);
    if (rc != 0)
        return ldpc_usage("--trusted-keys FILE must hold {kid, pub} or a list of them (PATH.pub of "
                     "`ldpfleet campaign keygen PATH`)");
    payload = ldpc_read_file(file ? file : "/dev/stdin", &len);
    if (payload == NULL)
        return ldpc_usage("cannot read the payload");
    doc = ldpc_envelope_open((const uint8_t *)payload, len, &keys, digest, &why);
    free(payload);
    rc = doc == NULL ? -1 : ldpc_flag(argc, argv, "--envelope-only") ? 0
                                          : ldpc_config_check(doc, (int64_t)now, &why);
    cJSON_Delete(doc);
    if (rc != 0) {
        printf("refused %s: %s\n", why.field, why.message);
        return LDPC_EXIT_REFUSED;
    }
    if (ldpc_flag(argc, argv, "--print-digest"))
        printf("accepted %s\n", digest); /* the binding digest of the body (spec §7.2) */
    else
        puts("accepted");
    return LDPC_EXIT_DONE;
}

/* Decimal digits of a big integer (at most 155 digits: 512 bits). */
static void big_decimal(const ldp_big *value, char *out)
{
    ldp_big x = *value;
    char rev[160];
    int n = 0, i;
    do {
        rev[n++] = (char)('0' + ldp_big_div_u32(&x, &x, 10));
    } while (!ldp_big_is_zero(&x));
    for (i = 0; i < n; i++)
        out[i] = rev[n - 1 - i];
    out[n] = '\0';
}

/* `thresholds --eps-milli E [--n N]...`: spec §2's E_full, E_half and thresholds as JSON, for
 * every eps_milli the spec allows (1..64000: E_full reaches 2^157, so E is printed from the
 * big-integer E of ldp_bignum.h; the thresholds saturate where E outgrows 128 bits). An
 * eps_milli outside [1, 64000] is refused with the config field, as a device refuses it. */
static int thresholds(int argc, char **argv)
{
    static const char *const options[] = {"--eps-milli", "--n", NULL};
    static const char *const flags[] = {NULL};
    double eps_d, n_d;
    uint32_t eps, t_rr, t_q, t_flip, t;
    ldp_big e_full, e_half;
    char full[160], half[160];
    int i, first = 1;
    if (!ldpc_check_args(argc, argv, options, flags) || !ldpc_parse_number(ldpc_opt(argc, argv, "--eps-milli"), -9e15, 9e15, &eps_d)
        || eps_d != (double)(int64_t)eps_d)
        return ldpc_usage("thresholds needs --eps-milli E (an integer)");
    if (eps_d < 1 || eps_d > LDPC_MAX_EPS_MILLI) {
        printf("refused phases.eps_milli: must be an integer in [1, %d] (spec §2)\n", LDPC_MAX_EPS_MILLI);
        return LDPC_EXIT_REFUSED;
    }
    eps = (uint32_t)eps_d;
    if (!ldp_big_exp_lower(eps, 1000, &e_full) || !ldp_big_exp_lower(eps, 2000, &e_half))
        return ldpc_usage("eps_milli out of range");
    big_decimal(&e_full, full);
    big_decimal(&e_half, half);
    if (ldp_t_rr(eps, &t_rr) != 0 || ldp_t_oue_q(eps, &t_q) != 0 || ldp_t_flip(eps, &t_flip) != 0)
        return ldpc_usage("eps_milli out of range");
    for (i = 0; i < argc - 1; i++)
        if (strcmp(argv[i], "--n") == 0
            && (!ldpc_parse_number(argv[i + 1], 2, 4294967296.0, &n_d) || n_d != (double)(uint64_t)n_d
                || ldp_t_grr(eps, (uint64_t)n_d, &t) != 0))
            return ldpc_usage("bad --n (an integer in [2, 2^32])");
    printf("{\"eps_milli\": %lu, \"E_full\": %s, \"E_half\": %s, \"T_rr\": %lu, \"T_oue_q\": %lu, "
           "\"T_flip\": %lu, \"T_oue_p\": %lu, \"T_half\": %lu, \"T_grr\": {",
           (unsigned long)eps, full, half, (unsigned long)t_rr, (unsigned long)t_q, (unsigned long)t_flip,
           (unsigned long)ldp_t_oue_p(), (unsigned long)ldp_t_half());
    for (i = 0; i < argc - 1; i++) {
        if (strcmp(argv[i], "--n") != 0)
            continue;
        ldpc_parse_number(argv[i + 1], 2, 4294967296.0, &n_d);
        ldp_t_grr(eps, (uint64_t)n_d, &t);
        printf("%s\"%llu\": %lu", first ? "" : ", ", (unsigned long long)n_d, (unsigned long)t);
        first = 0;
    }
    printf("}}\n");
    return LDPC_EXIT_DONE;
}

/* `shc-thresholds --eps1 E1 --eps2 E2`: spec §3.1's shc_ok and, when the kernel has them, T1,
 * T_shc_a and T_shc_b, as JSON (what the C client's config check and phase 2 use). */
static int shc_thresholds(int argc, char **argv)
{
    static const char *const options[] = {"--eps1", "--eps2", NULL};
    static const char *const flags[] = {NULL};
    double e1, e2;
    uint32_t t1, a, b;
    int ok;
    if (!ldpc_check_args(argc, argv, options, flags) || !ldpc_parse_number(ldpc_opt(argc, argv, "--eps1"), 0, 4294967295.0, &e1)
        || !ldpc_parse_number(ldpc_opt(argc, argv, "--eps2"), 0, 4294967295.0, &e2) || e1 != (double)(uint32_t)e1
        || e2 != (double)(uint32_t)e2)
        return ldpc_usage("shc-thresholds needs --eps1 E1 --eps2 E2 (integers)");
    ok = ldp_shc_ok((uint32_t)e1, (uint32_t)e2) == 1;
    printf("{\"eps1_milli\": %lu, \"eps2_milli\": %lu, \"shc_ok\": %s", (unsigned long)e1, (unsigned long)e2,
           ok ? "true" : "false");
    if (ldp_t_shc((uint32_t)e1, (uint32_t)e2, &t1, &a, &b) == LDP_THRESH_OK)
        printf(", \"T1\": %lu, \"T_shc_a\": %lu, \"T_shc_b\": %lu", (unsigned long)t1, (unsigned long)a,
               (unsigned long)b);
    puts("}");
    return LDPC_EXIT_DONE;
}

/* `replay --state-dir DIR --campaign C --value V --messages FILE`: the device's own logic
 * (device.c, the ledger in DIR) fed a sequence of MQTT messages without a broker: FILE is a JSON
 * list of [topic, payload text] delivered one at a time, each followed by processing the inbox
 * and publishing the outbox (each report printed as "report <phase> <hex>", then handed back as
 * delivered, as the session does after its PUBACK). Randomness as in `run` (the test seam
 * LDPC_TEST_RANDOM_SEED makes it a known stream). Tests drive both clients through the same
 * sequences of signed messages (tests/integration/test_privacy_resigning.py). */
static int replay(int argc, char **argv)
{
    static const char *const options[] = {"--state-dir", "--campaign", "--value", "--messages", "--identity", NULL};
    static const char *const flags[] = {NULL};
    const char *state_dir = ldpc_opt(argc, argv, "--state-dir"), *file = ldpc_opt(argc, argv, "--messages");
    const char *identity_path = ldpc_opt(argc, argv, "--identity");
    struct ldpc_identity id;
    struct ldpc_device dev;
    struct ldpc_reason why;
    char path[4096];
    const cJSON *msg;
    cJSON *messages;
    size_t len;
    char *text;
    if (!ldpc_check_args(argc, argv, options, flags) || state_dir == NULL || file == NULL
        || ldpc_opt(argc, argv, "--campaign") == NULL || ldpc_opt(argc, argv, "--value") == NULL)
        return ldpc_usage("replay needs --state-dir DIR --campaign C --value V --messages FILE");
    if (identity_path == NULL) {
        snprintf(path, sizeof path, "%s/identity.json", state_dir);
        identity_path = path;
    }
    if (ldpc_identity_load(&id, identity_path, &why) != 0
        || ldpc_device_init(&dev, &id, state_dir, ldpc_opt(argc, argv, "--campaign"), ldpc_opt(argc, argv, "--value"), 0, 0,
                            &why) != 0) {
        fprintf(stderr, "ldp_client: %s: %s\n", why.field, why.message);
        return LDPC_EXIT_USAGE;
    }
    text = ldpc_read_file(file, &len);
    messages = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!cJSON_IsArray(messages)) {
        cJSON_Delete(messages);
        ldpc_device_free(&dev);
        return ldpc_usage("--messages FILE must hold a JSON list of [topic, payload]");
    }
    cJSON_ArrayForEach(msg, messages) {
        const cJSON *topic = cJSON_GetArrayItem(msg, 0), *payload = cJSON_GetArrayItem(msg, 1);
        const struct ldpc_report *r;
        if (!cJSON_IsString(topic) || !cJSON_IsString(payload))
            continue;
        ldpc_device_on_message(&dev, topic->valuestring, payload->valuestring, strlen(payload->valuestring));
        ldpc_device_process_inbox(&dev);
        while ((r = ldpc_device_peek(&dev)) != NULL) {
            int phase = r->phase;
            size_t n = r->len;
            char *hex = malloc(2 * n + 1);
            uint8_t *data;
            if (hex != NULL) {
                ldpc_hex_encode(r->data, n, hex);
                printf("report %d %s\n", phase, hex);
                free(hex);
            }
            data = ldpc_device_pop(&dev);
            ldpc_device_delivered(&dev, phase, data, n);
        }
    }
    cJSON_Delete(messages);
    ldpc_device_free(&dev);
    return LDPC_EXIT_DONE;
}

/* `ack-check --report-hex H --ack-hex H [--ack-key HEX]`: the device's own decision on one ack
 * (ldpc_ack_accepts, spec §6): prints "accepted" or "ignored" (the ack vectors). */
static int ack_check(int argc, char **argv)
{
    static const char *const options[] = {"--report-hex", "--ack-hex", "--ack-key", NULL};
    static const char *const flags[] = {NULL};
    const char *report_hex = ldpc_opt(argc, argv, "--report-hex"), *ack_hex = ldpc_opt(argc, argv, "--ack-hex");
    const char *key_hex = ldpc_opt(argc, argv, "--ack-key");
    struct ldpc_identity id;
    uint8_t report[256], ack[256];
    size_t report_len, ack_len;
    memset(&id, 0, sizeof id);
    if (!ldpc_check_args(argc, argv, options, flags) || report_hex == NULL || ack_hex == NULL
        || strlen(report_hex) % 2 || strlen(ack_hex) % 2 || strlen(report_hex) > 512 || strlen(ack_hex) > 512)
        return ldpc_usage("ack-check needs --report-hex H --ack-hex H [--ack-key HEX] (at most 256 bytes each)");
    report_len = strlen(report_hex) / 2;
    ack_len = strlen(ack_hex) / 2;
    if (ldpc_hex_decode(report_hex, report, report_len) != 0 || ldpc_hex_decode(ack_hex, ack, ack_len) != 0)
        return ldpc_usage("ack-check: bad hex");
    if (key_hex != NULL) {
        if (strlen(key_hex) != 64 || ldpc_hex_decode(key_hex, id.ack_key, sizeof id.ack_key) != 0)
            return ldpc_usage("--ack-key must be 64 hex digits");
        id.has_ack_key = 1;
    }
    puts(ldpc_ack_accepts(&id, report, report_len, ack, ack_len) ? "accepted" : "ignored");
    return LDPC_EXIT_DONE;
}

int ldpc_test_command(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {{"vector", vector},           {"verify-config", verify_config}, {"check-model", check_model},
                    {"thresholds", thresholds},   {"shc-thresholds", shc_thresholds}, {"ack-check", ack_check},
                    {"replay", replay},           {"rounds", ldpc_schedule_vector},
                    {"pem-code", pem_code},       {NULL, NULL}};
    int i;
    for (i = 0; argc >= 2 && commands[i].name != NULL; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 2, argv + 2);
    return LDPC_NOT_A_TEST_COMMAND;
}
