/* qwen2vl.c: the Qwen2.5-VL vision tower (see qwen2vl.h).
 *
 * Shapes below: P = patch_size, T = patches of the image (in the order
 * the tower keeps them, see encode), U = T / 4 merged patches, D = dim,
 * hd = head_dim, F = ffn, H = proj_hidden, E = n_embd. Weights are
 * [rows][cols] as model.h describes them (GGUF ne[1] x ne[0]). */
#include "lib/prelude.h"
#include "services/runner/vision/qwen2vl.h"
#include "services/runner/vision/vops.h"
#include "services/runner/vision/vweights.h"

#include <math.h>

#include "lib/vision_embedded.h"
#include "services/runner/vision/preprocess.h"

#define MERGE 2           /* the graph hard-codes 2 x 2 merging */
#define WINDOW_PIXELS 112 /* llama.cpp's default attn_window_size */
#define ROPE_BASE 10000.0f
#define MAX_FULL 256      /* full-attention blocks Ollama's list may name */

_Static_assert(RN_QWEN2VL_MAX_TOKENS == CR_VISION_QWEN25VL_MAX_TOKENS,
               "vision_embedded.h sizes the scheduler's estimate by the same limit");

/* Tensor names of the two layouts (per block: after "v.blk.N."). */
typedef struct names {
    const char *patch0, *patch1;
    const char *ln1, *q, *k, *v, *o, *ln2, *gate, *up, *down; /* no suffix */
    const char *post_ln, *post_ln_b, *mm0, *mm0_b, *mm2, *mm2_b;
} names_t;

static const names_t mmproj_names = {
    "v.patch_embd.weight", "v.patch_embd.weight.1",
    "ln1", "attn_q", "attn_k", "attn_v", "attn_out", "ln2", "ffn_gate", "ffn_up", "ffn_down",
    "v.post_ln.weight", "v.post_ln.bias", "mm.0.weight", "mm.0.bias", "mm.2.weight",
    "mm.2.bias",
};

/* convert_qwen25vl.go: the kernel's frames split as patch_embd_0 / _1,
 * the fused qkv split into attn_q / attn_k / attn_v, the merger kept under
 * v.merger (its ln_q and mlp.0 / mlp.2) */
static const names_t ollama_names = {
    "v.patch_embd_0.weight", "v.patch_embd_1.weight",
    "ln1", "attn_q", "attn_k", "attn_v", "attn_out", "ln2", "ffn_gate", "ffn_up", "ffn_down",
    "v.merger.ln_q.weight", "v.merger.ln_q.bias", "v.merger.mlp.0.weight",
    "v.merger.mlp.0.bias", "v.merger.mlp.2.weight", "v.merger.mlp.2.bias",
};

typedef struct layer {
    be_weight_t ln1, ln1_b;     /* [D], [D] or none */
    be_weight_t wq, wk, wv, wo; /* [D][D] */
    be_weight_t bq, bk, bv, bo; /* [D] (bo optional) */
    be_weight_t ln2, ln2_b;
    be_weight_t gate, gate_b;   /* [F][D], [F] or none */
    be_weight_t up, up_b;       /* [F][D], [F] or none */
    be_weight_t down, down_b;   /* [D][F], [D] or none */
    bool full;                  /* attends over the whole image, else
                                   within its window */
} layer_t;

struct rn_clip_qwen2vl {
    rn_clip_hparams_t hp;
    const cr_gguf_t *g;
    be_backend_t *be;
    const be_ops_ext_t *ext;
    rn_vweights_t w;               /* the bound tensors (vweights.h) */
    const names_t *nm;             /* the file's layout */
    int n_wa_pattern; /* every n-th layer attends fully; 0: all do */
    bool windows;     /* some layer attends within windows */
    int window_pixels; /* a window's side: 112 (Ollama: window_size) */
    float rope_base;
    bool full_list[MAX_FULL]; /* Ollama's fullatt_block_indexes */
    bool ollama;
    bool qwen2;       /* Qwen2-VL ("qwen2vl_merger"): LayerNorms with biases,
                         an ungated GELU / quick-GELU MLP; else 2.5's RMSNorm
                         and SiLU-gated MLP */

    be_weight_t patch0, patch1;    /* [D][3*P*P] (c, ky, kx): the temporal
                                      kernel's two frames */
    be_weight_t pre_ln, pre_ln_b;  /* [D] or none */
    be_weight_t post_ln, post_ln_b; /* [D] (the merger's ln_q), bias or none */
    layer_t *layers;
    be_weight_t mm0, mm0_b;        /* [H][4D], [H] */
    be_weight_t mm2, mm2_b;        /* [E][H], [E] */

