/* synth_qwen2vl.c: synthetic Qwen2.5-VL vision projector files (see
 * synth.h, "qwen2.5-vl projectors"): llama.cpp's mmproj layout for
 * projector type "qwen2.5vl_merger", or the same numbers inside a
 * qwen25vl text model under Ollama's names and keys. Every tensor is
 * listed in one table (name, shape, distribution) and built in memory
 * before writing. */
#include "lib/vision_embedded.h"
#include "lib/prelude.h"
#include "tools/synth/synth.h"

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/cpu/quant.h"

void rn_synth_qwen2vl_defaults(rn_synth_qwen2vl_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->type = CR_TYPE_F32;
    o->patch_size = 14;
    o->dim = 64;
    o->n_heads = 4;
    o->ffn = 96;
    o->n_layers = 4;
    o->n_wa_pattern = 2;
    o->proj_hidden = 256;
    o->n_embd = 64;
    o->std = 0.1;
}

/* One tensor of the file: GGUF shape ne (ne[0] the row length), values
 * N(mean, std); matrices take the file's type, vectors are F32. */
typedef struct spec {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[4];
    double mean, std;
    bool matrix;
} spec_t;

#define MAX_SPECS 1024

static void put(spec_t *s, int *n, const char *name, uint32_t n_dims, uint64_t ne0,
                uint64_t ne1, uint64_t ne2, uint64_t ne3, double mean, double std, bool matrix)
{
    if (*n >= MAX_SPECS)
        return; /* check() bounds the layers well below this */
    spec_t *t = &s[(*n)++];
    *t = (spec_t){.n_dims = n_dims, .ne = {ne0, ne1, ne2, ne3}, .mean = mean, .std = std,
                  .matrix = matrix};
    snprintf(t->name, sizeof t->name, "%s", name);
}

/* The table of tensors, in llama.cpp's order: the two temporal frames of
 * the patch kernel, per block RMSNorm weights, q/k/v/out and the gated
 * MLP with biases, the merger's norm, mm.0 [H][4D] and mm.2 [E][H]; with
 * ollama, convert_qwen25vl.go's names for them (block names are the
 * same). */
