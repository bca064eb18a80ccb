/* spec.h: speculative decoding's drafting (prompt lookup).
 *
 * A draft proposes the next tokens of a sequence cheaply; the engine
 * (engine.c) evaluates the pending token and the draft in one forward pass
 * of the model, keeps the longest prefix the sampler agrees with
 * (sampler.h: rn_sampler_pick_draft, the accept/reject rule) and drops the
 * rest from the KV cache. This module only proposes: prompt lookup finds
 * the newest earlier place where the sequence's last few tokens occurred
 * and proposes what followed them there (text that repeats its input,
 * code edits, quoting). It owns no model, cache or sampler and allocates
 * nothing. */
#ifndef RN_SPEC_H
#define RN_SPEC_H

#include "lib/prelude.h"

/* Most tokens one step drafts (the option draft_ngram's upper bound). */
#define RN_SPEC_MAX_DRAFT 16
/* Longest and shortest tail matched by prompt lookup, in tokens: the
 * longest tail that occurred before wins (longer matches predict better). */
#define RN_SPEC_NGRAM_MAX 4
#define RN_SPEC_NGRAM_MIN 2

/* Prompt lookup over hist[0..n) (the sequence so far, its last token the
 * one about to be evaluated): for tail lengths RN_SPEC_NGRAM_MAX down to
 * RN_SPEC_NGRAM_MIN, the newest earlier occurrence of the last m tokens
 * that k_max tokens follow, whose continuation is written to out; when
 * none has k_max after it (near the end: a short loop), the occurrence
 * with the longest continuation (ties: the longer tail, then the newer).
 * Returns how many tokens (0: no match, k_max <= 0, or n too short).
 * Negative ids (image embeddings) never match and are never proposed. */
int rn_spec_ngram_draft(const int32_t *hist, int n, int k_max, int32_t *out);

#endif
