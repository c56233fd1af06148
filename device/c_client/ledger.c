/* Budget ledger that fails closed: see ledger.h (spec §7.4). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "envelope.h"
#include "ledger.h"

static const char *const FILES[2] = {"ledger.0", "ledger.1"};

#define LDPC_LEDGER_CRASH_EXIT 75 /* the crash-point exit code (LDPC_EXIT_CRASH_POINT) */

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

/* A growing text buffer for the canonical JSON. */
struct text {
    char *s;
    size_t len, cap;
    int failed;
};

static void put(struct text *t, const char *s)
{
    size_t n = strlen(s);
    if (t->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->cap + n + 1) * 2;
        char *grown = realloc(t->s, cap);
        if (grown == NULL) {
            t->failed = 1;
            return;
        }
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n + 1);
    t->len += n;
}

static void put_int(struct text *t, int64_t v)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)v);
    put(t, num);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The members of a JSON object sorted by name (heap array of *n pointers; NULL when out of
 * memory): the canonical order of the ledger's "reports" and "shc" objects. */
static const cJSON **sorted_members(const cJSON *obj, size_t *n)
{
    const cJSON *e, **sorted;
    size_t count = 0;
    cJSON_ArrayForEach(e, obj)
        count++;
    sorted = malloc((count ? count : 1) * sizeof *sorted);
    if (sorted == NULL)
        return NULL;
    count = 0;
    cJSON_ArrayForEach(e, obj)
        sorted[count++] = e;
    qsort(sorted, count, sizeof *sorted, cmp_names);
    *n = count;
    return sorted;
}

/* A ledger document as the canonical writer and a commit see it: the members of the ledger,
 * one of which a commit replaces. */
struct doc_view {
    int64_t spent, floor;
    int has_floor;
    const cJSON *reports, *closed, *keys, *shc, *bound, *enrol, *rounds;
};

static struct doc_view view_of(const struct ldpc_ledger *l)
{
    struct doc_view v;
    v.spent = l->spent_milli;
    v.floor = l->closed_floor;
    v.has_floor = l->has_closed_floor;
    v.reports = l->reports;
    v.closed = l->closed;
    v.keys = l->keys;
    v.shc = l->shc;
    v.bound = l->bound;
    v.enrol = l->enrol;
    v.rounds = l->rounds;
    return v;
}

/* {"<cid>": value, ...} members sorted as strings; `strings`: the values are (checked hex)
 * strings, else integers. */
static int put_id_map(struct text *t, const char *name, const cJSON *map, int strings)
{
    const cJSON **sorted;
    size_t n = 0, i;
    put(t, name);
    put(t, ":{");
    sorted = sorted_members(map, &n);
    if (sorted == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        put(t, i ? ",\"" : "\"");
        put(t, sorted[i]->string);
        put(t, "\":");
        if (strings) {
            put(t, "\"");
            put(t, sorted[i]->valuestring);
            put(t, "\"");
        } else {
            put_int(t, (int64_t)sorted[i]->valuedouble);
        }
    }
    free(sorted);
    put(t, "}");
    return 0;
}

/* The canonical JSON of a ledger document (sorted keys, no spaces: Python's
 * json.dumps(doc, sort_keys=True, separators=(",", ":"))), heap string or NULL. */
