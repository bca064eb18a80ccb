/* test_gemma3v.c: gemma3's vision side (vision/siglip.c, proj_gemma3.c,
 * through clip.h's entry points).
 *
 * The tower and projector over a synthetic mmproj (corral-gemma3v-synth's
 * layout, F32) against a scalar double-precision forward pass written here
 * from llama.cpp's graph (siglip.cpp): patch convolution with bias,
 * learned positions, LayerNorm blocks with a GELU (tanh) MLP, post-
 * LayerNorm, 4x4 average pooling, RMS norm times the soft embedding norm,
 * then x W with the file's [dim][n_embd] projection. Every output row must
 * have cosine >= 0.9999 with the reference and the whole output a relative
 * error below 1e-3 (measured: 1.5e-5 and 3.5e-5 with the F16 cache
 * attention op); the tolerance is sized for that op's F16 rounding of
 * keys, values and probabilities, which backends without attention_full
 * still use; the CPU's attention_full and everything else are F32. The cosine alone would pass a quick GELU for
 * GELU (0.99997), the relative error does not (5.5e-3). Ollama's single
 * file with the same numbers must give the same bytes. Bad files are
 * refused with the right status and a message that names the problem. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <math.h>
#include <unistd.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "tools/synth/synth.h"

static char dir_g[] = "/tmp/corral-test-gemma3v-XXXXXX";

static rn_image_t *gradient(int w, int h)
{
    rn_image_t *im = rn_image_new(w, h);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = im->rgb + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)((x * 7 + y * 3) % 256);
            p[1] = (uint8_t)((x * y) % 256);
            p[2] = (uint8_t)((255 - x * 2 - y) & 255);
        }
    return im;
}

/* ---- the scalar reference ---------------------------------------------- */

static const cr_gguf_t *ref_g;

static const float *T_(const char *fmt, ...) CR_PRINTF(1, 2);
static const float *T_(const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(ref_g, name);
    if (!t || t->type != CR_TYPE_F32) {
        fprintf(stderr, "reference: no F32 tensor %s\n", name);
        exit(1);
    }
    return t->data;
}

/* y[n][rows] = x[n][cols] W^T + b (W [rows][cols]) */
static void lin(const double *x, int n, int cols, const float *w, const float *b, int rows,
                double *y)
{
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double s = b ? b[r] : 0;
            for (int c = 0; c < cols; c++)
                s += x[(size_t)t * cols + c] * w[(size_t)r * cols + c];
            y[(size_t)t * rows + r] = s;
        }
}

static void lnorm(double *x, int n, int d, const float *w, const float *b, double eps)
{
    for (int t = 0; t < n; t++) {
        double *v = x + (size_t)t * d, m = 0, var = 0;
        for (int i = 0; i < d; i++)
            m += v[i];
        m /= d;
        for (int i = 0; i < d; i++)
            var += (v[i] - m) * (v[i] - m);
        var /= d;
        for (int i = 0; i < d; i++)
            v[i] = (v[i] - m) / sqrt(var + eps) * w[i] + b[i];
    }
}

/* out [tokens][n_embd] from pixels px, hparams as loaded (hp: the tower's
 * n_pos positions, n_patches tokens), merge k. */
