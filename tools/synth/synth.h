/* synth.h: synthetic GGUF models (llama, qwen2, qwen3, gemma2, gemma3,
 * phi3, bert, nomic-bert, qwen3moe, gpt-oss; llama with experts; granite,
 * olmo2, mistral3, exaone, exaone4, smollm3, command-r, cohere2) for tests
 * and tools.
 *
 * Writes a complete, loadable model: <arch>.* hyperparameters, a tokenizer
 * (a small built-in SentencePiece-style vocabulary, or the tokenizer.* keys
 * of another GGUF file), and weights drawn from N(0, 0.02) by a seeded
 * generator (norm weights are 1), stored in the chosen type. The same
 * options always produce the same bytes. Used by tools/gguf_synth.c
 * (corral-gguf-synth) and the engine's unit tests. Knows nothing of loading
 * (model.c) or running (forward.c). */
#ifndef RN_SYNTH_H
#define RN_SYNTH_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "lib/tensor_type.h"

typedef struct rn_synth_opts {
    uint64_t seed;
    cr_type_t type;     /* matrices (and token_embd): any type with a CPU
                           dot product (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
                           Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4).
                           Norms are always F32. */
    bool mix;           /* like llama.cpp's _M files: output.weight and every
                           layer's attn_v and ffn_down in mix_type instead */
    cr_type_t mix_type; /* used when mix (Q6_K for a Q4_K_M-like file) */
    const char *arch;   /* general.architecture: NULL or "llama", "qwen2",
                           "qwen3", "gemma", "gemma2", "gemma3", "phi3",
                           "bert", "nomic-bert", "granite" (with its four
                           multipliers: embedding 4, residual 0.5,
                           attention 0.5, logits / 8), "olmo2",
                           "mistral3", "exaone", "smollm3", "command-r",
                           "cohere2" (logit_scale 0.25, output always tied),
                           "exaone4", "qwen2vl" (qwen2 with
                           rope.dimension_sections in Qwen2.5-VL's
                           proportions);
                           keys are <arch>.*, tensors
                           as llama.cpp names them. The bert family gets
                           token_types (2 rows), position_embd (bert, ctx
                           rows), LayerNorms with biases, no output tensors,
                           attention.layer_norm_epsilon = rms_eps,
                           attention.causal false, and the built-in
                           vocabulary as a WordPiece ("bert") one */
    int head_dim;       /* attention.key_length; 0: dim / heads (llama
                           always uses dim / heads) */
    int sliding_window; /* gemma: attention.sliding_window; 0: not written */
    int swa_pattern;    /* gemma: attention.sliding_window_pattern; 0: not
                           written */
    float attn_softcap; /* gemma2: attn_logit_softcapping; 0: not written */
    float final_softcap; /* gemma2/3: final_logit_softcapping; 0: not written */
    float rope_linear;  /* > 0: rope.scaling.type "linear" with this factor */
    float rope_yarn;    /* > 0: rope.scaling.type "yarn" with this factor
                           and rope.scaling.original_context_length
                           yarn_orig_ctx (gpt-oss) */
    int yarn_orig_ctx;
    float weight_std;   /* std of matrix weights; 0: 0.02. Non-llama models
                           also get norms 1 + N(0, 0.1) and biases N(0, 0.1)
                           so every weight matters */
    int distinct_rows;  /* > 0: each tensor draws and quantizes only its
                           first distinct_rows rows and repeats them (a
                           speed benchmark's multi-GB model in minutes, not
                           hours; every byte is still its own in the file);
                           0: every row drawn */
    int dim;            /* embedding length */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int ffn;            /* feed-forward length */
    int ctx;            /* context length recorded in metadata */
    float rope_base;    /* llama.rope.freq_base */
    float rms_eps;      /* llama.attention.layer_norm_rms_epsilon */
    bool tied_output;   /* omit output.weight (tied to token_embd) */
    bool rope_freqs;    /* add rope_freqs.weight (Llama-3 style factors) */
    bool longrope;      /* add rope_factors_long/short.weight (1..8 and
                           1..1.5), rope.scaling.attn_factor 1.2 and
                           rope.scaling.original_context_length 16 (phi3
                           LongRoPE, scaled down) */
    bool vocab_only;    /* metadata only, no tensors */
    const char *vocab_from; /* GGUF to copy tokenizer.* from, or NULL for
                               the built-in vocabulary */
    const char *name;   /* general.name; NULL for "synth" */
    const char *chat_template; /* tokenizer.chat_template (Jinja); NULL: not written */
    int pooling_type;   /* <arch>.pooling_type (1 mean, 2 cls, 3 last, 4
                           rank: bert then gets a classifier head, cls.* and
                           cls.output.* with one output); 0: not written */

    /* Mixture of experts ("qwen3moe", "gpt-oss", or "llama" with experts):
     * every layer's FFN becomes ffn_gate_inp (F32 router) and the stacks
     * ffn_gate_exps/ffn_up_exps/ffn_down_exps [experts][rows][cols] as
     * llama.cpp's converter writes them (down in mix_type when mix).
     * gpt-oss also gets q/k/v/o biases, attn_sinks (N(1, 1): comparable
     * to the scores), post_attention_norm for ffn_norm, and F32 biases of
     * the router and of every expert's gate/up/down (N(0, 0.5)); its
     * sliding_window must be set. */
    int n_experts;      /* <arch>.expert_count; 0: dense (qwen3moe needs
                           some) */
    int n_experts_used; /* <arch>.expert_used_count */
    cr_type_t expert_type; /* type of the expert stacks; 0 (F32): `type`
                              (gpt-oss files: MXFP4 experts, the rest
                              Q8_0) */
    int expert_ffn;     /* qwen3moe, gpt-oss: expert_feed_forward_length
                           (0: ffn);
                           llama's experts are ffn long */
    int shared_ffn;     /* > 0: a shared expert (ffn_*_shexp) this long and
                           expert_shared_feed_forward_length */
    bool shared_gate;   /* with shared_ffn: ffn_gate_inp_shexp [dim] F32 */
    int expert_gating;  /* expert_gating_func (1 softmax, 2 sigmoid, 3
                           softmax of the chosen); 0: not written */
    int expert_norm;    /* expert_weights_norm: -1 not written, 0 false,
                           1 true */
    float expert_scale; /* > 0: expert_weights_scale */
    float router_std;   /* std of the router weights; 0: as the matrices */
    /* with rope_yarn (gpt-oss above; mistral3, qwen2, qwen3, olmo2) */
    float yarn_beta_fast, yarn_beta_slow; /* > 0: rope.scaling.yarn_beta_* */
    float yarn_log_mul; /* > 0: rope.scaling.yarn_log_multiplier */
    float attn_temp;    /* > 0: attention.temperature_scale (mistral3) */
    const char *const *extra_tokens; /* NULL, or a NULL-terminated list of
                           control tokens appended to the built-in
                           vocabulary (gemma3's "<start_of_image>",
                           "<end_of_image>") */
    bool vision_stub;   /* as Ollama's mistral3 files: <arch>.vision.* keys
                           and two vision/projector tensors (v.*, mm.*) a
                           text model must ignore */
} rn_synth_opts_t;

