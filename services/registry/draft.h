/* draft.h: the draft model a model names for speculative decoding.
 *
 * A model created with `draft` (Modelfile `DRAFT NAME`) carries the named
 * model's weights as a draft layer (REG_MT_DRAFT, the same blob, shared)
 * and its name in the config blob's "draft" field. Speculation only works
 * when the draft proposes tokens of the target's vocabulary, so create
 * checks that here. This module judges two GGUF handles; it reads no store
 * and allocates nothing. */
#ifndef REG_DRAFT_H
#define REG_DRAFT_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"

/* Checks that the draft model (`draft`, named draft_name in messages) has
 * the target's vocabulary: the same tokenizer.ggml.model and the same
 * tokenizer.ggml.tokens, token for token. CR_E_INVALID naming the first
 * difference ("draft model \"d\" has 512 tokens; the model has 260"),
 * including a file without a token list. Both handles are borrowed. */
cr_status_t reg_draft_check_vocab(const cr_gguf_t *target, const cr_gguf_t *draft,
                                  const char *draft_name, cr_err_t *err);

#endif
