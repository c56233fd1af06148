/* Numeric mechanisms of the C client: see mech_numeric.h. */
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "ldp_report.h"
#include "ldp_thresholds.h"
#include "mech.h"
#include "mech_numeric.h"

#define VALUE_MAX 1000000000000000ll /* |lo|, |hi| <= 10^15 (spec §1.1) */
#define BINS_MAX 1024u

int ldpc_numeric_id(int id)
{
    return LDP_MECHANISM_NUMERIC(id);
}

static int int_param(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *field, int64_t *out,
                     struct ldpc_reason *why)
{
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(obj, key), out) || *out < lo || *out > hi) {
        ldpc_reason_set(why, field, "%s must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

/* An optional params integer with a default (params may be NULL). */
static int opt_param(const cJSON *params, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out,
                     struct ldpc_reason *why)
{
    if (cJSON_GetObjectItemCaseSensitive(params, key) == NULL) {
        *out = dflt;
        return 0;
    }
    return int_param(params, key, lo, hi, "phases.params", out, why);
}

static int eps_refused(const char *what, uint32_t eps, struct ldpc_reason *why)
{
    ldpc_reason_set(why, "phases.eps_milli", "%s is not exactly eps-LDP with integer thresholds at eps_milli %lu "
                    "(spec §3.3)", what, (unsigned long)eps);
    return -1;
}

static int duchi_setup(ldp_duchi_params *p, uint32_t eps, uint32_t n, struct ldpc_reason *why)
{
    if (ldp_duchi_ok(eps, n) != 1 || ldp_duchi_slope(eps, n, &p->slope, &p->base) != LDP_THRESH_OK)
        return eps_refused("Duchi's bit", eps, why);
    p->grid = n;
    return 0;
}

/* The window channel with position x * mul / div, D = span, L = width. */
static int window_setup(ldp_window_params *p, uint32_t eps, uint32_t n, uint32_t mul, uint32_t div, uint32_t span,
                        uint32_t width, uint32_t out_bytes, const char *field, struct ldpc_reason *why)
{
    p->grid = n;
    p->mul = mul;
    p->div = div;
    p->span = span;
    p->width = width;
    p->out_bytes = out_bytes;
    if (ldp_window_threshold(eps, width, span, &p->t_in) != LDP_THRESH_OK
        || ldp_window_ok(eps, width, span, p->t_in) != 1) {
        ldpc_reason_set(why, field, "the window (L %lu, D %lu) is not exactly eps-LDP at eps_milli %lu (spec §3.3)",
                        (unsigned long)width, (unsigned long)span, (unsigned long)eps);
        return -1;
    }
    return 0;
}

static int pm_setup(ldp_window_params *p, uint32_t eps, uint32_t n, struct ldpc_reason *why)
{
    uint32_t u, span, width;
    if (ldp_pm_shape(eps, n, &u, &span, &width) != LDP_THRESH_OK)
        return eps_refused("the PM window", eps, why);
    return window_setup(p, eps, n, u, 1, span, width, 4, "phases.eps_milli", why);
}

int ldpc_numeric_init(struct ldpc_mech *mech, const cJSON *params, struct ldpc_reason *why)
{
    uint32_t n, eps = mech->eps_milli;
    int64_t bins, window, d;
    if (mech->domain_size < 2 || mech->domain_size > LDP_GRID_MAX) {
        ldpc_reason_set(why, "domain.points", "a numeric domain has 2..%u grid points", LDP_GRID_MAX);
        return -1;
    }
    n = (uint32_t)mech->domain_size;
    switch (mech->id) {
    case LDP_MECHANISM_ID_DUCHI:
        mech->body_size = 1;
        mech->words = 1;
        return duchi_setup(&mech->num.duchi, eps, n, why);
    case LDP_MECHANISM_ID_PM:
        mech->body_size = 4;
        mech->words = 2;
        return pm_setup(&mech->num.window, eps, n, why);
    case LDP_MECHANISM_ID_SW:
        if (int_param(params, "bins", 2, BINS_MAX, "phases.params", &bins, why) != 0
            || int_param(params, "window", 1, 2 * bins, "phases.params", &window, why) != 0)
            return -1;
        if (bins > (int64_t)n) {
            ldpc_reason_set(why, "params.bins", "at most the domain's %lu grid points", (unsigned long)n);
            return -1;
        }
        mech->body_size = 2;
        mech->words = 2;
        return window_setup(&mech->num.window, eps, n, (uint32_t)bins, n, (uint32_t)bins - 1u, (uint32_t)window, 2,
                            "params.window", why);
    case LDP_MECHANISM_ID_HM: {
        ldp_hm_params *h = &mech->num.hm;
        uint32_t k, e;
        if (opt_param(params, "metrics", 1, 1, LDP_METRICS_MAX, &d, why) != 0)
            return -1;
        k = eps / LDP_HM_SAMPLE;
        k = k < 1 ? 1 : k > (uint32_t)d ? (uint32_t)d : k;
        e = eps / k;
        h->metrics = (uint32_t)d;
        h->sampled = k;
        mech->body_size = 6u * k;
        mech->words = 4u * k;
        if (ldp_hm_choice_threshold(e, &h->t_choice) != LDP_THRESH_OK)
            return eps_refused("hm's choice", e, why);
        if (duchi_setup(&h->duchi, e, n, why) != 0)
            return -1;
        return pm_setup(&h->pm, e, n, why);
    }
    default:
        ldpc_reason_set(why, "phases.mechanism", "not a numeric mechanism");
        return -1;
    }
}

int ldpc_numeric_report(const struct ldpc_mech *mech, const struct ldpc_input *in, const uint32_t *words,
                        uint8_t *body)
{
    switch (mech->id) {
    case LDP_MECHANISM_ID_DUCHI:
        return ldp_duchi_perturb(&mech->num.duchi, &in->index, 1, words, body, 0);
    case LDP_MECHANISM_ID_PM:
    case LDP_MECHANISM_ID_SW:
        return ldp_window_perturb(&mech->num.window, &in->index, 1, words, body, 0);
    case LDP_MECHANISM_ID_HM:
        if (in->keys == NULL || in->nslots != mech->num.hm.metrics)
            return -1;
        return ldp_hm_perturb(&mech->num.hm, in->keys, 1, words, body, 0);
    default:
        return -1;
    }
}

static int grid_value(const cJSON *v, uint32_t *out)
{
    int64_t x;
    if (!ldpc_json_int(v, &x) || x < 0 || x > 0xffffffffll)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

int ldpc_numeric_vector_input(const struct ldpc_mech *mech, const cJSON *value, struct ldpc_input *in,
                              uint32_t **points)
{
    const cJSON *item;
    size_t n = 0;
    memset(in, 0, sizeof *in);
    *points = NULL;
    if (mech->id != LDP_MECHANISM_ID_HM)
        return grid_value(value, &in->index);
    *points = malloc(((size_t)(cJSON_IsArray(value) ? cJSON_GetArraySize(value) : 1) + 1) * sizeof **points);
    if (*points == NULL)
        return -1;
    if (!cJSON_IsArray(value)) {
        if (grid_value(value, *points) != 0)
            return -1;
        n = 1;
    } else {
        cJSON_ArrayForEach(item, value) {
            if (grid_value(item, *points + n) != 0)
                return -1;
            n++;
        }
    }
    in->keys = *points;
    in->nslots = n;
    return 0;
}

/* ---- spec §1.1: the domain ----------------------------------------------------------------- */

static size_t utf8_length(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0u) != 0x80u;
    return n;
}

/* lo < hi within +-10^15, decimals 0..9, optional name/unit strings of 1..64 characters. */
static int check_metric(const cJSON *m, const char *field, int64_t *lo, int64_t *hi, struct ldpc_reason *why)
{
    static const char *const texts[] = {"name", "unit"};
    int64_t dec;
    int i;
    if (!cJSON_IsObject(m)) {
        ldpc_reason_set(why, field, "a metric must be an object");
        return -1;
    }
    if (int_param(m, "lo", -VALUE_MAX, VALUE_MAX, field, lo, why) != 0
        || int_param(m, "hi", -VALUE_MAX, VALUE_MAX, field, hi, why) != 0)
        return -1;
    if (*lo >= *hi) {
        ldpc_reason_set(why, field, "lo must be below hi, got %lld >= %lld", (long long)*lo, (long long)*hi);
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(m, "decimals") != NULL && int_param(m, "decimals", 0, 9, field, &dec, why) != 0)
        return -1;
    for (i = 0; i < 2; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, texts[i]);
        if (t != NULL && (!cJSON_IsString(t) || utf8_length(t->valuestring) < 1 || utf8_length(t->valuestring) > 64)) {
            ldpc_reason_set(why, field, "%s must be a string of 1..64 characters", texts[i]);
            return -1;
        }
    }
    return 0;
}

static int type_is(const cJSON *domain, const char *s)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(domain, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, s) == 0;
}

