/* estimate.h: how much memory a model will take, from GGUF metadata alone.
 *
 * Nothing is read but the header (cr_gguf_open maps the file and checks it;
 * tensor data is never touched). The parts, in bytes:
 *
 *   layer i   = the sizes of every blk.i.* tensor (their real types, so a
 *               Q4_K_M file's Q6_K attn_v/ffn_down count as such)
 *             + KV cache of layer i
 *               = n_ctx x num_parallel x kv_heads(i)
 *                 x (key_length + value_length) x bytes per element
 *               (f16 = 2; q8_0 = 34/32, q4_0 = 18/32, the real block
 *               sizes: the runner allocates exactly that)
 *   output    = output.weight (token_embd.weight when tied) + output_norm:
 *               the "output layer", counted as layer n_layers by num_gpu
 *   embd      = token_embd and every other tensor outside the blocks: it
 *               stays where the input is (the CPU)
 *   cpu_graph = what corral's runner allocates for activations, exactly:
 *               4 x B x (3 dim + 2 q_dim + 2 kv_dim + 2 ffn)
 *               + 4 x 8 x n_vocab (logit rows) + 4 x (2 n_ctx + 2 head_dim)
 *               with B = min(num_batch (512), n_ctx); with experts
 *               (<arch>.expert_count > 0) ffn is the larger of one expert's
 *               (expert_feed_forward_length, else qwen3moe's
 *               feed_forward_length / expert_used_count, else
 *               feed_forward_length) and the shared expert's, plus
 *               4 x B x (dim + expert_count) for the routed rows and the
 *               router logits. Every expert's weights count in its layer
 *               (all are resident, though a token reads only the chosen).
 *   graph     = a device's compute buffer: cpu_graph plus the attention
 *               scores of one batch, 4 x n_heads x n_ctx x B (what a GPU
 *               backend without flash attention materialises)
 *
 * The KV type is Ollama's rule: OLLAMA_KV_CACHE_TYPE q8_0 / q4_0 only with
 * OLLAMA_FLASH_ATTENTION and a model that supports flash attention (no
 * <arch>.pooling_type: not an embedding model; key_length == value_length),
 * plus llama.cpp's: head_dim a multiple of the 32-element block. Otherwise
 * f16, and kv_note says why (the caller warns, as Ollama does).
 *
 * n_ctx is the requested context capped at the trained one
 * (<arch>.context_length) and floored at 4, as the runner does.
 * OLLAMA_GPU_OVERHEAD is per GPU and added by placement (place.h).
 *
 * The runner process itself, beyond weights, KV cache and activations, as
 * measured (test_runner_footprint prints it; docs/architecture.md, "Runner
 * memory"), per backend, in host memory; placement adds them to a plan's
 * cpu_bytes:
 *   runner_cpu_bytes       every runner: its program, shared libraries,
 *                          thread stacks, heap (tokenizer, template, bus)
 *   runner_cuda_host_bytes a runner whose plan has GPU layers: the CUDA
 *                          module, runtime and cuBLAS mapped in it */
#define SCH_RUNNER_CPU_BYTES ((int64_t)12 << 20)        /* measured 10.3 MB */
#define SCH_RUNNER_CUDA_HOST_BYTES ((int64_t)160 << 20) /* measured 154 MB */
#ifndef SCH_ESTIMATE_H
#define SCH_ESTIMATE_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/vision_embedded.h"
#include "lib/status.h"

#define SCH_EST_MAX_LAYERS 1024

typedef struct sch_estimate_opts {
    int64_t num_ctx;          /* requested context; <= 0: 4096 */
    int64_t num_batch;        /* <= 0: 512 */
    int64_t num_parallel;     /* <= 0: 1 */
    const char *kv_cache_type; /* OLLAMA_KV_CACHE_TYPE: NULL, "", "f16",
                                  "q8_0", "q4_0" */
    bool flash_attention;      /* OLLAMA_FLASH_ATTENTION */
    bool kv_f16_only;          /* a GPU (here or on a node) may take layers,
                                  and the CUDA backend's caches are f16 only
                                  (a runner with any GPU layer stores f16) */
} sch_estimate_opts_t;

