/* vision_embedded.c: see vision_embedded.h. The names and shapes are
 * Ollama's layouts (its convert_gemma3.go, convert_mistral.go,
 * convert_qwen25vl.go and model/models/{gemma3,mistral3,qwen25vl}); where
 * Ollama's reader has a default for an absent key, so does this. */
#include "lib/prelude.h"
#include "lib/vision_embedded.h"

#include <math.h>

/* The runner's limits (vision/siglip.c) */
#define VE_MAX_DIM 16384
#define VE_MAX_FFN 65536
#define VE_MAX_IMAGE 2048
#define VE_MAX_LAYERS 256

static cr_status_t key_u32(const cr_gguf_t *g, const char *key, int max, int *out,
                           cr_err_t *err)
{
    uint32_t v = 0;
    if (!cr_gguf_get_u32(g, key, &v) || v == 0 || v > (uint32_t)max)
        return cr_err_set(err, CR_E_INVALID, "vision tower: key '%s' is missing or out of "
                          "range 1..%d", key, max);
    *out = (int)v;
    return CR_OK;
}

/* Tensor `name` holding rows x cols elements (more dims folded into cols);
 * its bytes added to *bytes. A vector (rows 1: norms, biases) must be F32,
 * as the runner's ops read them in place. */
static cr_status_t tensor(const cr_gguf_t *g, const char *name, uint64_t cols, uint64_t rows,
                          uint64_t *bytes, cr_err_t *err)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, name);
    if (!t)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor '%s' is missing", name);
    uint64_t last = t->n_dims > 1 ? t->ne[t->n_dims - 1] : 1;
    if (!last || t->n_elems / last != cols || last != rows)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor '%s' is not %" PRIu64
                          " x %" PRIu64, name, rows, cols);
    if (rows == 1 && t->type != CR_TYPE_F32)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor '%s' is not F32", name);
    *bytes += t->size_bytes;
    return CR_OK;
}

