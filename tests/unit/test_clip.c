/* test_clip.c: the llava-style vision tower (vision/clip.c) and its
 * preprocessing (vision/preprocess.c).
 *
 * The tower over a synthetic projector (corral-clip-synth's layout, F32)
 * is compared with a scalar double-precision forward pass written here from
 * the same description (llama.cpp's llava graph): every output row must
 * have cosine >= 0.9999 with the reference and the whole output a relative
 * error below 1e-3 (measured: 5e-5). The tolerance is the backend's
 * attention, which rounds queries, keys, values and probabilities to F16
 * (like the reference engine); everything else is F32. The cosine alone
 * would not catch a wrong activation (GELU for quick GELU: 0.99993), the
 * relative error does (7e-3). Resampling is compared with the same
 * Pillow filter evaluated in doubles without fixed point: within 1 level
 * per channel (22-bit weights and per-pass 8-bit rounding). Also: bad
 * projector files are refused with the right status. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <math.h>
#include <unistd.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/preprocess.h"
#include "tools/synth/synth.h"

static char dir_g[] = "/tmp/corral-test-clip-XXXXXX";

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

/* ---- preprocessing ---------------------------------------------------- */

static double cubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1)
        return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0;
}

/* One axis of Pillow's bicubic in doubles: out[i] from in[0..n). */
static void ref_axis(const double *in, int n, double *out, int m)
{
    double scale = (double)n / m, fs = scale < 1 ? 1 : scale, support = 2 * fs;
    for (int i = 0; i < m; i++) {
        double c = (i + 0.5) * scale, sum = 0, acc = 0;
        int lo = (int)(c - support + 0.5), hi = (int)(c + support + 0.5);
        lo = lo < 0 ? 0 : lo;
        hi = hi > n ? n : hi;
        for (int j = lo; j < hi; j++) {
            double w = cubic((j - c + 0.5) / fs);
            sum += w;
            acc += w * in[j];
        }
        out[i] = acc / sum;
    }
}

static double clamp8(double v)
{
    v = floor(v + 0.5);
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

static void test_resize(void)
{
    int sizes[][4] = {{97, 61, 112, 112}, {30, 20, 64, 48}, {400, 300, 112, 84},
                      {50, 50, 50, 120}};
    for (size_t s = 0; s < CR_ARRAY_LEN(sizes); s++) {
        int w = sizes[s][0], h = sizes[s][1], W = sizes[s][2], H = sizes[s][3];
        rn_image_t *src = gradient(w, h), *dst = NULL;
        CHECK(rn_preproc_resize(src, W, H, RN_PREPROC_BICUBIC, &dst, NULL) == CR_OK);
        double *row = malloc(sizeof(double) * (size_t)(w > h ? w : h) * 4);
        double *tmp = malloc(sizeof(double) * (size_t)W * h);
        double *col = malloc(sizeof(double) * (size_t)(H + h));
        int worst = 0;
        for (int c = 0; c < 3; c++) {
            /* horizontal pass (rounded to 8 bits, as Pillow), then vertical */
            for (int y = 0; y < h; y++) {
                for (int x = 0; x < w; x++)
                    row[x] = src->rgb[((size_t)y * w + x) * 3 + c];
                double *o = tmp + (size_t)y * W;
                if (W != w)
                    ref_axis(row, w, o, W);
                else
                    memcpy(o, row, sizeof(double) * (size_t)w);
                for (int x = 0; x < W; x++)
                    o[x] = clamp8(o[x]);
            }
            for (int x = 0; x < W; x++) {
                for (int y = 0; y < h; y++)
                    row[y] = tmp[(size_t)y * W + x];
                if (H != h)
                    ref_axis(row, h, col, H);
                else
                    memcpy(col, row, sizeof(double) * (size_t)h);
                for (int y = 0; y < H; y++) {
                    int d = abs((int)clamp8(col[y]) - dst->rgb[((size_t)y * W + x) * 3 + c]);
                    worst = d > worst ? d : worst;
                }
            }
        }
        CHECK_MSG(worst <= 1, "%dx%d -> %dx%d: off by %d levels", w, h, W, H, worst);
        free(row);
        free(tmp);
        free(col);
        rn_image_destroy(&src);
        rn_image_destroy(&dst);
    }
    /* The same size: copied, bit for bit. */
    rn_image_t *src = gradient(40, 30), *dst = NULL;
    CHECK(rn_preproc_resize(src, 40, 30, RN_PREPROC_BICUBIC, &dst, NULL) == CR_OK);
    CHECK(dst && !memcmp(dst->rgb, src->rgb, 40 * 30 * 3));
    rn_image_destroy(&dst);
    CHECK(rn_preproc_resize(src, 0, 30, RN_PREPROC_BICUBIC, &dst, NULL) == CR_E_INVALID);
    rn_image_destroy(&src);
}

static void test_letterbox(void)
{
    const uint8_t pad[3] = {122, 116, 104};
    /* 100x40 into 112: scale 1.12, 112 x ceil(44.8) = 45 rows, centred
     * at row (112 - 45) / 2 = 33. */
    rn_image_t *src = rn_image_new(100, 40), *sq = NULL;
    memset(src->rgb, 200, 100 * 40 * 3);
    CHECK(rn_preproc_fit_square(src, 112, pad, RN_PREPROC_BICUBIC, &sq, NULL) == CR_OK);
    if (sq) {
        CHECK_EQ_INT(sq->width, 112);
        CHECK_EQ_INT(sq->height, 112);
        const uint8_t *top = sq->rgb + ((size_t)32 * 112 + 50) * 3;
        const uint8_t *in = sq->rgb + ((size_t)33 * 112 + 50) * 3;
        const uint8_t *last = sq->rgb + ((size_t)77 * 112 + 0) * 3;
        const uint8_t *below = sq->rgb + ((size_t)78 * 112 + 111) * 3;
        CHECK(!memcmp(top, pad, 3) && !memcmp(below, pad, 3));
        CHECK(in[0] == 200 && in[1] == 200 && in[2] == 200);
        CHECK(last[0] == 200);
    }
    rn_image_destroy(&sq);
    rn_image_destroy(&src);
    /* Normalization: planar, (v / 255 - mean) / std. */
    rn_image_t *im = gradient(5, 4);
    float mean[3] = {0.5f, 0.25f, 0.125f}, std[3] = {0.5f, 2.0f, 0.25f}, out[60];
    rn_preproc_normalize(im, mean, std, out);
    bool ok = true;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 20; i++)
            ok &= out[c * 20 + i] == ((float)im->rgb[i * 3 + c] / 255.0f - mean[c]) / std[c];
    CHECK(ok);
    rn_image_destroy(&im);
}

