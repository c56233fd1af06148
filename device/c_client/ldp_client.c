/* ldpfleet C client for Linux single-board computers (protocol v2, protocol_spec/v2/README.md).
 *
 *   ldp_client [run] --campaign C --state-dir DIR (--value V | --value-file F) [--host H] [--port P]
 *              [--identity FILE] [--device-id ID] [--high] [--once] [--timeout S] [--keepalive S]
 *              [--backoff-max S] [--username U] [--password P] [--cafile PEM]
 *              [--crash-point after-commit]
 *     (host, port, username, password and CA default to the identity file's optional
 *     "broker": {host, port, user, password, tls: {ca_file, cert_file, key_file}}, as on the
 *     MicroPython client;
 *     flags override. With a CA the client speaks TLS (default port 8883) and accepts only a
 *     broker certificate chaining to that CA and naming the host. --value-file reads the value
 *     from a file: a command line is readable by every local user in /proc/PID/cmdline.)
 *   ldp_client [run] --state-dir DIR --metric NAME=PROGRAM [--metric ...] [the options above]
 *     (live metrics, spec §5.4: every campaign whose signed config names a metric given is
 *     joined, discovered on ldp/+/config; PROGRAM runs at each fresh report, no shell, and its
 *     first output line is the reading: agent.h. No --campaign, --value or --once.)
 *     A recurring campaign (a config with a `schedule`, spec §3.4: rounds.h) is answered once
 *     per round from one enrolment; --once exits 0 after `rounds-done`.
 *   ldp_client provision --state-dir DIR               (ledger generation 0, spec §7.4)
 *   ldp_client vector --case JSON --words-hex HEX [--print-x]
 *                                                     (test vectors: report hex on stdout;
 *                                                      a memoised mechanism's case with "enrol"
 *                                                      or "sequence" enrols from the words,
 *                                                      mech_longitudinal.h;
 *                                                      a case with "config" and "phase2" runs
 *                                                      the device's phase-2 path; --print-x adds
 *                                                      an shc phase-1 report's ledger bit x)
 *   ldp_client check-model [--model-file F] [--d D]   (LDPLCM model: g(x), high/low, or refusal)
 *   ldp_client thresholds --eps-milli E [--n N]...    (spec §2 thresholds as JSON)
 *   ldp_client shc-thresholds --eps1 E1 --eps2 E2     (spec §3.1 shc_ok, T1, T_shc_a, T_shc_b)
 *   ldp_client verify-config --trusted-keys FILE [--now T] [--payload-file F] [--envelope-only]
 *                                                    (stdin by default; --envelope-only: spec §5.1 only)
 *   ldp_client ack-check --report-hex H --ack-hex H [--ack-key HEX]
 *                                                    (spec §6: "accepted" or "ignored")
 *   ldp_client rounds --cases-file F                  (spec §3.4 round at time t, vectors/recurring.json)
 *   ldp_client replay --state-dir DIR --campaign C --value V --messages FILE
 *                                                    (the device logic fed [topic, payload]s)
 *
 * Exit codes (as the MicroPython client): 0 done, 1 usage/setup error (including a missing or
 * corrupt ledger: the device stops rather than reset its budget), 2 config refused
 * (--once), 3 timed out (--once), 75 test crash point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "cli.h"
#include "device.h"
#include "session.h"
#ifdef LDPC_TEST_MODES
#include "test_harness.h"
#endif

/* The device's value: --value V, or the contents of --value-file F without trailing
 * whitespace (a value on the command line shows in /proc/PID/cmdline to every local user).
 * NULL with `problem` set when neither or both are given or the file cannot be read. */
static const char *device_value(int argc, char **argv, const char **problem)
{
    static char buf[65536];
    const char *inline_value = ldpc_opt(argc, argv, "--value"), *path = ldpc_opt(argc, argv, "--value-file");
    FILE *f;
    size_t n;
    if ((inline_value == NULL) == (path == NULL)) {
        *problem = "give --value or --value-file (one of them)";
        return NULL;
    }
    if (inline_value != NULL)
        return inline_value;
    f = fopen(path, "rb");
    if (f == NULL) {
        *problem = "--value-file cannot be read";
        return NULL;
    }
    n = fread(buf, 1, sizeof buf, f);
    if (ferror(f) || n == sizeof buf || memchr(buf, 0, n) != NULL) {
        fclose(f);
        *problem = "--value-file is unreadable, holds a NUL byte or is 64 KiB or longer";
        return NULL;
    }
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    buf[n] = '\0';
    return buf;
}

