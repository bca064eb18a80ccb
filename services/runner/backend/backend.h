/* backend.h: the one compute interface the forward pass sees.
 *
 * A backend is a struct of function pointers (be_ops_t) behind a handle.
 * The forward pass allocates its activations and KV cache through the
 * backend, and then only calls ops on those buffers; it never dereferences
 * them itself, so a device backend (CUDA) can keep them in device memory.
 * Pointer arithmetic on backend buffers is allowed (offsets into a cache).
 * Host <-> backend copies go through upload/download.
 *
 * Weights are described by be_weight_t views of host memory (the model's
 * mmap); weight_prepare lets a backend make its own copy (device upload) and
 * record it in `dev`. The CPU backend uses the host bytes in place.
 *
 * Conventions for every op: row-major activations, float32, shapes given in
 * elements. Ops do not fail (shapes are checked when the model loads and the
 * context is created); anything fallible returns cr_status_t.
 *
 * Backends are listed in one table (services/runner/backends.h); the runner creates its
 * instances from there and never names a backend. Several instances (of
 * one backend or of several) can serve one model, each owning a range of
 * its layers (model.h: rn_placement_t; forward.c moves the activations
 * between them with download/upload).
 *
 * Owns no model logic (forward.c) and no file parsing (model.c). */
#ifndef BE_BACKEND_H
#define BE_BACKEND_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "lib/tensor_type.h"

typedef struct be_backend be_backend_t;
typedef struct be_ops_ext be_ops_ext_t;

/* A borrowed 2-D weight: n_rows rows of n_cols elements of `type`
 * (vectors have n_rows = 1). Valid while the model that owns the mapping
 * lives. */
typedef struct be_weight {
    const char *name;   /* tensor name, for messages */
    cr_type_t type;
    int64_t n_cols;     /* elements per row (GGUF ne[0]) */
    int64_t n_rows;     /* rows (GGUF ne[1]) */
    size_t row_bytes;   /* bytes per row */
    const void *data;   /* host bytes, n_rows * row_bytes */
    void *dev;          /* backend-private copy (NULL on CPU) */
} be_weight_t;

/* Causal attention of one sequence over its cache. */
typedef struct be_attn {
    int n_tok;      /* queries in this call */
    int pos0;       /* position of query 0; query i sees keys 0..pos0+i */
    int n_head;     /* query heads */
    int n_head_kv;  /* key/value heads (n_head % n_head_kv == 0: GQA) */
    int head_dim;   /* elements per head */
    float scale;    /* applied to q.k before softmax, usually 1/sqrt(hd) */
    const be_weight_t *sinks; /* NULL, or F32 [n_head] (gpt-oss): head h's
                                 softmax denominator also holds
                                 exp(sinks[h] - max), a logit (not scaled)
                                 that carries no value */
    cr_type_t kv_type; /* element type of both caches: CR_TYPE_F16, or
                          (kv_type_supported) CR_TYPE_Q8_0 / CR_TYPE_Q4_0 */
    /* attention_ext's two parameters, for a backend whose attention_ext
     * shares its attention path (the CPU's): callers of `attention` leave
     * both 0, which no backend's `attention` reads otherwise */
    float softcap;  /* > 0: s = softcap * tanh(s / softcap) after scale */
    int window;     /* > 0: query at position p sees keys p - window + 1 .. p */
} be_attn_t;

/* The first key a query that sees keys 0 .. n - 1 reads: n - window
 * under a sliding window, else 0. */
static inline int be_attn_first_key(const be_attn_t *a, int n)
{
    return a->window > 0 && n > a->window ? n - a->window : 0;
}

/* Bytes of one cache row of `row` elements of KV type t (be_attn_t.kv_type);
 * row is a multiple of t's block (32 for Q8_0 / Q4_0: rn_ctx_new checks
 * head_dim), so each head's slice of a row is whole blocks. */
