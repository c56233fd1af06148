/* Persistent privacy-budget ledger that fails closed (spec §7.2, §7.4), the same files as the
 * MicroPython client's (device/ldp/ledger.py), so a state directory means the same thing to both:
 *   <state-dir>/ledger.0, ledger.1: one JSON record each,
 *   {"gen": G, "doc": {...}, "sha256": "<hex SHA-256 of the canonical JSON of doc>"}
 *   doc = {"bound": {"<campaign_id>": "<32 hex>"}, "closed": [[cid, not_before], ...],
 *          "closed_floor": int,
 *          "keys": {"keys": [{"kid", "pub"}, ...], "serial": int, "sha256": hex},
 *          "reports": {"<campaign_id>:<phase>": [nonce, eps_milli, "<hex>"]},
 *          "shc": {"<campaign_id>": 0 | 1}, "spent_milli": int,
 *          "enrol": {"<campaign_id>": {"state": "<hex>", "charge_milli": int}},
 *          "rounds": {"<campaign_id>": [round, nonce, "<report hex>"]}}
 *   ("keys": the last key rotation applied, spec §5.3; absent before the first one. "shc": the
 *   bit x of each shc phase-1 report, spec §3.1, written with its memo; absent before the first.
 *   "bound": the digest of the config each campaign id was first spent under, written with that
 *   spend, spec §7.2. "closed_floor": the not_before watermark of closed ids evicted from the
 *   bounded list, spec §7.3. A closed entry written before closes carried not_before is a bare
 *   id.)
 * A commit writes generation G+1 over the OLDER file (G+1 mod 2), fsyncs it and the directory;
 * nothing is deleted or renamed, so a crash at any point leaves the previous generation intact.
 * At start the valid generation with the highest G wins; none valid (or none at all) is an error:
 * the device stops rather than start again from zero. `ldp_client --provision` writes
 * generation 0. A report is produced once per (campaign_id, phase): spend, nonce and bytes are
 * committed BEFORE the report leaves; later triggers re-send the memoised bytes. */
#ifndef LDPC_LEDGER_H
#define LDPC_LEDGER_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

struct ldpc_ledger {
    char *dir, *files[2];
    int64_t eps_cap_milli, lifetime_budget_milli, spent_milli, gen;
    cJSON *reports; /* object: "<cid>:<phase>" -> [nonce, eps_milli, hex] */
    cJSON *closed;  /* array of closed campaign ids */
    cJSON *keys;    /* {"keys": [...], "serial": n} of the last rotation applied, or NULL */
    cJSON *shc;     /* {"<cid>": 0|1}: x of shc phase-1 reports (spec §3.1), or NULL */
    cJSON *bound;   /* {"<cid>": "<32 hex>"}: config digest of each spent id (spec §7.2), or NULL */
    cJSON *enrol;   /* {"<cid>": {"state": hex, "charge_milli": N}}: recurring enrolments (§3.4), or NULL */
    cJSON *rounds;  /* {"<cid>": [round, nonce, hex]}: each recurring campaign's latest round memo, or NULL */
    int64_t closed_floor; /* spec §7.3 watermark, when has_closed_floor */
    int has_closed_floor;
};

/* Writes generation 0 (nothing spent) into `state_dir` unless a ledger file exists there. */
int ldpc_ledger_provision(const char *state_dir, struct ldpc_reason *why);

/* Loads the newest valid generation of `state_dir`; missing or invalid is an error (field
 * "ledger"): a budget is never reset silently. */
int ldpc_ledger_open(struct ldpc_ledger *l, const char *state_dir, int64_t eps_cap_milli,
                     int64_t lifetime_budget_milli, struct ldpc_reason *why);
void ldpc_ledger_close(struct ldpc_ledger *l);

int64_t ldpc_ledger_remaining(const struct ldpc_ledger *l);

/* The report already produced for this campaign phase (heap copy, *len set), or NULL. */
uint8_t *ldpc_ledger_memo(const struct ldpc_ledger *l, uint32_t campaign_id, int phase, size_t *len);
int ldpc_ledger_has(const struct ldpc_ledger *l, uint32_t campaign_id, int phase);

/* 0 if a fresh report of `eps_milli` fits the cap and the remaining budget, else -1, why
 * (field "eps_cap" or "lifetime_budget"). */
int ldpc_ledger_check(const struct ldpc_ledger *l, int64_t eps_milli, struct ldpc_reason *why);