static cr_status_t gemma3(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err)
{
    cr_vision_embedded_t v = {.family = CR_VISION_GEMMA3, .n_merge = 1};
    cr_status_t st;
    if ((st = key_u32(g, "gemma3.vision.block_count", VE_MAX_LAYERS, &v.n_layers, err)) ||
        (st = key_u32(g, "gemma3.vision.image_size", VE_MAX_IMAGE, &v.image_size, err)) ||
        (st = key_u32(g, "gemma3.vision.patch_size", 256, &v.patch_size, err)) ||
        (st = key_u32(g, "gemma3.vision.embedding_length", VE_MAX_DIM, &v.dim, err)) ||
        (st = key_u32(g, "gemma3.vision.feed_forward_length", VE_MAX_FFN, &v.ffn, err)) ||
        (st = key_u32(g, "gemma3.vision.attention.head_count", 256, &v.n_heads, err)))
        return st;
    float eps = 0;
    if (!cr_gguf_get_f32(g, "gemma3.vision.attention.layer_norm_epsilon", &eps) ||
        !(eps > 0) || !isfinite(eps))
        return cr_err_set(err, CR_E_INVALID, "vision tower: key 'gemma3.vision.attention."
                          "layer_norm_epsilon' is missing or not positive");
    v.eps = eps;
    if (v.image_size % v.patch_size || v.dim % v.n_heads)
        return cr_err_set(err, CR_E_INVALID, "vision tower: image_size %d / patch_size %d "
                          "or embedding_length %d / head_count %d does not divide",
                          v.image_size, v.patch_size, v.dim, v.n_heads);
    int side = v.image_size / v.patch_size;
    uint32_t tokens = 256;
    if (!cr_gguf_get_u32(g, "gemma3.mm.tokens_per_image", &tokens))
        cr_gguf_get_u32(g, "gemma3.mm_tokens_per_image", &tokens);
    int pooled = (int)lround(sqrt((double)tokens));
    if (tokens == 0 || (uint32_t)(pooled * pooled) != tokens || side % pooled)
        return cr_err_set(err, CR_E_INVALID, "vision tower: %u tokens per image do not pool "
                          "a %dx%d patch grid", tokens, side, side);
    v.n_tokens = (int)tokens;
    uint64_t D = (uint64_t)v.dim, F = (uint64_t)v.ffn, P = (uint64_t)v.patch_size, b = 0;
    if ((st = tensor(g, "v.patch_embedding.weight", 3 * P * P, D, &b, err)) ||
        (st = tensor(g, "v.patch_embedding.bias", D, 1, &b, err)) ||
        (st = tensor(g, "v.position_embedding.weight", D, (uint64_t)side * side, &b, err)) ||
        (st = tensor(g, "v.post_layernorm.weight", D, 1, &b, err)) ||
        (st = tensor(g, "v.post_layernorm.bias", D, 1, &b, err)) ||
        (st = tensor(g, "mm.mm_soft_emb_norm.weight", D, 1, &b, err)))
        return st;
    const cr_gguf_tensor_t *pe = cr_gguf_tensor_find(g, "v.patch_embedding.weight");
    if (pe->type != CR_TYPE_F32 && pe->type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor "
                          "'v.patch_embedding.weight' is not F32 or F16");
    const cr_gguf_tensor_t *proj = cr_gguf_tensor_find(g, "mm.mm_input_projection.weight");
    if (!proj || proj->n_dims != 2 || proj->ne[1] != D || !proj->ne[0] ||
        proj->ne[0] > VE_MAX_FFN)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor "
                          "'mm.mm_input_projection.weight' is missing or not %" PRIu64
                          " rows", D);
    b += proj->size_bytes;
    v.n_embd = (int)CR_MIN(proj->ne[0], (uint64_t)INT_MAX);
    v.copy_bytes = (uint64_t)v.n_embd * D * 4; /* transposed at load */
    const struct {
        const char *name;
        uint64_t cols, rows;
    } parts[] = {
        {"layer_norm1.weight", D, 1}, {"layer_norm1.bias", D, 1},
        {"attn_q.weight", D, D},      {"attn_q.bias", D, 1},
        {"attn_k.weight", D, D},      {"attn_k.bias", D, 1},
        {"attn_v.weight", D, D},      {"attn_v.bias", D, 1},
        {"attn_output.weight", D, D}, {"attn_output.bias", D, 1},
        {"layer_norm2.weight", D, 1}, {"layer_norm2.bias", D, 1},
        {"mlp.fc1.weight", D, F},     {"mlp.fc1.bias", F, 1},
        {"mlp.fc2.weight", F, D},     {"mlp.fc2.bias", D, 1},
    };
    for (int l = 0; l < v.n_layers; l++)
        for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
            char name[96];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, parts[i].name);
            if ((st = tensor(g, name, parts[i].cols, parts[i].rows, &b, err)))
                return st;
        }
    v.tensor_bytes = b;
    if (out)
        *out = v;
    return CR_OK;
}

/* An optional key: def when absent; out of 1..max is an error. */
static cr_status_t key_u32_or(const cr_gguf_t *g, const char *key, int def, int max, int *out,
                              cr_err_t *err)
{
    if (!cr_gguf_kv_find(g, key)) {
        *out = def;
        return CR_OK;
    }
    return key_u32(g, key, max, out, err);
}

/* An optional positive float key: def when absent. */
static cr_status_t key_f32_or(const cr_gguf_t *g, const char *key, float def, float *out,
                              cr_err_t *err)
{
    *out = def;
    if (cr_gguf_kv_find(g, key) && (!cr_gguf_get_f32(g, key, out) || !(*out > 0) ||
                                    !isfinite(*out)))
        return cr_err_set(err, CR_E_INVALID, "vision tower: key '%s' is not a positive "
                          "number", key);
    return CR_OK;
}