/* Defaults: seed 1, F32, dim 64, 2 layers, 4 heads, 2 KV heads, ffn 128,
 * ctx 256, rope base 10000, eps 1e-5, built-in vocabulary, dense
 * (expert_norm -1: not written). */
void rn_synth_defaults(rn_synth_opts_t *o);

/* Number of tokens in the built-in vocabulary. */
int rn_synth_builtin_vocab_size(void);

/* Writes the model to path (atomically). CR_E_INVALID names a bad option
 * ("dim 40 is not a multiple of 32 for Q4_0", also for mix_type); CR_E_IO / CR_E_CORRUPT from
 * files; CR_E_NOMEM. */
cr_status_t rn_synth_write(const rn_synth_opts_t *o, const char *path,
                           cr_err_t *err);

/* Same, into memory: *out (caller owns; free with free()) of *len bytes. */
cr_status_t rn_synth_write_memory(const rn_synth_opts_t *o, void **out,
                                  size_t *len, cr_err_t *err);

/* ---- LoRA adapters (synth_lora.c) ----
 *
 * A llama.cpp GGUF LoRA adapter for the base model file at base_path:
 * general.type "adapter", adapter.type "lora", the base's architecture (or
 * arch), adapter.lora.alpha, and for each target base tensor T (ne {in,
 * out}) T.lora_a (ne {in, rank}) and T.lora_b (ne {rank, out}) of
 * `type`, entries N(0, std) from seed (then rounded to the type). Tests read A and B back from the file. */
