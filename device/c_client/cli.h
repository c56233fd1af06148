/* The command line shared by the C client (ldp_client.c) and its test harness (test_harness.c):
 * option lookup, argument checks, numbers and the usage text (as Mosquitto's client_shared.c is
 * for its command-line clients). */
#ifndef LDPC_CLI_H
#define LDPC_CLI_H

extern const char ldpc_usage_text[];

/* Prints "ldp_client: problem" (unless NULL) and the usage on stderr; returns LDPC_EXIT_USAGE. */
int ldpc_usage(const char *problem);

/* The value of option `name` (the last argument cannot be one), or NULL. */
const char *ldpc_opt(int argc, char **argv, const char *name);

/* 1 if the flag `name` is among the arguments. */
int ldpc_flag(int argc, char **argv, const char *name);

/* Every argument is a known flag or a known option followed by its value (NULL-terminated lists). */
int ldpc_check_args(int argc, char **argv, const char *const *options, const char *const *flags);

/* 1 with *out when `text` is a number in [lo, hi], else 0. */
int ldpc_parse_number(const char *text, double lo, double hi, double *out);

#endif
