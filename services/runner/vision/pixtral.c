/* pixtral.c: loading a Pixtral projector file and running its tower (see
 * pixtral.h).
 *
 * Shapes below: P = patch_size, m = n_merge, nx x ny = patches across and
 * down the resized image, N = nx * ny, Nm = N / m^2 (image tokens),
 * D = dim, F = ffn, H = proj_hidden, E = n_embd (the text model's).
 * Weights are [rows][cols] as model.h describes them (GGUF ne[1] x
 * ne[0]); biases and norm weights are F32 vectors. */
#include "lib/prelude.h"
#include "services/runner/vision/pixtral.h"
#include "services/runner/vision/vops.h"
#include "services/runner/vision/vweights.h"

#include <math.h>

#include "lib/gguf.h"
#include "lib/vision_embedded.h"
#include "services/runner/vision/preprocess.h"

_Static_assert(RN_PIXTRAL_MAX_TOKENS == CR_VISION_PIXTRAL_MAX_TOKENS,
               "vision_embedded.h sizes the scheduler's estimate by the same limit");

/* Tensor names of the two layouts, without ".weight" / ".bias" (per block:
 * after "v.blk.N."). */
typedef struct names {
    const char *patch, *pre_ln;
    const char *ln1, *q, *k, *v, *o, *ln2, *gate, *up, *down;
    const char *in_norm, *merger, *mm1, *mm2;
} names_t;

static const names_t mmproj_names = {
    "v.patch_embd", "v.pre_ln",
    "ln1", "attn_q", "attn_k", "attn_v", "attn_out", "ln2", "ffn_gate", "ffn_up", "ffn_down",
    "mm.input_norm", "mm.patch_merger", "mm.1", "mm.2",
};

/* convert_mistral.go's replacements of the Hugging Face names */
static const names_t ollama_names = {
    "v.patch_conv", "v.encoder_norm",
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
    "ffn_up", "ffn_down",
    "mm.norm", "mm.patch_merger.merging_layer", "mm.linear_1", "mm.linear_2",
};

typedef struct pix_layer {
    be_weight_t ln1, ln1_b;          /* [D], bias optional */
    be_weight_t wq, wk, wv, wo;      /* [D][D] */
    be_weight_t bq, bk, bv, bo;      /* [D] or none */
    be_weight_t ln2, ln2_b;          /* [D], bias optional */
    be_weight_t gate, up;            /* [F][D] */
    be_weight_t gate_b, up_b;        /* [F] or none */
    be_weight_t down, down_b;        /* [D][F], [D] or none */
} pix_layer_t;

struct rn_pixtral {
    rn_pixtral_hparams_t hp;
    cr_gguf_t *g;
    be_backend_t *be;
    const be_ops_ext_t *ext;
    rn_vweights_t w;              /* the bound tensors (vweights.h) */
    const names_t *nm;            /* the file's layout */
    void **copies;                /* Ollama's q/k with rows reordered [2 n_layers] */
    int n_copies;
    float *break_host;            /* Ollama's: token_embd's [IMG_BREAK] row [E] */

    be_weight_t patch, patch_b;   /* [D][3*P*P] (c, ky, kx), [D] or none */
    be_weight_t pre_ln, pre_ln_b; /* [D] or none */
    be_weight_t post_ln, post_ln_b;
    pix_layer_t *layers;          /* [n_layers] */
    be_weight_t in_norm;          /* [D] (with the merger) */
    be_weight_t merger;           /* [D][D*m*m] (c, ky, kx) or none */
    be_weight_t mm1, mm1_b;       /* [H][D], [H] or none */
    be_weight_t mm2, mm2_b;       /* [E][H], [E] or none */
    be_weight_t brk;              /* v.token_embd.img_break [E] */
    const float *img_break;       /* brk's data, in the file's mapping, or NULL */

    /* Backend buffers, sized at load for max_patches. */
    float *x, *xb, *q, *k, *v, *att;  /* [N][D] each */
    float *hb, *hb2;                  /* [N][F] */
    float *ph, *po;                   /* [Nm][H], [Nm][E] */
    float *patches;                   /* [N][3*P*P] */
    void *kc, *vc;                    /* F16 [N][D] */
    /* Host staging. */
    float *host_patches;              /* [N][3*P*P] */
    float *host_merge;                /* [2][N][D]: tower out, blocks */
    int32_t *pos_row, *pos_col;       /* [N] */
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
        if (!cr_gguf_arr_get_f32(a, (uint64_t)i, &out[i]))
            return cr_err_set(err, CR_E_INVALID, "projector: key '%s' must hold floats",
                              key);
    return CR_OK;
}

