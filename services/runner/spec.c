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

/* Tokens after hist[at..at+m) up to k_max, stopping at the end or an
 * image id. */
static int follow_len(const int32_t *hist, int n, int at, int m, int k_max)
{
    int k = 0;
    for (int j = at + m; j < n && k < k_max && hist[j] >= 0; j++)
        k++;
    return k;
}

int rn_spec_ngram_draft(const int32_t *hist, int n, int k_max, int32_t *out)
{
    if (k_max <= 0 || !hist)
        return 0;
    k_max = CR_MIN(k_max, RN_SPEC_MAX_DRAFT);
    int best_at = -1, best_m = 0, best_k = 0;
    for (int m = RN_SPEC_NGRAM_MAX; m >= RN_SPEC_NGRAM_MIN && best_k < k_max; m--) {
        /* newest first: the most recent context predicts best; the match
         * must end before the tail so at least one token follows it */
        for (int at = n - m - 1; at >= 0; at--) {
            if (!same_run(hist, n, at, m))
                continue;
            int k = follow_len(hist, n, at, m, k_max);
            if (k > best_k) {
                best_at = at;
                best_m = m;
                best_k = k;
            }
            if (k == k_max)
                break;
        }
    }
    for (int i = 0; i < best_k; i++)
        out[i] = hist[best_at + best_m + i];
    return best_k;
}
