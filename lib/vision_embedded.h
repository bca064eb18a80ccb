/* vision_embedded.h: whether a model GGUF carries, inside it, a vision
 * tower the runner runs (Ollama's single-file layout), checked from the
 * header alone: every key the runner reads and every tensor it binds,
 * present and of the element count it expects. Three families, each
 * under Ollama's own key and tensor names (its convert/ and model/models/
 * sources, read at commit f63eea3d):
 *
 *   gemma3:   gemma3.vision.* keys, the SigLIP tower's v.* tensors and
 *             the projector's mm.mm_soft_emb_norm / mm.mm_input_projection;
 *   mistral3: mistral3.vision.* keys and mistral3.spatial_merge_size, the
 *             Pixtral tower (v.patch_conv, v.encoder_norm, v.blk.N.
 *             {attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
 *             ffn_gate, ffn_up, ffn_down}) and the projector (mm.norm,
 *             mm.patch_merger.merging_layer, mm.linear_1, mm.linear_2);
 *             the [IMG_BREAK] row is the text model's token_embd row of
 *             that token, which the vocabulary must hold;
 *   qwen25vl: qwen25vl.vision.* keys, v.patch_embd_0 / _1, v.blk.N.{ln1,
 *             attn_q, attn_k, attn_v, attn_out, ln2, ffn_gate, ffn_up,
 *             ffn_down} with biases, v.merger.{ln_q, mlp.0, mlp.2}.
 *
 * One answer for three services: the registry reports the vision
 * capability from it, the scheduler counts the tower's memory, and the
 * runner loads the tower only when it passes (its loader then checks the
 * same shapes again as it binds them). Reads the header; owns nothing. */
#ifndef CR_VISION_EMBEDDED_H
#define CR_VISION_EMBEDDED_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"

typedef enum cr_vision_family {
    CR_VISION_GEMMA3 = 1, /* SigLIP + gemma3's pooling projector */
    CR_VISION_MISTRAL3,   /* Pixtral tower + Mistral Small's patch merger */
    CR_VISION_QWEN25VL,   /* Qwen2.5-VL's window-attention tower + merger */
} cr_vision_family_t;

typedef struct cr_vision_embedded {
    cr_vision_family_t family;
    int image_size, patch_size; /* pixels per side (image_size: gemma3's
                                   fixed size; 0 for the others, whose
                                   size follows the image) */
    int dim, ffn, n_heads, n_layers;
    int n_tokens;               /* tokens per image after pooling (gemma3);
                                   the most an image takes (the others) */
    int n_merge;                /* patches per side of a merged token (1:
                                   gemma3, which pools instead) */
    int proj_hidden;            /* the projector's hidden width (0: none) */
    int n_embd;                 /* the projection's output width */
    float eps;                  /* the tower's norm epsilon */
    float rope_theta;           /* the tower's rotary base (0: gemma3, none) */
    uint64_t tensor_bytes;      /* the tower's and projector's tensors */
    uint64_t copy_bytes;        /* what the runner derives at load: gemma3's
                                   transposed projection, mistral3's q/k
                                   rows reordered (F32 or their type) */
} cr_vision_embedded_t;

/* The most tokens one image takes in the families whose count follows
 * the image (llama.cpp's limits, which the runner keeps): Pixtral's and
 * Qwen2.5-VL's. */
#define CR_VISION_PIXTRAL_MAX_TOKENS 1024
#define CR_VISION_QWEN25VL_MAX_TOKENS 4096

/* CR_OK with *out (may be NULL) filled when g holds a complete tower;
 * CR_E_NOT_FOUND when it holds none (no <arch>.vision.block_count of a
 * family the runner runs); CR_E_INVALID naming the first missing or
 * misshapen key or tensor otherwise. */
cr_status_t cr_vision_embedded(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err);

/* cr_vision_embedded for a loader that takes one family: CR_E_INVALID
 * "not Ollama's <what> model file with a vision tower" when g holds none
 * or another family's. */
cr_status_t cr_vision_embedded_of(const cr_gguf_t *g, cr_vision_family_t family,
                                  const char *what, cr_vision_embedded_t *out,
                                  cr_err_t *err);

/* CLIP's normalisation, which Ollama hard-codes for the single-file
 * mistral3 and qwen25vl towers (their files do not carry it). */
extern const float cr_vision_clip_mean[3];
extern const float cr_vision_clip_std[3];

#endif
