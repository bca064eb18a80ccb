/* model.h: a decoder model (llama, qwen2, qwen3, gemma, gemma2, gemma3,
 * phi3, qwen3moe, gpt-oss; llama also with experts; granite, olmo2,
 * mistral3, exaone, exaone4, smollm3, command-r, cohere2, qwen2vl) or an encoder
 * embedding model (bert, nomic-bert) loaded from a GGUF file.
 *
 * rn_model_load maps the file (lib/gguf.h validates every byte of the
 * header), reads the hyperparameters from `<arch>.*` metadata (key and
 * tensor names as llama.cpp writes them), finds every
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
#define RN_MODEL_MAX_EXPERTS 1024 /* <arch>.expert_count (llama.cpp's cap) */

/* Architectures the runner can evaluate (general.architecture). */
typedef enum rn_arch {
    RN_ARCH_LLAMA,  /* "llama" */
    RN_ARCH_QWEN2,  /* "qwen2": q/k/v biases, NEOX rope */
    RN_ARCH_QWEN3,  /* "qwen3": per-head q/k RMSNorm, NEOX rope */
    RN_ARCH_GEMMA2, /* "gemma2": scaled embedding, post-norms, GELU, soft-caps,
                       sliding window on even layers */
    RN_ARCH_GEMMA3, /* "gemma3": gemma2 less soft-caps, plus q/k norms, 5 of 6
                       layers sliding with their own rope base */
    RN_ARCH_PHI3,   /* "phi3": fused qkv and gate/up, NEOX rope (LongRoPE
                       factors when present) */
    RN_ARCH_GEMMA,  /* "gemma" (v1): scaled embedding, GELU, NEOX rope */
    RN_ARCH_BERT,   /* "bert": encoder (embedding only): learned position
                       and token-type embeddings, LayerNorms with biases,
                       q/k/v/o and ffn biases, GELU, bidirectional */
    RN_ARCH_NOMIC_BERT, /* "nomic-bert": bert with fused attn_qkv, NEOX
                           rope instead of position embeddings, SwiGLU */
    RN_ARCH_QWEN3MOE, /* "qwen3moe": qwen3 attention, every FFN a
                         mixture of experts */
    RN_ARCH_GPT_OSS,  /* "gpt-oss": q/k/v/o biases, attention sinks, YaRN
                         NEOX rope, sliding window on even layers, experts
                         with biases and a clamped SwiGLU */
    RN_ARCH_GRANITE,  /* "granite": llama with embedding, residual,
                         attention and logit multipliers */
    RN_ARCH_OLMO2,    /* "olmo2": no pre-norms, post-norms, q/k RMSNorm over
                         the whole q and k, NEOX rope (olmo3: sliding window) */
    RN_ARCH_MISTRAL3, /* "mistral3": Mistral Small 3.x text model (llama
                         graph; Ollama's files carry vision tensors too) */
    RN_ARCH_EXAONE,   /* "exaone" (EXAONE 3.x): llama with NEOX rope */
    RN_ARCH_SMOLLM3,  /* "smollm3": llama without rope in every 4th layer */
    RN_ARCH_COMMAND_R, /* "command-r" (Command R, Aya): LayerNorms without
                          bias, attention and ffn in parallel from one norm,
                          logits times logit_scale, tied output */
    RN_ARCH_COHERE2,  /* "cohere2" (Command R7B, Command A): command-r with
                         3 of 4 layers sliding and roped, the 4th global
                         without rope */
    RN_ARCH_EXAONE4,  /* "exaone4" (EXAONE 4.0): olmo2's post-norms with
                         per-head q/k norms; the 32B (64 layers) slides 3
                         of 4 layers and ropes only those */
    RN_ARCH_QWEN2VL,  /* "qwen2vl" (Qwen2-VL, Qwen2.5-VL text model; Ollama:
                         "qwen25vl"): qwen2
                         with M-RoPE (rope_sections) */
} rn_arch_t;

/* How router logits become expert weights (<arch>.expert_gating_func,
 * numbered as llama.cpp numbers them). */
