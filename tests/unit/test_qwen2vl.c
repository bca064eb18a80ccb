/* test_qwen2vl.c: the qwen2.5-vl vision tower (vision/qwen2vl.c, reached
 * through clip.h) and the M-RoPE op it and the qwen2vl text model use.
 *
 * - rope_multi (backend op) against a double reference for both kinds:
 *   the text model's (NEOX pairs, sections of pairs on the t/h/w planes)
 *   and the ViT's (pairs (i, i + hd/2), angles restarting per section),
 *   within 1e-5 (float angles built by repeated multiplication, as ggml);
 *   a reference that does not restart the angles is told apart.
 * - layouts: mtmd's smart resize (sides multiples of 28, 8..4096 merged
 *   patches) for a small, a medium and a large image, worked by hand from
 *   its definition; an elongated image is refused.
 * - the tower over a synthetic projector (corral-qwen2vl-synth's layout,
 *   F32; blocks 0 and 2 windowed, 1 and 3 full) on a 300x200 image (11 x 7
 *   merged patches, six windows, edge windows cut), against a double
 *   reference written here in raster order (window membership from each
 *   patch's coordinates, no reordering): every row cosine >= 0.9999 and a
 *   relative error < 1e-3, the backend's F16 attention rounding being the
 *   only loose step (measured: 2e-5; 4e-4 against llama.cpp, bench/vs_mtmd.sh).
 *   A reference that attends fully in every block, or ropes rows and
 *   columns the other way round, must miss those bounds.
 * - the same for Qwen2-VL's tower (projector "qwen2vl_merger": LayerNorms
 *   with biases, an ungated quick-GELU MLP, every block full), with the
 *   same bounds; a reference that norms as 2.5 does must miss them.
 * - bad files: missing second temporal kernel, q bias or window pattern,
 *   a GELU MLP: refused naming what is wrong.
 * The engine's side (token counts, M-RoPE positions, the cache) is
 * test_engine_qwen2vl's. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdarg.h>
#include <unistd.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "tools/synth/synth.h"

static char dir_g[] = "/tmp/corral-test-qwen2vl-XXXXXX";

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

/* ---- rope_multi ---------------------------------------------------------- */

/* ggml_rope_multi's definition in doubles. restart: the vision kind's
 * per-section angles (false: the mutant that keeps counting). */
static void ref_rope(double *v, int hd, int n_rot, const int32_t p[4], const int sec[4],
                     double base, bool vision, bool restart)
{
    int n_pairs = vision ? n_rot : n_rot / 2, off = vision ? n_rot : n_rot / 2;
    int sum = sec[0] + sec[1] + sec[2] + sec[3];
    for (int i = 0; i < n_pairs; i++) {
        int s = i % sum, plane = 3, start = 0;
        for (int k = 0, end = 0; k < 4; k++) {
            if (s < end + sec[k]) {
                plane = k;
                start = end;
                break;
            }
            end += sec[k];
        }
        int j = vision && restart ? i - start : i;
        double ang = p[plane] * pow(base, -2.0 * j / n_rot);
        double x0 = v[i], x1 = v[i + off];
        v[i] = x0 * cos(ang) - x1 * sin(ang);
        v[i + off] = x0 * sin(ang) + x1 * cos(ang);
    }
    (void)hd;
}

