/* Live metrics and campaign discovery: see agent.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "agent.h"

int ldpc_metric_read(const char *program, char *line, size_t cap)
{
    int fds[2], status = 0, done = 0;
    size_t n = 0;
    pid_t pid;
    double deadline = ldpc_monotonic() + LDPC_METRIC_TIMEOUT_S;
    if (cap < 2 || pipe(fds) != 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) { /* the child: stdout into the pipe, no shell, fixed argv, nothing else open
                       (not the broker's socket, not the ledger); async-signal-safe calls only */
        char *const argv[] = {(char *)program, NULL};
        int null = open("/dev/null", O_RDWR), fd;
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 2) < 0 || dup2(fds[1], 1) < 0)
            _exit(127);
        for (fd = 3; fd < LDPC_METRIC_MAX_FD; fd++)
            close(fd);
        execv(program, argv);
        _exit(127);
    }
    close(fds[1]);
    while (!done && n < cap - 1) { /* bounded: at most cap - 1 bytes, until the deadline */
        struct pollfd p = {fds[0], POLLIN, 0};
        double left = deadline - ldpc_monotonic();
        ssize_t got;
        int r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got = read(fds[0], line + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            done = 1;
        else
            n += (size_t)got;
        if (memchr(line, '\n', n) != NULL)
            done = 1;
    }
    close(fds[0]);
    /* the program had its chance: kill it if still running, then reap it */
    if (waitpid(pid, &status, WNOHANG) == 0) {
        while (ldpc_monotonic() < deadline && waitpid(pid, &status, WNOHANG) == 0)
            ldpc_sleep(0.005);
        if (waitpid(pid, &status, WNOHANG) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
    }
    line[n] = '\0';
    if (memchr(line, '\n', n) != NULL)
        *(char *)memchr(line, '\n', n) = '\0';
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || line[0] == '\0')
        return -1;
    return 0;
}

int ldpc_agent_init(struct ldpc_agent *a, const struct ldpc_identity *id, const char *state_dir,
                    struct ldpc_reason *why)
{
    memset(a, 0, sizeof *a);
    a->id = *id;
    snprintf(a->topic_ack, sizeof a->topic_ack, "ldp/+/a/%s", id->device_id);
    if (ldpc_ledger_open(&a->ledger, state_dir, id->eps_cap_milli, id->lifetime_budget_milli, why) != 0)
        return -1;
    if (a->ledger.keys != NULL
        && ldpc_keyset_load(&a->id.trusted, cJSON_GetObjectItemCaseSensitive(a->ledger.keys, "keys"), why) != 0)
        return -1;
    return 0;
}

int ldpc_agent_add_metric(struct ldpc_agent *a, const char *spec)
{
    const char *eq = strchr(spec, '=');
    size_t len = eq ? (size_t)(eq - spec) : 0;
    int i;
    if (eq == NULL || len == 0 || len > LDPC_METRIC_MAX || eq[1] == '\0' || a->n_metrics >= LDPC_MAX_METRICS)
        return -1;
    memcpy(a->metrics[a->n_metrics].name, spec, len);
    a->metrics[a->n_metrics].name[len] = '\0';
    if (!ldpc_valid_metric(a->metrics[a->n_metrics].name))
        return -1;
    for (i = 0; i < a->n_metrics; i++)
        if (strcmp(a->metrics[i].name, a->metrics[a->n_metrics].name) == 0)
            return -1;
    a->metrics[a->n_metrics++].program = eq + 1;
    return 0;
}

static void payload_free(struct ldpc_payload *p)
{
    free(p->data);
    free(p->p2);
    memset(p, 0, sizeof *p);
}

static uint8_t *copy_of(const void *payload, size_t len)
{
    uint8_t *c = malloc(len ? len : 1);
    if (c != NULL && len)
        memcpy(c, payload, len);
    return c;
}

static struct ldpc_device *device_of(struct ldpc_agent *a, const char *campaign)
{
    int i;
    for (i = 0; i < a->n_devs; i++)
        if (strcmp(a->devs[i]->campaign, campaign) == 0)
            return a->devs[i];
    return NULL;
}