typedef enum rn_gating {
    RN_GATING_SOFTMAX = 1,        /* softmax over all experts, then top-k */
    RN_GATING_SIGMOID = 2,        /* sigmoid of each logit, then top-k */
    RN_GATING_SOFTMAX_WEIGHT = 3, /* top-k of the logits, softmax over the
                                     chosen ones (gpt-oss) */
} rn_gating_t;

/* How an embedding pools the hidden states (<arch>.pooling_type, numbered
 * as llama.cpp numbers them). */
typedef enum rn_pooling {
    RN_POOL_MEAN = 1, /* mean over every position (also for "none"/absent) */
    RN_POOL_CLS = 2,  /* the first position ([CLS]) */
    RN_POOL_LAST = 3, /* the last position */
    RN_POOL_RANK = 4, /* a reranker (bert): the first position through the
                         classifier head (cls.*), one score per input */
} rn_pooling_t;

/* True for the encoder architectures (bert family): bidirectional
 * attention, no output matrix, embeddings only. */
static inline bool rn_arch_is_encoder(rn_arch_t a)
{
    return a == RN_ARCH_BERT || a == RN_ARCH_NOMIC_BERT;
}


typedef struct rn_hparams {
    char arch[32];      /* general.architecture ("llama") */
    rn_arch_t arch_id;
    int n_vocab;        /* token_embd rows */
    int dim;            /* <arch>.embedding_length */
    int n_layers;       /* <arch>.block_count */
    int n_heads;        /* <arch>.attention.head_count */
    int n_kv_heads;     /* <arch>.attention.head_count_kv (default n_heads) */
    int head_dim;       /* <arch>.attention.key_length (default dim / n_heads) */
    int q_dim;          /* n_heads * head_dim (may differ from dim: qwen3, gemma) */
    int kv_dim;         /* n_kv_heads * head_dim */
    int ffn;            /* <arch>.feed_forward_length */
    int n_ctx_train;    /* <arch>.context_length */
    int n_rot;          /* <arch>.rope.dimension_count (default head_dim) */
    float rope_base;    /* <arch>.rope.freq_base (default 10000) */
    float rms_eps;      /* <arch>.attention.layer_norm_rms_epsilon (1e-5) */

    /* Architecture features; the llama values are the neutral ones. */
    bool rope_neox;       /* rotate dims (i, i+n_rot/2), not (2i, 2i+1) */
    float rope_scale;     /* position multiplier of full-attention layers:
                             1 / <arch>.rope.scaling.factor when linear */
    float rope_base_swa;  /* rope base of sliding layers (gemma3: 10000) */
    float rope_attn_factor; /* <arch>.rope.scaling.attn_factor (LongRoPE
                               mscale on rotated dims; 1 = none) */
    int n_ctx_orig;       /* <arch>.rope.scaling.original_context_length
                             (default n_ctx_train): contexts longer than
                             this use rope_factors_long */
    float attn_scale;     /* multiplies q.k: 1/sqrt(head_dim), or gemma's
                             query_pre_attn_scalar rule */
    float attn_softcap;   /* > 0: scores = c * tanh(scores / c) (gemma2) */
    float final_softcap;  /* > 0: logits = c * tanh(logits / c) (gemma2) */
    float embd_scale;     /* token embeddings times this (gemma: sqrt(dim)) */
    int n_swa;            /* sliding window in keys; 0 = none */
    int swa_pattern;      /* layer l slides iff n_swa > 0 and (pattern == 0
                             or l % pattern < pattern - 1) */
    bool ffn_gelu;        /* gelu_tanh(gate) * up instead of silu */
    bool rope_yarn;       /* rope through rope_yarn (gpt-oss; mistral3,
                             qwen2, qwen3, olmo2 with rope.scaling.type
                             "yarn"), not rope/rope_neox, with these
                             parameters: */
    be_rope_yarn_t yarn;     /* full-attention layers */
    be_rope_yarn_t yarn_swa; /* sliding layers (their base, rope_base_swa,
                                moves the correction dims; olmo2: plain) */
    bool post_norms;      /* rmsnorm of attention and ffn outputs (gemma,
                             olmo2) */
    bool no_pre_norms;    /* no attn_norm / ffn_norm: sub-layers read x
                             itself (olmo2) */
    float residual_scale; /* sub-layer outputs times this before each
                             residual add (granite; 1 = none) */
    float logit_mult;     /* logits times this (granite: 1 / logit_scale;
                             command-r: logit_scale; 1 = none) */
    bool layer_norm;      /* attn_norm and output_norm are LayerNorms without
                             bias, epsilon norm_eps (command-r) */
    bool parallel_ffn;    /* the ffn reads the attention's normed input and
                             both add to x (command-r: no ffn_norm) */
    float attn_temp;      /* attention.temperature_scale (mistral3): q at
                             position p times 1 + attn_temp *
                             ln(1 + floor(p / attn_temp_len)); 0 = none */
    int attn_temp_len;    /* rope.scaling.original_context_length */
    bool mrope;           /* M-RoPE (qwen2vl): q and k rotate through the
                             optional op rope_multi with four position
                             planes (t, h, w, e; forward.h) */
    int rope_sections[4]; /* <arch>.rope.dimension_sections: pairs per
                             plane (qwen2.5-vl: 16, 24, 24, 0) */

    /* Encoders (bert family). */
    bool non_causal;      /* every position attends to every position
                             (!<arch>.attention.causal; bert family) */
    float norm_eps;       /* <arch>.attention.layer_norm_epsilon (1e-12;
                             command-r too) */
    rn_pooling_t pooling; /* <arch>.pooling_type; RN_POOL_MEAN if absent or
                             0 (none); RN_POOL_RANK for bert only */
    int n_cls_out;        /* rank: classifier outputs (the number of
                             <arch>.classifier.output_labels; 1 without) */

    /* Mixture of experts (n_expert > 0: every layer's FFN is a MoE layer,
     * model/moe.h). Defaults are what llama.cpp's graph fixes for qwen3moe
     * and Mixtral-style llama: softmax gating, renormalized top-k. */
    int n_expert;         /* <arch>.expert_count; 0 = dense */
    int n_expert_used;    /* <arch>.expert_used_count, 1..n_expert */
    int ffn_expert;       /* rows of one expert's gate/up: qwen3moe's
                             expert_feed_forward_length (default ffn /
                             n_expert_used), llama's feed_forward_length */
    int ffn_shared;       /* shared expert's <arch>.expert_shared_feed_
                             forward_length (default ffn_expert); used when
                             the ffn_*_shexp tensors are present */
    rn_gating_t expert_gating; /* <arch>.expert_gating_func (0 or absent:
                                  softmax) */
    bool expert_norm;     /* <arch>.expert_weights_norm (default true):
                             chosen weights divided by their sum */
    float expert_scale;   /* <arch>.expert_weights_scale (0 or absent: 1):
                             chosen weights multiplied by it */
    bool swiglu_oai;      /* experts' activation: gpt-oss's clamped SwiGLU
                             (RN_SWIGLU_OAI_*) instead of silu(gate) * up */
} rn_hparams_t;