/* A tensor that may be absent (a bias); checked as tensor() when present. */
static cr_status_t opt_tensor(const cr_gguf_t *g, const char *name, uint64_t cols,
                              uint64_t rows, uint64_t *bytes, cr_err_t *err)
{
    return cr_gguf_tensor_find(g, name) ? tensor(g, name, cols, rows, bytes, err) : CR_OK;
}

/* Rows (ne[1]) of matrix `name`, 0 when it is absent or not a matrix. */
static uint64_t matrix_rows(const cr_gguf_t *g, const char *name)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, name);
    return t && t->n_dims == 2 && t->ne[1] <= VE_MAX_FFN ? t->ne[1] : 0;
}

/* Tensor `name` must be one of the n types in `types` (the runner's ops
 * for it take no others). */
static cr_status_t type_in(const cr_gguf_t *g, const char *name, const cr_type_t *types, int n,
                           const char *which, cr_err_t *err)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, name);
    for (int i = 0; t && i < n; i++)
        if (t->type == types[i])
            return CR_OK;
    return cr_err_set(err, CR_E_INVALID, "vision tower: tensor '%s' is not %s", name, which);
}

/* The id of `text` in the vocabulary (tokenizer.ggml.tokens), or -1. */
static int64_t vocab_id(const cr_gguf_t *g, const char *text)
{
    const cr_gguf_array_t *a = NULL;
    if (!cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &a) || !a->strs)
        return -1;
    for (uint64_t i = 0; i < a->n; i++)
        if (cr_gguf_str_eq(a->strs[i], text))
            return (int64_t)i;
    return -1;
}

/* Ollama's mistral3: convert_mistral.go writes mistral3.vision.{block_count,
 * embedding_length, feed_forward_length, attention.head_count,
 * attention.key_length, image_size, patch_size, num_channels,
 * rope.freq_base} and mistral3.spatial_merge_size; model/models/mistral3
 * reads vision.attention.layer_norm_epsilon with the default 1e-5 (the
 * converter leaves it out) and hard-codes SiLU, GELU in the projector and
 * the [IMG_BREAK] token. */
