/* prompt_tokens.h: tokenizing a rendered prompt so that only its trusted
 * bytes can become control tokens.
 *
 * rn_prompt_chat / rn_prompt_generate mark which bytes of the prompt came
 * from the template (and the model's own data) and which were printed out
 * of request data (rn_prompt_result_t.spans). Tokenizing the whole text
 * with parse_special would turn a user's "<|eot_id|>" into the real end of
 * turn: prompt injection. rn_prompt_tokenize finds control-token texts
 * only where they lie wholly inside trusted bytes; everything else,
 * request data included, is tokenized as plain text.
 *
 * Ids match rn_tokenize(whole text, add_special, parse_special=true)
 * exactly whenever no untrusted byte range holds a control token's text:
 * the text is cut at the trusted control tokens only, as rn_tokenize cuts
 * it, and each piece between is tokenized in one call, so BPE merges and
 * pre-tokenizer words that straddle a trust boundary are unchanged, and
 * SentencePiece's space prefix lands where it would (first piece, and after
 * each control token). A token's left/right space stripping (phi-3) is
 * kept too. One known difference: where a user-defined token's text
 * overlaps a control token's text, rn_tokenize picks by length across both
 * kinds, while here control tokens are cut first (no real vocabulary has
 * such overlaps).
 *
 * Does not own the tokenizer (tokenizer.h) or the prompt (prompt.h). */
#ifndef RN_PROMPT_TOKENS_H
#define RN_PROMPT_TOKENS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/text/tokenizer.h"

/* Tokenizes r->text[0..r->len) (borrowed) with tok (borrowed).
 *
 * Control and unknown-type tokens (those rn_tokenize matches only with
 * parse_special) are recognised only inside trusted spans; bytes no span
 * covers count as untrusted. add_special: BOS/EOS where the vocabulary asks
 * for them, once, as rn_tokenize does (the engine passes true).
 *
 * Writes at most cap ids to out and sets *n_out to the number the prompt
 * needs; CR_E_TOO_LARGE if that is more than cap (out holds the first cap
 * ids) or the text is over RN_TOK_MAX_INPUT_BYTES; CR_E_INVALID for spans
 * out of order or past the text; CR_E_NOMEM. Thread-safe as rn_tokenize. */
cr_status_t rn_prompt_tokenize(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                               bool add_special, int32_t *out, size_t cap, size_t *n_out,
                               cr_err_t *err);

#endif
