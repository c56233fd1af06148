/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), and the MAC'd acknowledgements of protocol
 * v2 §6 built on them: per-device keys derived from a fleet ack root key and the 16-byte tag of
 * every acknowledgement of a batch, in one call. Portable C99, no allocation, no globals.
 *
 *   K_dev(id)       = HMAC-SHA256(root, "ldpfleet-ack-device\0" || utf8(id))
 *   K_login(L)      = HMAC-SHA256(root, "ldpfleet-ack-login\0" || utf8(L))
 *   K_dev("L/id")   = HMAC-SHA256(K_login(L), "ldpfleet-ack-device\0" || utf8(id))
 *   tag(ack12)      = HMAC-SHA256(K_dev, ack12)[0:16]
 *
 * (a load generator's simulated devices "L/id", spec §4, take keys under their login's, so a
 * load generator can be given K_login(L) alone). The device side (the C client) checks tags
 * with ldp_ack_tag and ldp_ct_equal. */
#ifndef LDP_SHA256_H
#define LDP_SHA256_H
#include <stddef.h>
#include <stdint.h>

#define LDP_SHA256_SIZE 32
#define LDP_ACK_PLAIN_SIZE 12
#define LDP_ACK_TAG_SIZE 16
#define LDP_ACK_MAC_SIZE 28

typedef struct {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t block[64];
    size_t used;
} ldp_sha256_ctx;

void ldp_sha256_init(ldp_sha256_ctx *c);
void ldp_sha256_update(ldp_sha256_ctx *c, const uint8_t *data, size_t len);
void ldp_sha256_final(ldp_sha256_ctx *c, uint8_t *out);

/* cdef-begin */
/* SHA-256 of data[0..len) into out[0..32). */
void ldp_sha256(const uint8_t *data, size_t len, uint8_t *out);
/* HMAC-SHA256 (RFC 2104) of msg under key (any length) into out[0..32). */
void ldp_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *msg, size_t msg_len, uint8_t *out);
/* K_dev of a device id (bytes id[0..len), "L/id" for a load generator's device: split at the
 * first '/') under the 32-byte root into out[0..32). */
void ldp_ack_device_key(const uint8_t *root, const uint8_t *id, size_t len, uint8_t *out);
/* The 16-byte tag of a 12-byte acknowledgement under a device's 32-byte key. */
void ldp_ack_tag(const uint8_t *key, const uint8_t *ack, uint8_t *tag);
/* For i < n: out[28 i .. 28 i + 28) = acks[12 i .. 12 i + 12) || tag under K_dev of the device
 * id buf[dev_off[i] .. dev_off[i] + dev_len[i]) (root: 32 bytes). One call per batch; the root's
 * HMAC state is prepared once, and a login's key is kept only while consecutive acks share it. */
void ldp_ack_sign_batch(const uint8_t *root, const uint8_t *buf, const uint32_t *dev_off,
                        const uint32_t *dev_len, const uint8_t *acks, size_t n, uint8_t *out);
/* 1 if a[0..n) == b[0..n), else 0, in time that depends only on n. */
int ldp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* cdef-end */

#endif