static inline size_t be_kv_row_bytes(cr_type_t t, int row)
{
    uint64_t bytes = 0;
    return cr_type_row_bytes(t, (uint64_t)row, &bytes) ? (size_t)bytes : 0;
}

/* YaRN rope scaling (ggml_rope_ext with ext_factor != 0): pair i's angle
 * t = pos * freq_base^(-2i/n_rot) / ff[i] is interpolated (t * freq_scale)
 * for the low frequencies and kept (extrapolated) for the high ones, with
 * a linear ramp between pairs corr_lo and corr_hi:
 *   ramp = 1 - clamp((i - corr_lo) / max(0.001, corr_hi - corr_lo), 0, 1)
 *   mix = ramp * ext_factor
 *   angle = t * freq_scale * (1 - mix) + t * mix
 * and cos/sin are multiplied by attn_factor * (1 + 0.1 ln(1 / freq_scale))
 * (the second factor only when ext_factor != 0). */
typedef struct be_rope_yarn {
    float freq_base;
    float freq_scale;  /* 1 / <arch>.rope.scaling.factor */
    float ext_factor;  /* 1 for YaRN; 0 makes this plain linear scaling */
    float corr_lo;     /* pairs below: extrapolated (angle unscaled) */
    float corr_hi;     /* pairs above: interpolated (angle * freq_scale) */
    float attn_factor; /* magnitude before the YaRN term */
    bool normal;       /* adjacent pairs (2i, 2i+1), llama's order
                          (mistral3); false: NEOX halves (i, i + n_rot/2) */
} be_rope_yarn_t;