    /* Backend buffers for up to cap patches (grown by ensure). */
    int cap;
    float *x, *xb, *q, *k, *v, *att; /* [T][D] */
    float *hg, *hu;                  /* [T][F] */
    float *ph, *po;                  /* [U][H], [U][E] */
    float *patches;                  /* [T][3*P*P] */
    void *kc, *vc;                   /* F16 [T][D] */
    /* Host staging. */
    float *host_patches; /* [T][3*P*P] */
    int32_t *pos;        /* [4][T]: the rope planes (y, x, y, x) */
    int32_t *unit;       /* [U]: the raster merged patch at each kept place */
    int32_t *win;        /* [U + 1]: where each window's merged patches start */
};

/* ---- loading ---------------------------------------------------------- */

static bool get_u32(const cr_gguf_t *g, const char *key, int max, int *out, cr_err_t *err,
                    cr_status_t *st)
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
        if (!cr_gguf_arr_get_f32(a, (uint64_t)i, &out[i]) || !isfinite(out[i]))
            return cr_err_set(err, CR_E_INVALID, "projector: key '%s' must hold finite "
                              "floats", key);
    return CR_OK;
}

static cr_status_t read_hparams(rn_clip_qwen2vl_t *q, cr_err_t *err)
{
    const cr_gguf_t *g = q->g;
    rn_clip_hparams_t *hp = &q->hp;
    cr_status_t st = CR_OK;
    if (!get_u32(g, "clip.vision.patch_size", 64, &hp->patch_size, err, &st) ||
        !get_u32(g, "clip.vision.embedding_length", 16384, &hp->dim, err, &st) ||
        !get_u32(g, "clip.vision.attention.head_count", 256, &hp->n_heads, err, &st) ||
        !get_u32(g, "clip.vision.feed_forward_length", 65536, &hp->ffn, err, &st) ||
        !get_u32(g, "clip.vision.block_count", RN_CLIP_MAX_LAYERS, &hp->n_layers, err, &st))
        return st;
    if (hp->dim % hp->n_heads)
        return cr_err_set(err, CR_E_INVALID, "projector: embedding_length %d is not a "
                          "multiple of head_count %d", hp->dim, hp->n_heads);
    hp->head_dim = hp->dim / hp->n_heads;
    /* 2D rope: four sections of head_dim / 4 pairs (rope_multi's bound) */
    if (hp->head_dim % 4 || hp->head_dim > 1024)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: head size %d must be a "
                          "multiple of 4 up to 1024 (2D rotary sections)", hp->head_dim);
    /* llama.cpp requires the pattern for qwen2.5-vl (0: no window layers);
     * Qwen2-VL's files have none (every block attends fully) */
    uint32_t wa = 0;
    bool has_wa = cr_gguf_get_u32(g, "clip.vision.n_wa_pattern", &wa);
    if ((!has_wa && !q->qwen2) || wa > RN_CLIP_MAX_LAYERS)
        return cr_err_set(err, CR_E_INVALID, "projector: key 'clip.vision.n_wa_pattern' "
                          "is missing or out of range");
    q->n_wa_pattern = (int)wa;
    uint32_t merge = MERGE;
    if (cr_gguf_get_u32(g, "clip.vision.spatial_merge_size", &merge) && merge != MERGE)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: spatial_merge_size %u (the "
                          "reference graph merges 2 x 2)", merge);
    if (!cr_gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &hp->eps) ||
        !(hp->eps > 0))
        return cr_err_set(err, CR_E_INVALID, "projector: key 'clip.vision.attention."
                          "layer_norm_epsilon' is missing or not positive");
    if ((st = get_vec3(g, "clip.vision.image_mean", hp->mean, err)) ||
        (st = get_vec3(g, "clip.vision.image_std", hp->std, err)))
        return st;
    for (int i = 0; i < 3; i++)
        if (!(hp->std[i] != 0))
            return cr_err_set(err, CR_E_INVALID, "projector: image_std must be non-zero");
    bool gelu = false, silu = false;
    cr_gguf_get_bool(g, "clip.use_gelu", &gelu);
    cr_gguf_get_bool(g, "clip.use_silu", &silu);
    if (q->qwen2) {
        /* Qwen2-VL: an ungated MLP, quick GELU unless the file says
         * otherwise (llama.cpp's ffn_op); no plain SiLU op yet */
        if (silu)
            return cr_err_set(err, CR_E_UNSUPPORTED, "projector: a qwen2-vl tower with a "
                              "SiLU MLP is not supported yet");
        hp->act = gelu ? RN_CLIP_ACT_GELU : RN_CLIP_ACT_GELU_QUICK;
    } else if (gelu || !silu) {
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: a qwen2.5-vl tower with a "
                          "%s MLP is not supported yet (only SiLU, clip.use_silu)",
                          gelu ? "GELU" : "quick-GELU");
    } else {
        hp->act = RN_CLIP_ACT_SILU;
    }
    hp->dynamic = true;
    int align = hp->patch_size * MERGE;
    /* the largest image: RN_QWEN2VL_MAX_TOKENS merged patches */
    hp->n_patches = RN_QWEN2VL_MAX_TOKENS;
    hp->image_size = align * 64; /* 64 x 64 merged patches */
    hp->n_side = hp->image_size / hp->patch_size;
    hp->n_pos = RN_QWEN2VL_MAX_TOKENS * MERGE * MERGE;
    hp->n_layers_run = hp->n_layers;
    return CR_OK;
}

