/* precut.h: a request's work bounded by the runner's context, before any
 * rendering (issue 20, finding 2).
 *
 * History truncation (prompt.c) renders and counts the conversation
 * O(log n) times; each render is O(messages + bytes), so a request of 100k
 * messages still took over a minute and lost the runner its heartbeat.
 * But truncation only ever keeps a suffix of the non-system messages that
 * fits num_ctx, so messages that could not be in that suffix are cut here
 * first, without changing which ones it keeps:
 *   - by bytes: a token's text is at most max_token_bytes (the vocabulary's
 *     longest piece), so once the messages after m hold more than
 *     n_ctx x max_token_bytes bytes of text they alone are over num_ctx
 *     tokens, and m (and every older message) is dropped by truncation;
 *   - by count: every message a template shows costs at least one token
 *     (its role's header), so at most n_ctx of the newest can be kept.
 * System messages are never cut (truncation keeps them) and the last
 * message always stays. What remains is O(n_ctx) messages and
 * O(n_ctx x max_token_bytes) bytes besides the last message and the
 * system ones, which rn_prompt_bytes_cap bounds through the renders. */
#ifndef RN_PROMPT_PRECUT_H
#define RN_PROMPT_PRECUT_H

#include "lib/prelude.h"
#include "services/runner/prompt/prompt.h"

typedef struct rn_prompt_cut {
    size_t msgs;   /* messages cut */
    size_t images; /* images those messages carried */
    size_t system; /* system messages (all kept): more than n_ctx of them
                      cannot fit whatever is dropped */
} rn_prompt_cut_t;

/* Cuts msgs[0..n) as above, in place (the kept ones move to the front in
 * their order); returns how many remain and fills *cut. n_ctx <= 0 or
 * max_token_bytes == 0 cuts nothing. */
size_t rn_prompt_precut(rn_prompt_msg_t *msgs, size_t n, int64_t n_ctx,
                        size_t max_token_bytes, rn_prompt_cut_t *cut);

/* The most bytes a rendering for a context of n_ctx tokens may take:
 * twice what n_ctx tokens of the longest piece could hold, at least
 * RN_PROMPT_CAP_MIN_BYTES (a small model still takes a long prompt to
 * truncate) and at most RN_PROMPT_DEFAULT_MAX_BYTES. Past it a request is
 * refused (413): its text is many times what the context could ever hold,
 * and tokenizing it all would cost time and memory the plan does not
 * have. */
#define RN_PROMPT_CAP_MIN_BYTES (1u << 20)
size_t rn_prompt_bytes_cap(int64_t n_ctx, size_t max_token_bytes);

#endif
