/* Signed config and phase-2 envelopes on the device (spec §5) and the structural checks of
 * a config body (the same rules as aggregator/ldpfleet/core/config.py::check_config and
 * device/ldp/config.py). Every refusal names the offending field. */
#ifndef LDPC_ENVELOPE_H
#define LDPC_ENVELOPE_H
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

/* A device's trusted Ed25519 public keys (spec §5.2): 1 to 8, each with its key id. */
#define LDPC_MAX_TRUSTED 8
struct ldpc_trusted_key {
    char kid[17];     /* hex of SHA-256(pub)[0:8] */
    uint8_t pub[32];  /* RFC 8032 encoding */
};
struct ldpc_keyset {
    struct ldpc_trusted_key keys[LDPC_MAX_TRUSTED];
    int n;
};

/* Fill `set` from a JSON list of {"kid", "pub"} (or one such object); every kid must match its
 * key. 0, or -1 with the reason (field `trusted_keys`). */
int ldpc_keyset_load(struct ldpc_keyset *set, const cJSON *entries, struct ldpc_reason *why);

/* Spec §5.1: parse {"body": str, "kid": str, "sig": hex} (exactly those keys: v1's HMAC
 * envelopes are refused), look the kid up in `keys`, verify the Ed25519 signature (OpenSSL
 * EVP, RFC 8032 "pure" Ed25519) over b"ldpfleet-v2\0" || SHA-256(body) with the exact body
 * bytes received, then parse the body. Returns the body document (free with cJSON_Delete),
 * or NULL with the reason in `why` (envelope, kid, sig, body). */
cJSON *ldpc_envelope_verify(const uint8_t *payload, size_t len, const struct ldpc_keyset *keys,
                            struct ldpc_reason *why);

/* The same, also writing the hex of the first 16 bytes of SHA-256 of the signed body (when
 * `body_digest` is not NULL): what a device binds a campaign id to (spec §7.2). */
#define LDPC_BODY_DIGEST_BYTES 16
#define LDPC_BODY_DIGEST_HEX (2 * LDPC_BODY_DIGEST_BYTES + 1)
cJSON *ldpc_envelope_open(const uint8_t *payload, size_t len, const struct ldpc_keyset *keys,
                          char body_digest[LDPC_BODY_DIGEST_HEX], struct ldpc_reason *why);

/* Key rotation (spec §5.3): retained on this topic. */
#define LDPC_KEYS_TOPIC "ldpfleet/keys"

/* A key-rotation body: type, protocol, serial in [1, 2^31), keys a list of 1 to 8 distinct
 * {kid, pub}; 0 with `set` and `serial` filled, or -1 with the field. */
int ldpc_keys_check(const cJSON *doc, struct ldpc_keyset *set, int64_t *serial, struct ldpc_reason *why);

/* `sample_rate_ppm` is in parts per million of the device-id hash space (spec §5). */
#define LDPC_PPM 1000000
#define LDPC_MAX_EPS_MILLI 64000 /* spec §2 */

/* 0 if `doc` is a well-formed protocol-1 config valid at `now`, else -1 and `why`; a phase's
 * `sample_rate_ppm` must be an integer in (0, 10^6), the same on every phase carrying it. */
#define LDPC_RETRY_S_MAX 86400
#define LDPC_RETRY_MAX_S_MAX 259200
#define LDPC_SPREAD_S_MAX 86400 /* delivery.spread_s (spec §5.4) */
int ldpc_config_check(const cJSON *doc, int64_t now, struct ldpc_reason *why);

/* Spec §5.4 `metric` (optional; a malformed one refuses the config, field `metric`):
 * [a-z][a-z0-9_]{0,31}. 1 if `s` matches. */
#define LDPC_METRIC_MAX 32
int ldpc_valid_metric(const char *s);

/* 0 if `p2` is a phase-2 body belonging to the accepted `config`, else -1 and `why`. */
int ldpc_phase2_check(const cJSON *p2, const cJSON *config, struct ldpc_reason *why);
/* svim's flat branch (spec §5.4): the config's phase-2 `fallback` (NULL if none), and whether a
 * phase-2 body says `"fallback": true`. */
const cJSON *ldpc_fallback_of(const cJSON *config);
int ldpc_phase2_is_fallback(const cJSON *p2);

/* A JSON integer (a number with an integral value within +-2^53, not written as a float in a
 * signed body: LDPC_JSON_FLOAT, a type bit above cJSON's own): 1 and *out, else 0. */
#define LDPC_JSON_FLOAT (1 << 14)
int ldpc_json_int(const cJSON *v, int64_t *out);

uint64_t ldpc_domain_size(const cJSON *config);

/* A signed close body (spec §5.4; `not_before` an integer when present): 0, or -1 with the
 * field. */
int ldpc_close_check(const cJSON *doc, struct ldpc_reason *why);

/* Item key of a domain item (spec §1): the integer itself, or H(utf8(s), KEY_SEED). */
uint32_t ldpc_string_key(const char *s);

#endif