/* 1 if `campaign_id` is in the closed list (spec §5.4), else 0. */
int ldpc_ledger_is_closed(const struct ldpc_ledger *l, uint32_t campaign_id);
/* 1 if a config issued at `not_before` is at or below the closed-campaign watermark (§7.3). */
int ldpc_ledger_below_floor(const struct ldpc_ledger *l, int64_t not_before);

/* Remember a closed campaign id durably with its not_before (0: unknown). Past
 * LDPC_LEDGER_MAX_CLOSED entries the one with the lowest not_before is dropped and
 * closed_floor rises to it (spec §7.3). */
int ldpc_ledger_close_campaign(struct ldpc_ledger *l, uint32_t campaign_id, int64_t not_before,
                               struct ldpc_reason *why);
#define LDPC_LEDGER_MAX_CLOSED 64

/* The hex digest (32 digits) of the config `campaign_id` is bound to, or NULL (spec §7.2). */
const char *ldpc_ledger_bound_digest(const struct ldpc_ledger *l, uint32_t campaign_id);
/* The eps_milli a memoised campaign phase was reported (and charged) at, or -1. */
int64_t ldpc_ledger_memo_eps(const struct ldpc_ledger *l, uint32_t campaign_id, int phase);

/* Key rotations (spec §5.3): the serial held (0 before the first), and persisting a new set
 * (`key_list`: the message's list of {kid, pub}) before the device uses it. */
int64_t ldpc_ledger_keys_serial(const struct ldpc_ledger *l);
int ldpc_ledger_set_keys(struct ldpc_ledger *l, int64_t serial, const cJSON *key_list, const char *sha256_hex,
                         struct ldpc_reason *why);
/* The SHA-256 hex of the rotation message applied last, or NULL. */
const char *ldpc_ledger_keys_digest(const struct ldpc_ledger *l);
int ldpc_ledger_keys_valid(const cJSON *keys);

/* One fresh report to commit: its campaign phase, charge, nonce and bytes, the digest (32 hex
 * digits) of the config it was made under, and for an shc phase-1 report its bit x (else -1). */
struct ldpc_spend {
    uint32_t campaign_id;
    int phase;
    int64_t eps_milli;
    uint32_t nonce;
    const uint8_t *report;
    size_t len;
    const char *digest;
    int shc_bit;
};

/* Record spend + nonce + report durably; 0 on success (only then may the report be published).
 * The id is bound to the spend's digest in the same generation when this is its first spend; a
 * spend under another digest of a bound id is refused (field "bound"). `shc_bit` >= 0 (an shc
 * phase-1 report's x, 1 for +1) is recorded in the same generation. */
int ldpc_ledger_commit(struct ldpc_ledger *l, const struct ldpc_spend *spend, struct ldpc_reason *why);

/* The bit x of this campaign's shc phase-1 report (0 or 1), or -1 if the ledger has none. */
int ldpc_ledger_shc_bit(const struct ldpc_ledger *l, uint32_t campaign_id);

/* Recurring campaigns (spec §3.4): the enrolment, committed once with its spend and the id's
 * binding in one generation; then one round memo per campaign, replaced every round. */
struct ldpc_enrolment {
    uint32_t campaign_id;
    int64_t eps_milli;    /* eps_inf: the device's eps cap applies to it */
    int64_t charge_milli; /* min(classes, R) * eps_inf (ldpc_long_charge_milli) */
    const uint8_t *state;
    size_t state_len;
    const char *digest;   /* the config's body digest (32 hex digits): the id binds to it */
};
/* The enrolment state of a campaign id (heap copy, *len; *charge_milli when not NULL), or NULL. */
uint8_t *ldpc_ledger_enrolment(const struct ldpc_ledger *l, uint32_t campaign_id, size_t *len,
                               int64_t *charge_milli);
/* spent += charge, enrol[id] = {state, charge}, bound[id] in one generation; refused (nothing
 * written) with eps_cap, lifetime_budget, bound or memo (already enrolled). */
int ldpc_ledger_enrol(struct ldpc_ledger *l, const struct ldpc_enrolment *en, struct ldpc_reason *why);
/* The round memo of a campaign id (heap copy of the report, *round, *len), or NULL. */
uint8_t *ldpc_ledger_round_memo(const struct ldpc_ledger *l, uint32_t campaign_id, uint32_t *round, size_t *len);
/* rounds[id] = [round, nonce, hex] (replacing the previous round's); the id must be enrolled. */
int ldpc_ledger_commit_round(struct ldpc_ledger *l, uint32_t campaign_id, uint32_t round, uint32_t nonce,
                             const uint8_t *report, size_t len, struct ldpc_reason *why);

#endif