static void test_rope_multi(void)
{
    be_backend_t *be = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    const be_ops_ext_t *ext = be_ext_ops(be);
    CHECK(ext && ext->rope_multi);
    if (!ext || !ext->rope_multi) {
        be_destroy(&be);
        return;
    }
    enum { N = 5, HEADS = 3, HD = 32 };
    const int32_t pos[4][N] = {{0, 3, 3, 7, 20}, {0, 3, 5, 9, 21}, {0, 4, 3, 7, 40},
                               {0, 1, 2, 3, 4}};
    for (int vision = 0; vision < 2; vision++) {
        /* text: 16 pairs over sections 3, 5, 5, 3; vision: hd/4 each */
        int sec[4] = {3, 5, 5, 3};
        if (vision)
            sec[0] = sec[1] = sec[2] = sec[3] = HD / 4;
        int n_rot = vision ? HD / 2 : HD;
        float *x = be->ops->alloc(be, sizeof(float) * N * HEADS * HD);
        float host[N * HEADS * HD];
        double ref[N * HEADS * HD], mut[N * HEADS * HD];
        for (int i = 0; i < N * HEADS * HD; i++)
            host[i] = sinf(0.37f * (float)i) + 0.1f * (float)(i % 7);
        be->ops->upload(be, x, host, sizeof host);
        ext->rope_multi(be, x, N, HEADS, HD, n_rot, &pos[0][0], sec, 100.0f, vision);
        float got[N * HEADS * HD];
        be->ops->download(be, got, x, sizeof got);
        for (int t = 0; t < N; t++) {
            int32_t p[4] = {pos[0][t], pos[1][t], pos[2][t], pos[3][t]};
            for (int h = 0; h < HEADS; h++) {
                size_t o = ((size_t)t * HEADS + h) * HD;
                for (int i = 0; i < HD; i++)
                    ref[o + i] = mut[o + i] = host[o + i];
                ref_rope(ref + o, HD, n_rot, p, sec, 100.0, vision, true);
                ref_rope(mut + o, HD, n_rot, p, sec, 100.0, vision, false);
            }
        }
        double worst = 0, worst_mut = 0;
        for (int i = 0; i < N * HEADS * HD; i++) {
            worst = fmax(worst, fabs(got[i] - ref[i]));
            worst_mut = fmax(worst_mut, fabs(got[i] - mut[i]));
        }
        fprintf(stderr, "rope_multi (%s): max |diff| %.2e; unrestarted angles %.2e\n",
                vision ? "vision" : "text", worst, worst_mut);
        CHECK_MSG(worst < 1e-5, "rope_multi %d: max |diff| %.3e", vision, worst);
        if (vision)
            CHECK_MSG(worst_mut > 1e-2, "restart not seen (%.3e)", worst_mut);
        be->ops->free(be, x);
    }
    be_destroy(&be);
}

/* ---- layouts ------------------------------------------------------------- */

static void test_layout(const rn_clip_t *c)
{
    static const struct {
        int w, h, lw, lh;
    } cases[] = {
        /* 84 x 56 is under 8 merged patches: scaled up by sqrt(6272 / 5917) */
        {97, 61, 112, 84},
        {300, 200, 308, 196},
        /* 12 MP: scaled down by sqrt(12e6 / 3211264) = 1.933 */
        {4000, 3000, 2044, 1540},
        {28, 28, 84, 84},
    };
    cr_err_t err = {0};
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        rn_clip_layout_t L;
        CHECK(rn_clip_layout(c, cases[i].w, cases[i].h, &L, &err) == CR_OK);
        CHECK_MSG(L.width == cases[i].lw && L.height == cases[i].lh,
                  "%dx%d -> %dx%d, expected %dx%d", cases[i].w, cases[i].h, L.width,
                  L.height, cases[i].lw, cases[i].lh);
        CHECK_EQ_INT(L.nx, L.width / 28);
        CHECK_EQ_INT(L.ny, L.height / 28);
    }
    rn_clip_layout_t L;
    CHECK(rn_clip_layout(c, 200000, 20, &L, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "too elongated") != NULL, "%s", err.msg);
}

/* ---- the tower ----------------------------------------------------------- */

typedef enum mutant {
    MUT_NONE,
    MUT_ALL_FULL,  /* every block attends to the whole image */
    MUT_ROPE_SWAP, /* columns on the first quarter of pairs, rows on the second */
    MUT_RMS,       /* Qwen2-VL normed as 2.5 (RMSNorm, no bias) */
} mutant_t;