static char *canonical(const struct doc_view *d)
{
    struct text t = {NULL, 0, 0, 0};
    const cJSON *e, **sorted;
    size_t n = 0, i;
    int first = 1;
    put(&t, "{");
    if (d->bound != NULL) {
        if (put_id_map(&t, "\"bound\"", d->bound, 1) != 0) {
            free(t.s);
            return NULL;
        }
        put(&t, ",");
    }
    put(&t, "\"closed\":[");
    cJSON_ArrayForEach(e, d->closed) { /* a bare id, or [id, not_before] */
        if (!first)
            put(&t, ",");
        if (cJSON_IsArray(e)) {
            put(&t, "[");
            put_int(&t, (int64_t)cJSON_GetArrayItem(e, 0)->valuedouble);
            put(&t, ",");
            put_int(&t, (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble);
            put(&t, "]");
        } else {
            put_int(&t, (int64_t)e->valuedouble);
        }
        first = 0;
    }
    put(&t, "]");
    if (d->has_floor) {
        put(&t, ",\"closed_floor\":");
        put_int(&t, d->floor);
    }
    if (d->enrol != NULL) { /* {"<cid>":{"charge_milli":N,"state":"<hex>"}}: checked, sorted */
        sorted = sorted_members(d->enrol, &n);
        if (sorted == NULL) {
            free(t.s);
            return NULL;
        }
        put(&t, ",\"enrol\":{");
        for (i = 0; i < n; i++) {
            put(&t, i ? ",\"" : "\"");
            put(&t, sorted[i]->string);
            put(&t, "\":{\"charge_milli\":");
            put_int(&t, (int64_t)cJSON_GetObjectItemCaseSensitive(sorted[i], "charge_milli")->valuedouble);
            put(&t, ",\"state\":\"");
            put(&t, cJSON_GetObjectItemCaseSensitive(sorted[i], "state")->valuestring);
            put(&t, "\"}");
        }
        free(sorted);
        put(&t, "}");
    }
    if (d->keys != NULL) { /* {"keys":[{"kid","pub"}...],"serial":N}; kid/pub are checked hex */
        put(&t, ",\"keys\":{\"keys\":[");
        first = 1;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d->keys, "keys")) {
            put(&t, first ? "{\"kid\":\"" : ",{\"kid\":\"");
            put(&t, cJSON_GetObjectItemCaseSensitive(e, "kid")->valuestring);
            put(&t, "\",\"pub\":\"");
            put(&t, cJSON_GetObjectItemCaseSensitive(e, "pub")->valuestring);
            put(&t, "\"}");
            first = 0;
        }
        put(&t, "],\"serial\":");
        put_int(&t, (int64_t)cJSON_GetObjectItemCaseSensitive(d->keys, "serial")->valuedouble);
        put(&t, ",\"sha256\":\"");
        put(&t, cJSON_GetObjectItemCaseSensitive(d->keys, "sha256")->valuestring);
        put(&t, "\"}");
    }
    put(&t, ",\"reports\":{");
    sorted = sorted_members(d->reports, &n);
    if (sorted == NULL) {
        free(t.s);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (i)
            put(&t, ",");
        put(&t, "\"");
        put(&t, sorted[i]->string);
        put(&t, "\":[");
        put_int(&t, (int64_t)cJSON_GetArrayItem(sorted[i], 0)->valuedouble);
        put(&t, ",");
        put_int(&t, (int64_t)cJSON_GetArrayItem(sorted[i], 1)->valuedouble);
        put(&t, ",\"");
        put(&t, cJSON_GetArrayItem(sorted[i], 2)->valuestring);
        put(&t, "\"]");
    }
    free(sorted);
    put(&t, "}");
    if (d->rounds != NULL) { /* {"<cid>":[round,nonce,"<hex>"]}: checked, sorted */
        sorted = sorted_members(d->rounds, &n);
        if (sorted == NULL) {
            free(t.s);
            return NULL;
        }
        put(&t, ",\"rounds\":{");
        for (i = 0; i < n; i++) {
            put(&t, i ? ",\"" : "\"");
            put(&t, sorted[i]->string);
            put(&t, "\":[");
            put_int(&t, (int64_t)cJSON_GetArrayItem(sorted[i], 0)->valuedouble);
            put(&t, ",");
            put_int(&t, (int64_t)cJSON_GetArrayItem(sorted[i], 1)->valuedouble);
            put(&t, ",\"");
            put(&t, cJSON_GetArrayItem(sorted[i], 2)->valuestring);
            put(&t, "\"]");
        }
        free(sorted);
        put(&t, "}");
    }
    if (d->shc != NULL) { /* {"<cid>": 0|1, ...}: decimal keys (checked), sorted as strings */
        put(&t, ",");
        if (put_id_map(&t, "\"shc\"", d->shc, 0) != 0) {
            free(t.s);
            return NULL;
        }
    }
    put(&t, ",\"spent_milli\":");
    put_int(&t, d->spent);
    put(&t, "}");
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

static void sha256_hex(const char *text, char out[65])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)text, strlen(text), digest);
    ldpc_hex_encode(digest, sizeof digest, out);
}

/* A rotation held in the ledger (spec §5.3): {"serial" >= 1, "keys": a valid trusted set,
 * "sha256": 64 hex digits of the rotation message}. */
int ldpc_ledger_keys_valid(const cJSON *keys)
{
    struct ldpc_keyset set;
    struct ldpc_reason why;
    int64_t serial;
    const cJSON *e;
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(keys, "sha256");
    uint8_t raw[32];
    if (!cJSON_IsObject(keys) || cJSON_GetArraySize(keys) != 3 || !cJSON_IsString(sum)
        || strlen(sum->valuestring) != 64 || ldpc_hex_decode(sum->valuestring, raw, 32) != 0
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(keys, "serial"), &serial) || serial < 1
        || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(keys, "keys"))
        || ldpc_keyset_load(&set, cJSON_GetObjectItemCaseSensitive(keys, "keys"), &why) != 0)
        return 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(keys, "keys"))
        if (cJSON_GetArraySize(e) != 2)
            return 0;
    return 1;
}

/* A campaign id as an object key: decimal u32 without leading zeros. */
static int id_key_valid(const char *k)
{
    size_t n = strlen(k), i;
    if (n < 1 || n > 10 || (n > 1 && k[0] == '0'))
        return 0;
    for (i = 0; i < n; i++)
        if (k[i] < '0' || k[i] > '9')
            return 0;
    return strtoull(k, NULL, 10) <= 0xffffffffull;
}

/* The ledger's "shc" (spec §3.1, §7.4): {"<campaign_id>": 0 | 1}. */
static int shc_valid(const cJSON *shc)
{
    const cJSON *e;
    if (!cJSON_IsObject(shc))
        return 0;
    cJSON_ArrayForEach(e, shc) {
        int64_t bit;
        if (!id_key_valid(e->string) || !ldpc_json_int(e, &bit) || (bit != 0 && bit != 1))
            return 0;
    }
    return 1;
}

