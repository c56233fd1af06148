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

/* Mechanism ids (protocol_spec/v2/registry.json). */
#define LDP_MECHANISM_ID_GRR 1
#define LDP_MECHANISM_ID_OLH 2
#define LDP_MECHANISM_ID_FLH 3
#define LDP_MECHANISM_ID_OUE 4
#define LDP_MECHANISM_ID_CMS 5
#define LDP_MECHANISM_ID_HCMS 6
#define LDP_MECHANISM_ID_SH 7
#define LDP_MECHANISM_ID_SRAPPOR 8
#define LDP_MECHANISM_ID_LCM 9
#define LDP_MECHANISM_ID_PSGRR 10
#define LDP_MECHANISM_ID_PSOLH 11
#define LDP_MECHANISM_ID_SHC 12
/* numeric metrics, spec §3.3 */
#define LDP_MECHANISM_ID_DUCHI 13
#define LDP_MECHANISM_ID_PM 14
#define LDP_MECHANISM_ID_HM 15
#define LDP_MECHANISM_ID_SW 16
/* longitudinal (memoised) mechanisms, spec §3.2 */
#define LDP_MECHANISM_ID_LOSUE 17
#define LDP_MECHANISM_ID_LSUE 18
#define LDP_MECHANISM_ID_LGRR 19
#define LDP_MECHANISM_ID_LOLOHA 20
#define LDP_MECHANISM_ID_LBITMEAN 21

/* cdef-begin */
void ldp_header_pack(uint8_t *out, uint8_t mechanism, uint8_t phase, uint32_t campaign_id, uint32_t nonce);
int ldp_mechanism_id(const char *name);
const char *ldp_mechanism_name(int id);
/* cdef-end */

#endif