typedef struct ref {
    cr_gguf_t *g;
    int D, Hn, hd, F, L, P, H, E, wa;
    double eps;
    bool v2;  /* Qwen2-VL: LayerNorms with biases, ungated quick-GELU MLP */
    bool rms; /* the norm: RMSNorm (2.5; MUT_RMS) */
} ref_t;

static const float *T_(const ref_t *r, const char *fmt, ...) CR_PRINTF(2, 3);
static const float *T_(const ref_t *r, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(r->g, name);
    CHECK_MSG(t && t->type == CR_TYPE_F32, "reference: no F32 tensor %s", name);
    return t ? (const float *)t->data : NULL;
}

/* y [n][rows] = x [n][cols] W^T + b (b may be NULL). */
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

static void rmsn(double *y, const double *x, int n, int d, const float *w, double eps)
{
    for (int t = 0; t < n; t++) {
        double ss = 0;
        for (int i = 0; i < d; i++)
            ss += x[(size_t)t * d + i] * x[(size_t)t * d + i];
        double s = 1 / sqrt(ss / d + eps);
        for (int i = 0; i < d; i++)
            y[(size_t)t * d + i] = x[(size_t)t * d + i] * s * w[i];
    }
}

/* The tower's norm: RMSNorm (2.5), or LayerNorm with bias (Qwen2-VL);
 * name: the weight's, "<name>.weight" / "<name>.bias". */
static void norm(const ref_t *r, double *y, const double *x, int n, const char *name)
{
    const float *w = T_(r, "%s.weight", name);
    if (r->rms) {
        rmsn(y, x, n, r->D, w, r->eps);
        return;
    }
    const float *b = T_(r, "%s.bias", name);
    int d = r->D;
    for (int t = 0; t < n; t++) {
        double mean = 0, var = 0;
        for (int i = 0; i < d; i++)
            mean += x[(size_t)t * d + i] / d;
        for (int i = 0; i < d; i++)
            var += (x[(size_t)t * d + i] - mean) * (x[(size_t)t * d + i] - mean) / d;
        double s = 1 / sqrt(var + r->eps);
        for (int i = 0; i < d; i++)
            y[(size_t)t * d + i] = (x[(size_t)t * d + i] - mean) * s * w[i] + b[i];
    }
}

/* The tower in raster order of patches (py, px), out [U][E] in raster
 * order of merged patches. */