/* Ollama's qwen25vl keys, checked with the rest of the file by
 * lib/vision_embedded.h; the full-attention blocks are a list there
 * (fullatt_block_indexes, Ollama's reader's default {7, 15, 23, 31} when
 * absent), the window's side a key (window_size), and the mean and std
 * Ollama's hard-coded CLIP ones. */
static cr_status_t read_hparams_ollama(rn_clip_qwen2vl_t *q, cr_err_t *err)
{
    rn_clip_hparams_t *hp = &q->hp;
    cr_vision_embedded_t ve;
    cr_status_t st = cr_vision_embedded_of(q->g, CR_VISION_QWEN25VL, "qwen25vl", &ve, err);
    if (st)
        return st;
    snprintf(hp->projector, sizeof hp->projector, "qwen2.5vl_merger");
    hp->patch_size = ve.patch_size;
    hp->dim = ve.dim;
    hp->n_heads = ve.n_heads;
    hp->head_dim = ve.dim / ve.n_heads;
    hp->ffn = ve.ffn;
    hp->n_layers = ve.n_layers;
    hp->eps = ve.eps;
    memcpy(hp->mean, cr_vision_clip_mean, sizeof hp->mean);
    memcpy(hp->std, cr_vision_clip_std, sizeof hp->std);
    q->rope_base = ve.rope_theta;
    uint32_t win = WINDOW_PIXELS;
    cr_gguf_get_u32(q->g, "qwen25vl.vision.window_size", &win);
    q->window_pixels = (int)win; /* 1..4096: vision_embedded checked it */
    const cr_gguf_array_t *a = NULL;
    if (cr_gguf_get_arr(q->g, "qwen25vl.vision.fullatt_block_indexes", &a)) {
        for (uint64_t i = 0; i < a->n; i++) {
            int64_t k = -1;
            if (cr_gguf_arr_get_i64(a, i, &k) && k >= 0 && k < MAX_FULL)
                q->full_list[k] = true;
        }
    } else {
        static const int def[] = {7, 15, 23, 31};
        for (size_t i = 0; i < CR_ARRAY_LEN(def); i++)
            q->full_list[def[i]] = true;
    }
    q->ollama = true;
    hp->act = RN_CLIP_ACT_SILU;
    hp->dynamic = true;
    hp->n_patches = RN_QWEN2VL_MAX_TOKENS;
    hp->image_size = hp->patch_size * MERGE * 64;
    hp->n_side = hp->image_size / hp->patch_size;
    hp->n_pos = RN_QWEN2VL_MAX_TOKENS * MERGE * MERGE;
    hp->n_layers_run = hp->n_layers;
    return CR_OK;
}

/* Binds `name` ([rows][cols]) into *w and prepares it on the backend
 * (vweights.h); matrices only in the types this tower's ops take. */
static cr_status_t bind(rn_clip_qwen2vl_t *q, const char *name, int64_t cols, int64_t rows,
                        bool required, bool vec, be_weight_t *w, cr_err_t *err)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(q->g, name);
    if (t && !vec && t->type != CR_TYPE_F32 && t->type != CR_TYPE_F16 &&
        t->type != CR_TYPE_BF16 && t->type != CR_TYPE_Q8_0)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: tensor '%s' must be F32, F16, "
                          "BF16 or Q8_0", name);
    return rn_vweights_bind(&q->w, name, cols, rows, required, vec, w, err);
}

