/* Device logic of the C client: see device.h (mirrors device/ldp/device.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "agent.h"
#include "device.h"
#include "envelope.h"
#include "lcm_model.h"
#include "ldp_hash.h"
#include "ldp_report.h"
#include "ldp_sha256.h"
#include "ldp_select.h"
#include "mech.h"
#include "rounds.h"
#include "schedule.h"

enum { INBOX_KEYS = 0, INBOX_CONFIG = 1, INBOX_PHASE2 = 2 };

/* One optional string entry of "broker" into `out`; 0, or -1 if it is not a short string. */
static int broker_string(const cJSON *broker, const char *name, char *out, int *has)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(broker, name);
    if (v == NULL || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= LDPC_MAX_CREDENTIAL)
        return -1;
    snprintf(out, LDPC_MAX_CREDENTIAL, "%s", v->valuestring);
    *has = 1;
    return 0;
}

/* The identity's optional "broker": {host, port, user, password, tls: {ca_file, cert_file,
 * key_file}}, as
 * device/ldp/app.py reads it. */
static int broker_load(const cJSON *doc, struct ldpc_broker *b, struct ldpc_reason *why)
{
    const cJSON *broker = cJSON_GetObjectItemCaseSensitive(doc, "broker");
    const cJSON *port, *tls;
    int64_t p = 0;
    if (broker == NULL || cJSON_IsNull(broker))
        return 0;
    port = cJSON_GetObjectItemCaseSensitive(broker, "port");
    tls = cJSON_GetObjectItemCaseSensitive(broker, "tls");
    if (!cJSON_IsObject(broker) || broker_string(broker, "host", b->host, &b->has_host) != 0
        || broker_string(broker, "user", b->user, &b->has_user) != 0
        || broker_string(broker, "password", b->password, &b->has_password) != 0
        || (tls != NULL && !cJSON_IsNull(tls)
            && (!cJSON_IsObject(tls) || broker_string(tls, "ca_file", b->ca_file, &b->has_ca_file) != 0
                || broker_string(tls, "cert_file", b->cert_file, &b->has_cert_file) != 0
                || broker_string(tls, "key_file", b->key_file, &b->has_key_file) != 0
                || b->has_cert_file != b->has_key_file || (b->has_cert_file && !b->has_ca_file)))
        || (port != NULL && !cJSON_IsNull(port) && (!ldpc_json_int(port, &p) || p < 1 || p > 65535))) {
        ldpc_reason_set(why, "broker", "broker must be {host, port, user, password, tls: {ca_file, "
                        "cert_file, key_file}} (a certificate needs its key and ca_file): "
                        "strings shorter than %d bytes and a port in 1..65535", LDPC_MAX_CREDENTIAL);
        return -1;
    }
    if (port != NULL && !cJSON_IsNull(port)) {
        b->port = (int)p;
        b->has_port = 1;
    }
    return 0;
}

int ldpc_identity_load(struct ldpc_identity *id, const char *path, struct ldpc_reason *why)
{
    size_t len;
    char *text = ldpc_read_file(path, &len);
    cJSON *doc;
    const cJSON *dev, *key;
    int64_t cap, budget;
    memset(id, 0, sizeof *id);
    if (text == NULL) {
        ldpc_reason_set(why, "identity", "cannot read %s", path);
        return -1;
    }
    doc = cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    free(text);
    dev = cJSON_GetObjectItemCaseSensitive(doc, "device_id");
    key = cJSON_GetObjectItemCaseSensitive(doc, "trusted_keys");
    if ((dev != NULL && (!cJSON_IsString(dev) || !ldpc_valid_name(dev->valuestring))) || key == NULL
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "eps_cap_milli"), &cap)
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "lifetime_budget_milli"), &budget)) {
        cJSON_Delete(doc);
        ldpc_reason_set(why, "identity", "%s must hold {device_id, trusted_keys, eps_cap_milli, "
                        "lifetime_budget_milli}", path);
        return -1;
    }
    if (dev != NULL)
        snprintf(id->device_id, sizeof id->device_id, "%s", dev->valuestring);
    if (ldpc_keyset_load(&id->trusted, key, why) != 0) {
        cJSON_Delete(doc);
        return -1;
    }
    id->eps_cap_milli = cap;
    id->lifetime_budget_milli = budget;
    key = cJSON_GetObjectItemCaseSensitive(doc, "ack_key");
    if (key != NULL && !cJSON_IsNull(key)) {
        if (!cJSON_IsString(key) || strlen(key->valuestring) != 64
            || ldpc_hex_decode(key->valuestring, id->ack_key, sizeof id->ack_key) != 0) {
            cJSON_Delete(doc);
            ldpc_reason_set(why, "ack_key", "ack_key must be 64 hex digits (32 bytes)");
            return -1;
        }
        id->has_ack_key = 1;
    }
    if (broker_load(doc, &id->broker, why) != 0) {
        cJSON_Delete(doc);
        return -1;
    }
    cJSON_Delete(doc);
    return 0;
}

int ldpc_device_init(struct ldpc_device *dev, const struct ldpc_identity *id, const char *state_dir,
                     const char *campaign, const char *value_text, int high, int once,
                     struct ldpc_reason *why)
{
    cJSON *value;
    memset(dev, 0, sizeof *dev);
    dev->exit_code = LDPC_RUNNING;
    dev->id = *id;
    if (!ldpc_valid_name(campaign)) {
        ldpc_reason_set(why, "campaign", "device id and campaign must match [A-Za-z0-9_-]{1,64}");
        return -1;
    }
    snprintf(dev->campaign, sizeof dev->campaign, "%s", campaign);
    snprintf(dev->topic_config, sizeof dev->topic_config, "ldp/%s/config", campaign);
    snprintf(dev->topic_phase2, sizeof dev->topic_phase2, "ldp/%s/phase2", campaign);
    snprintf(dev->topic_report, sizeof dev->topic_report, "ldp/%s/r/%s", campaign, id->device_id);
    snprintf(dev->topic_ack, sizeof dev->topic_ack, "ldp/%s/a/%s", campaign, id->device_id);
    value = value_text ? cJSON_Parse(value_text) : cJSON_CreateNull();
    if (value == NULL)
        value = cJSON_CreateString(value_text);
    ldpc_value_set_device(&dev->value, id->device_id); /* a PEM group's input (public) */
    ldpc_value_init(&dev->value, value); /* every key computed now, before any message */
    cJSON_Delete(value);
    dev->high = high != 0;
    dev->once = once != 0;
    dev->ledger = &dev->own_ledger;
    if (ldpc_ledger_open(dev->ledger, state_dir, id->eps_cap_milli, id->lifetime_budget_milli, why) != 0)
        return -1;
    /* the identity's keys (serial 0) until a rotation is applied (spec §5.2-§5.3) */
    if (dev->ledger->keys != NULL
        && ldpc_keyset_load(&dev->id.trusted, cJSON_GetObjectItemCaseSensitive(dev->ledger->keys, "keys"), why) != 0)
        return -1;
    return 0;
}