static void reference(const char *path, const float *px, int W, int Hpx, mutant_t mut,
                      double *out)
{
    ref_t r = {0};
    CHECK(cr_gguf_open(path, &r.g, NULL) == CR_OK);
    uint32_t u = 0;
    cr_gguf_get_u32(r.g, "clip.vision.embedding_length", &u), r.D = (int)u;
    cr_gguf_get_u32(r.g, "clip.vision.attention.head_count", &u), r.Hn = (int)u;
    cr_gguf_get_u32(r.g, "clip.vision.feed_forward_length", &u), r.F = (int)u;
    cr_gguf_get_u32(r.g, "clip.vision.block_count", &u), r.L = (int)u;
    cr_gguf_get_u32(r.g, "clip.vision.patch_size", &u), r.P = (int)u;
    u = 0; /* absent in Qwen2-VL's files: every block full */
    cr_gguf_get_u32(r.g, "clip.vision.n_wa_pattern", &u), r.wa = (int)u;
    float e = 0;
    cr_gguf_get_f32(r.g, "clip.vision.attention.layer_norm_epsilon", &e), r.eps = e;
    r.hd = r.D / r.Hn;
    char type[32] = "";
    cr_gguf_get_strz(r.g, "clip.projector_type", type, sizeof type);
    r.v2 = !strcmp(type, "qwen2vl_merger");
    r.rms = !r.v2 || mut == MUT_RMS;
    r.H = (int)cr_gguf_tensor_find(r.g, "mm.0.weight")->ne[1];
    r.E = (int)cr_gguf_tensor_find(r.g, "mm.2.weight")->ne[1];
    int D = r.D, P = r.P, pw = W / P, ph = Hpx / P, T = pw * ph, hd = r.hd;
    int K = 3 * P * P;
    double *x = calloc((size_t)T * D, sizeof *x), *xb = calloc((size_t)T * D, sizeof *xb);
    double *q = calloc((size_t)T * D, sizeof *q), *k = calloc((size_t)T * D, sizeof *k);
    double *v = calloc((size_t)T * D, sizeof *v), *att = calloc((size_t)T * D, sizeof *att);
    double *g = calloc((size_t)T * r.F, sizeof *g), *up = calloc((size_t)T * r.F, sizeof *up);
    double *patch = calloc((size_t)T * K, sizeof *patch), *sc = calloc(T, sizeof *sc);
    /* patches and the summed temporal kernels */
    for (int y = 0; y < ph; y++)
        for (int xx = 0; xx < pw; xx++)
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < P; ky++)
                    for (int kx = 0; kx < P; kx++)
                        patch[((size_t)y * pw + xx) * K + ((size_t)c * P + ky) * P + kx] =
                            px[((size_t)c * Hpx + (size_t)y * P + ky) * W + (size_t)xx * P + kx];
    const float *w0 = T_(&r, "v.patch_embd.weight"), *w1 = T_(&r, "v.patch_embd.weight.1");
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            double s = 0;
            for (int i = 0; i < K; i++)
                s += patch[(size_t)t * K + i] * ((double)w0[(size_t)d * K + i] +
                                                 (double)w1[(size_t)d * K + i]);
            x[(size_t)t * D + d] = s;
        }
    int gw = 112 / P / 2; /* window side in merged patches */
    for (int l = 0; l < r.L; l++) {
        bool full = mut == MUT_ALL_FULL || r.wa == 0 || (l + 1) % r.wa == 0;
        char nm[64];
        snprintf(nm, sizeof nm, "v.blk.%d.ln1", l);
        norm(&r, xb, x, T, nm);
        lin(xb, T, D, T_(&r, "v.blk.%d.attn_q.weight", l), T_(&r, "v.blk.%d.attn_q.bias", l),
            D, q);
        lin(xb, T, D, T_(&r, "v.blk.%d.attn_k.weight", l), T_(&r, "v.blk.%d.attn_k.bias", l),
            D, k);
        lin(xb, T, D, T_(&r, "v.blk.%d.attn_v.weight", l), T_(&r, "v.blk.%d.attn_v.bias", l),
            D, v);
        /* 2D rope: pair i (of hd/2, partner i + hd/2) turns with the row for
         * i < hd/4, else the column, at angle p * 10000^(-4j/hd), j its
         * index within its quarter */
        for (int t = 0; t < T; t++)
            for (int h = 0; h < r.Hn; h++)
                for (double *m = q; m; m = m == q ? k : NULL) {
                    double *vec = m + (size_t)t * D + (size_t)h * hd;
                    for (int i = 0; i < hd / 2; i++) {
                        bool row = i < hd / 4;
                        if (mut == MUT_ROPE_SWAP)
                            row = !row;
                        int p = row ? t / pw : t % pw, j = i < hd / 4 ? i : i - hd / 4;
                        double a = p * pow(10000.0, -4.0 * j / hd);
                        double x0 = vec[i], x1 = vec[i + hd / 2];
                        vec[i] = x0 * cos(a) - x1 * sin(a);
                        vec[i + hd / 2] = x0 * sin(a) + x1 * cos(a);
                    }
                }
        /* attention within the window of merged patches, or everywhere */
        for (int t = 0; t < T; t++) {
            int wt = ((t / pw) / 2 / gw) * 1000 + (t % pw) / 2 / gw;
            for (int h = 0; h < r.Hn; h++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    int wj = ((j / pw) / 2 / gw) * 1000 + (j % pw) / 2 / gw;
                    sc[j] = -INFINITY;
                    if (!full && wj != wt)
                        continue;
                    double s = 0;
                    for (int i = 0; i < hd; i++)
                        s += q[(size_t)t * D + h * hd + i] * k[(size_t)j * D + h * hd + i];
                    sc[j] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < T; j++)
                    sum += sc[j] == -INFINITY ? 0 : (sc[j] = exp(sc[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j < T; j++)
                        if (sc[j] != -INFINITY)
                            a += sc[j] / sum * v[(size_t)j * D + h * hd + i];
                    att[(size_t)t * D + h * hd + i] = a;
                }
            }
        }
        lin(att, T, D, T_(&r, "v.blk.%d.attn_out.weight", l),
            T_(&r, "v.blk.%d.attn_out.bias", l), D, xb);
        for (size_t i = 0; i < (size_t)T * D; i++)
            x[i] += xb[i];
        snprintf(nm, sizeof nm, "v.blk.%d.ln2", l);
        norm(&r, xb, x, T, nm);
        if (r.v2) {
            /* fc1 -> quick GELU (x sigmoid(1.702 x)) */
            lin(xb, T, D, T_(&r, "v.blk.%d.ffn_up.weight", l),
                T_(&r, "v.blk.%d.ffn_up.bias", l), r.F, g);
            for (size_t i = 0; i < (size_t)T * r.F; i++)
                g[i] = g[i] / (1 + exp(-1.702 * g[i]));
        } else {
            lin(xb, T, D, T_(&r, "v.blk.%d.ffn_gate.weight", l),
                T_(&r, "v.blk.%d.ffn_gate.bias", l), r.F, g);
            lin(xb, T, D, T_(&r, "v.blk.%d.ffn_up.weight", l),
                T_(&r, "v.blk.%d.ffn_up.bias", l), r.F, up);
            for (size_t i = 0; i < (size_t)T * r.F; i++)
                g[i] = g[i] / (1 + exp(-g[i])) * up[i];
        }
        lin(g, T, r.F, T_(&r, "v.blk.%d.ffn_down.weight", l),
            T_(&r, "v.blk.%d.ffn_down.bias", l), D, xb);
        for (size_t i = 0; i < (size_t)T * D; i++)
            x[i] += xb[i];
    }
    norm(&r, x, x, T, "v.post_ln");
    /* merge 2 x 2 neighbours (row-major inside), then mm.0 -> GELU -> mm.2 */
    int U = (pw / 2) * (ph / 2);
    double *m4 = calloc((size_t)U * 4 * D, sizeof *m4), *hid = calloc((size_t)U * r.H,
                                                                      sizeof *hid);
    for (int uy = 0; uy < ph / 2; uy++)
        for (int ux = 0; ux < pw / 2; ux++)
            for (int d4 = 0; d4 < 4; d4++) {
                int t = (2 * uy + d4 / 2) * pw + 2 * ux + d4 % 2;
                memcpy(m4 + ((size_t)(uy * (pw / 2) + ux) * 4 + d4) * D, x + (size_t)t * D,
                       (size_t)D * sizeof *m4);
            }
    lin(m4, U, 4 * D, T_(&r, "mm.0.weight"), T_(&r, "mm.0.bias"), r.H, hid);
    for (size_t i = 0; i < (size_t)U * r.H; i++) {
        double a = hid[i];
        hid[i] = 0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
    }
    lin(hid, U, r.H, T_(&r, "mm.2.weight"), T_(&r, "mm.2.bias"), r.E, out);
    free(x), free(xb), free(q), free(k), free(v), free(att), free(g), free(up), free(patch);
    free(sc), free(m4), free(hid);
    cr_gguf_close(&r.g);
}

