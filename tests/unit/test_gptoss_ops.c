/* test_gptoss_ops.c: the backend ops gpt-oss adds (backend.h), on the CPU
 * backend, against plain double-precision references written here from
 * their definitions: YaRN rope (be_ops_ext_t.rope_yarn), attention sinks
 * (be_attn_t.sinks, in attention and attention_ext, with and without a
 * window), the clamped SwiGLU (swiglu_oai) and a bias row of a stack
 * (add_row_of). Each check is paired with
 * one showing the feature changes the result (a kernel that dropped it
 * would fail). */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "tests/unit/check.h"

#include <math.h>

static be_backend_t *be_g;

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* ---- YaRN rope ------------------------------------------------------------ */

/* Pair i's angle and magnitude as YaRN defines them (be_rope_yarn_t). */
static void ref_yarn(const be_rope_yarn_t *y, int n_rot, int pos, int i, double ff,
                     double *angle, double *mag)
{
    double extrap = pos * pow(y->freq_base, -2.0 * i / n_rot) / ff;
    double interp = extrap * y->freq_scale;
    double r = (i - y->corr_lo) / fmax(0.001, y->corr_hi - y->corr_lo);
    double mix = (1.0 - fmin(1.0, fmax(0.0, r))) * y->ext_factor;
    *angle = interp * (1 - mix) + extrap * mix;
    *mag = y->attn_factor * (y->ext_factor != 0 ? 1 + 0.1 * log(1 / y->freq_scale) : 1);
}

/* x [T][H][HD] turned by the reference (NEOX halves of the first n_rot). */
static void ref_rope_yarn(float *x, int T, int H, int HD, int n_rot, const int32_t *pos,
                          const be_rope_yarn_t *y, const float *ff)
{
    int half = n_rot / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            float *v = x + ((size_t)t * H + h) * HD;
            for (int i = 0; i < half; i++) {
                double a, m;
                ref_yarn(y, n_rot, pos[t], i, ff ? ff[i] : 1.0, &a, &m);
                double x0 = v[i], x1 = v[i + half];
                v[i] = (float)(m * (x0 * cos(a) - x1 * sin(a)));
                v[i + half] = (float)(m * (x0 * sin(a) + x1 * cos(a)));
            }
        }
}

static void test_rope_yarn(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    enum { T = 6, H = 3, HD = 20, NROT = 16, N = T * H * HD };
    uint64_t seed = 7;
    float src[N], got[N], want[N];
    for (int i = 0; i < N; i++)
        src[i] = frand(&seed);
    /* positions up to 60: the kernel builds angles by repeated float
     * multiplication (ggml's order), about i ulp of relative error in pair
     * i's angle, so |angle error| < 60 * 16 * 1.2e-7 ~ 1.2e-4 at worst and
     * far less in practice; values are < 1.4 in magnitude. Tolerance 2e-4. */
    int32_t pos[T] = {0, 1, 7, 19, 33, 60};
    float ffv[NROT / 2] = {1, 1, 2, 1, 4, 1, 8, 1};
    be_weight_t ff = {.name = "ff", .type = CR_TYPE_F32, .n_cols = NROT / 2, .n_rows = 1,
                      .row_bytes = sizeof ffv, .data = ffv};
    /* 8 pairs: 0..2 extrapolate, 3 and 4 on the ramp, 5..7 interpolate */
    be_rope_yarn_t y = {.freq_base = 500.0f, .freq_scale = 0.125f, .ext_factor = 1.0f,
                        .corr_lo = 2.0f, .corr_hi = 5.0f, .attn_factor = 0.9f};
    const be_weight_t *ffs[2] = {NULL, &ff};
    for (int k = 0; k < 2; k++) {
        memcpy(got, src, sizeof src);
        memcpy(want, src, sizeof src);
        ext->rope_yarn(be_g, got, T, H, HD, NROT, pos, &y, ffs[k]);
        ref_rope_yarn(want, T, H, HD, NROT, pos, &y, k ? ffv : NULL);
        double e = max_abs_diff(got, want, N);
        CHECK_MSG(e < 2e-4, "rope_yarn (factors %d) error %g", k, e);
        /* dims past n_rot stay as they were */
        bool tail = true;
        for (int r = 0; r < T * H; r++)
            for (int d = NROT; d < HD; d++)
                tail = tail && got[r * HD + d] == src[r * HD + d];
        CHECK(tail);
    }

    /* the ramp matters: the same call without extrapolation (plain
     * interpolation, ext_factor 0) is far from it */
    be_rope_yarn_t lin = y;
    lin.ext_factor = 0;
    float flat[N];
    memcpy(got, src, sizeof src);
    memcpy(flat, src, sizeof src);
    ext->rope_yarn(be_g, got, T, H, HD, NROT, pos, &y, NULL);
    ext->rope_yarn(be_g, flat, T, H, HD, NROT, pos, &lin, NULL);
    CHECK(max_abs_diff(got, flat, N) > 0.1);
    /* ext_factor 0 is linear scaling times attn_factor, nothing more */
    memcpy(want, src, sizeof src);
    ref_rope_yarn(want, T, H, HD, NROT, pos, &lin, NULL);
    CHECK_MSG(max_abs_diff(flat, want, N) < 2e-4, "linear %g", max_abs_diff(flat, want, N));
    /* position 0 turns nothing: only the magnitude applies */
    CHECK_NEAR(got[0], src[0] * 0.9 * (1 + 0.1 * log(8.0)), 1e-6);
}