int ldpc_device_init_live(struct ldpc_device *dev, const struct ldpc_identity *id, const char *campaign,
                          struct ldpc_ledger *ledger, const struct ldpc_metric *metric)
{
    struct ldpc_reason why;
    memset(dev, 0, sizeof *dev);
    dev->exit_code = LDPC_RUNNING;
    dev->id = *id;
    if (!ldpc_valid_name(campaign))
        return -1;
    snprintf(dev->campaign, sizeof dev->campaign, "%s", campaign);
    snprintf(dev->topic_config, sizeof dev->topic_config, "ldp/%s/config", campaign);
    snprintf(dev->topic_phase2, sizeof dev->topic_phase2, "ldp/%s/phase2", campaign);
    snprintf(dev->topic_report, sizeof dev->topic_report, "ldp/%s/r/%s", campaign, id->device_id);
    snprintf(dev->topic_ack, sizeof dev->topic_ack, "ldp/%s/a/%s", campaign, id->device_id);
    ldpc_value_set_device(&dev->value, id->device_id);
    ldpc_value_init(&dev->value, NULL);
    dev->ledger = ledger;
    dev->metric = metric;
    (void)why;
    return 0;
}

/* A live metric's reading (spec §5.4), once per fresh report, when it is made: the program's
 * first output line as --value takes it (JSON, else the raw string); a program that fails,
 * times out or prints nothing gives no value (⊥, or the grid's midpoint). Nothing is logged. */
void ldpc_dev_read_live(struct ldpc_device *dev)
{
    char line[LDPC_METRIC_LINE];
    cJSON *v = NULL;
    if (dev->metric == NULL)
        return;
    if (ldpc_metric_read(dev->metric->program, line, sizeof line) == 0) {
        v = cJSON_Parse(line);
        if (v == NULL)
            v = cJSON_CreateString(line);
    }
    ldpc_value_init(&dev->value, v);
    cJSON_Delete(v);
}

void ldpc_device_free(struct ldpc_device *dev)
{
    size_t i;
    for (i = 0; i < 3; i++) {
        free(dev->inbox[i]);
        free(dev->kid_refused[i]);
    }
    for (i = 0; i < dev->n_out; i++)
        free(dev->outbox[i].data);
    for (i = 0; i < 3; i++)
        free(dev->awaiting[i].data);
    cJSON_Delete(dev->config);
    if (dev->ledger == &dev->own_ledger)
        ldpc_ledger_close(dev->ledger);
    memset(dev, 0, sizeof *dev);
}

void ldpc_device_on_message(struct ldpc_device *dev, const char *topic, const void *payload, size_t len)
{
    int slot;
    uint8_t *copy;
    if (strcmp(topic, dev->topic_ack) == 0) {
        if (dev->n_acks < LDPC_MAX_ACKS) {
            memcpy(dev->acks[dev->n_acks], payload, len < LDPC_ACK_MAC_SIZE ? len : LDPC_ACK_MAC_SIZE);
            dev->ack_len[dev->n_acks++] = len;
        }
        return;
    }
    if (strcmp(topic, LDPC_KEYS_TOPIC) == 0)
        slot = INBOX_KEYS;
    else if (strcmp(topic, dev->topic_config) == 0)
        slot = INBOX_CONFIG;
    else if (strcmp(topic, dev->topic_phase2) == 0)
        slot = INBOX_PHASE2;
    else
        return;
    copy = malloc(len ? len : 1);
    if (copy == NULL)
        return;
    if (len)
        memcpy(copy, payload, len);
    free(dev->inbox[slot]);
    dev->inbox[slot] = copy;
    dev->inbox_len[slot] = len;
}

void ldpc_dev_refuse(struct ldpc_device *dev, const char *what, const struct ldpc_reason *why)
{
    ldpc_log(dev->id.device_id, "refused", "%s %s: %s", what, why->field, why->message);
    if (dev->once)
        dev->exit_code = LDPC_EXIT_REFUSED;
}

/* Keep a payload refused for its key id: a key rotation may make it verifiable. */
static void keep_kid_refused(struct ldpc_device *dev, int slot, const uint8_t *payload, size_t len,
                             const struct ldpc_reason *why)
{
    uint8_t *copy;
    if (strcmp(why->field, "kid") != 0 || (copy = malloc(len ? len : 1)) == NULL)
        return;
    memcpy(copy, payload, len);
    free(dev->kid_refused[slot]);
    dev->kid_refused[slot] = copy;
    dev->kid_refused_len[slot] = len;
}

int ldpc_apply_keys(struct ldpc_ledger *ledger, struct ldpc_keyset *trusted, const char *device_id,
                    const uint8_t *payload, size_t len)
{
    struct ldpc_reason why;
    struct ldpc_keyset set;
    int64_t serial = 0;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char digest[65];
    cJSON *doc;
    EVP_Digest(payload, len, md, &mdlen, EVP_sha256(), NULL);
    ldpc_hex_encode(md, 32, digest);
    digest[64] = '\0';
    if (ldpc_ledger_keys_digest(ledger) != NULL
        && strcmp(ldpc_ledger_keys_digest(ledger), digest) == 0) { /* verified when applied */
        ldpc_log(device_id, "keys", "skip serial=%lld", (long long)ldpc_ledger_keys_serial(ledger));
        return 0;
    }
    doc = ldpc_envelope_verify(payload, len, trusted, &why);
    if (doc == NULL || ldpc_keys_check(doc, &set, &serial, &why) != 0) {
        cJSON_Delete(doc);
        ldpc_log(device_id, "refused", "keys %s: %s", why.field, why.message);
        return 0;
    }
    if (serial <= ldpc_ledger_keys_serial(ledger)) {
        cJSON_Delete(doc);
        ldpc_log(device_id, "keys", "skip serial=%lld", (long long)serial);
        return 0;
    }
    if (ldpc_ledger_set_keys(ledger, serial, cJSON_GetObjectItemCaseSensitive(doc, "keys"), digest, &why) != 0) {
        cJSON_Delete(doc);
        ldpc_log(device_id, "refused", "keys %s: %s", why.field, why.message);
        return 0;
    }
    cJSON_Delete(doc);
    *trusted = set;
    ldpc_log(device_id, "keys", "serial=%lld trusted=%d", (long long)serial, set.n);
    return 1;
}

void ldpc_device_keys_rotated(struct ldpc_device *dev, const struct ldpc_keyset *trusted)
{
    int slot;
    dev->id.trusted = *trusted;
    for (slot = INBOX_CONFIG; slot <= INBOX_PHASE2; slot++) {
        if (dev->kid_refused[slot] != NULL && dev->inbox[slot] == NULL) {
            dev->inbox[slot] = dev->kid_refused[slot];
            dev->inbox_len[slot] = dev->kid_refused_len[slot];
        } else {
            free(dev->kid_refused[slot]);
        }
        dev->kid_refused[slot] = NULL;
    }
}

/* A key rotation (spec §5.3): signed by a key trusted now, a serial above the one held,
 * persisted in the ledger before use; fleet-wide, so a refusal never ends a --once run. */