/* The ledger's "bound" (spec §7.2): {"<campaign_id>": 32 lowercase hex digits}. */
static int bound_valid(const cJSON *bound)
{
    const cJSON *e;
    if (!cJSON_IsObject(bound))
        return 0;
    cJSON_ArrayForEach(e, bound) {
        size_t i;
        if (!id_key_valid(e->string) || !cJSON_IsString(e) || strlen(e->valuestring) != 32)
            return 0;
        for (i = 0; i < 32; i++) {
            char c = e->valuestring[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                return 0;
        }
    }
    return 1;
}

/* Lowercase hex of whole bytes. */
static int hex_valid(const cJSON *v)
{
    size_t i, n;
    if (!cJSON_IsString(v) || (n = strlen(v->valuestring)) % 2 != 0)
        return 0;
    for (i = 0; i < n; i++) {
        char c = v->valuestring[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return 1;
}

/* The ledger's "enrol" (spec §3.4, §7.4): {"<campaign_id>": {"state": hex, "charge_milli": int >= 0}}. */
static int enrol_valid(const cJSON *enrol)
{
    const cJSON *e;
    int64_t charge;
    if (!cJSON_IsObject(enrol))
        return 0;
    cJSON_ArrayForEach(e, enrol)
        if (!id_key_valid(e->string) || !cJSON_IsObject(e) || cJSON_GetArraySize(e) != 2
            || !hex_valid(cJSON_GetObjectItemCaseSensitive(e, "state"))
            || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(e, "charge_milli"), &charge) || charge < 0)
            return 0;
    return 1;
}

/* The ledger's "rounds" (spec §3.4, §7.4): {"<campaign_id>": [round >= 1, nonce u32, hex]}. */
static int rounds_valid(const cJSON *rounds)
{
    const cJSON *e;
    int64_t r, nonce;
    if (!cJSON_IsObject(rounds))
        return 0;
    cJSON_ArrayForEach(e, rounds)
        if (!id_key_valid(e->string) || !cJSON_IsArray(e) || cJSON_GetArraySize(e) != 3
            || !ldpc_json_int(cJSON_GetArrayItem(e, 0), &r) || r < 1 || r > 0xffffffffll
            || !ldpc_json_int(cJSON_GetArrayItem(e, 1), &nonce) || nonce < 0 || nonce > 0xffffffffll
            || !hex_valid(cJSON_GetArrayItem(e, 2)))
            return 0;
    return 1;
}

/* A closed entry: a bare campaign id, or [campaign_id, not_before] (integers). */
static int closed_entry_valid(const cJSON *e)
{
    int64_t a, b;
    if (cJSON_IsArray(e))
        return cJSON_GetArraySize(e) == 2 && ldpc_json_int(cJSON_GetArrayItem(e, 0), &a)
               && ldpc_json_int(cJSON_GetArrayItem(e, 1), &b);
    return ldpc_json_int(e, &a);
}

/* The members of one generation, owned by the caller (optional ones NULL when absent). */
struct loaded {
    int64_t gen, spent, floor;
    int has_floor;
    cJSON *reports, *closed, *keys, *shc, *bound, *enrol, *rounds;
};

/* One generation file: 0 and its members (detached into `out`), -1 if it is missing (errno
 * ENOENT) or invalid (any other reason). */
static int read_generation(const char *path, struct loaded *out)
{
    size_t len;
    char *text = ldpc_read_file(path, &len), *canon, hex[65];
    cJSON *rec, *doc, *rep, *clo, *sum, *entry, *kys, *bits, *bnd, *flr, *enr, *rnd;
    struct doc_view v;
    int ok;
    if (text == NULL)
        return -1;
    memset(out, 0, sizeof *out);
    rec = cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    free(text);
    doc = cJSON_GetObjectItemCaseSensitive(rec, "doc");
    rep = cJSON_GetObjectItemCaseSensitive(doc, "reports");
    clo = cJSON_GetObjectItemCaseSensitive(doc, "closed");
    sum = cJSON_GetObjectItemCaseSensitive(rec, "sha256");
    kys = cJSON_GetObjectItemCaseSensitive(doc, "keys");
    bits = cJSON_GetObjectItemCaseSensitive(doc, "shc");
    bnd = cJSON_GetObjectItemCaseSensitive(doc, "bound");
    flr = cJSON_GetObjectItemCaseSensitive(doc, "closed_floor");
    enr = cJSON_GetObjectItemCaseSensitive(doc, "enrol");
    rnd = cJSON_GetObjectItemCaseSensitive(doc, "rounds");
    ok = rec != NULL && (enr == NULL || enrol_valid(enr)) && (rnd == NULL || rounds_valid(rnd)) && (kys == NULL || ldpc_ledger_keys_valid(kys)) && (bits == NULL || shc_valid(bits))
         && (bnd == NULL || bound_valid(bnd)) && (flr == NULL || ldpc_json_int(flr, &out->floor))
         && ldpc_json_int(cJSON_GetObjectItemCaseSensitive(rec, "gen"), &out->gen) && out->gen >= 0
         && ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "spent_milli"), &out->spent) && out->spent >= 0
         && cJSON_IsObject(rep) && cJSON_IsArray(clo) && cJSON_IsString(sum);
    if (ok) {
        cJSON_ArrayForEach(entry, rep) {
            int64_t a, b;
            const cJSON *hx = cJSON_GetArrayItem(entry, 2);
            ok &= cJSON_IsArray(entry) && cJSON_GetArraySize(entry) == 3
                  && ldpc_json_int(cJSON_GetArrayItem(entry, 0), &a) && ldpc_json_int(cJSON_GetArrayItem(entry, 1), &b)
                  && cJSON_IsString(hx) && strlen(hx->valuestring) % 2 == 0;
        }
        cJSON_ArrayForEach(entry, clo)
            ok &= closed_entry_valid(entry);
    }
    if (ok) {
        v.spent = out->spent;
        v.floor = out->floor;
        v.has_floor = flr != NULL;
        v.reports = rep;
        v.closed = clo;
        v.keys = kys;
        v.shc = bits;
        v.bound = bnd;
        v.enrol = enr;
        v.rounds = rnd;
        canon = canonical(&v);
        ok = canon != NULL;
        if (ok) {
            sha256_hex(canon, hex);
            ok = strcmp(hex, sum->valuestring) == 0;
        }
        free(canon);
    }
    if (!ok) {
        cJSON_Delete(rec);
        errno = EINVAL;
        return -1;
    }
    out->has_floor = flr != NULL;
    out->reports = cJSON_DetachItemViaPointer(doc, rep);
    out->closed = cJSON_DetachItemViaPointer(doc, clo);
    out->keys = kys ? cJSON_DetachItemViaPointer(doc, kys) : NULL;
    out->shc = bits ? cJSON_DetachItemViaPointer(doc, bits) : NULL;
    out->bound = bnd ? cJSON_DetachItemViaPointer(doc, bnd) : NULL;
    out->enrol = enr ? cJSON_DetachItemViaPointer(doc, enr) : NULL;
    out->rounds = rnd ? cJSON_DetachItemViaPointer(doc, rnd) : NULL;
    cJSON_Delete(rec);
    return 0;
}

