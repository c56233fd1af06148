/* Recurring campaigns on the device (protocol_spec/v2 §3.4), next to device.c's one-shot
 * phases and with the same steps: a device takes part from the first round open when it holds
 * the campaign's valid config. Before its first report it enrols once: the charge
 * min(classes, R)·eps_inf (ldpc_long_charge_milli) is checked against the ε cap and the
 * remaining lifetime budget (refused `lifetime_budget` before anything is drawn), the state is
 * drawn from the OS RNG, and spend + state + binding are committed in one ledger generation.
 * Each round is one trigger of spec §6: memo first (the ledger's round memo of the open round
 * is re-sent untouched), else the value is read (a metric provider runs here, once per round),
 * the report made from the state with a fresh nonce and the round header, the memo committed
 * (replacing the previous round's), then published after its spread wait. Re-sends run until
 * an ack, a close, not_after or the next round's opening (`undelivered round=<r>`; round R has
 * no next opening: not_after ends its re-sends); once round R is delivered, or the schedule is
 * over, the device logs `rounds-done` (--once: exit 0). Everything here depends on the
 * config, the clock, the ledger and the OS RNG only, never on the value (spec §7.1). */
#ifndef LDPC_ROUNDS_H
#define LDPC_ROUNDS_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "device.h"

/* accept_config's last step for a recurring config (its eps_cap already checked): the
 * mechanism's parameters, and the enrolment charge against the remaining budget unless the
 * id is enrolled. 0, or -1 with the reason (phases.*, domain.size, lifetime_budget). */
int ldpc_rounds_accept(struct ldpc_device *dev, const cJSON *doc, struct ldpc_reason *why);

/* A trigger (the config accepted, or delivered again after a reconnect): the open round's
 * report, memo first. */
void ldpc_rounds_trigger(struct ldpc_device *dev);

/* The clock (called from the event loop): a round opening, or the campaign's end. */
void ldpc_rounds_tick(struct ldpc_device *dev);

/* The round a round-header report carries (0 if it has none). */
uint32_t ldpc_report_round(const uint8_t *report, size_t len);

/* Forget the open round's queued and awaited report (a close, a new round). */
void ldpc_rounds_drop(struct ldpc_device *dev);

#endif
