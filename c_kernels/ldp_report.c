/* Report header packing, protocol v2 §3 (the aggregator checks headers in
 * ldpfleet.protocol.header_faults; devices only write them). */
#include "ldp_bytes.h"
#include <string.h>

#include "ldp_report.h"

static const char *const MECHANISM_NAMES[LDP_MECHANISM_COUNT + 1] = LDP_MECHANISM_NAMES_INIT;

/* version | mechanism | phase | flags = 0 | campaign_id:u32 | nonce:u32 */
void ldp_header_pack(uint8_t *out, uint8_t mechanism, uint8_t phase, uint32_t campaign_id, uint32_t nonce)
{
    out[0] = LDP_PROTOCOL_VERSION;
    out[1] = mechanism;
    out[2] = phase;
    out[3] = 0;
    put_le32(out + 4, campaign_id);
    put_le32(out + 8, nonce);
}

/* Registry id of a mechanism name, 0 if unknown. */
int ldp_mechanism_id(const char *name)
{
    int id;
    for (id = 1; id <= LDP_MECHANISM_COUNT; id++)
        if (strcmp(name, MECHANISM_NAMES[id]) == 0)
            return id;
    return 0;
}

/* The name of a registry id, "" if unknown. */
const char *ldp_mechanism_name(int id)
{
    return id >= 1 && id <= LDP_MECHANISM_COUNT ? MECHANISM_NAMES[id] : "";
}
