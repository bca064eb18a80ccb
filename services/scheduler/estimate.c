/* estimate.c: memory estimate of a GGUF model (formulas in estimate.h). */
#include "lib/prelude.h"
#include "services/scheduler/estimate.h"

#include <math.h>

#define LOGIT_ROWS 8 /* the runner's device logits buffer (forward.c) */
#define MAX_DIM (1 << 24)

bool sch_kv_cache_bytes(const char *type, double *bytes_per_elem)
{
    cr_type_t t;
    if (!cr_kv_cache_type_parse(type, &t))
        return false;
    const cr_type_info_t *ti = cr_type_info(t);
    *bytes_per_elem = (double)ti->block_bytes / (double)ti->block_elems;
    return true;
}

static bool arch_u64(const cr_gguf_t *g, const char *name, int layer,
                     uint64_t *out);

/* The KV type the runner will store (estimate.h: Ollama's rule, and
 * llama.cpp's block size), with the reason when a quantized one is not. */
static cr_status_t choose_kv_type(const cr_gguf_t *g, const sch_estimate_opts_t *o,
                                  uint64_t head_dim_k, uint64_t head_dim_v,
                                  sch_estimate_t *out, cr_err_t *err)
{
    const char *want = o ? o->kv_cache_type : NULL;
    out->kv_type = CR_TYPE_F16;
    out->kv_note[0] = '\0';
    cr_type_t t;
    if (!cr_kv_cache_type_parse(want, &t))
        return cr_err_set(err, CR_E_INVALID, "kv_cache_type '%s' is not f16, q8_0 or "
                          "q4_0", want);
    if (t == CR_TYPE_F16)
        return CR_OK;
    uint64_t pooling, block = cr_type_info(t)->block_elems;
    if (!o->flash_attention)
        snprintf(out->kv_note, sizeof out->kv_note,
                 "OLLAMA_FLASH_ATTENTION must be enabled to use a quantized KV cache");
    else if (o->kv_f16_only)
        snprintf(out->kv_note, sizeof out->kv_note,
                 "the CUDA backend stores the KV cache in f16 only (GPUs present)");
    else if (arch_u64(g, "pooling_type", -1, &pooling))
        snprintf(out->kv_note, sizeof out->kv_note,
                 "an embedding model has no flash attention");
    else if (head_dim_k != head_dim_v)
        snprintf(out->kv_note, sizeof out->kv_note,
                 "key_length %" PRIu64 " != value_length %" PRIu64
                 ": no flash attention", head_dim_k, head_dim_v);
    else if (head_dim_k % block)
        snprintf(out->kv_note, sizeof out->kv_note,
                 "head_dim %" PRIu64 " is not a multiple of %" PRIu64, head_dim_k, block);
    else
        out->kv_type = t;
    return CR_OK;
}

/* <arch>.<name>: a scalar, or an array with one value per layer (max taken
 * when layer < 0). */
static bool arch_u64(const cr_gguf_t *g, const char *name, int layer,
                     uint64_t *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", cr_gguf_arch(g), name);
    if (cr_gguf_get_u64(g, key, out))
        return true;
    const cr_gguf_array_t *a;
    if (!cr_gguf_get_arr(g, key, &a) || a->n == 0)
        return false;
    if (layer >= 0)
        return cr_gguf_arr_get_u64(a, (uint64_t)layer < a->n
                                          ? (uint64_t)layer
                                          : a->n - 1,
                                   out);
    uint64_t best = 0, v;
    for (uint64_t i = 0; i < a->n; i++)
        if (cr_gguf_arr_get_u64(a, i, &v) && v > best)
            best = v;
    *out = best;
    return true;
}

static cr_status_t need_dim(const cr_gguf_t *g, const char *name,
                            uint64_t *out, cr_err_t *err)
{
    if (!arch_u64(g, name, -1, out))
        return cr_err_set(err, CR_E_CORRUPT, "%s.%s is missing",
                          cr_gguf_arch(g), name);
    if (*out == 0 || *out > MAX_DIM)
        return cr_err_set(err, CR_E_CORRUPT, "%s.%s = %" PRIu64
                          " is out of range 1..%d",
                          cr_gguf_arch(g), name, *out, MAX_DIM);
    return CR_OK;
}