static void reference(const char *path, const float *px, const rn_clip_hparams_t *hp, int k,
                      double *out)
{
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(path, &g, NULL) == CR_OK);
    ref_g = g;
    int S = hp->image_size, P = hp->patch_size, NS = hp->n_side, N = hp->n_pos;
    int D = hp->dim, F = hp->ffn, Hd = hp->head_dim, E = hp->n_embd, G = NS / k;
    double eps = hp->eps;
    double *x = calloc((size_t)N * D, sizeof *x), *xb = calloc((size_t)N * D, sizeof *xb);
    double *q = calloc((size_t)N * D, sizeof *q), *kk = calloc((size_t)N * D, sizeof *kk);
    double *v = calloc((size_t)N * D, sizeof *v), *att = calloc((size_t)N * D, sizeof *att);
    double *hb = calloc((size_t)N * F, sizeof *hb), *sc = calloc((size_t)N, sizeof *sc);
    double *pool = calloc((size_t)G * G * D, sizeof *pool);
    const float *pw = T_("v.patch_embd.weight"), *pb = T_("v.patch_embd.bias");
    for (int p = 0; p < N; p++)
        for (int d = 0; d < D; d++) {
            double s = pb[d];
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < P; ky++)
                    for (int kx = 0; kx < P; kx++)
                        s += pw[(((size_t)d * 3 + c) * P + ky) * P + kx] *
                             px[((size_t)c * S + (p / NS) * P + ky) * S + (p % NS) * P + kx];
            x[(size_t)p * D + d] = s;
        }
    const float *pos = T_("v.position_embd.weight");
    for (size_t i = 0; i < (size_t)N * D; i++)
        x[i] += pos[i];
    for (int l = 0; l < hp->n_layers; l++) {
        memcpy(xb, x, sizeof(double) * (size_t)N * D);
        lnorm(xb, N, D, T_("v.blk.%d.ln1.weight", l), T_("v.blk.%d.ln1.bias", l), eps);
        lin(xb, N, D, T_("v.blk.%d.attn_q.weight", l), T_("v.blk.%d.attn_q.bias", l), D, q);
        lin(xb, N, D, T_("v.blk.%d.attn_k.weight", l), T_("v.blk.%d.attn_k.bias", l), D, kk);
        lin(xb, N, D, T_("v.blk.%d.attn_v.weight", l), T_("v.blk.%d.attn_v.bias", l), D, v);
        for (int h = 0; h < hp->n_heads; h++)
            for (int t = 0; t < N; t++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int i = 0; i < Hd; i++)
                        s += q[(size_t)t * D + h * Hd + i] * kk[(size_t)j * D + h * Hd + i];
                    sc[j] = s / sqrt((double)Hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < N; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < Hd; i++) {
                    double a = 0;
                    for (int j = 0; j < N; j++)
                        a += sc[j] / sum * v[(size_t)j * D + h * Hd + i];
                    att[(size_t)t * D + h * Hd + i] = a;
                }
            }
        lin(att, N, D, T_("v.blk.%d.attn_out.weight", l), T_("v.blk.%d.attn_out.bias", l), D,
            xb);
        for (size_t i = 0; i < (size_t)N * D; i++)
            x[i] += xb[i];
        memcpy(xb, x, sizeof(double) * (size_t)N * D);
        lnorm(xb, N, D, T_("v.blk.%d.ln2.weight", l), T_("v.blk.%d.ln2.bias", l), eps);
        lin(xb, N, D, T_("v.blk.%d.ffn_up.weight", l), T_("v.blk.%d.ffn_up.bias", l), F, hb);
        for (size_t i = 0; i < (size_t)N * F; i++) {
            double u = hb[i];
            hb[i] = 0.5 * u * (1 + tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
        }
        lin(hb, N, F, T_("v.blk.%d.ffn_down.weight", l), T_("v.blk.%d.ffn_down.bias", l), D,
            xb);
        for (size_t i = 0; i < (size_t)N * D; i++)
            x[i] += xb[i];
    }
    lnorm(x, N, D, T_("v.post_ln.weight"), T_("v.post_ln.bias"), eps);
    /* k x k average pooling of the NS x NS grid, row-major tokens */
    for (int oy = 0; oy < G; oy++)
        for (int ox = 0; ox < G; ox++)
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int y = oy * k; y < oy * k + k; y++)
                    for (int xx = ox * k; xx < ox * k + k; xx++)
                        s += x[((size_t)y * NS + xx) * D + d];
                pool[((size_t)oy * G + ox) * D + d] = s / (k * k);
            }
    const float *nw = T_("mm.soft_emb_norm.weight"), *wp = T_("mm.input_projection.weight");
    for (int t = 0; t < G * G; t++) {
        double *r = pool + (size_t)t * D, ms = 0;
        for (int d = 0; d < D; d++)
            ms += r[d] * r[d];
        double inv = 1 / sqrt(ms / D + eps);
        for (int d = 0; d < D; d++)
            r[d] = r[d] * inv * nw[d];
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int d = 0; d < D; d++)
                s += r[d] * wp[(size_t)d * E + e]; /* x W: the file's [D][E] */
            out[(size_t)t * E + e] = s;
        }
    }
    free(x), free(xb), free(q), free(kk), free(v), free(att), free(hb), free(sc), free(pool);
    cr_gguf_close(&g);
}

/* ---- loading and encoding ------------------------------------------------ */

typedef struct loaded {
    be_backend_t *be;
    rn_clip_t *c;
} loaded_t;

static bool load(const char *path, loaded_t *l, cr_err_t *err)
{
    memset(l, 0, sizeof *l);
    if (be_cpu_new(2, &l->be, err))
        return false;
    return rn_clip_load(path, l->be, &l->c, err) == CR_OK;
}

static void unload(loaded_t *l)
{
    rn_clip_destroy(&l->c);
    be_destroy(&l->be);
}

/* The embeddings of the 97x61 gradient through c: [tokens][n_embd],
 * caller frees; the pixels into *px_out (caller frees). */