static void on_keys(struct ldpc_device *dev, const uint8_t *payload, size_t len)
{
    if (ldpc_apply_keys(dev->ledger, &dev->id.trusted, dev->id.device_id, payload, len))
        ldpc_device_keys_rotated(dev, &dev->id.trusted);
}

static int64_t int_of(const cJSON *obj, const char *key)
{
    int64_t v = 0;
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(obj, key), &v);
    return v;
}

/* Phases of `doc` (checked by ldpc_config_check) this device takes part in: all of them,
 * unless the phases set `sample_rate_ppm` (LDPLCM, svim): then phase 1 iff
 * H(utf8(device_id), salt) % 10^6 < rate, phase 2 otherwise (spec §5) -- or, once the device
 * has reported one phase of the campaign id, that phase alone. */
static void participating(const struct ldpc_device *dev, const cJSON *doc, int in_phase[3])
{
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(doc, "phases"), *ph;
    int64_t rate = -1;
    int count = cJSON_GetArraySize(phases);
    uint32_t h;
    cJSON_ArrayForEach(ph, phases)
        ldpc_json_int(cJSON_GetObjectItemCaseSensitive(ph, "sample_rate_ppm"), &rate);
    in_phase[0] = 0;
    in_phase[1] = 1;
    in_phase[2] = count == 2;
    if (rate < 0 || count == 1)
        return;
    /* a phase already reported for this id decides, whatever a config says: never both */
    if (ldpc_ledger_has(dev->ledger, (uint32_t)int_of(doc, "campaign_id"), 1)
        || ldpc_ledger_has(dev->ledger, (uint32_t)int_of(doc, "campaign_id"), 2)) {
        in_phase[1] = ldpc_ledger_has(dev->ledger, (uint32_t)int_of(doc, "campaign_id"), 1);
        in_phase[2] = !in_phase[1];
        return;
    }
    h = ldp_murmur3_32((const uint8_t *)dev->id.device_id, strlen(dev->id.device_id),
                       (uint32_t)int_of(doc, "salt"));
    in_phase[1] = (int64_t)(h % LDPC_PPM) < rate;
    in_phase[2] = !in_phase[1];
}

static const cJSON *phase_entry(const cJSON *doc, int phase)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "phases"), phase - 1);
}

/* The mechanism of `phase` of `doc`. shc phase 2's thresholds need phase 1's eps (spec §3.1):
 * `eps1_milli`, what the device's phase-1 memo was made with (unused otherwise). */
int ldpc_dev_make_mech(const cJSON *doc, int phase, const cJSON *candidates, int64_t eps1_milli,
                       struct ldpc_mech *mech, struct ldpc_reason *why)
{
    const cJSON *ph = phase_entry(doc, phase);
    const char *name = cJSON_GetObjectItemCaseSensitive(ph, "mechanism")->valuestring;
    /* n of spec §3: d + 1 (⊥ at index d) for single-item mechanisms, d for set-valued ones,
     * N grid points for numeric ones (no ⊥: they clip, spec §1.1) */
    uint64_t n = ldpc_domain_size(doc) + (ldpc_mech_set_valued_name(name) || ldpc_numeric_id(ldp_mechanism_id(name)) ? 0 : 1);
    cJSON *params = NULL;
    int rc;
    if (phase == 2 && ldp_mechanism_id(name) == LDP_MECHANISM_ID_SHC) {
        params = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(ph, "params"), 1);
        if (params == NULL || !cJSON_IsObject(params)
            || cJSON_AddNumberToObject(params, "eps1_milli", (double)eps1_milli) == NULL) {
            cJSON_Delete(params);
            ldpc_reason_set(why, "phases.params", "must be an object");
            return -1;
        }
    }
    rc = ldpc_mech_init(mech, name, int_of(ph, "eps_milli"), n, (uint32_t)int_of(doc, "salt"),
                        (uint32_t)int_of(doc, "campaign_id"), phase,
                        params != NULL ? params : cJSON_GetObjectItemCaseSensitive(ph, "params"), candidates, why);
    cJSON_Delete(params);
    return rc;
}

/* The domain of a config as the lookups below need it: d, whether it is a string domain, and
 * the keys of its items in domain order (string domains; NULL for int domains). Public work,
 * the same for every value. */
struct domain_view {
    uint64_t d;
    int is_str;
    uint32_t *keys, empty_key;
};

static int domain_view_init(struct domain_view *v, const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *domain = cJSON_GetObjectItemCaseSensitive(doc, "domain"), *it;
    size_t i = 0;
    v->d = ldpc_domain_size(doc);
    v->is_str = !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(domain, "type"))
                || strcmp(cJSON_GetObjectItemCaseSensitive(domain, "type")->valuestring, "int") != 0;
    v->keys = NULL;
    v->empty_key = ldpc_string_key("");
    if (!v->is_str)
        return 0;
    v->keys = malloc((v->d ? v->d : 1) * sizeof *v->keys);
    if (v->keys == NULL) {
        ldpc_reason_set(why, "domain.items", "too many items for this device");
        return -1;
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(domain, "items"))
        v->keys[i++] = ldpc_string_key(it->valuestring);
    return 0;
}

/* index(v) of spec §1 for one prepared item, never failing: the item's domain index, or d
 * (⊥) for anything else; *key the mechanism key of that index (key(⊥) = d, or H(b"") for a
 * string domain). A string domain is scanned whole, with no early exit and no branch on the
 * item, so the work is the same for every value (spec §7.1). */
static uint32_t domain_index(const struct domain_view *v, const struct ldpc_item *item, uint32_t *key)
{
    uint32_t d = (uint32_t)v->d, idx = d;
    if (!v->is_str) {
        idx = ldp_select((item->kind == LDPC_ITEM_INT) & ((uint64_t)item->int_value < v->d), item->int_value, d);
        *key = idx;
    } else {
        uint32_t is_item = item->kind == LDPC_ITEM_STR, i;
        for (i = 0; i < d; i++)
            idx = ldp_select(is_item & (v->keys[i] == item->str_key), i, idx);
        *key = ldp_select(idx < d, item->str_key, v->empty_key);
    }
    return idx;
}

/* Spec §1.1: the grid point of `reading` on metric `metric` of a checked numeric domain of N
 * points (the same float steps for every number; not a number: the midpoint). */
static uint32_t grid_point_of(const cJSON *domain, int metric, uint32_t n, double reading, int is_number)
{
    const cJSON *m = domain, *t = cJSON_GetObjectItemCaseSensitive(domain, "type");
    int64_t lo = 0, hi = 1, dec = 0;
    if (cJSON_IsString(t) && strcmp(t->valuestring, "ranges") == 0)
        m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(domain, "metrics"), metric);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(m, "lo"), &lo);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(m, "hi"), &hi);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(m, "decimals"), &dec);
    return ldp_grid_point(reading, is_number, lo, hi, (uint32_t)dec, n);
}

