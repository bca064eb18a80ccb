/* siglip.h: a SigLIP vision tower (gemma3's): patch embedding (a
 * patch_size-stride convolution with bias), learned positions, no class
 * token, no pre-norm, n_layers pre-LayerNorm blocks with bidirectional
 * attention and a GELU (tanh) MLP, then a post-LayerNorm. All blocks run.
 *
 * Two file layouts hold it: llama.cpp's mmproj (clip.vision.* keys;
 * v.patch_embd, v.position_embd, v.blk.N.{ln1,attn_q,attn_k,attn_v,
 * attn_out,ln2,ffn_up,ffn_down}, v.post_ln) and Ollama's single GGUF, the
 * tower inside the text model (<arch>.vision.* keys; v.patch_embedding,
 * v.position_embedding, v.blk.N.{layer_norm1,attn_q,attn_k,attn_v,
 * attn_output,layer_norm2,mlp.fc1,mlp.fc2}, v.post_layernorm).
 *
 * Runs through the backend interface; buffers are allocated at load, so
 * encoding allocates nothing. Follows llama.cpp's graph
 * (tools/mtmd/models/siglip.cpp and clip.cpp's build_vit at the reference
 * commit). Borrows the GGUF and the backend; owns its prepared weights and
 * buffers. Not thread-safe. */
#ifndef RN_SIGLIP_H
#define RN_SIGLIP_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

typedef enum rn_siglip_layout {
    RN_SIGLIP_MMPROJ, /* llama.cpp's mmproj names and clip.vision.* keys */
    RN_SIGLIP_OLLAMA, /* Ollama's names and <arch>.vision.* keys */
} rn_siglip_layout_t;

typedef struct rn_siglip_hparams {
    int image_size;  /* pixels per side */
    int patch_size;  /* pixels per side */
    int n_side;      /* patches per side */
    int n_patches;   /* n_side^2: the tower's positions */
    int dim, n_heads, head_dim, ffn, n_layers;
    float eps;       /* LayerNorm epsilon (the projector's RMS norm too) */
    bool gelu_quick; /* clip.use_gelu false in an mmproj: quick GELU */
} rn_siglip_hparams_t;

typedef struct rn_siglip rn_siglip_t;

/* Reads the tower's hyperparameters from g: keys under key_prefix
 * ("clip.vision." or "gemma3.vision."). CR_E_INVALID naming a missing or
 * out-of-range key. */
cr_status_t rn_siglip_read_hparams(const cr_gguf_t *g, const char *key_prefix,
                                   rn_siglip_layout_t layout, rn_siglip_hparams_t *hp,
                                   cr_err_t *err);

/* Binds the tower of g (borrowed; must outlive it) in `layout` with
 * hyperparameters hp onto be (borrowed; needs the optional ops layernorm,
 * add_rows and gelu, or gelu_quick). On success *out is owned by the
 * caller: free with rn_siglip_destroy. CR_E_INVALID names a missing or
 * misshapen tensor, CR_E_UNSUPPORTED a type or missing op, CR_E_NOMEM. */
cr_status_t rn_siglip_load(const cr_gguf_t *g, rn_siglip_layout_t layout,
                           const rn_siglip_hparams_t *hp, be_backend_t *be,
                           rn_siglip_t **out, cr_err_t *err);

void rn_siglip_destroy(rn_siglip_t **self_p);

uint64_t rn_siglip_weight_bytes(const rn_siglip_t *s);

/* Runs the tower over pixels [3][S][S] (host, planes R, G, B) and writes
 * its output, post-LayerNorm applied, to out [n_patches][dim] (host,
 * caller-owned), patch (y, x) at row y * n_side + x. Errors only from the
 * backend (be_check). */
cr_status_t rn_siglip_encode(rn_siglip_t *s, const float *pixels, float *out, cr_err_t *err);

#endif
