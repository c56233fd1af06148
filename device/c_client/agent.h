/* Live metrics and campaign discovery for the C client (protocol_spec/v2 §5.4 `metric`):
 * `ldp_client --metric NAME=PROGRAM` (repeatable) subscribes to `ldp/+/config` and takes part
 * in every campaign whose valid signed config names a metric it provides: one ldpc_device per
 * such campaign (device.c: the decisions, unchanged), all over one ledger and one trusted key
 * set. At each fresh report PROGRAM runs (execv, no shell, argv = {PROGRAM}, stdin /dev/null,
 * stderr discarded) and its first output line (at most LDPC_METRIC_LINE - 1 bytes, read within
 * LDPC_METRIC_TIMEOUT_S) is the reading, taken as --value takes its text; a program that
 * cannot start, fails, times out or prints nothing gives no value (⊥ / the grid's midpoint).
 * Which campaigns are joined depends only on the metric names given (public), never on a
 * reading. The MicroPython client's ldp/agent.py is the same design. */
#ifndef LDPC_AGENT_H
#define LDPC_AGENT_H
#include <stddef.h>
#include <stdint.h>

#include "device.h"

#define LDPC_METRIC_LINE 256
#define LDPC_METRIC_TIMEOUT_S 5.0
#define LDPC_METRIC_MAX_FD 1024 /* the child closes every descriptor from 3 below this */
#define LDPC_MAX_CAMPAIGNS 32 /* campaigns joined at once; configs beyond are skipped */
#define LDPC_MAX_JUDGED 64    /* skipped configs remembered (not verified again) */

/* Runs `program` and writes its first output line (NUL-terminated, without the newline) into
 * `line`: 0, or -1 (not started, killed after the timeout, non-zero exit, no output). */
int ldpc_metric_read(const char *program, char *line, size_t cap);

struct ldpc_payload {
    char campaign[65];
    uint8_t *data, *p2; /* a config, and a phase-2 message that came before it was judged */
    size_t len, p2_len;
};

struct ldpc_agent {
    struct ldpc_identity id; /* id.trusted: the key set of every campaign */
    struct ldpc_ledger ledger;
    struct ldpc_metric metrics[LDPC_MAX_METRICS];
    int n_metrics;
    struct ldpc_device *devs[LDPC_MAX_CAMPAIGNS];
    int n_devs;
    struct ldpc_payload pending[LDPC_MAX_CAMPAIGNS], kid_refused[LDPC_MAX_CAMPAIGNS];
    int n_pending, n_kid_refused;
    struct {
        char campaign[65];
        uint8_t sha256[32];
    } judged[LDPC_MAX_JUDGED];
    int n_judged, next_judged;
    uint8_t *keys;
    size_t keys_len;
    char topic_ack[160];
};

/* The identity's ledger in `state_dir` (missing or corrupt: -1, field `ledger`). */
int ldpc_agent_init(struct ldpc_agent *a, const struct ldpc_identity *id, const char *state_dir,
                    struct ldpc_reason *why);
/* `spec` is NAME=PROGRAM, NAME matching [a-z][a-z0-9_]{0,31}, given once; 0 or -1. */
int ldpc_agent_add_metric(struct ldpc_agent *a, const char *spec);
void ldpc_agent_on_message(struct ldpc_agent *a, const char *topic, const void *payload, size_t len);
void ldpc_agent_process(struct ldpc_agent *a);
void ldpc_agent_free(struct ldpc_agent *a);

#endif
