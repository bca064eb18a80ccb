/* test_pixtral.c: the Pixtral vision tower (vision/pixtral.c): its
 * variable-resolution sizing, its letterbox, and its forward pass.
 *
 * The tower over synthetic projectors (corral-clip-synth --pixtral, F32)
 * is compared with a scalar double-precision forward pass written here
 * from llama.cpp's pixtral graph: 2D rotary positions, RMSNorm, gated FFN,
 * the 2x2 patch merger in torch's unfold order, the GELU projector and the
 * [IMG_BREAK] rows. Every row must have cosine >= 0.9999 with the
 * reference and the whole output a relative error below 1e-3 (measured
 * about 1e-4): the backend's attention rounds queries, keys, values and
 * probabilities to F16 as the reference engine does; everything else is
 * F32. Rows and columns swapped in the rotary positions move the
 * relative error to about 0.1 (worst cosine 0.97..0.99), the merger's
 * (ky, kx) order transposed to 0.8. The [IMG_BREAK] rows are
 * the file's vector bit for bit. Two non-square images of different sizes
 * run through one tower (the buffers are sized once for the largest).
 * bench/vs_mtmd.sh compares the same files with llama.cpp itself. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <math.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/pixtral.h"
#include "services/runner/vision/preprocess.h"
#include "tools/synth/synth.h"

static char dir_g[] = "/tmp/corral-test-pixtral-XXXXXX";

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

static rn_pixtral_t *load(const char *path, be_backend_t *be, cr_status_t *st, cr_err_t *err)
{
    rn_pixtral_t *p = NULL;
    *st = rn_pixtral_load(path, be, &p, err);
    CHECK((*st == CR_OK) == (p != NULL));
    return p;
}

static const char *synth(const char *name, int merge, bool gelu, cr_err_t *err)
{
    static char path[160];
    snprintf(path, sizeof path, "%s/%s.gguf", dir_g, name);
    rn_synth_clip_opts_t o;
    rn_synth_clip_defaults(&o);
    o.seed = 3;
    o.merge = merge;
    o.use_gelu = gelu;
    CHECK_MSG(rn_synth_pixtral_write(&o, path, err) == CR_OK, "%s", err->msg);
    return path;
}

/* ---- sizing ------------------------------------------------------------ */

static void test_fit(be_backend_t *be)
{
    cr_err_t err = {0};
    cr_status_t st;
    rn_pixtral_t *p = load(synth("fit", 2, false, &err), be, &st, &err);
    if (!p)
        return;
    const rn_pixtral_hparams_t *hp = rn_pixtral_hparams(p);
    CHECK_EQ_INT(hp->patch_size, 14);
    CHECK_EQ_INT(hp->n_merge, 2);
    CHECK_EQ_INT((int)hp->min_pixels, 8 * 784);
    CHECK_EQ_INT((int)hp->max_pixels, 1024 * 784);
    CHECK_EQ_INT(hp->max_patches, 4096);
    /* {width, height, want w, want h, rows}: worked by hand from
     * llama.cpp's calc_size_preserved_ratio with a 28-pixel grid */
    static const int cases[][5] = {
        /* rounded: 84x56 is below 8 tokens; scaled up by sqrt(6272 /
         * 5917), ceil to the grid: 112x84, 4x3 tokens + 2 breaks (libmtmd
         * gives 14 rows for this image) */
        {97, 61, 112, 84, 14},
        /* rounded to the grid and within limits: 36x18 tokens + 17 */
        {1000, 500, 1008, 504, 665},
        /* above 1024 tokens: scaled down by sqrt(3e6 / 802816) = 1.933,
         * floor to the grid: 36x27 tokens + 26 */
        {2000, 1500, 1008, 756, 998},
        /* portrait: 20x36 tokens + 35 */
        {560, 1000, 560, 1008, 755},
        /* one pixel: at least one grid cell, then 8 tokens' area */
        {1, 1, 84, 84, 11},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        int w = 0, h = 0, rows = 0;
        CHECK(rn_pixtral_fit(p, cases[i][0], cases[i][1], &w, &h, &rows, &err) == CR_OK);
        CHECK_MSG(w == cases[i][2] && h == cases[i][3] && rows == cases[i][4],
                  "%dx%d -> %dx%d, %d rows; want %dx%d, %d", cases[i][0], cases[i][1], w, h,
                  rows, cases[i][2], cases[i][3], cases[i][4]);
    }
    /* so elongated that the one-cell side breaks the area limit */
    int w, h, rows;
    CHECK(rn_pixtral_fit(p, 50000, 10, &w, &h, &rows, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "too elongated") != NULL, "%s", err.msg);
    CHECK(rn_pixtral_fit(p, 0, 10, &w, &h, &rows, &err) == CR_E_INVALID);
    /* a size fit does not give is refused by encode, not run */
    float px[3 * 28 * 28] = {0}, out[64];
    CHECK(rn_pixtral_encode(p, px, 28, 14, out, &err) == CR_E_INVALID);
    rn_pixtral_destroy(&p);
    CHECK(p == NULL);
}