static cr_status_t bind_layer(rn_clip_qwen2vl_t *q, int l, cr_err_t *err)
{
    layer_t *L = &q->layers[l];
    int64_t D = q->hp.dim, F = q->hp.ffn;
    const names_t *nm = q->nm;
    struct {
        const char *what, *suffix;
        int64_t cols, rows;
        bool required, vec;
        be_weight_t *w;
    } parts[] = {
        {nm->ln1, "weight", D, 1, true, true, &L->ln1},
        {nm->ln1, "bias", D, 1, false, true, &L->ln1_b},
        {nm->q, "weight", D, D, true, false, &L->wq},
        {nm->q, "bias", D, 1, true, true, &L->bq},
        {nm->k, "weight", D, D, true, false, &L->wk},
        {nm->k, "bias", D, 1, true, true, &L->bk},
        {nm->v, "weight", D, D, true, false, &L->wv},
        {nm->v, "bias", D, 1, true, true, &L->bv},
        {nm->o, "weight", D, D, true, false, &L->wo},
        {nm->o, "bias", D, 1, false, true, &L->bo},
        {nm->ln2, "weight", D, 1, true, true, &L->ln2},
        {nm->ln2, "bias", D, 1, false, true, &L->ln2_b},
        {nm->gate, "weight", D, F, !q->qwen2, false, &L->gate},
        {nm->gate, "bias", F, 1, false, true, &L->gate_b},
        {nm->up, "weight", D, F, true, false, &L->up},
        {nm->up, "bias", F, 1, false, true, &L->up_b},
        {nm->down, "weight", F, D, true, false, &L->down},
        {nm->down, "bias", D, 1, false, true, &L->down_b},
    };
    L->full = q->ollama ? l < MAX_FULL && q->full_list[l]
                        : q->n_wa_pattern == 0 || (l + 1) % q->n_wa_pattern == 0;
    q->windows |= !L->full;
    for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
        char name[96];
        snprintf(name, sizeof name, "v.blk.%d.%s.%s", l, parts[i].what, parts[i].suffix);
        cr_status_t st = bind(q, name, parts[i].cols, parts[i].rows, parts[i].required,
                              parts[i].vec, parts[i].w, err);
        if (st)
            return st;
    }
    return CR_OK;
}

