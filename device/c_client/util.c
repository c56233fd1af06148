/* Helpers of the C client (see util.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "util.h"

void ldpc_reason_set(struct ldpc_reason *why, const char *field, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL)
        return;
    snprintf(why->field, sizeof why->field, "%s", field);
    va_start(ap, fmt);
    vsnprintf(why->message, sizeof why->message, fmt, ap);
    va_end(ap);
}

void ldpc_log(const char *device_id, const char *event, const char *fmt, ...)
{
    va_list ap;
    printf("ldp %s %s ", device_id, event);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

void ldpc_hex_encode(const uint8_t *data, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < len; i++) {
        out[2 * i] = digits[data[i] >> 4];
        out[2 * i + 1] = digits[data[i] & 15];
    }
    out[2 * len] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ldpc_hex_decode(const char *hex, uint8_t *out, size_t len)
{
    size_t i;
    for (i = 0; i < len; i++) {
        int hi = hex_digit(hex[2 * i]), lo;
        if (hi < 0)
            return -1;
        lo = hex_digit(hex[2 * i + 1]);
        if (lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

char *ldpc_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, used = 0;
    if (f == NULL)
        return NULL;
    for (;;) {
        size_t got;
        if (cap - used < 4096) {
            char *grown = realloc(buf, cap + 65536);
            if (grown == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
            cap += 65536;
        }
        got = fread(buf + used, 1, cap - used - 1, f);
        used += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[used] = '\0';
    if (len)
        *len = used;
    return buf;
}

double ldpc_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int64_t ldpc_unix_now(void)
{
    return (int64_t)time(NULL);
}

void ldpc_sleep(double seconds)
{
    struct timespec ts;
    if (seconds <= 0)
        return;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int fill_urandom_device(uint8_t *buf, size_t len)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    size_t got = 0;
    if (fd < 0)
        return -1;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            return -1;
        }
        got += (size_t)n;
    }
    close(fd);
    return 0;
}

/* getrandom(2) through syscall() (glibc < 2.25 and musl lack the wrapper on old boards). */
static int fill_os_random(uint8_t *buf, size_t len)
{
#if defined(__linux__) && defined(SYS_getrandom)
    size_t got = 0;
    while (got < len) {
        long n = syscall(SYS_getrandom, buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ENOSYS)
            return fill_urandom_device(buf + got, len - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
#else
    return fill_urandom_device(buf, len);
#endif
}

static void words_from_le_bytes(const uint8_t *bytes, uint32_t *words, size_t count)
{
    size_t i;
    for (i = 0; i < count; i++) {
        const uint8_t *p = bytes + 4 * i;
        words[i] = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    }
}

#ifdef LDPC_TEST_MODES
/* Test builds only (make TEST_MODES=1): with LDPC_TEST_RANDOM_SEED set, every "OS random" word
 * comes from one xorshift32 stream of that seed, so a test can run the client with every value
 * on the same randomness and compare what it does (spec §7.1). The production binary has no
 * such path. */
static int test_words(uint32_t *words, size_t count)
{
    static uint32_t state;
    static int seeded;
    const char *seed = getenv("LDPC_TEST_RANDOM_SEED");
    size_t i;
    if (seed == NULL)
        return 0;
    if (!seeded) {
        state = (uint32_t)strtoul(seed, NULL, 10) | 1u;
        seeded = 1;
    }
    for (i = 0; i < count; i++) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        words[i] = state;
    }
    return 1;
}
#endif

int ldpc_os_random_words(uint32_t *words, size_t count)
{
    uint8_t *bytes = (uint8_t *)words; /* decoded in place: word i only reads bytes 4i..4i+3 */
    size_t i;
#ifdef LDPC_TEST_MODES
    if (test_words(words, count))
        return 0;
#endif
    if (fill_os_random(bytes, 4 * count) != 0)
        return -1;
    for (i = 0; i < count; i++) {
        uint8_t b[4];
        memcpy(b, bytes + 4 * i, 4);
        words_from_le_bytes(b, words + i, 1);
    }
    return 0;
}

int ldpc_words_from_hex(const char *hex, uint32_t *words, size_t count)
{
    size_t i;
    if (strlen(hex) != 8 * count)
        return -1;
    for (i = 0; i < count; i++) {
        uint8_t b[4];
        if (ldpc_hex_decode(hex + 8 * i, b, 4) != 0)
            return -1;
        words_from_le_bytes(b, words + i, 1);
    }
    return 0;
}

int ldpc_valid_name(const char *name)
{
    size_t n = strlen(name), i;
    if (n < 1 || n > 64)
        return 0;
    for (i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}