int64_t ldpc_numeric_check_domain(const cJSON *domain, struct ldpc_reason *why)
{
    const cJSON *metrics, *m;
    int64_t lo, hi, res, points;
    int count;
    if (type_is(domain, "range")) {
        if (check_metric(domain, "domain.range", &lo, &hi, why) != 0
            || int_param(domain, "resolution", 1, 2 * VALUE_MAX, "domain.resolution", &res, why) != 0)
            return -1;
        if ((hi - lo) % res != 0) {
            ldpc_reason_set(why, "domain.resolution", "hi - lo = %lld is not a multiple of the resolution %lld",
                            (long long)(hi - lo), (long long)res);
            return -1;
        }
        points = (hi - lo) / res + 1;
        if (points > (int64_t)LDP_GRID_MAX) {
            ldpc_reason_set(why, "domain.resolution", "(hi - lo) / resolution + 1 = %lld grid points, at most %u",
                            (long long)points, LDP_GRID_MAX);
            return -1;
        }
        return points;
    }
    if (int_param(domain, "points", 2, LDP_GRID_MAX, "domain.points", &points, why) != 0)
        return -1;
    metrics = cJSON_GetObjectItemCaseSensitive(domain, "metrics");
    count = cJSON_IsArray(metrics) ? cJSON_GetArraySize(metrics) : 0;
    if (count < 1 || count > (int)LDP_METRICS_MAX) {
        ldpc_reason_set(why, "domain.metrics", "1..%u metrics", LDP_METRICS_MAX);
        return -1;
    }
    cJSON_ArrayForEach(m, metrics) {
        if (check_metric(m, "domain.metrics", &lo, &hi, why) != 0)
            return -1;
    }
    return points;
}

