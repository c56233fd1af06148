/* MQTT wire helpers for the lean ingest client (see ldp_mqtt.h). MQTT 3.1.1 §2-§3 and
 * MQTT 5 §2-§3: fixed header = first byte + remaining length (1-4 byte varint). */
#include "ldp_mqtt.h"

#define MQTT_PUBLISH 3u
#define VARINT_MAX 268435455u

/* Varint at buf[*p] (at most 4 bytes, never reading at or past `end`).
 * 1: decoded into *value, *p advanced; 0: needs bytes past `end`; -1: 4 bytes, all continued. */
static int read_varint(const uint8_t *buf, size_t end, size_t *p, uint32_t *value)
{
    uint32_t v = 0;
    unsigned i;
    for (i = 0; i < 4; i++) {
        uint8_t b;
        if (*p + i >= end)
            return 0;
        b = buf[*p + i];
        v |= (uint32_t)(b & 0x7Fu) << (7u * i);
        if (!(b & 0x80u)) {
            *p += i + 1;
            *value = v;
            return 1;
        }
    }
    return -1;
}

static size_t varint_size(uint32_t v)
{
    return v < 128u ? 1u : v < 16384u ? 2u : v < 2097152u ? 3u : 4u;
}

static uint8_t *put_varint(uint8_t *out, uint32_t v)
{
    do {
        uint8_t digit = (uint8_t)(v & 0x7Fu);
        v >>= 7;
        *out++ = (uint8_t)(digit | (v ? 0x80u : 0u));
    } while (v);
    return out;
}

/* Scan the complete control packets at the start of buf[0..len) (MQTT `version` 4 or 5), at
 * most max_packets. Packet k: first_byte[k] (type << 4 | flags), body_off[k] (after the fixed
 * header), end_off[k] (one past its last byte); for PUBLISH also the topic span, the payload
 * span (after the packet id and, in MQTT 5, the properties) and packet_id[k] (0 for QoS 0).
 * Other packets: topic/payload 0; packet_id[k] = the body's first two bytes for types 4..11
 * (PUBACK ... UNSUBACK) when present, else 0.
 * Stops at the first incomplete packet; *consumed = bytes of the complete packets scanned.
 * Returns the number of packets, or LDP_MQTT_E_* (< 0) at the first malformed packet (then
 * *consumed = the offset of that packet). */
int64_t ldp_mqtt_scan(const uint8_t *buf, size_t len, int version, size_t max_packets,
                      uint8_t *first_byte, uint32_t *body_off, uint32_t *end_off,
                      uint32_t *topic_off, uint32_t *topic_len, uint32_t *payload_off,
                      uint32_t *payload_len, uint16_t *packet_id, size_t *consumed)
{
    size_t pos = 0, count = 0;
    *consumed = 0;
    if (version != 4 && version != 5)
        return LDP_MQTT_E_VERSION;
    while (count < max_packets && pos < len) {
        uint8_t fb = buf[pos];
        unsigned type = fb >> 4;
        size_t body = pos + 1, end;
        uint32_t rl;
        int r;
        if (type == 0)
            return LDP_MQTT_E_TYPE;
        if (type == MQTT_PUBLISH && ((fb >> 1) & 3u) == 3u)
            return LDP_MQTT_E_QOS;
        r = read_varint(buf, len, &body, &rl);
        if (r < 0)
            return LDP_MQTT_E_VARINT;
        if (r == 0 || rl > len - body)
            break; /* incomplete */
        end = body + rl;
        if (end > UINT32_MAX)
            return LDP_MQTT_E_BIG;
        first_byte[count] = fb;
        body_off[count] = (uint32_t)body;
        end_off[count] = (uint32_t)end;
        topic_off[count] = topic_len[count] = payload_off[count] = payload_len[count] = 0;
        packet_id[count] = 0;
        if (type == MQTT_PUBLISH) {
            size_t q;
            uint32_t tl;
            if (rl < 2)
                return LDP_MQTT_E_TOPIC;
            tl = ((uint32_t)buf[body] << 8) | buf[body + 1];
            if (tl > rl - 2)
                return LDP_MQTT_E_TOPIC;
            q = body + 2 + tl;
            if ((fb >> 1) & 3u) {
                uint16_t id;
                if (end - q < 2)
                    return LDP_MQTT_E_PACKET_ID;
                id = (uint16_t)(((unsigned)buf[q] << 8) | buf[q + 1]);
                if (id == 0)
                    return LDP_MQTT_E_PACKET_ID;
                packet_id[count] = id;
                q += 2;
            }
            if (version == 5) {
                uint32_t plen;
                if (read_varint(buf, end, &q, &plen) != 1 || plen > end - q)
                    return LDP_MQTT_E_PROPS;
                q += plen;
            }
            topic_off[count] = (uint32_t)(body + 2);
            topic_len[count] = tl;
            payload_off[count] = (uint32_t)q;
            payload_len[count] = (uint32_t)(end - q);
        } else if (type >= 4 && type <= 11 && rl >= 2) {
            packet_id[count] = (uint16_t)(((unsigned)buf[body] << 8) | buf[body + 1]);
        }
        count++;
        pos = end;
        *consumed = pos;
    }
    return (int64_t)count;
}

