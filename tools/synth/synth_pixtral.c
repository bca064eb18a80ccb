/* synth_pixtral.c: synthetic Pixtral / Mistral Small 3.x projector files
 * (see synth.h, "vision projectors"): llama.cpp's mmproj layout for
 * clip.projector_type "pixtral". */
#include "lib/prelude.h"
#include "tools/synth/synth.h"
#include "tools/synth/synth_vision.h"

static cr_status_t check(const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    if (o->type != CR_TYPE_F32 && o->type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_INVALID, "projector matrices must be f32 or f16");
    if (o->patch_size < 1 || o->patch_size > 64 || o->merge < 1 || o->merge > 4 ||
        o->image_size < o->patch_size * o->merge || o->image_size > 2048)
        return cr_err_set(err, CR_E_INVALID, "bad pixtral patch %d / merge %d / image size "
                          "%d", o->patch_size, o->merge, o->image_size);
    if (o->dim < 1 || o->n_heads < 1 || o->dim % o->n_heads || (o->dim / o->n_heads) % 4 ||
        o->ffn < 1 || o->n_layers < 1 || o->n_layers > 64 || o->proj_hidden < 1 ||
        o->n_embd < 1 || o->dim > 4096 || o->ffn > 16384 || o->proj_hidden > 16384 ||
        o->n_embd > 16384)
        return cr_err_set(err, CR_E_INVALID, "bad pixtral shape (dim %d over %d heads: a "
                          "multiple of 4 per head, ffn %d, layers %d, hidden %d, n_embd %d)",
                          o->dim, o->n_heads, o->ffn, o->n_layers, o->proj_hidden, o->n_embd);
    return CR_OK;
}

static cr_status_t keys(cr_gguf_writer_t *w, const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    /* Pixtral's preprocessor_config.json uses CLIP's statistics */
    static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    cr_status_t st;
    if ((st = cr_gguf_writer_add_str(w, "general.architecture", "clip", err)) ||
        (st = cr_gguf_writer_add_str(w, "general.name", "synth-pixtral-projector", err)) ||
        (st = cr_gguf_writer_add_u32(w, "general.file_type",
                                     o->type == CR_TYPE_F16 ? 1 : 0, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_text_encoder", false, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, err)) ||
        (st = cr_gguf_writer_add_str(w, "clip.projector_type", "pixtral", err)) ||
        (st = cr_gguf_writer_add_bool(w, o->use_gelu ? "clip.use_gelu" : "clip.use_silu",
                                      true, err)) ||
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
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_mean", CR_GGUF_F32, mean, 3, err)) ||
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_std", CR_GGUF_F32, std, 3, err)))
        return st;
    if (o->merge > 1)
        st = cr_gguf_writer_add_u32(w, "clip.vision.spatial_merge_size", (uint32_t)o->merge,
                                    err);
    return st;
}

static cr_status_t vec(rn_synth_vision_t *s, const char *name, uint64_t n, double mean,
                       double std, cr_err_t *err)
{
    return rn_synth_vision_add(s, name, CR_TYPE_F32, 1, &n, mean, std, err);
}

static cr_status_t mat(rn_synth_vision_t *s, const rn_synth_clip_opts_t *o, const char *name,
                       uint64_t cols, uint64_t rows, cr_err_t *err)
{
    uint64_t ne[2] = {cols, rows};
    return rn_synth_vision_add(s, name, o->type, 2, ne, 0, o->std, err);
}

static cr_status_t tensors(rn_synth_vision_t *s, const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    uint64_t D = (uint64_t)o->dim, F = (uint64_t)o->ffn, P = (uint64_t)o->patch_size;
    uint64_t patch_ne[4] = {P, P, 3, D};
    cr_status_t st;
    if ((st = rn_synth_vision_add(s, "v.patch_embd.weight", o->type, 4, patch_ne, 0, o->std,
                                  err)) ||
        (st = vec(s, "v.pre_ln.weight", D, 1, 0.1, err)))
        return st;
    for (int l = 0; l < o->n_layers && !st; l++) {
        char n[64];
#define NAME(what) (snprintf(n, sizeof n, "v.blk.%d.%s", l, what), n)
        if ((st = vec(s, NAME("ln1.weight"), D, 1, 0.1, err)) ||
            (st = mat(s, o, NAME("attn_q.weight"), D, D, err)) ||
            (st = mat(s, o, NAME("attn_k.weight"), D, D, err)) ||
            (st = mat(s, o, NAME("attn_v.weight"), D, D, err)) ||
            (st = mat(s, o, NAME("attn_out.weight"), D, D, err)) ||
            (st = vec(s, NAME("ln2.weight"), D, 1, 0.1, err)) ||
            (st = mat(s, o, NAME("ffn_gate.weight"), D, F, err)) ||
            (st = mat(s, o, NAME("ffn_up.weight"), D, F, err)))
            break;
        st = mat(s, o, NAME("ffn_down.weight"), F, D, err);
#undef NAME
    }
    uint64_t H = (uint64_t)o->proj_hidden, E = (uint64_t)o->n_embd;
    uint64_t mm = (uint64_t)o->merge * (uint64_t)o->merge;
    if (!st && o->merge > 1 && !(st = vec(s, "mm.input_norm.weight", D, 1, 0.1, err)))
        st = mat(s, o, "mm.patch_merger.weight", D * mm, D, err);
    if (!st && !(st = mat(s, o, "mm.1.weight", D, H, err)) &&
        !(st = vec(s, "mm.1.bias", H, 0, 0.1, err)) &&
        !(st = mat(s, o, "mm.2.weight", H, E, err)) &&
        !(st = vec(s, "mm.2.bias", E, 0, 0.1, err)))
        st = vec(s, "v.token_embd.img_break", E, 0, 0.5, err);
    return st;
}

cr_status_t rn_synth_pixtral_write(const rn_synth_clip_opts_t *o, const char *path,
                                   cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    rn_synth_vision_t s = {.w = cr_gguf_writer_new(), .seed = o->seed};
    if (!s.w)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    if (!(st = keys(s.w, o, err)) && !(st = tensors(&s, o, err)))
        st = cr_gguf_writer_write(s.w, path, err);
    cr_gguf_writer_destroy(&s.w);
    for (int i = 0; i < s.n; i++)
        free(s.data[i]);
    return st;
}
