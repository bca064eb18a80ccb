/* lora.h: llama.cpp's GGUF LoRA adapter format, checked against the base
 * model it is to be applied to.
 *
 * An adapter file has general.type = "adapter", adapter.type = "lora",
 * general.architecture = the base's, adapter.lora.alpha (f32; absent or 0:
 * scale 1) and, for each adapted weight `<base>` of the model, two
 * tensors `<base>.lora_a` (GGUF ne {in, r}: [r][in] as the runner reads
 * matrices) and `<base>.lora_b` (ne {r, out}: [out][r]), so that the
 * weight acts as W + scale * B A with scale = alpha / r.
 *
 * The registry (at create) and the runner (at load) both read adapters
 * through cr_lora_pairs, so an adapter create accepts is one the runner
 * applies, and one it would not apply is refused at create, never stored
 * and ignored. Only the attention and FFN projections of the decoder
 * architectures are supported (attn_q, attn_k, attn_v, attn_output,
 * ffn_gate, ffn_up, ffn_down); phi3's fused attn_qkv / ffn_up, expert
 * stacks, embeddings, the output matrix and encoder (bert) models are
 * refused, as are tensor types other than F32, F16, BF16 and Q8_0.
 *
 * Owns no tensor data: pairs point into the handles. */
#ifndef CR_LORA_H
#define CR_LORA_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"

#define CR_LORA_MAX_ADAPTERS 16 /* adapters on one model */
#define CR_LORA_MAX_RANK 8192

typedef enum cr_lora_target {
    CR_LORA_Q,    /* attn_q */
    CR_LORA_K,    /* attn_k */
    CR_LORA_V,    /* attn_v */
    CR_LORA_O,    /* attn_output */
    CR_LORA_GATE, /* ffn_gate */
    CR_LORA_UP,   /* ffn_up */
    CR_LORA_DOWN, /* ffn_down */
    CR_LORA_N_TARGETS
} cr_lora_target_t;

/* One adapted weight. */
typedef struct cr_lora_pair {
    const cr_gguf_tensor_t *a;    /* [r][in], borrowed from the adapter */
    const cr_gguf_tensor_t *b;    /* [out][r] */
    const cr_gguf_tensor_t *base; /* [out][in], borrowed from the base */
    int layer;                    /* blk.N */
    cr_lora_target_t target;
    int rank;                     /* r */
    float scale;                  /* alpha / r (1 when alpha is 0) */
} cr_lora_pair_t;

/* The tensor suffix of a target ("attn_q"). */
const char *cr_lora_target_name(cr_lora_target_t t);

/* Checks adapter against base (both borrowed) and lists its pairs in file
 * order. label names the adapter in messages (a file name or digest).
 * On success *pairs (caller frees with free) holds *n >= 1 pairs.
 * Errors, all CR_E_INVALID with a message naming the label and the key
 * or tensor: not an adapter, not a LoRA adapter, another architecture,
 * an unsupported architecture or target weight or tensor type, a tensor
 * whose partner is missing or that appears twice, a target the base lacks,
 * shapes that do not match the base, no tensors; CR_E_NOMEM. */
cr_status_t cr_lora_pairs(const cr_gguf_t *base, const cr_gguf_t *adapter,
                          const char *label, cr_lora_pair_t **pairs, size_t *n,
                          cr_err_t *err);

#endif
