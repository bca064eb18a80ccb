/* hf_vocab.h: a Hugging Face tokenizer (tokenizer.json, tokenizer_config.json,
 * config.json) as GGUF tokenizer.* keys, for the safetensors import.
 *
 * Three kinds of tokenizer.json are understood:
 *  - byte-level BPE (a ByteLevel pre-tokenizer): tokenizer.ggml.model
 *    "gpt2", tokens, merges, and tokenizer.ggml.pre named from the
 *    pre-tokenizer's definition (the Split regexes and ByteLevel's
 *    use_regex) as corral's tokenizer knows them: "gpt-2", "llama-bpe",
 *    "qwen2"; any other definition is refused, quoted;
 *  - SentencePiece-style BPE (byte_fallback, a Prepend/Metaspace "▁"):
 *    tokenizer.ggml.model "llama"; a token's score is minus the rank of
 *    the first merge that makes it, so SentencePiece's highest-score-first
 *    merging repeats the merge order.
 *  - WordPiece: tokenizer.ggml.model "bert", pieces in llama.cpp's form
 *    ("▁" before a word start, "##" dropped from a continuation), the
 *    cls/sep/mask/pad/unk ids.
 * Added tokens become control (special) or user-defined tokens; ids no
 * token names up to vocab_size become "[PAD<id>]". bos/eos/unk/pad come
 * from tokenizer_config.json (token text) or config.json (ids);
 * add_bos/add_eos from tokenizer_config.json; the chat template from
 * tokenizer_config.json's chat_template (a string, or the "default" entry
 * of a list). Knows nothing of tensors. */
#ifndef REG_HF_VOCAB_H
#define REG_HF_VOCAB_H

#include "lib/prelude.h"
#include "lib/gguf_write.h"
#include "lib/status.h"

#include <jansson.h>

#define REG_HF_MAX_VOCAB (1u << 22) /* tokens */

/* Adds the tokenizer.* keys for tokenizer (tokenizer.json's root),
 * tok_config (tokenizer_config.json's, may be NULL) and config
 * (config.json's) to w. vocab_size: the embedding rows (0: the tokenizer's
 * own count). *n_tokens receives the token count written. CR_E_INVALID /
 * CR_E_UNSUPPORTED naming "tokenizer.json" and the field; CR_E_NOMEM. */
cr_status_t reg_hf_vocab_add(cr_gguf_writer_t *w, const json_t *tokenizer,
                             const json_t *tok_config, const json_t *config,
                             uint32_t vocab_size, uint32_t *n_tokens,
                             cr_err_t *err);

/* The tokenizer's own token count: the highest id of model.vocab and
 * added_tokens plus one; 0 if it has none or is malformed. */
uint32_t reg_hf_vocab_count(const json_t *tokenizer);

#endif
