/* The test harness of the C client: the subcommands the tests (and operators checking a
 * config, a model or thresholds by hand) run against the client's own code, without a broker:
 *   vector, check-model, thresholds, shc-thresholds, verify-config, ack-check, replay
 * (usage: cli.c). Compiled into `make TEST_MODES=1` builds only; the production binary refuses
 * these subcommands. */
#ifndef LDPC_TEST_HARNESS_H
#define LDPC_TEST_HARNESS_H

#define LDPC_NOT_A_TEST_COMMAND (-1)

/* Runs the test subcommand argv[1] and returns its exit code, or LDPC_NOT_A_TEST_COMMAND. */
int ldpc_test_command(int argc, char **argv);

#endif
