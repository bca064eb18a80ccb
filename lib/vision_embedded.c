/* vision_embedded.c: see vision_embedded.h. The names and shapes are
 * Ollama's gemma3 layout (its model/models/gemma3 and convert_gemma3). */
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

cr_status_t cr_vision_embedded(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err)
{
    cr_vision_embedded_t v = {0};
    uint32_t n = 0;
    if (strcmp(cr_gguf_arch(g), "gemma3") ||
        !cr_gguf_get_u32(g, "gemma3.vision.block_count", &n) || n == 0)
        return cr_err_set(err, CR_E_NOT_FOUND, "the model file holds no vision tower");
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