/* "blk.<n>." -> n; -1 if the name is not a block tensor. */
static int64_t block_of(const char *name)
{
    if (strncmp(name, "blk.", 4))
        return -1;
    int64_t n = 0;
    const char *p = name + 4;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9' && n < 1000000)
        n = n * 10 + (*p++ - '0');
    return *p == '.' ? n : -1;
}

/* A vision tower or projector tensor (v.*, mm.*) that Ollama ships in the
 * model file (gemma3, mistral3, qwen25vl): not the text model's; a tower
 * the runner runs is counted apart, by sch_estimate_add_embedded_vision. */
static bool is_vision(const char *name)
{
    return !strncmp(name, "v.", 2) || !strncmp(name, "mm.", 3);
}

static bool add_ok(int64_t *acc, double v)
{
    if (v < 0 || v > (double)(INT64_MAX - *acc))
        return false;
    *acc += (int64_t)v;
    return true;
}

cr_status_t sch_estimate_gguf(const cr_gguf_t *g, const sch_estimate_opts_t *o,
                              sch_estimate_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (!*cr_gguf_arch(g))
        return cr_err_set(err, CR_E_CORRUPT, "general.architecture is missing");
    cr_status_t st;
    uint64_t layers, dim, heads, ffn;
    if ((st = need_dim(g, "block_count", &layers, err)))
        return st;
    if (layers > SCH_EST_MAX_LAYERS)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "%s.block_count = %" PRIu64 " exceeds %d layers",
                          cr_gguf_arch(g), layers, SCH_EST_MAX_LAYERS);
    if ((st = need_dim(g, "embedding_length", &dim, err)) ||
        (st = need_dim(g, "attention.head_count", &heads, err)))
        return st;
    if (!arch_u64(g, "feed_forward_length", -1, &ffn) || ffn > MAX_DIM)
        ffn = 4 * dim;
    out->n_layers = (int)layers;

    /* Weights by tensor, each at its own type's size. */
    uint64_t n_vocab = 0;
    const cr_gguf_tensor_t *output = NULL, *embd = NULL;
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (is_vision(t->name))
            continue;
        if (!add_ok(&out->weights_bytes, (double)t->size_bytes))
            return cr_err_set(err, CR_E_TOO_LARGE, "tensor sizes overflow");
        int64_t blk = block_of(t->name);
        if (blk >= 0) {
            if (blk >= (int64_t)layers)
                return cr_err_set(err, CR_E_CORRUPT,
                                  "tensor '%s' names layer %" PRId64 " of %d",
                                  t->name, blk, out->n_layers);
            out->layer_bytes[blk] += (int64_t)t->size_bytes;
        } else if (!strcmp(t->name, "output.weight")) {
            output = t;
        } else if (!strcmp(t->name, "output_norm.weight") ||
                   !strcmp(t->name, "output_norm.bias") ||
                   !strcmp(t->name, "output.bias")) {
            out->output_bytes += (int64_t)t->size_bytes;
        } else {
            if (!strcmp(t->name, "token_embd.weight"))
                embd = t;
            out->embd_bytes += (int64_t)t->size_bytes;
        }
    }
    if (output) {
        out->output_bytes += (int64_t)output->size_bytes;
        n_vocab = output->ne[1];
    } else if (embd) {
        out->output_bytes += (int64_t)embd->size_bytes; /* tied: a copy */
    }
    if (embd && !n_vocab)
        n_vocab = embd->ne[1];
    const cr_gguf_array_t *toks;
    if (!n_vocab && cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks))
        n_vocab = toks->n;

    /* Context as the runner will allocate it. */
    int64_t n_ctx = o && o->num_ctx > 0 ? o->num_ctx : 4096;
    uint64_t trained;
    if (arch_u64(g, "context_length", -1, &trained) && trained > 0 &&
        (uint64_t)n_ctx > trained)
        n_ctx = (int64_t)trained;
    if (n_ctx < 4)
        n_ctx = 4;
    out->n_ctx = n_ctx;
    int64_t n_par = o && o->num_parallel > 0 ? o->num_parallel : 1;

    /* KV cache, layer by layer (kv heads may differ per layer). */
    uint64_t head_dim_k, head_dim_v;
    if (!arch_u64(g, "attention.key_length", -1, &head_dim_k) ||
        head_dim_k == 0 || head_dim_k > MAX_DIM)
        head_dim_k = dim / heads;
    if (!arch_u64(g, "attention.value_length", -1, &head_dim_v) ||
        head_dim_v == 0 || head_dim_v > MAX_DIM)
        head_dim_v = head_dim_k;
    st = choose_kv_type(g, o, head_dim_k, head_dim_v, out, err);
    if (st)
        return st;
    double kv_elem = 2;
    sch_kv_cache_bytes(cr_kv_cache_type_name(out->kv_type), &kv_elem);
    uint64_t max_kv_heads = 0;
    for (int l = 0; l < out->n_layers; l++) {
        uint64_t kvh;
        if (!arch_u64(g, "attention.head_count_kv", l, &kvh) || kvh > MAX_DIM)
            kvh = heads;
        max_kv_heads = CR_MAX(max_kv_heads, kvh);
        double kv = (double)n_ctx * (double)n_par * (double)kvh *
                    (double)(head_dim_k + head_dim_v) * kv_elem;
        if (!add_ok(&out->layer_bytes[l], kv) ||
            !add_ok(&out->kv_bytes, kv))
            return cr_err_set(err, CR_E_TOO_LARGE,
                              "KV cache for num_ctx %" PRId64 " overflows",
                              n_ctx);
    }

    /* Mixture of experts: the FFN buffers hold one expert's rows (or the
     * shared expert's), beside the routed rows and the router logits. */
    uint64_t n_expert = 0, moe_rows = 0;
    if (arch_u64(g, "expert_count", -1, &n_expert) && n_expert > 0 &&
        n_expert <= MAX_DIM) {
        uint64_t used = 1, fe = ffn, fs = 0;
        arch_u64(g, "expert_used_count", -1, &used);
        if (!arch_u64(g, "expert_feed_forward_length", -1, &fe) || fe > MAX_DIM)
            fe = !strcmp(cr_gguf_arch(g), "qwen3moe") && used > 0 ? ffn / used : ffn;
        if (!arch_u64(g, "expert_shared_feed_forward_length", -1, &fs) || fs > MAX_DIM)
            fs = fe;
        ffn = CR_MAX(fe, fs);
        moe_rows = dim + n_expert;
    }

    /* Activations: the runner's buffers for one batch. */
    int64_t batch = o && o->num_batch > 0 ? o->num_batch : 512;
    if (batch > n_ctx)
        batch = n_ctx;
    double q_dim = (double)heads * (double)head_dim_k;
    double kv_dim = (double)max_kv_heads * (double)head_dim_k;
    double act = 4.0 * (double)batch *
                     (3.0 * (double)dim + 2.0 * q_dim + 2.0 * kv_dim +
                      2.0 * (double)ffn + (double)moe_rows) +
                 4.0 * LOGIT_ROWS * (double)n_vocab +
                 4.0 * (2.0 * (double)n_ctx + 2.0 * (double)head_dim_k);
    double scores = 4.0 * (double)heads * (double)n_ctx * (double)batch;
    if (!add_ok(&out->cpu_graph_bytes, act) ||
        !add_ok(&out->graph_bytes, act + scores))
        return cr_err_set(err, CR_E_TOO_LARGE, "compute buffers overflow");
    out->n_batch = batch;
    out->widest_cols = (int64_t)CR_MAX(CR_MAX((double)dim, q_dim), CR_MAX(kv_dim, (double)ffn));
    out->cpu_total_bytes = out->weights_bytes;
    if (!add_ok(&out->cpu_total_bytes, (double)out->kv_bytes) ||
        !add_ok(&out->cpu_total_bytes, (double)out->cpu_graph_bytes))
        return cr_err_set(err, CR_E_TOO_LARGE, "model size overflows");
    out->runner_cpu_bytes = SCH_RUNNER_CPU_BYTES;
    out->runner_cuda_host_bytes = SCH_RUNNER_CUDA_HOST_BYTES;
    return CR_OK;
}