typedef struct be_ops {
    const char *name; /* "cpu", "cuda": for messages only, never compared */
    /* Buffers and prepared weights are host memory (counted as RAM, not
     * as device memory, in reports). */
    bool host_memory;

    void (*destroy)(be_backend_t **self_p);

    /* ---- devices and memory ---- */
    int (*device_count)(const be_backend_t *be);
    /* Free and total bytes of device i (for the CPU: system RAM). */
    cr_status_t (*device_memory)(const be_backend_t *be, int device,
                                 uint64_t *free_bytes, uint64_t *total_bytes,
                                 cr_err_t *err);
    /* A zeroed buffer of `bytes`, or NULL when out of memory. */
    void *(*alloc)(be_backend_t *be, size_t bytes);
    void (*free)(be_backend_t *be, void *buf);
    /* Bytes this instance holds now in prepared weights (copies it made:
     * device uploads, repacked matrices) and in buffers (alloc, scratch).
     * Never fails. */
    void (*memory_used)(const be_backend_t *be, uint64_t *weight_bytes,
                        uint64_t *buffer_bytes);
    /* Optional (NULL: ops never fail late). Waits for every queued op and
     * returns the first error an op met since the last call, then clears
     * it (a device backend's ops run asynchronously and cannot return a
     * status): CR_E_NOMEM, CR_E_INTERNAL, with a message naming the op. */
    cr_status_t (*check)(be_backend_t *be, cr_err_t *err);
    /* Optional (NULL: F16 only). True if kv_store, attention and
     * attention_ext take caches of KV type t (CR_TYPE_F16, CR_TYPE_Q8_0,
     * CR_TYPE_Q4_0). */
    bool (*kv_type_supported)(const be_backend_t *be, cr_type_t t);
    /* Optional (NULL: none): the optional ops below (be_ext_ops). */
    const be_ops_ext_t *(*ext_ops)(const be_backend_t *be);
    void (*upload)(be_backend_t *be, void *dst, const void *host_src,
                   size_t bytes);
    void (*download)(be_backend_t *be, void *host_dst, const void *src,
                     size_t bytes);
    /* Makes w usable by the ops below (device upload, repacking). Checks
     * the type is one this backend multiplies: CR_E_UNSUPPORTED naming the
     * tensor otherwise. */
    cr_status_t (*weight_prepare)(be_backend_t *be, be_weight_t *w,
                                  cr_err_t *err);
    /* Optional (NULL: nothing to do). Said before the weights of the model
     * file at path are prepared, and after (ok: the model loaded), so a
     * backend can keep what it derives from them per file (the CPU's pack
     * cache). Never fails: a backend that cannot use it prepares as usual. */
    void (*model_begin)(be_backend_t *be, const char *path);
    void (*model_end)(be_backend_t *be, bool ok);
    void (*weight_release)(be_backend_t *be, be_weight_t *w);
    /* Sizes scratch space once (outside the token path) for calls with up
     * to max_tok tokens, rows up to max_cols elements and caches up to
     * max_ctx positions with n_head heads. Keeps the largest seen. */
    cr_status_t (*reserve)(be_backend_t *be, int max_tok, int64_t max_cols,
                           int max_ctx, int n_head, cr_err_t *err);

    /* ---- ops ---- */
    /* out[i][:] = dequantized row ids[i] of w.  ids: host [n];
     * out: [n][w->n_cols]. ids must be < w->n_rows (caller checks). */
    void (*get_rows)(be_backend_t *be, const be_weight_t *w,
                     const int32_t *ids, int n, float *out);
    /* y[t][r] = sum_c w[r][c] * x[t][c].  x: [n][w->n_cols],
     * y: [n][w->n_rows]. Activations are first converted to the weight
     * type's dot format (F16, Q8_0, Q8_K...) as the reference engine does. */
    void (*matmul)(be_backend_t *be, const be_weight_t *w, const float *x,
                   int n, float *y);
    /* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w.  x, y: [n][dim] (may
     * alias); w: F32 vector [dim]. */
    void (*rmsnorm)(be_backend_t *be, float *y, const float *x,
                    const be_weight_t *w, int n, int dim, float eps);
    /* In-place rotary embedding, "normal" mode (adjacent pairs), of x:
     * [n][n_head][head_dim]; the first n_rot dims of each head rotate by
     * pos[t] * freq_base^(-2i/n_rot) / ff[i] (ff = freq_factors, an F32
     * vector [n_rot/2], or NULL for 1). pos: host [n]. */
    void (*rope)(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                 int n_rot, const int32_t *pos, float freq_base,
                 const be_weight_t *freq_factors);
    /* Stores n rows of f32 src [n][row] into a cache of KV type t at row
     * index `at`: row at + i (be_kv_row_bytes(t, row) bytes from
     * cache + (at + i) * that) = src[i] converted: F16 rounds each
     * element; Q8_0 / Q4_0 quantize each 32-element block as the weight
     * formats do (quant.h). A type the backend does not support
     * (kv_type_supported) fails the op (CR_E_UNSUPPORTED through check). */
    void (*kv_store)(be_backend_t *be, void *cache, cr_type_t t,
                     const float *src, int n, int at, int row);
    /* out[t][h][:] = softmax_j(scale * q[t][h] . k[j][h/g]) v[j][h/g]
     * for j in 0..pos0+t (g = n_head / n_head_kv).  q, out:
     * [n_tok][n_head][head_dim]; k, v: caches of a->kv_type, rows of
     * n_head_kv*head_dim elements, rows 0..pos0+n_tok-1 filled. F16 caches:
     * like the reference engine, q and the probabilities are rounded to F16
     * before meeting the cache. Q8_0 / Q4_0 caches (llama.cpp's flash
     * attention with a quantized cache): q is quantized to Q8_0 per head
     * and dotted with the K blocks as a weight row would be, and the f32
     * probabilities weight the dequantized V rows.
     * With a->sinks, each head's softmax also counts its sink (be_attn_t);
     * a backend that cannot must fail the op (CR_E_UNSUPPORTED through
     * check), never ignore it; the same for a kv_type it does not take. */
    void (*attention)(be_backend_t *be, float *out, const float *q,
                      const void *k, const void *v, const be_attn_t *a);
    /* y = silu(gate) * up, elementwise over n (y may alias either). */
    void (*swiglu)(be_backend_t *be, float *y, const float *gate,
                   const float *up, size_t n);
    /* y += x over n. */
    void (*add)(be_backend_t *be, float *y, const float *x, size_t n);
    /* Row-wise softmax of x: [n_rows][n_cols], in place. */
    void (*softmax)(be_backend_t *be, float *x, int n_rows, int n_cols);
} be_ops_t;

