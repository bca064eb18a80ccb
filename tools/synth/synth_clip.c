/* synth_clip.c: synthetic llava-shaped vision projector files (see
 * synth.h, "vision projectors"). Small enough to build every tensor in
 * memory before writing. */
#include "lib/vision_embedded.h"
#include "lib/prelude.h"
#include "tools/synth/synth.h"
#include "tools/synth/synth_vision.h"

#include "lib/gguf_write.h"
#include "services/runner/backend/cpu/quant.h"

void rn_synth_clip_defaults(rn_synth_clip_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->type = CR_TYPE_F32;
    o->image_size = 112;
    o->patch_size = 14;
    o->dim = 64;
    o->n_heads = 4;
    o->ffn = 160;
    o->n_layers = 3;
    o->proj_hidden = 96;
    o->n_embd = 64;
    o->std = 0.1;
    o->merge = 2;
}

typedef rn_synth_vision_t clip_synth_t;

cr_status_t rn_synth_vision_add(rn_synth_vision_t *s, const char *name, cr_type_t type,
                                uint32_t n_dims, const uint64_t *ne, double mean, double std,
                                cr_err_t *err)
{
    if (s->n == RN_SYNTH_VISION_MAX_TENSORS)
        return cr_err_set(err, CR_E_INTERNAL, "synth: too many tensors");
    size_t n = 1;
    for (uint32_t i = 0; i < n_dims; i++)
        n *= (size_t)ne[i];
    float *f = malloc(n * sizeof *f);
    void *data = type == CR_TYPE_F32 ? (void *)f : malloc(n * 2);
    if (!f || !data) {
        free(f);
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    }
    rn_synth_fill_normal(s->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(s->n + 1)), f, n,
                         mean, std);
    if (type != CR_TYPE_F32) {
        be_type_traits_at(type, BE_SIMD_SCALAR)->from_float(f, data, (int64_t)n);
        free(f);
    }
    s->data[s->n++] = data;
    return cr_gguf_writer_add_tensor(s->w, name, n_dims, ne, type, data, NULL, err);
}

static cr_status_t vec(clip_synth_t *s, const char *name, uint64_t n, double mean,
                       double std, cr_err_t *err)
{
    return rn_synth_vision_add(s, name, CR_TYPE_F32, 1, &n, mean, std, err);
}

static cr_status_t mat(clip_synth_t *s, const rn_synth_clip_opts_t *o, const char *name,
                       uint64_t cols, uint64_t rows, cr_err_t *err)
{
    uint64_t ne[2] = {cols, rows};
    return rn_synth_vision_add(s, name, o->type, 2, ne, 0, o->std, err);
}

static cr_status_t check(const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    if (o->type != CR_TYPE_F32 && o->type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_INVALID, "projector matrices must be f32 or f16");
    if (o->patch_size < 1 || o->image_size < o->patch_size ||
        o->image_size % o->patch_size || o->image_size > 1024)
        return cr_err_set(err, CR_E_INVALID, "image size %d must be a multiple of patch "
                          "size %d (at most 1024)", o->image_size, o->patch_size);
    if (o->dim < 1 || o->n_heads < 1 || o->dim % o->n_heads || o->ffn < 1 ||
        o->n_layers < 2 || o->n_layers > 64 || o->proj_hidden < 1 || o->n_embd < 1 ||
        o->dim > 4096 || o->ffn > 16384 || o->proj_hidden > 16384 || o->n_embd > 16384)
        return cr_err_set(err, CR_E_INVALID, "bad projector shape (dim %d, heads %d, ffn "
                          "%d, layers %d >= 2, hidden %d, n_embd %d)", o->dim, o->n_heads,
                          o->ffn, o->n_layers, o->proj_hidden, o->n_embd);
    return CR_OK;
}

static cr_status_t keys(cr_gguf_writer_t *w, const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    cr_status_t st;
    if ((st = cr_gguf_writer_add_str(w, "general.architecture", "clip", err)) ||
        (st = cr_gguf_writer_add_str(w, "general.name", "synth-llava-projector", err)) ||
        (st = cr_gguf_writer_add_u32(w, "general.file_type",
                                     o->type == CR_TYPE_F16 ? 1 : 0, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_text_encoder", false, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_llava_projector", true, err)) ||
        (st = cr_gguf_writer_add_str(w, "clip.projector_type", "mlp", err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.use_gelu", o->use_gelu, err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.image_size", (uint32_t)o->image_size, err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.patch_size", (uint32_t)o->patch_size, err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.embedding_length", (uint32_t)o->dim, err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.feed_forward_length", (uint32_t)o->ffn,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.projection_dim", (uint32_t)o->n_embd,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.attention.head_count",
                                     (uint32_t)o->n_heads, err)) ||
        (st = cr_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-5f,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)o->n_layers,
                                     err)) ||
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_mean", CR_GGUF_F32, cr_vision_clip_mean, 3, err)))
        return st;
    return cr_gguf_writer_add_arr(w, "clip.vision.image_std", CR_GGUF_F32, cr_vision_clip_std, 3, err);
}