static cr_status_t read_hparams(rn_pixtral_t *p, cr_err_t *err)
{
    const cr_gguf_t *g = p->g;
    rn_pixtral_hparams_t *hp = &p->hp;
    char type[32] = "";
    if (strcmp(cr_gguf_arch(g), "clip") ||
        (!cr_gguf_get_strz(g, "clip.projector_type", type, sizeof type) &&
         !cr_gguf_get_strz(g, "clip.vision.projector_type", type, sizeof type)) ||
        strcmp(type, "pixtral"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "not a pixtral projector (projector type "
                          "'%s')", type);
    cr_status_t st = CR_OK;
    if (!get_u32(g, "clip.vision.patch_size", 256, &hp->patch_size, err, &st) ||
        !get_u32(g, "clip.vision.embedding_length", 16384, &hp->dim, err, &st) ||
        !get_u32(g, "clip.vision.attention.head_count", 256, &hp->n_heads, err, &st) ||
        !get_u32(g, "clip.vision.feed_forward_length", 65536, &hp->ffn, err, &st) ||
        !get_u32(g, "clip.vision.block_count", 256, &hp->n_layers, err, &st))
        return st;
    uint32_t merge = 1;
    if (cr_gguf_get_u32(g, "clip.vision.spatial_merge_size", &merge) &&
        (merge == 0 || merge > 8))
        return cr_err_set(err, CR_E_INVALID, "projector: clip.vision.spatial_merge_size %u "
                          "is out of range 1..8", merge);
    hp->n_merge = (int)merge;
    if (hp->dim % hp->n_heads || (hp->dim / hp->n_heads) % 4)
        return cr_err_set(err, CR_E_INVALID, "projector: embedding_length %d over %d heads "
                          "is no multiple of 4 per head (2D rotary halves)", hp->dim,
                          hp->n_heads);
    hp->head_dim = hp->dim / hp->n_heads;
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
    if (!gelu && !silu)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: a pixtral tower gated by "
                          "quick GELU is not supported yet (expected clip.use_silu)");
    hp->gelu = gelu;
    hp->rope_theta = 10000.0f;
    return CR_OK;
}

/* Ollama's mistral3 keys, checked with the rest of the file by
 * lib/vision_embedded.h; what the file does not say is Ollama's
 * hard-coded choice (SiLU, CLIP's mean and std). */
static cr_status_t read_hparams_ollama(rn_pixtral_t *p, cr_err_t *err)
{
    rn_pixtral_hparams_t *hp = &p->hp;
    cr_vision_embedded_t ve;
    cr_status_t st = cr_vision_embedded_of(p->g, CR_VISION_MISTRAL3, "mistral3", &ve, err);
    if (st)
        return st;
    hp->patch_size = ve.patch_size;
    hp->n_merge = ve.n_merge;
    hp->dim = ve.dim;
    hp->n_heads = ve.n_heads;
    hp->head_dim = ve.dim / ve.n_heads;
    hp->ffn = ve.ffn;
    hp->n_layers = ve.n_layers;
    hp->eps = ve.eps;
    hp->rope_theta = ve.rope_theta;
    memcpy(hp->mean, cr_vision_clip_mean, sizeof hp->mean);
    memcpy(hp->std, cr_vision_clip_std, sizeof hp->std);
    hp->gelu = false;
    hp->ollama = true;
    return CR_OK;
}

/* The limits every pixtral tower keeps (llama.cpp's set_limit_image_tokens
 * (8, 1024) for this projector). */
static void set_limits(rn_pixtral_hparams_t *hp)
{
    int64_t area = (int64_t)hp->patch_size * hp->patch_size * hp->n_merge * hp->n_merge;
    hp->min_pixels = RN_PIXTRAL_MIN_TOKENS * area;
    hp->max_pixels = RN_PIXTRAL_MAX_TOKENS * area;
    hp->max_patches = RN_PIXTRAL_MAX_TOKENS * hp->n_merge * hp->n_merge;
}

/* Binds `name` ([rows][cols]) into *w and prepares it on the backend. */
static cr_status_t bind(rn_pixtral_t *p, const char *name, int64_t cols, int64_t rows,
                        bool required, bool vec, be_weight_t *w, cr_err_t *err)
{
    return rn_vweights_bind(&p->w, name, cols, rows, required, vec, w, err);
}