/* ---- optional ops ------------------------------------------------------
 *
 * Ops that only the non-llama architectures need (qwen2/qwen3, gemma2/3,
 * phi3, bert/nomic-bert, gpt-oss) and mixture-of-experts layers (qwen3moe,
 * llama with experts, gpt-oss). They live in a second table so a backend can gain them without
 * touching be_ops_t; be_ext_ops() returns NULL for a backend that has none,
 * and the model loader then refuses those architectures on it. Same
 * conventions as be_ops_t: backend buffers, float32, shapes in elements. */
struct be_ops_ext {
    /* In-place rotary embedding, "NEOX" mode (dims i and i + n_rot/2 of a
     * head form a pair) of x: [n][n_head][head_dim]; pair i rotates by
     * pos[t] * freq_scale * freq_base^(-2i/n_rot) / ff[i] (ff =
     * freq_factors, F32 [n_rot/2], or NULL for 1), and the rotated dims are
     * multiplied by mscale (LongRoPE's attention factor; 1 for none), as
     * ggml_rope_ext does without YaRN. pos: host [n]. */
    void (*rope_neox)(be_backend_t *be, float *x, int n, int n_head,
                      int head_dim, int n_rot, const int32_t *pos,
                      float freq_base, float freq_scale,
                      const be_weight_t *freq_factors, float mscale);
    /* y[t][:] += b over t in 0..n; y: [n][b->n_cols], b: F32 vector. */
    void (*add_rows)(be_backend_t *be, float *y, const be_weight_t *b, int n);
    /* x *= s over n. */
    void (*scale)(be_backend_t *be, float *x, size_t n, float s);
    /* y = gelu_tanh(gate) * up, elementwise over n (y may alias either). */
    void (*geglu)(be_backend_t *be, float *y, const float *gate,
                  const float *up, size_t n);
    /* The attention op with two extras: scores s = scale * q.k become
     * softcap * tanh(s / softcap) when softcap > 0, and with window > 0
     * query t (at position pos0+t) sees only keys pos0+t-window+1 ..
     * pos0+t (llama.cpp's standard sliding window). scratch: a backend
     * buffer of be_attention_ext_scratch(ctx, head_dim) floats, ctx >=
     * pos0 + n_tok. Treats q, probabilities and the cache's kv_type like
     * attention; honours a->sinks as attention does. */
    void (*attention_ext)(be_backend_t *be, float *out, const float *q,
                          const void *k, const void *v,
                          const be_attn_t *a, float softcap, int window,
                          float *scratch);
    /* LayerNorm (bert, nomic-bert): y[t] = (x[t] - mean(x[t])) /
     * sqrt(var(x[t]) + eps) * w + b, statistics over dim as ggml_norm
     * takes them. x, y: [n][dim] (may alias); w: F32 vector [dim]; b: F32
     * vector [dim] or NULL. A backend without it leaves this NULL, and the
     * model loader then refuses the bert family on it. */
    void (*layernorm)(be_backend_t *be, float *y, const float *x,
                      const be_weight_t *w, const be_weight_t *b, int n,
                      int dim, float eps);
    /* y = gelu_tanh(x), elementwise over n (may alias); bert's FFN. NULL
     * as for layernorm. */
    void (*gelu)(be_backend_t *be, float *y, const float *x, size_t n);

