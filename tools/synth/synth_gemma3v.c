/* synth_gemma3v.c: synthetic gemma3 vision towers and projectors, as an
 * mmproj file or inside a gemma3 text model (see synth.h, "gemma3's vision
 * side"). Every tensor's values come from (seed, its place in one fixed
 * list), so both layouts hold the same numbers under their own names. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/cpu/quant.h"

#define MAX_TENSORS 2048

void rn_synth_gemma3v_defaults(rn_synth_gemma3v_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->type = CR_TYPE_F32;
    o->image_size = 224;
    o->patch_size = 14;
    o->dim = 64;
    o->n_heads = 4;
    o->ffn = 160;
    o->n_layers = 3;
    o->merge = 4;
    o->n_embd = 64;
    o->std = 0.1;
}

typedef struct gsynth {
    cr_gguf_writer_t *w;
    void *data[MAX_TENSORS]; /* borrowed by the writer until written */
    int n;
    uint64_t seed;
    bool ollama;             /* Ollama's names, else llama.cpp's */
} gsynth_t;

/* Tensor number s->n (its values' seed) of GGUF shape ne, N(mean, std). */
static cr_status_t add(gsynth_t *s, const char *name, cr_type_t type, uint32_t n_dims,
                       const uint64_t *ne, double mean, double std, cr_err_t *err)
{
    if (s->n == MAX_TENSORS)
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

static cr_status_t check(const rn_synth_gemma3v_opts_t *o, cr_err_t *err)
{
    if (o->type != CR_TYPE_F32 && o->type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_INVALID, "tower matrices must be f32 or f16");
    if (o->patch_size < 1 || o->image_size < o->patch_size ||
        o->image_size % o->patch_size || o->image_size > 1024)
        return cr_err_set(err, CR_E_INVALID, "image size %d must be a multiple of patch "
                          "size %d (at most 1024)", o->image_size, o->patch_size);
    int side = o->image_size / o->patch_size;
    if (o->merge < 1 || side % o->merge)
        return cr_err_set(err, CR_E_INVALID, "merge %d must divide the %d patches per side",
                          o->merge, side);
    if (o->dim < 1 || o->n_heads < 1 || o->dim % o->n_heads || o->ffn < 1 ||
        o->n_layers < 1 || o->n_layers > 64 || o->n_embd < 1 || o->dim > 4096 ||
        o->ffn > 16384 || o->n_embd > 16384)
        return cr_err_set(err, CR_E_INVALID, "bad tower shape (dim %d, heads %d, ffn %d, "
                          "layers %d, n_embd %d)", o->dim, o->n_heads, o->ffn, o->n_layers,
                          o->n_embd);
    return CR_OK;
}

/* The tower and projector, in the fixed order, under s's names. */
static cr_status_t tensors(gsynth_t *s, const rn_synth_gemma3v_opts_t *o, cr_err_t *err)
{
    uint64_t D = (uint64_t)o->dim, F = (uint64_t)o->ffn, P = (uint64_t)o->patch_size;
    uint64_t side = (uint64_t)(o->image_size / o->patch_size), E = (uint64_t)o->n_embd;
    uint64_t patch_ne[4] = {P, P, 3, D}, pos_ne[2] = {D, side * side};
    uint64_t dd[2] = {D, D}, up_ne[2] = {D, F}, down_ne[2] = {F, D}, proj_ne[2] = {E, D};
    bool ol = s->ollama;
    cr_status_t st;
    if ((st = add(s, ol ? "v.patch_embedding.weight" : "v.patch_embd.weight", o->type, 4,
                  patch_ne, 0, o->std, err)) ||
        (st = add(s, ol ? "v.patch_embedding.bias" : "v.patch_embd.bias", CR_TYPE_F32, 1, &D,
                  0, 0.1, err)) ||
        (st = add(s, ol ? "v.position_embedding.weight" : "v.position_embd.weight",
                  CR_TYPE_F32, 2, pos_ne, 0, 0.5, err)))
        return st;
    /* per block: name (mmproj, Ollama), shape, mean, std, matrix */
    const struct {
        const char *mm, *ol;
        const uint64_t *ne;
        uint32_t n_dims;
        double mean, std;
        bool mat;
    } parts[] = {
        {"ln1.weight", "layer_norm1.weight", &D, 1, 1, 0.1, false},
        {"ln1.bias", "layer_norm1.bias", &D, 1, 0, 0.1, false},
        {"attn_q.weight", "attn_q.weight", dd, 2, 0, 0, true},
        {"attn_q.bias", "attn_q.bias", &D, 1, 0, 0.1, false},
        {"attn_k.weight", "attn_k.weight", dd, 2, 0, 0, true},
        {"attn_k.bias", "attn_k.bias", &D, 1, 0, 0.1, false},
        {"attn_v.weight", "attn_v.weight", dd, 2, 0, 0, true},
        {"attn_v.bias", "attn_v.bias", &D, 1, 0, 0.1, false},
        {"attn_out.weight", "attn_output.weight", dd, 2, 0, 0, true},
        {"attn_out.bias", "attn_output.bias", &D, 1, 0, 0.1, false},
        {"ln2.weight", "layer_norm2.weight", &D, 1, 1, 0.1, false},
        {"ln2.bias", "layer_norm2.bias", &D, 1, 0, 0.1, false},
        {"ffn_up.weight", "mlp.fc1.weight", up_ne, 2, 0, 0, true},
        {"ffn_up.bias", "mlp.fc1.bias", &F, 1, 0, 0.1, false},
        {"ffn_down.weight", "mlp.fc2.weight", down_ne, 2, 0, 0, true},
        {"ffn_down.bias", "mlp.fc2.bias", &D, 1, 0, 0.1, false},
    };
    for (int l = 0; l < o->n_layers; l++)
        for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
            char name[96];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, ol ? parts[i].ol : parts[i].mm);
            if ((st = add(s, name, parts[i].mat ? o->type : CR_TYPE_F32, parts[i].n_dims,
                          parts[i].ne, parts[i].mean, parts[i].mat ? o->std : parts[i].std,
                          err)))
                return st;
        }
    if ((st = add(s, ol ? "v.post_layernorm.weight" : "v.post_ln.weight", CR_TYPE_F32, 1, &D,
                  1, 0.1, err)) ||
        (st = add(s, ol ? "v.post_layernorm.bias" : "v.post_ln.bias", CR_TYPE_F32, 1, &D, 0,
                  0.1, err)) ||
        (st = add(s, ol ? "mm.mm_soft_emb_norm.weight" : "mm.soft_emb_norm.weight",
                  CR_TYPE_F32, 1, &D, 1, 0.1, err)))
        return st;
    return add(s, ol ? "mm.mm_input_projection.weight" : "mm.input_projection.weight",
               o->type, 2, proj_ne, 0, o->std, err);
}

