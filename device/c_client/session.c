/* MQTT session of the C client: see session.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mosquitto.h>

#include "agent.h"
#include "session.h"

#define MAX_INFLIGHT 16
#define BACKOFF_START 0.25

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

struct session {
    struct ldpc_device *dev;    /* one campaign (--campaign), or NULL with an agent */
    struct ldpc_agent *agent;   /* --metric: every campaign discovered (agent.h) */
    const char *device_id;
    const struct ldpc_session_opts *opts;
    int connected;
    int pending_subacks; /* SUBSCRIBEs of this connection not yet acknowledged */
    int loss_logged; /* the current connection's loss has been logged */
    double backoff;
    struct {
        int mid, phase; /* phase 0: free slot */
        struct ldpc_device *dev;
        uint8_t *data;
        size_t len;
    } inflight[MAX_INFLIGHT];
};

/* The connection is gone: reports still waiting for their PUBACK go back to the queue and
 * are published again after the reconnect (as the MicroPython client re-sends an unacknowledged
 * publish), each after its own spread wait when the config has one (spec §6: a broker restart
 * reconnects every device at once); the aggregator dedupes by (device id, nonce). */
static void requeue_inflight(struct session *s)
{
    int i;
    for (i = 0; i < MAX_INFLIGHT; i++) {
        if (s->inflight[i].phase != 0) {
            ldpc_device_enqueue(s->inflight[i].dev, s->inflight[i].phase, s->inflight[i].data, s->inflight[i].len);
            s->inflight[i].phase = 0;
            s->inflight[i].data = NULL;
        }
    }
}

static void on_connect(struct mosquitto *mosq, void *obj, int rc)
{
    struct session *s = obj;
    const char *topics[3];
    if (rc != 0) {
        ldpc_log(s->device_id, "connection-lost", "CONNACK refused: %s", mosquitto_connack_string(rc));
        mosquitto_disconnect(mosq);
        return;
    }
    s->connected = 1;
    s->backoff = BACKOFF_START;
    ldpc_log(s->device_id, "connected", "%s:%d", s->opts->host, s->opts->port);
    topics[0] = LDPC_KEYS_TOPIC; /* first: its retained rotation comes before the configs */
    topics[1] = s->agent ? "ldp/+/config" : s->dev->topic_config; /* discovery (spec §5.4) */
    topics[2] = s->agent ? "ldp/+/phase2" : s->dev->topic_phase2;
    rc = mosquitto_subscribe_multiple(mosq, NULL, 3, (char *const *)topics, 1, 0, NULL);
    s->pending_subacks = rc == MOSQ_ERR_SUCCESS;
    if (rc == MOSQ_ERR_SUCCESS)
        rc = mosquitto_subscribe(mosq, NULL, s->agent ? s->agent->topic_ack : s->dev->topic_ack, 0);
    s->pending_subacks += rc == MOSQ_ERR_SUCCESS;
    if (rc != MOSQ_ERR_SUCCESS)
        ldpc_log(s->device_id, "connection-lost", "subscribe: %s", mosquitto_strerror(rc));
}

static void on_subscribe(struct mosquitto *mosq, void *obj, int mid, int count, const int *granted)
{
    struct session *s = obj;
    (void)mosq;
    (void)mid;
    (void)count;
    (void)granted;
    if (s->pending_subacks > 0)
        s->pending_subacks--;
}

static void on_disconnect(struct mosquitto *mosq, void *obj, int rc)
{
    struct session *s = obj;
    (void)mosq;
    s->connected = 0;
    requeue_inflight(s);
    if (rc != 0) {
        ldpc_log(s->device_id, "connection-lost", "%s", mosquitto_strerror(rc));
        s->loss_logged = 1;
    }
}

/* libmosquitto's own errors (e.g. OpenSSL's reason a broker certificate was refused). */
static void on_log(struct mosquitto *mosq, void *obj, int level, const char *text)
{
    struct session *s = obj;
    (void)mosq;
    if (level == MOSQ_LOG_ERR)
        ldpc_log(s->device_id, "mqtt-error", "%s", text);
}

static void on_message(struct mosquitto *mosq, void *obj, const struct mosquitto_message *msg)
{
    struct session *s = obj;
    (void)mosq;
    if (s->agent)
        ldpc_agent_on_message(s->agent, msg->topic, msg->payload, (size_t)msg->payloadlen);
    else
        ldpc_device_on_message(s->dev, msg->topic, msg->payload, (size_t)msg->payloadlen);
}

