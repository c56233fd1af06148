/* Report header packing and parsing, protocol v2 §3. */
#include <string.h>

#include "ldp_report.h"

static const char *const MECHANISM_NAMES[] = {
    "", "grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm",
};
#define MECHANISM_MAX 9

static const char *const ERROR_FIELDS[] = {"", "size", "version", "mechanism", "phase", "flags"};

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

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

/* Checks size, version, mechanism id, phase in {1, 2} and flags == 0, in that order (the
 * order of ldpfleet.protocol.parse_header); outputs are written only on success and may be NULL. */
int ldp_header_parse(const uint8_t *report, size_t len, uint8_t *mechanism, uint8_t *phase,
                     uint32_t *campaign_id, uint32_t *nonce)
{
    if (len < LDP_HEADER_SIZE)
        return LDP_REPORT_ESIZE;
    if (report[0] != LDP_PROTOCOL_VERSION)
        return LDP_REPORT_EVERSION;
    if (report[1] < 1 || report[1] > MECHANISM_MAX)
        return LDP_REPORT_EMECHANISM;
    if (report[2] != 1 && report[2] != 2)
        return LDP_REPORT_EPHASE;
    if (report[3] != 0)
        return LDP_REPORT_EFLAGS;
    if (mechanism)
        *mechanism = report[1];
    if (phase)
        *phase = report[2];
    if (campaign_id)
        *campaign_id = get_le32(report + 4);
    if (nonce)
        *nonce = get_le32(report + 8);
    return LDP_REPORT_OK;
}

const char *ldp_report_error_field(int code)
{
    if (code < LDP_REPORT_ESIZE || code > LDP_REPORT_EFLAGS)
        return "";
    return ERROR_FIELDS[code];
}

/* Registry id of a mechanism name, 0 if unknown. */
int ldp_mechanism_id(const char *name)
{
    int id;
    for (id = 1; id <= MECHANISM_MAX; id++)
        if (strcmp(name, MECHANISM_NAMES[id]) == 0)
            return id;
    return 0;
}

const char *ldp_mechanism_name(int id)
{
    return id >= 1 && id <= MECHANISM_MAX ? MECHANISM_NAMES[id] : "";
}