typedef struct rn_synth_lora_opts {
    uint64_t seed;
    int rank;                    /* >= 1 */
    float alpha;                 /* adapter.lora.alpha; <= 0: not written */
    float std;                   /* of A and B entries; 0: 0.05 */
    const char *const *targets;  /* NULL-terminated base tensor names */
    const char *arch;            /* general.architecture; NULL: the base's */
    const char *adapter_type;    /* adapter.type; NULL: "lora" */
    cr_type_t type;              /* of A and B: F32 (0), F16, BF16 or Q8_0
                                    (Q8_0: in and rank multiples of 32) */
} rn_synth_lora_opts_t;

/* Writes the adapter to path (atomically). CR_E_INVALID for rank < 1 or a
 * target the base lacks or that is not a matrix; errors of reading the
 * base and writing. */
cr_status_t rn_synth_lora_write(const rn_synth_lora_opts_t *o, const char *base_path,
                                const char *path, cr_err_t *err);

/* Writes to path the F32 model at base_path with the n LoRA adapters at
 * ads merged into its weights: W + sum of (alpha / r) B A, in double, as
 * a reference for the runner's run-time adapters. CR_E_INVALID for a
 * non-F32 base or adapter tensor; read and write errors. */
cr_status_t rn_synth_lora_merge(const char *base_path, const char *const *ads, size_t n,
                                const char *path, cr_err_t *err);

/* Writes the F32 GGUF LoRA adapter at adapter_path as a PEFT folder in dir
 * (existing): adapter_config.json (r, lora_alpha, target_modules) and
 * adapter_model.safetensors with Hugging Face's tensor names, llama's q/k
 * lora_B rows in Hugging Face's order (head counts from the base at
 * base_path): what create converts back to the same adapter. */
cr_status_t rn_synth_lora_to_peft(const char *adapter_path, const char *base_path,
                                  const char *dir, cr_err_t *err);
/* out[0..n) drawn from N(mean, std) by the synth's generator seeded with
 * seed (the same seed, the same numbers). */
void rn_synth_fill_normal(uint64_t seed, float *out, size_t n, double mean, double std);

/* ---- vision projectors (synth_clip.c) ---------------------------------- */

/* A llava-shaped projector file (llama.cpp's mmproj layout: general.
 * architecture "clip", clip.vision.* keys, v.* tower and mm.* projector
 * tensors): a CLIP ViT of n_layers blocks with class embedding, learned
 * positions, a pre-LayerNorm and patch bias, then mm.0 [hidden][dim] ->
 * GELU -> mm.2 [n_embd][hidden]. Matrices N(0, std); norm weights
 * 1 + N(0, 0.1), biases and embeddings N(0, 0.1)..N(0, 0.5). */