static void loaded_free(struct loaded *g)
{
    cJSON_Delete(g->reports);
    cJSON_Delete(g->closed);
    cJSON_Delete(g->keys);
    cJSON_Delete(g->shc);
    cJSON_Delete(g->bound);
    cJSON_Delete(g->enrol);
    cJSON_Delete(g->rounds);
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

/* Test seam (test builds only): abort at a named step of a commit, as a power cut would. */
static void crash_point(const char *step)
{
#ifdef LDPC_TEST_MODES
    const char *want = getenv("LDPC_LEDGER_CRASH");
    if (want != NULL && strcmp(want, step) == 0)
        _exit(LDPC_LEDGER_CRASH_EXIT);
#else
    (void)step;
#endif
}

/* Generation `gen` of the document into its file (gen mod 2): write, fsync, fsync the dir. */
static int write_generation(const char *dir, const char *path, int64_t gen, const struct doc_view *d,
                            struct ldpc_reason *why)
{
    char *canon = canonical(d), hex[65], head[48], *rec;
    size_t n;
    int fd, dfd, rc = -1;
    if (canon == NULL) {
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    sha256_hex(canon, hex);
    snprintf(head, sizeof head, "{\"gen\":%lld,\"doc\":", (long long)gen);
    n = strlen(head) + strlen(canon) + 96;
    rec = malloc(n);
    if (rec == NULL) {
        free(canon);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    snprintf(rec, n, "%s%s,\"sha256\":\"%s\"}", head, canon, hex);
    free(canon);
    crash_point("before-write");
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        ldpc_reason_set(why, "ledger", "cannot write %s: %s", path, strerror(errno));
        free(rec);
        return -1;
    }
    if (write_all(fd, rec, strlen(rec) / 2) != 0) {
        ldpc_reason_set(why, "ledger", "cannot write %s: %s", path, strerror(errno));
        goto done;
    }
    crash_point("mid-write");
    if (write_all(fd, rec + strlen(rec) / 2, strlen(rec) - strlen(rec) / 2) != 0 || fsync(fd) != 0) {
        ldpc_reason_set(why, "ledger", "cannot write %s: %s", path, strerror(errno));
        goto done;
    }
    crash_point("after-write");
    dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        ldpc_reason_set(why, "ledger", "cannot sync the state directory: %s", strerror(errno));
        if (dfd >= 0)
            close(dfd);
        goto done;
    }
    close(dfd);
    rc = 0;
done:
    if (close(fd) != 0 && rc == 0) {
        ldpc_reason_set(why, "ledger", "cannot write %s: %s", path, strerror(errno));
        rc = -1;
    }
    free(rec);
    return rc;
}

int ldpc_ledger_provision(const char *state_dir, struct ldpc_reason *why)
{
    char *dir = join(state_dir, "."), *p0 = join(state_dir, FILES[0]), *p1 = join(state_dir, FILES[1]);
    cJSON *reports = cJSON_CreateObject(), *closed = cJSON_CreateArray();
    int rc = -1;
    if (dir == NULL || p0 == NULL || p1 == NULL || reports == NULL || closed == NULL) {
        ldpc_reason_set(why, "ledger", "out of memory");
    } else if (mkdir(state_dir, 0700) != 0 && errno != EEXIST) {
        ldpc_reason_set(why, "state_dir", "cannot create %s: %s", state_dir, strerror(errno));
    } else if (access(p0, F_OK) == 0 || access(p1, F_OK) == 0) {
        rc = 0; /* already provisioned: never overwrite a ledger */
    } else {
        struct doc_view v;
        memset(&v, 0, sizeof v);
        v.reports = reports;
        v.closed = closed;
        rc = write_generation(dir, p0, 0, &v, why);
    }
    free(dir);
    free(p0);
    free(p1);
    cJSON_Delete(reports);
    cJSON_Delete(closed);
    return rc;
}

int ldpc_ledger_open(struct ldpc_ledger *l, const char *state_dir, int64_t eps_cap_milli,
                     int64_t lifetime_budget_milli, struct ldpc_reason *why)
{
    int i, present = 0, found = 0;
    memset(l, 0, sizeof *l);
    l->eps_cap_milli = eps_cap_milli;
    l->lifetime_budget_milli = lifetime_budget_milli;
    l->dir = join(state_dir, ".");
    l->files[0] = join(state_dir, FILES[0]);
    l->files[1] = join(state_dir, FILES[1]);
    if (l->dir == NULL || l->files[0] == NULL || l->files[1] == NULL) {
        ldpc_reason_set(why, "ledger", "out of memory");
        ldpc_ledger_close(l);
        return -1;
    }
    for (i = 0; i < 2; i++) {
        struct loaded g;
        if (read_generation(l->files[i], &g) != 0) {
            present |= errno != ENOENT;
            continue;
        }
        present = 1;
        if (found && g.gen <= l->gen) {
            loaded_free(&g);
            continue;
        }
        cJSON_Delete(l->reports);
        cJSON_Delete(l->closed);
        cJSON_Delete(l->keys);
        cJSON_Delete(l->shc);
        cJSON_Delete(l->bound);
        cJSON_Delete(l->enrol);
        cJSON_Delete(l->rounds);
        l->enrol = g.enrol;
        l->rounds = g.rounds;
        l->keys = g.keys;
        l->shc = g.shc;
        l->bound = g.bound;
        l->gen = g.gen;
        l->spent_milli = g.spent;
        l->reports = g.reports;
        l->closed = g.closed;
        l->closed_floor = g.floor;
        l->has_closed_floor = g.has_floor;
        found = 1;
    }
    if (!found) {
        if (present)
            ldpc_reason_set(why, "ledger", "no valid generation in %s/ledger.{0,1} (checksum or format): "
                            "the device stops rather than reset its budget", state_dir);
        else
            ldpc_reason_set(why, "ledger", "no ledger in %s: provision the device (ldp_client --provision); "
                            "it never starts again from zero", state_dir);
        ldpc_ledger_close(l);
        return -1;
    }
    return 0;
}

void ldpc_ledger_close(struct ldpc_ledger *l)
{
    free(l->dir);
    free(l->files[0]);
    free(l->files[1]);
    cJSON_Delete(l->reports);
    cJSON_Delete(l->closed);
    cJSON_Delete(l->keys);
    cJSON_Delete(l->shc);
    cJSON_Delete(l->bound);
    cJSON_Delete(l->enrol);
    cJSON_Delete(l->rounds);
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

/* Write `v` as the next generation; 0 (l->gen advanced: the caller installs the members it
 * replaced) or -1 with the reason. */
static int commit_view(struct ldpc_ledger *l, const struct doc_view *v, struct ldpc_reason *why)
{
    int64_t gen = l->gen + 1;
    if (write_generation(l->dir, l->files[gen % 2], gen, v, why) != 0)
        return -1;
    l->gen = gen;
    return 0;
}

/* A copy of an id map with `key` set to `value` (taken), or NULL when out of memory. */
static cJSON *map_with(const cJSON *map, const char *key, cJSON *value)
{
    cJSON *copy = map != NULL ? cJSON_Duplicate(map, 1) : cJSON_CreateObject();
    if (copy == NULL || value == NULL) {
        cJSON_Delete(copy);
        cJSON_Delete(value);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(copy, key);
    cJSON_AddItemToObject(copy, key, value);
    return copy;
}

int ldpc_ledger_commit(struct ldpc_ledger *l, const struct ldpc_spend *sp, struct ldpc_reason *why)
{
    char key[32], cid[16], *hex;
    const char *held;
    cJSON *reports, *entry, *shc = NULL, *bound = NULL;
    struct doc_view v = view_of(l);
    if (ldpc_ledger_check(l, sp->eps_milli, why) != 0)
        return -1;
    if (ldpc_ledger_has(l, sp->campaign_id, sp->phase)) {
        ldpc_reason_set(why, "memo", "campaign %lu phase %d already reported", (unsigned long)sp->campaign_id,
                        sp->phase);
        return -1;
    }
    held = ldpc_ledger_bound_digest(l, sp->campaign_id);
    if (sp->digest == NULL || strlen(sp->digest) != 32 || (held != NULL && strcmp(held, sp->digest) != 0)) {
        ldpc_reason_set(why, "bound", "campaign id %lu is bound to another config", (unsigned long)sp->campaign_id);
        return -1;
    }
    memo_key(key, sizeof key, sp->campaign_id, sp->phase);
    snprintf(cid, sizeof cid, "%lu", (unsigned long)sp->campaign_id);
    hex = malloc(2 * sp->len + 1);
    reports = cJSON_Duplicate(l->reports, 1);
    entry = cJSON_CreateArray();
    if (held == NULL) /* the id's first spend binds it to its config (spec §7.2) */
        bound = map_with(l->bound, cid, cJSON_CreateString(sp->digest));
    if (sp->shc_bit >= 0) /* shc phase 1: its bit x in the same generation as the memo (spec §7.4) */
        shc = map_with(l->shc, cid, cJSON_CreateNumber(sp->shc_bit ? 1 : 0));
    if (hex == NULL || reports == NULL || entry == NULL || (held == NULL && bound == NULL)
        || (sp->shc_bit >= 0 && shc == NULL)) {
        free(hex);
        cJSON_Delete(reports);
        cJSON_Delete(entry);
        cJSON_Delete(shc);
        cJSON_Delete(bound);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    ldpc_hex_encode(sp->report, sp->len, hex);
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)sp->nonce));
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)sp->eps_milli));
    cJSON_AddItemToArray(entry, cJSON_CreateString(hex));
    free(hex);
    cJSON_AddItemToObject(reports, key, entry);
    v.spent = l->spent_milli + sp->eps_milli;
    v.reports = reports;
    if (shc != NULL)
        v.shc = shc;
    if (bound != NULL)
        v.bound = bound;
    if (commit_view(l, &v, why) != 0) {
        cJSON_Delete(reports);
        cJSON_Delete(shc);
        cJSON_Delete(bound);
        return -1;
    }
    l->spent_milli = v.spent;
    cJSON_Delete(l->reports);
    l->reports = reports;
    if (shc != NULL) {
        cJSON_Delete(l->shc);
        l->shc = shc;
    }
    if (bound != NULL) {
        cJSON_Delete(l->bound);
        l->bound = bound;
    }
    return 0;
}

