/* The device logic of the C client, independent of MQTT: the same decisions, in the same
 * order and with the same log lines, as the MicroPython client (device/ldp/device.py).
 *
 * Every accepted trigger (a config or phase-2 message, including the retained copy the broker
 * sends after every reconnect) (re)queues the campaign phase's report: fresh and ledgered the
 * first time, the memoised bytes ever after. The aggregator dedupes by (device id, nonce).
 * With the config's delivery.ack the device re-sends a report until its acknowledgement
 * (spec §6) arrives on its ack topic, the campaign closes, or not_after passes. With its
 * delivery.spread_s every publish a trigger queues waits its own U[0, spread_s) from the OS
 * RNG (spec §6), drawn when it is queued; acknowledgement re-sends keep their own timers. */
#ifndef LDPC_DEVICE_H
#define LDPC_DEVICE_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "envelope.h"
#include "ledger.h"
#include "mech.h"
#include "value.h"

/* A live metric (spec §5.4 `metric`): its name and the program whose first output line is the
 * reading (agent.c runs it, no shell, fixed argv). */
#define LDPC_MAX_METRICS 16
struct ldpc_metric {
    char name[LDPC_METRIC_MAX + 1];
    const char *program;
};

#define LDPC_EXIT_DONE 0
#define LDPC_EXIT_USAGE 1
#define LDPC_EXIT_REFUSED 2
#define LDPC_EXIT_TIMEOUT 3
#define LDPC_EXIT_CRASH_POINT 75
#define LDPC_RUNNING (-1)

#define LDPC_MAX_CREDENTIAL 256 /* longest broker host, user or password, NUL included */

/* The identity file's optional "broker": {host, port, user, password, tls: {ca_file,
 * cert_file, key_file}} (device/README.md); an absent entry leaves its has_ flag 0. The files
 * are PEM, relative to the state directory unless absolute; with ca_file the client speaks TLS,
 * with cert_file and key_file it logs in with its client certificate (the broker takes the
 * certificate's CN as the login: use_identity_as_username). */
struct ldpc_broker {
    char host[LDPC_MAX_CREDENTIAL], user[LDPC_MAX_CREDENTIAL], password[LDPC_MAX_CREDENTIAL];
    char ca_file[LDPC_MAX_CREDENTIAL], cert_file[LDPC_MAX_CREDENTIAL], key_file[LDPC_MAX_CREDENTIAL];
    int port;
    int has_host, has_port, has_user, has_password, has_ca_file, has_cert_file, has_key_file;
};

struct ldpc_identity {
    char device_id[65];
    struct ldpc_keyset trusted; /* public keys only (spec §5.2) */
    int64_t eps_cap_milli, lifetime_budget_milli;
    struct ldpc_broker broker;
    uint8_t ack_key[32];        /* this device's acknowledgement key (spec §6), when has_ack_key */
    int has_ack_key;
};

struct ldpc_report {
    int phase;
    uint8_t *data;
    size_t len;
    double not_before; /* ldpc_monotonic() seconds: published from then on (spec §6 spread) */
};

#define LDPC_ACK_SIZE 12     /* a plain acknowledgement (spec §6) */
#define LDPC_ACK_MAC_SIZE 28 /* one with its 16-byte tag */
#define LDPC_MAX_ACKS 8

/* A published report waiting for its acknowledgement (spec §6): re-sent at `due`
 * (ldpc_monotonic seconds), the wait doubling up to retry_max_s. */
struct ldpc_awaiting {
    uint8_t *data; /* NULL: nothing awaited for this phase */
    size_t len;
    double due, wait;
};