/* gpt-oss's clamped SwiGLU constants (llama.cpp's graph fixes them; no
 * GGUF key carries them). */
#define RN_SWIGLU_OAI_ALPHA 1.702f
#define RN_SWIGLU_OAI_LIMIT 7.0f
/* True when the pass is llama's exactly (normal rope, no optional op), so
 * it runs on a backend without be_ext_ops: llama, smollm3, and mistral3
 * without attention temperature, none of them with rope scaling (which
 * goes through the YaRN op). */
static inline bool rn_hparams_llama_graph(const rn_hparams_t *hp)
{
    return (hp->arch_id == RN_ARCH_LLAMA || hp->arch_id == RN_ARCH_SMOLLM3 ||
            (hp->arch_id == RN_ARCH_MISTRAL3 && hp->attn_temp == 0)) &&
           !hp->rope_yarn;
}

/* Shapes are [rows][cols] as the forward pass uses them (GGUF ne = {cols,
 * rows}); every matrix multiplies an activation of `cols` elements.
 * Optional weights have data == NULL when absent. Q = q_dim, KV = kv_dim,
 * hd = head_dim. */
typedef struct rn_layer {
    be_weight_t attn_norm; /* [dim] F32 (data NULL for olmo2) */
    be_weight_t wq;        /* [Q][dim] (phi3: rows 0..Q of attn_qkv) */
    be_weight_t wk;        /* [KV][dim] (phi3: rows Q..Q+KV of attn_qkv) */
    be_weight_t wv;        /* [KV][dim] (phi3: the last KV rows of attn_qkv) */
    be_weight_t bq;        /* [Q] F32 bias (qwen2) */
    be_weight_t bk;        /* [KV] F32 bias (qwen2) */
    be_weight_t bv;        /* [KV] F32 bias (qwen2) */
    be_weight_t q_norm;    /* [hd] F32 per-head rmsnorm (qwen3, gemma3), or
                              [Q] over the whole q (olmo2) */
    be_weight_t k_norm;    /* [hd] F32 per-head rmsnorm (qwen3, gemma3), or
                              [KV] over the whole k (olmo2) */
    be_weight_t wo;        /* [dim][Q] */
    be_weight_t attn_post_norm; /* [dim] F32 post_attention_norm (gemma,
                                   olmo2) */
    be_weight_t ffn_norm;  /* [dim] F32 (data NULL for olmo2) */
    be_weight_t w_gate;    /* [ffn][dim] (phi3: rows 0..ffn of ffn_up) */
    be_weight_t w_up;      /* [ffn][dim] (phi3: rows ffn..2ffn of ffn_up) */
    be_weight_t w_down;    /* [dim][ffn] */
    be_weight_t ffn_post_norm;  /* [dim] F32 post_ffw_norm (gemma, olmo2) */
    bool swa;              /* this layer uses the sliding window */
    bool no_rope;          /* no rotary embedding here (smollm3: layers
                              3, 7, 11, ...) */

    /* bert family (attn_norm and ffn_norm are unused there; bq/bk/bv hold
     * the q/k/v biases, nomic-bert's as views of attn_qkv.bias) */
    be_weight_t bo;          /* [dim] F32 attn_output.bias (optional) */
    be_weight_t ln_attn;     /* [dim] F32 attn_output_norm.weight */
    be_weight_t ln_attn_b;   /* [dim] F32 attn_output_norm.bias */
    be_weight_t b_up;        /* [ffn] F32 ffn_up.bias (bert, optional) */
    be_weight_t b_down;      /* [dim] F32 ffn_down.bias (bert, optional) */
    be_weight_t ln_out;      /* [dim] F32 layer_output_norm.weight */
    be_weight_t ln_out_b;    /* [dim] F32 layer_output_norm.bias */

    /* mixture of experts (n_expert > 0; then w_gate/w_up/w_down are
     * unused). E = n_expert, Fe = ffn_expert, Fs = ffn_shared. Each stack
     * is a GGUF [E][rows][cols] tensor as one weight of E * rows rows:
     * expert e's matrix is rows e * rows .. (e + 1) * rows - 1. */
    be_weight_t router;      /* [E][dim] ffn_gate_inp */
    be_weight_t exp_gate;    /* [E * Fe][dim] ffn_gate_exps */
    be_weight_t exp_up;      /* [E * Fe][dim] ffn_up_exps */
    be_weight_t exp_down;    /* [E * dim][Fe] ffn_down_exps */
    be_weight_t sh_gate;     /* [Fs][dim] ffn_gate_shexp (optional) */
    be_weight_t sh_up;       /* [Fs][dim] ffn_up_shexp */
    be_weight_t sh_down;     /* [dim][Fs] ffn_down_shexp */
    be_weight_t sh_router;   /* [1][dim] F32 ffn_gate_inp_shexp: the shared
                                expert's output times sigmoid(x . w)
                                (optional: times 1) */

    /* gpt-oss (bq/bk/bv and bo hold its attention biases; ffn_norm is its
     * post_attention_norm, the norm before the experts) */
    be_weight_t attn_sinks;  /* [Hq] F32 attn_sinks: per-head logit in the
                                softmax denominator (be_attn_t.sinks) */
    be_weight_t router_b;    /* [E] F32 ffn_gate_inp.bias */
    be_weight_t exp_gate_b;  /* [E][Fe] F32 ffn_gate_exps.bias */
    be_weight_t exp_up_b;    /* [E][Fe] F32 ffn_up_exps.bias */
    be_weight_t exp_down_b;  /* [E][dim] F32 ffn_down_exps.bias */
} rn_layer_t;