/* worst row cosine and relative error of out [n][d] against ref */
static void compare(const float *out, const double *ref, int n, int d, double *worst,
                    double *rel)
{
    double num = 0, den = 0;
    *worst = 1;
    for (int t = 0; t < n; t++) {
        double dot = 0, a2 = 0, b2 = 0;
        for (int i = 0; i < d; i++) {
            double a = out[(size_t)t * d + i], b = ref[(size_t)t * d + i];
            dot += a * b, a2 += a * a, b2 += b * b;
            num += (a - b) * (a - b), den += b * b;
        }
        *worst = fmin(*worst, a2 > 0 && b2 > 0 ? dot / sqrt(a2 * b2) : 0);
    }
    *rel = den > 0 ? sqrt(num / den) : 1;
}

/* qwen2: Qwen2-VL's tower (projector qwen2vl_merger) instead of 2.5's. */
static void test_tower(bool qwen2)
{
    char path[128];
    snprintf(path, sizeof path, "%s/qwen%s.mmproj.gguf", dir_g, qwen2 ? "2" : "25");
    rn_synth_qwen2vl_opts_t o;
    rn_synth_qwen2vl_defaults(&o);
    o.seed = 5;
    o.qwen2 = qwen2;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_qwen2vl_write(&o, path, &err) == CR_OK, "%s", err.msg);
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    CHECK(be_cpu_new(2, &be, &err) == CR_OK);
    CHECK_MSG(rn_clip_load(path, be, &c, &err) == CR_OK, "%s", err.msg);
    if (!c) {
        be_destroy(&be);
        return;
    }
    const rn_clip_hparams_t *hp = rn_clip_hparams(c);
    CHECK(hp->dynamic);
    CHECK(!strcmp(hp->projector, qwen2 ? "qwen2vl_merger" : "qwen2.5vl_merger"));
    CHECK_EQ_INT(hp->n_embd, 64);
    CHECK_EQ_INT(hp->n_patches, 4096);
    test_layout(c);

    rn_image_t *im = gradient(300, 200);
    rn_clip_layout_t L;
    CHECK(rn_clip_layout(c, im->width, im->height, &L, &err) == CR_OK);
    CHECK(L.nx == 11 && L.ny == 7);
    size_t npx = 3 * (size_t)L.width * L.height, n = (size_t)L.nx * L.ny;
    size_t nout = n * (size_t)hp->n_embd;
    float *px = malloc(npx * sizeof *px), *out = malloc(nout * sizeof *out);
    float *again = malloc(nout * sizeof *again);
    double *ref = malloc(nout * sizeof *ref);
    CHECK(rn_clip_preprocess(c, im, px, &err) == CR_OK);
    CHECK_MSG(rn_clip_encode_at(c, &L, px, out, &err) == CR_OK, "%s", err.msg);
    double worst, rel;
    reference(path, px, L.width, L.height, MUT_NONE, ref);
    compare(out, ref, (int)n, hp->n_embd, &worst, &rel);
    fprintf(stderr, "%s tower vs scalar reference: worst row cosine %.7f, relative error "
            "%.2e\n", qwen2 ? "qwen2-vl" : "qwen2.5-vl", worst, rel);
    CHECK_MSG(worst >= 0.9999, "worst row cosine %.6f", worst);
    CHECK_MSG(rel < 1e-3, "relative error %.2e", rel);
    /* Qwen2-VL attends fully everywhere: its mutant is the norm instead */
    const mutant_t muts[] = {qwen2 ? MUT_RMS : MUT_ALL_FULL, MUT_ROPE_SWAP};
    for (size_t i = 0; i < CR_ARRAY_LEN(muts); i++) {
        reference(path, px, L.width, L.height, muts[i], ref);
        compare(out, ref, (int)n, hp->n_embd, &worst, &rel);
        fprintf(stderr, "  mutant %d: worst row cosine %.5f, relative error %.2e\n",
                (int)muts[i], worst, rel);
        CHECK_MSG(worst < 0.9999 && rel > 1e-2, "mutant %d not detected (%.6f, %.2e)",
                  (int)muts[i], worst, rel);
    }
    /* the same image again: the same bytes; a smaller one after it runs in
     * the grown buffers; the wrong layout is refused */
    CHECK(rn_clip_encode_at(c, &L, px, again, &err) == CR_OK);
    CHECK(!memcmp(out, again, nout * sizeof *out));
    rn_image_t *small = gradient(97, 61);
    rn_clip_layout_t Ls;
    CHECK(rn_clip_layout(c, small->width, small->height, &Ls, &err) == CR_OK);
    CHECK(rn_clip_preprocess(c, small, px, &err) == CR_OK);
    CHECK(rn_clip_encode_at(c, &Ls, px, again, &err) == CR_OK);
    reference(path, px, Ls.width, Ls.height, MUT_NONE, ref);
    compare(again, ref, Ls.nx * Ls.ny, hp->n_embd, &worst, &rel);
    CHECK_MSG(worst >= 0.9999 && rel < 1e-3, "small image: %.6f, %.2e", worst, rel);
    rn_clip_layout_t bad = Ls;
    bad.width += 28;
    CHECK(rn_clip_encode_at(c, &bad, px, again, &err) == CR_E_INVALID);
    rn_image_destroy(&small);
    rn_image_destroy(&im);
    free(px), free(out), free(again), free(ref);
    rn_clip_destroy(&c);
    be_destroy(&be);
}

