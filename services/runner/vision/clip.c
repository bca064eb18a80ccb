/* clip.c: loading a llava-style projector file and running its tower (see
 * clip.h).
 *
 * Shapes below: P = patch_size, S = image_size, N = n_patches, T = n_pos
 * (N, +1 with a class embedding), D = dim, F = ffn, H = proj_hidden,
 * E = n_embd (the text model's). Weights are [rows][cols] as model.h
 * describes them (GGUF ne[1] x ne[0]). */
#include "lib/prelude.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/vops.h"

#include <math.h>

#include "lib/gguf.h"
#include "services/runner/vision/preprocess.h"
#include "services/runner/vision/proj_gemma3.h"
#include "services/runner/vision/qwen2vl.h"

/* Projector types with a tower of their own file. */
#define PROJ_QWEN25VL "qwen2.5vl_merger"
#define PROJ_QWEN2VL "qwen2vl_merger"

typedef struct clip_layer {
    be_weight_t ln1, ln1_b;       /* [D] */
    be_weight_t wq, wk, wv, wo;   /* [D][D] */
    be_weight_t bq, bk, bv, bo;   /* [D] */
    be_weight_t ln2, ln2_b;       /* [D] */
    be_weight_t up, up_b;         /* [F][D], [F] */
    be_weight_t down, down_b;     /* [D][F], [D] */
} clip_layer_t;

struct rn_clip {
    rn_clip_hparams_t hp;
    cr_gguf_t *g;
    be_backend_t *be;
    const be_ops_ext_t *ext;
    uint64_t weight_bytes;
    rn_clip_qwen2vl_t *qwen; /* a qwen2.5-vl tower (the rest unused) */

    be_weight_t patch, patch_b;   /* [D][3*P*P] (c, ky, kx), [D] or none */
    be_weight_t cls;              /* [1][D] or none */
    be_weight_t pos;              /* [T][D] */
    be_weight_t pre_ln, pre_ln_b; /* [D] or none */
    be_weight_t post_ln, post_ln_b;
    clip_layer_t *layers;         /* [n_layers_run] */
    be_weight_t mm0, mm0_b;       /* [H][D], [H] */
    be_weight_t mm2, mm2_b;       /* [E][H], [E] or none (then E = H) */

    /* Backend buffers, sized at load. */
    float *x, *xb, *q, *k, *v, *att, *hb; /* [T][D] each, hb [T][F] */
    float *ph, *po;                       /* [N][H], [N][E] */
    float *patches;                       /* [N][3*P*P] */
    void *kc, *vc;                        /* F16 [T][D] */
    rn_gemma3v_t *gemma3;                 /* gemma3's tower instead, or NULL */
    void *prepared[512];                  /* weights to release */
    int n_prepared;
    /* Host staging. */
    float *host_patches;                  /* [N][3*P*P] */
    int32_t *ids;                         /* [T] */
};

/* ---- loading ---------------------------------------------------------- */

static bool get_u32(const cr_gguf_t *g, const char *key, int max, int *out,
                    cr_err_t *err, cr_status_t *st)
{
    uint32_t v = 0;
    if (!cr_gguf_get_u32(g, key, &v) || v == 0 || v > (uint32_t)max) {
        *st = cr_err_set(err, CR_E_INVALID, "projector: key '%s' is missing or out of "
                         "range 1..%d", key, max);
        return false;
    }
    *out = (int)v;
    return true;
}

static cr_status_t get_vec3(const cr_gguf_t *g, const char *key, float out[3], cr_err_t *err)
{
    const cr_gguf_array_t *a = NULL;
    if (!cr_gguf_get_arr(g, key, &a) || a->n < 3)
        return cr_err_set(err, CR_E_INVALID, "projector: key '%s' must be an array of 3 "
                          "floats", key);
    for (int i = 0; i < 3; i++)
        if (!cr_gguf_arr_get_f32(a, (uint64_t)i, &out[i]))
            return cr_err_set(err, CR_E_INVALID, "projector: key '%s' must hold floats",
                              key);
    return CR_OK;
}

