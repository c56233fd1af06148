/* LDPLCM frequency model on the C client: see lcm_model.h (protocol_spec/v2/ldplcm-model.md). */
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "lcm_model.h"

#define SMALL_INT ((int64_t)1 << 30)
#define INT32_LIMIT ((int64_t)1 << 31)

static int refuse(struct ldpc_reason *why, const char *message)
{
    ldpc_reason_set(why, "model", "%s", message);
    return -1;
}

/* A JSON list of 1..limit integers (not booleans: cJSON keeps them apart from numbers) as a
 * heap int64 array; NULL (and `why`) otherwise. */
static int64_t *int_list(const cJSON *doc, const char *name, size_t limit, size_t *count,
                         struct ldpc_reason *why)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc, name), *item;
    int64_t *out;
    size_t n = 0;
    int size = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1;
    if (size < 1 || (size_t)size > limit) {
        ldpc_reason_set(why, "model", "%s must be a list of 1..%lu integers", name, (unsigned long)limit);
        return NULL;
    }
    out = malloc((size_t)size * sizeof *out);
    if (out == NULL) {
        ldpc_reason_set(why, "model", "out of memory");
        return NULL;
    }
    cJSON_ArrayForEach(item, list) {
        if (!ldpc_json_int(item, &out[n])) {
            free(out);
            ldpc_reason_set(why, "model", "%s must be a list of 1..%lu integers", name, (unsigned long)limit);
            return NULL;
        }
        n++;
    }
    *count = n;
    return out;
}

/* ldplcm-model.md's per-tree rules and the sum bound, over the parsed lists. */
static int check_trees(const int64_t *roots, size_t trees, const int64_t *split, const int64_t *right,
                       size_t n, int64_t init, struct ldpc_reason *why)
{
    int64_t bound = init < 0 ? -init : init;
    size_t t, i;
    if (roots[0] != 0 || roots[trees - 1] >= (int64_t)n)
        return refuse(why, "roots must rise from 0 and stay below the node count");
    for (t = 1; t < trees; t++)
        if (roots[t] <= roots[t - 1])
            return refuse(why, "roots must rise from 0 and stay below the node count");
    for (t = 0; t < trees; t++) {
        size_t start = (size_t)roots[t], end = t + 1 < trees ? (size_t)roots[t + 1] : n;
        int64_t largest = -1;
        for (i = start; i < end; i++) {
            int64_t v = split[i], r = right[i];
            if (v < -INT32_LIMIT || v >= INT32_LIMIT) {
                ldpc_reason_set(why, "model", "split[%lu] does not fit int32", (unsigned long)i);
                return -1;
            }
            if (r == -1) {
                if ((v < 0 ? -v : v) > largest)
                    largest = v < 0 ? -v : v;
            } else if (!((int64_t)i + 1 < r && r < (int64_t)end)) {
                ldpc_reason_set(why, "model", "right[%lu] = %lld is not inside tree (%lu, %lu)", (unsigned long)i,
                                (long long)r, (unsigned long)(i + 1), (unsigned long)end);
                return -1;
            }
        }
        if (largest < 0) {
            ldpc_reason_set(why, "model", "tree at %lu has no leaf", (unsigned long)start);
            return -1;
        }
        bound += largest;
    }
    if (bound > SMALL_INT - 2)
        return refuse(why, "|init| + sum of the largest leaves exceeds 2^30 - 2");
    return 0;
}

static int32_t *narrow(const int64_t *v, size_t n)
{
    int32_t *out = malloc(n * sizeof *out);
    size_t i;
    if (out != NULL)
        for (i = 0; i < n; i++)
            out[i] = (int32_t)v[i];
    return out;
}

int ldpc_lcm_model_parse(struct ldpc_lcm_model *model, const cJSON *doc, struct ldpc_reason *why)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(doc, "format");
    int64_t version, scale_bits, init, boundary, *roots = NULL, *split = NULL, *right = NULL;
    size_t trees = 0, n = 0, n_right = 0;
    int rc = -1;
    memset(model, 0, sizeof *model);
    if (!cJSON_IsObject(doc))
        return refuse(why, "must be an object");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, LDPC_LCM_FORMAT) != 0
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "version"), &version) || version != LDPC_LCM_VERSION)
        return refuse(why, "format must be 'ldplcm-gbr' version 1");
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "scale_bits"), &scale_bits) || scale_bits < 0
        || scale_bits > LDPC_LCM_MAX_SCALE_BITS)
        return refuse(why, "scale_bits must be an integer in [0, 30]");
    if (!ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "init"), &init)
        || !ldpc_json_int(cJSON_GetObjectItemCaseSensitive(doc, "boundary"), &boundary) || boundary < -SMALL_INT
        || boundary >= SMALL_INT)
        return refuse(why, "init and boundary must be integers, boundary in [-2^30, 2^30)");
    if ((roots = int_list(doc, "roots", LDPC_LCM_MAX_TREES, &trees, why)) != NULL
        && (split = int_list(doc, "split", LDPC_LCM_MAX_NODES, &n, why)) != NULL
        && (right = int_list(doc, "right", LDPC_LCM_MAX_NODES, &n_right, why)) != NULL) {
        if (n_right != n)
            refuse(why, "split and right must have the same length");
        else if (check_trees(roots, trees, split, right, n, init, why) == 0) {
            model->roots = narrow(roots, trees);
            model->split = narrow(split, n);
            model->right = narrow(right, n);
            if (model->roots == NULL || model->split == NULL || model->right == NULL) {
                ldpc_lcm_model_free(model);
                refuse(why, "out of memory");
            } else {
                size_t i, t;
                int32_t *height = calloc(n, sizeof *height);
                model->depth = malloc(trees * sizeof *model->depth);
                if (height == NULL || model->depth == NULL) {
                    free(height);
                    ldpc_lcm_model_free(model);
                    refuse(why, "out of memory");
                    goto out;
                }
                /* children come after their parent in preorder: one backward pass */
                for (i = n; i-- > 0;) {
                    int32_t r = model->right[i];
                    if (r >= 0) {
                        int32_t a = height[i + 1], b = height[r];
                        height[i] = 1 + (a > b ? a : b);
                    }
                }
                for (t = 0; t < trees; t++)
                    model->depth[t] = height[model->roots[t]];
                free(height);
                model->scale_bits = (int32_t)scale_bits;
                model->init = (int32_t)init;
                model->boundary = (int32_t)boundary;
                model->trees = trees;
                model->nodes = n;
                rc = 0;
            }
        }
    }
out:
    free(roots);
    free(split);
    free(right);
    return rc;
}

void ldpc_lcm_model_free(struct ldpc_lcm_model *model)
{
    free(model->roots);
    free(model->split);
    free(model->right);
    free(model->depth);
    memset(model, 0, sizeof *model);
}

int64_t ldpc_lcm_model_evaluate(const struct ldpc_lcm_model *model, uint32_t x)
{
    const int32_t *split = model->split, *right = model->right;
    int64_t total = model->init, xi = (int64_t)x;
    size_t t;
    for (t = 0; t < model->trees; t++) {
        int32_t i = model->roots[t], step;
        for (step = 0; step < model->depth[t]; step++) {
            int32_t r = right[i], next = xi <= split[i] ? i + 1 : r;
            i = r < 0 ? i : next;
        }
        total += split[i];
    }
    return total;
}

int ldpc_lcm_model_is_high(const struct ldpc_lcm_model *model, uint32_t x)
{
    return ldpc_lcm_model_evaluate(model, x) >= model->boundary;
}