/* ---- bad files ------------------------------------------------------------ */

/* The synthetic projector rewritten without tensor `drop` and with key
 * `key` set to a bool or dropped; the load's status. */
static cr_status_t load_edited(const char *drop_tensor, const char *drop_key,
                               const char *bool_key, bool bool_val, cr_err_t *err)
{
    char src[160], dst[160];
    snprintf(src, sizeof src, "%s/base.gguf", dir_g);
    snprintf(dst, sizeof dst, "%s/edited.gguf", dir_g);
    rn_synth_qwen2vl_opts_t o;
    rn_synth_qwen2vl_defaults(&o);
    o.n_layers = 2;
    CHECK(rn_synth_qwen2vl_write(&o, src, err) == CR_OK);
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(src, &g, err) == CR_OK);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    for (size_t i = 0; g && i < cr_gguf_kv_count(g); i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        if ((drop_key && cr_gguf_str_eq(kv->key, drop_key)) ||
            (bool_key && cr_gguf_str_eq(kv->key, bool_key)))
            continue;
        cr_gguf_writer_copy_kv(w, kv, NULL);
    }
    if (bool_key)
        cr_gguf_writer_add_bool(w, bool_key, bool_val, NULL);
    for (size_t i = 0; g && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (!drop_tensor || strcmp(t->name, drop_tensor))
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                      NULL);
    }
    CHECK(cr_gguf_writer_write(w, dst, err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    CHECK(be_cpu_new(1, &be, err) == CR_OK);
    cr_status_t st = rn_clip_load(dst, be, &c, err);
    CHECK((st == CR_OK) == (c != NULL));
    rn_clip_destroy(&c);
    be_destroy(&be);
    return st;
}

static void test_bad_files(void)
{
    cr_err_t err = {0};
    CHECK(load_edited(NULL, NULL, NULL, false, &err) == CR_OK);
    CHECK(load_edited("v.patch_embd.weight.1", NULL, NULL, false, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.patch_embd.weight.1") != NULL, "%s", err.msg);
    CHECK(load_edited("v.blk.1.attn_q.bias", NULL, NULL, false, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.blk.1.attn_q.bias") != NULL, "%s", err.msg);
    CHECK(load_edited(NULL, "clip.vision.n_wa_pattern", NULL, false, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "n_wa_pattern") != NULL, "%s", err.msg);
    CHECK(load_edited(NULL, NULL, "clip.use_silu", false, &err) == CR_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "not supported yet") != NULL, "%s", err.msg);

}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    test_rope_multi();
    test_tower(false);
    test_tower(true);
    test_bad_files();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("qwen2vl");
}
