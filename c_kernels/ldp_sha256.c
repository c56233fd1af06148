/* SHA-256, HMAC-SHA256 and MAC'd acknowledgements: see ldp_sha256.h. */
#include <string.h>

#include "ldp_sha256.h"

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

static const uint8_t DEVICE_LABEL[] = "ldpfleet-ack-device"; /* + its NUL: the spec's \0 */
static const uint8_t LOGIN_LABEL[] = "ldpfleet-ack-login";

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define S0(x) (rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22))
#define S1(x) (rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25))
#define s0(x) (rotr(x, 7) ^ rotr(x, 18) ^ ((x) >> 3))
#define s1(x) (rotr(x, 17) ^ rotr(x, 19) ^ ((x) >> 10))
/* One round on the working variables named in place (no shuffling: the names rotate). */
#define ROUND(a, b, c, d, e, f, g, h, i)                                                         \
    do {                                                                                       \
        uint32_t t1_ = h + S1(e) + CH(e, f, g) + K[i] + w[(i) & 15];                           \
        d += t1_;                                                                              \
        h = t1_ + S0(a) + MAJ(a, b, c);                                                        \
    } while (0)
/* The message schedule, in a ring of 16 words. */
#define SCHEDULE(i) (w[(i) & 15] += s1(w[((i) - 2) & 15]) + w[((i) - 7) & 15] + s0(w[((i) - 15) & 15]))