typedef struct rn_synth_clip_opts {
    uint64_t seed;
    cr_type_t type;    /* matrices and the patch kernel: F32 or F16 */
    int image_size;    /* pixels per side, a multiple of patch_size */
    int patch_size;
    int dim, n_heads, ffn, n_layers;
    int proj_hidden;   /* rows of mm.0 */
    int n_embd;        /* rows of mm.2: the text model's dim */
    bool use_gelu;     /* clip.use_gelu (false: quick GELU, as llava;
                          pixtral: SiLU) */
    double std;        /* matrices' std */
    int merge;         /* pixtral: spatial_merge_size (2: Mistral Small's
                          patch merger; 1: none, as Pixtral 12B) */
    const char *break_from; /* pixtral: NULL, v.token_embd.img_break drawn;
                          else the path of the text model whose F32
                          token_embd row of [IMG_BREAK] it copies, as
                          llama.cpp's converter does */
} rn_synth_clip_opts_t;

/* Defaults: seed 1, F32, image 112, patch 14 (64 patches), dim 64,
 * 4 heads, ffn 160, 3 layers, hidden 96, n_embd 64 (the text synth's
 * default dim), quick GELU, std 0.1. */
void rn_synth_clip_defaults(rn_synth_clip_opts_t *o);

/* Writes the projector to path. CR_E_INVALID names a bad option; CR_E_IO,
 * CR_E_NOMEM. */
cr_status_t rn_synth_clip_write(const rn_synth_clip_opts_t *o, const char *path,
                                cr_err_t *err);

/* A Pixtral projector (synth_pixtral.c; clip.projector_type "pixtral",
 * clip.use_silu unless use_gelu): patch kernel without bias, RMS pre-norm,
 * n_layers blocks of RMSNorm, q/k/v/out without biases and a gated FFN
 * (ffn_gate, ffn_up, ffn_down), with merge > 1 mm.input_norm and
 * mm.patch_merger [dim][dim * merge^2], then mm.1 (+bias) [hidden][dim]
 * and mm.2 (+bias) [n_embd][hidden], and v.token_embd.img_break [n_embd].
 * image_size is only written (the tower's resolution varies). Errors as
 * rn_synth_clip_write. */
cr_status_t rn_synth_pixtral_write(const rn_synth_clip_opts_t *o, const char *path,
                                   cr_err_t *err);

/* Ollama's single-file layout of the same tower (the same options give
 * the same numbers): the mistral3 text model at text_path (its vocabulary
 * holding [IMG_BREAK], token_embd F32 and n_embd wide) with the tower
 * added under Ollama's names and mistral3.vision.* keys, the q/k rows in
 * Hugging Face's order, no img_break tensor (the runner reads the text
 * model's row), to path. Errors as above and from reading text_path. */
cr_status_t rn_synth_pixtral_embed(const rn_synth_clip_opts_t *o, const char *text_path,
                                   const char *path, cr_err_t *err);

/* ---- qwen2.5-vl projectors (synth_qwen2vl.c) ---------------------------- */

/* A Qwen2.5-VL-shaped projector file (llama.cpp's mmproj layout for
 * clip.projector_type "qwen2.5vl_merger"): the patch kernel's two temporal
 * frames (v.patch_embd.weight and .weight.1), n_layers blocks with
 * RMSNorm weights, q/k/v/out and a SiLU-gated MLP with biases,
 * clip.vision.n_wa_pattern, the merger's norm (v.post_ln), mm.0
 * [hidden][4 dim] -> GELU -> mm.2 [n_embd][hidden]. Matrices N(0, std);
 * norm weights 1 + N(0, 0.1), biases N(0, 0.1). */
typedef struct rn_synth_qwen2vl_opts {
    uint64_t seed;
    cr_type_t type;    /* matrices and the patch kernels: F32 or F16 */
    int patch_size;
    int dim, n_heads, ffn, n_layers; /* head size a multiple of 4 */
    int n_wa_pattern;  /* every n-th block attends fully; 0: all */
    bool qwen2;        /* Qwen2-VL's layout instead (projector type
                          "qwen2vl_merger"): LayerNorms with biases (ln1,
                          ln2, v.post_ln), no ffn_gate (a quick-GELU MLP:
                          no clip.use_* key), no n_wa_pattern key (every
                          block full); mmproj only */
    int proj_hidden;   /* rows of mm.0 */
    int n_embd;        /* rows of mm.2: the text model's dim */
    double std;        /* matrices' std */
} rn_synth_qwen2vl_opts_t;