/* A readable name for a negative result of ldp_mqtt_scan. */
const char *ldp_mqtt_strerror(int64_t code)
{
    switch (code) {
    case LDP_MQTT_E_VARINT: return "malformed remaining length";
    case LDP_MQTT_E_TYPE: return "reserved packet type 0";
    case LDP_MQTT_E_QOS: return "PUBLISH with QoS 3";
    case LDP_MQTT_E_TOPIC: return "PUBLISH topic beyond the packet";
    case LDP_MQTT_E_PACKET_ID: return "PUBLISH packet id missing or 0";
    case LDP_MQTT_E_PROPS: return "malformed PUBLISH properties";
    case LDP_MQTT_E_BIG: return "buffer too large or output too small";
    case LDP_MQTT_E_VERSION: return "MQTT version must be 4 or 5";
    default: return code >= 0 ? "ok" : "unknown error";
    }
}

/* n PUBACKs into out (4 * n bytes): 0x40 0x02 id_hi id_lo each (MQTT 3.1.1; in MQTT 5 a
 * PUBACK of remaining length 2 means reason code 0x00 Success without properties). */
void ldp_mqtt_pubacks(const uint16_t *ids, size_t n, uint8_t *out)
{
    size_t i;
    for (i = 0; i < n; i++) {
        out[4 * i] = 0x40;
        out[4 * i + 1] = 0x02;
        out[4 * i + 2] = (uint8_t)(ids[i] >> 8);
        out[4 * i + 3] = (uint8_t)ids[i];
    }
}

/* n PUBLISH packets into out[0..out_cap): packet i has topic topics[topic_off[i] ..
 * + topic_len[i]), payload payloads[i * payload_size .. + payload_size), QoS `qos` (0 or 1 or 2,
 * no DUP, no RETAIN) and, for QoS > 0, packet id ids[i] (non-zero); MQTT 5 packets carry an
 * empty property block. Returns the bytes written, or LDP_MQTT_E_* (< 0; out may be partly
 * written): E_BIG if out_cap is too small. */