static int run(int argc, char **argv)
{
    static const char *const options[] = {"--host", "--port", "--campaign", "--state-dir", "--identity",
                                          "--device-id", "--value", "--value-file", "--timeout", "--keepalive",
                                          "--backoff-max", "--crash-point", "--username", "--password",
                                          "--cafile", "--metric", NULL};
    static const char *const flags[] = {"--once", "--high", NULL};
    const char *state_dir = ldpc_opt(argc, argv, "--state-dir"), *identity_path = ldpc_opt(argc, argv, "--identity");
    const char *device_id = ldpc_opt(argc, argv, "--device-id"), *crash = ldpc_opt(argc, argv, "--crash-point");
    const char *username = ldpc_opt(argc, argv, "--username"), *password = ldpc_opt(argc, argv, "--password");
    const char *ca_file = ldpc_opt(argc, argv, "--cafile");
    const char *value, *problem = NULL;
    struct ldpc_session_opts so;
    struct ldpc_identity id;
    struct ldpc_device dev;
    struct ldpc_reason why;
    char path[4096], ca_path[4096 + LDPC_MAX_CREDENTIAL];
    char cert_path[4096 + LDPC_MAX_CREDENTIAL], key_path[4096 + LDPC_MAX_CREDENTIAL];
    double port = -1, keepalive = 30, backoff_max = 30, timeout = -1;
    int code, live, i;
    static struct ldpc_agent agent;
    memset(&so, 0, sizeof so);
    if (!ldpc_check_args(argc, argv, options, flags))
        return ldpc_usage("unknown or incomplete argument");
    live = ldpc_opt(argc, argv, "--metric") != NULL;
    if (live && (ldpc_opt(argc, argv, "--campaign") || ldpc_opt(argc, argv, "--value")
                 || ldpc_opt(argc, argv, "--value-file") || ldpc_flag(argc, argv, "--once")
                 || ldpc_flag(argc, argv, "--high") || crash != NULL))
        return ldpc_usage("--metric runs every campaign of its metrics: no --campaign, --value, --value-file, "
                          "--once, --high or --crash-point");
    if (state_dir == NULL || (!live && ldpc_opt(argc, argv, "--campaign") == NULL))
        return ldpc_usage("--state-dir, --campaign and --value (or --value-file) are required");
    value = live ? "null" : device_value(argc, argv, &problem);
    if (value == NULL)
        return ldpc_usage(problem);
    if ((ldpc_opt(argc, argv, "--port") && !ldpc_parse_number(ldpc_opt(argc, argv, "--port"), 1, 65535, &port))
        || (ldpc_opt(argc, argv, "--keepalive") && !ldpc_parse_number(ldpc_opt(argc, argv, "--keepalive"), 5, 65535, &keepalive))
        || (ldpc_opt(argc, argv, "--backoff-max") && !ldpc_parse_number(ldpc_opt(argc, argv, "--backoff-max"), 0.01, 3600, &backoff_max))
        || (ldpc_opt(argc, argv, "--timeout") && !ldpc_parse_number(ldpc_opt(argc, argv, "--timeout"), 0, 1e9, &timeout)))
        return ldpc_usage("bad --port, --keepalive, --backoff-max or --timeout");
    if (crash != NULL && strcmp(crash, "after-commit") != 0)
        return ldpc_usage("--crash-point takes after-commit");
#ifndef LDPC_TEST_MODES
    if (crash != NULL)
        return ldpc_usage("--crash-point is a test mode: `make TEST_MODES=1`");
#endif
    if (identity_path == NULL) {
        snprintf(path, sizeof path, "%s/identity.json", state_dir);
        identity_path = path;
    }
    if (ldpc_identity_load(&id, identity_path, &why) != 0) {
        fprintf(stderr, "ldp_client: %s: %s\n", why.field, why.message);
        return LDPC_EXIT_USAGE;
    }
    if (device_id != NULL) {
        if (!ldpc_valid_name(device_id) || (id.device_id[0] && strcmp(id.device_id, device_id) != 0))
            return ldpc_usage("--device-id must match [A-Za-z0-9_-]{1,64} and the identity file's device_id");
        snprintf(id.device_id, sizeof id.device_id, "%s", device_id);
    }
    if (!id.device_id[0])
        return ldpc_usage("no device id: give --device-id or put device_id in the identity file");
    if (username == NULL && id.broker.has_user)
        username = id.broker.user;
    if (password == NULL && id.broker.has_password)
        password = id.broker.password;
    if (password != NULL && username == NULL)
        return ldpc_usage("a broker password needs a username (--username or broker.user in the identity file)");
    if (ca_file == NULL && id.broker.has_ca_file) {
        if (id.broker.ca_file[0] == '/')
            ca_file = id.broker.ca_file;
        else {
            snprintf(ca_path, sizeof ca_path, "%s/%s", state_dir, id.broker.ca_file);
            ca_file = ca_path;
        }
    }
    if (id.broker.has_cert_file) { /* a client certificate from the fleet CA (spec §4) */
        if (id.broker.cert_file[0] == '/')
            so.cert_file = id.broker.cert_file;
        else {
            snprintf(cert_path, sizeof cert_path, "%s/%s", state_dir, id.broker.cert_file);
            so.cert_file = cert_path;
        }
        if (id.broker.key_file[0] == '/')
            so.key_file = id.broker.key_file;
        else {
            snprintf(key_path, sizeof key_path, "%s/%s", state_dir, id.broker.key_file);
            so.key_file = key_path;
        }
    }
    if (port < 0)
        port = id.broker.has_port ? id.broker.port : ca_file != NULL ? 8883 : 1883;
    so.host = ldpc_opt(argc, argv, "--host") ? ldpc_opt(argc, argv, "--host")
              : id.broker.has_host ? id.broker.host : "127.0.0.1";
    so.port = (int)port;
    so.username = username;
    so.password = password;
    so.ca_file = ca_file;
    so.keepalive = (int)keepalive;
    so.backoff_max = backoff_max;
    so.run_for = timeout;
    if (live) {
        if (ldpc_agent_init(&agent, &id, state_dir, &why) != 0) {
            fprintf(stderr, "ldp_client: %s: %s\n", why.field, why.message);
            return LDPC_EXIT_USAGE;
        }
        for (i = 0; i < argc - 1; i++) {
            if (strcmp(argv[i], "--metric") == 0 && ldpc_agent_add_metric(&agent, argv[++i]) != 0) {
                ldpc_agent_free(&agent);
                return ldpc_usage("--metric takes NAME=PROGRAM, NAME matching [a-z][a-z0-9_]{0,31}, "
                                  "each NAME once, at most 16");
            }
        }
        code = ldpc_session_run_agent(&agent, &so);
        ldpc_agent_free(&agent);
        return code;
    }
    if (ldpc_device_init(&dev, &id, state_dir, ldpc_opt(argc, argv, "--campaign"), value,
                         ldpc_flag(argc, argv, "--high"), ldpc_flag(argc, argv, "--once"), &why) != 0) {
        fprintf(stderr, "ldp_client: %s: %s\n", why.field, why.message);
        return LDPC_EXIT_USAGE;
    }
    dev.crash_after_commit = crash != NULL;
    code = ldpc_session_run(&dev, &so);
    ldpc_device_free(&dev);
    return code;
}

