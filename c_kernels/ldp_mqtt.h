/* MQTT wire helpers for the aggregator's lean ingest client (aggregator/ldpfleet/mqtt/lean.py):
 * scan a buffer of MQTT control packets in one call, build PUBACKs and PUBLISH packets in
 * bulk, and check report topics `ldp/<campaign>/r/<device>[/<id>]` (protocol v2 §4).
 * MQTT 3.1.1 (version 4) and MQTT 5 (version 5). Portable C99, no allocation, no globals;
 * nothing is read beyond the given lengths. */
#ifndef LDP_MQTT_H
#define LDP_MQTT_H
#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
/* Negative results of ldp_mqtt_scan (and ldp_mqtt_build_publishes). */
enum {
    LDP_MQTT_E_VARINT = -1,     /* remaining length: 5th length byte, i.e. > 268,435,455 */
    LDP_MQTT_E_TYPE = -2,       /* packet type 0 (reserved) */
    LDP_MQTT_E_QOS = -3,        /* PUBLISH with QoS 3 */
    LDP_MQTT_E_TOPIC = -4,      /* PUBLISH topic length beyond the packet */
    LDP_MQTT_E_PACKET_ID = -5,  /* QoS > 0 PUBLISH without room for a packet id, or id 0 */
    LDP_MQTT_E_PROPS = -6,      /* MQTT 5 PUBLISH properties malformed or beyond the packet */
    LDP_MQTT_E_BIG = -7,        /* buffer offsets beyond 32 bits / output too small */
    LDP_MQTT_E_VERSION = -8     /* version neither 4 nor 5 */
};

int64_t ldp_mqtt_scan(const uint8_t *buf, size_t len, int version, size_t max_packets,
                      uint8_t *first_byte, uint32_t *body_off, uint32_t *end_off,
                      uint32_t *topic_off, uint32_t *topic_len, uint32_t *payload_off,
                      uint32_t *payload_len, uint16_t *packet_id, size_t *consumed);
const char *ldp_mqtt_strerror(int64_t code);
void ldp_mqtt_pubacks(const uint16_t *ids, size_t n, uint8_t *out);
int64_t ldp_mqtt_build_publishes(const uint8_t *topics, const uint32_t *topic_off,
                                 const uint32_t *topic_len, const uint8_t *payloads,
                                 size_t payload_size, size_t n, int qos, int version,
                                 const uint16_t *ids, uint8_t *out, size_t out_cap);
int ldp_report_topics(const uint8_t *buf, size_t n, const uint32_t *topic_off,
                      const uint32_t *topic_len, uint32_t *camp_off, uint32_t *camp_len,
                      uint32_t *dev_off, uint32_t *dev_len, uint8_t *ok);
/* cdef-end */

#endif