static cr_status_t mistral3(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err)
{
    cr_vision_embedded_t v = {.family = CR_VISION_MISTRAL3};
    cr_status_t st;
    int head = 0;
    float eps = 0, theta = 0;
    if ((st = key_u32(g, "mistral3.vision.block_count", VE_MAX_LAYERS, &v.n_layers, err)) ||
        (st = key_u32_or(g, "mistral3.vision.embedding_length", 1024, VE_MAX_DIM, &v.dim,
                         err)) ||
        (st = key_u32_or(g, "mistral3.vision.feed_forward_length", 4096, VE_MAX_FFN, &v.ffn,
                         err)) ||
        (st = key_u32_or(g, "mistral3.vision.attention.head_count", 16, 256, &v.n_heads,
                         err)) ||
        (st = key_u32_or(g, "mistral3.vision.patch_size", 14, 256, &v.patch_size, err)) ||
        (st = key_u32_or(g, "mistral3.spatial_merge_size", 2, 8, &v.n_merge, err)) ||
        (st = key_f32_or(g, "mistral3.vision.attention.layer_norm_epsilon", 1e-5f, &eps,
                         err)) ||
        (st = key_f32_or(g, "mistral3.vision.rope.freq_base", 10000.0f, &theta, err)))
        return st;
    if (v.dim % v.n_heads || (v.dim / v.n_heads) % 4)
        return cr_err_set(err, CR_E_INVALID, "vision tower: embedding_length %d over %d "
                          "heads is no multiple of 4 per head", v.dim, v.n_heads);
    if ((st = key_u32_or(g, "mistral3.vision.attention.key_length", v.dim / v.n_heads, 1024,
                         &head, err)))
        return st;
    if (head != v.dim / v.n_heads)
        return cr_err_set(err, CR_E_INVALID, "vision tower: key_length %d is not "
                          "embedding_length / head_count (%d)", head, v.dim / v.n_heads);
    uint64_t D = (uint64_t)v.dim, F = (uint64_t)v.ffn, P = (uint64_t)v.patch_size, b = 0;
    uint64_t mm = (uint64_t)v.n_merge * (uint64_t)v.n_merge;
    static const cr_type_t patch_types[] = {CR_TYPE_F32, CR_TYPE_F16};
    if ((st = tensor(g, "v.patch_conv.weight", 3 * P * P, D, &b, err)) ||
        (st = type_in(g, "v.patch_conv.weight", patch_types, 2, "F32 or F16", err)) ||
        (st = tensor(g, "v.encoder_norm.weight", D, 1, &b, err)))
        return st;
    const struct {
        const char *name;
        uint64_t cols, rows;
    } parts[] = {
        {"attn_norm.weight", D, 1}, {"attn_q.weight", D, D},     {"attn_k.weight", D, D},
        {"attn_v.weight", D, D},    {"attn_output.weight", D, D}, {"ffn_norm.weight", D, 1},
        {"ffn_gate.weight", D, F},  {"ffn_up.weight", D, F},     {"ffn_down.weight", F, D},
    };
    for (int l = 0; l < v.n_layers; l++)
        for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
            char name[96];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, parts[i].name);
            if ((st = tensor(g, name, parts[i].cols, parts[i].rows, &b, err)))
                return st;
            if (i == 1 || i == 2) /* q and k: reordered copies at load */
                v.copy_bytes += cr_gguf_tensor_find(g, name)->size_bytes;
        }
    if (v.n_merge > 1 &&
        ((st = tensor(g, "mm.norm.weight", D, 1, &b, err)) ||
         (st = tensor(g, "mm.patch_merger.merging_layer.weight", D * mm, D, &b, err))))
        return st;
    uint64_t H = matrix_rows(g, "mm.linear_1.weight"), E = matrix_rows(g, "mm.linear_2.weight");
    if (!H || !E)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensors 'mm.linear_1.weight' and "
                          "'mm.linear_2.weight' must be matrices");
    if ((st = tensor(g, "mm.linear_1.weight", D, H, &b, err)) ||
        (st = opt_tensor(g, "mm.linear_1.bias", H, 1, &b, err)) ||
        (st = tensor(g, "mm.linear_2.weight", H, E, &b, err)) ||
        (st = opt_tensor(g, "mm.linear_2.bias", E, 1, &b, err)))
        return st;
    /* [IMG_BREAK]'s embedding is the text model's (llama.cpp's converter
     * copies that row into its mmproj) */
    const cr_gguf_tensor_t *te = cr_gguf_tensor_find(g, "token_embd.weight");
    int64_t brk = vocab_id(g, "[IMG_BREAK]");
    if (!te || te->n_dims != 2 || te->ne[0] != E)
        return cr_err_set(err, CR_E_INVALID, "vision tower: the text model's "
                          "'token_embd.weight' is missing or not %" PRIu64 " wide", E);
    if (brk < 0 || (uint64_t)brk >= te->ne[1])
        return cr_err_set(err, CR_E_INVALID, "vision tower: the vocabulary lacks "
                          "[IMG_BREAK]");
    v.proj_hidden = (int)H;
    v.n_embd = (int)E;
    v.n_tokens = CR_VISION_PIXTRAL_MAX_TOKENS;
    v.eps = eps;
    v.rope_theta = theta;
    v.tensor_bytes = b;
    if (out)
        *out = v;
    return CR_OK;
}

/* Ollama's qwen25vl: convert_qwen25vl.go writes qwen25vl.vision.
 * {block_count, embedding_length, attention.head_count, num_channels,
 * patch_size, spatial_merge_size, spatial_patch_size, window_size,
 * attention.layer_norm_epsilon, rope.freq_base, fullatt_block_indexes,
 * temporal_patch_size} (no feed_forward_length: the gate's rows give it)
 * and splits the patch kernel's two frames and the fused qkv. */