static void on_publish(struct mosquitto *mosq, void *obj, int mid)
{
    struct session *s = obj;
    int i;
    (void)mosq;
    for (i = 0; i < MAX_INFLIGHT; i++) {
        if (s->inflight[i].phase != 0 && s->inflight[i].mid == mid) {
            ldpc_device_delivered(s->inflight[i].dev, s->inflight[i].phase, s->inflight[i].data, s->inflight[i].len);
            s->inflight[i].phase = 0;
            s->inflight[i].data = NULL;
        }
    }
}

static int n_devices(const struct session *s)
{
    return s->agent ? s->agent->n_devs : 1;
}

static struct ldpc_device *device_at(const struct session *s, int i)
{
    return s->agent ? s->agent->devs[i] : s->dev;
}

/* Publish queued reports at QoS 1; a report leaves the queue once libmosquitto took it. */
static void flush_device(struct session *s, struct mosquitto *mosq, struct ldpc_device *dev)
{
    const struct ldpc_report *r;
    while (s->connected && (r = ldpc_device_peek(dev)) != NULL) {
        int mid = 0, i, slot = -1, rc;
        for (i = 0; i < MAX_INFLIGHT && slot < 0; i++)
            if (s->inflight[i].phase == 0)
                slot = i;
        if (slot < 0)
            return; /* every slot awaits its PUBACK */
        rc = mosquitto_publish(mosq, &mid, dev->topic_report, (int)r->len, r->data, 1, false);
        if (rc != MOSQ_ERR_SUCCESS)
            return; /* kept queued: retried after the next (re)connect */
        s->inflight[slot].mid = mid;
        s->inflight[slot].phase = r->phase;
        s->inflight[slot].dev = dev;
        s->inflight[slot].len = r->len;
        s->inflight[slot].data = ldpc_device_pop(dev);
    }
}

static void flush(struct session *s, struct mosquitto *mosq)
{
    int i;
    for (i = 0; i < n_devices(s); i++)
        flush_device(s, mosq, device_at(s, i));
}

static int session_done(const struct session *s)
{
    return s->agent ? 0 : ldpc_device_done(s->dev);
}

static int expired(double stop_at)
{
    return stop_at >= 0 && ldpc_monotonic() >= stop_at;
}