static cr_status_t bind_weights(rn_clip_qwen2vl_t *q, cr_err_t *err)
{
    rn_clip_hparams_t *hp = &q->hp;
    int64_t D = hp->dim, P = hp->patch_size;
    cr_status_t st;
    if (cr_gguf_tensor_find(q->g, "v.patch_embd.bias") ||
        cr_gguf_tensor_find(q->g, "v.class_embd"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: a qwen2.5-vl tower with a "
                          "patch bias or class embedding is not supported");
    q->layers = calloc((size_t)hp->n_layers, sizeof *q->layers);
    if (!q->layers)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    const names_t *nm = q->nm;
    if ((st = bind(q, nm->patch0, 3 * P * P, D, true, false, &q->patch0, err)) ||
        (st = bind(q, nm->patch1, 3 * P * P, D, true, false, &q->patch1, err)) ||
        (st = bind(q, "v.pre_ln.weight", D, 1, false, true, &q->pre_ln, err)) ||
        (st = bind(q, "v.pre_ln.bias", D, 1, false, true, &q->pre_ln_b, err)) ||
        (st = bind(q, nm->post_ln, D, 1, false, true, &q->post_ln, err)) ||
        (st = bind(q, nm->post_ln_b, D, 1, false, true, &q->post_ln_b, err)))
        return st;
    for (int l = 0; l < hp->n_layers; l++)
        if ((st = bind_layer(q, l, err)))
            return st;
    /* the merger: mm.0 [H][4D] -> GELU -> mm.2 [E][H] */
    const cr_gguf_tensor_t *t0 = cr_gguf_tensor_find(q->g, nm->mm0);
    const cr_gguf_tensor_t *t2 = cr_gguf_tensor_find(q->g, nm->mm2);
    if (!t0 || t0->n_dims != 2 || !t2 || t2->n_dims != 2 || t0->ne[1] > 1u << 20 ||
        t2->ne[1] > 1u << 20)
        return cr_err_set(err, CR_E_INVALID, "%s: tensors '%s' and '%s' must be matrices",
                          q->w.what, nm->mm0, nm->mm2);
    hp->proj_hidden = (int)t0->ne[1];
    hp->n_embd = (int)t2->ne[1];
    int64_t H = hp->proj_hidden, E = hp->n_embd;
    if ((st = bind(q, nm->mm0, 4 * D, H, true, false, &q->mm0, err)) ||
        (st = bind(q, nm->mm0_b, H, 1, true, true, &q->mm0_b, err)) ||
        (st = bind(q, nm->mm2, H, E, true, false, &q->mm2, err)) ||
        (st = bind(q, nm->mm2_b, E, 1, true, true, &q->mm2_b, err)))
        return st;
    return CR_OK;
}

static cr_status_t load(const cr_gguf_t *g, be_backend_t *be, bool ollama,
                        rn_clip_hparams_t *hp, rn_clip_qwen2vl_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_clip_qwen2vl_t *q = calloc(1, sizeof *q);
    if (!q)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    q->g = g;
    q->be = be;
    q->ext = be_ext_ops(be);
    q->hp = *hp;
    q->nm = ollama ? &ollama_names : &mmproj_names;
    q->qwen2 = !ollama && !strcmp(hp->projector, "qwen2vl_merger");
    q->window_pixels = WINDOW_PIXELS;
    q->rope_base = ROPE_BASE;
    rn_vweights_init(&q->w, g, be, ollama ? "vision tower" : "projector");
    cr_status_t st = ollama ? read_hparams_ollama(q, err) : read_hparams(q, err);
    if (!st && (!q->ext || !q->ext->rope_multi || !q->ext->add_rows || !q->ext->gelu ||
                (q->qwen2 && (!q->ext->layernorm ||
                              (q->hp.act == RN_CLIP_ACT_GELU_QUICK && !q->ext->gelu_quick)))))
        st = cr_err_set(err, CR_E_UNSUPPORTED, "projector: the %s backend lacks the ops a "
                        "qwen2%s-vl tower needs", be->ops->name, q->qwen2 ? "" : ".5");
    if (!st)
        st = bind_weights(q, err);
    if (st) {
        rn_clip_qwen2vl_destroy(&q);
        return st;
    }
    *hp = q->hp;
    *out = q;
    return CR_OK;
}

cr_status_t rn_clip_qwen2vl_load(const cr_gguf_t *g, be_backend_t *be, rn_clip_hparams_t *hp,
                                 rn_clip_qwen2vl_t **out, cr_err_t *err)
{
    return load(g, be, false, hp, out, err);
}

cr_status_t rn_clip_qwen2vl_load_ollama(const cr_gguf_t *g, be_backend_t *be,
                                        rn_clip_hparams_t *hp, rn_clip_qwen2vl_t **out,
                                        cr_err_t *err)
{
    return load(g, be, true, hp, out, err);
}

static void free_buffers(rn_clip_qwen2vl_t *q)
{
    be_backend_t *be = q->be;
    void *bufs[] = {q->x, q->xb, q->q, q->k, q->v, q->att, q->hg, q->hu, q->ph, q->po,
                    q->patches, q->kc, q->vc};
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    q->x = q->xb = q->q = q->k = q->v = q->att = q->hg = q->hu = q->ph = q->po = NULL;
    q->patches = NULL;
    q->kc = q->vc = NULL;
    free(q->host_patches);
    free(q->pos);
    free(q->unit);
    free(q->win);
    q->host_patches = NULL;
    q->pos = q->unit = q->win = NULL;
    q->cap = 0;
}

void rn_clip_qwen2vl_destroy(rn_clip_qwen2vl_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_clip_qwen2vl_t *q = *self_p;
    rn_vweights_release(&q->w);
    free_buffers(q);
    free(q->layers);
    free(q);
    *self_p = NULL;
}

uint64_t rn_clip_qwen2vl_weight_bytes(const rn_clip_qwen2vl_t *q) { return q->w.bytes; }

/* Activations for T patches (kept when already that large). Encoding an
 * image is not the token path: buffers follow the largest image seen,
 * bounded by RN_QWEN2VL_MAX_TOKENS. */
static cr_status_t ensure(rn_clip_qwen2vl_t *q, int T, cr_err_t *err)
{
    if (T <= q->cap)
        return CR_OK;
    free_buffers(q);
    const rn_clip_hparams_t *hp = &q->hp;
    be_backend_t *be = q->be;
    size_t t = (size_t)T, U = t / 4, D = (size_t)hp->dim, F = (size_t)hp->ffn;
    size_t PP3 = 3 * (size_t)hp->patch_size * hp->patch_size;
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&q->x, t * D * 4},   {(void **)&q->xb, t * D * 4},
        {(void **)&q->q, t * D * 4},   {(void **)&q->k, t * D * 4},
        {(void **)&q->v, t * D * 4},   {(void **)&q->att, t * D * 4},
        {(void **)&q->hg, t * F * 4},  {(void **)&q->hu, t * F * 4},
        {(void **)&q->ph, U * (size_t)hp->proj_hidden * 4},
        {(void **)&q->po, U * (size_t)hp->n_embd * 4},
        {(void **)&q->patches, t * PP3 * 4},
        {&q->kc, t * D * 2},           {&q->vc, t * D * 2},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (!(*bufs[i].p = be->ops->alloc(be, bufs[i].bytes))) {
            free_buffers(q);
            return cr_err_set(err, CR_E_NOMEM, "projector: out of memory for %zu bytes of "
                              "activations (%d patches)", bufs[i].bytes, T);
        }
    q->host_patches = malloc(t * PP3 * sizeof(float));
    q->pos = malloc(4 * t * sizeof(int32_t));
    q->unit = malloc(U * sizeof(int32_t));
    q->win = malloc((U + 1) * sizeof(int32_t));
    if (!q->host_patches || !q->pos || !q->unit || !q->win) {
        free_buffers(q);
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    }
    q->cap = T;
    int64_t max_cols = CR_MAX(CR_MAX((int64_t)PP3, (int64_t)F), 4 * (int64_t)D);
    max_cols = CR_MAX(max_cols, CR_MAX((int64_t)hp->proj_hidden, (int64_t)hp->n_embd));
    return be->ops->reserve(be, T, max_cols, T, hp->n_heads, err);
}