static void test_letterbox(void)
{
    /* 100x40 into 112x56: scale min(1.12, 1.4), 112 x ceil(44.8) = 45
     * rows centred at row (56 - 45) / 2 = 5 on black */
    static const uint8_t black[3] = {0, 0, 0};
    rn_image_t *src = rn_image_new(100, 40), *box = NULL;
    memset(src->rgb, 200, 100 * 40 * 3);
    CHECK(rn_preproc_fit_box(src, 112, 56, black, RN_PREPROC_BICUBIC, &box, NULL) == CR_OK);
    if (box) {
        CHECK_EQ_INT(box->width, 112);
        CHECK_EQ_INT(box->height, 56);
        CHECK(!memcmp(box->rgb + ((size_t)4 * 112 + 50) * 3, black, 3));
        CHECK(box->rgb[((size_t)5 * 112 + 0) * 3] == 200);
        CHECK(box->rgb[((size_t)49 * 112 + 111) * 3] == 200);
        CHECK(!memcmp(box->rgb + ((size_t)50 * 112 + 50) * 3, black, 3));
    }
    rn_image_destroy(&box);
    rn_image_destroy(&src);
}

/* ---- the tower against a scalar reference ------------------------------ */

static cr_gguf_t *ref_g;

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

/* y[n][rows] = x[n][cols] W^T + b (W [rows][cols]; b may be NULL) */
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

static void rmsn(const double *x, double *y, int n, int d, const float *w, double eps)
{
    for (int t = 0; t < n; t++) {
        const double *v = x + (size_t)t * d;
        double ss = 0;
        for (int i = 0; i < d; i++)
            ss += v[i] * v[i];
        double s = 1 / sqrt(ss / d + eps);
        for (int i = 0; i < d; i++)
            y[(size_t)t * d + i] = v[i] * s * w[i];
    }
}

static double gelu(double g)
{
    return 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

/* rotates the adjacent pair at v by angle a */
static void rot(double *v, double a)
{
    double x0 = v[0], x1 = v[1];
    v[0] = x0 * cos(a) - x1 * sin(a);
    v[1] = x0 * sin(a) + x1 * cos(a);
}

static void rope2d(double *x, int N, int nx, int H, int hd, double theta)
{
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H; h++) {
            double *v = x + ((size_t)t * H + h) * hd;
            for (int i = 0; i < hd / 4; i++) {
                rot(v + 2 * i, (t / nx) * pow(theta, -4.0 * i / hd));
                rot(v + hd / 2 + 2 * i, (t % nx) * pow(theta, -(4.0 * i + 2) / hd));
            }
        }
}