const char *ldpc_ledger_bound_digest(const struct ldpc_ledger *l, uint32_t campaign_id)
{
    char cid[16];
    const cJSON *d;
    snprintf(cid, sizeof cid, "%lu", (unsigned long)campaign_id);
    d = l->bound != NULL ? cJSON_GetObjectItemCaseSensitive(l->bound, cid) : NULL;
    return cJSON_IsString(d) ? d->valuestring : NULL;
}

int64_t ldpc_ledger_memo_eps(const struct ldpc_ledger *l, uint32_t campaign_id, int phase)
{
    const cJSON *entry = entry_of(l, campaign_id, phase);
    int64_t eps;
    return entry != NULL && ldpc_json_int(cJSON_GetArrayItem(entry, 1), &eps) ? eps : -1;
}

int ldpc_ledger_shc_bit(const struct ldpc_ledger *l, uint32_t campaign_id)
{
    char cid[16];
    const cJSON *bit;
    snprintf(cid, sizeof cid, "%lu", (unsigned long)campaign_id);
    bit = l->shc != NULL ? cJSON_GetObjectItemCaseSensitive(l->shc, cid) : NULL;
    return bit != NULL && cJSON_IsNumber(bit) ? (bit->valuedouble != 0) : -1;
}

/* A closed entry's id and not_before (0 for a bare id: written before closes carried it). */
static uint32_t closed_id(const cJSON *e)
{
    return (uint32_t)(cJSON_IsArray(e) ? cJSON_GetArrayItem(e, 0) : e)->valuedouble;
}