static int specs(const rn_synth_qwen2vl_opts_t *o, bool ollama, spec_t *s)
{
    int n = 0;
    uint64_t D = (uint64_t)o->dim, F = (uint64_t)o->ffn, P = (uint64_t)o->patch_size;
    uint64_t H = (uint64_t)o->proj_hidden, E = (uint64_t)o->n_embd;
    put(s, &n, ollama ? "v.patch_embd_0.weight" : "v.patch_embd.weight", 4, P, P, 3, D, 0,
        o->std, true);
    put(s, &n, ollama ? "v.patch_embd_1.weight" : "v.patch_embd.weight.1", 4, P, P, 3, D, 0,
        o->std, true);
    for (int l = 0; l < o->n_layers && o->qwen2; l++) {
        /* Qwen2-VL: LayerNorms with biases, fc1 / fc2 as ffn_up / ffn_down */
        static const struct {
            const char *what;
            int rows, cols; /* 0: D, 1: F */
            bool matrix;
        } blk[] = {
            {"ln1.weight", -1, 0, false},    {"ln1.bias", -1, 0, false},
            {"attn_q.weight", 0, 0, true},   {"attn_q.bias", -1, 0, false},
            {"attn_k.weight", 0, 0, true},   {"attn_k.bias", -1, 0, false},
            {"attn_v.weight", 0, 0, true},   {"attn_v.bias", -1, 0, false},
            {"attn_out.weight", 0, 0, true}, {"attn_out.bias", -1, 0, false},
            {"ln2.weight", -1, 0, false},    {"ln2.bias", -1, 0, false},
            {"ffn_up.weight", 1, 0, true},   {"ffn_up.bias", -1, 1, false},
            {"ffn_down.weight", 0, 1, true}, {"ffn_down.bias", -1, 0, false},
        };
        for (size_t i = 0; i < CR_ARRAY_LEN(blk); i++) {
            char name[64];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, blk[i].what);
            uint64_t cols = blk[i].cols ? F : D;
            bool norm = strstr(blk[i].what, ".weight") && strstr(blk[i].what, "ln") == blk[i].what;
            if (blk[i].matrix)
                put(s, &n, name, 2, cols, blk[i].rows ? F : D, 1, 1, 0, o->std, true);
            else
                put(s, &n, name, 1, cols, 1, 1, 1, norm ? 1 : 0, 0.1, false);
        }
    }
    for (int l = 0; l < o->n_layers && !o->qwen2; l++) {
        static const struct {
            const char *what;
            int rows, cols; /* 0: D, 1: F */
            bool matrix;
        } blk[] = {
            {"ln1.weight", -1, 0, false},    {"attn_q.weight", 0, 0, true},
            {"attn_q.bias", -1, 0, false},   {"attn_k.weight", 0, 0, true},
            {"attn_k.bias", -1, 0, false},   {"attn_v.weight", 0, 0, true},
            {"attn_v.bias", -1, 0, false},   {"attn_out.weight", 0, 0, true},
            {"attn_out.bias", -1, 0, false}, {"ln2.weight", -1, 0, false},
            {"ffn_gate.weight", 1, 0, true}, {"ffn_gate.bias", -1, 1, false},
            {"ffn_up.weight", 1, 0, true},   {"ffn_up.bias", -1, 1, false},
            {"ffn_down.weight", 0, 1, true}, {"ffn_down.bias", -1, 0, false},
        };
        for (size_t i = 0; i < CR_ARRAY_LEN(blk); i++) {
            char name[64];
            snprintf(name, sizeof name, "v.blk.%d.%s", l, blk[i].what);
            uint64_t cols = blk[i].cols ? F : D;
            bool norm = strstr(blk[i].what, "ln") == blk[i].what;
            if (blk[i].matrix)
                put(s, &n, name, 2, cols, blk[i].rows ? F : D, 1, 1, 0, o->std, true);
            else
                put(s, &n, name, 1, cols, 1, 1, 1, norm ? 1 : 0, 0.1, false);
        }
    }
    put(s, &n, ollama ? "v.merger.ln_q.weight" : "v.post_ln.weight", 1, D, 1, 1, 1, 1, 0.1,
        false);
    if (o->qwen2)
        put(s, &n, "v.post_ln.bias", 1, D, 1, 1, 1, 0, 0.1, false);
    put(s, &n, ollama ? "v.merger.mlp.0.weight" : "mm.0.weight", 2, 4 * D, H, 1, 1, 0,
        o->std, true);
    put(s, &n, ollama ? "v.merger.mlp.0.bias" : "mm.0.bias", 1, H, 1, 1, 1, 0, 0.1, false);
    put(s, &n, ollama ? "v.merger.mlp.2.weight" : "mm.2.weight", 2, H, E, 1, 1, 0, o->std,
        true);
    put(s, &n, ollama ? "v.merger.mlp.2.bias" : "mm.2.bias", 1, E, 1, 1, 1, 0, 0.1, false);
    return n;
}

static cr_status_t check(const rn_synth_qwen2vl_opts_t *o, cr_err_t *err)
{
    if (o->type != CR_TYPE_F32 && o->type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_INVALID, "projector matrices must be f32 or f16");
    if (o->patch_size < 1 || o->patch_size > 64 || o->dim < 1 || o->n_heads < 1 ||
        o->dim % o->n_heads || (o->dim / o->n_heads) % 4 || o->ffn < 1 ||
        o->n_layers < 1 || o->n_layers > 48 || o->n_wa_pattern < 0 ||
        o->proj_hidden < 1 || o->n_embd < 1 || o->dim > 4096 || o->ffn > 16384 ||
        o->proj_hidden > 16384 || o->n_embd > 16384)
        return cr_err_set(err, CR_E_INVALID, "bad projector shape (patch %d, dim %d, heads "
                          "%d with head size a multiple of 4, ffn %d, layers %d in 1..48, "
                          "hidden %d, n_embd %d)", o->patch_size, o->dim, o->n_heads, o->ffn,
                          o->n_layers, o->proj_hidden, o->n_embd);
    return CR_OK;
}