static cr_status_t qwen25vl(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err)
{
    cr_vision_embedded_t v = {.family = CR_VISION_QWEN25VL};
    cr_status_t st;
    int temporal = 0, window = 0;
    float eps = 0, theta = 0;
    if ((st = key_u32(g, "qwen25vl.vision.block_count", VE_MAX_LAYERS, &v.n_layers, err)) ||
        (st = key_u32_or(g, "qwen25vl.vision.embedding_length", 1280, VE_MAX_DIM, &v.dim,
                         err)) ||
        (st = key_u32_or(g, "qwen25vl.vision.attention.head_count", 16, 256, &v.n_heads,
                         err)) ||
        (st = key_u32_or(g, "qwen25vl.vision.patch_size", 14, 64, &v.patch_size, err)) ||
        (st = key_u32_or(g, "qwen25vl.vision.spatial_merge_size", 2, 8, &v.n_merge, err)) ||
        (st = key_u32_or(g, "qwen25vl.vision.temporal_patch_size", 2, 8, &temporal, err)) ||
        (st = key_u32_or(g, "qwen25vl.vision.window_size", 112, 4096, &window, err)) ||
        (st = key_f32_or(g, "qwen25vl.vision.attention.layer_norm_epsilon", 1e-6f, &eps,
                         err)) ||
        (st = key_f32_or(g, "qwen25vl.vision.rope.freq_base", 10000.0f, &theta, err)))
        return st;
    if (v.n_merge != 2 || temporal != 2)
        return cr_err_set(err, CR_E_INVALID, "vision tower: spatial_merge_size %d and "
                          "temporal_patch_size %d (the tower runs 2 and 2)", v.n_merge,
                          temporal);
    int head = v.dim / v.n_heads;
    if (v.dim % v.n_heads || head % 4 || head > 1024)
        return cr_err_set(err, CR_E_INVALID, "vision tower: embedding_length %d over %d "
                          "heads is no multiple of 4 up to 1024 per head", v.dim, v.n_heads);
    const cr_gguf_kv_t *fa = cr_gguf_kv_find(g, "qwen25vl.vision.fullatt_block_indexes");
    for (uint64_t i = 0; fa && i < (fa->type == CR_GGUF_ARRAY ? fa->v.arr.n : 1); i++) {
        int64_t k = -1;
        if (fa->type != CR_GGUF_ARRAY || !cr_gguf_arr_get_i64(&fa->v.arr, i, &k) || k < 0 ||
            k >= VE_MAX_LAYERS)
            return cr_err_set(err, CR_E_INVALID, "vision tower: key 'qwen25vl.vision."
                              "fullatt_block_indexes' must hold block numbers");
    }
    uint64_t F = matrix_rows(g, "v.blk.0.ffn_gate.weight");
    if (!F)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor 'v.blk.0.ffn_gate.weight' "
                          "is missing or not a matrix");
    v.ffn = (int)F;
    uint64_t D = (uint64_t)v.dim, P = (uint64_t)v.patch_size, b = 0;
    static const cr_type_t mat_types[] = {CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_BF16,
                                          CR_TYPE_Q8_0};
    const char *kernels[] = {"v.patch_embd_0.weight", "v.patch_embd_1.weight"};
    for (int i = 0; i < 2; i++)
        if ((st = tensor(g, kernels[i], 3 * P * P, D, &b, err)) ||
            (st = type_in(g, kernels[i], mat_types, 4, "F32, F16, BF16 or Q8_0", err)))
            return st;
    const struct {
        const char *name;
        uint64_t cols, rows;
        bool required;
    } parts[] = {
        {"ln1.weight", D, 1, true},       {"ln1.bias", D, 1, false},
        {"attn_q.weight", D, D, true},    {"attn_q.bias", D, 1, true},
        {"attn_k.weight", D, D, true},    {"attn_k.bias", D, 1, true},
        {"attn_v.weight", D, D, true},    {"attn_v.bias", D, 1, true},
        {"attn_out.weight", D, D, true},  {"attn_out.bias", D, 1, false},
        {"ln2.weight", D, 1, true},       {"ln2.bias", D, 1, false},
        {"ffn_gate.weight", D, F, true},  {"ffn_gate.bias", F, 1, false},
        {"ffn_up.weight", D, F, true},    {"ffn_up.bias", F, 1, false},
        {"ffn_down.weight", F, D, true},  {"ffn_down.bias", D, 1, false},
    };
    for (int l = 0; l < v.n_layers; l++)
        for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
            char name[96];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, parts[i].name);
            if ((st = (parts[i].required ? tensor : opt_tensor)(g, name, parts[i].cols,
                                                                parts[i].rows, &b, err)))
                return st;
            if (parts[i].rows > 1 &&
                (st = type_in(g, name, mat_types, 4, "F32, F16, BF16 or Q8_0", err)))
                return st;
        }
    uint64_t H = matrix_rows(g, "v.merger.mlp.0.weight");
    uint64_t E = matrix_rows(g, "v.merger.mlp.2.weight");
    if (!H || !E)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensors 'v.merger.mlp.0.weight' "
                          "and 'v.merger.mlp.2.weight' must be matrices");
    if ((st = tensor(g, "v.merger.ln_q.weight", D, 1, &b, err)) ||
        (st = opt_tensor(g, "v.merger.ln_q.bias", D, 1, &b, err)) ||
        (st = tensor(g, "v.merger.mlp.0.weight", 4 * D, H, &b, err)) ||
        (st = type_in(g, "v.merger.mlp.0.weight", mat_types, 4, "F32, F16, BF16 or Q8_0",
                      err)) ||
        (st = tensor(g, "v.merger.mlp.0.bias", H, 1, &b, err)) ||
        (st = tensor(g, "v.merger.mlp.2.weight", H, E, &b, err)) ||
        (st = type_in(g, "v.merger.mlp.2.weight", mat_types, 4, "F32, F16, BF16 or Q8_0",
                      err)) ||
        (st = tensor(g, "v.merger.mlp.2.bias", E, 1, &b, err)))
        return st;
    v.proj_hidden = (int)H;
    v.n_embd = (int)E;
    v.n_tokens = CR_VISION_QWEN25VL_MAX_TOKENS;
    v.eps = eps;
    v.rope_theta = theta;
    v.tensor_bytes = b;
    if (out)
        *out = v;
    return CR_OK;
}

