/* spec.c: prompt-lookup drafting for speculative decoding (spec.h). */
#include "lib/prelude.h"
#include "services/runner/spec.h"

/* Whether hist[at..at+m) equals the tail hist[n-m..n). */
static bool same_run(const int32_t *hist, int n, int at, int m)
{
    for (int i = 0; i < m; i++)
        if (hist[at + i] != hist[n - m + i] || hist[at + i] < 0)
            return false;
    return true;
}

int rn_spec_ngram_draft(const int32_t *hist, int n, int k_max, int32_t *out)
{
    if (k_max <= 0 || !hist)
        return 0;
    k_max = CR_MIN(k_max, RN_SPEC_MAX_DRAFT);
    for (int m = RN_SPEC_NGRAM_MAX; m >= RN_SPEC_NGRAM_MIN; m--) {
        if (n < m + 1)
            continue;
        /* newest first: the most recent context predicts best; the match
         * must end before the tail so at least one token follows it */
        for (int at = n - m - 1; at >= 0; at--) {
            if (!same_run(hist, n, at, m))
                continue;
            int k = 0;
            for (int j = at + m; j < n && k < k_max && hist[j] >= 0; j++)
                out[k++] = hist[j];
            if (k > 0)
                return k;
        }
    }
    return 0;
}