/* out [rows][E] for pixels [3][h][w] */
static void reference(const char *path, const float *px, int w, int h,
                      const rn_pixtral_hparams_t *hp, double *out)
{
    CHECK(cr_gguf_open(path, &ref_g, NULL) == CR_OK);
    int P = hp->patch_size, m = hp->n_merge, nx = w / P, ny = h / P, N = nx * ny;
    int gx = nx / m, gy = ny / m, Nm = gx * gy, D = hp->dim, F = hp->ffn, Hd = hp->head_dim;
    int Hn = hp->n_heads, Hp = hp->proj_hidden, E = hp->n_embd;
    double eps = hp->eps;
    size_t ND = (size_t)N * D;
    double *x = calloc(ND, sizeof *x), *xb = calloc(ND, sizeof *xb);
    double *q = calloc(ND, sizeof *q), *k = calloc(ND, sizeof *k), *v = calloc(ND, sizeof *v);
    double *att = calloc(ND, sizeof *att), *g = calloc((size_t)N * F, sizeof *g);
    double *u = calloc((size_t)N * F, sizeof *u), *sc = calloc((size_t)N, sizeof *sc);
    double *blk = calloc(ND, sizeof *blk), *ph = calloc((size_t)Nm * Hp, sizeof *ph);
    double *po = calloc((size_t)Nm * E, sizeof *po);
    const float *pw = T_("v.patch_embd.weight");
    for (int p = 0; p < N; p++)
        for (int d = 0; d < D; d++) {
            double s = 0;
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < P; ky++)
                    for (int kx = 0; kx < P; kx++)
                        s += pw[(((size_t)d * 3 + c) * P + ky) * P + kx] *
                             px[((size_t)c * h + (p / nx) * P + ky) * w + (p % nx) * P + kx];
            x[(size_t)p * D + d] = s;
        }
    rmsn(x, x, N, D, T_("v.pre_ln.weight"), eps);
    for (int l = 0; l < hp->n_layers; l++) {
        rmsn(x, xb, N, D, T_("v.blk.%d.ln1.weight", l), eps);
        lin(xb, N, D, T_("v.blk.%d.attn_q.weight", l), NULL, D, q);
        lin(xb, N, D, T_("v.blk.%d.attn_k.weight", l), NULL, D, k);
        lin(xb, N, D, T_("v.blk.%d.attn_v.weight", l), NULL, D, v);
        rope2d(q, N, nx, Hn, Hd, hp->rope_theta);
        rope2d(k, N, nx, Hn, Hd, hp->rope_theta);
        for (int hh = 0; hh < Hn; hh++)
            for (int t = 0; t < N; t++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int i = 0; i < Hd; i++)
                        s += q[(size_t)t * D + hh * Hd + i] * k[(size_t)j * D + hh * Hd + i];
                    sc[j] = s / sqrt((double)Hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < N; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < Hd; i++) {
                    double a = 0;
                    for (int j = 0; j < N; j++)
                        a += sc[j] / sum * v[(size_t)j * D + hh * Hd + i];
                    att[(size_t)t * D + hh * Hd + i] = a;
                }
            }
        lin(att, N, D, T_("v.blk.%d.attn_out.weight", l), NULL, D, xb);
        for (size_t i = 0; i < ND; i++)
            x[i] += xb[i];
        rmsn(x, xb, N, D, T_("v.blk.%d.ln2.weight", l), eps);
        lin(xb, N, D, T_("v.blk.%d.ffn_gate.weight", l), NULL, F, g);
        lin(xb, N, D, T_("v.blk.%d.ffn_up.weight", l), NULL, F, u);
        for (size_t i = 0; i < (size_t)N * F; i++)
            g[i] = (hp->gelu ? gelu(g[i]) : g[i] / (1 + exp(-g[i]))) * u[i];
        lin(g, N, F, T_("v.blk.%d.ffn_down.weight", l), NULL, D, xb);
        for (size_t i = 0; i < ND; i++)
            x[i] += xb[i];
    }
    const double *feat = x;
    if (m > 1) {
        rmsn(x, xb, N, D, T_("mm.input_norm.weight"), eps);
        /* unfold: block (by, bx), element c * m^2 + ky * m + kx */
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++)
                for (int c = 0; c < D; c++)
                    for (int ky = 0; ky < m; ky++)
                        for (int kx = 0; kx < m; kx++)
                            blk[((size_t)(by * gx + bx) * D + c) * m * m + ky * m + kx] =
                                xb[((size_t)(by * m + ky) * nx + bx * m + kx) * D + c];
        lin(blk, Nm, D * m * m, T_("mm.patch_merger.weight"), NULL, D, q);
        feat = q;
    }
    lin(feat, Nm, D, T_("mm.1.weight"), T_("mm.1.bias"), Hp, ph);
    for (size_t i = 0; i < (size_t)Nm * Hp; i++)
        ph[i] = gelu(ph[i]);
    lin(ph, Nm, Hp, T_("mm.2.weight"), T_("mm.2.bias"), E, po);
    const float *brk = T_("v.token_embd.img_break");
    for (int r = 0, o = 0; r < gy; r++) {
        for (int c = 0; c < gx; c++, o++)
            memcpy(out + (size_t)o * E, po + ((size_t)r * gx + c) * E, sizeof(double) * E);
        if (r + 1 < gy) {
            for (int i = 0; i < E; i++)
                out[(size_t)o * E + i] = brk[i];
            o++;
        }
    }
    free(x), free(xb), free(q), free(k), free(v), free(att), free(g), free(u), free(sc);
    free(blk), free(ph), free(po);
    cr_gguf_close(&ref_g);
}