static cr_status_t keys(cr_gguf_writer_t *w, const rn_synth_qwen2vl_opts_t *o, cr_err_t *err)
{
    /* Qwen2.5-VL's preprocessor_config has OpenAI CLIP's mean and std */
    cr_status_t st;
    if ((st = cr_gguf_writer_add_str(w, "general.architecture", "clip", err)) ||
        (st = cr_gguf_writer_add_str(w, "general.name", "synth-qwen2.5vl-projector", err)) ||
        (st = cr_gguf_writer_add_u32(w, "general.file_type",
                                     o->type == CR_TYPE_F16 ? 1 : 0, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_text_encoder", false, err)) ||
        (st = cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, err)) ||
        (st = cr_gguf_writer_add_str(w, "clip.projector_type",
                                     o->qwen2 ? "qwen2vl_merger" : "qwen2.5vl_merger", err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.image_size", 560, err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.patch_size", (uint32_t)o->patch_size,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.embedding_length", (uint32_t)o->dim,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.feed_forward_length", (uint32_t)o->ffn,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.projection_dim", (uint32_t)o->n_embd,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.attention.head_count",
                                     (uint32_t)o->n_heads, err)) ||
        (st = cr_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f,
                                     err)) ||
        (st = cr_gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)o->n_layers,
                                     err)) ||
        (st = cr_gguf_writer_add_arr(w, "clip.vision.image_mean", CR_GGUF_F32, cr_vision_clip_mean, 3, err)))
        return st;
    /* Qwen2-VL: quick GELU (no use_* key), no window pattern */
    if (!o->qwen2 &&
        ((st = cr_gguf_writer_add_bool(w, "clip.use_silu", true, err)) ||
         (st = cr_gguf_writer_add_u32(w, "clip.vision.n_wa_pattern", (uint32_t)o->n_wa_pattern,
                                      err))))
        return st;
    return cr_gguf_writer_add_arr(w, "clip.vision.image_std", CR_GGUF_F32, cr_vision_clip_std, 3, err);
}

/* The tower's tensors, drawn into data[MAX_SPECS] (freed by the caller,
 * borrowed by w until written), under the layout's names. */
static cr_status_t add_tensors(const rn_synth_qwen2vl_opts_t *o, bool ollama,
                               cr_gguf_writer_t *w, void **data, cr_err_t *err)
{
    spec_t *s = calloc(MAX_SPECS, sizeof *s);
    if (!s)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    int n = specs(o, ollama, s);
    cr_status_t st = CR_OK;
    for (int i = 0; i < n && !st; i++) {
        size_t cnt = 1;
        for (uint32_t d = 0; d < s[i].n_dims; d++)
            cnt *= (size_t)s[i].ne[d];
        cr_type_t type = s[i].matrix ? o->type : CR_TYPE_F32;
        float *f = malloc(cnt * sizeof *f);
        data[i] = type == CR_TYPE_F32 ? (void *)f : malloc(cnt * 2);
        if (!f || !data[i]) {
            if (data[i] != f)
                free(f);
            st = cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
            break;
        }
        rn_synth_fill_normal(o->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)), f, cnt,
                             s[i].mean, s[i].std);
        if (type != CR_TYPE_F32) {
            be_type_traits_at(type, BE_SIMD_SCALAR)->from_float(f, data[i], (int64_t)cnt);
            free(f);
        }
        st = cr_gguf_writer_add_tensor(w, s[i].name, s[i].n_dims, s[i].ne, type, data[i],
                                       NULL, err);
    }
    free(s);
    return st;
}

cr_status_t rn_synth_qwen2vl_write(const rn_synth_qwen2vl_opts_t *o, const char *path,
                                   cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    void **data = calloc(MAX_SPECS, sizeof *data);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    if (!data || !w)
        st = cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    if (!st && !(st = keys(w, o, err)) && !(st = add_tensors(o, false, w, data, err)))
        st = cr_gguf_writer_write(w, path, err);
    cr_gguf_writer_destroy(&w);
    for (int i = 0; data && i < MAX_SPECS; i++)
        free(data[i]);
    free(data);
    return st;
}

/* The text model's KVs as Ollama's converter names them: architecture
 * "qwen25vl", qwen2vl.* as qwen25vl.*, rope.dimension_sections' first
 * three counts as rope.mrope_section (Hugging Face's mrope_section), and
 * none of the keys its qwen2 KV never writes (the readers' defaults,
 * head_dim and dim / heads, give the same values). */