typedef struct rn_weights {
    be_weight_t token_embd;  /* [n_vocab][dim] */
    be_weight_t output_norm; /* [dim] F32 */
    be_weight_t output;      /* [n_vocab][dim]; token_embd's bytes if tied */
    be_weight_t rope_freqs;  /* [n_rot/2] F32; valid if has_rope_freqs */
    bool has_rope_freqs;
    be_weight_t rope_long;   /* [n_rot/2] F32 rope_factors_long (phi3
                                LongRoPE); data NULL if absent */
    be_weight_t rope_short;  /* [n_rot/2] F32 rope_factors_short */
    bool tied_output;        /* no output.weight in the file */
    /* bert family: no output_norm and no output (their data is NULL) */
    be_weight_t token_types; /* [n_types][dim] token_types.weight; row 0 is
                                added to every token; data NULL if absent */
    be_weight_t pos_embd;    /* [n_ctx_train][dim] position_embd.weight
                                (bert) */
    be_weight_t tok_norm;    /* [dim] F32 token_embd_norm.weight */
    be_weight_t tok_norm_b;  /* [dim] F32 token_embd_norm.bias */
    /* reranker head (pooling RN_POOL_RANK; each optional, one of the two
     * matrices present): score = cls_out . tanh(cls . x0 + cls_b) +
     * cls_out_b, x0 the first position's hidden state */
    be_weight_t cls;         /* [dim][dim] cls.weight */
    be_weight_t cls_b;       /* [dim] F32 cls.bias */
    be_weight_t cls_out;     /* [n_cls_out][dim] cls.output.weight */
    be_weight_t cls_out_b;   /* [n_cls_out] F32 cls.output.bias */
    rn_layer_t *layers;      /* [n_layers] */
} rn_weights_t;