static void compress(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[16], a, b, c, d, e, f, g, hh;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (i = 0; i < 64; i += 8) {
        if (i >= 16) {
            SCHEDULE(i), SCHEDULE(i + 1), SCHEDULE(i + 2), SCHEDULE(i + 3);
            SCHEDULE(i + 4), SCHEDULE(i + 5), SCHEDULE(i + 6), SCHEDULE(i + 7);
        }
        ROUND(a, b, c, d, e, f, g, hh, i);
        ROUND(hh, a, b, c, d, e, f, g, i + 1);
        ROUND(g, hh, a, b, c, d, e, f, i + 2);
        ROUND(f, g, hh, a, b, c, d, e, i + 3);
        ROUND(e, f, g, hh, a, b, c, d, i + 4);
        ROUND(d, e, f, g, hh, a, b, c, i + 5);
        ROUND(c, d, e, f, g, hh, a, b, i + 6);
        ROUND(b, c, d, e, f, g, hh, a, i + 7);
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

void ldp_sha256_init(ldp_sha256_ctx *c)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(c->h, iv, sizeof iv);
    c->bytes = 0;
    c->used = 0;
}

void ldp_sha256_update(ldp_sha256_ctx *c, const uint8_t *data, size_t len)
{
    c->bytes += len;
    while (len > 0) {
        size_t take = 64 - c->used < len ? 64 - c->used : len;
        memcpy(c->block + c->used, data, take);
        c->used += take;
        data += take;
        len -= take;
        if (c->used == 64) {
            compress(c->h, c->block);
            c->used = 0;
        }
    }
}

void ldp_sha256_final(ldp_sha256_ctx *c, uint8_t *out)
{
    uint64_t bits = c->bytes * 8;
    int i;
    c->block[c->used++] = 0x80;
    if (c->used > 56) {
        memset(c->block + c->used, 0, 64 - c->used);
        compress(c->h, c->block);
        c->used = 0;
    }
    memset(c->block + c->used, 0, 56 - c->used);
    for (i = 0; i < 8; i++)
        c->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(c->h, c->block);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void ldp_sha256(const uint8_t *data, size_t len, uint8_t *out)
{
    ldp_sha256_ctx c;
    ldp_sha256_init(&c);
    ldp_sha256_update(&c, data, len);
    ldp_sha256_final(&c, out);
}

/* An HMAC key's inner and outer states (after the ipad / opad block). */
typedef struct {
    ldp_sha256_ctx inner, outer;
} hmac_key;

static void hmac_prepare(hmac_key *k, const uint8_t *key, size_t key_len)
{
    uint8_t block[64], pad[64];
    int i;
    memset(block, 0, sizeof block);
    if (key_len > 64)
        ldp_sha256(key, key_len, block);
    else
        memcpy(block, key, key_len);
    for (i = 0; i < 64; i++)
        pad[i] = block[i] ^ 0x36;
    ldp_sha256_init(&k->inner);
    ldp_sha256_update(&k->inner, pad, 64);
    for (i = 0; i < 64; i++)
        pad[i] = block[i] ^ 0x5c;
    ldp_sha256_init(&k->outer);
    ldp_sha256_update(&k->outer, pad, 64);
}

/* HMAC of label (its NUL included, when given) || msg under a prepared key. */
static void hmac_run(const hmac_key *k, const uint8_t *label, size_t label_len, const uint8_t *msg, size_t len,
                     uint8_t *out)
{
    ldp_sha256_ctx c = k->inner;
    uint8_t inner[LDP_SHA256_SIZE];
    ldp_sha256_update(&c, label, label_len);
    ldp_sha256_update(&c, msg, len);
    ldp_sha256_final(&c, inner);
    c = k->outer;
    ldp_sha256_update(&c, inner, sizeof inner);
    ldp_sha256_final(&c, out);
}

void ldp_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *msg, size_t msg_len, uint8_t *out)
{
    hmac_key k;
    hmac_prepare(&k, key, key_len);
    hmac_run(&k, NULL, 0, msg, msg_len, out);
}

/* The position of the first '/' in id[0..len), or len. */
static size_t slash_of(const uint8_t *id, size_t len)
{
    size_t i;
    for (i = 0; i < len; i++)
        if (id[i] == '/')
            return i;
    return len;
}

/* K_dev under a prepared root; `login_key` (may be NULL) caches K_login of `login`, `login_len`
 * (the caller's one-entry cache: reused while consecutive ids share the login). */
static void device_key(const hmac_key *root, const uint8_t *id, size_t len, uint8_t *out, uint8_t *login_cache,
                       const uint8_t **login, size_t *login_len)
{
    size_t slash = slash_of(id, len);
    uint8_t fresh[LDP_SHA256_SIZE];
    hmac_key lk;
    if (slash == len) {
        hmac_run(root, DEVICE_LABEL, sizeof DEVICE_LABEL, id, len, out);
        return;
    }
    if (login_cache == NULL || *login == NULL || *login_len != slash || memcmp(*login, id, slash) != 0) {
        uint8_t *dst = login_cache != NULL ? login_cache : fresh;
        hmac_run(root, LOGIN_LABEL, sizeof LOGIN_LABEL, id, slash, dst);
        if (login_cache != NULL) {
            *login = id;
            *login_len = slash;
        }
    }
    hmac_prepare(&lk, login_cache != NULL ? login_cache : fresh, LDP_SHA256_SIZE);
    hmac_run(&lk, DEVICE_LABEL, sizeof DEVICE_LABEL, id + slash + 1, len - slash - 1, out);
}

void ldp_ack_device_key(const uint8_t *root, const uint8_t *id, size_t len, uint8_t *out)
{
    hmac_key r;
    hmac_prepare(&r, root, LDP_SHA256_SIZE);
    device_key(&r, id, len, out, NULL, NULL, NULL);
}

void ldp_ack_tag(const uint8_t *key, const uint8_t *ack, uint8_t *tag)
{
    uint8_t full[LDP_SHA256_SIZE];
    ldp_hmac_sha256(key, LDP_SHA256_SIZE, ack, LDP_ACK_PLAIN_SIZE, full);
    memcpy(tag, full, LDP_ACK_TAG_SIZE);
}

void ldp_ack_sign_batch(const uint8_t *root, const uint8_t *buf, const uint32_t *dev_off,
                        const uint32_t *dev_len, const uint8_t *acks, size_t n, uint8_t *out)
{
    hmac_key r;
    uint8_t login_key[LDP_SHA256_SIZE], key[LDP_SHA256_SIZE];
    const uint8_t *login = NULL;
    size_t login_len = 0, i;
    hmac_prepare(&r, root, LDP_SHA256_SIZE);
    for (i = 0; i < n; i++) {
        uint8_t *dst = out + LDP_ACK_MAC_SIZE * i;
        device_key(&r, buf + dev_off[i], dev_len[i], key, login_key, &login, &login_len);
        memcpy(dst, acks + LDP_ACK_PLAIN_SIZE * i, LDP_ACK_PLAIN_SIZE);
        ldp_ack_tag(key, dst, dst + LDP_ACK_PLAIN_SIZE);
    }
}

int ldp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    size_t i;
    for (i = 0; i < n; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}