static void check_image(rn_pixtral_t *p, const char *path, int iw, int ih, int want_rows)
{
    const rn_pixtral_hparams_t *hp = rn_pixtral_hparams(p);
    cr_err_t err = {0};
    int w = 0, h = 0, rows = 0;
    CHECK(rn_pixtral_fit(p, iw, ih, &w, &h, &rows, &err) == CR_OK);
    CHECK_EQ_INT(rows, want_rows);
    size_t E = (size_t)hp->n_embd, nout = (size_t)rows * E;
    float *px = malloc(3 * (size_t)hp->max_patches * hp->patch_size * hp->patch_size *
                       sizeof *px);
    float *out = malloc(nout * sizeof *out), *again = malloc(nout * sizeof *again);
    double *ref = malloc(nout * sizeof *ref);
    rn_image_t *im = gradient(iw, ih);
    int pw = 0, ph = 0;
    CHECK(rn_pixtral_preprocess(p, im, px, &pw, &ph, &err) == CR_OK);
    CHECK(pw == w && ph == h);
    CHECK_MSG(rn_pixtral_encode(p, px, w, h, out, &err) == CR_OK, "%s", err.msg);
    reference(path, px, w, h, hp, ref);
    double worst = 1, num = 0, den = 0;
    for (int t = 0; t < rows; t++) {
        double dot = 0, a2 = 0, b2 = 0;
        for (size_t i = 0; i < E; i++) {
            double a = out[t * E + i], b = ref[t * E + i];
            dot += a * b, a2 += a * a, b2 += b * b;
            num += (a - b) * (a - b), den += b * b;
        }
        double cs = dot / sqrt(a2 * b2);
        worst = cs < worst ? cs : worst;
    }
    fprintf(stderr, "%dx%d (%dx%d, %d rows, merge %d, %s): worst row cosine %.7f, relative "
            "error %.2e\n", iw, ih, w, h, rows, hp->n_merge, hp->gelu ? "GELU" : "SiLU",
            worst, sqrt(num / den));
    CHECK_MSG(worst >= 0.9999, "worst row cosine %.6f", worst);
    CHECK_MSG(sqrt(num / den) < 1e-3, "relative error %.2e", sqrt(num / den));
    /* the [IMG_BREAK] rows are the file's vector exactly */
    int gx = w / (hp->patch_size * hp->n_merge);
    bool exact = true;
    for (int r = gx; r < rows; r += gx + 1)
        for (size_t i = 0; i < E; i++)
            exact &= out[(size_t)r * E + i] == (float)ref[(size_t)r * E + i];
    CHECK(exact);
    /* encoding again gives the same bytes (no state carried over) */
    CHECK(rn_pixtral_encode(p, px, w, h, again, &err) == CR_OK);
    CHECK(!memcmp(out, again, nout * sizeof *out));
    rn_image_destroy(&im);
    free(px), free(out), free(again), free(ref);
}