/* A numeric mechanism's input (spec §1.1, §3.3): in->index the grid point of the reading
 * (duchi, pm, sw), or for hm *keys (heap) the grid point of every metric's reading, in domain
 * order, with in->nslots = metrics. Every metric takes the same steps whatever its reading;
 * never refuses because of the value. -1 only when memory runs out. */
static int numeric_input(const struct ldpc_value *value, const cJSON *doc, const struct ldpc_mech *mech,
                         struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    const cJSON *domain = cJSON_GetObjectItemCaseSensitive(doc, "domain");
    uint32_t n = (uint32_t)mech->domain_size, a, metrics = 1;
    if (mech->id == LDP_MECHANISM_ID_HM)
        metrics = mech->num.hm.metrics;
    if (metrics > LDPC_READINGS)
        metrics = LDPC_READINGS;
    *keys = malloc(metrics * sizeof **keys);
    if (*keys == NULL) {
        ldpc_reason_set(why, "value", "out of memory");
        return -1;
    }
    for (a = 0; a < metrics; a++)
        (*keys)[a] = grid_point_of(domain, (int)a, n, value->reading[a], value->is_number[a]);
    in->index = (*keys)[0];
    if (mech->id == LDP_MECHANISM_ID_HM) {
        in->keys = *keys;
        in->nslots = metrics;
    }
    return 0;
}

/* A strings campaign's input (spec §3.5): pem takes key_λ of the device's group's prefix of
 * the code; phase 2 (psgrr l = 1) a set of one slot, the code's key, live unless the code is
 * all NUL (the dummy), in the set layout the trim expects (LDPC_SET_CAPACITY keys, then live).
 * The same work for every value. -1 only when memory runs out. */
static int strings_input(const struct ldpc_value *value, const cJSON *doc, const struct ldpc_mech *mech,
                         struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    uint8_t code[LDPC_PEM_CODE_SLOTS], *live;
    int64_t L = 0;
    if (mech->id == LDP_MECHANISM_ID_PEM) {
        in->key = ldpc_pem_prefix_key(&mech->pem, mech->salt, value->device, value->pem_src);
        return 0;
    }
    *keys = calloc(LDPC_SET_CAPACITY, sizeof **keys + 1);
    if (*keys == NULL) {
        ldpc_reason_set(why, "value", "out of memory");
        return -1;
    }
    live = (uint8_t *)(*keys + LDPC_SET_CAPACITY);
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "domain"), "max_len"), &L);
    ldpc_pem_code(value->pem_src, (uint32_t)L, code);
    (*keys)[0] = ldpc_pem_code_key(code, (uint32_t)L, &live[0]);
    in->keys = *keys;
    in->live = live;
    in->nslots = LDPC_SET_CAPACITY;
    return 0;
}

/* The device's value in the form the mechanism takes; *keys (heap) holds a set's slots. Never
 * refuses because of the value (spec §1): a value outside the domain is ⊥ (a list given to a
 * one-item campaign too: its `one` is NONE), set elements that are not domain items are
 * dropped. -1 only when memory runs out. */
int ldpc_dev_build_input(const struct ldpc_value *value, int high, const cJSON *doc, const struct ldpc_mech *mech,
                         struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    struct domain_view view;
    memset(in, 0, sizeof *in);
    *keys = NULL;
    if (ldpc_numeric_id(mech->id))
        return numeric_input(value, doc, mech, in, keys, why);
    if (ldpc_is_strings(cJSON_GetObjectItemCaseSensitive(doc, "domain")))
        return strings_input(value, doc, mech, in, keys, why);
    if (domain_view_init(&view, doc, why) != 0)
        return -1;
    if (ldpc_mech_set_valued(mech)) {
        /* every slot of the fixed capacity gets the same work whatever the set holds (spec
         * §7.1): its domain lookup, and live = an item of the domain (repeats were marked at
         * start); the slots keep the set's order */
        size_t j;
        uint8_t *live;
        *keys = malloc(LDPC_SET_CAPACITY * (sizeof **keys + 1));
        if (*keys == NULL) {
            free(view.keys);
            ldpc_reason_set(why, "value", "out of memory");
            return -1;
        }
        live = (uint8_t *)(*keys + LDPC_SET_CAPACITY);
        for (j = 0; j < LDPC_SET_CAPACITY; j++)
            live[j] = (uint8_t)(domain_index(&view, &value->slot[j], &(*keys)[j]) < view.d);
        free(view.keys);
        in->keys = *keys;
        in->live = live;
        in->nslots = LDPC_SET_CAPACITY;
        return 0;
    }
    in->index = domain_index(&view, &value->one, &in->key);
    free(view.keys);
    in->high = high != 0;
    return 0;
}

/* Queue `report` to be published from `not_before` on, unless `phase` is already queued;
 * 1 if queued. */
static int enqueue_at(struct ldpc_device *dev, int phase, uint8_t *report, size_t len, double not_before)
{
    size_t i;
    for (i = 0; i < dev->n_out; i++) {
        if (dev->outbox[i].phase == phase) { /* already queued: the same (memoised) bytes */
            free(report);
            return 0;
        }
    }
    dev->outbox[dev->n_out].phase = phase;
    dev->outbox[dev->n_out].data = report;
    dev->outbox[dev->n_out].len = len;
    dev->outbox[dev->n_out].not_before = not_before;
    dev->n_out++;
    return 1;
}

/* The accepted config's delivery.spread_s (spec §5.4), 0 without it. */
static int64_t spread_s(const struct ldpc_device *dev)
{
    const cJSON *d = dev->config ? cJSON_GetObjectItemCaseSensitive(dev->config, "delivery") : NULL;
    return d != NULL && cJSON_GetObjectItemCaseSensitive(d, "spread_s") != NULL ? int_of(d, "spread_s") : 0;
}

void ldpc_device_enqueue(struct ldpc_device *dev, int phase, uint8_t *report, size_t len)
{
    int64_t spread = spread_s(dev);
    uint32_t w = 0;
    uint64_t ms;
    if (!enqueue_at(dev, phase, report, len, 0.0) || spread <= 0)
        return; /* already queued (nothing drawn), or no spread */
    /* U[0, spread_s) in ms from one OS random word, drawn after the report was made (spec §6) */
    ldpc_os_random_words(&w, 1);
    ms = ((uint64_t)spread * 1000u * (uint64_t)w) >> 32;
    ldpc_log(dev->id.device_id, "wait", "phase=%d ms=%llu", phase, (unsigned long long)ms);
    dev->outbox[dev->n_out - 1].not_before = ldpc_monotonic() + (double)ms / 1000.0;
}

/* Queue the memoised report of `phase` if there is one (1), else 0: checked BEFORE anything
 * is computed from the value (spec §7.1, memo first). */
static int resend_memo(struct ldpc_device *dev, uint32_t cid, int phase)
{
    size_t len;
    uint8_t *report = ldpc_ledger_memo(dev->ledger, cid, phase, &len);
    if (report == NULL)
        return 0;
    ldpc_log(dev->id.device_id, "memo", "phase=%d", phase);
    ldpc_device_enqueue(dev, phase, report, len);
    return 1;
}

