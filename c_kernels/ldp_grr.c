/* GRR client perturbation and aggregator counting, protocol v2 §3 (id 1). */
#include "ldp_bytes.h"
#include "ldp_grr.h"
#include "ldp_hash.h"

/* n users with item indices x[i] < d; words[2i], words[2i+1]; body i written at out + i*stride.
 * y = x if w0 < t_keep, else r = bucket(w1, d-1), y = r + (r >= x).
 * Returns 0, or -1 (nothing written) if d < 2 or some x[i] >= d. */
int ldp_grr_perturb(const uint32_t *x, size_t n, uint32_t d, uint32_t t_keep,
                    const uint32_t *words, uint8_t *out, size_t stride)
{
    size_t i;
    if (d < 2)
        return -1;
    for (i = 0; i < n; i++)
        if (x[i] >= d)
            return -1;
    for (i = 0; i < n; i++) {
        uint32_t y = x[i];
        if (words[2 * i] >= t_keep) {
            uint32_t r = ldp_bucket_inline(words[2 * i + 1], d - 1u);
            y = r + (r >= x[i] ? 1u : 0u);
        }
        put_le32(out + i * stride, y);
    }
    return 0;
}

/* counts[y] += 1 for every body; bodies with y >= d are skipped and counted in the result. */
int64_t ldp_grr_count(const uint8_t *bodies, size_t n, size_t stride, uint32_t d,
                      int64_t *counts)
{
    size_t i;
    int64_t skipped = 0;
    for (i = 0; i < n; i++) {
        uint32_t y = get_le32(bodies + i * stride);
        if (y < d)
            counts[y] += 1;
        else
            skipped += 1;
    }
    return skipped;
}