cr_status_t sch_estimate_add_adapter(sch_estimate_t *est, const cr_gguf_t *ad, cr_err_t *err)
{
    int64_t rank = est->lora_rank;
    double bytes = 0;
    for (size_t i = 0; i < cr_gguf_tensor_count(ad); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(ad, i);
        int64_t blk = block_of(t->name);
        if (blk >= est->n_layers)
            return cr_err_set(err, CR_E_CORRUPT, "adapter tensor '%s' names layer %" PRId64
                              " of %d", t->name, blk, est->n_layers);
        if (!add_ok(blk >= 0 ? &est->layer_bytes[blk] : &est->embd_bytes,
                    (double)t->size_bytes))
            return cr_err_set(err, CR_E_TOO_LARGE, "adapter sizes overflow");
        bytes += (double)t->size_bytes;
        size_t n = strlen(t->name);
        if (n > 7 && !strcmp(t->name + n - 7, ".lora_a") && (int64_t)t->ne[1] > rank &&
            t->ne[1] <= MAX_DIM)
            rank = (int64_t)t->ne[1];
    }
    /* the buffers: lr [B][R] and, with the first adapter, ly [B][widest] */
    double bufs = 4.0 * (double)est->n_batch *
                  ((double)(rank - est->lora_rank) +
                   (est->lora_rank ? 0.0 : (double)est->widest_cols));
    if (!add_ok(&est->adapter_bytes, bytes) || !add_ok(&est->weights_bytes, bytes) ||
        !add_ok(&est->cpu_total_bytes, bytes + bufs) ||
        !add_ok(&est->cpu_graph_bytes, bufs) || !add_ok(&est->graph_bytes, bufs))
        return cr_err_set(err, CR_E_TOO_LARGE, "adapter sizes overflow");
    est->lora_rank = rank;
    return CR_OK;
}