/* ---- the tower against a scalar reference ------------------------------ */

typedef struct ref {
    cr_gguf_t *g;
} ref_t;

static const float *T_(ref_t *r, const char *fmt, ...) CR_PRINTF(2, 3);
static const float *T_(ref_t *r, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(r->g, name);
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

static void reference(const char *path, const float *px, const rn_clip_hparams_t *hp,
                      double *out)
{
    ref_t r = {0};
    CHECK(cr_gguf_open(path, &r.g, NULL) == CR_OK);
    int S = hp->image_size, P = hp->patch_size, NS = hp->n_side, N = hp->n_patches;
    int T = N + 1, D = hp->dim, F = hp->ffn, Hd = hp->head_dim, H = hp->proj_hidden;
    double eps = hp->eps;
    double *x = calloc((size_t)T * D, sizeof *x), *xb = calloc((size_t)T * D, sizeof *xb);
    double *q = calloc((size_t)T * D, sizeof *q), *k = calloc((size_t)T * D, sizeof *k);
    double *v = calloc((size_t)T * D, sizeof *v), *att = calloc((size_t)T * D, sizeof *att);
    double *hb = calloc((size_t)T * F, sizeof *hb), *ph = calloc((size_t)N * H, sizeof *ph);
    double *sc = calloc((size_t)T, sizeof *sc);
    const float *pw = T_(&r, "v.patch_embd.weight"), *pb = T_(&r, "v.patch_embd.bias");
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
    const float *cls = T_(&r, "v.class_embd"), *pos = T_(&r, "v.position_embd.weight");
    for (int d = 0; d < D; d++)
        x[(size_t)N * D + d] = cls[d]; /* after the patches, as llama.cpp */
    for (size_t i = 0; i < (size_t)T * D; i++)
        x[i] += pos[i];
    lnorm(x, T, D, T_(&r, "v.pre_ln.weight"), T_(&r, "v.pre_ln.bias"), eps);
    for (int l = 0; l < hp->n_layers - 1; l++) {
        memcpy(xb, x, sizeof(double) * (size_t)T * D);
        lnorm(xb, T, D, T_(&r, "v.blk.%d.ln1.weight", l), T_(&r, "v.blk.%d.ln1.bias", l), eps);
        lin(xb, T, D, T_(&r, "v.blk.%d.attn_q.weight", l), T_(&r, "v.blk.%d.attn_q.bias", l), D, q);
        lin(xb, T, D, T_(&r, "v.blk.%d.attn_k.weight", l), T_(&r, "v.blk.%d.attn_k.bias", l), D, k);
        lin(xb, T, D, T_(&r, "v.blk.%d.attn_v.weight", l), T_(&r, "v.blk.%d.attn_v.bias", l), D, v);
        for (int h = 0; h < hp->n_heads; h++)
            for (int t = 0; t < T; t++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int i = 0; i < Hd; i++)
                        s += q[(size_t)t * D + h * Hd + i] * k[(size_t)j * D + h * Hd + i];
                    sc[j] = s / sqrt((double)Hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < T; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < Hd; i++) {
                    double a = 0;
                    for (int j = 0; j < T; j++)
                        a += sc[j] / sum * v[(size_t)j * D + h * Hd + i];
                    att[(size_t)t * D + h * Hd + i] = a;
                }
            }
        lin(att, T, D, T_(&r, "v.blk.%d.attn_out.weight", l), T_(&r, "v.blk.%d.attn_out.bias", l),
            D, xb);
        for (size_t i = 0; i < (size_t)T * D; i++)
            x[i] += xb[i];
        memcpy(xb, x, sizeof(double) * (size_t)T * D);
        lnorm(xb, T, D, T_(&r, "v.blk.%d.ln2.weight", l), T_(&r, "v.blk.%d.ln2.bias", l), eps);
        lin(xb, T, D, T_(&r, "v.blk.%d.ffn_up.weight", l), T_(&r, "v.blk.%d.ffn_up.bias", l), F, hb);
        for (size_t i = 0; i < (size_t)T * F; i++)
            hb[i] = hb[i] / (1 + exp(-1.702 * hb[i])); /* quick GELU */
        lin(hb, T, F, T_(&r, "v.blk.%d.ffn_down.weight", l), T_(&r, "v.blk.%d.ffn_down.bias", l),
            D, xb);
        for (size_t i = 0; i < (size_t)T * D; i++)
            x[i] += xb[i];
    }
    /* the projector reads rows 1..N */
    lin(x + D, N, D, T_(&r, "mm.0.weight"), T_(&r, "mm.0.bias"), H, ph);
    for (size_t i = 0; i < (size_t)N * H; i++) {
        double g = ph[i];
        ph[i] = 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    }
    lin(ph, N, H, T_(&r, "mm.2.weight"), T_(&r, "mm.2.bias"), hp->n_embd, out);
    free(x), free(xb), free(q), free(k), free(v), free(att), free(hb), free(ph), free(sc);
    cr_gguf_close(&r.g);
}