typedef struct sch_estimate {
    int n_layers;            /* repeating blocks */
    int64_t n_ctx;           /* context the runner will allocate */
    int64_t layer_bytes[SCH_EST_MAX_LAYERS]; /* weights + KV of block i */
    int64_t kv_bytes;        /* KV cache of all layers */
    int64_t weights_bytes;   /* every tensor but v.*, mm.* (vision) */
    int64_t output_bytes;    /* the output layer */
    int64_t embd_bytes;      /* tensors that stay on the CPU */
    int64_t graph_bytes;     /* compute buffer of a device with layers */
    int64_t cpu_graph_bytes; /* the CPU runner's activation buffers */
    int64_t cpu_total_bytes; /* all on the CPU: weights + KV + cpu_graph */
    int64_t runner_cpu_bytes;       /* SCH_RUNNER_CPU_BYTES */
    int64_t runner_cuda_host_bytes; /* SCH_RUNNER_CUDA_HOST_BYTES */
    cr_type_t kv_type;       /* the cache the runner is to store: F16,
                                Q8_0 or Q4_0 (load.kv_cache_type) */
    char kv_note[160];       /* why a quantized kv_cache_type is not used
                                ("" when it is, or none was asked) */
    int64_t n_batch;         /* B of the activations */
    int64_t widest_cols;     /* max(dim, q_dim, kv_dim, ffn) */
    int64_t lora_rank;       /* largest rank of the adapters added */
    int64_t adapter_bytes;   /* their tensors (also in weights_bytes) */
    int64_t projector_bytes; /* the vision projector: tensors, activations
                                and image cache (also in embd_bytes and
                                cpu_total_bytes: it runs on the CPU) */
    int64_t draft_bytes;     /* the speculative-decoding draft model:
                                weights, its KV cache for every slot and
                                activations (also in embd_bytes and
                                cpu_total_bytes: it runs on the CPU) */
} sch_estimate_t;

/* What a runner keeps of image embeddings (RN_VISION_CACHE_BYTES in the
 * runner's vision/vision.h). */
#define SCH_VISION_CACHE_BYTES (64LL << 20)

/* Tokens of the largest image a Pixtral tower takes (RN_PIXTRAL_MAX_TOKENS
 * in the runner's vision/pixtral.h). */
#define SCH_PIXTRAL_MAX_TOKENS 1024

/* Bytes per KV element for an OLLAMA_KV_CACHE_TYPE value: "" or NULL or
 * "f16" -> 2, "q8_0" -> 34/32, "q4_0" -> 18/32. False for anything else. */
bool sch_kv_cache_bytes(const char *type, double *bytes_per_elem);

/* Estimates the model in g (borrowed). CR_E_INVALID for an unknown
 * kv_cache_type; CR_E_CORRUPT names what is missing or wrong ("llama.embedding_length is missing", "tensor 'blk.99.x' names
 * layer 99 of 32"), CR_E_TOO_LARGE for more than SCH_EST_MAX_LAYERS
 * layers or sizes that overflow. */
cr_status_t sch_estimate_gguf(const cr_gguf_t *g, const sch_estimate_opts_t *o,
                              sch_estimate_t *out, cr_err_t *err);

/* Adds the LoRA adapter in ad (borrowed; header only) to est, the
 * estimate of its base: each blk.N tensor to layer N (the runner prepares
 * it with that layer), any other to embd, all to weights and the CPU
 * total, and the runner's two adapter buffers, 4 x B x (R + widest_cols)
 * for the largest rank R, once, to both graphs. CR_E_CORRUPT for a
 * tensor naming a layer the base lacks; CR_E_TOO_LARGE on overflow. */
cr_status_t sch_estimate_add_adapter(sch_estimate_t *est, const cr_gguf_t *ad, cr_err_t *err);

/* Adds the vision projector in pj (a clip GGUF; header only): the runner
 * of the text model runs its tower on the CPU, so every tensor of the file
 * (the runner skips the last block: an upper bound), the tower's
 * activations for one image (T = (image_size / patch_size)^2 + 1
 * positions: six [T][dim] f32 rows, [T][ffn], two f16 [T][dim] caches,
 * [T][T] scores per head, the patches and the projector's [N][hidden] and
 * [N][embd]; a Pixtral tower's for its largest image instead, see
 * estimate.c; qwen2.5-vl's tower, sized per image: its largest, 16384
 * patches, without the scores) and SCH_VISION_CACHE_BYTES go to
 * projector_bytes, embd_bytes
 * and the CPU total. CR_E_CORRUPT for missing or out-of-range clip.vision
 * keys; CR_E_TOO_LARGE on overflow. */
cr_status_t sch_estimate_add_projector(sch_estimate_t *est, const cr_gguf_t *pj,
                                       cr_err_t *err);

/* Adds a vision tower inside the model file (lib/vision_embedded.h, which
 * v describes) the same way: the runner runs it on the CPU when the model
 * has no projector layer. CR_E_TOO_LARGE if sizes overflow. */
cr_status_t sch_estimate_add_embedded_vision(sch_estimate_t *est,
                                             const cr_vision_embedded_t *v, cr_err_t *err);

/* Adds the draft model in dg (header only; borrowed), estimated with the
 * target's options o (the same context and slots: the runner keeps a
 * draft cache beside each slot's): its whole CPU total (weights + KV +
 * activations) goes to draft_bytes, embd_bytes and cpu_total_bytes, since
 * the draft runs on the CPU in the target's runner. Errors as
 * sch_estimate_gguf, prefixed "draft model". */
cr_status_t sch_estimate_add_draft(sch_estimate_t *est, const cr_gguf_t *dg,
                                   const sch_estimate_opts_t *o, cr_err_t *err);

/* Opens path (header only) and estimates it. Errors as cr_gguf_open and
 * sch_estimate_gguf, prefixed with the path. */
cr_status_t sch_estimate_file(const char *path, const sch_estimate_opts_t *o,
                              sch_estimate_t *out, cr_err_t *err);

#endif