static cr_status_t read_hparams(rn_clip_t *c, cr_err_t *err)
{
    const cr_gguf_t *g = c->g;
    rn_clip_hparams_t *hp = &c->hp;
    const char *arch = cr_gguf_arch(g);
    if (strcmp(arch, "clip"))
        return cr_err_set(err, CR_E_INVALID, "not a vision projector: architecture is "
                          "'%s', expected 'clip'", *arch ? arch : "(none)");
    bool has_vision = false;
    if (!cr_gguf_get_bool(g, "clip.has_vision_encoder", &has_vision) || !has_vision)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector has no vision encoder "
                          "(clip.has_vision_encoder)");
    if (!cr_gguf_get_strz(g, "clip.projector_type", hp->projector, sizeof hp->projector) &&
        !cr_gguf_get_strz(g, "clip.vision.projector_type", hp->projector,
                          sizeof hp->projector))
        snprintf(hp->projector, sizeof hp->projector, "mlp"); /* old llava files */
    if (!strcmp(hp->projector, PROJ_QWEN25VL) || !strcmp(hp->projector, PROJ_QWEN2VL))
        return CR_OK; /* qwen2vl.c reads the rest */
    if (strcmp(hp->projector, "mlp"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector type '%s' is not supported "
                          "yet (supported: mlp, the llava-style projector; "
                          PROJ_QWEN25VL "; " PROJ_QWEN2VL ")", hp->projector);
    const cr_gguf_array_t *fl = NULL, *pin = NULL;
    if (cr_gguf_get_arr(g, "clip.vision.feature_layer", &fl) && fl->n > 0)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: clip.vision.feature_layer "
                          "(stacked feature layers) is not supported yet");
    if (cr_gguf_get_arr(g, "clip.vision.image_grid_pinpoints", &pin) && pin->n > 0)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: image_grid_pinpoints (llava "
                          "1.6 tiling) is not supported yet");
    cr_status_t st = CR_OK;
    if (!get_u32(g, "clip.vision.image_size", RN_CLIP_MAX_IMAGE_SIZE, &hp->image_size, err, &st) ||
        !get_u32(g, "clip.vision.patch_size", 256, &hp->patch_size, err, &st) ||
        !get_u32(g, "clip.vision.embedding_length", 16384, &hp->dim, err, &st) ||
        !get_u32(g, "clip.vision.attention.head_count", 256, &hp->n_heads, err, &st) ||
        !get_u32(g, "clip.vision.feed_forward_length", 65536, &hp->ffn, err, &st) ||
        !get_u32(g, "clip.vision.block_count", RN_CLIP_MAX_LAYERS, &hp->n_layers, err, &st))
        return st;
    if (hp->image_size % hp->patch_size)
        return cr_err_set(err, CR_E_INVALID, "projector: image_size %d is not a multiple "
                          "of patch_size %d", hp->image_size, hp->patch_size);
    if (hp->dim % hp->n_heads)
        return cr_err_set(err, CR_E_INVALID, "projector: embedding_length %d is not a "
                          "multiple of head_count %d", hp->dim, hp->n_heads);
    hp->head_dim = hp->dim / hp->n_heads;
    hp->n_side = hp->image_size / hp->patch_size;
    hp->n_patches = hp->n_side * hp->n_side;
    hp->n_layers_run = hp->n_layers - 1;
    if (!cr_gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &hp->eps) ||
        !(hp->eps > 0))
        return cr_err_set(err, CR_E_INVALID, "projector: key 'clip.vision.attention."
                          "layer_norm_epsilon' is missing or not positive");
    if ((st = get_vec3(g, "clip.vision.image_mean", hp->mean, err)) ||
        (st = get_vec3(g, "clip.vision.image_std", hp->std, err)))
        return st;
    for (int i = 0; i < 3; i++)
        if (!(hp->std[i] != 0) || !isfinite(hp->mean[i]) || !isfinite(hp->std[i]))
            return cr_err_set(err, CR_E_INVALID, "projector: image_mean/image_std must be "
                              "finite with a non-zero std");
    bool gelu = false, silu = false;
    cr_gguf_get_bool(g, "clip.use_gelu", &gelu);
    cr_gguf_get_bool(g, "clip.use_silu", &silu);
    if (gelu && silu)
        return cr_err_set(err, CR_E_INVALID, "projector: both clip.use_gelu and "
                          "clip.use_silu are set");
    if (silu)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: SiLU towers (clip.use_silu) "
                          "are not supported yet");
    hp->act = gelu ? RN_CLIP_ACT_GELU : RN_CLIP_ACT_GELU_QUICK;
    static const uint8_t llava_pad[3] = {122, 116, 104};
    memcpy(hp->pad_color, llava_pad, 3);
    return CR_OK;
}

