/* hf_import.h: a Hugging Face model folder (config.json, *.safetensors with
 * or without model.safetensors.index.json, tokenizer.json,
 * tokenizer_config.json) converted to one GGUF file, for `create` with
 * `FROM ./dir`.
 *
 * The architecture comes from config.json's "architectures": llama and
 * mistral (LlamaForCausalLM, MistralForCausalLM: Q and K rows permuted to
 * GGUF's rope layout, as llama.cpp's converter does), qwen2, qwen3,
 * qwen3moe (experts stacked into ffn_*_exps), gemma2 and gemma3 text
 * models (RMSNorm weights stored as 1 + w, as llama.cpp does; sliding
 * window, soft-capping and local rope base keys), phi3 (fused qkv and
 * gate_up kept fused; LongRoPE factors and attention factor as llama.cpp
 * computes them; partial_rotary_factor) and bert (BertModel: embeddings
 * with token types and positions, LayerNorms with biases; the pooler is
 * dropped). Every tensor is renamed to
 * llama.cpp's name and its shape checked against config.json; a tensor that
 * is missing, of the wrong shape, or unknown to the architecture fails the
 * import naming the file and the tensor. Matrices keep their dtype (F32,
 * F16, BF16); 1-D tensors (norms, biases) and the MoE router become F32.
 * The vocabulary comes from hf_vocab.h; the chat template from
 * tokenizer_config.json or, failing that, chat_template.jinja.
 *
 * The output is written atomically (lib/gguf_write.h): on failure nothing
 * is left at out_path. Knows nothing of the store. */
#ifndef REG_HF_IMPORT_H
#define REG_HF_IMPORT_H

#include "lib/prelude.h"
#include "lib/status.h"

/* One file of the folder: its relative name and where its bytes are. */
typedef struct reg_hf_file {
    const char *name;
    const char *path;
} reg_hf_file_t;

/* Whether a create's file name belongs to a Hugging Face folder (not a
 * GGUF): config.json, *.safetensors, the index. */
bool reg_hf_is_folder_file(const char *name);

/* Asked before each tensor is converted (from the converting thread): a
 * status other than CR_OK (a create's CR_E_CANCELED) stops the import with
 * that status and error, leaving nothing at out_path. */
typedef cr_status_t (*reg_hf_step_fn)(void *ctx, cr_err_t *err);

/* Converts files[0..n-1] to a GGUF at out_path. *arch_out (may be NULL,
 * cap bytes) receives general.architecture. step (may be NULL) is asked
 * before each tensor, with step_ctx. CR_E_INVALID (missing or bad
 * config/tokenizer, wrong shapes, naming file and tensor), CR_E_CORRUPT /
 * CR_E_TRUNCATED (a safetensors file; lib/safetensors.h), CR_E_UNSUPPORTED
 * (architecture, dtype, rope scaling, tokenizer kind), CR_E_IO, CR_E_NOMEM,
 * or step's status. */
cr_status_t reg_hf_import(const reg_hf_file_t *files, size_t n,
                          const char *out_path, char *arch_out, size_t cap,
                          reg_hf_step_fn step, void *step_ctx, cr_err_t *err);

#endif