/* Ollama's q or k [D][D] (Hugging Face's row order: in each head, the
 * rotary pair (i, i + hd/2)) bound as a copy in llama.cpp's order (pair
 * (2i, 2i + 1)): its row h*hd + 2i + j is the file's h*hd + j*hd/2 + i,
 * the permutation llama.cpp's converter (LlamaModel.permute) applies.
 * Whole rows move, so any type's blocks stay intact. */
static cr_status_t bind_rope_rows(rn_pixtral_t *p, const char *name, be_weight_t *out,
                                  cr_err_t *err)
{
    int64_t D = p->hp.dim, hd = p->hp.head_dim;
    memset(out, 0, sizeof *out);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(p->g, name);
    uint64_t last = t && t->n_dims > 1 ? t->ne[t->n_dims - 1] : 1;
    if (!t || last != (uint64_t)D || t->n_elems / last != (uint64_t)D)
        return cr_err_set(err, CR_E_INVALID, "vision tower: tensor '%s' is missing or not "
                          "%" PRId64 " x %" PRId64, name, D, D);
    size_t rb = (size_t)(t->size_bytes / (uint64_t)D);
    uint8_t *copy = malloc(t->size_bytes);
    if (!copy)
        return cr_err_set(err, CR_E_NOMEM, "vision tower: out of memory for '%s'", name);
    p->copies[p->n_copies++] = copy;
    for (int64_t r = 0; r < D; r++) {
        int64_t h = r / hd, i = r % hd / 2, j = r % 2;
        memcpy(copy + (size_t)r * rb,
               (const uint8_t *)t->data + (size_t)(h * hd + j * (hd / 2) + i) * rb, rb);
    }
    *out = (be_weight_t){.name = t->name, .type = t->type, .n_cols = D, .n_rows = D,
                         .row_bytes = rb, .data = copy};
    cr_status_t st = rn_vweights_add(&p->w, out, err);
    if (!st)
        p->w.bytes += t->size_bytes;
    return st;
}

static cr_status_t bind_layer(rn_pixtral_t *p, int l, cr_err_t *err)
{
    int64_t D = p->hp.dim, F = p->hp.ffn;
    pix_layer_t *L = &p->layers[l];
    const names_t *nm = p->nm;
    struct {
        const char *what, *suffix;
        int64_t cols, rows;
        bool required, vec;
        be_weight_t *w;
    } parts[] = {
        {nm->ln1, "weight", D, 1, true, true, &L->ln1},
        {nm->ln1, "bias", D, 1, false, true, &L->ln1_b},
        {nm->q, "weight", D, D, true, false, &L->wq},
        {nm->q, "bias", D, 1, false, true, &L->bq},
        {nm->k, "weight", D, D, true, false, &L->wk},
        {nm->k, "bias", D, 1, false, true, &L->bk},
        {nm->v, "weight", D, D, true, false, &L->wv},
        {nm->v, "bias", D, 1, false, true, &L->bv},
        {nm->o, "weight", D, D, true, false, &L->wo},
        {nm->o, "bias", D, 1, false, true, &L->bo},
        {nm->ln2, "weight", D, 1, true, true, &L->ln2},
        {nm->ln2, "bias", D, 1, false, true, &L->ln2_b},
        {nm->gate, "weight", D, F, true, false, &L->gate},
        {nm->gate, "bias", F, 1, false, true, &L->gate_b},
        {nm->up, "weight", D, F, true, false, &L->up},
        {nm->up, "bias", F, 1, false, true, &L->up_b},
        {nm->down, "weight", F, D, true, false, &L->down},
        {nm->down, "bias", D, 1, false, true, &L->down_b},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(parts); i++) {
        char name[96];
        snprintf(name, sizeof name, "v.blk.%d.%s.%s", l, parts[i].what, parts[i].suffix);
        cr_status_t st;
        if (p->hp.ollama && (parts[i].w == &L->wq || parts[i].w == &L->wk))
            st = bind_rope_rows(p, name, parts[i].w, err);
        else if (p->hp.ollama && (parts[i].w == &L->bq || parts[i].w == &L->bk) &&
                 cr_gguf_tensor_find(p->g, name))
            /* Pixtral has none; a bias would need the same reordering */
            st = cr_err_set(err, CR_E_UNSUPPORTED, "vision tower: '%s' is not supported",
                            name);
        else
            st = bind(p, name, parts[i].cols, parts[i].rows, parts[i].required,
                      parts[i].vec, parts[i].w, err);
        if (st)
            return st;
    }
    return CR_OK;
}

/* Ollama's [IMG_BREAK] embedding: row break_id of the text model's
 * token_embd, dequantized by the backend's get_rows into host floats. */
