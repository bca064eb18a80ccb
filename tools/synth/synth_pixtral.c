/* synth_pixtral.c: synthetic Pixtral / Mistral Small 3.x vision towers
 * (see synth.h, "vision projectors"): llama.cpp's mmproj layout for
 * clip.projector_type "pixtral", or the same numbers inside a mistral3
 * text model under Ollama's names and keys (convert_mistral.go: the q/k
 * rows in Hugging Face's order, no [IMG_BREAK] tensor). Every tensor's
 * values come from (seed, its place in one fixed list). */
#include "lib/vision_embedded.h"
#include "lib/prelude.h"
#include "tools/synth/synth.h"
#include "tools/synth/synth_vision.h"

#include "lib/gguf.h"
#include "services/runner/backend/cpu/quant.h"

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
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_mean", CR_GGUF_F32, cr_vision_clip_mean, 3, err)) ||
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_std", CR_GGUF_F32, cr_vision_clip_std, 3, err)))
        return st;
    if (o->merge > 1)
        st = cr_gguf_writer_add_u32(w, "clip.vision.spatial_merge_size", (uint32_t)o->merge,
                                    err);
    return st;
}

/* Ollama's keys (convert_mistral.go's KV; layer_norm_epsilon left out as
 * it does, its reader's default 1e-5 being the mmproj's value). */
static cr_status_t ollama_keys(cr_gguf_writer_t *w, const rn_synth_clip_opts_t *o,
                               cr_err_t *err)
{
    const struct {
        const char *key;
        int v;
    } u[] = {
        {"mistral3.vision.block_count", o->n_layers},
        {"mistral3.vision.embedding_length", o->dim},
        {"mistral3.vision.feed_forward_length", o->ffn},
        {"mistral3.vision.attention.head_count", o->n_heads},
        {"mistral3.vision.attention.key_length", o->dim / o->n_heads},
        {"mistral3.vision.image_size", o->image_size},
        {"mistral3.vision.patch_size", o->patch_size},
        {"mistral3.vision.num_channels", 3},
        {"mistral3.spatial_merge_size", o->merge},
        {"mistral3.image_token_index", 10},
    };
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < CR_ARRAY_LEN(u) && !st; i++)
        st = cr_gguf_writer_add_u32(w, u[i].key, (uint32_t)u[i].v, err);
    if (!st)
        st = cr_gguf_writer_add_f32(w, "mistral3.vision.rope.freq_base", 10000.0f, err);
    return st ? st : cr_gguf_writer_add_bool(w, "mistral3.mm.projector_bias", true, err);
}

typedef struct psynth {
    rn_synth_vision_t v;     /* writer, data, seed, tensor count */
    bool ollama;             /* Ollama's names, else llama.cpp's */
    int head_dim;            /* Ollama's q/k: rows back in HF order */
} psynth_t;

/* Tensor number s->v.n of GGUF shape ne, N(mean, std), as
 * rn_synth_vision_add draws it; hf_rows: a [D][D] q or k whose rows go
 * back from llama.cpp's rope pairs (2i, 2i + 1) to Hugging Face's halves
 * (i, i + hd/2), the order Ollama's converter keeps. */
static cr_status_t add(psynth_t *s, const char *name, cr_type_t type, uint32_t n_dims,
                       const uint64_t *ne, double mean, double std, bool hf_rows,
                       cr_err_t *err)
{
    rn_synth_vision_t *v = &s->v;
    if (v->n == RN_SYNTH_VISION_MAX_TENSORS)
        return cr_err_set(err, CR_E_INTERNAL, "synth: too many tensors");
    size_t n = 1;
    for (uint32_t i = 0; i < n_dims; i++)
        n *= (size_t)ne[i];
    float *f = malloc(n * sizeof *f), *g = hf_rows ? malloc(n * sizeof *g) : NULL;
    void *data = type == CR_TYPE_F32 ? (void *)f : malloc(n * 2);
    if (!f || !data || (hf_rows && !g)) {
        free(f);
        free(g);
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    }
    rn_synth_fill_normal(v->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(v->n + 1)), f, n,
                         mean, std);
    if (hf_rows) {
        size_t cols = (size_t)ne[0], hd = (size_t)s->head_dim;
        for (size_t r = 0; r < (size_t)ne[1]; r++) {
            size_t h = r / hd, i = r % hd / 2, j = r % 2; /* llama row r */
            memcpy(g + (h * hd + j * (hd / 2) + i) * cols, f + r * cols, cols * sizeof *f);
        }
        memcpy(f, g, n * sizeof *f);
        free(g);
    }
    if (type != CR_TYPE_F32) {
        be_type_traits_at(type, BE_SIMD_SCALAR)->from_float(f, data, (int64_t)n);
        free(f);
    }
    v->data[v->n++] = data;
    return cr_gguf_writer_add_tensor(v->w, name, n_dims, ne, type, data, NULL, err);
}