/* Defaults: seed 1, F32, patch 14, dim 64, 4 heads, ffn 96, 4 blocks
 * (n_wa_pattern 2: blocks 1 and 3 attend fully), hidden 256, n_embd 64,
 * std 0.1. */
void rn_synth_qwen2vl_defaults(rn_synth_qwen2vl_opts_t *o);

/* Writes the projector to path. CR_E_INVALID names a bad option; CR_E_IO,
 * CR_E_NOMEM. */
cr_status_t rn_synth_qwen2vl_write(const rn_synth_qwen2vl_opts_t *o, const char *path,
                                   cr_err_t *err);

/* Ollama's single-file layout of the same tower (same numbers): the
 * qwen2vl text model at text_path (n_embd wide) as Ollama's converter
 * writes it (general.architecture "qwen25vl", its keys renamed to
 * qwen25vl.*, rope.dimension_sections' first three as
 * rope.mrope_section) with the tower under Ollama's names and
 * qwen25vl.vision.* keys (fullatt_block_indexes from n_wa_pattern), to
 * path. Errors as above and from reading text_path. */
cr_status_t rn_synth_qwen2vl_embed(const rn_synth_qwen2vl_opts_t *o, const char *text_path,
                                   const char *path, cr_err_t *err);

/* ---- gemma3's vision side (synth_gemma3v.c) ---------------------------- */

/* A gemma3-shaped SigLIP tower and projector (proj_gemma3.h): patch
 * embedding with bias, learned positions, n_layers LayerNorm blocks with
 * biases and a GELU MLP, post-LayerNorm, the soft embedding norm [dim]
 * and the input projection ne {n_embd, dim}. Matrices N(0, std); norm
 * weights 1 + N(0, 0.1); biases and positions N(0, 0.1)..N(0, 0.5). The
 * same options give the same values in both layouts. */
typedef struct rn_synth_gemma3v_opts {
    uint64_t seed;
    cr_type_t type;    /* matrices and the patch kernel: F32 or F16 */
    int image_size;    /* pixels per side, a multiple of patch_size */
    int patch_size;
    int dim, n_heads, ffn, n_layers;
    int merge;         /* pooling side in patches: divides the grid's side */
    int n_embd;        /* the text model's dim */
    double std;        /* matrices' std */
} rn_synth_gemma3v_opts_t;

/* Defaults: seed 1, F32, image 224, patch 14 (16x16 patches), dim 64,
 * 4 heads, ffn 160, 3 layers, merge 4 (16 tokens per image), n_embd 64,
 * std 0.1. */
void rn_synth_gemma3v_defaults(rn_synth_gemma3v_opts_t *o);

/* llama.cpp's mmproj layout (clip.projector_type "gemma3"; the key
 * clip.vision.projector.scale_factor only when merge is not 4) to path.
 * CR_E_INVALID names a bad option; CR_E_IO, CR_E_NOMEM. */
cr_status_t rn_synth_gemma3v_write(const rn_synth_gemma3v_opts_t *o, const char *path,
                                   cr_err_t *err);

/* Ollama's single-file layout: the gemma3 text model at text_path with the
 * tower and projector added (gemma3.vision.* keys, gemma3.mm.tokens_per_image,
 * Ollama's tensor names), to path. o->n_embd must be the text model's
 * gemma3.embedding_length. Errors as above and from reading text_path. */
cr_status_t rn_synth_gemma3v_embed(const rn_synth_gemma3v_opts_t *o, const char *text_path,
                                   const char *path, cr_err_t *err);

#endif
