/* Recurring campaigns on the device: see rounds.h. */
#include <stdlib.h>
#include <string.h>

#include "ldp_report.h"
#include "mech.h"
#include "mech_longitudinal.h"
#include "rounds.h"
#include "schedule.h"

static uint32_t cid_of(const struct ldpc_device *dev)
{
    int64_t v = 0;
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(dev->config, "campaign_id"), &v);
    return (uint32_t)v;
}

uint32_t ldpc_report_round(const uint8_t *report, size_t len)
{
    if (len < LDPC_ROUND_HEADER || report[3] != LDPC_ROUND_FLAG)
        return 0;
    return (uint32_t)report[12] | ((uint32_t)report[13] << 8) | ((uint32_t)report[14] << 16)
           | ((uint32_t)report[15] << 24);
}

int ldpc_rounds_accept(struct ldpc_device *dev, const cJSON *doc, struct ldpc_reason *why)
{
    struct ldpc_mech mech;
    struct ldpc_schedule s;
    uint64_t charge;
    int64_t cid = 0;
    size_t len = 0;
    uint8_t *state;
    ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "campaign_id"), &cid);
    if (ldpc_dev_make_mech(doc, 1, NULL, 0, &mech, why) != 0)
        return -1;
    ldpc_schedule_of(doc, &s);
    charge = ldpc_long_charge_milli(&mech, s.rounds);
    ldpc_mech_free(&mech);
    state = ldpc_ledger_enrolment(dev->ledger, (uint32_t)cid, &len, NULL);
    if (state != NULL) { /* enrolled: every round after that costs nothing */
        free(state);
        return 0;
    }
    if (ldpc_ledger_bound_digest(dev->ledger, (uint32_t)cid) != NULL) {
        /* a recurring id is bound only by its enrolment, dropped only by its close: a replay
         * after the closed entry left the bounded list (spec §7.3) must not enrol (spend) again */
        ldpc_reason_set(why, "closed", "campaign id %lld was enrolled in and closed", (long long)cid);
        return -1;
    }
    if ((int64_t)charge > ldpc_ledger_remaining(dev->ledger)) {
        ldpc_reason_set(why, "lifetime_budget", "enrolment charge eps_milli %llu (min(classes, %lu rounds) x "
                        "eps_inf), %lld remain", (unsigned long long)charge, (unsigned long)s.rounds,
                        (long long)ldpc_ledger_remaining(dev->ledger));
        return -1;
    }
    return 0;
}

void ldpc_rounds_drop(struct ldpc_device *dev)
{
    while (dev->n_out)
        free(ldpc_device_pop(dev));
    free(dev->awaiting[1].data);
    dev->awaiting[1].data = NULL;
}

/* The round handled so far is over (the next one opened, or the campaign ended). */
static void end_round(struct ldpc_device *dev)
{
    if (dev->round == 0)
        return;
    if (!dev->round_delivered)
        ldpc_log(dev->id.device_id, "undelivered", "round=%lu", (unsigned long)dev->round);
    ldpc_rounds_drop(dev);
}

static void over(struct ldpc_device *dev)
{
    end_round(dev);
    dev->round = 0;
    dev->rounds_over = 1;
    ldpc_log(dev->id.device_id, "rounds-done", "campaign_id=%lu", (unsigned long)cid_of(dev));
    if (dev->once)
        dev->exit_code = LDPC_EXIT_DONE;
}

/* A refusal at enrolment or at a round: the campaign is over for this device (logged). */
static void stop(struct ldpc_device *dev, const struct ldpc_reason *why)
{
    ldpc_dev_refuse(dev, "config", why);
    ldpc_rounds_drop(dev);
    dev->rounds_over = 1;
}

/* Enrol (spec §3.4): the charge checked first (nothing drawn on a refusal), then the state from
 * the OS RNG, committed with the spend and the binding in one generation. The state (heap,
 * *len), or NULL after a refusal. */