typedef struct rn_model rn_model_t;

/* ---- placement: which backend instance computes which layers ----
 *
 * Layers are numbered as the scheduler places them (place.h): the blocks
 * 0..n_layers-1, and n_layers for the output layer (output norm and
 * matrix). Each range puts its layers on one instance; layers in no range
 * go to `host`. The token embeddings go with the output layer: the
 * scheduler's estimate (place.h) counts them there, and a tied output then
 * shares one copy with them (llama.cpp instead keeps its input layer on the
 * CPU; here a partial offload looks the tokens up on the output's device
 * and hands the rows to layer 0's instance like any boundary). An encoder
 * (no output layer) keeps its input tensors with layer 0. The rope factor
 * vectors are prepared on every instance. Every weight is prepared on (and
 * released by) the instance of its layer; forward.c gives each instance
 * its layers' KV cache and moves the residual stream between instances
 * at range boundaries. */
#define RN_MAX_RANGES 16

typedef struct rn_range {
    be_backend_t *be;  /* borrowed; must outlive the model */
    int first_layer;   /* < 0: the LAST n_layers layers (llama.cpp's
                          n_gpu_layers: the output layer, then blocks
                          from the end) */
    int n_layers;      /* contiguous layers from first_layer */
} rn_range_t;

typedef struct rn_placement {
    be_backend_t *host; /* layers in no range (required; borrowed) */
    int n_ranges;       /* 0..RN_MAX_RANGES; ranges must not overlap */
    rn_range_t ranges[RN_MAX_RANGES];
} rn_placement_t;

/* The rope factor vectors of rn_weights_t as prepared on one instance. */
typedef struct rn_rope_factors {
    be_weight_t freqs;  /* rope_freqs (data NULL if absent) */
    be_weight_t longf;  /* rope_factors_long */
    be_weight_t shortf; /* rope_factors_short */
} rn_rope_factors_t;