/* Queue a fresh report of `phase`, ledgered first; its nonce (spec §3) and words come from the
 * OS RNG. */
static void deliver(struct ldpc_device *dev, int phase, const struct ldpc_mech *mech, const struct ldpc_input *in)
{
    uint32_t cid = (uint32_t)int_of(dev->config, "campaign_id"), nonce, *words;
    struct ldpc_spend spend;
    struct ldpc_reason why;
    size_t len;
    uint8_t *report;
    int shc_x;
    if (ldpc_ledger_check(dev->ledger, mech->eps_milli, &why) != 0) {
        ldpc_dev_refuse(dev, "report", &why);
        return;
    }
    len = ldpc_mech_report_size(mech);
    report = malloc(len);
    words = malloc(mech->words * sizeof *words);
    if (report == NULL || words == NULL || ldpc_os_random_words(&nonce, 1) != 0
        || ldpc_os_random_words(words, mech->words) != 0
        || ldpc_mech_report(mech, in, words, nonce, report) != 0) {
        ldpc_reason_set(&why, "report", "cannot build the report (memory, OS RNG or input)");
        free(report);
        free(words);
        ldpc_dev_refuse(dev, "report", &why);
        return;
    }
    shc_x = ldpc_mech_shc_x(mech, words, report); /* shc phase 1: x goes with the memo (spec §7.4) */
    free(words);
    spend.campaign_id = cid;
    spend.phase = phase;
    spend.eps_milli = mech->eps_milli;
    spend.nonce = nonce;
    spend.report = report;
    spend.len = len;
    spend.digest = dev->config_digest; /* the id's first spend binds it (spec §7.2) */
    spend.shc_bit = shc_x;
    if (ldpc_ledger_commit(dev->ledger, &spend, &why) != 0) {
        free(report);
        ldpc_dev_refuse(dev, "report", &why);
        return;
    }
    ldpc_log(dev->id.device_id, "spent", "phase=%d eps_milli=%lu remaining=%lld", phase,
             (unsigned long)mech->eps_milli, (long long)ldpc_ledger_remaining(dev->ledger));
#ifdef LDPC_TEST_MODES /* the crash tests' hook: not in a production build */
    if (dev->crash_after_commit) {
        ldpc_log(dev->id.device_id, "crash-point", "after-commit");
        free(report);
        exit(LDPC_EXIT_CRASH_POINT);
    }
#endif
    ldpc_device_enqueue(dev, phase, report, len);
}

/* Spec §7.2-§7.3 (device.py::check_binding), public inputs only: a closed id, or a config issued
 * at or before the closed-campaign watermark whose id is not bound (`closed`); a bound id whose
 * config body digest is not the one it spent under (`bound`). */
static int check_binding(const struct ldpc_ledger *ledger, const cJSON *doc, const char *digest,
                         struct ldpc_reason *why)
{
    uint32_t cid = (uint32_t)int_of(doc, "campaign_id");
    const char *bound = ldpc_ledger_bound_digest(ledger, cid);
    if (ldpc_ledger_is_closed(ledger, cid)) {
        ldpc_reason_set(why, "closed", "campaign id %lu was closed", (unsigned long)cid);
        return -1;
    }
    if (bound == NULL && ldpc_ledger_below_floor(ledger, int_of(doc, "not_before"))) {
        ldpc_reason_set(why, "closed", "campaign id %lu was issued (not_before %lld) at or before the "
                        "closed-campaign watermark %lld", (unsigned long)cid, (long long)int_of(doc, "not_before"),
                        (long long)ledger->closed_floor);
        return -1;
    }
    if (bound != NULL && strcmp(bound, digest) != 0) {
        ldpc_reason_set(why, "bound", "campaign id %lu is bound to the config this device reported under "
                        "(%s); this one differs (%s)", (unsigned long)cid, bound, digest);
        return -1;
    }
    return 0;
}

/* Every check of device.py::on_config, in its order; 0 and the phase-1 mechanism/input
 * (when this device takes part in phase 1) or -1 with the reason. `digest`: the config
 * body's (spec §7.2). */
static int accept_config(struct ldpc_device *dev, const cJSON *doc, const char *digest, int in_phase[3],
                         struct ldpc_mech *mech, int *have_mech, struct ldpc_input *in, uint32_t **keys,
                         struct ldpc_reason *why)
{
    const cJSON *ph;
    int64_t need = 0;
    uint32_t cid;
    *have_mech = 0;
    *keys = NULL;
    if (ldpc_config_check(doc, ldpc_unix_now(), why) != 0)
        return -1;
    if (strcmp(cJSON_GetObjectItemCaseSensitive(doc, "campaign")->valuestring, dev->campaign) != 0) {
        ldpc_reason_set(why, "campaign", "config of campaign %s on our topic",
                        cJSON_GetObjectItemCaseSensitive(doc, "campaign")->valuestring);
        return -1;
    }
    if (dev->metric != NULL) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(doc, "metric");
        if (!cJSON_IsString(m) || strcmp(m->valuestring, dev->metric->name) != 0) {
            ldpc_reason_set(why, "metric", "this device provides no metric %s",
                            cJSON_IsString(m) ? m->valuestring : "None");
            return -1;
        }
    }
    cid = (uint32_t)int_of(doc, "campaign_id");
    if (check_binding(dev->ledger, doc, digest, why) != 0)
        return -1;
    participating(dev, doc, in_phase);
    cJSON_ArrayForEach(ph, cJSON_GetObjectItemCaseSensitive(doc, "phases")) {
        int64_t eps = int_of(ph, "eps_milli"), number = int_of(ph, "phase");
        if (eps > dev->ledger->eps_cap_milli) {
            ldpc_reason_set(why, "eps_cap", "phase %lld eps_milli %lld above the device cap %lld", (long long)number,
                            (long long)eps, (long long)dev->ledger->eps_cap_milli);
            return -1;
        }
        if (in_phase[number] && !ldpc_ledger_has(dev->ledger, cid, (int)number))
            need += eps;
    }
    if (ldpc_is_recurring(doc)) /* charged once, at enrolment (spec §3.4): rounds.c */
        return ldpc_rounds_accept(dev, doc, why);
    if (need > ldpc_ledger_remaining(dev->ledger)) {
        ldpc_reason_set(why, "lifetime_budget", "campaign needs eps_milli %lld, %lld remain", (long long)need,
                        (long long)ldpc_ledger_remaining(dev->ledger));
        return -1;
    }
    if (!in_phase[1] || ldpc_ledger_has(dev->ledger, cid, 1))
        return 0; /* memo first: a paid phase is re-sent untouched, nothing computed */
    ldpc_dev_read_live(dev);
    if (ldpc_phase1_input(doc, &dev->value, dev->high, mech, in, keys, why) != 0)
        return -1;
    *have_mech = 1;
    return 0;
}

