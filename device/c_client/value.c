/* The device's value prepared once at start: see value.h. */
#include <string.h>

#include "envelope.h"
#include "value.h"

static struct ldpc_item item_of(const cJSON *v)
{
    struct ldpc_item it;
    int64_t x;
    memset(&it, 0, sizeof it);
    if (v != NULL && ldpc_json_int(v, &x) && x >= 0 && x <= 0xffffffffll) {
        it.kind = LDPC_ITEM_INT;
        it.int_value = (uint32_t)x;
    } else if (cJSON_IsString(v) && v->valuestring[0] != '\0') {
        it.kind = LDPC_ITEM_STR;
        it.str_key = ldpc_string_key(v->valuestring);
    }
    return it;
}

void ldpc_value_set_device(struct ldpc_value *v, const char *device)
{
    memset(v->device, 0, sizeof v->device);
    strncpy(v->device, device, sizeof v->device - 1);
}

void ldpc_value_init(struct ldpc_value *v, const cJSON *value)
{
    const cJSON *item = cJSON_IsArray(value) ? value->child : value;
    size_t j, k;
    char device[sizeof v->device];
    memcpy(device, v->device, sizeof device); /* the id stays (ldpc_value_set_device) */
    memset(v, 0, sizeof *v);
    memcpy(v->device, device, sizeof device);
    ldpc_pem_source(value, v->pem_src);
    if (!cJSON_IsArray(value))
        v->one = item_of(value);
    for (j = 0; j < LDPC_SET_CAPACITY; j++) {
        v->slot[j] = item_of(item);
        item = item != NULL && cJSON_IsArray(value) ? item->next : NULL;
    }
    item = cJSON_IsArray(value) ? value->child : value;
    for (j = 0; j < LDPC_READINGS; j++) {
        v->is_number[j] = (uint8_t)(cJSON_IsNumber(item) != 0);
        v->reading[j] = cJSON_IsNumber(item) ? item->valuedouble : 0.0;
        item = item != NULL && cJSON_IsArray(value) ? item->next : NULL;
    }
    /* repeats count once (spec §1): slot j is dropped if an earlier slot holds the same item */
    for (j = 1; j < LDPC_SET_CAPACITY; j++) {
        uint32_t dup = 0;
        for (k = 0; k < j; k++)
            dup |= (uint32_t)(v->slot[k].kind == v->slot[j].kind) & (uint32_t)(v->slot[k].int_value == v->slot[j].int_value)
                   & (uint32_t)(v->slot[k].str_key == v->slot[j].str_key);
        v->slot[j].kind &= dup - 1u;
    }
}
