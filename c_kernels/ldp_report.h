/* Report header, protocol v2 §3: 12 bytes, little-endian. Portable C99, no allocation. */
#ifndef LDP_REPORT_H
#define LDP_REPORT_H
#include <stddef.h>
#include <stdint.h>

#ifndef LDP_PROTOCOL_VERSION
#define LDP_PROTOCOL_VERSION 2
#endif
#ifndef LDP_HEADER_SIZE
#define LDP_HEADER_SIZE 12
#endif

/* Mechanism ids, names and families: generated from protocol_spec/v2/registry.json. */
#include "ldp_mechanism_ids.h"

/* cdef-begin */
void ldp_header_pack(uint8_t *out, uint8_t mechanism, uint8_t phase, uint32_t campaign_id, uint32_t nonce);
int ldp_mechanism_id(const char *name);
const char *ldp_mechanism_name(int id);
/* cdef-end */

#endif