int ldpc_phase1_input(const cJSON *doc, const struct ldpc_value *value, int high, struct ldpc_mech *mech,
                      struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    *keys = NULL;
    if (ldpc_dev_make_mech(doc, 1, NULL, 0, mech, why) != 0)
        return -1;
    if (ldpc_dev_build_input(value, high, doc, mech, in, keys, why) != 0) {
        ldpc_mech_free(mech);
        return -1;
    }
    return 0;
}

/* --- acknowledgements (spec §6) ------------------------------------------------------------ */

/* The accepted config's delivery field when it asks for acknowledgements, else NULL. */
static const cJSON *acked_delivery(const struct ldpc_device *dev)
{
    const cJSON *d = dev->config ? cJSON_GetObjectItemCaseSensitive(dev->config, "delivery") : NULL;
    return d != NULL && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "ack")) ? d : NULL;
}

/* Seconds `wait` x U[0.5, 1.5) from now (OS RNG). */
static double due_after(double wait)
{
    uint32_t u = 0;
    ldpc_os_random_words(&u, 1);
    return ldpc_monotonic() + wait * (0.5 + (u >> 16) / 65536.0);
}

/* Forget every awaited report; with `why`, log each as undelivered. */
static void stop_awaiting(struct ldpc_device *dev, const char *why)
{
    int p;
    for (p = 1; p <= 2; p++) {
        if (dev->awaiting[p].data == NULL)
            continue;
        if (why != NULL)
            ldpc_log(dev->id.device_id, "undelivered", "phase=%d (%s)", p, why);
        free(dev->awaiting[p].data);
        dev->awaiting[p].data = NULL;
    }
}

int ldpc_ack_accepts(const struct ldpc_identity *id, const uint8_t *report, size_t report_len,
                     const uint8_t *ack, size_t len)
{
    uint8_t tag[LDP_ACK_TAG_SIZE];
    int tag_ok = 1;
    if (id->has_ack_key) {
        if (len != LDPC_ACK_MAC_SIZE)
            return 0;
        ldp_ack_tag(id->ack_key, ack, tag);
        tag_ok = ldp_ct_equal(tag, ack + LDPC_ACK_SIZE, LDP_ACK_TAG_SIZE);
    } else if (len != LDPC_ACK_SIZE && len != LDPC_ACK_MAC_SIZE) {
        return 0;
    }
    return tag_ok && ack[0] == LDP_PROTOCOL_VERSION && ack[1] == 0x41 && report_len >= 12 && ack[2] == report[2]
           && memcmp(report + 4, ack + 4, 8) == 0;
}

/* Stop re-sending the report an ack names (ldpc_ack_accepts); it arrived on our own ack topic
 * (the only one we read). */
static void on_ack(struct ldpc_device *dev, const uint8_t *ack, size_t len)
{
    struct ldpc_awaiting *a;
    if ((len == LDPC_ACK_SIZE || len == LDPC_ACK_MAC_SIZE) && ack[2] >= 1 && ack[2] <= 2) {
        a = &dev->awaiting[ack[2]];
        if (a->data != NULL && ldpc_ack_accepts(&dev->id, a->data, a->len, ack, len)) {
            free(a->data);
            a->data = NULL;
            if (dev->recurring)
                dev->round_delivered = 1;
            ldpc_log(dev->id.device_id, "acked", "phase=%d status=%d", ack[2], ack[3]);
            return;
        }
    }
    ldpc_log(dev->id.device_id, "ack-ignored", "bytes=%lu", (unsigned long)len);
}

void ldpc_device_resend_due(struct ldpc_device *dev)
{
    const cJSON *d = acked_delivery(dev);
    double now = ldpc_monotonic(), top;
    int p;
    if (d == NULL || ldpc_unix_now() > int_of(dev->config, "not_after")) {
        stop_awaiting(dev, "campaign deadline passed");
        return;
    }
    top = (double)int_of(d, "retry_max_s");
    for (p = 1; p <= 2; p++) {
        struct ldpc_awaiting *a = &dev->awaiting[p];
        uint8_t *copy;
        if (a->data == NULL || now < a->due)
            continue;
        copy = malloc(a->len);
        if (copy == NULL)
            continue;
        memcpy(copy, a->data, a->len);
        a->wait = a->wait * 2 > top ? top : a->wait * 2;
        a->due = due_after(a->wait);
        ldpc_log(dev->id.device_id, "resent", "phase=%d next_s=%d", p, (int)a->wait);
        enqueue_at(dev, p, copy, a->len, 0.0); /* an ack re-send keeps its own timer */
    }
}

/* A signed close (spec §5.4, §7.3; device.py::on_close): the id goes into the ledger with its
 * not_before (the close's, else the held config's of that id; a replayed config is refused
 * from then on). A close of the id held (or of any id while none is held) ends the campaign:
 * nothing more is sent; with --once the device is done. A close of another id is only
 * recorded: the campaign held goes on. */
static void on_close(struct ldpc_device *dev, const cJSON *doc)
{
    struct ldpc_reason why;
    int64_t cid, held = -1, not_before = 0;
    if (ldpc_close_check(doc, &why) != 0) {
        ldpc_dev_refuse(dev, "config", &why);
        return;
    }
    cid = int_of(doc, "campaign_id");
    if (strcmp(cJSON_GetObjectItemCaseSensitive(doc, "campaign")->valuestring, dev->campaign) != 0) {
        ldpc_reason_set(&why, "campaign", "close of campaign %s on our topic",
                        cJSON_GetObjectItemCaseSensitive(doc, "campaign")->valuestring);
        ldpc_dev_refuse(dev, "config", &why);
        return;
    }
    if (dev->config != NULL)
        held = int_of(dev->config, "campaign_id");
    if (cJSON_GetObjectItemCaseSensitive(doc, "not_before") != NULL)
        not_before = int_of(doc, "not_before");
    else if (held == cid)
        not_before = int_of(dev->config, "not_before");
    if (ldpc_ledger_close_campaign(dev->ledger, (uint32_t)cid, not_before, &why) != 0) {
        ldpc_dev_refuse(dev, "config", &why);
        return;
    }
    if (held >= 0 && held != cid) {
        ldpc_log(dev->id.device_id, "close-recorded", "campaign_id=%lld (the campaign held, %lld, goes on)",
                 (long long)cid, (long long)held);
        return;
    }
    while (dev->n_out)
        free(ldpc_device_pop(dev));
    stop_awaiting(dev, NULL);
    dev->recurring = dev->rounds_over = dev->round_delivered = 0;
    dev->round = 0;
    cJSON_Delete(dev->config);
    dev->config = NULL;
    dev->config_digest[0] = '\0';
    ldpc_log(dev->id.device_id, "closed", "campaign_id=%lld", (long long)cid);
    if (dev->once)
        dev->exit_code = LDPC_EXIT_DONE;
}