/* The tower's keys under prefix ("clip.vision." or "gemma3.vision."). */
static cr_status_t tower_keys(cr_gguf_writer_t *w, const char *prefix,
                              const rn_synth_gemma3v_opts_t *o, cr_err_t *err)
{
    const struct {
        const char *key;
        int v;
    } u[] = {
        {"image_size", o->image_size},     {"patch_size", o->patch_size},
        {"embedding_length", o->dim},      {"feed_forward_length", o->ffn},
        {"attention.head_count", o->n_heads}, {"block_count", o->n_layers},
    };
    char key[128];
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < CR_ARRAY_LEN(u) && !st; i++) {
        snprintf(key, sizeof key, "%s%s", prefix, u[i].key);
        st = cr_gguf_writer_add_u32(w, key, (uint32_t)u[i].v, err);
    }
    snprintf(key, sizeof key, "%sattention.layer_norm_epsilon", prefix);
    return st ? st : cr_gguf_writer_add_f32(w, key, 1e-6f, err);
}

static cr_status_t finish(gsynth_t *s, const char *path, cr_err_t *err)
{
    cr_status_t st = cr_gguf_writer_write(s->w, path, err);
    cr_gguf_writer_destroy(&s->w);
    for (int i = 0; i < s->n; i++)
        free(s->data[i]);
    return st;
}

