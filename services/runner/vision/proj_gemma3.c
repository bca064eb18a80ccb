/* proj_gemma3.c: gemma3's vision tower and projector (see proj_gemma3.h).
 *
 * Shapes: N = the tower's patches (n_side^2), D = its dim, G = n_side /
 * merge, M = G^2 tokens, E = n_embd. */
#include "lib/prelude.h"
#include "services/runner/vision/proj_gemma3.h"
#include "services/runner/vision/vops.h"

#include <math.h>

#include "services/runner/backend/cpu/quant.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/preprocess.h"
#include "services/runner/vision/vweights.h"

#define GEMMA3V_MAX_EMBD (1 << 16)

struct rn_gemma3v {
    rn_gemma3v_info_t info;
    be_backend_t *be;
    rn_siglip_t *tower;
    rn_vweights_t w;
    be_weight_t norm;  /* [D] soft embedding norm */
    be_weight_t proj;  /* [E][D], transposed from the file's [D][E] */
    void *proj_data;   /* proj's host bytes (owned) */
    float *feat;       /* host [N][D]: the tower's output */
    float *pooled;     /* host [M][D] */
    float *pb, *po;    /* backend [M][D], [M][E] */
};

bool rn_gemma3v_detect(const cr_gguf_t *g, rn_siglip_layout_t *layout)
{
    char type[32] = "";
    const char *arch = cr_gguf_arch(g);
    uint32_t n = 0;
    if (!strcmp(arch, "clip") &&
        cr_gguf_get_strz(g, "clip.projector_type", type, sizeof type) &&
        !strcmp(type, "gemma3")) {
        *layout = RN_SIGLIP_MMPROJ;
        return true;
    }
    if (!strcmp(arch, "gemma3") && cr_gguf_get_u32(g, "gemma3.vision.block_count", &n) &&
        n > 0) {
        *layout = RN_SIGLIP_OLLAMA;
        return true;
    }
    return false;
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

/* merge, mean and std as the layout says. */
static cr_status_t read_info(const cr_gguf_t *g, rn_siglip_layout_t layout,
                             rn_gemma3v_info_t *in, cr_err_t *err)
{
    int NS = in->tower.n_side;
    cr_status_t st;
    if (layout == RN_SIGLIP_MMPROJ) {
        uint32_t merge = 4; /* llama.cpp's default for every gemma3 size */
        cr_gguf_get_u32(g, "clip.vision.projector.scale_factor", &merge);
        in->merge = (int)CR_MIN(merge, (uint32_t)INT_MAX);
        if ((st = get_vec3(g, "clip.vision.image_mean", in->mean, err)) ||
            (st = get_vec3(g, "clip.vision.image_std", in->std, err)))
            return st;
    } else {
        uint32_t tokens = 256;
        if (!cr_gguf_get_u32(g, "gemma3.mm.tokens_per_image", &tokens))
            cr_gguf_get_u32(g, "gemma3.mm_tokens_per_image", &tokens);
        int side = (int)lround(sqrt((double)tokens));
        if (tokens == 0 || (uint32_t)(side * side) != tokens || NS % side)
            return cr_err_set(err, CR_E_INVALID, "projector: %u tokens per image do not "
                              "pool a %dx%d patch grid", tokens, NS, NS);
        in->merge = NS / side;
        for (int i = 0; i < 3; i++)
            in->mean[i] = in->std[i] = 0.5f; /* SigLIP's, as Ollama uses */
    }
    for (int i = 0; i < 3; i++)
        if (!(in->std[i] != 0))
            return cr_err_set(err, CR_E_INVALID, "projector: image_std must not be zero");
    if (in->merge < 1 || NS % in->merge)
        return cr_err_set(err, CR_E_INVALID, "projector: pooling %d does not divide the "
                          "%dx%d patch grid", in->merge, NS, NS);
    int G = NS / in->merge;
    in->n_tokens = G * G;
    return CR_OK;
}

/* The file's projection x W (ne {E, D}: D rows of E) as a weight [E][D]
 * the matmul op takes: F16 stays F16 (so activations round as llama.cpp's
 * F16 matmul rounds them), anything else becomes F32. */
static cr_status_t bind_projection(rn_gemma3v_t *m, const char *name, cr_err_t *err)
{
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(m->w.g, name);
    int D = m->info.tower.dim;
    if (!t || t->n_dims != 2)
        return cr_err_set(err, CR_E_INVALID, "projector: tensor '%s' is missing or not a "
                          "matrix", name);
    if (t->ne[1] != (uint64_t)D || t->ne[0] == 0 || t->ne[0] > GEMMA3V_MAX_EMBD)
        return cr_err_set(err, CR_E_INVALID, "projector: tensor '%s' is %" PRIu64 " x %"
                          PRIu64 ", expected %d rows (the tower's width)", name, t->ne[1],
                          t->ne[0], D);
    const be_type_traits_t *src = be_type_traits_at(t->type, BE_SIMD_SCALAR);
    if (!src || !src->to_float)
        return cr_err_set(err, CR_E_UNSUPPORTED, "projector: tensor '%s' has a type this "
                          "runner cannot read", name);
    int E = (int)t->ne[0];
    m->info.n_embd = E;
    cr_type_t type = t->type == CR_TYPE_F16 ? CR_TYPE_F16 : CR_TYPE_F32;
    size_t el = type == CR_TYPE_F16 ? 2 : 4;
    size_t src_row = (size_t)(t->size_bytes / (uint64_t)D);
    float *tmp = malloc((size_t)E * D * sizeof *tmp), *row = malloc((size_t)E * sizeof *row);
    m->proj_data = malloc((size_t)E * D * el);
    if (!tmp || !row || !m->proj_data) {
        free(tmp);
        free(row);
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory for the projection");
    }
    for (int d = 0; d < D; d++) {
        src->to_float((const uint8_t *)t->data + (size_t)d * src_row, row, E);
        for (int e = 0; e < E; e++)
            tmp[(size_t)e * D + d] = row[e];
    }
    if (type == CR_TYPE_F16)
        be_type_traits_at(CR_TYPE_F16, BE_SIMD_SCALAR)->from_float(tmp, m->proj_data,
                                                                 (int64_t)E * D);
    else
        memcpy(m->proj_data, tmp, (size_t)E * D * sizeof *tmp);
    free(tmp);
    free(row);
    m->proj = (be_weight_t){
        .name = t->name,
        .type = type,
        .n_cols = D,
        .n_rows = E,
        .row_bytes = (size_t)D * el,
        .data = m->proj_data,
    };
    cr_status_t st = rn_vweights_add(&m->w, &m->proj, err);
    if (!st)
        m->w.bytes += t->size_bytes;
    return st;
}

cr_status_t rn_gemma3v_load(const cr_gguf_t *g, be_backend_t *be, rn_gemma3v_t **out,
                            cr_err_t *err)
{
    *out = NULL;
    rn_siglip_layout_t layout;
    if (!rn_gemma3v_detect(g, &layout))
        return cr_err_set(err, CR_E_INVALID, "not a gemma3 vision projector");
    rn_gemma3v_t *m = calloc(1, sizeof *m);
    if (!m)
        return cr_err_set(err, CR_E_NOMEM, "projector: out of memory");
    m->be = be;
    rn_vweights_init(&m->w, g, be, "projector");
    bool mmproj = layout == RN_SIGLIP_MMPROJ;
    rn_gemma3v_info_t *in = &m->info;
    cr_status_t st = rn_siglip_read_hparams(g, mmproj ? "clip.vision." : "gemma3.vision.",
                                            layout, &in->tower, err);
    if (!st)
        st = read_info(g, layout, in, err);
    if (!st)
        st = rn_siglip_load(g, layout, &in->tower, be, &m->tower, err);
    if (!st)
        st = rn_vweights_bind(&m->w, mmproj ? "mm.soft_emb_norm.weight"
                                             : "mm.mm_soft_emb_norm.weight",
                              in->tower.dim, 1, true, true, &m->norm, err);
    if (!st)
        st = bind_projection(m, mmproj ? "mm.input_projection.weight"
                                       : "mm.mm_input_projection.weight", err);
    if (!st) {
        size_t N = (size_t)in->tower.n_patches, D = (size_t)in->tower.dim;
        size_t M = (size_t)in->n_tokens, E = (size_t)in->n_embd;
        m->feat = malloc(N * D * sizeof *m->feat);
        m->pooled = malloc(M * D * sizeof *m->pooled);
        m->pb = be->ops->alloc(be, M * D * sizeof(float));
        m->po = be->ops->alloc(be, M * E * sizeof(float));
        if (!m->feat || !m->pooled || !m->pb || !m->po)
            st = cr_err_set(err, CR_E_NOMEM, "projector: out of memory for activations");
        else
            st = be->ops->reserve(be, (int)M, (int64_t)CR_MAX(D, E), 1, 1, err);
    }
    if (st) {
        rn_gemma3v_destroy(&m);
        return st;
    }
    *out = m;
    return CR_OK;
}

void rn_gemma3v_destroy(rn_gemma3v_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_gemma3v_t *m = *self_p;
    rn_vweights_release(&m->w);
    rn_siglip_destroy(&m->tower);
    if (m->pb)
        m->be->ops->free(m->be, m->pb);
    if (m->po)
        m->be->ops->free(m->be, m->po);
    free(m->proj_data);
    free(m->feat);
    free(m->pooled);
    free(m);
    *self_p = NULL;
}

const rn_gemma3v_info_t *rn_gemma3v_info(const rn_gemma3v_t *m) { return &m->info; }

uint64_t rn_gemma3v_weight_bytes(const rn_gemma3v_t *m)
{
    return m->w.bytes + rn_siglip_weight_bytes(m->tower);
}

void rn_gemma3v_describe(const rn_gemma3v_t *m, rn_clip_hparams_t *hp)
{
    const rn_gemma3v_info_t *in = &m->info;
    const rn_siglip_hparams_t *t = &in->tower;
    memset(hp, 0, sizeof *hp);
    snprintf(hp->projector, sizeof hp->projector, "gemma3");
    hp->image_size = t->image_size;
    hp->patch_size = t->patch_size;
    hp->n_side = t->n_side;
    hp->n_patches = in->n_tokens;
    hp->n_pos = t->n_patches;
    hp->dim = t->dim;
    hp->n_heads = t->n_heads;
    hp->head_dim = t->head_dim;
    hp->ffn = t->ffn;
    hp->n_layers = hp->n_layers_run = t->n_layers;
    hp->eps = t->eps;
    memcpy(hp->mean, in->mean, sizeof hp->mean);
    memcpy(hp->std, in->std, sizeof hp->std);
    hp->act = t->gelu_quick ? RN_CLIP_ACT_GELU_QUICK : RN_CLIP_ACT_GELU;
    hp->n_embd = in->n_embd;
    hp->non_causal = true;
    snprintf(hp->img_beg, sizeof hp->img_beg, "<start_of_image>");
    snprintf(hp->img_end, sizeof hp->img_end, "<end_of_image>");
}

cr_status_t rn_gemma3v_preprocess(const rn_gemma3v_t *m, const rn_image_t *im, float *pixels,
                                  cr_err_t *err)
{
    static const uint8_t black[3] = {0, 0, 0};
    rn_image_t *sq = NULL;
    cr_status_t st = rn_preproc_fit_square(im, m->info.tower.image_size, black,
                                           RN_PREPROC_BILINEAR, &sq, err);
    if (st)
        return st;
    rn_preproc_normalize(sq, m->info.mean, m->info.std, pixels);
    rn_image_destroy(&sq);
    return CR_OK;
}

cr_status_t rn_gemma3v_encode(rn_gemma3v_t *m, const float *pixels, float *out,
                              cr_err_t *err)
{
    const rn_gemma3v_info_t *in = &m->info;
    be_backend_t *be = m->be;
    int NS = in->tower.n_side, D = in->tower.dim, K = in->merge, G = NS / K;
    int M = in->n_tokens, E = in->n_embd;

    /* 1. the tower                                            feat: [N][D] */
    cr_status_t st = rn_siglip_encode(m->tower, pixels, m->feat, err);
    if (st)
        return st;
    /* 2. average pooling of K x K patch squares, on the host (no backend
     *    op averages rows; M = N / K^2 rows come out): each token's sum
     *    runs over ky, then kx, then / K^2, as ggml's pool_2d   [M][D] */
    for (int oy = 0; oy < G; oy++)
        for (int ox = 0; ox < G; ox++) {
            float *dst = m->pooled + ((size_t)oy * G + ox) * D;
            memset(dst, 0, (size_t)D * sizeof *dst);
            for (int ky = 0; ky < K; ky++)
                for (int kx = 0; kx < K; kx++) {
                    const float *src =
                        m->feat + ((size_t)(oy * K + ky) * NS + (size_t)(ox * K + kx)) * D;
                    for (int d = 0; d < D; d++)
                        dst[d] += src[d];
                }
            for (int d = 0; d < D; d++)
                dst[d] /= (float)(K * K);
        }
    be->ops->upload(be, m->pb, m->pooled, (size_t)M * D * sizeof(float));
    /* 3. soft embedding norm: pb = pb / rms(pb) * norm          [M][D] */
    be->ops->rmsnorm(be, m->pb, m->pb, &m->norm, M, D, in->tower.eps);
    /* 4. input projection: po = pb W (W stored transposed)      [M][E] */
    rn_vision_matmul(be, &m->proj, m->pb, M, m->po);
    be->ops->download(be, out, m->po, (size_t)M * E * sizeof(float));
    return be_check(be, err);
}