/* ---- preprocessing ------------------------------------------------------ */

/* mtmd's round/ceil/floor_by_factor: x / f in float, rounded, times f. */
static int by_factor(float x, int f, float (*rnd)(float))
{
    return (int)rnd(x / (float)f) * f;
}

cr_status_t rn_clip_qwen2vl_layout(const rn_clip_qwen2vl_t *q, int w, int h,
                                   rn_clip_layout_t *out, cr_err_t *err)
{
    int align = q->hp.patch_size * MERGE;
    int patch_area = align * align;
    int min_px = RN_QWEN2VL_MIN_TOKENS * patch_area, max_px = RN_QWEN2VL_MAX_TOKENS * patch_area;
    /* smart_resize: round each side to the alignment, then scale the area
     * into [min_px, max_px] keeping the aspect */
    int wb = CR_MAX(align, by_factor((float)w, align, roundf));
    int hb = CR_MAX(align, by_factor((float)h, align, roundf));
    if ((int64_t)hb * wb > max_px) {
        float beta = sqrtf((float)h * (float)w / (float)max_px);
        hb = CR_MAX(align, by_factor((float)h / beta, align, floorf));
        wb = CR_MAX(align, by_factor((float)w / beta, align, floorf));
    } else if ((int64_t)hb * wb < min_px) {
        float beta = sqrtf((float)min_px / ((float)h * (float)w));
        hb = by_factor((float)h * beta, align, ceilf);
        wb = by_factor((float)w * beta, align, ceilf);
    }
    *out = (rn_clip_layout_t){.width = wb, .height = hb, .nx = wb / align, .ny = hb / align};
    if ((int64_t)out->nx * out->ny > RN_QWEN2VL_MAX_TOKENS)
        return cr_err_set(err, CR_E_INVALID, "an image of %dx%d is too elongated for the "
                          "vision tower: %dx%d merged patches, more than %d", w, h, out->nx,
                          out->ny, RN_QWEN2VL_MAX_TOKENS);
    return CR_OK;
}

cr_status_t rn_clip_qwen2vl_preprocess(const rn_clip_qwen2vl_t *q, const rn_image_t *im,
                                       float *pixels, cr_err_t *err)
{
    rn_clip_layout_t L;
    cr_status_t st = rn_clip_qwen2vl_layout(q, im->width, im->height, &L, err);
    if (st)
        return st;
    static const uint8_t black[3] = {0, 0, 0};
    rn_image_t *fit = NULL;
    if ((st = rn_preproc_fit_box(im, L.width, L.height, black, RN_PREPROC_BICUBIC, &fit, err)))
        return st;
    rn_preproc_normalize(fit, q->hp.mean, q->hp.std, pixels);
    rn_image_destroy(&fit);
    return CR_OK;
}

/* ---- the forward pass -------------------------------------------------- */

/* The order the tower keeps merged patches in: windows of gw x gw merged
 * patches in raster order, each window's patches in raster order (the
 * reference's inv_window_idx), or plain raster without window layers.
 * unit[k]: the raster index of the k-th kept merged patch; win[i]: where
 * window i starts (win[n] = U). Returns the number of windows. */
