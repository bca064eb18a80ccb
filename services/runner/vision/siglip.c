/* siglip.c: the SigLIP tower (see siglip.h).
 *
 * Shapes: P = patch_size, S = image_size, N = n_patches (the tower's
 * positions), D = dim, F = ffn. Weights are [rows][cols] (GGUF ne[1] x
 * ne[0]). */
#include "lib/prelude.h"
#include "services/runner/vision/siglip.h"

#include <math.h>

#include "services/runner/vision/vops.h"
#include "services/runner/vision/vweights.h"

/* lib/vision_embedded.c holds a model file's tower to the same limits */
#define SIGLIP_MAX_LAYERS 256
#define SIGLIP_MAX_IMAGE 2048 /* pixels per side */

typedef struct siglip_layer {
    be_weight_t ln1, ln1_b;     /* [D] */
    be_weight_t wq, wk, wv, wo; /* [D][D] */
    be_weight_t bq, bk, bv, bo; /* [D] */
    be_weight_t ln2, ln2_b;     /* [D] */
    be_weight_t up, up_b;       /* [F][D], [F] */
    be_weight_t down, down_b;   /* [D][F], [D] */
} siglip_layer_t;

struct rn_siglip {
    rn_siglip_hparams_t hp;
    be_backend_t *be;
    const be_ops_ext_t *ext;
    rn_vweights_t w;
    be_weight_t patch, patch_b;     /* [D][3*P*P] (c, ky, kx), [D] */
    be_weight_t pos;                /* [N][D] */
    be_weight_t post_ln, post_ln_b; /* [D] */
    siglip_layer_t *layers;         /* [n_layers] */
    /* backend buffers */
    float *x, *xb, *q, *k, *v, *att; /* [N][D] */
    float *hb;                       /* [N][F] */
    float *patches;                  /* [N][3*P*P] */
    void *kc, *vc;                   /* F16 [N][D] */
    /* host staging */
    float *host_patches;             /* [N][3*P*P] */
    int32_t *ids;                    /* [N] */
};

/* Tensor names of the two layouts. */
typedef struct names {
    const char *patch, *patch_b, *pos, *post_ln, *post_ln_b;
    const char *ln1, *q, *k, *v, *o, *ln2, *up, *down; /* per block, no suffix */
} names_t;

static const names_t mmproj_names = {
    "v.patch_embd.weight", "v.patch_embd.bias", "v.position_embd.weight",
    "v.post_ln.weight", "v.post_ln.bias",
    "ln1", "attn_q", "attn_k", "attn_v", "attn_out", "ln2", "ffn_up", "ffn_down",
};

static const names_t ollama_names = {
    "v.patch_embedding.weight", "v.patch_embedding.bias", "v.position_embedding.weight",
    "v.post_layernorm.weight", "v.post_layernorm.bias",
    "layer_norm1", "attn_q", "attn_k", "attn_v", "attn_output", "layer_norm2", "mlp.fc1",
    "mlp.fc2",
};

static cr_status_t get_int(const cr_gguf_t *g, const char *prefix, const char *key, int max,
                           int *out, cr_err_t *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s%s", prefix, key);
    uint32_t v = 0;
    if (!cr_gguf_get_u32(g, full, &v) || v == 0 || v > (uint32_t)max)
        return cr_err_set(err, CR_E_INVALID, "vision tower: key '%s' is missing or out of "
                          "range 1..%d", full, max);
    *out = (int)v;
    return CR_OK;
}