static void test_tower(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/mmproj.gguf", dir_g);
    rn_synth_clip_opts_t o;
    rn_synth_clip_defaults(&o);
    o.seed = 3;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_clip_write(&o, path, &err) == CR_OK, "%s", err.msg);
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    CHECK(be_cpu_new(2, &be, &err) == CR_OK);
    CHECK_MSG(rn_clip_load(path, be, &c, &err) == CR_OK, "%s", err.msg);
    if (!c) {
        be_destroy(&be);
        return;
    }
    const rn_clip_hparams_t *hp = rn_clip_hparams(c);
    CHECK_EQ_INT(hp->n_patches, 64);
    CHECK_EQ_INT(hp->n_pos, 65);
    CHECK_EQ_INT(hp->n_embd, 64);
    CHECK_EQ_INT(hp->n_layers_run, 2);
    CHECK(hp->act == RN_CLIP_ACT_GELU_QUICK);
    size_t npx = 3 * (size_t)hp->image_size * hp->image_size;
    size_t nout = (size_t)hp->n_patches * hp->n_embd;
    float *px = malloc(npx * sizeof *px), *out = malloc(nout * sizeof *out);
    double *ref = malloc(nout * sizeof *ref);
    rn_image_t *im = gradient(97, 61);
    CHECK(rn_clip_preprocess(c, im, px, &err) == CR_OK);
    CHECK(rn_clip_encode(c, px, out, &err) == CR_OK);
    reference(path, px, hp, ref);
    double worst = 1, num = 0, den = 0;
    for (int t = 0; t < hp->n_patches; t++) {
        double dot = 0, a2 = 0, b2 = 0;
        for (int i = 0; i < hp->n_embd; i++) {
            double a = out[(size_t)t * hp->n_embd + i], b = ref[(size_t)t * hp->n_embd + i];
            dot += a * b, a2 += a * a, b2 += b * b;
            num += (a - b) * (a - b), den += b * b;
        }
        double cs = dot / sqrt(a2 * b2);
        worst = cs < worst ? cs : worst;
    }
    fprintf(stderr, "tower vs scalar reference: worst row cosine %.7f, relative error "
            "%.2e\n", worst, sqrt(num / den));
    CHECK_MSG(worst >= 0.9999, "worst row cosine %.6f", worst);
    CHECK_MSG(sqrt(num / den) < 1e-3, "relative error %.2e", sqrt(num / den));
    /* Encoding again gives the same bytes (no state carried over). */
    float *again = malloc(nout * sizeof *again);
    CHECK(rn_clip_encode(c, px, again, &err) == CR_OK);
    CHECK(!memcmp(out, again, nout * sizeof *out));
    /* A different image gives different embeddings. */
    rn_image_t *im2 = gradient(61, 97);
    CHECK(rn_clip_preprocess(c, im2, px, &err) == CR_OK);
    CHECK(rn_clip_encode(c, px, again, &err) == CR_OK);
    CHECK(memcmp(out, again, nout * sizeof *out) != 0);
    rn_image_destroy(&im2);
    free(again);
    rn_image_destroy(&im);
    free(px), free(out), free(ref);
    rn_clip_destroy(&c);
    CHECK(c == NULL);
    be_destroy(&be);
}