/* The pending entry of `campaign`, a new one if there is room, else NULL. */
static struct ldpc_payload *pending_of(struct ldpc_agent *a, const char *campaign)
{
    int i;
    for (i = 0; i < a->n_pending; i++)
        if (strcmp(a->pending[i].campaign, campaign) == 0)
            return &a->pending[i];
    if (a->n_pending >= LDPC_MAX_CAMPAIGNS)
        return NULL;
    memset(&a->pending[a->n_pending], 0, sizeof a->pending[0]);
    snprintf(a->pending[a->n_pending].campaign, sizeof a->pending[0].campaign, "%s", campaign);
    return &a->pending[a->n_pending++];
}

static int judged_index(const struct ldpc_agent *a, const char *campaign)
{
    int i;
    for (i = 0; i < a->n_judged; i++)
        if (strcmp(a->judged[i].campaign, campaign) == 0)
            return i;
    return -1;
}

static void judge(struct ldpc_agent *a, const char *campaign, const uint8_t sha[32])
{
    int i = judged_index(a, campaign);
    if (i < 0) {
        i = a->n_judged < LDPC_MAX_JUDGED ? a->n_judged++ : a->next_judged;
        a->next_judged = (i + 1) % LDPC_MAX_JUDGED;
    }
    snprintf(a->judged[i].campaign, sizeof a->judged[i].campaign, "%s", campaign);
    memcpy(a->judged[i].sha256, sha, 32);
}

void ldpc_agent_on_message(struct ldpc_agent *a, const char *topic, const void *payload, size_t len)
{
    char campaign[65];
    const char *kind, *start;
    size_t n;
    struct ldpc_device *dev;
    struct ldpc_payload *p;
    if (strcmp(topic, LDPC_KEYS_TOPIC) == 0) {
        free(a->keys);
        a->keys = copy_of(payload, len);
        a->keys_len = len;
        return;
    }
    if (strncmp(topic, "ldp/", 4) != 0)
        return;
    start = topic + 4;
    kind = strchr(start, '/');
    n = kind ? (size_t)(kind - start) : 0;
    if (n == 0 || n >= sizeof campaign)
        return;
    memcpy(campaign, start, n);
    campaign[n] = '\0';
    kind++;
    dev = device_of(a, campaign);
    if (dev != NULL) {
        ldpc_device_on_message(dev, topic, payload, len);
        return;
    }
    if (len == 0 || (strcmp(kind, "config") != 0 && strcmp(kind, "phase2") != 0))
        return;
    if (strcmp(kind, "phase2") == 0 && judged_index(a, campaign) >= 0)
        return; /* a campaign skipped: its phase 2 is not kept */
    if ((p = pending_of(a, campaign)) == NULL)
        return;
    if (strcmp(kind, "config") == 0) {
        free(p->data);
        p->data = copy_of(payload, len);
        p->len = len;
    } else {
        free(p->p2);
        p->p2 = copy_of(payload, len);
        p->p2_len = len;
    }
}

/* A config of a campaign not joined: verified and checked; joined iff its metric is provided
 * (public); else skipped until another config comes on its topic. */
