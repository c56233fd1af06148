/* Budget ledger: see ledger.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envelope.h"
#include "ledger.h"

#define FILE_NAME "ledger.json"

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%s/%s", dir, name);
    return out;
}

static void memo_key(char *out, size_t size, uint32_t campaign_id, int phase)
{
    snprintf(out, size, "%lu:%d", (unsigned long)campaign_id, phase);
}

static int load(struct ldpc_ledger *l, struct ldpc_reason *why)
{
    size_t len;
    char *text = ldpc_read_file(l->path, &len);
    cJSON *doc, *reports, *entry;
    int64_t spent, seq;
    if (text == NULL) {
        if (errno == ENOENT)
            return 0; /* a fresh device: nothing spent yet */
        ldpc_reason_set(why, "ledger", "cannot read %s: %s", l->path, strerror(errno));
        return -1;
    }
    doc = cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    free(text);
    reports = cJSON_GetObjectItemCaseSensitive(doc, "reports");
    if (doc == NULL || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "spent_milli"), &spent)
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "next_seq"), &seq) || seq < 0
        || seq > 0xffffffffll || spent < 0 || !cJSON_IsObject(reports)) {
        cJSON_Delete(doc);
        ldpc_reason_set(why, "ledger", "%s is corrupt; refusing to guess the budget spent", l->path);
        return -1;
    }
    cJSON_ArrayForEach(entry, reports) {
        int64_t s, e;
        const cJSON *hex = cJSON_GetArrayItem(entry, 2);
        if (!cJSON_IsArray(entry) || cJSON_GetArraySize(entry) != 3 || !ldpc_json_int(cJSON_GetArrayItem(entry, 0), &s)
            || !ldpc_json_int(cJSON_GetArrayItem(entry, 1), &e) || !cJSON_IsString(hex)
            || strlen(hex->valuestring) % 2 != 0) {
            cJSON_Delete(doc);
            ldpc_reason_set(why, "ledger", "%s has a malformed report entry", l->path);
            return -1;
        }
    }
    l->spent_milli = spent;
    l->next_seq = (uint32_t)seq;
    l->reports = cJSON_DetachItemViaPointer(doc, reports);
    cJSON_Delete(doc);
    return 0;
}

int ldpc_ledger_open(struct ldpc_ledger *l, const char *state_dir, int64_t eps_cap_milli,
                     int64_t lifetime_budget_milli, struct ldpc_reason *why)
{
    memset(l, 0, sizeof *l);
    l->eps_cap_milli = eps_cap_milli;
    l->lifetime_budget_milli = lifetime_budget_milli;
    if (mkdir(state_dir, 0700) != 0 && errno != EEXIST) {
        ldpc_reason_set(why, "state_dir", "cannot create %s: %s", state_dir, strerror(errno));
        return -1;
    }
    l->dir = join(state_dir, ".");
    l->path = join(state_dir, FILE_NAME);
    l->tmp = join(state_dir, FILE_NAME ".tmp");
    if (l->dir == NULL || l->path == NULL || l->tmp == NULL) {
        ldpc_reason_set(why, "ledger", "out of memory");
        ldpc_ledger_close(l);
        return -1;
    }
    /* a leftover temp file never committed (the crash came before the rename, so that report
     * never left either): the committed file is the truth */
    unlink(l->tmp);
    if (load(l, why) != 0) {
        ldpc_ledger_close(l);
        return -1;
    }
    if (l->reports == NULL)
        l->reports = cJSON_CreateObject();
    return 0;
}

void ldpc_ledger_close(struct ldpc_ledger *l)
{
    free(l->dir);
    free(l->path);
    free(l->tmp);
    cJSON_Delete(l->reports);
    memset(l, 0, sizeof *l);
}

int64_t ldpc_ledger_remaining(const struct ldpc_ledger *l)
{
    return l->lifetime_budget_milli - l->spent_milli;
}

static const cJSON *entry_of(const struct ldpc_ledger *l, uint32_t campaign_id, int phase)
{
    char key[32];
    memo_key(key, sizeof key, campaign_id, phase);
    return cJSON_GetObjectItemCaseSensitive(l->reports, key);
}

int ldpc_ledger_has(const struct ldpc_ledger *l, uint32_t campaign_id, int phase)
{
    return entry_of(l, campaign_id, phase) != NULL;
}