static cr_status_t clip_dim(const cr_gguf_t *g, const char *key, uint64_t *out,
                            cr_err_t *err)
{
    if (!cr_gguf_get_u64(g, key, out))
        return cr_err_set(err, CR_E_CORRUPT, "projector: %s is missing", key);
    if (*out == 0 || *out > MAX_DIM)
        return cr_err_set(err, CR_E_CORRUPT, "projector: %s = %" PRIu64
                          " is out of range 1..%d", key, *out, MAX_DIM);
    return CR_OK;
}

/* Rows of the projector matrix `name` (ne[1]), or def without it. */
static double mm_rows(const cr_gguf_t *g, const char *name, uint64_t def)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, name);
    return (double)(t && t->n_dims >= 2 && t->ne[1] <= MAX_DIM ? t->ne[1] : def);
}

/* The CPU backend's scratch for a tower's wide ops (backend/cpu/gemm.c
 * and attn_full.c share one buffer, kept between calls, the larger need
 * of the two) for T positions of D (heads heads) whose widest matmul
 * input is K floats, for up to 64 threads: the packed activations
 * [T + 12][K] and per thread the weight panels (4 x 512 x 32) and a
 * rounding row; or the packed keys and values (head dims and keys padded
 * to 32) and per thread the query tile and two [12][T] score strips. */
static double wide_scratch(double T, double D, double heads, double K)
{
    double hd = D / heads, hd_pad = ceil(hd / 32) * 32, t_pad = ceil(T / 32) * 32;
    double gemm = (T + 12) * K + 64 * (4 * 512 * 32 + 512 + 6 * K + 16);
    double attn = heads * (t_pad * hd + hd_pad * T) + 64 * (12 * hd + 24 * T + 16);
    return fmax(gemm, attn) * 4;
}

/* What a Pixtral tower allocates (vision/pixtral.c): buffers for its
 * largest image, SCH_PIXTRAL_MAX_TOKENS tokens of merge^2 patches: six
 * [N][dim] f32 rows, two [N][ffn], two f16 [N][dim] caches, the patches
 * twice (backend and host), the merger's two host copies, the projector's
 * [Nm][hidden] and [Nm][embd], the positions, the CPU backend's scratch
 * (matmul input [N][widest input], its block sums, attention rows) and
 * the preprocessed pixels, and the wide ops' scratch. */
static double pixtral_activations(double D, double F, double PP3, double merge, double H,
                                  double E, double heads)
{
    double mm = merge * merge, N = SCH_PIXTRAL_MAX_TOKENS * mm, Nm = N / mm;
    double widest = CR_MAX(CR_MAX(PP3, F), CR_MAX(D * mm, CR_MAX(H, E)));
    double scratch = N * widest * 4 + N * (widest / 32 + 1) * 2 * 4 + /* block sums */
                     (N + widest) * 6 * 64; /* attention rows, for up to 64 threads */
    return N * D * 4 * 6 + N * F * 4 * 2 + N * D * 2 * 2 + N * PP3 * 4 * 3 + N * D * 4 * 2 +
           N * 8 + Nm * (H + E) * 4 + scratch + wide_scratch(N, D, heads, widest);
}