/* `provision --state-dir DIR`: generation 0 of the ledger (spec §7.4), unless one exists. */
static int provision(int argc, char **argv)
{
    static const char *const options[] = {"--state-dir", NULL};
    static const char *const flags[] = {NULL};
    const char *state_dir = ldpc_opt(argc, argv, "--state-dir");
    struct ldpc_reason why;
    if (!ldpc_check_args(argc, argv, options, flags) || state_dir == NULL)
        return ldpc_usage("provision needs --state-dir DIR");
    if (ldpc_ledger_provision(state_dir, &why) != 0) {
        fprintf(stderr, "ldp_client: %s: %s\n", why.field, why.message);
        return LDPC_EXIT_USAGE;
    }
    return LDPC_EXIT_DONE;
}

int main(int argc, char **argv)
{
#ifdef LDPC_TEST_MODES
    int code;
#endif
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(ldpc_usage_text, stdout);
        return LDPC_EXIT_DONE;
    }
#ifdef LDPC_TEST_MODES
    code = ldpc_test_command(argc, argv);
    if (code != LDPC_NOT_A_TEST_COMMAND)
        return code;
#else
    if (argc >= 2 && (strcmp(argv[1], "vector") == 0 || strcmp(argv[1], "verify-config") == 0
                      || strcmp(argv[1], "check-model") == 0 || strcmp(argv[1], "thresholds") == 0
                      || strcmp(argv[1], "shc-thresholds") == 0 || strcmp(argv[1], "ack-check") == 0
                      || strcmp(argv[1], "replay") == 0 || strcmp(argv[1], "rounds") == 0
                      || strcmp(argv[1], "pem-code") == 0))
        return ldpc_usage("this is a production build: the test modes need `make TEST_MODES=1`");
#endif
    if (argc >= 2 && strcmp(argv[1], "provision") == 0)
        return provision(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return run(argc - 2, argv + 2);
    return run(argc - 1, argv + 1);
}
