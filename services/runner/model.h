/* model.h: a llama-architecture model loaded from a GGUF file.
 *
 * rn_model_load maps the file (lib/gguf.h validates every byte of the
 * header), reads the hyperparameters from `llama.*` metadata, finds every
 * tensor the forward pass needs, and checks each one's shape against the
 * hyperparameters and its type against what the backend can multiply, all
 * before returning. Weights stay in the mapping (no copy); the backend may
 * make its own copy (weight_prepare). Errors name the key or the tensor.
 *
 * Owns the mapping and the weight views. Does not own the backend (borrowed;
 * it must outlive the model), the tokenizer (which reads rn_model_gguf), or
 * any per-sequence state (forward.h). */
#ifndef RN_MODEL_H
#define RN_MODEL_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

/* Limits on what a file may claim (checked before any allocation). */
#define RN_MODEL_MAX_DIM (1 << 17)     /* embedding / ffn length */
#define RN_MODEL_MAX_LAYERS 1024
#define RN_MODEL_MAX_HEADS 4096
#define RN_MODEL_MAX_VOCAB (1 << 24)
#define RN_MODEL_MAX_CTX (1 << 24)

typedef struct rn_hparams {
    char arch[32];      /* general.architecture ("llama") */
    int n_vocab;        /* token_embd rows */
    int dim;            /* llama.embedding_length */
    int n_layers;       /* llama.block_count */
    int n_heads;        /* llama.attention.head_count */
    int n_kv_heads;     /* llama.attention.head_count_kv (default n_heads) */
    int head_dim;       /* dim / n_heads */
    int kv_dim;         /* n_kv_heads * head_dim */
    int ffn;            /* llama.feed_forward_length */
    int n_ctx_train;    /* llama.context_length */
    int n_rot;          /* llama.rope.dimension_count (default head_dim) */
    float rope_base;    /* llama.rope.freq_base (default 10000) */
    float rms_eps;      /* llama.attention.layer_norm_rms_epsilon (1e-5) */
} rn_hparams_t;

/* Shapes are [rows][cols] as the forward pass uses them (GGUF ne = {cols,
 * rows}); every matrix multiplies an activation of `cols` elements. */
typedef struct rn_layer {
    be_weight_t attn_norm; /* [dim] F32 */
    be_weight_t wq;        /* [n_heads*head_dim][dim] */
    be_weight_t wk;        /* [kv_dim][dim] */
    be_weight_t wv;        /* [kv_dim][dim] */
    be_weight_t wo;        /* [dim][n_heads*head_dim] */
    be_weight_t ffn_norm;  /* [dim] F32 */
    be_weight_t w_gate;    /* [ffn][dim] */
    be_weight_t w_up;      /* [ffn][dim] */
    be_weight_t w_down;    /* [dim][ffn] */
} rn_layer_t;

typedef struct rn_weights {
    be_weight_t token_embd;  /* [n_vocab][dim] */
    be_weight_t output_norm; /* [dim] F32 */
    be_weight_t output;      /* [n_vocab][dim]; token_embd's bytes if tied */
    be_weight_t rope_freqs;  /* [n_rot/2] F32; valid if has_rope_freqs */
    bool has_rope_freqs;
    bool tied_output;        /* no output.weight in the file */
    rn_layer_t *layers;      /* [n_layers] */
} rn_weights_t;

typedef struct rn_model rn_model_t;

/* Loads the model at path for backend be (borrowed; must outlive the
 * model). On success *out is owned by the caller: free with
 * rn_model_destroy. Errors: CR_E_IO (cannot open), CR_E_CORRUPT /
 * CR_E_TRUNCATED (bad file, missing tensor "missing tensor
 * 'blk.0.attn_q.weight'", wrong shape "tensor 'output.weight' has shape
 * [64, 500], expected [64, 512]", bad or missing hyperparameter),
 * CR_E_UNSUPPORTED ("unsupported architecture 'x'", a tensor type the
 * backend cannot multiply), CR_E_NOMEM. */
cr_status_t rn_model_load(const char *path, be_backend_t *be,
                          rn_model_t **out, cr_err_t *err);

/* Same, from an open GGUF handle; takes ownership of *g (sets it to NULL)
 * whether or not loading succeeds. */
cr_status_t rn_model_load_gguf(cr_gguf_t **g, be_backend_t *be,
                               rn_model_t **out, cr_err_t *err);

void rn_model_destroy(rn_model_t **self_p);

/* Borrowed views, valid until rn_model_destroy. */
const rn_hparams_t *rn_model_hparams(const rn_model_t *m);
const rn_weights_t *rn_model_weights(const rn_model_t *m);
/* The GGUF handle (metadata for the tokenizer, template, ...). */
const cr_gguf_t *rn_model_gguf(const rn_model_t *m);
be_backend_t *rn_model_backend(const rn_model_t *m);

/* Bytes of weight data the model uses (tied output counted once). */
uint64_t rn_model_weight_bytes(const rn_model_t *m);

#endif