/* The tower and projector in the fixed order, under s's names. */
static cr_status_t tensors(psynth_t *s, const rn_synth_clip_opts_t *o, cr_err_t *err)
{
    uint64_t D = (uint64_t)o->dim, F = (uint64_t)o->ffn, P = (uint64_t)o->patch_size;
    uint64_t patch_ne[4] = {P, P, 3, D}, dd[2] = {D, D}, up[2] = {D, F}, down[2] = {F, D};
    bool ol = s->ollama;
    cr_status_t st;
    if ((st = add(s, ol ? "v.patch_conv.weight" : "v.patch_embd.weight", o->type, 4, patch_ne,
                  0, o->std, false, err)) ||
        (st = add(s, ol ? "v.encoder_norm.weight" : "v.pre_ln.weight", CR_TYPE_F32, 1, &D, 1,
                  0.1, false, err)))
        return st;
    /* per block: name (mmproj, Ollama), shape, matrix, q/k */
    const struct {
        const char *mm, *ol;
        const uint64_t *ne;
        bool mat, rope;
    } parts[] = {
        {"ln1.weight", "attn_norm.weight", &D, false, false},
        {"attn_q.weight", "attn_q.weight", dd, true, true},
        {"attn_k.weight", "attn_k.weight", dd, true, true},
        {"attn_v.weight", "attn_v.weight", dd, true, false},
        {"attn_out.weight", "attn_output.weight", dd, true, false},
        {"ln2.weight", "ffn_norm.weight", &D, false, false},
        {"ffn_gate.weight", "ffn_gate.weight", up, true, false},
        {"ffn_up.weight", "ffn_up.weight", up, true, false},
        {"ffn_down.weight", "ffn_down.weight", down, true, false},
    };
    for (int l = 0; l < o->n_layers; l++)
        for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
            char name[96];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, ol ? parts[i].ol : parts[i].mm);
            if ((st = parts[i].mat
                          ? add(s, name, o->type, 2, parts[i].ne, 0, o->std,
                                ol && parts[i].rope, err)
                          : add(s, name, CR_TYPE_F32, 1, parts[i].ne, 1, 0.1, false, err)))
                return st;
        }
    uint64_t H = (uint64_t)o->proj_hidden, E = (uint64_t)o->n_embd;
    uint64_t merge_ne[2] = {D * (uint64_t)o->merge * (uint64_t)o->merge, D};
    uint64_t mm1[2] = {D, H}, mm2[2] = {H, E};
    if (o->merge > 1 &&
        ((st = add(s, ol ? "mm.norm.weight" : "mm.input_norm.weight", CR_TYPE_F32, 1, &D, 1,
                   0.1, false, err)) ||
         (st = add(s, ol ? "mm.patch_merger.merging_layer.weight" : "mm.patch_merger.weight",
                   o->type, 2, merge_ne, 0, o->std, false, err))))
        return st;
    if ((st = add(s, ol ? "mm.linear_1.weight" : "mm.1.weight", o->type, 2, mm1, 0, o->std,
                  false, err)) ||
        (st = add(s, ol ? "mm.linear_1.bias" : "mm.1.bias", CR_TYPE_F32, 1, &H, 0, 0.1, false,
                  err)) ||
        (st = add(s, ol ? "mm.linear_2.weight" : "mm.2.weight", o->type, 2, mm2, 0, o->std,
                  false, err)))
        return st;
    return add(s, ol ? "mm.linear_2.bias" : "mm.2.bias", CR_TYPE_F32, 1, &E, 0, 0.1, false,
               err);
}

/* The F32 row of token_embd.weight for [IMG_BREAK] in the text model g
 * into *row (caller frees). */