    /* Mixture-of-experts layers (model/moe.c). A backend without these
     * leaves them NULL, and the model loader then refuses models with
     * experts on it. */
    /* The matmul op over rows r0..r0+n_rows-1 of w: y[t][r] = sum_c
     * w[r0 + r][c] * x[t][c]. One expert's matrix of an [n_expert * rows]
     * [cols] stack (only its rows are read). x: [n][w->n_cols], y:
     * [n][n_rows]; r0 + n_rows <= w->n_rows (caller checks). Same float
     * steps per (row, token) as matmul over a weight of those rows. */
    void (*matmul_rows)(be_backend_t *be, const be_weight_t *w, int64_t r0,
                        int64_t n_rows, const float *x, int n, float *y);
    /* dst[i][:] = src[ids[i]][:] for i in 0..n; rows of `cols` floats.
     * ids: host [n]. dst and src do not overlap. */
    void (*gather_rows)(be_backend_t *be, float *dst, const float *src,
                        const int32_t *ids, int n, int cols);
    /* y[ids[i]][:] += s[i] * x[i][:] for i = 0, 1, .. n-1 in that order
     * (an id may repeat); rows of `cols` floats. ids, s: host [n]. */
    void (*scatter_add)(be_backend_t *be, float *y, const float *x,
                        const int32_t *ids, const float *s, int n, int cols);
    /* Optional even with the ops above (NULL: model/moe.c loops over
     * matmul_rows). Several experts' products in one call, so a backend
     * spreads its threads over experts x rows: for each i in 0..n_experts,
     * expert e = experts[i] (e * rows_per_expert + rows_per_expert <=
     * w->n_rows, caller checks) owns the grouped rows g in [start[i] -
     * start[0], start[i + 1] - start[0]), and
     *   y[g][r] = sum_c w[e * rows_per_expert + r][c] * x[src(g)][c]
     * with src(g) = x_rows ? x_rows[g] : g (x_rows picks a token's row of x
     * without a gather). w2, y2 (both or neither): a second stack of the
     * same shape multiplied with the same rows (gate and up together).
     * y, y2: [rows][rows_per_expert]. experts, start, x_rows: host. Same
     * float steps per (row, token) as matmul_rows. Returns false, having
     * done nothing, for weights or sizes it does not take (the caller then
     * uses matmul_rows). */
    bool (*matmul_experts)(be_backend_t *be, const be_weight_t *w,
                           const be_weight_t *w2, int64_t rows_per_expert,
                           const int32_t *experts, const int32_t *start,
                           int n_experts, const float *x, const int32_t *x_rows,
                           float *y, float *y2);

    /* Optional (NULL, or false returned having done nothing: the caller
     * runs matmul once per weight). Products of one input with 2 or 3
     * weights of x's width, as the attention's q, k, v or the ffn's gate
     * and up: y[i][t][r] = sum_c w[i][r][c] * x[t][c], x: [n][cols], y[i]:
     * [n][w[i]->n_rows], so a backend converts x once and spreads its
     * threads over all the weights' rows in one pass instead of one per
     * weight. Same float steps per (row, token) as matmul. */
    bool (*matmul_group)(be_backend_t *be, const be_weight_t *const *w, int n_w,
                         const float *x, int n, float *const *y);

    /* gpt-oss. A backend without these leaves them NULL, and the model
     * loader then refuses gpt-oss on it. */
    /* In-place rotary embedding (NEOX pairs i, i + n_rot/2 of a head, or
     * adjacent ones when y->normal) of x: [n][n_head][head_dim] with YaRN
     * scaling (be_rope_yarn_t); freq_factors: F32 [n_rot/2] or NULL for 1.
     * pos: host [n]. Also YaRN for mistral3, qwen2, qwen3 and olmo2. */
    void (*rope_yarn)(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                      int n_rot, const int32_t *pos, const be_rope_yarn_t *y,
                      const be_weight_t *freq_factors);
    /* gpt-oss's clamped SwiGLU (ggml_swiglu_oai), elementwise over n (y
     * may alias either): g = min(gate, limit), u = clamp(up, -limit,
     * limit), y = g / (1 + exp(-alpha g)) * (u + 1). */
    void (*swiglu_oai)(be_backend_t *be, float *y, const float *gate,
                       const float *up, size_t n, float alpha, float limit);
    /* y[t][:] += b[r][:] over t in 0..n: one row of an F32 matrix b
     * [rows][cols] (an expert's bias of a stack) added to every row of y:
     * [n][b->n_cols]; r < b->n_rows (caller checks). */
    void (*add_row_of)(be_backend_t *be, float *y, const be_weight_t *b, int64_t r,
                       int n);