static float *encode(rn_clip_t *c, float **px_out)
{
    const rn_clip_hparams_t *hp = rn_clip_hparams(c);
    size_t npx = 3 * (size_t)hp->image_size * hp->image_size;
    size_t nout = (size_t)hp->n_patches * hp->n_embd;
    float *px = malloc(npx * sizeof *px), *out = malloc(nout * sizeof *out);
    rn_image_t *im = gradient(97, 61);
    cr_err_t err = {0};
    CHECK_MSG(rn_clip_preprocess(c, im, px, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_clip_encode(c, px, out, &err) == CR_OK, "%s", err.msg);
    rn_image_destroy(&im);
    *px_out = px;
    return out;
}

static void compare(const float *out, const double *ref, int n, int dim, const char *what)
{
    double worst = 1, num = 0, den = 0;
    for (int t = 0; t < n; t++) {
        double dot = 0, a2 = 0, b2 = 0;
        for (int i = 0; i < dim; i++) {
            double a = out[(size_t)t * dim + i], b = ref[(size_t)t * dim + i];
            dot += a * b, a2 += a * a, b2 += b * b;
            num += (a - b) * (a - b), den += b * b;
        }
        double cs = dot / sqrt(a2 * b2);
        worst = cs < worst ? cs : worst;
    }
    fprintf(stderr, "%s vs scalar reference: worst row cosine %.7f, relative error %.2e\n",
            what, worst, sqrt(num / den));
    CHECK_MSG(worst >= 0.9999, "%s: worst row cosine %.6f", what, worst);
    CHECK_MSG(sqrt(num / den) < 1e-3, "%s: relative error %.2e", what, sqrt(num / den));
}

static void test_tower(int merge, int image_size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/mmproj-%d.gguf", dir_g, merge);
    rn_synth_gemma3v_opts_t o;
    rn_synth_gemma3v_defaults(&o);
    o.seed = 5;
    o.merge = merge;
    o.image_size = image_size;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_gemma3v_write(&o, path, &err) == CR_OK, "%s", err.msg);
    loaded_t l;
    CHECK_MSG(load(path, &l, &err), "%s", err.msg);
    if (!l.c) {
        unload(&l);
        return;
    }
    const rn_clip_hparams_t *hp = rn_clip_hparams(l.c);
    int side = image_size / 14;
    CHECK_EQ_STR(hp->projector, "gemma3");
    CHECK_EQ_INT(hp->n_pos, side * side);
    CHECK_EQ_INT(hp->n_patches, (side / merge) * (side / merge));
    CHECK_EQ_INT(hp->n_embd, 64);
    CHECK_EQ_INT(hp->n_layers_run, 3);
    CHECK(hp->act == RN_CLIP_ACT_GELU);
    CHECK(hp->non_causal);
    CHECK_EQ_STR(hp->img_beg, "<start_of_image>");
    CHECK_EQ_STR(hp->img_end, "<end_of_image>");
    CHECK(rn_clip_weight_bytes(l.c) > 0);
    float *px = NULL, *out = encode(l.c, &px);
    /* letterboxed on black: 97x61 -> 224 x ceil(140.9) = 141 rows from
     * row 41; the top row is black, (0 - 0.5) / 0.5 = -1 */
    if (image_size == 224)
        CHECK(px[0] == -1.0f && px[(size_t)40 * 224] == -1.0f &&
              px[(size_t)41 * 224 + 100] != -1.0f);
    size_t nout = (size_t)hp->n_patches * hp->n_embd;
    double *ref = malloc(nout * sizeof *ref);
    reference(path, px, hp, merge, ref);
    char what[48];
    snprintf(what, sizeof what, "gemma3 tower (merge %d)", merge);
    compare(out, ref, hp->n_patches, hp->n_embd, what);
    /* Encoding again gives the same bytes. */
    float *px2 = NULL, *again = encode(l.c, &px2);
    CHECK(!memcmp(out, again, nout * sizeof *out));
    free(px), free(px2), free(out), free(again), free(ref);
    unload(&l);
}

/* Ollama's single file (the tower inside a gemma3 text model) holds the
 * same numbers under its own names: the same pixels and embeddings. */