static void on_config(struct ldpc_device *dev, const uint8_t *payload, size_t len)
{
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    uint32_t *keys = NULL;
    int in_phase[3], have_mech = 0;
    char digest[LDPC_BODY_DIGEST_HEX] = "";
    cJSON *doc = ldpc_envelope_open(payload, len, &dev->id.trusted, digest, &why);
    if (doc != NULL && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(doc, "type"))
        && strcmp(cJSON_GetObjectItemCaseSensitive(doc, "type")->valuestring, "close") == 0) {
        on_close(dev, doc);
        cJSON_Delete(doc);
        return;
    }
    if (doc == NULL || accept_config(dev, doc, digest, in_phase, &mech, &have_mech, &in, &keys, &why) != 0) {
        cJSON_Delete(doc);
        keep_kid_refused(dev, INBOX_CONFIG, payload, len, &why);
        ldpc_dev_refuse(dev, "config", &why);
        return;
    }
    if (dev->config == NULL || int_of(dev->config, "campaign_id") != int_of(doc, "campaign_id")) {
        memset(dev->delivered, 0, sizeof dev->delivered);
        dev->round = 0;
        dev->round_delivered = dev->rounds_over = 0;
    }
    dev->recurring = ldpc_is_recurring(doc);
    cJSON_Delete(dev->config);
    dev->config = doc;
    memcpy(dev->config_digest, digest, sizeof dev->config_digest);
    memcpy(dev->in_phase, in_phase, sizeof in_phase);
    ldpc_log(dev->id.device_id, "accepted", "config campaign_id=%lld phases=%s",
             (long long)int_of(doc, "campaign_id"),
             in_phase[1] && in_phase[2] ? "[1, 2]" : in_phase[1] ? "[1]" : "[2]");
    if (dev->recurring) {
        ldpc_rounds_trigger(dev); /* the open round's report, memo first (spec §3.4) */
    } else if (have_mech) {
        deliver(dev, 1, &mech, &in);
        ldpc_mech_free(&mech);
    } else if (in_phase[1]) {
        resend_memo(dev, (uint32_t)int_of(doc, "campaign_id"), 1);
    }
    free(keys);
}

/* LDPMiner phase 2 (srappor, sh) and SVIM phase 2 (psgrr, psolh): the candidates are required;
 * for srappor, psgrr and psolh they are also the items' order (the mechanism holds them), for sh
 * they only trim the set. */
static int ldpminer_phase2(const cJSON *doc, const cJSON *p2, const struct ldpc_value *value, struct ldpc_mech *mech,
                           struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    const cJSON *cands = cJSON_GetObjectItemCaseSensitive(p2, "candidates");
    struct ldpc_candidates own;
    const struct ldpc_candidates *trim_by = &mech->cand;
    int listed = ldpc_mech_listed_name(
        cJSON_GetObjectItemCaseSensitive(phase_entry(doc, 2), "mechanism")->valuestring);
    memset(&own, 0, sizeof own);
    if (cands == NULL) {
        ldpc_reason_set(why, "candidates", "the phase-2 message carries no candidate list");
        return -1;
    }
    if (listed) {
        if (ldpc_dev_make_mech(doc, 2, cands, 0, mech, why) != 0)
            return -1;
    } else {
        if (ldpc_candidates_parse(&own, cands, why) != 0)
            return -1;
        if (ldpc_dev_make_mech(doc, 2, NULL, 0, mech, why) != 0) {
            ldpc_candidates_free(&own);
            return -1;
        }
        trim_by = &own;
    }
    if (ldpc_dev_build_input(value, 0, doc, mech, in, keys, why) != 0) {
        ldpc_candidates_free(&own);
        ldpc_mech_free(mech);
        return -1;
    }
    ldpc_trim_to_candidates(in->keys, (uint8_t *)(*keys + LDPC_SET_CAPACITY), in->nslots, trim_by);
    ldpc_candidates_free(&own);
    return 0;
}

int ldpc_shc_phase2_input(const cJSON *doc, const cJSON *p2, const struct ldpc_shc_memo *memo,
                          struct ldpc_mech *mech, struct ldpc_input *in, struct ldpc_reason *why)
{
    const cJSON *cands = cJSON_GetObjectItemCaseSensitive(p2, "candidates");
    struct ldpc_candidates own;
    if (cands == NULL) {
        ldpc_reason_set(why, "candidates", "the phase-2 message carries no candidate list");
        return -1;
    }
    if (ldpc_candidates_parse(&own, cands, why) != 0) /* checked as for sh, not used */
        return -1;
    ldpc_candidates_free(&own);
    if (memo->report == NULL || ldpc_shc_memo_input(memo->report, memo->len, memo->x, in) != 0)
        return 1;
    return ldpc_dev_make_mech(doc, 2, NULL, memo->eps1_milli, mech, why);
}

int ldpc_phase2_is_shc(const cJSON *doc)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(phase_entry(doc, 2), "mechanism");
    return cJSON_IsString(name) && ldp_mechanism_id(name->valuestring) == LDP_MECHANISM_ID_SHC;
}

/* svim's flat branch (spec §5.4): the config's fallback, psgrr/psolh listless over the integer
 * domain at phase 2's eps, phase byte 2 and its own mechanism id; the set is not trimmed. */
static int fallback_phase2(const cJSON *doc, const struct ldpc_value *value, struct ldpc_mech *mech, struct ldpc_input *in,
                           uint32_t **keys, struct ldpc_reason *why)
{
    const cJSON *fb = ldpc_fallback_of(doc);
    if (ldpc_mech_init(mech, cJSON_GetObjectItemCaseSensitive(fb, "mechanism")->valuestring,
                       int_of(phase_entry(doc, 2), "eps_milli"), ldpc_domain_size(doc), (uint32_t)int_of(doc, "salt"),
                       (uint32_t)int_of(doc, "campaign_id"), 2, cJSON_GetObjectItemCaseSensitive(fb, "params"), NULL,
                       why) != 0)
        return -1;
    if (ldpc_dev_build_input(value, 0, doc, mech, in, keys, why) != 0) {
        ldpc_mech_free(mech);
        return -1;
    }
    return 0;
}

int ldpc_phase2_input(const cJSON *doc, const cJSON *p2, const struct ldpc_value *value, int caller_high,
                      struct ldpc_mech *mech, struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why)
{
    const cJSON *model_doc = cJSON_GetObjectItemCaseSensitive(p2, "model");
    const char *name = cJSON_GetObjectItemCaseSensitive(phase_entry(doc, 2), "mechanism")->valuestring;
    struct ldpc_lcm_model model;
    *keys = NULL;
    if (ldpc_phase2_is_fallback(p2) && ldpc_fallback_of(doc) != NULL)
        return fallback_phase2(doc, value, mech, in, keys, why);
    if (ldpc_mech_set_valued_name(name))
        return ldpminer_phase2(doc, p2, value, mech, in, keys, why);
    if (ldpc_dev_make_mech(doc, 2, NULL, 0, mech, why) != 0)
        return -1;
    if (ldpc_dev_build_input(value, caller_high, doc, mech, in, keys, why) != 0) {
        ldpc_mech_free(mech);
        return -1;
    }
    if (mech->id == LDP_MECHANISM_ID_LCM && model_doc != NULL) {
        if (ldpc_lcm_model_parse(&model, model_doc, why) != 0) {
            ldpc_mech_free(mech);
            return -1;
        }
        in->high = ldpc_lcm_model_is_high(&model, in->index);
        ldpc_lcm_model_free(&model);
    }
    return 0;
}