static cr_status_t bind_break_row(rn_pixtral_t *p, int32_t break_id, cr_err_t *err)
{
    be_backend_t *be = p->be;
    int64_t E = p->hp.n_embd;
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(p->g, "token_embd.weight");
    if (!t || t->n_dims != 2 || t->ne[0] != (uint64_t)E || break_id < 0 ||
        (uint64_t)break_id >= t->ne[1])
        return cr_err_set(err, CR_E_INVALID, "vision tower: no row %d of a 'token_embd."
                          "weight' %" PRId64 " wide for [IMG_BREAK]", break_id, E);
    size_t rb = (size_t)(t->size_bytes / t->ne[1]);
    p->brk = (be_weight_t){.name = t->name, .type = t->type, .n_cols = E, .n_rows = 1,
                           .row_bytes = rb,
                           .data = (const uint8_t *)t->data + rb * (size_t)break_id};
    cr_status_t st = rn_vweights_add(&p->w, &p->brk, err);
    if (st)
        return st;
    float *row = be->ops->alloc(be, (size_t)E * sizeof(float));
    p->break_host = malloc((size_t)E * sizeof(float));
    if (!row || !p->break_host) {
        if (row)
            be->ops->free(be, row);
        return cr_err_set(err, CR_E_NOMEM, "vision tower: out of memory");
    }
    int32_t zero = 0;
    be->ops->get_rows(be, &p->brk, &zero, 1, row);
    be->ops->download(be, p->break_host, row, (size_t)E * sizeof(float));
    be->ops->free(be, row);
    p->img_break = p->break_host;
    p->hp.has_break = true;
    return be_check(be, err);
}

/* Rows of a 2-D tensor (its ne[1]), 0 when absent or not a matrix. */
static int64_t matrix_rows(const cr_gguf_t *g, const char *name)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, name);
    return t && t->n_dims == 2 && t->ne[1] <= 1u << 20 ? (int64_t)t->ne[1] : 0;
}

/* name "<base>.<suffix>" into buf */
static const char *nm_of(char *buf, size_t cap, const char *base, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", base, suffix);
    return buf;
}

static cr_status_t bind_weights(rn_pixtral_t *p, int32_t break_id, cr_err_t *err)
{
    rn_pixtral_hparams_t *hp = &p->hp;
    const names_t *nm = p->nm;
    int64_t D = hp->dim, P = hp->patch_size, mm = (int64_t)hp->n_merge * hp->n_merge;
    char a[96], b[96];
    cr_status_t st;
    if (cr_gguf_tensor_find(p->g, "v.class_embd") ||
        cr_gguf_tensor_find(p->g, "v.position_embd.weight"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: a pixtral tower with a class "
                          "token or learned positions is not supported");
    if ((st = bind(p, nm_of(a, sizeof a, nm->patch, "weight"), 3 * P * P, D, true, false,
                   &p->patch, err)) ||
        (st = bind(p, nm_of(a, sizeof a, nm->patch, "bias"), D, 1, false, true, &p->patch_b,
                   err)) ||
        (st = bind(p, nm_of(a, sizeof a, nm->pre_ln, "weight"), D, 1, false, true, &p->pre_ln,
                   err)) ||
        (st = bind(p, nm_of(a, sizeof a, nm->pre_ln, "bias"), D, 1, false, true, &p->pre_ln_b,
                   err)) ||
        (st = bind(p, "v.post_ln.weight", D, 1, false, true, &p->post_ln, err)) ||
        (st = bind(p, "v.post_ln.bias", D, 1, false, true, &p->post_ln_b, err)))
        return st;
    if (p->patch.type != CR_TYPE_F32 && p->patch.type != CR_TYPE_F16)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: %s.weight must be F32 or F16",
                          nm->patch);
    if (!(p->layers = calloc((size_t)hp->n_layers, sizeof *p->layers)) ||
        !(p->copies = calloc(2 * (size_t)hp->n_layers, sizeof *p->copies)))
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    for (int l = 0; l < hp->n_layers; l++)
        if ((st = bind_layer(p, l, err)))
            return st;
    /* The merger exists in Mistral Small's files, not in Pixtral 12B's. */
    hp->has_merger = cr_gguf_tensor_find(p->g, nm_of(a, sizeof a, nm->merger, "weight")) != NULL;
    if (hp->has_merger != (hp->n_merge > 1))
        return cr_err_set(err, CR_E_INVALID, "projector: %s %s, but spatial_merge_size is %d",
                          a, hp->has_merger ? "present" : "missing", hp->n_merge);
    if (hp->has_merger &&
        ((st = bind(p, nm_of(b, sizeof b, nm->in_norm, "weight"), D, 1, true, true,
                    &p->in_norm, err)) ||
         (st = bind(p, a, D * mm, D, true, false, &p->merger, err))))
        return st;
    hp->proj_hidden = (int)matrix_rows(p->g, nm_of(a, sizeof a, nm->mm1, "weight"));
    hp->n_embd = (int)matrix_rows(p->g, nm_of(b, sizeof b, nm->mm2, "weight"));
    if (!hp->proj_hidden || !hp->n_embd)
        return cr_err_set(err, CR_E_INVALID, "projector: tensors '%s' and '%s' must be "
                          "matrices", a, b);
    int64_t H = hp->proj_hidden, E = hp->n_embd;
    if ((st = bind(p, a, D, H, true, false, &p->mm1, err)) ||
        (st = bind(p, nm_of(a, sizeof a, nm->mm1, "bias"), H, 1, false, true, &p->mm1_b,
                   err)) ||
        (st = bind(p, b, H, E, true, false, &p->mm2, err)) ||
        (st = bind(p, nm_of(b, sizeof b, nm->mm2, "bias"), E, 1, false, true, &p->mm2_b, err)))
        return st;
    if (hp->ollama)
        return bind_break_row(p, break_id, err);
    if ((st = bind(p, "v.token_embd.img_break", E, 1, true, true, &p->brk, err)))
        return st;
    p->img_break = p->brk.data;
    hp->has_break = true;
    return CR_OK;
}