/* The tensor `name` (NULL if absent and optional), checked to hold
 * cols x rows elements (more dims folded into cols: ne[0..n-2] x ne[n-1])
 * and, for vectors, to be F32 (the ops read them in place). */
static cr_status_t find(rn_clip_t *c, const char *name, int64_t cols, int64_t rows,
                        bool required, bool vec, const cr_gguf_tensor_t **out, cr_err_t *err)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(c->g, name);
    *out = NULL;
    if (!t) {
        if (required)
            return cr_err_set(err, CR_E_INVALID, "projector: tensor '%s' is missing", name);
        return CR_OK;
    }
    uint64_t last = t->n_dims > 1 ? t->ne[t->n_dims - 1] : 1;
    uint64_t first = last ? t->n_elems / last : 0;
    if (first != (uint64_t)cols || last != (uint64_t)rows)
        return cr_err_set(err, CR_E_INVALID, "projector: tensor '%s' holds %" PRIu64 " x %"
                          PRIu64 " elements, expected %" PRId64 " x %" PRId64, name, last,
                          first, rows, cols);
    if (vec && t->type != CR_TYPE_F32)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: tensor '%s' must be F32", name);
    if ((uintptr_t)t->data % (t->type == CR_TYPE_F32 ? 4 : 2))
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: tensor '%s' is misaligned",
                          name);
    *out = t;
    return CR_OK;
}

/* Binds `name` ([rows][cols]) into *w and prepares it on the backend. */
static cr_status_t bind(rn_clip_t *c, const char *name, int64_t cols, int64_t rows,
                        bool required, bool vec, be_weight_t *w, cr_err_t *err)
{
    const cr_gguf_tensor_t *t;
    cr_status_t st = find(c, name, cols, rows, required, vec, &t, err);
    if (st || !t)
        return st;
    if (c->n_prepared == (int)CR_ARRAY_LEN(c->prepared))
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: too many tensors");
    *w = (be_weight_t){
        .name = t->name,
        .type = t->type,
        .n_cols = cols,
        .n_rows = rows,
        .row_bytes = (size_t)(t->size_bytes / (uint64_t)rows),
        .data = t->data,
    };
    if ((st = c->be->ops->weight_prepare(c->be, w, err)))
        return st;
    c->prepared[c->n_prepared++] = w;
    c->weight_bytes += t->size_bytes;
    return CR_OK;
}

static cr_status_t bind_layer(rn_clip_t *c, int l, cr_err_t *err)
{
    const rn_clip_hparams_t *hp = &c->hp;
    clip_layer_t *L = &c->layers[l];
    int64_t D = hp->dim, F = hp->ffn;
    char up_name[64], down_name[64];
    snprintf(up_name, sizeof up_name, "v.blk.%d.ffn_up.weight", l);
    snprintf(down_name, sizeof down_name, "v.blk.%d.ffn_down.weight", l);
    /* Old llava conversions swapped ffn_up and ffn_down; llama.cpp swaps
     * them back when ffn_down's rows are D long. */
    const cr_gguf_tensor_t *down = cr_gguf_tensor_find(c->g, down_name);
    bool swapped = down && down->ne[0] == (uint64_t)D;
    const char *u = swapped ? "ffn_down" : "ffn_up", *d = swapped ? "ffn_up" : "ffn_down";
    struct {
        const char *what;
        int64_t cols, rows;
        bool vec;
        be_weight_t *w;
    } parts[] = {
        {"ln1.weight", D, 1, true, &L->ln1},       {"ln1.bias", D, 1, true, &L->ln1_b},
        {"attn_q.weight", D, D, false, &L->wq},    {"attn_q.bias", D, 1, true, &L->bq},
        {"attn_k.weight", D, D, false, &L->wk},    {"attn_k.bias", D, 1, true, &L->bk},
        {"attn_v.weight", D, D, false, &L->wv},    {"attn_v.bias", D, 1, true, &L->bv},
        {"attn_out.weight", D, D, false, &L->wo},  {"attn_out.bias", D, 1, true, &L->bo},
        {"ln2.weight", D, 1, true, &L->ln2},       {"ln2.bias", D, 1, true, &L->ln2_b},
        {NULL, D, F, false, &L->up},               {NULL, F, 1, true, &L->up_b},
        {NULL, F, D, false, &L->down},             {NULL, D, 1, true, &L->down_b},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
        char name[96];
        if (parts[i].what)
            snprintf(name, sizeof name, "v.blk.%d.%s", l, parts[i].what);
        else
            snprintf(name, sizeof name, "v.blk.%d.%s.%s", l, i < 14 ? u : d,
                     i % 2 ? "bias" : "weight");
        /* Weights are required; biases and norm weights are too in CLIP. */
        cr_status_t st = bind(c, name, parts[i].cols, parts[i].rows, true, parts[i].vec,
                              parts[i].w, err);
        if (st)
            return st;
    }
    return CR_OK;
}

