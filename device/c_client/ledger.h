/* Persistent privacy-budget ledger (spec §6), the same file as the MicroPython client's
 * (device/ldp/ledger.py), so a state directory means the same thing to both:
 *   <state-dir>/ledger.json = {"spent_milli": int, "next_seq": int,
 *                              "reports": {"<campaign_id>:<phase>": [seq, eps_milli, "<hex>"]}}
 * A report is produced once per (campaign_id, phase): the spend, the next sequence number and
 * the report bytes are written (temp file, fsync, rename, fsync of the directory) BEFORE the
 * report leaves; later triggers re-send the memoised bytes and never spend again. */
#ifndef LDPC_LEDGER_H
#define LDPC_LEDGER_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

struct ldpc_ledger {
    char *path, *tmp, *dir;
    int64_t eps_cap_milli, lifetime_budget_milli, spent_milli;
    uint32_t next_seq;
    cJSON *reports; /* object: "<cid>:<phase>" -> [seq, eps_milli, hex] */
};

/* Loads (or starts) the ledger of `state_dir`; a leftover temp file is an uncommitted write
 * and is removed; a corrupt ledger is an error (a budget is never reset silently). */
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

/* Record spend + report durably; 0 on success (only then may the report be published). */
int ldpc_ledger_commit(struct ldpc_ledger *l, uint32_t campaign_id, int phase, int64_t eps_milli,
                       uint32_t seq, const uint8_t *report, size_t len, struct ldpc_reason *why);

#endif