static cr_status_t alloc_buffers(rn_pixtral_t *p, cr_err_t *err)
{
    const rn_pixtral_hparams_t *hp = &p->hp;
    be_backend_t *be = p->be;
    size_t N = (size_t)hp->max_patches, D = (size_t)hp->dim, F = (size_t)hp->ffn;
    size_t Nm = N / ((size_t)hp->n_merge * hp->n_merge);
    size_t PP3 = 3 * (size_t)hp->patch_size * hp->patch_size;
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&p->x, N * D * 4},   {(void **)&p->xb, N * D * 4},
        {(void **)&p->q, N * D * 4},   {(void **)&p->k, N * D * 4},
        {(void **)&p->v, N * D * 4},   {(void **)&p->att, N * D * 4},
        {(void **)&p->hb, N * F * 4},  {(void **)&p->hb2, N * F * 4},
        {(void **)&p->ph, Nm * (size_t)hp->proj_hidden * 4},
        {(void **)&p->po, Nm * (size_t)hp->n_embd * 4},
        {(void **)&p->patches, N * PP3 * 4},
        {&p->kc, N * D * 2},           {&p->vc, N * D * 2},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (!(*bufs[i].p = be->ops->alloc(be, bufs[i].bytes)))
            return cr_err_set(err, CR_E_NOMEM, "projector: out of memory for %zu bytes of "
                              "activations", bufs[i].bytes);
    p->host_patches = malloc(N * PP3 * sizeof(float));
    p->host_merge = malloc(2 * N * D * sizeof(float));
    p->pos_row = malloc(N * sizeof(int32_t));
    p->pos_col = malloc(N * sizeof(int32_t));
    if (!p->host_patches || !p->host_merge || !p->pos_row || !p->pos_col)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    int64_t max_cols = CR_MAX(CR_MAX((int64_t)PP3, (int64_t)F),
                              CR_MAX((int64_t)hp->proj_hidden, (int64_t)hp->n_embd));
    max_cols = CR_MAX(max_cols, (int64_t)D * hp->n_merge * hp->n_merge);
    return be->ops->reserve(be, (int)N, max_cols, (int)N, hp->n_heads, err);
}

static cr_status_t load(const char *path, be_backend_t *be, bool ollama, int32_t break_id,
                        rn_pixtral_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_pixtral_t *p = calloc(1, sizeof *p);
    if (!p)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    p->be = be;
    p->ext = be_ext_ops(be);
    p->nm = ollama ? &ollama_names : &mmproj_names;
    cr_status_t st = cr_gguf_open(path, &p->g, err);
    if (!st)
        rn_vweights_init(&p->w, p->g, be, ollama ? "vision tower" : "projector");
    if (!st)
        st = ollama ? read_hparams_ollama(p, err) : read_hparams(p, err);
    if (!st)
        set_limits(&p->hp);
    if (!st && (!p->ext || !p->ext->add_rows || !p->ext->gelu || !p->ext->rope_yarn ||
                (p->hp.gelu && !p->ext->geglu)))
        st = cr_err_set(err, CR_E_UNSUPPORTED, "projector: the %s backend lacks the ops a "
                        "pixtral tower needs", be->ops->name);
    if (!st)
        st = bind_weights(p, break_id, err);
    if (!st)
        st = alloc_buffers(p, err);
    if (st) {
        rn_pixtral_destroy(&p);
        return st;
    }
    *out = p;
    return CR_OK;
}