static cr_status_t bind_weights(rn_clip_t *c, cr_err_t *err)
{
    rn_clip_hparams_t *hp = &c->hp;
    int64_t D = hp->dim, P = hp->patch_size;
    cr_status_t st;
    bool has_cls = cr_gguf_tensor_find(c->g, "v.class_embd") != NULL;
    hp->n_pos = hp->n_patches + (has_cls ? 1 : 0);
    if ((st = bind(c, "v.patch_embd.weight", 3 * P * P, D, true, false, &c->patch, err)) ||
        (st = bind(c, "v.patch_embd.bias", D, 1, false, true, &c->patch_b, err)) ||
        (st = bind(c, "v.class_embd", D, 1, false, true, &c->cls, err)) ||
        (st = bind(c, "v.position_embd.weight", D, hp->n_pos, true, false, &c->pos, err)) ||
        (st = bind(c, "v.pre_ln.weight", D, 1, false, true, &c->pre_ln, err)) ||
        (st = bind(c, "v.pre_ln.bias", D, 1, false, true, &c->pre_ln_b, err)) ||
        (st = bind(c, "v.post_ln.weight", D, 1, false, true, &c->post_ln, err)) ||
        (st = bind(c, "v.post_ln.bias", D, 1, false, true, &c->post_ln_b, err)))
        return st;
    if (c->patch.type != CR_TYPE_F32 && c->patch.type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: v.patch_embd.weight must be "
                          "F32 or F16");
    if (hp->n_layers_run < 1)
        return cr_err_set(err, CR_E_INVALID, "projector: a llava tower needs at least 2 "
                          "blocks (it reads the second-to-last)");
    c->layers = calloc((size_t)hp->n_layers_run, sizeof *c->layers);
    if (!c->layers)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    for (int l = 0; l < hp->n_layers_run; l++)
        if ((st = bind_layer(c, l, err)))
            return st;
    /* The projector: mm.0 [H][D] -> GELU -> mm.2 [E][H]. */
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(c->g, "mm.0.weight");
    if (!t || t->n_dims != 2)
        return cr_err_set(err, CR_E_INVALID, "projector: tensor 'mm.0.weight' is missing "
                          "or not a matrix");
    hp->proj_hidden = (int)CR_MIN(t->ne[1], (uint64_t)INT_MAX);
    int64_t H = hp->proj_hidden;
    if ((st = bind(c, "mm.0.weight", D, H, true, false, &c->mm0, err)) ||
        (st = bind(c, "mm.0.bias", H, 1, true, true, &c->mm0_b, err)))
        return st;
    hp->n_embd = (int)H;
    t = cr_gguf_tensor_find(c->g, "mm.2.weight");
    if (t) {
        if (t->n_dims != 2 || t->ne[1] > 1u << 20)
            return cr_err_set(err, CR_E_INVALID, "projector: 'mm.2.weight' is not a matrix");
        hp->n_embd = (int)t->ne[1];
        if ((st = bind(c, "mm.2.weight", H, hp->n_embd, true, false, &c->mm2, err)) ||
            (st = bind(c, "mm.2.bias", hp->n_embd, 1, true, true, &c->mm2_b, err)))
            return st;
    }
    return CR_OK;
}