/* ---- bad files ---------------------------------------------------------- */

static cr_status_t load_st(const char *path, cr_err_t *err)
{
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    if (be_cpu_new(1, &be, err))
        return CR_E_INTERNAL;
    cr_status_t st = rn_clip_load(path, be, &c, err);
    CHECK((st == CR_OK) == (c != NULL));
    rn_clip_destroy(&c);
    be_destroy(&be);
    return st;
}

static void test_bad_files(void)
{
    char path[128];
    cr_err_t err = {0};
    snprintf(path, sizeof path, "%s/text.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    CHECK(rn_synth_write(&so, path, &err) == CR_OK);
    CHECK(load_st(path, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "not a vision projector") != NULL, "%s", err.msg);

    /* Another projector type: refused as unsupported, naming it (gemma3's
     * is test_gemma3v's). */
    snprintf(path, sizeof path, "%s/idefics3.gguf", dir_g);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_gguf_writer_add_str(w, "general.architecture", "clip", NULL);
    cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, NULL);
    cr_gguf_writer_add_str(w, "clip.projector_type", "idefics3", NULL);
    CHECK(cr_gguf_writer_write(w, path, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    CHECK(load_st(path, &err) == CR_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "idefics3") != NULL, "%s", err.msg);

    /* A llava projector missing a tensor, and one with a bad key. */
    snprintf(path, sizeof path, "%s/bad.gguf", dir_g);
    rn_synth_clip_opts_t o;
    rn_synth_clip_defaults(&o);
    o.n_layers = 2;
    CHECK(rn_synth_clip_write(&o, path, &err) == CR_OK);
    CHECK(load_st(path, &err) == CR_OK);
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(path, &g, &err) == CR_OK);
    char path2[160];
    snprintf(path2, sizeof path2, "%s/bad2.gguf", dir_g);
    w = cr_gguf_writer_new();
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++)
        cr_gguf_writer_copy_kv(w, cr_gguf_kv_at(g, i), NULL);
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (strcmp(t->name, "v.blk.0.attn_k.bias"))
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                      NULL);
    }
    CHECK(cr_gguf_writer_write(w, path2, &err) == CR_OK);
    CHECK(load_st(path2, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.blk.0.attn_k.bias") != NULL, "%s", err.msg);
    cr_gguf_writer_add_u32(w, "clip.vision.image_size", 100, NULL); /* not x14 */
    CHECK(cr_gguf_writer_write(w, path2, &err) == CR_OK);
    CHECK(load_st(path2, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "multiple of patch_size") != NULL, "%s", err.msg);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);

    /* A truncated file. */
    FILE *f = fopen(path, "r+b");
    CHECK(f && ftruncate(fileno(f), 4096) == 0);
    if (f)
        fclose(f);
    CHECK(load_st(path, &err) != CR_OK);
    snprintf(path, sizeof path, "%s/missing.gguf", dir_g);
    CHECK(load_st(path, &err) == CR_E_IO);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    test_resize();
    test_letterbox();
    test_tower();
    test_bad_files();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("clip");
}