cr_status_t rn_pixtral_load(const char *path, be_backend_t *be, rn_pixtral_t **out,
                            cr_err_t *err)
{
    return load(path, be, false, -1, out, err);
}

cr_status_t rn_pixtral_load_ollama(const char *path, be_backend_t *be, int32_t break_id,
                                   rn_pixtral_t **out, cr_err_t *err)
{
    return load(path, be, true, break_id, out, err);
}

void rn_pixtral_destroy(rn_pixtral_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_pixtral_t *p = *self_p;
    be_backend_t *be = p->be;
    rn_vweights_release(&p->w);
    void *bufs[] = {p->x,  p->xb, p->q,  p->k,       p->v,  p->att, p->hb,
                    p->hb2, p->ph, p->po, p->patches, p->kc, p->vc};
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    free(p->host_patches);
    free(p->host_merge);
    free(p->pos_row);
    free(p->pos_col);
    free(p->layers);
    for (int i = 0; i < p->n_copies; i++)
        free(p->copies[i]);
    free(p->copies);
    free(p->break_host);
    cr_gguf_close(&p->g);
    free(p);
    *self_p = NULL;
}

const rn_pixtral_hparams_t *rn_pixtral_hparams(const rn_pixtral_t *p) { return &p->hp; }

uint64_t rn_pixtral_weight_bytes(const rn_pixtral_t *p) { return p->w.bytes; }

/* ---- preprocessing ------------------------------------------------------ */

/* llama.cpp's round/ceil/floor_by_factor, in float as it computes them. */
static int by_factor(float x, int f, float (*fn)(float))
{
    return (int)fn(x / (float)f) * f;
}

cr_status_t rn_pixtral_fit(const rn_pixtral_t *p, int width, int height, int *out_w,
                           int *out_h, int *n_rows, cr_err_t *err)
{
    const rn_pixtral_hparams_t *hp = &p->hp;
    int a = hp->patch_size * hp->n_merge;
    if (width < 1 || height < 1)
        return cr_err_set(err, CR_E_INVALID, "image has no pixels");
    int w = CR_MAX(a, by_factor((float)width, a, roundf));
    int h = CR_MAX(a, by_factor((float)height, a, roundf));
    if ((int64_t)w * h > hp->max_pixels) {
        float beta = sqrtf((float)height * (float)width / (float)hp->max_pixels);
        h = CR_MAX(a, by_factor((float)height / beta, a, floorf));
        w = CR_MAX(a, by_factor((float)width / beta, a, floorf));
    } else if ((int64_t)w * h < hp->min_pixels) {
        float beta = sqrtf((float)hp->min_pixels / ((float)height * (float)width));
        h = by_factor((float)height * beta, a, ceilf);
        w = by_factor((float)width * beta, a, ceilf);
    }
    int64_t patches = (int64_t)(w / hp->patch_size) * (h / hp->patch_size);
    if (w < a || h < a || patches > hp->max_patches)
        return cr_err_set(err, CR_E_INVALID, "image of %dx%d is too elongated for the "
                          "vision model (it would take %" PRId64 " patches, at most %d)",
                          width, height, patches, hp->max_patches);
    int gx = w / a, gy = h / a;
    *out_w = w;
    *out_h = h;
    *n_rows = gx * gy + (hp->has_break ? gy - 1 : 0);
    return CR_OK;
}

cr_status_t rn_pixtral_preprocess(const rn_pixtral_t *p, const rn_image_t *im, float *pixels,
                                  int *out_w, int *out_h, cr_err_t *err)
{
    int w, h, rows;
    cr_status_t st = rn_pixtral_fit(p, im->width, im->height, &w, &h, &rows, err);
    if (st)
        return st;
    static const uint8_t black[3] = {0, 0, 0};
    rn_image_t *box = NULL;
    if ((st = rn_preproc_fit_box(im, w, h, black, RN_PREPROC_BICUBIC, &box, err)))
        return st;
    rn_preproc_normalize(box, p->hp.mean, p->hp.std, pixels);
    rn_image_destroy(&box);
    *out_w = w;
    *out_h = h;
    return CR_OK;
}

/* ---- the forward pass -------------------------------------------------- */

