/* hf_config.h: a Hugging Face config.json as GGUF hyperparameters, for the
 * safetensors import (hf_import.c).
 *
 * Reads the architecture ("architectures"[0]) and the sizes the tensor
 * mapping needs, checked against named limits, and writes llama.cpp's
 * <arch>.* keys: sizes, norm epsilon, rope base and dims
 * (partial_rotary_factor), head sizes, experts, gemma's window and
 * soft-capping, BERT's encoder keys; and rope scaling: linear and yarn as
 * keys, Llama 3.1's as rope_freqs.weight and phi3's LongRoPE as factor
 * tensors with the attention factor, computed as llama.cpp's converter
 * does. Knows nothing of safetensors or the store. */
#ifndef REG_HF_CONFIG_H
#define REG_HF_CONFIG_H

#include "lib/prelude.h"
#include "lib/gguf_write.h"
#include "lib/status.h"

#include <jansson.h>

/* What an architecture's tensors and keys need. */
enum {
    REG_HF_PERMUTE_QK = 1u << 0, /* llama: Q/K rows to GGUF's rope layout */
    REG_HF_QKV_BIAS = 1u << 1,   /* qwen2 */
    REG_HF_QK_NORM = 1u << 2,    /* qwen3 */
    REG_HF_MOE = 1u << 3,        /* qwen3moe */
    REG_HF_GEMMA = 1u << 4,      /* gemma2/3: four norms a layer, stored 1 + w */
    REG_HF_FUSED = 1u << 5,      /* phi3: qkv_proj and gate_up_proj */
    REG_HF_TIED = 1u << 6,       /* no lm_head whatever the config says */
    REG_HF_BERT = 1u << 7,       /* encoder: LayerNorms with biases, no rope */
    REG_HF_CUT_VOCAB = 1u << 8,  /* gemma3: embedding rows past the
                                    tokenizer's tokens dropped, as
                                    llama.cpp does */
};

/* config.json's sizes (checked) and the architecture's flags. */
typedef struct reg_hf_hparams {
    const char *arch;  /* general.architecture (static string) */
    unsigned flags;    /* REG_HF_* */
    int64_t dim, n_layers, n_heads, n_kv, ffn, ctx, head_dim, vocab;
    int64_t n_expert, n_expert_used, expert_ffn;
    int64_t n_token_types; /* bert */
    int64_t rope_dims;     /* rotated dims of a head (partial_rotary_factor) */
    double eps, rope_base;
    bool tied;
} reg_hf_hparams_t;

/* Rope tensors computed from config.json, BORROWED by the GGUF writer
 * until its last write; free with reg_hf_rope_free. */
typedef struct reg_hf_rope {
    float *long_f, *short_f; /* phi3 LongRoPE factors [rope_dims / 2] */
    float *freqs;            /* Llama 3.1 rope factors [rope_dims / 2] */
} reg_hf_rope_t;

/* Fills hp from config.json's root. CR_E_INVALID naming the field
 * ("config.json: hidden_size is missing"), CR_E_UNSUPPORTED for an
 * architecture not in the table (naming the supported ones). */
cr_status_t reg_hf_hparams_read(const json_t *cfg, reg_hf_hparams_t *hp, cr_err_t *err);

/* Writes general.architecture, general.name (from _name_or_path),
 * general.file_type (ftype: F32, F16 or BF16) and the <arch>.* keys. */
cr_status_t reg_hf_hparams_add(cr_gguf_writer_t *w, const json_t *cfg,
                               const reg_hf_hparams_t *hp, cr_type_t ftype,
                               cr_err_t *err);

/* config.json's rope_scaling as keys and, for llama3 and longrope, tensors
 * whose data *rope keeps. CR_E_UNSUPPORTED for another type (named),
 * CR_E_INVALID for malformed fields. */
cr_status_t reg_hf_rope_add(cr_gguf_writer_t *w, const json_t *cfg,
                            const reg_hf_hparams_t *hp, reg_hf_rope_t *rope,
                            cr_err_t *err);

void reg_hf_rope_free(reg_hf_rope_t *rope);

#endif