struct ldpc_device {
    struct ldpc_identity id;
    char campaign[65];
    char topic_config[96], topic_phase2[96], topic_report[160], topic_ack[160];
    struct ldpc_ledger own_ledger;
    struct ldpc_ledger *ledger; /* &own_ledger, or an agent's ledger shared by its campaigns */
    struct ldpc_value value;   /* prepared at start from the JSON value (value.h) */
    const struct ldpc_metric *metric; /* a live metric (agent.h): read at each fresh report */
    int high, once, crash_after_commit;
    cJSON *config;             /* the accepted config body */
    char config_digest[LDPC_BODY_DIGEST_HEX]; /* its digest: a campaign id binds to it (spec §7.2) */
    int in_phase[3];           /* phases of the accepted config this device takes part in */
    int delivered[3];          /* phases whose report got its PUBACK */
    uint8_t *inbox[3];         /* latest keys / config / phase-2 payload not yet processed */
    size_t inbox_len[3];
    uint8_t *kid_refused[3];   /* config / phase-2 payload refused for its key id: tried again
                                  after a key rotation (spec §5.3) */
    size_t kid_refused_len[3];
    struct ldpc_report outbox[2];
    size_t n_out;
    struct ldpc_awaiting awaiting[3];      /* by phase */
    uint8_t acks[LDPC_MAX_ACKS][LDPC_ACK_MAC_SIZE]; /* received, not yet processed */
    size_t ack_len[LDPC_MAX_ACKS], n_acks;
    int exit_code;             /* LDPC_RUNNING until the device is done */
    /* a recurring campaign (spec §3.4, rounds.h): the round being handled (0: none yet), whether
     * its report was delivered (acknowledged; PUBACKed without delivery.ack), and whether the
     * campaign is over for this device (rounds-done logged, or an enrolment refused) */
    int recurring, round_delivered, rounds_over;
    uint32_t round;
};

/* Reads {device_id, trusted_keys, eps_cap_milli, lifetime_budget_milli, broker, ack_key};
 * device_id may be missing (then it comes from the command line and id->device_id is empty), so
 * may broker and each of its entries (strings; port an integer in 1..65535) and ack_key (64 hex
 * digits: this device's acknowledgement key, spec §6). */
int ldpc_identity_load(struct ldpc_identity *id, const char *path, struct ldpc_reason *why);

/* `value_text`: JSON (5, "cpu", [1, 2]) or, if not JSON, the raw string. */
int ldpc_device_init(struct ldpc_device *dev, const struct ldpc_identity *id, const char *state_dir,
                     const char *campaign, const char *value_text, int high, int once,
                     struct ldpc_reason *why);
void ldpc_device_free(struct ldpc_device *dev);

/* The same for a campaign an agent discovered (agent.h): no value at start, `ledger` the
 * agent's (shared by its campaigns, not closed by ldpc_device_free), the reading taken from
 * `metric` at each fresh report; a config naming another metric is refused (`metric`). */
int ldpc_device_init_live(struct ldpc_device *dev, const struct ldpc_identity *id, const char *campaign,
                          struct ldpc_ledger *ledger, const struct ldpc_metric *metric);

/* A key rotation (spec §5.3) against `ledger` and `trusted` (both updated when applied):
 * 1 applied, 0 skipped or refused (logged as `device_id`). */
int ldpc_apply_keys(struct ldpc_ledger *ledger, struct ldpc_keyset *trusted, const char *device_id,
                    const uint8_t *payload, size_t len);

/* After a rotation the agent applied: `trusted` becomes the device's set and the payloads it
 * refused for their key id are tried again (as on_keys does). */
void ldpc_device_keys_rotated(struct ldpc_device *dev, const struct ldpc_keyset *trusted);

/* Spec §6: 1 if `ack` (from the device's own ack topic) acknowledges `report`. With the
 * identity's ack_key only a 28-byte ack whose tag verifies (constant-time compare); without
 * one a 12-byte ack or the first 12 bytes of a 28-byte one; then version 2, kind "A" and the
 * report's (phase, campaign_id, nonce). */
int ldpc_ack_accepts(const struct ldpc_identity *id, const uint8_t *report, size_t report_len,
                     const uint8_t *ack, size_t len);

/* Store a received message (the last one per topic wins); process them with process_inbox. */
void ldpc_device_on_message(struct ldpc_device *dev, const char *topic, const void *payload, size_t len);
void ldpc_device_process_inbox(struct ldpc_device *dev);

/* Called when the PUBACK of a report of `phase` arrived; takes ownership of `data` (kept while
 * an acknowledgement is awaited, spec §6, else freed). */
void ldpc_device_delivered(struct ldpc_device *dev, int phase, uint8_t *data, size_t len);

/* Spec §6: queue the re-send of every awaited report that is due; at the campaign's not_after
 * stop awaiting (logged `undelivered`). */