cr_status_t rn_synth_gemma3v_write(const rn_synth_gemma3v_opts_t *o, const char *path,
                                   cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    static const float half[3] = {0.5f, 0.5f, 0.5f};
    gsynth_t s = {.w = cr_gguf_writer_new(), .seed = o->seed};
    if (!s.w)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    cr_gguf_writer_t *w = s.w;
    if ((st = cr_gguf_writer_add_str(w, "general.architecture", "clip", err)) ||
        (st = cr_gguf_writer_add_str(w, "general.name", "synth-gemma3-projector", err)) ||
        (st = cr_gguf_writer_add_u32(w, "general.file_type",
                                     o->type == CR_TYPE_F16 ? 1 : 0, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_text_encoder", false, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, err)) ||
        (st = cr_gguf_writer_add_str(w, "clip.projector_type", "gemma3", err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.use_gelu", true, err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.projection_dim", (uint32_t)o->n_embd,
                                     err)) ||
        (st = tower_keys(w, "clip.vision.", o, err)) ||
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_mean", CR_GGUF_F32, half, 3, err)) ||
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_std", CR_GGUF_F32, half, 3, err)))
        goto out;
    if (o->merge != 4 &&
        (st = cr_gguf_writer_add_u32(w, "clip.vision.projector.scale_factor",
                                     (uint32_t)o->merge, err)))
        goto out;
    st = tensors(&s, o, err);
out:
    if (st) {
        cr_gguf_writer_destroy(&s.w);
        for (int i = 0; i < s.n; i++)
            free(s.data[i]);
        return st;
    }
    return finish(&s, path, err);
}

cr_status_t rn_synth_gemma3v_embed(const rn_synth_gemma3v_opts_t *o, const char *text_path,
                                   const char *path, cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    cr_gguf_t *g = NULL;
    if ((st = cr_gguf_open(text_path, &g, err)))
        return st;
    uint32_t dim = 0;
    if (strcmp(cr_gguf_arch(g), "gemma3") ||
        !cr_gguf_get_u32(g, "gemma3.embedding_length", &dim) || dim != (uint32_t)o->n_embd) {
        cr_gguf_close(&g);
        return cr_err_set(err, CR_E_INVALID, "%s: not a gemma3 model %d wide", text_path,
                          o->n_embd);
    }
    gsynth_t s = {.w = cr_gguf_writer_new(), .seed = o->seed, .ollama = true};
    if (!s.w) {
        cr_gguf_close(&g);
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    }
    int side = o->image_size / o->patch_size / o->merge;
    if (!(st = cr_gguf_writer_copy_prefix(s.w, g, "", err)) &&
        !(st = tower_keys(s.w, "gemma3.vision.", o, err)) &&
        !(st = cr_gguf_writer_add_u32(s.w, "gemma3.vision.num_channels", 3, err)) &&
        !(st = cr_gguf_writer_add_u32(s.w, "gemma3.mm.tokens_per_image",
                                      (uint32_t)(side * side), err))) {
        /* the text model's tensors first, as they are (g stays open until
         * the write: the writer borrows their bytes) */
        for (size_t i = 0; i < cr_gguf_tensor_count(g) && !st; i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            st = cr_gguf_writer_add_tensor(s.w, t->name, t->n_dims, t->ne, t->type, t->data,
                                           NULL, err);
        }
    }
    if (!st)
        st = tensors(&s, o, err);
    if (st) {
        cr_gguf_writer_destroy(&s.w);
        for (int i = 0; i < s.n; i++)
            free(s.data[i]);
    } else {
        st = finish(&s, path, err);
    }
    cr_gguf_close(&g);
    return st;
}