static void test_tower(be_backend_t *be)
{
    cr_err_t err = {0};
    cr_status_t st;
    /* Mistral Small's shape: merger, SiLU; two sizes through one tower */
    const char *path = synth("merge2", 2, false, &err);
    rn_pixtral_t *p = load(path, be, &st, &err);
    CHECK_MSG(p, "%s", err.msg);
    if (p) {
        CHECK(rn_pixtral_hparams(p)->has_merger && !rn_pixtral_hparams(p)->gelu);
        check_image(p, path, 97, 61, 14);
        check_image(p, path, 90, 150, 3 * 5 + 4); /* 84x140 */
        rn_pixtral_destroy(&p);
    }
    /* Pixtral 12B's shape: no merger; and GELU gating */
    path = synth("merge1", 1, true, &err);
    p = load(path, be, &st, &err);
    CHECK_MSG(p, "%s", err.msg);
    if (p) {
        CHECK(!rn_pixtral_hparams(p)->has_merger && rn_pixtral_hparams(p)->gelu);
        check_image(p, path, 97, 61, 7 * 4 + 3); /* 98x56 */
        rn_pixtral_destroy(&p);
    }
}

/* ---- bad files ---------------------------------------------------------- */

/* path with key set (u32) or tensor dropped; returns its load status */
static cr_status_t variant(be_backend_t *be, const char *src, const char *drop_tensor,
                           const char *drop_key, const char *u32_key, uint32_t u32,
                           cr_err_t *err)
{
    char path[160];
    snprintf(path, sizeof path, "%s/variant.gguf", dir_g);
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(src, &g, err) == CR_OK);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        bool drop = drop_key && kv->key.len == strlen(drop_key) &&
                    !memcmp(kv->key.ptr, drop_key, kv->key.len);
        bool replaced = u32_key && kv->key.len == strlen(u32_key) &&
                        !memcmp(kv->key.ptr, u32_key, kv->key.len);
        if (!drop && !replaced)
            cr_gguf_writer_copy_kv(w, kv, NULL);
    }
    if (u32_key)
        cr_gguf_writer_add_u32(w, u32_key, u32, NULL);
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (!drop_tensor || strcmp(t->name, drop_tensor))
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                      NULL);
    }
    CHECK(cr_gguf_writer_write(w, path, err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    cr_status_t st;
    rn_pixtral_t *p = load(path, be, &st, err);
    rn_pixtral_destroy(&p);
    return st;
}

static void test_bad_files(be_backend_t *be)
{
    cr_err_t err = {0};
    char src[160];
    snprintf(src, sizeof src, "%s", synth("bad", 2, false, &err));
    CHECK(variant(be, src, NULL, NULL, NULL, 0, &err) == CR_OK);
    CHECK(variant(be, src, "v.token_embd.img_break", NULL, NULL, 0, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.token_embd.img_break") != NULL, "%s", err.msg);
    CHECK(variant(be, src, "v.blk.1.ffn_gate.weight", NULL, NULL, 0, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.blk.1.ffn_gate.weight") != NULL, "%s", err.msg);
    /* a merger without its merge size, and a merge size without merger */
    CHECK(variant(be, src, NULL, "clip.vision.spatial_merge_size", NULL, 0, &err) ==
          CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "spatial_merge_size") != NULL, "%s", err.msg);
    CHECK(variant(be, src, "mm.patch_merger.weight", NULL, NULL, 0, &err) == CR_E_INVALID);
    /* quick-GELU gating (neither use_silu nor use_gelu) is refused */
    CHECK(variant(be, src, NULL, "clip.use_silu", NULL, 0, &err) == CR_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "not supported yet") != NULL, "%s", err.msg);
    /* heads whose width is no multiple of 4 (two rotary halves of pairs) */
    CHECK(variant(be, src, NULL, "clip.vision.attention.head_count",
                  "clip.vision.attention.head_count", 32, &err) == CR_E_INVALID);
    /* a llava file is not a pixtral one */
    char path[160];
    snprintf(path, sizeof path, "%s/llava.gguf", dir_g);
    rn_synth_clip_opts_t o;
    rn_synth_clip_defaults(&o);
    CHECK(rn_synth_clip_write(&o, path, &err) == CR_OK);
    cr_status_t st;
    rn_pixtral_t *p = load(path, be, &st, &err);
    CHECK(st == CR_E_UNSUPPORTED);
    rn_pixtral_destroy(&p);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    be_backend_t *be = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(2, &be, &err) == CR_OK);
    test_fit(be);
    test_letterbox();
    test_tower(be);
    test_bad_files(be);
    be_destroy(&be);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("pixtral");
}