/* What the Qwen2.5-VL tower allocates (vision/qwen2vl.c), sized per image:
 * the largest, 4096 merged patches of 4 (its RN_QWEN2VL_MAX_TOKENS); no
 * [T][T] scores (one query at a time); gate and up [T][ffn]; the image's
 * normalized pixels (3 floats per pixel, 4 patches of patch^2 each); and
 * the backend's scratch for one matmul's input (cpu_reserve: T x the
 * widest row, 4 bytes each, plus block sums) and for the wide ops. */
static double qwen25vl_activations(double D, double F, double PP3, double H, double E,
                                   double heads)
{
    double U = CR_VISION_QWEN25VL_MAX_TOKENS, T = 4 * U;
    double widest = fmax(fmax(PP3, F), fmax(4 * D, fmax(H, E)));
    return T * D * 4 * 6 + T * F * 4 * 2 + T * D * 2 * 2 + T * PP3 * 4 * 3 + T * 16 +
           U * (H + E) * 4 + T * widest * 4 * 1.1 + wide_scratch(T, D, heads, widest);
}

/* Adds a tower of `tensors` bytes and its activations for one image
 * (T positions of D, F wide; the patches; the projector's n_out rows of
 * hidden + embd floats; extra: what the runner derives at load) and the
 * image cache to every total a projector counts in. */
static cr_status_t add_vision(sch_estimate_t *est, double tensors, double T, double N,
                              double D, double F, double heads, double patch, double hidden,
                              double extra, cr_err_t *err)
{
    double act = T * D * 4 * 6 + T * F * 4 + T * D * 2 * 2 + T * T * 4 * heads +
                 N * 3 * patch * patch * 4 * 2 + N * hidden * 4 +
                 wide_scratch(T, D, heads, fmax(F, 3 * patch * patch));
    double bytes = tensors + act + extra + (double)SCH_VISION_CACHE_BYTES;
    if (!add_ok(&est->projector_bytes, bytes) || !add_ok(&est->embd_bytes, bytes) ||
        !add_ok(&est->cpu_total_bytes, bytes))
        return cr_err_set(err, CR_E_TOO_LARGE, "projector sizes overflow");
    return CR_OK;
}

cr_status_t sch_estimate_add_embedded_vision(sch_estimate_t *est,
                                             const cr_vision_embedded_t *v, cr_err_t *err)
{
    double D = (double)v->dim, E = (double)v->n_embd, F = (double)v->ffn;
    double H = (double)v->proj_hidden, PP3 = 3 * (double)v->patch_size * v->patch_size;
    if (v->family == CR_VISION_MISTRAL3 || v->family == CR_VISION_QWEN25VL) {
        /* sized for the largest image, as the towers allocate; plus the
         * copies the runner makes at load (mistral3's reordered q/k) */
        double act = v->family == CR_VISION_MISTRAL3
                         ? pixtral_activations(D, F, PP3, (double)v->n_merge, H, E,
                                               (double)v->n_heads)
                         : qwen25vl_activations(D, F, PP3, H, E, (double)v->n_heads);
        double bytes = (double)v->tensor_bytes + (double)v->copy_bytes + act +
                       (double)SCH_VISION_CACHE_BYTES;
        if (!add_ok(&est->projector_bytes, bytes) || !add_ok(&est->embd_bytes, bytes) ||
            !add_ok(&est->cpu_total_bytes, bytes))
            return cr_err_set(err, CR_E_TOO_LARGE, "projector sizes overflow");
        return CR_OK;
    }
    double side = (double)(v->image_size / v->patch_size), N = side * side;
    /* gemma3: the runner keeps a transposed copy of the input projection */
    return add_vision(est, (double)v->tensor_bytes, N, N, D, F, (double)v->n_heads,
                      (double)v->patch_size, D + E, (double)v->copy_bytes, err);
}