static uint8_t *enrol(struct ldpc_device *dev, const struct ldpc_mech *mech, uint32_t rounds, size_t *len)
{
    struct ldpc_enrolment en;
    struct ldpc_reason why;
    uint64_t charge = ldpc_long_charge_milli(mech, rounds);
    uint32_t *words;
    uint8_t *state;
    if ((int64_t)mech->eps_milli > dev->ledger->eps_cap_milli) {
        ldpc_reason_set(&why, "eps_cap", "eps_milli %lu above the device cap %lld", (unsigned long)mech->eps_milli,
                        (long long)dev->ledger->eps_cap_milli);
        stop(dev, &why);
        return NULL;
    }
    if ((int64_t)charge > ldpc_ledger_remaining(dev->ledger)) {
        ldpc_reason_set(&why, "lifetime_budget", "enrolment charge eps_milli %llu, %lld remain",
                        (unsigned long long)charge, (long long)ldpc_ledger_remaining(dev->ledger));
        stop(dev, &why);
        return NULL;
    }
    words = malloc(mech->lon.enrol_words * sizeof *words);
    state = malloc(mech->lon.state_size ? mech->lon.state_size : 1);
    if (words == NULL || state == NULL || ldpc_os_random_words(words, mech->lon.enrol_words) != 0
        || ldpc_long_enrol(mech, words, state) != 0) {
        free(words);
        free(state);
        ldpc_reason_set(&why, "report", "cannot draw the enrolment state (memory or OS RNG)");
        stop(dev, &why);
        return NULL;
    }
    memset(words, 0, mech->lon.enrol_words * sizeof *words);
    free(words);
    en.campaign_id = cid_of(dev);
    en.eps_milli = mech->eps_milli;
    en.charge_milli = (int64_t)charge;
    en.state = state;
    en.state_len = mech->lon.state_size;
    en.digest = dev->config_digest;
    if (ldpc_ledger_enrol(dev->ledger, &en, &why) != 0) {
        free(state);
        stop(dev, &why);
        return NULL;
    }
    ldpc_log(dev->id.device_id, "enrolled", "campaign_id=%lu charge_milli=%llu remaining=%lld",
             (unsigned long)en.campaign_id, (unsigned long long)charge, (long long)ldpc_ledger_remaining(dev->ledger));
    *len = mech->lon.state_size;
    return state;
}

/* lbitmean's counter (spec §3.2): an integer clamped to [0, m], anything else 0 (the same steps
 * for every value). */
static uint32_t counter_of(const struct ldpc_value *value, const struct ldpc_mech *mech)
{
    uint32_t m = (uint32_t)(mech->domain_size - 1), x = value->one.int_value;
    uint32_t is_int = value->one.kind == LDPC_ITEM_INT;
    x = x > m ? m : x;
    return is_int ? x : 0;
}

