/* Recurring campaigns on the C client (protocol_spec/v2 §3.4, §5.4 `schedule`): the same rules
 * as aggregator/ldpfleet/core/schedule.py (check_schedule, round_count, round_at, round_window,
 * with_round), over 64-bit integers; vectors/recurring.json holds the shared cases. */
#ifndef LDPC_SCHEDULE_H
#define LDPC_SCHEDULE_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

#define LDPC_EVERY_S_MIN 10
#define LDPC_EVERY_S_MAX 31536000 /* 10 s (tests, demos) to a year */
#define LDPC_ROUNDS_MAX 100000
#define LDPC_ROUND_FLAG 1         /* header flags bit 0: a u32 round follows the 12-byte header */
#define LDPC_ROUND_HEADER 16

/* 1 if the config carries a `schedule` (any value): a recurring campaign. */
int ldpc_is_recurring(const cJSON *doc);

/* Memoised mechanisms only in recurring configs and recurring configs only with memoised
 * mechanisms (spec §3.4): 0, or -1 with field phases.mechanism. */
int ldpc_schedule_phase_kind(const char *mechanism, int recurring, struct ldpc_reason *why);

/* Spec §5.4 `schedule` of a config that has one (not_before / not_after already checked as
 * integers): exactly {start, every_s[, rounds]} with start in [not_before, not_after), every_s in
 * [10, 31536000], rounds in [1, 100000], every round able to open before not_after; one phase
 * (field `phases`). 0, or -1 with field `schedule`. */
int ldpc_schedule_check(const cJSON *doc, struct ldpc_reason *why);

/* The schedule of a checked recurring config, in integers. */
struct ldpc_schedule {
    int64_t start, every_s, not_after;
    uint32_t rounds; /* R */
};
void ldpc_schedule_of(const cJSON *doc, struct ldpc_schedule *s);

/* R: `rounds`, else ceil((not_after - start) / every_s) (0 when the schedule has none). */
int64_t ldpc_round_count(int64_t start, int64_t every_s, int64_t not_after, int has_rounds, int64_t rounds);

/* The round open at unix time t (1..R), or 0 (before start, at or after not_after, after R). */
uint32_t ldpc_round_at(const struct ldpc_schedule *s, int64_t t);

/* [opens, closes) of round r in unix seconds. */
void ldpc_round_window(const struct ldpc_schedule *s, uint32_t r, int64_t *opens, int64_t *closes);

/* A one-shot-form report (12-byte header, flags 0, `len` bytes) as round r's report: flags 1
 * and le32(r) after the header (core.schedule.with_round). `out` holds len + 4 bytes. */
void ldpc_with_round(const uint8_t *report, size_t len, uint32_t r, uint8_t *out);

#ifdef LDPC_TEST_MODES
/* `rounds --cases-file F` (tests): F holds recurring.json's `rounds` cases ({schedule, not_after,
 * t}); prints [{"rounds": R, "round": r or null}, ...] in their order. Exit code. */
int ldpc_schedule_vector(int argc, char **argv);
#endif

#endif
