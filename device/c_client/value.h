/* The device's value prepared once at start (spec §7.1 "constant work"): the key of every
 * element is computed before any message arrives, and a set is held in LDPC_SET_CAPACITY
 * slots whose repeats are marked once, comparing every pair of slots. A trigger then maps
 * the slots to a campaign's domain with the same work whatever the value holds. */
#ifndef LDPC_VALUE_H
#define LDPC_VALUE_H
#include <stdint.h>

#include <cjson/cJSON.h>

#include "mech_pem.h"

#define LDPC_VALUE_ID_MAX 129 /* a device id: <login>/<id>, each up to 64 */

#define LDPC_SET_CAPACITY 64 /* spec §7.1: a set value is processed over this many slots */
#define LDPC_READINGS 64     /* numeric campaigns: one reading per metric, at most 64 (spec §1.1) */

/* What one element is (spec §1): an integer item (0..2^32-1), a string item (non-empty; its
 * key), or nothing (another type, an empty string, no element, a repeat of an earlier slot). */
enum { LDPC_ITEM_NONE = 0, LDPC_ITEM_INT = 1, LDPC_ITEM_STR = 2 };

struct ldpc_item {
    uint32_t kind, int_value, str_key;
};

/* `one`: the value as one item (a list is NONE: ⊥ in a one-item campaign); `slot`: the
 * first LDPC_SET_CAPACITY elements of a set (a value that is not a list is a one-element set;
 * a longer set is truncated, never refused), in order. */
struct ldpc_value {
    struct ldpc_item one;
    struct ldpc_item slot[LDPC_SET_CAPACITY];
    /* numeric campaigns (spec §1.1): the value as readings (a number is metric 0's; a list
     * gives one per metric), `is_number` 0 where it is not a number (it then reports the
     * grid's midpoint) */
    double reading[LDPC_READINGS];
    uint8_t is_number[LDPC_READINGS];
    /* strings campaigns (spec §3.5): a string's first LDPC_PEM_MAX_LEN UTF-8 bytes (0 past its
     * end, all 0 for another value), read in that many slots; `device` the device id (its PEM
     * group is public), kept across ldpc_value_init */
    uint8_t pem_src[LDPC_PEM_MAX_LEN];
    char device[LDPC_VALUE_ID_MAX + 1];
};

/* `v` must be zeroed or initialised before the first call (its device id is kept). */
void ldpc_value_init(struct ldpc_value *v, const cJSON *value);
void ldpc_value_set_device(struct ldpc_value *v, const char *device);

#endif