static int window_order(const rn_clip_qwen2vl_t *q, int pw, int ph, int32_t *unit,
                        int32_t *win)
{
    int U = pw * ph;
    if (!q->windows) {
        for (int k = 0; k < U; k++)
            unit[k] = k;
        win[0] = 0;
        win[1] = U;
        return 1;
    }
    int gw = q->window_pixels / q->hp.patch_size / MERGE;
    gw = CR_MAX(gw, 1);
    int k = 0, n = 0;
    for (int y = 0; y < ph; y += gw)
        for (int x = 0; x < pw; x += gw) {
            win[n++] = k;
            for (int dy = 0; dy < gw && y + dy < ph; dy++)
                for (int dx = 0; dx < gw && x + dx < pw; dx++)
                    unit[k++] = (y + dy) * pw + x + dx;
        }
    win[n] = U;
    return n;
}

/* Normalizes x [T][D] into y with w (and bias b when present): RMSNorm
 * (2.5), LayerNorm (Qwen2-VL, llama.cpp's NORM_TYPE_NORMAL). */
static void rms(rn_clip_qwen2vl_t *q, float *y, const float *x, const be_weight_t *w,
                const be_weight_t *b, int T)
{
    if (q->qwen2) {
        q->ext->layernorm(q->be, y, x, w, b->data ? b : NULL, T, q->hp.dim, q->hp.eps);
        return;
    }
    q->be->ops->rmsnorm(q->be, y, x, w, T, q->hp.dim, q->hp.eps);
    if (b->data)
        q->ext->add_rows(q->be, y, b, T);
}

/* y = x W^T (+ b): x [T][cols], y [T][rows]. */
static void linear(rn_clip_qwen2vl_t *q, const be_weight_t *w, const be_weight_t *b,
                   const float *x, int T, float *y)
{
    rn_vision_matmul(q->be, w, x, T, y);
    if (b->data)
        q->ext->add_rows(q->be, y, b, T);
}

/* Bidirectional attention of rows a..b-1 among themselves. */
static void attend(rn_clip_qwen2vl_t *q, int a, int b)
{
    const rn_clip_hparams_t *hp = &q->hp;
    size_t at = (size_t)a * hp->dim;
    rn_vision_attend(q->be, q->att + at, q->q + at, q->k + at, q->v + at, b - a, hp->n_heads,
                     hp->head_dim, q->kc, q->vc);
}