/* Loads the model at path for backend be (borrowed; must outlive the
 * model). On success *out is owned by the caller: free with
 * rn_model_destroy. Errors: CR_E_IO (cannot open), CR_E_CORRUPT /
 * CR_E_TRUNCATED (bad file, missing tensor "missing tensor
 * 'blk.0.attn_q.weight'", wrong shape "tensor 'output.weight' has shape
 * [64, 500], expected [64, 512]", bad or missing hyperparameter),
 * CR_E_UNSUPPORTED ("unsupported architecture 'x'", a tensor type the
 * backend cannot multiply, a non-llama architecture on a backend without
 * be_ext_ops (or, for the bert family, without its layernorm/gelu ops),
 * rope scaling other than linear/LongRoPE (none at all with normal rope;
 * YaRN for gpt-oss, mistral3, qwen2, qwen3 and olmo2, on a backend with
 * rope_yarn), value_length != key_length, bias tensors llama's graph
 * lacks, pooling_type 4 "rank" on an architecture other than bert,
 * experts on a backend without the MoE ops, per-expert split tensors
 * instead of merged ffn_*_exps), CR_E_NOMEM.
 * Experts: expert_used_count missing, 0 or above expert_count, a missing
 * or misshapen ffn_gate_inp / ffn_*_exps tensor are CR_E_CORRUPT naming
 * the key or tensor. */
cr_status_t rn_model_load(const char *path, be_backend_t *be,
                          rn_model_t **out, cr_err_t *err);

/* True when general.architecture `arch` is one this engine runs (what
 * create asks through `corral-runner check-model`). */
bool rn_model_arch_supported(const char *arch);

/* Same, from an open GGUF handle; takes ownership of *g (sets it to NULL)
 * whether or not loading succeeds. */
cr_status_t rn_model_load_gguf(cr_gguf_t **g, be_backend_t *be,
                               rn_model_t **out, cr_err_t *err);

/* rn_model_load with the layers spread over instances as pl says (copied;
 * its instances are borrowed and must outlive the model). rn_model_load is
 * this with pl = {.host = be}. Also CR_E_INVALID for a range outside
 * 0..n_layers or overlapping another, CR_E_UNSUPPORTED when an instance
 * lacks the ops of the architecture. Only layer 0's instance gets the
 * model_begin/model_end hooks. */
cr_status_t rn_model_load_placed(const char *path, const rn_placement_t *pl,
                                 rn_model_t **out, cr_err_t *err);
cr_status_t rn_model_load_gguf_placed(cr_gguf_t **g, const rn_placement_t *pl,
                                      rn_model_t **out, cr_err_t *err);

void rn_model_destroy(rn_model_t **self_p);

/* Borrowed views, valid until rn_model_destroy. */
const rn_hparams_t *rn_model_hparams(const rn_model_t *m);
const rn_weights_t *rn_model_weights(const rn_model_t *m);
/* The GGUF handle (metadata for the tokenizer, template, ...). */
const cr_gguf_t *rn_model_gguf(const rn_model_t *m);
/* The instance of layer 0 (the only one without a placement). */
be_backend_t *rn_model_backend(const rn_model_t *m);
/* The instance of the token embeddings (see above). */
be_backend_t *rn_model_input_backend(const rn_model_t *m);
/* The instance of layer l (0..n_layers; n_layers: the output layer). */
be_backend_t *rn_model_layer_backend(const rn_model_t *m, int l);
/* The distinct instances, in layer order (instance 0 holds layer 0). */
int rn_model_n_instances(const rn_model_t *m);
be_backend_t *rn_model_instance(const rn_model_t *m, int i);
/* The rope factors as prepared on instance be (one of the model's). */
const rn_rope_factors_t *rn_model_rope_factors(const rn_model_t *m,
                                               const be_backend_t *be);

/* Bytes of weight data the model uses (tied output counted once). */
uint64_t rn_model_weight_bytes(const rn_model_t *m);

/* Tensors of the file the model does not use (the vision tower and
 * projector Ollama ships in one file with a text model: v.*, mm.*), and the
 * name of the first of them in *first (borrowed; NULL when none). */
int rn_model_unused_tensors(const rn_model_t *m, const char **first);

#endif