void ldpc_device_resend_due(struct ldpc_device *dev);

/* Queue `report` (heap, ownership taken) for publishing after its own spread wait (spec §6: a
 * trigger's publish, or one that a lost connection interrupted), unless `phase` is already
 * queued (then nothing is drawn). */
void ldpc_device_enqueue(struct ldpc_device *dev, int phase, uint8_t *report, size_t len);

/* The first queued report whose spread wait is over (NULL if none); pop it once the publish
 * call accepted it. */
const struct ldpc_report *ldpc_device_peek(struct ldpc_device *dev);
/* Removes the report peek returned (else the first queued one) and hands its bytes to the
 * caller (who frees them). */
uint8_t *ldpc_device_pop(struct ldpc_device *dev);

int ldpc_device_done(const struct ldpc_device *dev);

/* The phase-2 mechanism and the device's input for it (device.py::phase2_input), from the
 * accepted config `doc`, a verified phase-2 body `p2` and the device's `value`:
 * LDPMiner (srappor, sh): the set trimmed to the signed `candidates` (required; LDPMiner §4.4,
 * ldpminer.trim_to_candidates), padded by the mechanism to the phase-2 `l`;
 * LDPLCM (lcm): high = g(index) >= P of the signed `model` (lcm_model.h), `caller_high` when
 * the body has no model. *keys (heap, free it) holds a set's keys. 0, or -1 with the reason
 * (nothing to free then). The live device and `ldp_client vector` both run this. */
int ldpc_phase2_input(const cJSON *doc, const cJSON *p2, const struct ldpc_value *value, int caller_high,
                      struct ldpc_mech *mech, struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why);

/* What the ledger holds of an shc campaign's phase 1 (spec §3.1, §7.4): the memoised report
 * (NULL: none), the bit x (-1: none) and the eps_milli phase 1 was made with and charged. */
struct ldpc_shc_memo {
    const uint8_t *report;
    size_t len;
    int x;
    int64_t eps1_milli;
};

/* The phase-1 mechanism of the accepted config `doc` and the device's input for it (the
 * second half of device.py::on_config's checks, after memo first): a set's slots mapped to
 * the domain with the same work for every value. *keys (heap, free it) holds a set's slots.
 * 0, or -1 with the reason (nothing to free then). */
int ldpc_phase1_input(const cJSON *doc, const struct ldpc_value *value, int high, struct ldpc_mech *mech,
                      struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why);

/* shc (spec §3.1): 1 if the accepted config's phase 2 is shc. Its phase-2 input
 * (device.py::_shc_phase2): the phase-2 message's candidates are checked as for sh, not used;
 * the input is the row and sign of the phase-1 memo and the ledger's bit x, never the value;
 * the thresholds use the memo's eps1, never a config's. 0 with the mechanism (free it) and
 * input, 1 when the memo or the bit is missing (the device skips phase 2, logged), -1 with
 * the reason. */
int ldpc_phase2_is_shc(const cJSON *doc);
int ldpc_shc_phase2_input(const cJSON *doc, const cJSON *p2, const struct ldpc_shc_memo *memo,
                          struct ldpc_mech *mech, struct ldpc_input *in, struct ldpc_reason *why);

/* Shared with rounds.c (device.c's own steps, in the same order as a one-shot phase): */
/* The mechanism of `phase` of a checked config; 0, or -1 with the reason. */
int ldpc_dev_make_mech(const cJSON *doc, int phase, const cJSON *candidates, int64_t eps1_milli,
                       struct ldpc_mech *mech, struct ldpc_reason *why);
/* The device's value in the form the mechanism takes (never refuses because of the value). */
int ldpc_dev_build_input(const struct ldpc_value *value, int high, const cJSON *doc, const struct ldpc_mech *mech,
                         struct ldpc_input *in, uint32_t **keys, struct ldpc_reason *why);
/* A live metric's reading, once per fresh report (no metric: nothing). */
void ldpc_dev_read_live(struct ldpc_device *dev);
/* Log `refused <what> <field>: <message>`; with --once the device exits 2. */
void ldpc_dev_refuse(struct ldpc_device *dev, const char *what, const struct ldpc_reason *why);

#endif