/* ---- attention sinks ------------------------------------------------------ */

/* Double reference of one query row: softmax over the keys first..qp of
 * scale * q.k (plus the sink when given), times v; on the same F16 k/v. */
static void ref_attend(const float *q, const uint16_t *k, const uint16_t *v, int kv_row,
                       int hd, int first, int qp, double scale, const float *sink,
                       double *out)
{
    double s[64], mx = sink ? *sink : -INFINITY, sum = 0;
    for (int j = first; j <= qp; j++) {
        double d = 0;
        for (int e = 0; e < hd; e++)
            d += q[e] * (double)be_f16_to_f32(k[(size_t)j * kv_row + e]);
        s[j] = d * scale;
        mx = fmax(mx, s[j]);
    }
    for (int j = first; j <= qp; j++)
        sum += (s[j] = exp(s[j] - mx));
    if (sink)
        sum += exp(*sink - mx);
    for (int e = 0; e < hd; e++) {
        double o = 0;
        for (int j = first; j <= qp; j++)
            o += s[j] / sum * be_f16_to_f32(v[(size_t)j * kv_row + e]);
        out[e] = o;
    }
}

static void test_sinks(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    enum { T = 9, NQ = 4, H = 4, HKV = 2, HD = 8, KVD = HKV * HD, Q = H * HD };
    uint64_t seed = 11;
    float q[NQ * Q], kf[T * KVD], vf[T * KVD], out[NQ * Q], plain[NQ * Q];
    uint16_t k16[T * KVD], v16[T * KVD];
    for (int i = 0; i < NQ * Q; i++)
        q[i] = 2 * frand(&seed);
    for (int i = 0; i < T * KVD; i++) {
        kf[i] = 2 * frand(&seed);
        vf[i] = frand(&seed);
    }
    be_f32_to_f16_row(kf, k16, T * KVD);
    be_f32_to_f16_row(vf, v16, T * KVD);
    /* one sink far below the scores (almost no effect), one far above (the
     * head's output nearly vanishes), two comparable */
    float sv[H] = {-20.0f, 0.3f, 6.0f, -0.5f};
    be_weight_t sinks = {.name = "blk.0.attn_sinks.weight", .type = CR_TYPE_F32,
                         .n_cols = H, .n_rows = 1, .row_bytes = sizeof sv, .data = sv};
    be_attn_t a = {.n_tok = NQ, .pos0 = T - NQ, .n_head = H, .n_head_kv = HKV,
                   .head_dim = HD, .scale = 0.4f, .sinks = &sinks,
                   .kv_type = CR_TYPE_F16};
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_g->ops->reserve(be_g, T, 64, T, H, &err), CR_OK);
    float scratch[2 * T + 2 * HD];
    CHECK(be_attention_ext_scratch(T, HD) <= CR_ARRAY_LEN(scratch));

    /* window 0: the threaded op and attention_ext; window 3: attention_ext */
    for (int c = 0; c < 3; c++) {
        int window = c == 2 ? 3 : 0;
        if (c == 0)
            be_g->ops->attention(be_g, out, q, k16, v16, &a);
        else
            ext->attention_ext(be_g, out, q, k16, v16, &a, 0, window, scratch);
        double maxe = 0;
        for (int t = 0; t < NQ; t++)
            for (int h = 0; h < H; h++) {
                int qp = a.pos0 + t, first = window && qp - window + 1 > 0 ? qp - window + 1 : 0;
                double o[HD];
                int hk = h / (H / HKV);
                ref_attend(q + t * Q + h * HD, k16 + hk * HD, v16 + hk * HD, KVD, HD,
                           first, qp, a.scale, &sv[h], o);
                for (int e = 0; e < HD; e++)
                    maxe = fmax(maxe, fabs(o[e] - out[t * Q + h * HD + e]));
            }
        /* q and the probabilities are rounded to F16 (~5e-4 relative each)
         * as the engine and llama.cpp do; outputs are < 1 */
        CHECK_MSG(maxe < 2e-3, "attention with sinks (case %d) error %g", c, maxe);
    }

    /* the sinks matter: head 2's output shrinks by about e^-6 without... */
    be_attn_t no = a;
    no.sinks = NULL;
    be_g->ops->attention(be_g, plain, q, k16, v16, &no);
    be_g->ops->attention(be_g, out, q, k16, v16, &a);
    double d2 = 0, d0 = 0;
    for (int t = 0; t < NQ; t++)
        for (int e = 0; e < HD; e++) {
            d2 = fmax(d2, fabs(out[t * Q + 2 * HD + e] - plain[t * Q + 2 * HD + e]));
            d0 = fmax(d0, fabs(out[t * Q + 0 * HD + e] - plain[t * Q + 0 * HD + e]));
        }
    CHECK_MSG(d2 > 0.05, "sink 6.0 changed head 2 by only %g", d2);
    /* ...and a sink of -20 is invisible at F16 probabilities */
    CHECK_MSG(d0 < 1e-3, "sink -20 changed head 0 by %g", d0);
}

