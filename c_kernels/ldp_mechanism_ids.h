/* Generated from protocol_spec/v2/registry.json by `python tools/gen_tables.py`: do not edit. */
/* Mechanism ids of protocol v2 (spec §3), their names by id and their families. */
#ifndef LDP_MECHANISM_IDS_H
#define LDP_MECHANISM_IDS_H

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
#define LDP_MECHANISM_ID_DUCHI 13
#define LDP_MECHANISM_ID_PM 14
#define LDP_MECHANISM_ID_HM 15
#define LDP_MECHANISM_ID_SW 16
#define LDP_MECHANISM_ID_LOSUE 17
#define LDP_MECHANISM_ID_LSUE 18
#define LDP_MECHANISM_ID_LGRR 19
#define LDP_MECHANISM_ID_LOLOHA 20
#define LDP_MECHANISM_ID_LBITMEAN 21
#define LDP_MECHANISM_ID_PEM 22
#define LDP_MECHANISM_COUNT 22

/* Initializer of a names-by-id array: index 0 is "" (no mechanism). */
#define LDP_MECHANISM_NAMES_INIT \
    {"", "grr", "olh", "flh", "oue", "cms", "hcms", "sh", "srappor", "lcm", "psgrr", "psolh", \
     "shc", "duchi", "pm", "hm", "sw", "losue", "lsue", "lgrr", "loloha", "lbitmean", "pem"}

/* the value is a set of items */
#define LDP_MECHANISM_SET_VALUED(id) \
    ((id) == LDP_MECHANISM_ID_SH || (id) == LDP_MECHANISM_ID_SRAPPOR || \
     (id) == LDP_MECHANISM_ID_PSGRR || (id) == LDP_MECHANISM_ID_PSOLH || \
     (id) == LDP_MECHANISM_ID_SHC)

/* numeric domains, spec §1.1 and §3.3 */
#define LDP_MECHANISM_NUMERIC(id) \
    ((id) == LDP_MECHANISM_ID_DUCHI || (id) == LDP_MECHANISM_ID_PM || \
     (id) == LDP_MECHANISM_ID_HM || (id) == LDP_MECHANISM_ID_SW)

/* memoised, spec §3.2 */
#define LDP_MECHANISM_LONGITUDINAL(id) \
    ((id) == LDP_MECHANISM_ID_LOSUE || (id) == LDP_MECHANISM_ID_LSUE || \
     (id) == LDP_MECHANISM_ID_LGRR || (id) == LDP_MECHANISM_ID_LOLOHA || \
     (id) == LDP_MECHANISM_ID_LBITMEAN)

/* takes the item's domain index, not its key */
#define LDP_MECHANISM_BY_INDEX(id) \
    ((id) == LDP_MECHANISM_ID_GRR || (id) == LDP_MECHANISM_ID_OUE || \
     (id) == LDP_MECHANISM_ID_LOSUE || (id) == LDP_MECHANISM_ID_LSUE || \
     (id) == LDP_MECHANISM_ID_LGRR)

/* phase 2 takes the candidate list as its items */
#define LDP_MECHANISM_LISTED(id) \
    ((id) == LDP_MECHANISM_ID_SRAPPOR || (id) == LDP_MECHANISM_ID_PSGRR || \
     (id) == LDP_MECHANISM_ID_PSOLH)

#endif