static void add_bias(rn_pixtral_t *p, float *y, const be_weight_t *b, int n)
{
    if (b->data)
        p->ext->add_rows(p->be, y, b, n);
}

/* y = rmsnorm(x) * w (+ b) over n rows of `dim`. */
static void rms(rn_pixtral_t *p, float *y, const float *x, const be_weight_t *w,
                const be_weight_t *b, int n, int dim)
{
    p->be->ops->rmsnorm(p->be, y, x, w, n, dim, p->hp.eps);
    if (b)
        add_bias(p, y, b, n);
}

/* 2D rotary positions on x [N][n_heads][head_dim] in place: dims
 * [0, hd/2) of each head rotate by the patch's row at frequencies
 * theta^(-4i/hd), dims [hd/2, hd) by its column at theta^(-(4i+2)/hd)
 * (the odd ones: the second rope's freq_scale is theta^(-2/hd)), adjacent
 * pairs, as llama.cpp's build_rope_2d with interleave_freq. */
static void rope_2d(rn_pixtral_t *p, float *x, int n)
{
    const rn_pixtral_hparams_t *hp = &p->hp;
    int hd = hp->head_dim;
    be_rope_yarn_t y = {.freq_base = hp->rope_theta, .freq_scale = 1.0f,
                        .attn_factor = 1.0f, .normal = true};
    p->ext->rope_yarn(p->be, x, n, hp->n_heads, hd, hd / 2, p->pos_row, &y, NULL);
    y.freq_scale = powf(hp->rope_theta, -2.0f / (float)hd);
    /* the op rotates the first hd/2 dims of each head: starting at dim
     * hd/2 those are the column half (nothing past the row is touched) */
    p->ext->rope_yarn(p->be, x + hd / 2, n, hp->n_heads, hd, hd / 2, p->pos_col, &y, NULL);
}