    /* Vision towers (services/runner/vision). A backend without it leaves
     * it NULL, and the projector loader then refuses towers that use it. */
    /* y = x * sigmoid(1.702 x) (CLIP's quick GELU, ggml_gelu_quick),
     * elementwise over n (may alias). */
    void (*gelu_quick)(be_backend_t *be, float *y, const float *x, size_t n);

    /* Multi-section rotary embedding (qwen2-vl's M-RoPE; ggml_rope_multi),
     * in place on x: [n][n_head][head_dim]. pos: host [4][n], four
     * position planes (t, h, w, e); sections: pairs per plane. Pair i's
     * plane is the one whose section holds i % (sum of sections).
     * vision false (the text model): NEOX pairs (i, i + n_rot/2), i <
     * n_rot/2, angle pos * base^(-2i/n_rot); dims past n_rot kept.
     * vision true (a ViT; n_rot = head_dim/2): pairs (i, i + n_rot) for
     * every i < n_rot, and the angle restarts at each section: pos *
     * base^(-2(i - first pair of the section)/n_rot). Angles are built by
     * repeated multiplication in float, as the reference engine does.
     * head_dim <= 1024 (callers check). A backend without it leaves it NULL, and the loaders then refuse the
     * models that need it. */
    void (*rope_multi)(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                       int n_rot, const int32_t *pos, const int sections[4],
                       float freq_base, bool vision);

    /* Vision towers' many-token ops (services/runner/vision/vops.h calls
     * them and falls back when they are NULL or return false). */
    /* The matmul op for thousands of tokens (blocked: F16 / F32 weights):
     * same contract and activation rounding, but the sums run in another
     * order than matmul's, so results differ from it in float rounding
     * and a text model's batch and single-token steps would not agree:
     * towers only. Returns false, having done nothing, for a weight type
     * or size it does not take or when out of scratch memory. */
    bool (*matmul_wide)(be_backend_t *be, const be_weight_t *w, const float *x, int n,
                        float *y);
    /* Bidirectional attention: out[t][h][:] = sum_j softmax_j(scale *
     * q[t][h] . k[j][h]) v[j][h] over all j < n, for t < n. q, k, v, out:
     * [n][n_head * head_dim] F32 (no F16 rounding; out overlaps none of
     * them). Returns false, having done nothing, when out of scratch
     * memory. */
    bool (*attention_full)(be_backend_t *be, float *out, const float *q, const float *k,
                           const float *v, int n, int n_head, int head_dim, float scale);
};

/* Floats of scratch attention_ext needs for caches of ctx positions. */
static inline size_t be_attention_ext_scratch(int ctx, int head_dim)
{
    return 2 * (size_t)ctx + 2 * (size_t)head_dim;
}

/* Every backend's handle starts with this header. */
struct be_backend {
    const be_ops_t *ops;
};

/* ---- the CPU backend (always built) ---- */

/* Creates the CPU backend with a persistent pool of n_threads (<= 0: one per
 * core). On success *out is owned by the caller; free with
 * be_destroy(&be). CR_E_NOMEM / CR_E_INTERNAL on failure. */
cr_status_t be_cpu_new(int n_threads, be_backend_t **out, cr_err_t *err);

/* Threads the CPU backend runs (1 for other backends). */
int be_cpu_threads(const be_backend_t *be);

/* Kernel level in use by the CPU backend: "scalar" or "avx2". */
const char *be_cpu_simd(const be_backend_t *be);

/* The CPU backend's optional ops (its ops->ext_ops; backend/cpu). */
const be_ops_ext_t *be_cpu_ext_ops(const be_backend_t *be);