cr_status_t rn_siglip_read_hparams(const cr_gguf_t *g, const char *key_prefix,
                                   rn_siglip_layout_t layout, rn_siglip_hparams_t *hp,
                                   cr_err_t *err)
{
    memset(hp, 0, sizeof *hp);
    cr_status_t st;
    if ((st = get_int(g, key_prefix, "image_size", SIGLIP_MAX_IMAGE, &hp->image_size, err)) ||
        (st = get_int(g, key_prefix, "patch_size", 256, &hp->patch_size, err)) ||
        (st = get_int(g, key_prefix, "embedding_length", 16384, &hp->dim, err)) ||
        (st = get_int(g, key_prefix, "attention.head_count", 256, &hp->n_heads, err)) ||
        (st = get_int(g, key_prefix, "feed_forward_length", 65536, &hp->ffn, err)) ||
        (st = get_int(g, key_prefix, "block_count", SIGLIP_MAX_LAYERS, &hp->n_layers, err)))
        return st;
    if (hp->image_size % hp->patch_size)
        return cr_err_set(err, CR_E_INVALID, "vision tower: image_size %d is not a multiple "
                          "of patch_size %d", hp->image_size, hp->patch_size);
    if (hp->dim % hp->n_heads)
        return cr_err_set(err, CR_E_INVALID, "vision tower: embedding_length %d is not a "
                          "multiple of head_count %d", hp->dim, hp->n_heads);
    hp->head_dim = hp->dim / hp->n_heads;
    hp->n_side = hp->image_size / hp->patch_size;
    hp->n_patches = hp->n_side * hp->n_side;
    char key[128];
    snprintf(key, sizeof key, "%sattention.layer_norm_epsilon", key_prefix);
    if (!cr_gguf_get_f32(g, key, &hp->eps) || !(hp->eps > 0) || !isfinite(hp->eps))
        return cr_err_set(err, CR_E_INVALID, "vision tower: key '%s' is missing or not "
                          "positive", key);
    if (layout == RN_SIGLIP_MMPROJ) {
        /* llama.cpp: clip.use_gelu, else clip.use_silu, else quick GELU */
        bool gelu = false, silu = false;
        cr_gguf_get_bool(g, "clip.use_gelu", &gelu);
        cr_gguf_get_bool(g, "clip.use_silu", &silu);
        if (silu && !gelu)
            return cr_err_set(err, CR_E_UNSUPPORTED, "vision tower: SiLU towers "
                              "(clip.use_silu) are not supported");
        hp->gelu_quick = !gelu;
    }
    return CR_OK;
}

static cr_status_t bind_layer(rn_siglip_t *s, const names_t *nm, int l, cr_err_t *err)
{
    const rn_siglip_hparams_t *hp = &s->hp;
    siglip_layer_t *L = &s->layers[l];
    int64_t D = hp->dim, F = hp->ffn;
    const char *up = nm->up, *down = nm->down;
    /* Old conversions swapped ffn_up and ffn_down; llama.cpp swaps them
     * back when ffn_down's rows are D long (an mmproj's gemma3 too). */
    char probe[96];
    snprintf(probe, sizeof probe, "v.blk.%d.%s.weight", l, down);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(s->w.g, probe);
    if (t && t->ne[0] == (uint64_t)D && D != F) {
        up = nm->down;
        down = nm->up;
    }
    struct {
        const char *what, *suffix;
        int64_t cols, rows;
        bool vec;
        be_weight_t *w;
    } parts[] = {
        {nm->ln1, "weight", D, 1, true, &L->ln1}, {nm->ln1, "bias", D, 1, true, &L->ln1_b},
        {nm->q, "weight", D, D, false, &L->wq},   {nm->q, "bias", D, 1, true, &L->bq},
        {nm->k, "weight", D, D, false, &L->wk},   {nm->k, "bias", D, 1, true, &L->bk},
        {nm->v, "weight", D, D, false, &L->wv},   {nm->v, "bias", D, 1, true, &L->bv},
        {nm->o, "weight", D, D, false, &L->wo},   {nm->o, "bias", D, 1, true, &L->bo},
        {nm->ln2, "weight", D, 1, true, &L->ln2}, {nm->ln2, "bias", D, 1, true, &L->ln2_b},
        {up, "weight", D, F, false, &L->up},      {up, "bias", F, 1, true, &L->up_b},
        {down, "weight", F, D, false, &L->down},  {down, "bias", D, 1, true, &L->down_b},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
        char name[96];
        snprintf(name, sizeof name, "v.blk.%d.%s.%s", l, parts[i].what, parts[i].suffix);
        cr_status_t st = rn_vweights_bind(&s->w, name, parts[i].cols, parts[i].rows, true,
                                          parts[i].vec, parts[i].w, err);
        if (st)
            return st;
    }
    return CR_OK;
}