/* Round r's fresh report: read the value, report from the state, commit the memo, queue it. */
static void fresh_report(struct ldpc_device *dev, uint32_t r, const struct ldpc_schedule *s)
{
    struct ldpc_reason why;
    struct ldpc_mech mech;
    struct ldpc_input in;
    uint32_t nonce = 0, *keys = NULL, *words = NULL;
    size_t slen = 0, len;
    uint8_t *state, *one = NULL, *report = NULL;
    if (ldpc_dev_make_mech(dev->config, 1, NULL, 0, &mech, &why) != 0) {
        stop(dev, &why);
        return;
    }
    state = ldpc_ledger_enrolment(dev->ledger, cid_of(dev), &slen, NULL);
    if (state == NULL && (state = enrol(dev, &mech, s->rounds, &slen)) == NULL) {
        ldpc_mech_free(&mech);
        return;
    }
    ldpc_dev_read_live(dev); /* the provider, once per round (spec §5.4) */
    len = ldpc_mech_report_size(&mech);
    if (slen != mech.lon.state_size || ldpc_dev_build_input(&dev->value, 0, dev->config, &mech, &in, &keys, &why) != 0) {
        if (slen != mech.lon.state_size)
            ldpc_reason_set(&why, "ledger", "the enrolment state has %lu bytes, the mechanism takes %lu",
                            (unsigned long)slen, (unsigned long)mech.lon.state_size);
        goto fail;
    }
    if (mech.id == LDP_MECHANISM_ID_LBITMEAN)
        in.index = counter_of(&dev->value, &mech);
    in.state = state;
    in.state_len = slen;
    one = malloc(len);
    report = malloc(len + 4);
    words = malloc(mech.words * sizeof *words);
    if (one == NULL || report == NULL || words == NULL || ldpc_os_random_words(&nonce, 1) != 0
        || ldpc_os_random_words(words, mech.words) != 0 || ldpc_mech_report(&mech, &in, words, nonce, one) != 0) {
        ldpc_reason_set(&why, "report", "cannot build the report (memory, OS RNG or input)");
        goto fail;
    }
    ldpc_with_round(one, len, r, report);
    if (ldpc_ledger_commit_round(dev->ledger, cid_of(dev), r, nonce, report, len + 4, &why) != 0)
        goto fail;
    ldpc_log(dev->id.device_id, "round", "round=%lu of %lu", (unsigned long)r, (unsigned long)s->rounds);
    ldpc_device_enqueue(dev, 1, report, len + 4);
    report = NULL;
    goto done;
fail:
    stop(dev, &why);
done:
    free(state);
    free(one);
    free(report);
    free(words);
    free(keys);
    ldpc_mech_free(&mech);
}

/* A trigger within round r: memo first (spec §7.1), else round r's fresh report. */
static void handle_round(struct ldpc_device *dev, uint32_t r, const struct ldpc_schedule *s)
{
    uint32_t held = 0;
    size_t len = 0;
    uint8_t *memo = ldpc_ledger_round_memo(dev->ledger, cid_of(dev), &held, &len);
    if (memo != NULL && held == r) {
        ldpc_log(dev->id.device_id, "memo", "round=%lu", (unsigned long)r);
        ldpc_device_enqueue(dev, 1, memo, len);
        return;
    }
    if (memo != NULL && held > r) { /* the clock went back: round r may have its report */
        ldpc_log(dev->id.device_id, "skip", "round=%lu (the ledger holds round %lu)", (unsigned long)r,
                 (unsigned long)held);
        free(memo);
        dev->round_delivered = 1; /* nothing to send for it: no `undelivered` */
        return;
    }
    free(memo);
    fresh_report(dev, r, s);
}

void ldpc_rounds_tick(struct ldpc_device *dev)
{
    struct ldpc_schedule s;
    int64_t now;
    uint32_t r;
    if (dev->config == NULL || !dev->recurring || dev->rounds_over)
        return;
    ldpc_schedule_of(dev->config, &s);
    now = ldpc_unix_now();
    r = ldpc_round_at(&s, now);
    if (r == 0 && now < s.start)
        return; /* before round 1: nothing yet */
    if (r == 0 && dev->round == 0) {
        over(dev); /* every round closed before this device handled one: nothing to send */
        return;
    }
    if (r == 0 && dev->round == s.rounds && !dev->round_delivered && now < s.not_after
        && (dev->awaiting[1].data != NULL || dev->n_out))
        return; /* round R's report has no next opening: its re-sends run until not_after (§6) */
    if (r != dev->round) {
        end_round(dev);
        if (r == 0) {
            over(dev);
            return;
        }
        dev->round = r;
        dev->round_delivered = 0;
        handle_round(dev, r, &s);
        return;
    }
    if (r == s.rounds && dev->round_delivered)
        over(dev); /* the last round delivered: nothing more to send */
}

void ldpc_rounds_trigger(struct ldpc_device *dev)
{
    struct ldpc_schedule s;
    uint32_t r;
    if (dev->config == NULL || !dev->recurring || dev->rounds_over)
        return;
    ldpc_schedule_of(dev->config, &s);
    r = ldpc_round_at(&s, ldpc_unix_now());
    if (r == 0 || r != dev->round) {
        ldpc_rounds_tick(dev);
        return;
    }
    handle_round(dev, r, &s); /* the open round again: its memo is re-sent */
}