static cr_status_t ollama_text_keys(cr_gguf_writer_t *w, const cr_gguf_t *g, cr_err_t *err)
{
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < cr_gguf_kv_count(g) && !st; i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        char key[160];
        snprintf(key, sizeof key, "%.*s", (int)CR_MIN(kv->key.len, 150), kv->key.ptr);
        if (!strcmp(key, "qwen2vl.rope.dimension_count") ||
            !strcmp(key, "qwen2vl.attention.key_length") ||
            !strcmp(key, "qwen2vl.attention.value_length") ||
            !strcmp(key, "qwen2vl.vocab_size"))
            continue;
        if (!strcmp(key, "general.architecture")) {
            st = cr_gguf_writer_add_str(w, key, "qwen25vl", err);
        } else if (!strcmp(key, "qwen2vl.rope.dimension_sections")) {
            int32_t sec[3] = {0, 0, 0};
            for (uint64_t k = 0; k < 3 && k < kv->v.arr.n; k++) {
                int64_t v = 0;
                cr_gguf_arr_get_i64(&kv->v.arr, k, &v);
                sec[k] = (int32_t)v;
            }
            st = cr_gguf_writer_add_arr(w, "qwen25vl.rope.mrope_section", CR_GGUF_I32, sec, 3,
                                        err);
        } else if (!strncmp(key, "qwen2vl.", 8)) {
            char renamed[170];
            snprintf(renamed, sizeof renamed, "qwen25vl.%s", key + 8);
            cr_gguf_kv_t copy = *kv;
            copy.key = (cr_gguf_str_t){renamed, strlen(renamed)};
            st = cr_gguf_writer_copy_kv(w, &copy, err);
        } else {
            st = cr_gguf_writer_copy_kv(w, kv, err);
        }
    }
    return st;
}

/* convert_qwen25vl.go's vision keys (fullatt_block_indexes: the blocks
 * llama.cpp's n_wa_pattern makes full; empty when every block is). */
static cr_status_t ollama_vision_keys(cr_gguf_writer_t *w, const rn_synth_qwen2vl_opts_t *o,
                                      cr_err_t *err)
{
    const struct {
        const char *key;
        int v;
    } u[] = {
        {"qwen25vl.vision.block_count", o->n_layers},
        {"qwen25vl.vision.embedding_length", o->dim},
        {"qwen25vl.vision.attention.head_count", o->n_heads},
        {"qwen25vl.vision.num_channels", 3},
        {"qwen25vl.vision.patch_size", o->patch_size},
        {"qwen25vl.vision.spatial_merge_size", 2},
        {"qwen25vl.vision.spatial_patch_size", o->patch_size},
        {"qwen25vl.vision.window_size", 112},
        {"qwen25vl.vision.temporal_patch_size", 2},
    };
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < CR_ARRAY_LEN(u) && !st; i++)
        st = cr_gguf_writer_add_u32(w, u[i].key, (uint32_t)u[i].v, err);
    int32_t full[64];
    uint64_t n = 0;
    for (int l = 0; l < o->n_layers && n < 64; l++)
        if (o->n_wa_pattern == 0 || (l + 1) % o->n_wa_pattern == 0)
            full[n++] = l;
    if (!st)
        st = cr_gguf_writer_add_arr(w, "qwen25vl.vision.fullatt_block_indexes", CR_GGUF_I32,
                                    full, n, err);
    if (!st)
        st = cr_gguf_writer_add_f32(w, "qwen25vl.vision.attention.layer_norm_epsilon", 1e-6f,
                                    err);
    return st ? st : cr_gguf_writer_add_f32(w, "qwen25vl.vision.rope.freq_base", 10000.0f, err);
}

cr_status_t rn_synth_qwen2vl_embed(const rn_synth_qwen2vl_opts_t *o, const char *text_path,
                                   const char *path, cr_err_t *err)
{
    cr_status_t st = check(o, err);
    if (st)
        return st;
    if (o->qwen2)
        return cr_err_set(err, CR_E_INVALID, "Ollama's single file is Qwen2.5-VL's only");
    cr_gguf_t *g = NULL;
    if ((st = cr_gguf_open(text_path, &g, err)))
        return st;
    uint32_t dim = 0;
    if (strcmp(cr_gguf_arch(g), "qwen2vl") ||
        !cr_gguf_get_u32(g, "qwen2vl.embedding_length", &dim) || dim != (uint32_t)o->n_embd) {
        cr_gguf_close(&g);
        return cr_err_set(err, CR_E_INVALID, "%s: not a qwen2vl model %d wide", text_path,
                          o->n_embd);
    }
    void **data = calloc(MAX_SPECS, sizeof *data);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    if (!data || !w)
        st = cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    if (!st && !(st = ollama_text_keys(w, g, err)))
        st = ollama_vision_keys(w, o, err);
    /* the text model's tensors as they are (g stays open until the write) */
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                       err);
    }
    if (!st && !(st = add_tensors(o, true, w, data, err)))
        st = cr_gguf_writer_write(w, path, err);
    cr_gguf_writer_destroy(&w);
    for (int i = 0; data && i < MAX_SPECS; i++)
        free(data[i]);
    free(data);
    cr_gguf_close(&g);
    return st;
}
