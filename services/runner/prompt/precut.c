/* precut.c: messages truncation could never keep, cut before rendering
 * (see precut.h). */
#include "lib/prelude.h"
#include "services/runner/prompt/precut.h"

static size_t text_bytes(const rn_prompt_msg_t *m)
{
    return (m->content ? strlen(m->content) : 0) + (m->thinking ? strlen(m->thinking) : 0);
}

static bool is_system(const rn_prompt_msg_t *m)
{
    return m->role && !strcmp(m->role, "system");
}

size_t rn_prompt_precut(rn_prompt_msg_t *msgs, size_t n, int64_t n_ctx,
                        size_t max_token_bytes, rn_prompt_cut_t *cut)
{
    *cut = (rn_prompt_cut_t){0};
    for (size_t i = 0; i < n; i++)
        cut->system += is_system(&msgs[i]);
    if (n < 2 || n_ctx <= 0 || max_token_bytes == 0)
        return n;
    /* Walking from the newest: the first (newest) message that must go;
     * everything older goes too, system messages excepted. */
    size_t byte_limit = (size_t)n_ctx > SIZE_MAX / max_token_bytes
                            ? SIZE_MAX
                            : (size_t)n_ctx * max_token_bytes;
    size_t newer_bytes = text_bytes(&msgs[n - 1]), newer_count = 1;
    size_t first_kept = 0;
    for (size_t i = n - 1; i-- > 0;) {
        if (is_system(&msgs[i])) {
            newer_bytes += text_bytes(&msgs[i]); /* in every prompt */
            continue;
        }
        if (newer_bytes > byte_limit || newer_count >= (size_t)n_ctx) {
            first_kept = i + 1;
            break;
        }
        newer_bytes += text_bytes(&msgs[i]);
        newer_count++;
    }
    if (first_kept == 0)
        return n;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i < first_kept && !is_system(&msgs[i])) {
            cut->msgs++;
            cut->images += msgs[i].n_images;
            continue;
        }
        msgs[k++] = msgs[i];
    }
    return k;
}

size_t rn_prompt_bytes_cap(int64_t n_ctx, size_t max_token_bytes)
{
    size_t cap = RN_PROMPT_DEFAULT_MAX_BYTES;
    if (n_ctx > 0 && max_token_bytes > 0 &&
        (uint64_t)n_ctx <= RN_PROMPT_DEFAULT_MAX_BYTES / 2 / max_token_bytes)
        cap = 2 * (size_t)n_ctx * max_token_bytes;
    return CR_MAX(cap, (size_t)RN_PROMPT_CAP_MIN_BYTES);
}