cr_status_t cr_vision_embedded(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err)
{
    static const struct {
        const char *arch;
        cr_status_t (*check)(const cr_gguf_t *, cr_vision_embedded_t *, cr_err_t *);
    } families[] = {
        {"gemma3", gemma3},
        {"mistral3", mistral3},
        {"qwen25vl", qwen25vl},
    };
    const char *arch = cr_gguf_arch(g);
    for (size_t i = 0; i < CR_ARRAY_LEN(families); i++) {
        char key[64];
        snprintf(key, sizeof key, "%s.vision.block_count", families[i].arch);
        uint32_t n = 0;
        if (!strcmp(arch, families[i].arch) && cr_gguf_get_u32(g, key, &n) && n > 0)
            return families[i].check(g, out, err);
    }
    return cr_err_set(err, CR_E_NOT_FOUND, "the model file holds no vision tower");
}

cr_status_t cr_vision_embedded_of(const cr_gguf_t *g, cr_vision_family_t family,
                                  const char *what, cr_vision_embedded_t *out,
                                  cr_err_t *err)
{
    cr_status_t st = cr_vision_embedded(g, out, err);
    if (st == CR_E_NOT_FOUND || (!st && out->family != family))
        return cr_err_set(err, CR_E_INVALID, "not Ollama's %s model file with a vision tower",
                          what);
    return st;
}

const float cr_vision_clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
const float cr_vision_clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