static cr_status_t bind_weights(rn_siglip_t *s, const names_t *nm, cr_err_t *err)
{
    const rn_siglip_hparams_t *hp = &s->hp;
    int64_t D = hp->dim, P = hp->patch_size;
    cr_status_t st;
    if ((st = rn_vweights_bind(&s->w, nm->patch, 3 * P * P, D, true, false, &s->patch, err)) ||
        (st = rn_vweights_bind(&s->w, nm->patch_b, D, 1, true, true, &s->patch_b, err)) ||
        (st = rn_vweights_bind(&s->w, nm->pos, D, hp->n_patches, true, false, &s->pos, err)) ||
        (st = rn_vweights_bind(&s->w, nm->post_ln, D, 1, true, true, &s->post_ln, err)) ||
        (st = rn_vweights_bind(&s->w, nm->post_ln_b, D, 1, true, true, &s->post_ln_b, err)))
        return st;
    if (s->patch.type != CR_TYPE_F32 && s->patch.type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_UNSUPPORTED, "vision tower: %s must be F32 or F16",
                          nm->patch);
    s->layers = calloc((size_t)hp->n_layers, sizeof *s->layers);
    if (!s->layers)
        return cr_err_set(err, CR_E_NOMEM, "vision tower: out of memory");
    for (int l = 0; l < hp->n_layers; l++)
        if ((st = bind_layer(s, nm, l, err)))
            return st;
    return CR_OK;
}

static cr_status_t alloc_buffers(rn_siglip_t *s, cr_err_t *err)
{
    const rn_siglip_hparams_t *hp = &s->hp;
    be_backend_t *be = s->be;
    size_t N = (size_t)hp->n_patches, D = (size_t)hp->dim;
    size_t PP3 = 3 * (size_t)hp->patch_size * (size_t)hp->patch_size;
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&s->x, N * D * 4},   {(void **)&s->xb, N * D * 4},
        {(void **)&s->q, N * D * 4},   {(void **)&s->k, N * D * 4},
        {(void **)&s->v, N * D * 4},   {(void **)&s->att, N * D * 4},
        {(void **)&s->hb, N * (size_t)hp->ffn * 4},
        {(void **)&s->patches, N * PP3 * 4},
        {&s->kc, N * D * 2},           {&s->vc, N * D * 2},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (!(*bufs[i].p = be->ops->alloc(be, bufs[i].bytes)))
            return cr_err_set(err, CR_E_NOMEM, "vision tower: out of memory for %zu bytes "
                              "of activations", bufs[i].bytes);
    s->host_patches = malloc(N * PP3 * sizeof(float));
    s->ids = malloc(N * sizeof(int32_t));
    if (!s->host_patches || !s->ids)
        return cr_err_set(err, CR_E_NOMEM, "vision tower: out of memory");
    int64_t max_cols = CR_MAX(CR_MAX((int64_t)PP3, (int64_t)hp->ffn), (int64_t)D);
    return be->ops->reserve(be, (int)N, max_cols, (int)N, hp->n_heads, err);
}

cr_status_t rn_siglip_load(const cr_gguf_t *g, rn_siglip_layout_t layout,
                           const rn_siglip_hparams_t *hp, be_backend_t *be,
                           rn_siglip_t **out, cr_err_t *err)
{
    *out = NULL;
    const be_ops_ext_t *ext = be_ext_ops(be);
    if (!ext || !ext->layernorm || !ext->add_rows ||
        !(hp->gelu_quick ? (void *)ext->gelu_quick : (void *)ext->gelu))
        return cr_err_set(err, CR_E_UNSUPPORTED, "vision tower: the %s backend lacks the "
                          "ops a SigLIP tower needs", be->ops->name);
    rn_siglip_t *s = calloc(1, sizeof *s);
    if (!s)
        return cr_err_set(err, CR_E_NOMEM, "vision tower: out of memory");
    s->hp = *hp;
    s->be = be;
    s->ext = ext;
    rn_vweights_init(&s->w, g, be, "vision tower");
    cr_status_t st = bind_weights(s, layout == RN_SIGLIP_OLLAMA ? &ollama_names
                                                                : &mmproj_names, err);
    if (!st)
        st = alloc_buffers(s, err);
    if (st) {
        rn_siglip_destroy(&s);
        return st;
    }
    *out = s;
    return CR_OK;
}

void rn_siglip_destroy(rn_siglip_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_siglip_t *s = *self_p;
    be_backend_t *be = s->be;
    rn_vweights_release(&s->w);
    void *bufs[] = {s->x, s->xb, s->q, s->k, s->v, s->att, s->hb, s->patches, s->kc, s->vc};
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    free(s->host_patches);
    free(s->ids);
    free(s->layers);
    free(s);
    *self_p = NULL;
}

