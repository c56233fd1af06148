/* Small helpers of the C client: logging, hex, files, clocks, the OS random words. */
#ifndef LDPC_UTIL_H
#define LDPC_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* A refusal or error reason: the offending field (as ldpfleet.errors uses them) and a message. */
struct ldpc_reason {
    char field[40];
    char message[200];
};

void ldpc_reason_set(struct ldpc_reason *why, const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* One log line on stdout, "ldp <device-id> <event> <detail>" (the MicroPython client's form). */
void ldpc_log(const char *device_id, const char *event, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

void ldpc_hex_encode(const uint8_t *data, size_t len, char *out); /* out: 2*len + 1 bytes */
/* Decodes exactly `len` bytes from 2*len hex digits (either case); -1 on a bad digit. */
int ldpc_hex_decode(const char *hex, uint8_t *out, size_t len);

/* Whole file into a NUL-terminated heap buffer; NULL on error (errno set). */
char *ldpc_read_file(const char *path, size_t *len);

double ldpc_monotonic(void);
int64_t ldpc_unix_now(void);
void ldpc_sleep(double seconds);

/* Fills `words` with `count` uniform u32 words from the OS RNG (getrandom, else
 * /dev/urandom), read little-endian as spec §2 says. 0 on success, -1 on failure. */
int ldpc_os_random_words(uint32_t *words, size_t count);

/* Words from their little-endian bytes given as hex (tests only: the vector mode). */
int ldpc_words_from_hex(const char *hex, uint32_t *words, size_t count);

int ldpc_valid_name(const char *name);

#endif