static cr_status_t alloc_buffers(rn_clip_t *c, cr_err_t *err)
{
    const rn_clip_hparams_t *hp = &c->hp;
    be_backend_t *be = c->be;
    size_t T = (size_t)hp->n_pos, N = (size_t)hp->n_patches, D = (size_t)hp->dim;
    size_t PP3 = 3 * (size_t)hp->patch_size * (size_t)hp->patch_size;
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&c->x, T * D * 4},   {(void **)&c->xb, T * D * 4},
        {(void **)&c->q, T * D * 4},   {(void **)&c->k, T * D * 4},
        {(void **)&c->v, T * D * 4},   {(void **)&c->att, T * D * 4},
        {(void **)&c->hb, T * (size_t)hp->ffn * 4},
        {(void **)&c->ph, N * (size_t)hp->proj_hidden * 4},
        {(void **)&c->po, N * (size_t)hp->n_embd * 4},
        {(void **)&c->patches, N * PP3 * 4},
        {&c->kc, T * D * 2},           {&c->vc, T * D * 2},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (!(*bufs[i].p = be->ops->alloc(be, bufs[i].bytes)))
            return cr_err_set(err, CR_E_NOMEM, "projector: out of memory for %zu bytes of "
                              "activations", bufs[i].bytes);
    c->host_patches = malloc(N * PP3 * sizeof(float));
    c->ids = malloc(T * sizeof(int32_t));
    if (!c->host_patches || !c->ids)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    int64_t max_cols = CR_MAX(CR_MAX((int64_t)PP3, (int64_t)hp->ffn),
                              CR_MAX((int64_t)hp->proj_hidden, (int64_t)hp->n_embd));
    max_cols = CR_MAX(max_cols, (int64_t)D);
    return be->ops->reserve(be, (int)T, max_cols, (int)T, hp->n_heads, err);
}

cr_status_t rn_clip_load(const char *path, be_backend_t *be, rn_clip_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_clip_t *c = calloc(1, sizeof *c);
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    c->be = be;
    c->ext = be_ext_ops(be);
    cr_status_t st = cr_gguf_open(path, &c->g, err);
    rn_siglip_layout_t layout;
    if (!st && rn_gemma3v_detect(c->g, &layout)) {
        if (!(st = rn_gemma3v_load(c->g, be, &c->gemma3, err))) {
            rn_gemma3v_describe(c->gemma3, &c->hp);
            c->weight_bytes = rn_gemma3v_weight_bytes(c->gemma3);
            *out = c;
            return CR_OK;
        }
        rn_clip_destroy(&c);
        return st;
    }
    /* Ollama's qwen25vl model file with the tower inside */
    bool ollama_qwen = !st && !strcmp(cr_gguf_arch(c->g), "qwen25vl");
    if (!st && !ollama_qwen)
        st = read_hparams(c, err);
    if (!st && (ollama_qwen || !strcmp(c->hp.projector, PROJ_QWEN25VL) ||
                !strcmp(c->hp.projector, PROJ_QWEN2VL))) {
        if ((st = (ollama_qwen ? rn_clip_qwen2vl_load_ollama : rn_clip_qwen2vl_load)(
                 c->g, be, &c->hp, &c->qwen, err))) {
            rn_clip_destroy(&c);
            return st;
        }
        *out = c;
        return CR_OK;
    }
    if (!st && (!c->ext || !c->ext->layernorm || !c->ext->add_rows || !c->ext->gelu ||
                (c->hp.act == RN_CLIP_ACT_GELU_QUICK && !c->ext->gelu_quick)))
        st = cr_err_set(err, CR_E_UNSUPPORTED, "projector: the %s backend lacks the ops a "
                        "CLIP tower needs", be->ops->name);
    if (!st)
        st = bind_weights(c, err);
    if (!st)
        st = alloc_buffers(c, err);
    if (st) {
        rn_clip_destroy(&c);
        return st;
    }
    *out = c;
    return CR_OK;
}

void rn_clip_destroy(rn_clip_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_clip_t *c = *self_p;
    be_backend_t *be = c->be;
    rn_clip_qwen2vl_destroy(&c->qwen);
    rn_gemma3v_destroy(&c->gemma3);
    for (int i = 0; i < c->n_prepared; i++)
        if (be->ops->weight_release)
            be->ops->weight_release(be, c->prepared[i]);
    void *bufs[] = {c->x, c->xb, c->q, c->k, c->v, c->att, c->hb, c->ph, c->po,
                    c->patches, c->kc, c->vc};
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    free(c->host_patches);
    free(c->ids);
    free(c->layers);
    cr_gguf_close(&c->g);
    free(c);
    *self_p = NULL;
}

const rn_clip_hparams_t *rn_clip_hparams(const rn_clip_t *c) { return &c->hp; }

uint64_t rn_clip_weight_bytes(const rn_clip_t *c)
{
    return c->qwen ? rn_clip_qwen2vl_weight_bytes(c->qwen) : c->weight_bytes;
}