cr_status_t sch_estimate_add_projector(sch_estimate_t *est, const cr_gguf_t *pj,
                                       cr_err_t *err)
{
    uint64_t size, patch, dim, ffn, heads;
    cr_status_t st;
    if ((st = clip_dim(pj, "clip.vision.image_size", &size, err)) ||
        (st = clip_dim(pj, "clip.vision.patch_size", &patch, err)) ||
        (st = clip_dim(pj, "clip.vision.embedding_length", &dim, err)) ||
        (st = clip_dim(pj, "clip.vision.feed_forward_length", &ffn, err)) ||
        (st = clip_dim(pj, "clip.vision.attention.head_count", &heads, err)))
        return st;
    double tensors = 0;
    for (size_t i = 0; i < cr_gguf_tensor_count(pj); i++)
        tensors += (double)cr_gguf_tensor_at(pj, i)->size_bytes;
    double D = (double)dim, F = (double)ffn, PP3 = 3 * (double)(patch * patch), act;
    char type[32] = "";
    cr_gguf_get_strz(pj, "clip.projector_type", type, sizeof type);
    if (!strcmp(type, "pixtral")) {
        uint32_t merge = 1;
        if (!cr_gguf_get_u32(pj, "clip.vision.spatial_merge_size", &merge) || merge < 1 ||
            merge > 8)
            merge = 1;
        act = pixtral_activations(D, F, PP3, (double)merge, mm_rows(pj, "mm.1.weight", dim),
                                  mm_rows(pj, "mm.2.weight", dim), (double)heads);
    } else if (!strcmp(type, "qwen2.5vl_merger") || !strcmp(type, "qwen2vl_merger")) {
        /* Qwen2-VL's tower allocates the same buffers (its ungated MLP
         * leaves one [T][ffn] unused) */
        act = qwen25vl_activations(D, F, PP3, mm_rows(pj, "mm.0.weight", dim),
                                   mm_rows(pj, "mm.2.weight", dim), (double)heads);
    } else {
        double side = (double)(size / patch), N = side * side, T = N + 1;
        act = T * D * 4 * 6 + T * F * 4 + T * D * 2 * 2 + T * T * 4 * (double)heads +
              N * PP3 * 4 * 2 +
              N * (mm_rows(pj, "mm.0.weight", dim) + mm_rows(pj, "mm.2.weight", dim)) * 4 +
              wide_scratch(T, D, (double)heads, fmax(F, PP3));
    }
    /* gemma3's input projection ne {E, D}: a transposed copy at load */
    const cr_gguf_tensor_t *ip = cr_gguf_tensor_find(pj, "mm.input_projection.weight");
    double extra = ip && ip->n_dims == 2 ? (double)ip->ne[0] * (double)ip->ne[1] * 4 : 0;
    double bytes = tensors + act + extra + (double)SCH_VISION_CACHE_BYTES;
    if (!add_ok(&est->projector_bytes, bytes) || !add_ok(&est->embd_bytes, bytes) ||
        !add_ok(&est->cpu_total_bytes, bytes))
        return cr_err_set(err, CR_E_TOO_LARGE, "projector sizes overflow");
    return CR_OK;
}

cr_status_t sch_estimate_add_draft(sch_estimate_t *est, const cr_gguf_t *dg,
                                   const sch_estimate_opts_t *o, cr_err_t *err)
{
    sch_estimate_t *d = calloc(1, sizeof *d); /* 8 KiB of layers: not on the stack */
    if (!d)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    sch_estimate_opts_t dopt = *o;
    dopt.kv_f16_only = false; /* the draft stays on the CPU whatever the GPUs */
    cr_status_t st = sch_estimate_gguf(dg, &dopt, d, err);
    if (st)
        cr_err_wrap(err, "draft model");
    else if (!add_ok(&est->draft_bytes, (double)d->cpu_total_bytes) ||
             !add_ok(&est->embd_bytes, (double)d->cpu_total_bytes) ||
             !add_ok(&est->cpu_total_bytes, (double)d->cpu_total_bytes))
        st = cr_err_set(err, CR_E_TOO_LARGE, "draft model sizes overflow");
    free(d);
    return st;
}

cr_status_t sch_estimate_file(const char *path, const sch_estimate_opts_t *o,
                              sch_estimate_t *out, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open(path, &g, err); /* names the path */
    if (st)
        return st;
    st = sch_estimate_gguf(g, o, out, err);
    cr_gguf_close(&g);
    if (st)
        cr_err_wrap(err, "%s", path);
    return st;
}