cr_status_t rn_clip_qwen2vl_encode(rn_clip_qwen2vl_t *q, const rn_clip_layout_t *L,
                                   const float *pixels, float *out, cr_err_t *err)
{
    const rn_clip_hparams_t *hp = &q->hp;
    be_backend_t *be = q->be;
    const be_ops_t *op = be->ops;
    int P = hp->patch_size, W = L->width, D = hp->dim, hd = hp->head_dim;
    int pw = L->nx, ph = L->ny, U = pw * ph, T = 4 * U;
    size_t PP3 = 3 * (size_t)P * P;
    if (pw < 1 || ph < 1 || U > RN_QWEN2VL_MAX_TOKENS || W != pw * P * MERGE ||
        L->height != ph * P * MERGE)
        return cr_err_set(err, CR_E_INVALID, "projector: layout %dx%d (%dx%d) is not one of "
                          "this tower's", L->width, L->height, pw, ph);
    cr_status_t st = ensure(q, T, err);
    if (st)
        return st;
    int n_win = window_order(q, pw, ph, q->unit, q->win);

    /* 1. patches in the kept order: merged patch k (raster unit[k]) gives
     *    rows 4k + 2 dy + dx, the patch at column 2 ux + dx, row 2 uy + dy,
     *    in (c, ky, kx) order (the conv kernel's rows); the rope planes
     *    hold its row and column (y, x, y, x)                [T][3*P*P] */
    int H = L->height;
    for (int k = 0; k < U; k++) {
        int uy = q->unit[k] / pw, ux = q->unit[k] % pw;
        for (int d = 0; d < 4; d++) {
            int r = 4 * k + d, py = 2 * uy + d / 2, px = 2 * ux + d % 2;
            float *dst = q->host_patches + (size_t)r * PP3;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(dst + ((size_t)ch * P + ky) * P,
                           pixels + ((size_t)ch * H + (size_t)py * P + ky) * W +
                               (size_t)px * P,
                           (size_t)P * sizeof(float));
            q->pos[r] = py;
            q->pos[(size_t)T + r] = px;
            q->pos[2 * (size_t)T + r] = py;
            q->pos[3 * (size_t)T + r] = px;
        }
    }
    op->upload(be, q->patches, q->host_patches, (size_t)T * PP3 * sizeof(float));

    /* 2. patch embedding: both temporal frames see the same image, so the
     *    two kernels' outputs add                              x: [T][D] */
    rn_vision_matmul(be, &q->patch0, q->patches, T, q->x);
    rn_vision_matmul(be, &q->patch1, q->patches, T, q->xb);
    op->add(be, q->x, q->xb, (size_t)T * D);
    /* 2a. pre-norm (absent in Qwen2.5-VL) */
    if (q->pre_ln.data)
        rms(q, q->x, q->x, &q->pre_ln, &q->pre_ln_b, T);

    const int sections[4] = {hd / 4, hd / 4, hd / 4, hd / 4};
    for (int l = 0; l < hp->n_layers; l++) {
        const layer_t *Ly = &q->layers[l];
        bool full = Ly->full;
        /* 3. xb = rmsnorm(x) * ln1                                 [T][D] */
        rms(q, q->xb, q->x, &Ly->ln1, &Ly->ln1_b, T);
        /* 4. q, k, v = xb W^T + b                                  [T][D] */
        linear(q, &Ly->wq, &Ly->bq, q->xb, T, q->q);
        linear(q, &Ly->wk, &Ly->bk, q->xb, T, q->k);
        linear(q, &Ly->wv, &Ly->bv, q->xb, T, q->v);
        /* 5. 2D rope: pairs (i, i + hd/2); the first hd/4 turn with the
         *    patch's row, the next hd/4 with its column */
        q->ext->rope_multi(be, q->q, T, hp->n_heads, hd, hd / 2, q->pos, sections,
                           q->rope_base, true);
        q->ext->rope_multi(be, q->k, T, hp->n_heads, hd, hd / 2, q->pos, sections,
                           q->rope_base, true);
        /* 6. attention over the whole image, or within each window [T][D] */
        if (full)
            attend(q, 0, T);
        else
            for (int w = 0; w < n_win; w++)
                attend(q, 4 * q->win[w], 4 * q->win[w + 1]);
        /* 7. x += att Wo^T + bo                                   [T][D] */
        linear(q, &Ly->wo, &Ly->bo, q->att, T, q->xb);
        op->add(be, q->x, q->xb, (size_t)T * D);
        /* 8. xb = rmsnorm(x) * ln2                                 [T][D] */
        rms(q, q->xb, q->x, &Ly->ln2, &Ly->ln2_b, T);
        /* 9. hg = silu(xb Wg^T + bg) * (xb Wu^T + bu)              [T][F]
         *    (Qwen2-VL, no gate: hg = act(xb Wu^T + bu)) */
        if (Ly->gate.data) {
            linear(q, &Ly->gate, &Ly->gate_b, q->xb, T, q->hg);
            linear(q, &Ly->up, &Ly->up_b, q->xb, T, q->hu);
            op->swiglu(be, q->hg, q->hg, q->hu, (size_t)T * hp->ffn);
        } else {
            linear(q, &Ly->up, &Ly->up_b, q->xb, T, q->hg);
            if (hp->act == RN_CLIP_ACT_GELU)
                q->ext->gelu(be, q->hg, q->hg, (size_t)T * hp->ffn);
            else
                q->ext->gelu_quick(be, q->hg, q->hg, (size_t)T * hp->ffn);
        }
        /* 10. x += hg Wd^T + bd                                    [T][D] */
        linear(q, &Ly->down, &Ly->down_b, q->hg, T, q->xb);
        op->add(be, q->x, q->xb, (size_t)T * D);
    }
    /* 11. the merger's norm (ln_q)                                 [T][D] */
    if (q->post_ln.data)
        rms(q, q->x, q->x, &q->post_ln, &q->post_ln_b, T);
    /* 12. each merged patch's 4 rows side by side: x as [U][4D];
     *     ph = gelu(x Wmm0^T + b0), po = ph Wmm2^T + b2           [U][E] */
    linear(q, &q->mm0, &q->mm0_b, q->x, U, q->ph);
    q->ext->gelu(be, q->ph, q->ph, (size_t)U * hp->proj_hidden);
    linear(q, &q->mm2, &q->mm2_b, q->ph, U, q->po);
    /* 13. back to raster order: row unit[k] of out is kept row k */
    size_t E = (size_t)hp->n_embd;
    for (int k = 0; k < U; k++)
        op->download(be, out + (size_t)q->unit[k] * E, q->po + (size_t)k * E,
                     E * sizeof(float));
    return be_check(be, err);
}