cr_status_t rn_clip_layout(const rn_clip_t *c, int w, int h, rn_clip_layout_t *out,
                           cr_err_t *err)
{
    if (c->qwen)
        return rn_clip_qwen2vl_layout(c->qwen, w, h, out, err);
    /* gemma3 pools the n_side x n_side patches into n_patches tokens */
    int side = c->gemma3 ? (int)lround(sqrt((double)c->hp.n_patches)) : c->hp.n_side;
    *out = (rn_clip_layout_t){.width = c->hp.image_size, .height = c->hp.image_size,
                              .nx = side, .ny = side};
    return CR_OK;
}

cr_status_t rn_clip_preprocess(const rn_clip_t *c, const rn_image_t *im, float *pixels,
                               cr_err_t *err)
{
    if (c->gemma3)
        return rn_gemma3v_preprocess(c->gemma3, im, pixels, err);
    const rn_clip_hparams_t *hp = &c->hp;
    if (c->qwen)
        return rn_clip_qwen2vl_preprocess(c->qwen, im, pixels, err);
    rn_image_t *sq = NULL;
    cr_status_t st = rn_preproc_fit_square(im, hp->image_size, hp->pad_color,
                                           RN_PREPROC_BICUBIC, &sq, err);
    if (st)
        return st;
    rn_preproc_normalize(sq, hp->mean, hp->std, pixels);
    rn_image_destroy(&sq);
    return CR_OK;
}

/* ---- the forward pass -------------------------------------------------- */

static void activation(rn_clip_t *c, float *y, size_t n)
{
    be_backend_t *be = c->be;
    /* SiLU towers are refused at load (no plain SiLU op yet). */
    if (c->hp.act == RN_CLIP_ACT_GELU)
        c->ext->gelu(be, y, y, n);
    else
        c->ext->gelu_quick(be, y, y, n);
}

cr_status_t rn_clip_encode_at(rn_clip_t *c, const rn_clip_layout_t *L, const float *pixels,
                              float *out, cr_err_t *err)
{
    if (c->qwen)
        return rn_clip_qwen2vl_encode(c->qwen, L, pixels, out, err);
    rn_clip_layout_t fixed;
    rn_clip_layout(c, 0, 0, &fixed, NULL);
    if (L->width != fixed.width || L->height != fixed.height || L->nx != fixed.nx ||
        L->ny != fixed.ny)
        return cr_err_set(err, CR_E_INVALID, "projector: layout %dx%d is not this tower's "
                          "%dx%d", L->width, L->height, c->hp.image_size, c->hp.image_size);
    return rn_clip_encode(c, pixels, out, err);
}

