/* The command line shared by the client and its test harness: see cli.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "device.h"

const char ldpc_usage_text[] =
    "usage: ldp_client [run] --campaign C --state-dir DIR (--value V | --value-file F)\n"
    "                  [--host H] [--port P]\n"
    "                  [--identity FILE] [--device-id ID] [--high] [--once] [--timeout S]\n"
    "                  [--keepalive S] [--backoff-max S] [--username U] [--password P]\n"
    "                  [--cafile PEM] [--crash-point after-commit]\n"
    "       ldp_client [run] --state-dir DIR --metric NAME=PROGRAM [--metric NAME=PROGRAM]...\n"
    "                  [--host H] [--port P] [--identity FILE] [--device-id ID] [--timeout S] ...\n"
    "       ldp_client provision --state-dir DIR\n"
    "   test builds only (make TEST_MODES=1):\n"
    "       ldp_client vector --case JSON --words-hex HEX [--print-x]\n"
    "       ldp_client check-model [--model-file F] [--d D]\n"
    "       ldp_client thresholds --eps-milli E [--n N]...\n"
    "       ldp_client shc-thresholds --eps1 E1 --eps2 E2\n"
    "       ldp_client verify-config --trusted-keys FILE [--now T] [--payload-file F] [--envelope-only]\n"
    "                                [--print-digest]\n"
    "       ldp_client ack-check --report-hex H --ack-hex H [--ack-key HEX]\n"
    "       ldp_client replay --state-dir DIR --campaign C --value V --messages FILE\n"
    "       ldp_client rounds --cases-file F\n";

int ldpc_usage(const char *problem)
{
    if (problem)
        fprintf(stderr, "ldp_client: %s\n", problem);
    fputs(ldpc_usage_text, stderr);
    return LDPC_EXIT_USAGE;
}

/* Every flag (an option without a value) of the client and its test harness; any other
 * "--name" takes the next argument as its value. Options are found by walking argv in that
 * grammar, so an option's VALUE is never read as a flag or an option: `--value --once` is the
 * value "--once", not the flag (a value that changed the client's behaviour would tell the
 * value). */
static const char *const ldpc_all_flags[] = {"--once", "--high", "--print-x", "--envelope-only",
                                             "--print-digest", NULL};

static int ldpc_is_flag(const char *arg)
{
    int j;
    for (j = 0; ldpc_all_flags[j]; j++)
        if (strcmp(arg, ldpc_all_flags[j]) == 0)
            return 1;
    return 0;
}

/* The index of the first argument `name` in argv's grammar (a flag, or an option followed by
 * its value), or -1. */
static int ldpc_find(int argc, char **argv, const char *name)
{
    int i = 0;
    while (i < argc) {
        if (strcmp(argv[i], name) == 0)
            return i;
        i += (strncmp(argv[i], "--", 2) == 0 && !ldpc_is_flag(argv[i])) ? 2 : 1;
    }
    return -1;
}

const char *ldpc_opt(int argc, char **argv, const char *name)
{
    int i = ldpc_find(argc, argv, name);
    return (i >= 0 && i + 1 < argc) ? argv[i + 1] : NULL;
}

int ldpc_flag(int argc, char **argv, const char *name)
{
    return ldpc_find(argc, argv, name) >= 0;
}

int ldpc_check_args(int argc, char **argv, const char *const *options, const char *const *flags)
{
    int i, j, ok;
    for (i = 0; i < argc; i++) {
        ok = 0;
        for (j = 0; flags[j]; j++)
            ok |= strcmp(argv[i], flags[j]) == 0;
        for (j = 0; !ok && options[j]; j++) {
            if (strcmp(argv[i], options[j]) == 0) {
                if (i + 1 >= argc)
                    return 0;
                ok = 1;
                i++;
            }
        }
        if (!ok)
            return 0;
    }
    return 1;
}

int ldpc_parse_number(const char *text, double lo, double hi, double *out)
{
    char *end;
    double v;
    if (text == NULL)
        return 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v >= lo && v <= hi))
        return 0;
    *out = v;
    return 1;
}