int ldpc_numeric_check_phases(const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *domain = cJSON_GetObjectItemCaseSensitive(doc, "domain"), *ph;
    int numeric = type_is(domain, "range") || type_is(domain, "ranges");
    int64_t d = type_is(domain, "ranges") ? cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(domain, "metrics")) : 1;
    cJSON_ArrayForEach(ph, cJSON_GetObjectItemCaseSensitive(doc, "phases")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(ph, "mechanism")->valuestring;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(ph, "params");
        const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(params, "metrics");
        int64_t got = 1;
        if (ldpc_numeric_id(ldp_mechanism_id(name)) != numeric) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(domain, "type");
            ldpc_reason_set(why, "phases.mechanism", "%s does not run on a %s domain", name,
                            cJSON_IsString(t) ? t->valuestring : "?");
            return -1;
        }
        if (!numeric)
            continue;
        if (strcmp(name, "hm") == 0 && metrics != NULL && !ldpc_json_int(metrics, &got))
            got = -1;
        if (got != d) {
            ldpc_reason_set(why, "params.metrics", "%s reports a different number of metrics than the domain's %lld",
                            name, (long long)d);
            return -1;
        }
        if (strcmp(name, "sw") == 0 && (cJSON_GetObjectItemCaseSensitive(params, "bins") == NULL
                                       || cJSON_GetObjectItemCaseSensitive(params, "window") == NULL)) {
            ldpc_reason_set(why, "phases.params", "sw needs bins and window (spec §3.3)");
            return -1;
        }
    }
    return 0;
}

uint32_t ldpc_numeric_grid_point(const cJSON *domain, int metric, const cJSON *reading)
{
    const cJSON *m = domain;
    int64_t lo = 0, hi = 1, dec = 0, n = 2;
    if (type_is(domain, "ranges")) {
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(domain, "points"), &n);
        m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(domain, "metrics"), metric);
    }
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(m, "lo"), &lo);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(m, "hi"), &hi);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(m, "decimals"), &dec);
    if (type_is(domain, "range")) {
        int64_t res = 1;
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(domain, "resolution"), &res);
        n = (hi - lo) / res + 1;
    }
    return ldp_grid_point(cJSON_IsNumber(reading) ? reading->valuedouble : 0.0, cJSON_IsNumber(reading), lo, hi,
                          (uint32_t)dec, (uint32_t)n);
}