/* ---- clamped SwiGLU ------------------------------------------------------- */

static void test_swiglu_oai(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    enum { N = 41 };
    float g[N], u[N], y[N], alias[N];
    for (int i = 0; i < N; i++) {
        g[i] = -10.0f + 0.5f * (float)i;       /* -10 .. 10: both sides of 7 */
        u[i] = 9.0f - 0.45f * (float)(i * 7 % N); /* -9 .. 9, shuffled */
    }
    ext->swiglu_oai(be_g, y, g, u, N, 1.702f, 7.0f);
    double maxe = 0;
    for (int i = 0; i < N; i++) {
        double gc = fmin(g[i], 7.0), uc = fmin(fmax(u[i], -7.0), 7.0);
        double want = gc / (1 + exp(-1.702 * gc)) * (uc + 1);
        /* float expf and three float operations: a few ulp of a value
         * below 8 * 8 = 64 */
        maxe = fmax(maxe, fabs(y[i] - want) / fmax(1.0, fabs(want)));
    }
    CHECK_MSG(maxe < 1e-5, "swiglu_oai error %g", maxe);
    /* the clamps: gate 10 acts as 7, up -9 as -7, up 9 as 7 */
    float g1[3] = {10.0f, 1.0f, 1.0f}, u1[3] = {0.0f, -9.0f, 9.0f}, y1[3];
    ext->swiglu_oai(be_g, y1, g1, u1, 3, 1.702f, 7.0f);
    CHECK_NEAR(y1[0], 7.0 / (1 + exp(-1.702 * 7.0)), 1e-5);
    CHECK_NEAR(y1[1], -6.0 / (1 + exp(-1.702)), 1e-5);
    CHECK_NEAR(y1[2], 8.0 / (1 + exp(-1.702)), 1e-5);
    /* in place over the gate, as the MoE layer calls it */
    memcpy(alias, g, sizeof g);
    ext->swiglu_oai(be_g, alias, alias, u, N, 1.702f, 7.0f);
    CHECK(max_abs_diff(alias, y, N) == 0);
}

/* ---- one bias row of a stack ---------------------------------------------- */

static void test_add_row_of(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    enum { E = 3, C = 5, T = 4 };
    float b[E * C], y[T * C];
    for (int i = 0; i < E * C; i++)
        b[i] = (float)(i * i) - 7.0f;
    be_weight_t bw = {.name = "blk.0.ffn_up_exps.bias", .type = CR_TYPE_F32, .n_cols = C,
                      .n_rows = E, .row_bytes = C * sizeof(float), .data = b};
    for (int i = 0; i < T * C; i++)
        y[i] = 0.5f * (float)i;
    ext->add_row_of(be_g, y, &bw, 2, T);
    bool ok = true;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            ok = ok && y[t * C + c] == 0.5f * (float)(t * C + c) + b[2 * C + c];
    CHECK(ok);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    CHECK(ext && ext->rope_yarn && ext->swiglu_oai && ext->add_row_of);
    if (ext && ext->rope_yarn && ext->swiglu_oai && ext->add_row_of) {
        test_rope_yarn();
        test_sinks();
        test_swiglu_oai();
        test_add_row_of();
    }
    be_destroy(&be_g);
    return check_finish("test_gptoss_ops");
}