/* The CPU backend's threaded mixture-of-experts ops (backend_cpu.c, which
 * owns the thread pool; ops_extra.c puts them in the table): the
 * be_ops_ext_t contracts of matmul_experts and scatter_add. */
bool be_cpu_matmul_experts(be_backend_t *be, const be_weight_t *w, const be_weight_t *w2,
                           int64_t rows_per_expert, const int32_t *experts,
                           const int32_t *start, int n_experts, const float *x,
                           const int32_t *x_rows, float *y, float *y2);
void be_cpu_scatter_add(be_backend_t *be, float *y, const float *x, const int32_t *ids,
                        const float *s, int n, int cols);
/* The CPU backend's attention_ext (backend_cpu.c): the attention op's
 * threaded paths (tiled over F16 caches) with the window and soft-cap. */
void be_cpu_attention_ext(be_backend_t *be, float *out, const float *q, const void *kv_k,
                          const void *kv_v, const be_attn_t *a, float softcap, int window,
                          float *scratch);
/* The CPU backend's matmul_group (backend_cpu.c): the be_ops_ext_t
 * contract; it takes packed weights whose activations share one format. */
bool be_cpu_matmul_group(be_backend_t *be, const be_weight_t *const *w, int n_w,
                         const float *x, int n, float *const *y);
/* The CPU backend's threaded vision-tower ops (backend_cpu.c binds them to
 * its pool; gemm.c and attn_full.c hold the kernels): the be_ops_ext_t
 * contracts of matmul_wide and attention_full. */
bool be_cpu_matmul_wide(be_backend_t *be, const be_weight_t *w, const float *x, int n,
                        float *y);
bool be_cpu_attention_full(be_backend_t *be, float *out, const float *q, const float *k,
                           const float *v, int n, int n_head, int head_dim, float scale);

/* Destroys any backend (NULL-safe); sets *be_p = NULL. */
/* The optional ops of be (its ops->ext_ops), or NULL if its backend has
 * none. Borrowed, static. */
static inline const be_ops_ext_t *be_ext_ops(const be_backend_t *be)
{
    return be && be->ops->ext_ops ? be->ops->ext_ops(be) : NULL;
}

/* y[i] = x w[i]^T for n_w weights sharing the input x (be_ops_ext_t.
 * matmul_group's shapes): in one pass where be's backend has
 * matmul_group and takes these weights, else one matmul each. */
static inline void be_matmul_group(be_backend_t *be, const be_weight_t *const *w, int n_w,
                                   const float *x, int n, float *const *y)
{
    const be_ops_ext_t *ext = be_ext_ops(be);
    if (ext && ext->matmul_group && ext->matmul_group(be, w, n_w, x, n, y))
        return;
    for (int i = 0; i < n_w; i++)
        be->ops->matmul(be, w[i], x, n, y[i]);
}

/* Whether be's caches may hold KV type t (be_ops_t.kv_type_supported);
 * F16 always. */
static inline bool be_kv_type_supported(const be_backend_t *be, cr_type_t t)
{
    if (t == CR_TYPE_F16)
        return true;
    return be->ops->kv_type_supported && be->ops->kv_type_supported(be, t);
}

static inline void be_destroy(be_backend_t **be_p)
{
    if (be_p && *be_p)
        (*be_p)->ops->destroy(be_p);
}

/* Memory an instance holds (be_ops_t.memory_used); zeros for NULL. */
static inline void be_memory_used(const be_backend_t *be, uint64_t *weight_bytes,
                                  uint64_t *buffer_bytes)
{
    *weight_bytes = *buffer_bytes = 0;
    if (be && be->ops->memory_used)
        be->ops->memory_used(be, weight_bytes, buffer_bytes);
}

/* Late errors of be's queued ops (be_ops_t.check); CR_OK for a backend
 * whose ops cannot fail late. */
static inline cr_status_t be_check(be_backend_t *be, cr_err_t *err)
{
    return be && be->ops->check ? be->ops->check(be, err) : CR_OK;
}

#endif