int64_t ldp_mqtt_build_publishes(const uint8_t *topics, const uint32_t *topic_off,
                                 const uint32_t *topic_len, const uint8_t *payloads,
                                 size_t payload_size, size_t n, int qos, int version,
                                 const uint16_t *ids, uint8_t *out, size_t out_cap)
{
    size_t i, used = 0;
    if (version != 4 && version != 5)
        return LDP_MQTT_E_VERSION;
    if (qos < 0 || qos > 2)
        return LDP_MQTT_E_QOS;
    if (qos > 0 && ids == NULL)
        return LDP_MQTT_E_PACKET_ID;
    if (payload_size > VARINT_MAX)
        return LDP_MQTT_E_VARINT;
    for (i = 0; i < n; i++) {
        size_t tl = topic_len[i], rl, total;
        uint8_t *o;
        if (tl > 65535u)
            return LDP_MQTT_E_TOPIC;
        if (qos > 0 && ids[i] == 0)
            return LDP_MQTT_E_PACKET_ID;
        rl = 2 + tl + (qos > 0 ? 2u : 0u) + (version == 5 ? 1u : 0u) + payload_size;
        if (rl > VARINT_MAX)
            return LDP_MQTT_E_VARINT;
        total = 1 + varint_size((uint32_t)rl) + rl;
        if (total > out_cap - used)
            return LDP_MQTT_E_BIG;
        o = out + used;
        *o++ = (uint8_t)(0x30u | ((unsigned)qos << 1));
        o = put_varint(o, (uint32_t)rl);
        *o++ = (uint8_t)(tl >> 8);
        *o++ = (uint8_t)tl;
        for (size_t k = 0; k < tl; k++)
            o[k] = topics[topic_off[i] + k];
        o += tl;
        if (qos > 0) {
            *o++ = (uint8_t)(ids[i] >> 8);
            *o++ = (uint8_t)ids[i];
        }
        if (version == 5)
            *o++ = 0;
        for (size_t k = 0; k < payload_size; k++)
            o[k] = payloads[i * payload_size + k];
        used += total;
    }
    return (int64_t)used;
}

static int name_char(uint8_t c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'
           || c == '-';
}

/* One topic level against Python's re.match(r"^[A-Za-z0-9_-]{1,64}$", level): `$` also matches
 * before one final "\n", so a level may end with a single newline (config.NAME_RE). */
static int name_ok(const uint8_t *p, size_t len)
{
    size_t i;
    if (len < 1 || len > 64)
        return 0;
    for (i = 0; i < len; i++)
        if (!name_char(p[i]))
            return 0;
    return 1;
}

/* Report topics (spec §4), exactly as service/ingest.py parse_report_topic: the n topics
 * buf[topic_off[i] .. + topic_len[i]) split at '/' into 4 or 5 levels, "ldp", campaign, "r",
 * device [, id], each of campaign, device, id a NAME. ok[i] = 1 with the campaign span and the
 * device span (everything after "r/": one or two levels) when it matches, else ok[i] = 0 and
 * the spans 0. Returns the number of matching topics. */
int ldp_report_topics(const uint8_t *buf, size_t n, const uint32_t *topic_off,
                      const uint32_t *topic_len, uint32_t *camp_off, uint32_t *camp_len,
                      uint32_t *dev_off, uint32_t *dev_len, uint8_t *ok)
{
    size_t i;
    int good = 0;
    for (i = 0; i < n; i++) {
        const uint8_t *t = buf + topic_off[i];
        size_t len = topic_len[i], start[6], stop[6], levels = 0, k, j;
        int valid = 1;
        start[0] = 0;
        for (k = 0; k < len && levels < 5; k++) {
            if (t[k] == '/') {
                stop[levels] = k;
                start[++levels] = k + 1;
            }
        }
        if (levels < 5)
            stop[levels++] = len;
        else
            valid = 0; /* a sixth level (5 slashes) */
        if (valid && (levels < 4 || stop[0] - start[0] != 3 || t[0] != 'l' || t[1] != 'd'
                      || t[2] != 'p' || stop[2] - start[2] != 1 || t[start[2]] != 'r'))
            valid = 0;
        for (j = 1; valid && j < levels; j++)
            if (j != 2 && !name_ok(t + start[j], stop[j] - start[j]))
                valid = 0;
        ok[i] = (uint8_t)valid;
        camp_off[i] = camp_len[i] = dev_off[i] = dev_len[i] = 0;
        if (valid) {
            camp_off[i] = (uint32_t)(topic_off[i] + start[1]);
            camp_len[i] = (uint32_t)(stop[1] - start[1]);
            dev_off[i] = (uint32_t)(topic_off[i] + start[3]);
            dev_len[i] = (uint32_t)(len - start[3]);
            good++;
        }
    }
    return good;
}