static void discover(struct ldpc_agent *a, struct ldpc_payload *p)
{
    struct ldpc_reason why;
    uint8_t sha[32];
    unsigned int mdlen = 0;
    int j, k = -1;
    const cJSON *metric, *type;
    struct ldpc_device *dev;
    cJSON *doc;
    EVP_Digest(p->data, p->len, sha, &mdlen, EVP_sha256(), NULL);
    j = judged_index(a, p->campaign);
    if (j >= 0 && memcmp(a->judged[j].sha256, sha, 32) == 0)
        return;
    doc = ldpc_envelope_verify(p->data, p->len, &a->id.trusted, &why);
    type = doc ? cJSON_GetObjectItemCaseSensitive(doc, "type") : NULL;
    if (doc != NULL && cJSON_IsString(type) && strcmp(type->valuestring, "close") == 0) {
        cJSON_Delete(doc); /* a close of a campaign never joined */
        judge(a, p->campaign, sha);
        return;
    }
    if (doc == NULL || ldpc_config_check(doc, ldpc_unix_now(), &why) != 0) {
        cJSON_Delete(doc);
        ldpc_log(a->id.device_id, "refused", "config %s %s: %s", p->campaign, why.field, why.message);
        if (strcmp(why.field, "kid") == 0 && a->n_kid_refused < LDPC_MAX_CAMPAIGNS) {
            a->kid_refused[a->n_kid_refused++] = *p; /* tried again after a key rotation */
            memset(p, 0, sizeof *p);
        } else {
            judge(a, p->campaign, sha);
        }
        return;
    }
    metric = cJSON_GetObjectItemCaseSensitive(doc, "metric");
    for (j = 0; j < a->n_metrics && cJSON_IsString(metric); j++)
        if (strcmp(a->metrics[j].name, metric->valuestring) == 0)
            k = j;
    if (k < 0 || strcmp(cJSON_GetObjectItemCaseSensitive(doc, "campaign")->valuestring, p->campaign) != 0
        || a->n_devs >= LDPC_MAX_CAMPAIGNS) {
        ldpc_log(a->id.device_id, "skip", "campaign %s (metric %s not provided)", p->campaign,
                 cJSON_IsString(metric) ? metric->valuestring : "None");
        cJSON_Delete(doc);
        judge(a, p->campaign, sha);
        return;
    }
    cJSON_Delete(doc);
    dev = calloc(1, sizeof *dev);
    if (dev == NULL || ldpc_device_init_live(dev, &a->id, p->campaign, &a->ledger, &a->metrics[k]) != 0) {
        free(dev);
        return;
    }
    a->devs[a->n_devs++] = dev;
    ldpc_log(a->id.device_id, "joined", "campaign %s metric %s", p->campaign, a->metrics[k].name);
    ldpc_device_on_message(dev, dev->topic_config, p->data, p->len);
    ldpc_device_process_inbox(dev);
    if (p->p2 != NULL) {
        ldpc_device_on_message(dev, dev->topic_phase2, p->p2, p->p2_len);
        ldpc_device_process_inbox(dev);
    }
}

void ldpc_agent_process(struct ldpc_agent *a)
{
    int i;
    if (a->keys != NULL) {
        int applied = ldpc_apply_keys(&a->ledger, &a->id.trusted, a->id.device_id, a->keys, a->keys_len);
        free(a->keys);
        a->keys = NULL;
        if (applied) {
            for (i = 0; i < a->n_devs; i++)
                ldpc_device_keys_rotated(a->devs[i], &a->id.trusted);
            for (i = 0; i < a->n_kid_refused; i++) {
                struct ldpc_payload *p = pending_of(a, a->kid_refused[i].campaign);
                if (p != NULL && p->data == NULL) {
                    p->data = a->kid_refused[i].data;
                    p->len = a->kid_refused[i].len;
                    a->kid_refused[i].data = NULL;
                }
                payload_free(&a->kid_refused[i]);
            }
            a->n_kid_refused = 0;
        }
    }
    for (i = 0; i < a->n_pending; i++) {
        if (a->pending[i].data != NULL)
            discover(a, &a->pending[i]);
        payload_free(&a->pending[i]);
    }
    a->n_pending = 0;
    for (i = 0; i < a->n_devs; i++)
        ldpc_device_process_inbox(a->devs[i]);
}

void ldpc_agent_free(struct ldpc_agent *a)
{
    int i;
    for (i = 0; i < a->n_devs; i++) {
        ldpc_device_free(a->devs[i]);
        free(a->devs[i]);
    }
    for (i = 0; i < a->n_pending; i++)
        payload_free(&a->pending[i]);
    for (i = 0; i < a->n_kid_refused; i++)
        payload_free(&a->kid_refused[i]);
    free(a->keys);
    ldpc_ledger_close(&a->ledger);
    memset(a, 0, sizeof *a);
}