static void on_phase2(struct ldpc_device *dev, const uint8_t *payload, size_t len)
{
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    uint32_t *keys = NULL;
    char detail[80] = "";
    int memo = 0;
    int64_t now = ldpc_unix_now();
    cJSON *p2 = ldpc_envelope_verify(payload, len, &dev->id.trusted, &why);
    int rc = p2 == NULL ? -1 : ldpc_phase2_check(p2, dev->config, &why);
    if (rc == 0 && !(int_of(dev->config, "not_before") <= now && now <= int_of(dev->config, "not_after"))) {
        ldpc_reason_set(&why, "validity", "the campaign's validity window has passed");
        rc = -1;
    }
    if (rc == 0 && !dev->in_phase[2]) {
        ldpc_log(dev->id.device_id, "skip", "phase 2 (this device is not in it)");
        cJSON_Delete(p2);
        return;
    }
    memo = rc == 0 && ldpc_ledger_has(dev->ledger, (uint32_t)int_of(dev->config, "campaign_id"), 2);
    if (rc == 0 && !memo && ldpc_phase2_is_shc(dev->config)) {
        /* shc: the phase-1 memo and the ledger's bit x, never the value (spec §3.1) */
        uint32_t cid = (uint32_t)int_of(dev->config, "campaign_id");
        struct ldpc_shc_memo m1;
        uint8_t *memo1;
        m1.len = 0;
        memo1 = ldpc_ledger_memo(dev->ledger, cid, 1, &m1.len);
        m1.report = memo1;
        m1.x = ldpc_ledger_shc_bit(dev->ledger, cid);
        m1.eps1_milli = ldpc_ledger_memo_eps(dev->ledger, cid, 1); /* what phase 1 was charged */
        rc = ldpc_shc_phase2_input(dev->config, p2, &m1, &mech, &in, &why);
        free(memo1);
        if (rc == 1) { /* no phase-1 report of this campaign: a function of the ledger */
            ldpc_log(dev->id.device_id, "skip", "phase 2 (no shc phase-1 report of this campaign)");
            dev->in_phase[2] = 0;
            cJSON_Delete(p2);
            return;
        }
    } else if (rc == 0 && !memo) { /* memo first: nothing is computed from the value for a paid phase */
        ldpc_dev_read_live(dev);
        rc = ldpc_phase2_input(dev->config, p2, &dev->value, dev->high, &mech, &in, &keys, &why);
    }
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(p2, "candidates") != NULL)
        snprintf(detail, sizeof detail, " candidates=%d",
                 cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p2, "candidates")));
    else if (rc == 0 && ldpc_phase2_is_fallback(p2))
        snprintf(detail, sizeof detail, " fallback");
    cJSON_Delete(p2);
    if (rc != 0) {
        keep_kid_refused(dev, INBOX_PHASE2, payload, len, &why);
        ldpc_dev_refuse(dev, "phase2", &why);
        return;
    }
    ldpc_log(dev->id.device_id, "accepted", "phase2 campaign_id=%lld%s", (long long)int_of(dev->config, "campaign_id"),
             detail);
    if (memo) {
        resend_memo(dev, (uint32_t)int_of(dev->config, "campaign_id"), 2);
        return;
    }
    deliver(dev, 2, &mech, &in);
    ldpc_mech_free(&mech);
    free(keys);
}

void ldpc_device_process_inbox(struct ldpc_device *dev)
{
    int slot;
    size_t i;
    for (i = 0; i < dev->n_acks; i++)
        on_ack(dev, dev->acks[i], dev->ack_len[i]);
    dev->n_acks = 0;
    for (slot = INBOX_KEYS; slot <= INBOX_PHASE2; slot++) {
        uint8_t *msg = dev->inbox[slot];
        if (msg == NULL || (slot == INBOX_PHASE2 && dev->config == NULL))
            continue;
        dev->inbox[slot] = NULL;
        if (slot == INBOX_KEYS)
            on_keys(dev, msg, dev->inbox_len[slot]);
        else if (slot == INBOX_CONFIG)
            on_config(dev, msg, dev->inbox_len[slot]);
        else
            on_phase2(dev, msg, dev->inbox_len[slot]);
        free(msg);
    }
    ldpc_rounds_tick(dev); /* a recurring campaign's round opening or end (spec §3.4) */
}

void ldpc_device_delivered(struct ldpc_device *dev, int phase, uint8_t *data, size_t len)
{
    const cJSON *d = acked_delivery(dev);
    struct ldpc_awaiting *a;
    if (phase < 1 || phase > 2) {
        free(data);
        return;
    }
    if (dev->recurring && ldpc_report_round(data, len) != dev->round) {
        free(data); /* a PUBACK of a round that is over: nothing more for it */
        return;
    }
    dev->delivered[phase] = 1;
    if (dev->recurring && d == NULL)
        dev->round_delivered = 1; /* no acknowledgements: the PUBACK delivers the round */
    ldpc_log(dev->id.device_id, "published", "phase=%d bytes=%lu", phase, (unsigned long)len);
    a = &dev->awaiting[phase];
    if (d == NULL || (a->data != NULL && a->len == len && memcmp(a->data, data, len) == 0)) {
        free(data); /* no acks, or a re-send of what is awaited: its timer runs on */
        return;
    }
    free(a->data);
    a->data = data;
    a->len = len;
    a->wait = (double)int_of(d, "retry_s");
    a->due = due_after(a->wait);
}

const struct ldpc_report *ldpc_device_peek(struct ldpc_device *dev)
{
    double now = ldpc_monotonic();
    if (dev->n_out == 2 && dev->outbox[0].not_before > now && dev->outbox[1].not_before <= now) {
        struct ldpc_report due = dev->outbox[1]; /* the due one first: pop takes index 0 */
        dev->outbox[1] = dev->outbox[0];
        dev->outbox[0] = due;
    }
    return dev->n_out && dev->outbox[0].not_before <= now ? &dev->outbox[0] : NULL;
}

uint8_t *ldpc_device_pop(struct ldpc_device *dev)
{
    uint8_t *data;
    if (dev->n_out == 0)
        return NULL;
    data = dev->outbox[0].data;
    dev->outbox[0] = dev->outbox[1];
    dev->n_out--;
    return data;
}

int ldpc_device_done(const struct ldpc_device *dev)
{
    int p;
    if (dev->exit_code != LDPC_RUNNING)
        return 1;
    if (dev->recurring) /* until rounds-done (rounds.c) */
        return 0;
    if (!dev->once || dev->config == NULL || dev->n_out || dev->awaiting[1].data || dev->awaiting[2].data)
        return 0;
    for (p = 1; p <= 2; p++)
        if (dev->in_phase[p] && !dev->delivered[p])
            return 0;
    return 1;
}