static int64_t closed_not_before(const cJSON *e)
{
    return cJSON_IsArray(e) ? (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble : 0;
}

int ldpc_ledger_is_closed(const struct ldpc_ledger *l, uint32_t campaign_id)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, l->closed)
        if (closed_id(e) == campaign_id)
            return 1;
    return 0;
}

int ldpc_ledger_below_floor(const struct ldpc_ledger *l, int64_t not_before)
{
    return l->has_closed_floor && not_before <= l->closed_floor;
}

int ldpc_ledger_close_campaign(struct ldpc_ledger *l, uint32_t campaign_id, int64_t not_before,
                               struct ldpc_reason *why)
{
    cJSON *closed, *entry, *enrol = NULL, *rounds = NULL;
    char cid[16];
    struct doc_view v = view_of(l);
    if (ldpc_ledger_is_closed(l, campaign_id))
        return 0;
    closed = cJSON_Duplicate(l->closed, 1);
    entry = cJSON_CreateArray();
    if (closed == NULL || entry == NULL) {
        cJSON_Delete(closed);
        cJSON_Delete(entry);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)campaign_id));
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)not_before));
    cJSON_AddItemToArray(closed, entry);
    while (cJSON_GetArraySize(closed) > LDPC_LEDGER_MAX_CLOSED) {
        /* evict the lowest not_before (the first such); the watermark rises to it */
        int i = 0, low = 0;
        int64_t evicted;
        const cJSON *e;
        cJSON_ArrayForEach(e, closed) {
            if (closed_not_before(e) < closed_not_before(cJSON_GetArrayItem(closed, low)))
                low = i;
            i++;
        }
        evicted = closed_not_before(cJSON_GetArrayItem(closed, low));
        cJSON_DeleteItemFromArray(closed, low);
        if (evicted > 0 && (!v.has_floor || evicted > v.floor)) {
            v.floor = evicted;
            v.has_floor = 1;
        }
    }
    v.closed = closed;
    /* a recurring campaign's enrolment state and round memo go with the close (spec §3.4);
     * its spend stays charged */
    snprintf(cid, sizeof cid, "%lu", (unsigned long)campaign_id);
    if (cJSON_GetObjectItemCaseSensitive(l->enrol, cid) != NULL) {
        enrol = cJSON_Duplicate(l->enrol, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(enrol, cid);
        v.enrol = enrol;
    }
    if (cJSON_GetObjectItemCaseSensitive(l->rounds, cid) != NULL) {
        rounds = cJSON_Duplicate(l->rounds, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(rounds, cid);
        v.rounds = rounds;
    }
    if (v.enrol == NULL && l->enrol != NULL) /* out of memory: keep the entries */
        v.enrol = l->enrol;
    if (v.rounds == NULL && l->rounds != NULL)
        v.rounds = l->rounds;
    if (commit_view(l, &v, why) != 0) {
        cJSON_Delete(closed);
        cJSON_Delete(enrol);
        cJSON_Delete(rounds);
        return -1;
    }
    if (enrol != NULL) {
        cJSON_Delete(l->enrol);
        l->enrol = enrol;
    }
    if (rounds != NULL) {
        cJSON_Delete(l->rounds);
        l->rounds = rounds;
    }
    cJSON_Delete(l->closed);
    l->closed = closed;
    l->closed_floor = v.floor;
    l->has_closed_floor = v.has_floor;
    return 0;
}

int64_t ldpc_ledger_keys_serial(const struct ldpc_ledger *l)
{
    return l->keys ? (int64_t)cJSON_GetObjectItemCaseSensitive(l->keys, "serial")->valuedouble : 0;
}

int ldpc_ledger_set_keys(struct ldpc_ledger *l, int64_t serial, const cJSON *key_list, const char *sha256_hex,
                         struct ldpc_reason *why)
{
    cJSON *keys = cJSON_CreateObject(), *list = cJSON_Duplicate(key_list, 1);
    struct doc_view v;
    if (keys == NULL || list == NULL) {
        cJSON_Delete(keys);
        cJSON_Delete(list);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    cJSON_AddItemToObject(keys, "keys", list);
    cJSON_AddItemToObject(keys, "serial", cJSON_CreateNumber((double)serial));
    cJSON_AddItemToObject(keys, "sha256", cJSON_CreateString(sha256_hex));
    if (!ldpc_ledger_keys_valid(keys)) {
        cJSON_Delete(keys);
        ldpc_reason_set(why, "keys", "not a valid trusted set");
        return -1;
    }
    v = view_of(l);
    v.keys = keys;
    if (commit_view(l, &v, why) != 0) {
        cJSON_Delete(keys);
        return -1;
    }
    cJSON_Delete(l->keys);
    l->keys = keys;
    return 0;
}

const char *ldpc_ledger_keys_digest(const struct ldpc_ledger *l)
{
    return l->keys ? cJSON_GetObjectItemCaseSensitive(l->keys, "sha256")->valuestring : NULL;
}

/* --- recurring campaigns (spec §3.4) -------------------------------------------------------- */

static uint8_t *hex_copy(const char *hex, size_t *len)
{
    uint8_t *out;
    *len = strlen(hex) / 2;
    out = malloc(*len ? *len : 1);
    if (out == NULL || ldpc_hex_decode(hex, out, *len) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

uint8_t *ldpc_ledger_enrolment(const struct ldpc_ledger *l, uint32_t campaign_id, size_t *len, int64_t *charge_milli)
{
    char cid[16];
    const cJSON *e;
    snprintf(cid, sizeof cid, "%lu", (unsigned long)campaign_id);
    e = cJSON_GetObjectItemCaseSensitive(l->enrol, cid);
    if (e == NULL)
        return NULL;
    if (charge_milli != NULL)
        *charge_milli = (int64_t)cJSON_GetObjectItemCaseSensitive(e, "charge_milli")->valuedouble;
    return hex_copy(cJSON_GetObjectItemCaseSensitive(e, "state")->valuestring, len);
}

int ldpc_ledger_enrol(struct ldpc_ledger *l, const struct ldpc_enrolment *en, struct ldpc_reason *why)
{
    char cid[16], *hex;
    const char *held = ldpc_ledger_bound_digest(l, en->campaign_id);
    cJSON *enrol, *entry, *bound = NULL;
    struct doc_view v = view_of(l);
    if (en->eps_milli > l->eps_cap_milli) {
        ldpc_reason_set(why, "eps_cap", "eps_milli %lld above the device cap %lld", (long long)en->eps_milli,
                        (long long)l->eps_cap_milli);
        return -1;
    }
    if (en->charge_milli > ldpc_ledger_remaining(l)) {
        ldpc_reason_set(why, "lifetime_budget", "enrolment charge eps_milli %lld above the remaining budget %lld",
                        (long long)en->charge_milli, (long long)ldpc_ledger_remaining(l));
        return -1;
    }
    snprintf(cid, sizeof cid, "%lu", (unsigned long)en->campaign_id);
    if (cJSON_GetObjectItemCaseSensitive(l->enrol, cid) != NULL) {
        ldpc_reason_set(why, "memo", "campaign %s already enrolled", cid);
        return -1;
    }
    if (en->digest == NULL || strlen(en->digest) != 32 || (held != NULL && strcmp(held, en->digest) != 0)) {
        ldpc_reason_set(why, "bound", "campaign id %s is bound to another config", cid);
        return -1;
    }
    hex = malloc(2 * en->state_len + 1);
    entry = cJSON_CreateObject();
    if (hex != NULL)
        ldpc_hex_encode(en->state, en->state_len, hex);
    if (hex == NULL || entry == NULL || cJSON_AddNumberToObject(entry, "charge_milli", (double)en->charge_milli) == NULL
        || cJSON_AddStringToObject(entry, "state", hex) == NULL) {
        free(hex);
        cJSON_Delete(entry);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    free(hex);
    enrol = map_with(l->enrol, cid, entry);
    if (held == NULL) /* the id's first spend binds it to its config (spec §7.2) */
        bound = map_with(l->bound, cid, cJSON_CreateString(en->digest));
    if (enrol == NULL || (held == NULL && bound == NULL)) {
        cJSON_Delete(enrol);
        cJSON_Delete(bound);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    v.spent = l->spent_milli + en->charge_milli; /* spend, state and binding in one generation */
    v.enrol = enrol;
    if (bound != NULL)
        v.bound = bound;
    if (commit_view(l, &v, why) != 0) {
        cJSON_Delete(enrol);
        cJSON_Delete(bound);
        return -1;
    }
    l->spent_milli = v.spent;
    cJSON_Delete(l->enrol);
    l->enrol = enrol;
    if (bound != NULL) {
        cJSON_Delete(l->bound);
        l->bound = bound;
    }
    return 0;
}

uint8_t *ldpc_ledger_round_memo(const struct ldpc_ledger *l, uint32_t campaign_id, uint32_t *round, size_t *len)
{
    char cid[16];
    const cJSON *e;
    snprintf(cid, sizeof cid, "%lu", (unsigned long)campaign_id);
    e = cJSON_GetObjectItemCaseSensitive(l->rounds, cid);
    if (e == NULL)
        return NULL;
    *round = (uint32_t)cJSON_GetArrayItem(e, 0)->valuedouble;
    return hex_copy(cJSON_GetArrayItem(e, 2)->valuestring, len);
}

int ldpc_ledger_commit_round(struct ldpc_ledger *l, uint32_t campaign_id, uint32_t round, uint32_t nonce,
                             const uint8_t *report, size_t len, struct ldpc_reason *why)
{
    char cid[16], *hex;
    cJSON *rounds, *entry;
    struct doc_view v = view_of(l);
    snprintf(cid, sizeof cid, "%lu", (unsigned long)campaign_id);
    if (cJSON_GetObjectItemCaseSensitive(l->enrol, cid) == NULL) {
        ldpc_reason_set(why, "memo", "campaign %s has no enrolment", cid);
        return -1;
    }
    hex = malloc(2 * len + 1);
    entry = cJSON_CreateArray();
    if (hex == NULL || entry == NULL) {
        free(hex);
        cJSON_Delete(entry);
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    ldpc_hex_encode(report, len, hex);
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)round));
    cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)nonce));
    cJSON_AddItemToArray(entry, cJSON_CreateString(hex));
    free(hex);
    rounds = map_with(l->rounds, cid, entry); /* replaces the previous round's memo */
    if (rounds == NULL) {
        ldpc_reason_set(why, "ledger", "out of memory");
        return -1;
    }
    v.rounds = rounds;
    if (commit_view(l, &v, why) != 0) {
        cJSON_Delete(rounds);
        return -1;
    }
    cJSON_Delete(l->rounds);
    l->rounds = rounds;
    return 0;
}
