/* Report header packing, protocol v2 §3 (the aggregator checks headers in
 * ldpfleet.protocol.header_faults; devices only write them). */
#include "ldp_bytes.h"
#include <string.h>

#include "ldp_report.h"

static const char *const MECHANISM_NAMES[] = {
    "", "grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm", "psgrr", "psolh", "shc",
    "duchi", "pm", "hm", "sw", /* numeric metrics, spec §3.3 */
};
#define MECHANISM_MAX 16
/* Ids LONGITUDINAL_FIRST.. (spec §3.2). */
static const char *const LONGITUDINAL_NAMES[] = {"losue", "lsue", "lgrr", "loloha", "lbitmean"};
#define LONGITUDINAL_FIRST 17
#define LONGITUDINAL_COUNT 5

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
    for (id = 1; id <= MECHANISM_MAX; id++)
        if (strcmp(name, MECHANISM_NAMES[id]) == 0)
            return id;
    for (id = 0; id < LONGITUDINAL_COUNT; id++)
        if (strcmp(name, LONGITUDINAL_NAMES[id]) == 0)
            return LONGITUDINAL_FIRST + id;
    return 0;
}

const char *ldp_mechanism_name(int id)
{
    if (id >= LONGITUDINAL_FIRST && id < LONGITUDINAL_FIRST + LONGITUDINAL_COUNT)
        return LONGITUDINAL_NAMES[id - LONGITUDINAL_FIRST];
    return id >= 1 && id <= MECHANISM_MAX ? MECHANISM_NAMES[id] : "";
}