static cr_status_t break_row(const cr_gguf_t *g, int n_embd, float **row, cr_err_t *err)
{
    const cr_gguf_array_t *a = NULL;
    int64_t id = -1;
    if (cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &a) && a->strs)
        for (uint64_t i = 0; i < a->n && id < 0; i++)
            if (cr_gguf_str_eq(a->strs[i], "[IMG_BREAK]"))
                id = (int64_t)i;
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "token_embd.weight");
    if (id < 0 || !t || t->type != CR_TYPE_F32 || t->ne[0] != (uint64_t)n_embd ||
        (uint64_t)id >= t->ne[1])
        return cr_err_set(err, CR_E_INVALID, "synth: the text model needs [IMG_BREAK] in its "
                          "vocabulary and an F32 token_embd %d wide", n_embd);
    if (!(*row = malloc((size_t)n_embd * sizeof **row)))
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    memcpy(*row, (const float *)t->data + (size_t)id * (size_t)n_embd,
           (size_t)n_embd * sizeof **row);
    return CR_OK;
}

static void discard(psynth_t *s)
{
    cr_gguf_writer_destroy(&s->v.w);
    for (int i = 0; i < s->v.n; i++)
        free(s->v.data[i]);
}

cr_status_t rn_synth_pixtral_write(const rn_synth_clip_opts_t *o, const char *path,
                                   cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    psynth_t s = {.v = {.w = cr_gguf_writer_new(), .seed = o->seed}};
    if (!s.v.w)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    cr_gguf_t *text = NULL;
    float *brk = NULL;
    if (!(st = keys(s.v.w, o, err)) && !(st = tensors(&s, o, err))) {
        uint64_t E = (uint64_t)o->n_embd;
        if (!o->break_from) {
            st = add(&s, "v.token_embd.img_break", CR_TYPE_F32, 1, &E, 0, 0.5, false, err);
        } else if (!(st = cr_gguf_open(o->break_from, &text, err)) &&
                   !(st = break_row(text, o->n_embd, &brk, err))) {
            /* llama.cpp's converter copies the text model's row */
            st = cr_gguf_writer_add_tensor(s.v.w, "v.token_embd.img_break", 1, &E,
                                           CR_TYPE_F32, brk, NULL, err);
        }
    }
    if (!st)
        st = cr_gguf_writer_write(s.v.w, path, err);
    discard(&s);
    free(brk);
    cr_gguf_close(&text);
    return st;
}

cr_status_t rn_synth_pixtral_embed(const rn_synth_clip_opts_t *o, const char *text_path,
                                   const char *path, cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    cr_gguf_t *g = NULL;
    if ((st = cr_gguf_open(text_path, &g, err)))
        return st;
    uint32_t dim = 0;
    float *brk = NULL;
    if (strcmp(cr_gguf_arch(g), "mistral3") ||
        !cr_gguf_get_u32(g, "mistral3.embedding_length", &dim) || dim != (uint32_t)o->n_embd) {
        cr_gguf_close(&g);
        return cr_err_set(err, CR_E_INVALID, "%s: not a mistral3 model %d wide", text_path,
                          o->n_embd);
    }
    if ((st = break_row(g, o->n_embd, &brk, err))) { /* the runner reads it there */
        cr_gguf_close(&g);
        return st;
    }
    free(brk);
    psynth_t s = {.v = {.w = cr_gguf_writer_new(), .seed = o->seed}, .ollama = true,
                  .head_dim = o->dim / o->n_heads};
    if (!s.v.w) {
        cr_gguf_close(&g);
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    }
    if (!(st = cr_gguf_writer_copy_prefix(s.v.w, g, "", err)) &&
        !(st = ollama_keys(s.v.w, o, err))) {
        /* the text model's tensors first, as they are (g stays open until
         * the write: the writer borrows their bytes) */
        for (size_t i = 0; i < cr_gguf_tensor_count(g) && !st; i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            st = cr_gguf_writer_add_tensor(s.v.w, t->name, t->n_dims, t->ne, t->type, t->data,
                                           NULL, err);
        }
    }
    if (!st)
        st = tensors(&s, o, err);
    if (!st)
        st = cr_gguf_writer_write(s.v.w, path, err);
    discard(&s);
    cr_gguf_close(&g);
    return st;
}