static cr_status_t tensors(clip_synth_t *s, const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    uint64_t D = (uint64_t)o->dim, F = (uint64_t)o->ffn, P = (uint64_t)o->patch_size;
    uint64_t side = (uint64_t)(o->image_size / o->patch_size);
    uint64_t T = side * side + 1;
    uint64_t patch_ne[4] = {P, P, 3, D};
    uint64_t pos_ne[2] = {D, T};
    cr_status_t st;
    if ((st = rn_synth_vision_add(s, "v.patch_embd.weight", o->type, 4, patch_ne, 0, o->std, err)) ||
        (st = vec(s, "v.patch_embd.bias", D, 0, 0.1, err)) ||
        (st = vec(s, "v.class_embd", D, 0, 0.5, err)) ||
        (st = rn_synth_vision_add(s, "v.position_embd.weight", CR_TYPE_F32, 2, pos_ne, 0, 0.5, err)) ||
        (st = vec(s, "v.pre_ln.weight", D, 1, 0.1, err)) ||
        (st = vec(s, "v.pre_ln.bias", D, 0, 0.1, err)))
        return st;
    for (int l = 0; l < o->n_layers && !st; l++) {
        char n[64];
#define NAME(what) (snprintf(n, sizeof n, "v.blk.%d.%s", l, what), n)
        if ((st = vec(s, NAME("ln1.weight"), D, 1, 0.1, err)) ||
            (st = vec(s, NAME("ln1.bias"), D, 0, 0.1, err)) ||
            (st = mat(s, o, NAME("attn_q.weight"), D, D, err)) ||
            (st = vec(s, NAME("attn_q.bias"), D, 0, 0.1, err)) ||
            (st = mat(s, o, NAME("attn_k.weight"), D, D, err)) ||
            (st = vec(s, NAME("attn_k.bias"), D, 0, 0.1, err)) ||
            (st = mat(s, o, NAME("attn_v.weight"), D, D, err)) ||
            (st = vec(s, NAME("attn_v.bias"), D, 0, 0.1, err)) ||
            (st = mat(s, o, NAME("attn_out.weight"), D, D, err)) ||
            (st = vec(s, NAME("attn_out.bias"), D, 0, 0.1, err)) ||
            (st = vec(s, NAME("ln2.weight"), D, 1, 0.1, err)) ||
            (st = vec(s, NAME("ln2.bias"), D, 0, 0.1, err)) ||
            (st = mat(s, o, NAME("ffn_up.weight"), D, F, err)) ||
            (st = vec(s, NAME("ffn_up.bias"), F, 0, 0.1, err)) ||
            (st = mat(s, o, NAME("ffn_down.weight"), F, D, err)))
            break;
        st = vec(s, NAME("ffn_down.bias"), D, 0, 0.1, err);
#undef NAME
    }
    uint64_t H = (uint64_t)o->proj_hidden, E = (uint64_t)o->n_embd;
    if (!st && !(st = mat(s, o, "mm.0.weight", D, H, err)) &&
        !(st = vec(s, "mm.0.bias", H, 0, 0.1, err)) &&
        !(st = mat(s, o, "mm.2.weight", H, E, err)))
        st = vec(s, "mm.2.bias", E, 0, 0.1, err);
    return st;
}

cr_status_t rn_synth_clip_write(const rn_synth_clip_opts_t *o, const char *path,
                                cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    clip_synth_t s = {.w = cr_gguf_writer_new(), .seed = o->seed};
    if (!s.w)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    if (!(st = keys(s.w, o, err)) && !(st = tensors(&s, o, err)))
        st = cr_gguf_writer_write(s.w, path, err);
    cr_gguf_writer_destroy(&s.w);
    for (int i = 0; i < s.n; i++)
        free(s.data[i]);
    return st;
}