uint64_t rn_siglip_weight_bytes(const rn_siglip_t *s) { return s->w.bytes; }

cr_status_t rn_siglip_encode(rn_siglip_t *s, const float *pixels, float *out, cr_err_t *err)
{
    const rn_siglip_hparams_t *hp = &s->hp;
    be_backend_t *be = s->be;
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = s->ext;
    int S = hp->image_size, P = hp->patch_size, NS = hp->n_side;
    int N = hp->n_patches, D = hp->dim, F = hp->ffn;
    size_t PP3 = 3 * (size_t)P * P, ND = (size_t)N * D;

    /* 1. patches: row y*NS+x holds pixels[c][y*P+ky][x*P+kx] in (c, ky,
     *    kx) order, the conv kernel's row layout          [N][3*P*P] */
    for (int py = 0; py < NS; py++)
        for (int px = 0; px < NS; px++) {
            float *dst = s->host_patches + ((size_t)py * NS + px) * PP3;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(dst + ((size_t)ch * P + ky) * P,
                           pixels + ((size_t)ch * S + (size_t)py * P + ky) * S +
                               (size_t)px * P,
                           (size_t)P * sizeof(float));
        }
    op->upload(be, s->patches, s->host_patches, (size_t)N * PP3 * sizeof(float));

    /* 2. patch embedding: x = patches Wp^T + bp                x: [N][D] */
    rn_vision_matmul(be, &s->patch, s->patches, N, s->x);
    ext->add_rows(be, s->x, &s->patch_b, N);
    /* 3. x += position_embd[0..N)                                [N][D] */
    for (int t = 0; t < N; t++)
        s->ids[t] = t;
    op->get_rows(be, &s->pos, s->ids, N, s->xb);
    op->add(be, s->x, s->xb, ND);

    for (int l = 0; l < hp->n_layers; l++) {
        const siglip_layer_t *L = &s->layers[l];
        /* 4. xb = layernorm(x) * ln1 + ln1_b                      [N][D] */
        ext->layernorm(be, s->xb, s->x, &L->ln1, &L->ln1_b, N, D, hp->eps);
        /* 5. q, k, v = xb W^T + b                                 [N][D] */
        rn_vision_matmul(be, &L->wq, s->xb, N, s->q);
        rn_vision_matmul(be, &L->wk, s->xb, N, s->k);
        rn_vision_matmul(be, &L->wv, s->xb, N, s->v);
        ext->add_rows(be, s->q, &L->bq, N);
        ext->add_rows(be, s->k, &L->bk, N);
        ext->add_rows(be, s->v, &L->bv, N);
        /* 6. bidirectional attention: each query sees all N keys [N][D] */
        rn_vision_attend(be, s->att, s->q, s->k, s->v, N, hp->n_heads, hp->head_dim, s->kc,
                         s->vc);
        /* 7. x += att Wo^T + bo                                   [N][D] */
        rn_vision_matmul(be, &L->wo, s->att, N, s->xb);
        ext->add_rows(be, s->xb, &L->bo, N);
        op->add(be, s->x, s->xb, ND);
        /* 8. xb = layernorm(x) * ln2 + ln2_b                      [N][D] */
        ext->layernorm(be, s->xb, s->x, &L->ln2, &L->ln2_b, N, D, hp->eps);
        /* 9. hb = gelu(xb Wup^T + b_up) (tanh, or quick)          [N][F] */
        rn_vision_matmul(be, &L->up, s->xb, N, s->hb);
        ext->add_rows(be, s->hb, &L->up_b, N);
        if (hp->gelu_quick)
            ext->gelu_quick(be, s->hb, s->hb, (size_t)N * F);
        else
            ext->gelu(be, s->hb, s->hb, (size_t)N * F);
        /* 10. x += hb Wdown^T + b_down                            [N][D] */
        rn_vision_matmul(be, &L->down, s->hb, N, s->xb);
        ext->add_rows(be, s->xb, &L->down_b, N);
        op->add(be, s->x, s->xb, ND);
    }
    /* 11. post-LayerNorm                                          [N][D] */
    ext->layernorm(be, s->x, s->x, &s->post_ln, &s->post_ln_b, N, D, hp->eps);
    op->download(be, out, s->x, ND * sizeof(float));
    return be_check(be, err);
}