/* Sleep the backoff (half to full of it, random), bounded by the run limit and signals. */
static void back_off(struct session *s, double stop_at)
{
    uint32_t jitter = 0;
    double delay, until;
    ldpc_os_random_words(&jitter, 1);
    delay = s->backoff * (0.5 + (jitter >> 24) / 510.0);
    ldpc_log(s->device_id, "backoff", "%d ms", (int)(delay * 1000));
    until = ldpc_monotonic() + delay;
    while (!stop_signal && ldpc_monotonic() < until && !expired(stop_at))
        ldpc_sleep(0.05);
    s->backoff *= 2;
    if (s->backoff > s->opts->backoff_max)
        s->backoff = s->opts->backoff_max;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

static int run_session(struct session *sp, const struct ldpc_session_opts *opts);

int ldpc_session_run(struct ldpc_device *dev, const struct ldpc_session_opts *opts)
{
    struct session s;
    memset(&s, 0, sizeof s);
    s.dev = dev;
    s.device_id = dev->id.device_id;
    return run_session(&s, opts);
}

int ldpc_session_run_agent(struct ldpc_agent *agent, const struct ldpc_session_opts *opts)
{
    struct session s;
    memset(&s, 0, sizeof s);
    s.agent = agent;
    s.device_id = agent->id.device_id;
    return run_session(&s, opts);
}

static int run_session(struct session *sp, const struct ldpc_session_opts *opts)
{
    struct session s = *sp;
    struct ldpc_device *dev = s.dev;
    struct mosquitto *mosq;
    double stop_at = opts->run_for >= 0 ? ldpc_monotonic() + opts->run_for : -1;
    int first = 1, socket_up = 0, code, i;
    s.opts = opts;
    s.backoff = BACKOFF_START;
    install_signals();
    mosquitto_lib_init();
    mosq = mosquitto_new(s.device_id, true, &s);
    if (mosq == NULL) {
        fprintf(stderr, "ldp_client: mosquitto_new failed\n");
        mosquitto_lib_cleanup();
        return LDPC_EXIT_USAGE;
    }
    if (opts->username != NULL
        && (code = mosquitto_username_pw_set(mosq, opts->username, opts->password)) != MOSQ_ERR_SUCCESS) {
        fprintf(stderr, "ldp_client: username: %s\n", mosquitto_strerror(code));
        mosquitto_destroy(mosq);
        mosquitto_lib_cleanup();
        return LDPC_EXIT_USAGE;
    }
    if (opts->ca_file != NULL
        && ((code = mosquitto_tls_set(mosq, opts->ca_file, NULL, opts->cert_file, opts->key_file, NULL))
                != MOSQ_ERR_SUCCESS
            || (code = mosquitto_tls_opts_set(mosq, 1, NULL, NULL)) != MOSQ_ERR_SUCCESS)) {
        /* SSL_VERIFY_PEER; the host name is checked too (mosquitto_tls_insecure_set stays off) */
        fprintf(stderr, "ldp_client: ca_file %s: %s\n", opts->ca_file, mosquitto_strerror(code));
        mosquitto_destroy(mosq);
        mosquitto_lib_cleanup();
        return LDPC_EXIT_USAGE;
    }
    mosquitto_log_callback_set(mosq, on_log);
    mosquitto_connect_callback_set(mosq, on_connect);
    mosquitto_disconnect_callback_set(mosq, on_disconnect);
    mosquitto_message_callback_set(mosq, on_message);
    mosquitto_publish_callback_set(mosq, on_publish);
    mosquitto_subscribe_callback_set(mosq, on_subscribe);
    while (!session_done(&s) && !stop_signal && !expired(stop_at)) {
        int rc;
        if (!socket_up) {
            rc = first ? mosquitto_connect(mosq, opts->host, opts->port, opts->keepalive) : mosquitto_reconnect(mosq);
            first = 0;
            if (rc != MOSQ_ERR_SUCCESS) {
                ldpc_log(s.device_id, "connection-lost", "connect: %s", mosquitto_strerror(rc));
                back_off(&s, stop_at);
                continue;
            }
            socket_up = 1;
            s.loss_logged = 0;
        }
        rc = mosquitto_loop(mosq, 100, 1);
        if (rc != MOSQ_ERR_SUCCESS) {
            if (!s.loss_logged)
                ldpc_log(s.device_id, "connection-lost", "%s%s", s.connected ? "" : "before CONNACK: ",
                         mosquitto_strerror(rc));
            s.connected = 0;
            socket_up = 0;
            requeue_inflight(&s);
            back_off(&s, stop_at);
            continue;
        }
        if (s.agent)
            ldpc_agent_process(s.agent);
        else
            ldpc_device_process_inbox(dev);
        for (i = 0; s.connected && i < n_devices(&s); i++)
            ldpc_device_resend_due(device_at(&s, i));
        flush(&s, mosq);
    }
    if (socket_up) {
        /* a clean goodbye whenever the device is done: first read what the broker still owes
         * (the SUBACKs), so that closing the socket sends FIN and not RST (on which the broker
         * may drop our DISCONNECT unread: the goodbye would depend on timing), then DISCONNECT
         * until the socket is closed (at most ~1 s each) */
        int i;
        for (i = 0; i < 10 && s.connected && s.pending_subacks > 0; i++)
            if (mosquitto_loop(mosq, 100, 1) != MOSQ_ERR_SUCCESS)
                break;
        mosquitto_disconnect(mosq);
        for (i = 0; i < 10 && mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS; i++)
            ;
    }
    mosquitto_destroy(mosq);
    mosquitto_lib_cleanup();
    for (i = 0; i < MAX_INFLIGHT; i++) /* unacknowledged bytes: nothing re-sends them now */
        free(s.inflight[i].data);
    if (s.agent)
        code = LDPC_EXIT_DONE;
    else if (dev->exit_code != LDPC_RUNNING)
        code = dev->exit_code;
    else if (ldpc_device_done(dev) || !dev->once)
        code = LDPC_EXIT_DONE;
    else {
        code = LDPC_EXIT_TIMEOUT;
        /* say why, instead of a silent exit 3 */
        if (dev->config == NULL)
            ldpc_log(s.device_id, "timeout", "no config received on %s within %.0f s "
                     "(is the campaign created, and its name right?)", dev->topic_config, opts->run_for);
        else
            ldpc_log(s.device_id, "timeout", "not every phase delivered within %.0f s", opts->run_for);
    }
    return code;
}