cr_status_t rn_clip_encode(rn_clip_t *c, const float *pixels, float *out, cr_err_t *err)
{
    if (c->qwen) {
        rn_clip_layout_t L = {.width = c->hp.image_size, .height = c->hp.image_size,
                              .nx = c->hp.image_size / (2 * c->hp.patch_size),
                              .ny = c->hp.image_size / (2 * c->hp.patch_size)};
        return rn_clip_qwen2vl_encode(c->qwen, &L, pixels, out, err);
    }
    if (c->gemma3)
        return rn_gemma3v_encode(c->gemma3, pixels, out, err);
    const rn_clip_hparams_t *hp = &c->hp;
    be_backend_t *be = c->be;
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = c->ext;
    int S = hp->image_size, P = hp->patch_size, NS = hp->n_side;
    int N = hp->n_patches, T = hp->n_pos, D = hp->dim, F = hp->ffn;
    size_t PP3 = 3 * (size_t)P * P, TD = (size_t)T * D;

    /* 1. patches: row y*NS+x holds pixels[c][y*P+ky][x*P+kx] in (c, ky, kx)
     *    order, the layout of the conv kernel's rows         [N][3*P*P] */
    for (int py = 0; py < NS; py++)
        for (int px = 0; px < NS; px++) {
            float *dst = c->host_patches + ((size_t)py * NS + px) * PP3;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(dst + ((size_t)ch * P + ky) * P,
                           pixels + ((size_t)ch * S + (size_t)py * P + ky) * S +
                               (size_t)px * P,
                           (size_t)P * sizeof(float));
        }
    op->upload(be, c->patches, c->host_patches, (size_t)N * PP3 * sizeof(float));

    /* 2. patch embedding: x[0..N) = patches Wp^T + bp            x: [T][D] */
    rn_vision_matmul(be, &c->patch, c->patches, N, c->x);
    if (c->patch_b.data)
        ext->add_rows(be, c->x, &c->patch_b, N);
    /* 2a. the class embedding goes after the patches (row N), as the
     *     reference graph concatenates it */
    if (c->cls.data) {
        int32_t zero = 0;
        op->get_rows(be, &c->cls, &zero, 1, c->x + (size_t)N * D);
    }
    /* 3. x += position_embd[0..T)                                [T][D] */
    for (int t = 0; t < T; t++)
        c->ids[t] = t;
    op->get_rows(be, &c->pos, c->ids, T, c->xb);
    op->add(be, c->x, c->xb, TD);
    /* 3a. pre-LayerNorm */
    if (c->pre_ln.data)
        ext->layernorm(be, c->x, c->x, &c->pre_ln, c->pre_ln_b.data ? &c->pre_ln_b : NULL,
                       T, D, hp->eps);

    for (int l = 0; l < hp->n_layers_run; l++) {
        const clip_layer_t *L = &c->layers[l];
        /* 4. xb = layernorm(x) * ln1 + ln1_b                      [T][D] */
        ext->layernorm(be, c->xb, c->x, &L->ln1, &L->ln1_b, T, D, hp->eps);
        /* 5. q, k, v = xb W^T + b                                 [T][D] */
        rn_vision_matmul(be, &L->wq, c->xb, T, c->q);
        rn_vision_matmul(be, &L->wk, c->xb, T, c->k);
        rn_vision_matmul(be, &L->wv, c->xb, T, c->v);
        ext->add_rows(be, c->q, &L->bq, T);
        ext->add_rows(be, c->k, &L->bk, T);
        ext->add_rows(be, c->v, &L->bv, T);
        /* 6. bidirectional attention: each query sees all T keys [T][D] */
        rn_vision_attend(be, c->att, c->q, c->k, c->v, T, hp->n_heads, hp->head_dim, c->kc,
                         c->vc);
        /* 7. x += att Wo^T + bo                                   [T][D] */
        rn_vision_matmul(be, &L->wo, c->att, T, c->xb);
        ext->add_rows(be, c->xb, &L->bo, T);
        op->add(be, c->x, c->xb, TD);
        /* 8. xb = layernorm(x) * ln2 + ln2_b                      [T][D] */
        ext->layernorm(be, c->xb, c->x, &L->ln2, &L->ln2_b, T, D, hp->eps);
        /* 9. hb = act(xb Wup^T + b_up)                            [T][F] */
        rn_vision_matmul(be, &L->up, c->xb, T, c->hb);
        ext->add_rows(be, c->hb, &L->up_b, T);
        activation(c, c->hb, (size_t)T * F);
        /* 10. x += hb Wdown^T + b_down                            [T][D] */
        rn_vision_matmul(be, &L->down, c->hb, T, c->xb);
        ext->add_rows(be, c->xb, &L->down_b, T);
        op->add(be, c->x, c->xb, TD);
    }
    /* 11. post-LayerNorm (absent in llava files: they stop a block early) */
    if (c->post_ln.data)
        ext->layernorm(be, c->x, c->x, &c->post_ln,
                       c->post_ln_b.data ? &c->post_ln_b : NULL, T, D, hp->eps);

    /* 12. the projector reads N rows from row 1 when there is a class row
     *     (the reference's patch indices), else from row 0       [N][D] */
    const float *feat = c->x + (c->cls.data ? (size_t)D : 0);
    /* 13. ph = gelu(feat Wmm0^T + b0)                             [N][H] */
    rn_vision_matmul(be, &c->mm0, feat, N, c->ph);
    ext->add_rows(be, c->ph, &c->mm0_b, N);
    ext->gelu(be, c->ph, c->ph, (size_t)N * hp->proj_hidden);
    /* 14. po = ph Wmm2^T + b2                                     [N][E] */
    const float *res = c->ph;
    if (c->mm2.data) {
        rn_vision_matmul(be, &c->mm2, c->ph, N, c->po);
        ext->add_rows(be, c->po, &c->mm2_b, N);
        res = c->po;
    }
    op->download(be, out, res, (size_t)N * hp->n_embd * sizeof(float));
    return be_check(be, err);
}