static void test_single_file(void)
{
    char text[128], proj[128], single[128];
    snprintf(text, sizeof text, "%s/text.gguf", dir_g);
    snprintf(proj, sizeof proj, "%s/proj.gguf", dir_g);
    snprintf(single, sizeof single, "%s/single.gguf", dir_g);
    static const char *const img_tokens[] = {"<start_of_image>", "<end_of_image>", NULL};
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "gemma3";
    so.extra_tokens = img_tokens;
    rn_synth_gemma3v_opts_t o;
    rn_synth_gemma3v_defaults(&o);
    o.seed = 9;
    o.type = CR_TYPE_F16;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_write(&so, text, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_synth_gemma3v_write(&o, proj, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_synth_gemma3v_embed(&o, text, single, &err) == CR_OK, "%s", err.msg);
    loaded_t a, b;
    CHECK_MSG(load(proj, &a, &err), "%s", err.msg);
    CHECK_MSG(load(single, &b, &err), "%s", err.msg);
    if (a.c && b.c) {
        const rn_clip_hparams_t *ha = rn_clip_hparams(a.c), *hb = rn_clip_hparams(b.c);
        CHECK_EQ_INT(hb->n_patches, ha->n_patches);
        CHECK_EQ_INT(hb->n_embd, ha->n_embd);
        CHECK(hb->eps == ha->eps && hb->mean[0] == 0.5f && hb->std[2] == 0.5f);
        float *pa = NULL, *pb = NULL, *ea = encode(a.c, &pa), *eb = encode(b.c, &pb);
        size_t npx = 3 * (size_t)ha->image_size * ha->image_size;
        CHECK(!memcmp(pa, pb, npx * sizeof *pa));
        CHECK(!memcmp(ea, eb, (size_t)ha->n_patches * ha->n_embd * sizeof *ea));
        free(pa), free(pb), free(ea), free(eb);
    }
    unload(&a);
    unload(&b);
    /* A gemma3 text model without a tower is no projector. */
    loaded_t t;
    CHECK(!load(text, &t, &err));
    CHECK_MSG(strstr(err.msg, "not a vision projector") != NULL, "%s", err.msg);
    unload(&t);
}

/* ---- bad files ---------------------------------------------------------- */

/* A copy of src to dst without tensor `drop` (NULL: none) and with u32 key
 * `key` = val (NULL: unchanged). */
static void rewrite(const char *src, const char *dst, const char *drop, const char *key,
                    uint32_t val)
{
    cr_gguf_t *g = NULL;
    cr_err_t err = {0};
    CHECK(cr_gguf_open(src, &g, &err) == CR_OK);
    if (!g)
        return;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++)
        cr_gguf_writer_copy_kv(w, cr_gguf_kv_at(g, i), NULL);
    if (key)
        cr_gguf_writer_add_u32(w, key, val, NULL);
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (!drop || strcmp(t->name, drop))
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                      NULL);
    }
    CHECK(cr_gguf_writer_write(w, dst, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
}

static cr_status_t load_st(const char *path, cr_err_t *err)
{
    loaded_t l;
    cr_err_clear(err);
    bool ok = load(path, &l, err);
    cr_status_t st = ok ? CR_OK : err->status;
    CHECK(ok == (l.c != NULL));
    unload(&l);
    return st;
}

static void test_bad_files(void)
{
    char proj[128], single[128], bad[128];
    snprintf(proj, sizeof proj, "%s/proj.gguf", dir_g);
    snprintf(single, sizeof single, "%s/single.gguf", dir_g);
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir_g);
    cr_err_t err = {0};
    rewrite(proj, bad, "mm.soft_emb_norm.weight", NULL, 0);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "mm.soft_emb_norm.weight") != NULL, "%s", err.msg);
    rewrite(proj, bad, "v.blk.2.ffn_down.bias", NULL, 0);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.blk.2.ffn_down.bias") != NULL, "%s", err.msg);
    rewrite(single, bad, "mm.mm_input_projection.weight", NULL, 0);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "mm.mm_input_projection.weight") != NULL, "%s", err.msg);
    /* pooling that does not divide the 16x16 grid */
    rewrite(proj, bad, NULL, "clip.vision.projector.scale_factor", 3);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "pooling 3") != NULL, "%s", err.msg);
    rewrite(single, bad, NULL, "gemma3.mm.tokens_per_image", 9);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "9 tokens per image") != NULL, "%s", err.msg);
    /* more blocks than the file holds */
    rewrite(single, bad, NULL, "gemma3.vision.block_count", 4);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.blk.3.layer_norm1.weight") != NULL, "%s", err.msg);
    /* a tower width that does not match the positions */
    rewrite(proj, bad, NULL, "clip.vision.image_size", 168);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.position_embd.weight") != NULL, "%s", err.msg);
    /* the header alone */
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_gguf_writer_add_str(w, "general.architecture", "clip", NULL);
    cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, NULL);
    cr_gguf_writer_add_str(w, "clip.projector_type", "gemma3", NULL);
    CHECK(cr_gguf_writer_write(w, bad, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    CHECK(load_st(bad, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "clip.vision.image_size") != NULL, "%s", err.msg);
    /* truncated */
    rewrite(proj, bad, NULL, NULL, 0);
    FILE *f = fopen(bad, "r+b");
    CHECK(f && ftruncate(fileno(f), 8192) == 0);
    if (f)
        fclose(f);
    CHECK(load_st(bad, &err) != CR_OK);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    test_tower(4, 224);
    test_tower(2, 112);
    test_single_file();
    test_bad_files();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("gemma3v");
}
