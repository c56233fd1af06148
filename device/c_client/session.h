/* The MQTT side of the C client (libmosquitto, MQTT 3.1.1): connect with backoff, subscribe to
 * the campaign's retained config and phase-2 topics at QoS 1, publish reports at QoS 1, detect a
 * dead connection (libmosquitto keepalive / socket errors) and reconnect with exponential
 * backoff and jitter, so broker restarts and network outages are survived. */
#ifndef LDPC_SESSION_H
#define LDPC_SESSION_H

#include "device.h"

struct ldpc_session_opts {
    const char *host;
    int port;
    const char *username; /* NULL: connect anonymously */
    const char *password; /* NULL: no password (only with a username) */
    const char *ca_file;  /* NULL: plain TCP; else TLS, broker certificate verified against it */
    const char *cert_file, *key_file; /* NULL: no client certificate */
    int keepalive;      /* seconds */
    double backoff_max; /* seconds */
    double run_for;     /* seconds; < 0: no limit */
};

/* Runs the device until it is done (--once), run_for elapses, or SIGINT/SIGTERM.
 * Returns the process exit code. */
int ldpc_session_run(struct ldpc_device *dev, const struct ldpc_session_opts *opts);

/* The same for an agent (agent.h): subscribes to ldp/+/config, ldp/+/phase2 and ldp/+/a/<id>,
 * runs every campaign it joins, until run_for elapses or a signal; exit 0. */
struct ldpc_agent;
int ldpc_session_run_agent(struct ldpc_agent *agent, const struct ldpc_session_opts *opts);

#endif