cr_status_t rn_pixtral_encode(rn_pixtral_t *p, const float *pixels, int w, int h, float *out,
                              cr_err_t *err)
{
    const rn_pixtral_hparams_t *hp = &p->hp;
    be_backend_t *be = p->be;
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = p->ext;
    int P = hp->patch_size, m = hp->n_merge, D = hp->dim, F = hp->ffn;
    int a = P * m;
    if (w < a || h < a || w % a || h % a || (w / P) * (h / P) > hp->max_patches)
        return cr_err_set(err, CR_E_INVALID, "pixtral: image size %dx%d is not one "
                          "rn_pixtral_fit gives", w, h);
    int nx = w / P, ny = h / P, N = nx * ny;
    int gx = nx / m, gy = ny / m, Nm = gx * gy;
    size_t PP3 = 3 * (size_t)P * P, ND = (size_t)N * D;

    /* 1. patches: row y*nx+x holds pixels[c][y*P+ky][x*P+kx] in (c, ky, kx)
     *    order, the layout of the conv kernel's rows          [N][3*P*P] */
    for (int py = 0; py < ny; py++)
        for (int px = 0; px < nx; px++) {
            float *dst = p->host_patches + ((size_t)py * nx + px) * PP3;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(dst + ((size_t)ch * P + ky) * P,
                           pixels + ((size_t)ch * h + (size_t)py * P + ky) * w +
                               (size_t)px * P,
                           (size_t)P * sizeof(float));
        }
    op->upload(be, p->patches, p->host_patches, (size_t)N * PP3 * sizeof(float));
    /* 1a. each patch's row and column, the rotary positions        [N] */
    for (int i = 0; i < N; i++) {
        p->pos_row[i] = i / nx;
        p->pos_col[i] = i % nx;
    }

    /* 2. patch embedding (+ bias), pre-RMSNorm                     [N][D] */
    rn_vision_matmul(be, &p->patch, p->patches, N, p->x);
    add_bias(p, p->x, &p->patch_b, N);
    if (p->pre_ln.data)
        rms(p, p->x, p->x, &p->pre_ln, &p->pre_ln_b, N, D);

    for (int l = 0; l < hp->n_layers; l++) {
        const pix_layer_t *L = &p->layers[l];
        /* 3. xb = rmsnorm(x) * ln1                                [N][D] */
        rms(p, p->xb, p->x, &L->ln1, &L->ln1_b, N, D);
        /* 4. q, k, v = xb W^T (+ b); q, k rotated by 2D positions [N][D] */
        rn_vision_matmul(be, &L->wq, p->xb, N, p->q);
        rn_vision_matmul(be, &L->wk, p->xb, N, p->k);
        rn_vision_matmul(be, &L->wv, p->xb, N, p->v);
        add_bias(p, p->q, &L->bq, N);
        add_bias(p, p->k, &L->bk, N);
        add_bias(p, p->v, &L->bv, N);
        rope_2d(p, p->q, N);
        rope_2d(p, p->k, N);
        /* 5. bidirectional attention: each query sees all N keys [N][D] */
        rn_vision_attend(be, p->att, p->q, p->k, p->v, N, hp->n_heads, hp->head_dim, p->kc,
                         p->vc);
        /* 6. x += att Wo^T (+ bo)                                 [N][D] */
        rn_vision_matmul(be, &L->wo, p->att, N, p->xb);
        add_bias(p, p->xb, &L->bo, N);
        op->add(be, p->x, p->xb, ND);
        /* 7. xb = rmsnorm(x) * ln2                                [N][D] */
        rms(p, p->xb, p->x, &L->ln2, &L->ln2_b, N, D);
        /* 8. hb = act(xb Wg^T) * (xb Wu^T)                        [N][F] */
        rn_vision_matmul(be, &L->gate, p->xb, N, p->hb);
        rn_vision_matmul(be, &L->up, p->xb, N, p->hb2);
        add_bias(p, p->hb, &L->gate_b, N);
        add_bias(p, p->hb2, &L->up_b, N);
        if (hp->gelu)
            ext->geglu(be, p->hb, p->hb, p->hb2, (size_t)N * F);
        else
            op->swiglu(be, p->hb, p->hb, p->hb2, (size_t)N * F);
        /* 9. x += hb Wd^T (+ bd)                                  [N][D] */
        rn_vision_matmul(be, &L->down, p->hb, N, p->xb);
        add_bias(p, p->xb, &L->down_b, N);
        op->add(be, p->x, p->xb, ND);
    }
    if (p->post_ln.data)
        rms(p, p->x, p->x, &p->post_ln, &p->post_ln_b, N, D);

    const float *feat = p->x; /* [Nm][D] going into the projector */
    if (hp->has_merger) {
        /* 10. xb = rmsnorm(x) * input_norm                        [N][D] */
        rms(p, p->xb, p->x, &p->in_norm, NULL, N, D);
        /* 11. each m x m block of patches as one row, element
         *     (c, ky, kx) at c*m*m + ky*m + kx (torch's unfold order).
         *     No backend op permutes like this yet: on the host.
         *                                                   [Nm][D*m*m] */
        op->download(be, p->host_merge, p->xb, ND * sizeof(float));
        float *dst = p->host_merge + ND;
        size_t mm = (size_t)m * m;
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++) {
                float *row = dst + ((size_t)by * gx + bx) * mm * D;
                for (int ky = 0; ky < m; ky++)
                    for (int kx = 0; kx < m; kx++) {
                        const float *src = p->host_merge +
                            ((size_t)(by * m + ky) * nx + (size_t)(bx * m + kx)) * D;
                        for (int c = 0; c < D; c++)
                            row[(size_t)c * mm + (size_t)ky * m + kx] = src[c];
                    }
            }
        op->upload(be, p->q, dst, ND * sizeof(float));
        /* 12. merged = blocks Wmerge^T                            [Nm][D] */
        rn_vision_matmul(be, &p->merger, p->q, Nm, p->xb);
        feat = p->xb;
    }
    /* 13. ph = gelu(feat Wmm1^T (+ b1))                           [Nm][H] */
    rn_vision_matmul(be, &p->mm1, feat, Nm, p->ph);
    add_bias(p, p->ph, &p->mm1_b, Nm);
    ext->gelu(be, p->ph, p->ph, (size_t)Nm * hp->proj_hidden);
    /* 14. po = ph Wmm2^T (+ b2)                                   [Nm][E] */
    rn_vision_matmul(be, &p->mm2, p->ph, Nm, p->po);
    add_bias(p, p->po, &p->mm2_b, Nm);
    /* 15. out: each row of gx tokens, then [IMG_BREAK] but after the last
     *                                          [Nm + gy - 1][E] */
    size_t E = (size_t)hp->n_embd, row_stride = (size_t)gx + (hp->has_break ? 1 : 0);
    for (int r = 0; r < gy; r++) {
        float *dst = out + (size_t)r * row_stride * E;
        op->download(be, dst, p->po + (size_t)r * gx * E, (size_t)gx * E * sizeof(float));
        if (hp->has_break && r + 1 < gy)
            memcpy(dst + (size_t)gx * E, p->img_break, E * sizeof(float));
    }
    return be_check(be, err);
}