uint8_t *ldpc_ledger_memo(const struct ldpc_ledger *l, uint32_t campaign_id, int phase, size_t *len)
{
    const cJSON *entry = entry_of(l, campaign_id, phase);
    const char *hex;
    uint8_t *out;
    if (entry == NULL)
        return NULL;
    hex = cJSON_GetArrayItem(entry, 2)->valuestring;
    *len = strlen(hex) / 2;
    out = malloc(*len ? *len : 1);
    if (out == NULL || ldpc_hex_decode(hex, out, *len) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

int ldpc_ledger_check(const struct ldpc_ledger *l, int64_t eps_milli, struct ldpc_reason *why)
{
    if (eps_milli > l->eps_cap_milli) {
        ldpc_reason_set(why, "eps_cap", "eps_milli %lld above the device cap %lld", (long long)eps_milli,
                        (long long)l->eps_cap_milli);
        return -1;
    }
    if (eps_milli > ldpc_ledger_remaining(l)) {
        ldpc_reason_set(why, "lifetime_budget", "eps_milli %lld above the remaining budget %lld",
                        (long long)eps_milli, (long long)ldpc_ledger_remaining(l));
        return -1;
    }
    return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* temp file -> fsync -> rename over the ledger -> fsync the directory (the rename itself). */
static int write_atomically(const struct ldpc_ledger *l, const char *text, struct ldpc_reason *why)
{
    int fd = open(l->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), dfd;
    if (fd < 0) {
        ldpc_reason_set(why, "ledger", "cannot write %s: %s", l->tmp, strerror(errno));
        return -1;
    }
    if (write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
        ldpc_reason_set(why, "ledger", "cannot write %s: %s", l->tmp, strerror(errno));
        close(fd);
        unlink(l->tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(l->tmp, l->path) != 0) {
        ldpc_reason_set(why, "ledger", "cannot commit %s: %s", l->path, strerror(errno));
        unlink(l->tmp);
        return -1;
    }
    dfd = open(l->dir, O_RDONLY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        ldpc_reason_set(why, "ledger", "cannot sync the state directory: %s", strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    close(dfd);
    return 0;
}

int ldpc_ledger_commit(struct ldpc_ledger *l, uint32_t campaign_id, int phase, int64_t eps_milli,
                       uint32_t seq, const uint8_t *report, size_t len, struct ldpc_reason *why)
{
    char key[32], *hex, *text;
    cJSON *doc, *reports, *entry;
    int rc;
    if (ldpc_ledger_check(l, eps_milli, why) != 0)
        return -1;
    if (ldpc_ledger_has(l, campaign_id, phase)) {
        ldpc_reason_set(why, "memo", "campaign %lu phase %d already reported", (unsigned long)campaign_id, phase);
        return -1;
    }
    memo_key(key, sizeof key, campaign_id, phase);
    hex = malloc(2 * len + 1);
    doc = cJSON_CreateObject();
    reports = cJSON_Duplicate(l->reports, 1);
    entry = cJSON_CreateArray();
    if (hex == NULL || doc == NULL || reports == NULL || entry == NULL) {
        free(hex);
        cJSON_Delete(doc);
        cJSON_Delete(reports);
        cJSON_Delete(entry);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    ldpc_hex_encode(report, len, hex);
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)seq));
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)eps_milli));
    cJSON_AddItemToArray(entry, cJSON_CreateString(hex));
    free(hex);
    cJSON_AddItemToObject(reports, key, entry);
    cJSON_AddNumberToObject(doc, "spent_milli", (double)(l->spent_milli + eps_milli));
    cJSON_AddNumberToObject(doc, "next_seq", (double)(uint32_t)(seq + 1u));
    cJSON_AddItemToObject(doc, "reports", reports);
    text = cJSON_PrintUnformatted(doc);
    rc = text == NULL ? -1 : write_atomically(l, text, why);
    if (text == NULL)
        ldpc_reason_set(why, "ledger", "out of memory");
    free(text);
    if (rc == 0) {
        l->spent_milli += eps_milli;
        l->next_seq = seq + 1u;
        cJSON_Delete(l->reports);
        l->reports = cJSON_DetachItemViaPointer(doc, reports);
    }
    cJSON_Delete(doc);
    return rc;
}
