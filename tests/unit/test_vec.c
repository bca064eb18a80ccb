/* test_vec.c: the CPU backend's vector inner loops (vec.h) against their
 * scalar versions, at every SIMD level this CPU runs (the levels it lacks
 * are printed as not tested).
 *
 * One rule for every level, every op:
 * - ops whose contract is "the same bits" (attn_v, rope_pairs, rope_halves)
 *   must give the same bits; a NaN must stay a NaN (any payload); attn_v2
 *   must give attn_v's bits per row, dot_f16 and dot2_f16 the level's F16
 *   vec_dot's;
 * - ops with the vector exp (swiglu, exp_sum) must be within TOL_REL of the
 *   scalar result, plus TOL_ABS, and agree exactly on NaN, +-inf and on
 *   the zeros of masked (-inf) scores;
 * - rmsnorm within 2 ulp (its own comment).
 *
 * Every op also sees the edge inputs it can meet: +-0, values whose exp
 * underflows or overflows (+-87..89, +-100, -104), subnormal inputs,
 * +-inf and NaN (a masked attention score is -inf; a diverged model makes
 * NaN, which must stay visible), and lengths around the vector width. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/vec.h"
#include "tests/unit/check.h"
#include "tests/unit/splitmix.h"

#include <float.h>
#include <math.h>

/* The vector exp is within 4 ulp of expf; swiglu then adds, divides and
 * multiplies (one rounding each) and exp_sum subtracts first, so a result
 * is within about 7 ulp-sized relative steps of the scalar one: 8 allowed.
 * Results in the subnormal range (below FLT_MIN, 1.2e-38) carry fewer
 * bits: there a value within 4 ulp of the true one still rounds to a
 * subnormal that can differ from the scalar's by one unit of 2^-149, and
 * so TOL_ABS is two such units (2.8e-45). It is not a flush: a kernel that
 * gives 0 where the scalar gives 1e-40 fails. */
#define TOL_REL (8 * FLT_EPSILON)
#define TOL_ABS (2 * 0x1p-149f)

static uint64_t rng_s = 0x5eed;

/* Inputs every elementwise op sees, wherever they land in a vector. */
static const float edge_g[] = {
    0.0f,      -0.0f,   1e-3f,     -1e-3f,     1e-30f,   -1e-30f,  1e-40f /* subnormal */,
    -1e-40f,   0x1p-149f, 5.0f,    87.0f,      -87.0f,   87.4f,    -87.4f,
    88.5f,     -88.5f,  88.7f,     -88.7f,     88.73f,   -88.73f,  89.5f,
    -89.5f,    100.0f,  -100.0f,   103.9f,     -103.9f,  104.5f,   -104.5f,
    FLT_MAX,   -FLT_MAX, INFINITY, -INFINITY,  NAN,      -NAN,
};

static bool same_bits(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4), memcpy(&y, &b, 4);
    return x == y || (isnan(a) && isnan(b));
}

/* The rule for the exp ops (see TOL_REL, TOL_ABS). */
static bool close_exp(float got, float want)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabsf(got - want) <= TOL_REL * fabsf(want) + TOL_ABS;
}

static void test_attn_v(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int hds[] = {64, 80, 100, 3, 1, 7, 8, 9, 15, 16, 17};
    int nkvs[] = {0, 1, 2, 9, 37, 300};
    /* f16 edge values in v: +-0, subnormal, the largest, inf, NaN */
    const uint16_t v_edge[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00};
    for (size_t h = 0; h < CR_ARRAY_LEN(hds); h++)
        for (size_t k = 0; k < CR_ARRAY_LEN(nkvs); k++) {
            int hd = hds[h], n = nkvs[k];
            size_t stride = (size_t)hd * 3 + 5;
            uint16_t *vv = malloc(stride * (size_t)(n + 1) * sizeof *vv);
            uint16_t *pr = malloc((size_t)(n + 1) * sizeof *pr);
            for (size_t i = 0; i < stride * (size_t)(n + 1); i++)
                vv[i] = be_f32_to_f16((float)(splitmix_unit(&rng_s) * 8 - 4));
            for (int p = 0; p < n; p++) {
                pr[p] = be_f32_to_f16(p % 5 == 2 ? 0.0f : (float)splitmix_unit(&rng_s) / (float)n);
                if (p % 7 == 3)
                    pr[p] = 0x0003; /* a subnormal probability */
                /* a row whose probability is zero may hold anything: skipped */
                if (p % 5 == 2 && hd > 2)
                    vv[7 + (size_t)p * stride + 1] = 0x7e00;
            }
            /* edge values in the last row (one the sum does not skip) */
            if (n > 0 && n % 2 == 0) {
                pr[n - 1] = be_f32_to_f16(0.25f);
                for (int d = 0; d < hd; d++)
                    vv[7 + (size_t)(n - 1) * stride + (size_t)d] =
                        v_edge[(size_t)d % CR_ARRAY_LEN(v_edge)];
            }
            float want[128], got[128];
            s->attn_v(n, pr, vv + 7, stride, hd, want);
            v->attn_v(n, pr, vv + 7, stride, hd, got);
            int bad = 0;
            for (int d = 0; d < hd; d++)
                bad += !same_bits(got[d], want[d]);
            CHECK_MSG(bad == 0, "attn_v %s hd=%d n_kv=%d: %d values' bits differ", lv, hd, n,
                      bad);
            if (n == 0) { /* nothing to sum: zeros */
                for (int d = 0; d < hd; d++)
                    bad += got[d] != 0;
                CHECK_MSG(bad == 0, "attn_v %s hd=%d: n_kv=0 not zero", lv, hd);
            }
            free(vv);
            free(pr);
        }
}

/* attn_v2 is attn_v for each of its rows: the same bits, a zero
 * probability skipping a row (whose V may hold NaN) for one query only. */
static void test_attn_v2(const be_vec_ops_t *v, const char *lv)
{
    int hds[] = {256, 64, 40, 7, 9, 1};
    int nkvs[] = {0, 1, 5, 33, 300};
    for (size_t h = 0; h < CR_ARRAY_LEN(hds); h++)
        for (size_t k = 0; k < CR_ARRAY_LEN(nkvs); k++) {
            int hd = hds[h], n = nkvs[k];
            size_t stride = (size_t)hd * 2 + 3;
            uint16_t *vv = malloc(stride * (size_t)(n + 1) * sizeof *vv);
            uint16_t *p0 = malloc((size_t)(n + 1) * sizeof *p0);
            uint16_t *p1 = malloc((size_t)(n + 1) * sizeof *p1);
            float *want = malloc(4 * (size_t)hd * sizeof(float)), *got = want + 2 * hd;
            for (size_t i = 0; i < stride * (size_t)(n + 1); i++)
                vv[i] = be_f32_to_f16((float)(splitmix_unit(&rng_s) * 8 - 4));
            for (int p = 0; p < n; p++) {
                p0[p] = be_f32_to_f16((float)splitmix_unit(&rng_s) / (float)n);
                p1[p] = be_f32_to_f16((float)splitmix_unit(&rng_s) / (float)n);
                if (p % 4 == 1)
                    p0[p] = 0; /* skipped for query 0 only */
                if (p % 6 == 2)
                    p1[p] = 0; /* query 1 only (p % 4 == 1 and p % 6 == 2 never meet) */
                if (p % 4 == 1 || p % 6 == 2)
                    vv[(size_t)p * stride] = 0x7e00; /* NaN where one query skips */
                if (p % 9 == 4)
                    p0[p] = p1[p] = 0, vv[(size_t)p * stride + hd - 1] = 0x7c00;
            }
            v->attn_v(n, p0, vv, stride, hd, want);
            v->attn_v(n, p1, vv, stride, hd, want + hd);
            v->attn_v2(n, p0, p1, vv, stride, hd, got, got + hd);
            int bad = 0;
            for (int d = 0; d < 2 * hd; d++)
                bad += !same_bits(got[d], want[d]);
            CHECK_MSG(bad == 0, "attn_v2 %s hd=%d n_kv=%d: %d values' bits differ from attn_v",
                      lv, hd, n, bad);
            free(vv);
            free(p0);
            free(p1);
            free(want);
        }
}

static float spread(void)
{
    return ldexpf((float)(splitmix_unit(&rng_s) * 2 - 1), (int)(splitmix_unit(&rng_s) * 17) - 8);
}

/* dot_f16 and dot2_f16 give the level's F16 vec_dot bits for queries held
 * as the floats of their F16 values. */
static void test_dot_f16(be_simd_t level, const be_vec_ops_t *v, const char *lv)
{
    be_vec_dot_fn dot = be_type_traits_at(CR_TYPE_F16, level)->vec_dot;
    int ns[] = {256, 64, 40, 33, 8, 7, 1};
    for (size_t i = 0; i < CR_ARRAY_LEN(ns); i++) {
        int n = ns[i];
        uint16_t k[256], q16[2][256];
        float q[2][256];
        /* magnitudes 2^-8..2^8: sums round, so a chain summed in another
         * order shows in the bits */
        for (int d = 0; d < n; d++) {
            k[d] = be_f32_to_f16(spread());
            for (int r = 0; r < 2; r++) {
                q16[r][d] = be_f32_to_f16(spread());
                q[r][d] = be_f16_to_f32(q16[r][d]);
            }
        }
        float want[2], one, two[2];
        for (int r = 0; r < 2; r++)
            dot(n, &want[r], k, q16[r]);
        int bad = 0;
        for (int r = 0; r < 2; r++) {
            v->dot_f16(n, &one, k, q[r]);
            bad += !same_bits(one, want[r]);
        }
        v->dot2_f16(n, two, k, q[0], q[1]);
        bad += !same_bits(two[0], want[0]) + !same_bits(two[1], want[1]);
        CHECK_MSG(bad == 0, "dot_f16 %s n=%d: %d of 4 results differ from the F16 vec_dot", lv,
                  n, bad);
    }
}

/* scores: without a cap, one product (the same bits at every level); with
 * one, cap * tanh(t) for t = (x * scale) / cap (both roundings as the
 * scalar makes them) within TOL_TANH relative of that value in double:
 * tanh's own error (Cephes' form: about 1 ulp below |t| = 0.625; above,
 * exp_ps's 4 ulp enter 2 / (e + 1), at most 0.45 of a result >= 0.55,
 * and the divide, add and subtract round once each: 6 ulp) and the
 * product's rounding, plus two units of 2^-149 where results are
 * subnormal. glibc's tanhf (the scalar) is within 2 ulp. */
#define TOL_TANH (8 * FLT_EPSILON)

static void test_scores(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    static const float caps[] = {50.0f, 30.0f, 2.5f, 1.0f};
    enum { N = 4000 };
    float *x = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float)),
          *b = malloc(N * sizeof(float));
    for (size_t c = 0; c < CR_ARRAY_LEN(caps); c++) {
        float cap = caps[c], scale = c % 2 ? 0.125f : 1.0f;
        int n = 0;
        for (size_t i = 0; i < CR_ARRAY_LEN(edge_g); i++)
            x[n++] = edge_g[i];
        /* both sides of the branch point |t| = 0.625, and a sweep of
         * magnitudes 2^-30..2^10 of both signs */
        for (int k = -3; k <= 3; k++) {
            float t = nextafterf(0.625f, k < 0 ? 0.0f : 1.0f);
            for (int m = 0; m < (k < 0 ? -k : k); m++)
                t = nextafterf(t, k < 0 ? 0.0f : 1.0f);
            x[n++] = t * cap / scale, x[n++] = -t * cap / scale;
        }
        while (n < N - 1) /* odd count: the vector tail runs too */
            x[n++] = ldexpf((float)(splitmix_unit(&rng_s) * 2 - 1),
                            (int)(splitmix_unit(&rng_s) * 41) - 30) * cap;
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        s->scores(n, a, scale, cap);
        v->scores(n, b, scale, cap);
        double worst[2] = {0, 0};
        int bad = 0;
        for (int i = 0; i < n; i++) {
            float t = (x[i] * scale) / cap;
            double want = (double)cap * tanh((double)t);
            for (int w = 0; w < 2; w++) {
                float got = w ? b[i] : a[i];
                bool ok;
                if (isnan(want))
                    ok = isnan(got);
                else {
                    double err = fabs(got - want);
                    ok = err <= TOL_TANH * fabs(want) + TOL_ABS;
                    if (want != 0 && fabs(want) >= FLT_MIN)
                        worst[w] = fmax(worst[w], err / fabs(want) / FLT_EPSILON);
                }
                if (!ok && bad++ < 3)
                    fprintf(stderr, "  scores %s cap %g: %.9g gave %.9g (%s), want %.9g\n", lv,
                            (double)cap, (double)x[i], (double)got, w ? "vector" : "scalar",
                            want);
            }
        }
        CHECK_MSG(bad == 0, "scores %s cap %g: %d results outside the bound", lv, (double)cap,
                  bad);
        if (c == 0)
            printf("test_vec: scores %s: worst soft-cap error %.2f ulp (scalar %.2f; bound %d)\n",
                   lv, worst[1], worst[0], (int)(TOL_TANH / FLT_EPSILON));
        /* no cap: the product alone, the same bits */
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        s->scores(n, a, scale, 0);
        v->scores(n, b, scale, 0);
        bad = 0;
        for (int i = 0; i < n; i++)
            bad += !same_bits(a[i], b[i]) || !same_bits(a[i], x[i] * scale);
        CHECK_MSG(bad == 0, "scores %s scale %g: %d products differ", lv, (double)scale, bad);
    }
    free(x);
    free(a);
    free(b);
}

static void test_swiglu(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    enum { N = 1003 };
    float g[N], u[N], want[N], got[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)(splitmix_unit(&rng_s) * 40 - 20);
        u[i] = (float)(splitmix_unit(&rng_s) * 4 - 2);
    }
    /* the edges twice: in the vector body and with u = 1, 0, -0, 1e-40 */
    float u_edge[] = {1.0f, 0.0f, -0.0f, 1e-40f};
    size_t ne = CR_ARRAY_LEN(edge_g);
    for (size_t r = 0; r < CR_ARRAY_LEN(u_edge); r++)
        for (size_t i = 0; i < ne; i++) {
            g[r * ne + i + 1] = edge_g[i];
            u[r * ne + i + 1] = u_edge[r];
        }
    for (size_t i = 0; i < ne; i++) /* and with random u */
        g[4 * ne + 3 * i + 2] = edge_g[i];
    s->swiglu(N, want, g, u);
    v->swiglu(N, got, g, u);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (!close_exp(got[i], want[i])) {
            if (bad++ < 5)
                fprintf(stderr, "swiglu %s g=%g u=%g: %.9g want %.9g\n", lv, g[i], u[i],
                        got[i], want[i]);
        }
    CHECK_MSG(bad == 0, "swiglu %s: %d off", lv, bad);
    /* silu(-88.5) is -3.3e-37 in float, not 0: the case that once flushed */
    float g1[8] = {-88.5f, -88.5f, -88.5f, -88.5f, -88.5f, -88.5f, -88.5f, -88.5f}, y1[8];
    float u1[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    v->swiglu(8, y1, g1, u1);
    CHECK_MSG(y1[0] < -1e-37f && y1[7] < -1e-37f, "swiglu %s silu(-88.5) = %g", lv, y1[0]);
    /* every length around the vector width, tails included */
    for (size_t n = 0; n <= 33; n++) {
        float a[33], b[33];
        s->swiglu(n, a, g + 1, u + 1);
        v->swiglu(n, b, g + 1, u + 1);
        bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !close_exp(b[i], a[i]);
        CHECK_MSG(bad == 0, "swiglu %s n=%zu: %d off", lv, n, bad);
    }
    /* in place (y aliases gate) gives the same */
    memcpy(got, g, sizeof got);
    v->swiglu(N, got, got, u);
    float ref[N];
    v->swiglu(N, ref, g, u);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += !same_bits(got[i], ref[i]);
    CHECK_MSG(bad == 0, "swiglu %s in place: %d differ", lv, bad);
}

/* GELU (tanh form) in double, as x / (1 + exp(-2t)): the same function
 * as 0.5 x (1 + tanh(t)) without its cancellation for negative x. */
static double gelu_ref(double x)
{
    double t = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * t));
}

/* Both the scalar and the vector gelu against gelu_ref. The float -2t
 * takes up to five roundings (x^3 two, the coefficient, the add, the
 * constant; x and x^3 share a sign, so nothing cancels): a relative error
 * up to 5 u (u = 2^-24), which exp(-2t) turns into a relative error of
 * 2|t| * 5 u; the exp itself adds 4 ulp, the add and the divide one each,
 * the multiply by u one more. So (10|t| + 12) u, relative. Outputs below FLT_MIN are allowed to be 0: where exp(-2t)
 * overflows float (x below about -10.1) the float result is -0 while the
 * true value is a subnormal (times u); no model can tell. gelu(-inf) is
 * NaN (-inf / inf), as 0.5 x (1 + tanhf(t)) gave. Before this form, the
 * 1 + tanhf(t) of x = -5 was off by about 30%. */
static bool close_gelu(float got, float x, float u)
{
    double want = gelu_ref((double)x) * (double)u;
    if (isnan(want)) /* NaN in, or -inf (-inf / inf): a diverged model */
        return isnan(got);
    if (isinf((float)want)) /* past FLT_MAX: inf of the same sign */
        return got == (float)want;
    double t = 0.7978845608028654 * ((double)x + 0.044715 * (double)x * x * x);
    double tol = (10 * fabs(t) + 12) * 0x1p-24 * fabs(want) +
                 2.0 * FLT_MIN * (1 + fabs((double)u));
    return fabs((double)got - want) <= tol;
}

static void test_gelu(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    enum { N = 1003 };
    float x[N], u[N], got[N], gu[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(splitmix_unit(&rng_s) * 24 - 16);
        u[i] = (float)(splitmix_unit(&rng_s) * 4 - 2);
    }
    size_t ne = CR_ARRAY_LEN(edge_g);
    for (size_t i = 0; i < ne; i++)
        x[3 * i + 1] = edge_g[i];
    const be_vec_ops_t *both[2] = {s, v};
    for (int k = 0; k < 2; k++) {
        const char *who = k ? lv : "scalar";
        both[k]->gelu(N, got, x, NULL);
        both[k]->gelu(N, gu, x, u);
        int bad = 0;
        for (int i = 0; i < N; i++)
            if (!close_gelu(got[i], x[i], 1.0f) || !close_gelu(gu[i], x[i], u[i])) {
                if (bad++ < 5)
                    fprintf(stderr, "gelu %s x=%g u=%g: %.9g, %.9g; want %.9g\n", who, x[i],
                            u[i], got[i], gu[i], gelu_ref(x[i]));
            }
        CHECK_MSG(bad == 0, "gelu %s: %d off", who, bad);
    }
    /* every length around the vector width, tails included; in place */
    for (size_t n = 0; n <= 33; n++) {
        float a[33], b[33];
        memcpy(b, x + 100, n * sizeof *b);
        v->gelu(n, a, x + 100, u + 100);
        v->gelu(n, b, b, u + 100);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !close_gelu(a[i], x[100 + i], u[100 + i]) || !same_bits(a[i], b[i]);
        CHECK_MSG(bad == 0, "gelu %s n=%zu: %d off", lv, n, bad);
    }
    /* the values that matter: gelu(1) = 0.8411920, gelu(-1) = -0.1588080,
     * and a negative x where 1 + tanhf lost most of its bits */
    float xs[3] = {1.0f, -1.0f, -5.0f}, ys[3];
    v->gelu(3, ys, xs, NULL);
    CHECK_NEAR(ys[0], 0.841192, 1e-6);
    CHECK_NEAR(ys[1], -0.158808, 1e-6);
    CHECK_MSG(fabs(ys[2] / gelu_ref(-5.0) - 1) < 1e-5, "gelu %s(-5) = %g, want %g", lv,
              ys[2], gelu_ref(-5.0));
}

static void check_exp_sum(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv,
                          const float *x, int n, float max)
{
    float *a = malloc(((size_t)n + 1) * sizeof *a), *b = malloc(((size_t)n + 1) * sizeof *b);
    memcpy(a, x, (size_t)n * sizeof *a);
    memcpy(b, x, (size_t)n * sizeof *a);
    double ws = s->exp_sum(n, a, max), gs = v->exp_sum(n, b, max);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bool ok = close_exp(b[i], a[i]);
        if (x[i] == -INFINITY) /* a masked score is exactly 0 */
            ok = ok && a[i] == 0 && b[i] == 0;
        if (!ok && bad++ < 5)
            fprintf(stderr, "exp_sum %s x=%g max=%g: %.9g want %.9g\n", lv, x[i], max, b[i],
                    a[i]);
    }
    CHECK_MSG(bad == 0, "exp_sum %s n=%d max=%g: %d values off", lv, n, max, bad);
    bool sum_ok = isnan(ws) ? isnan(gs) : fabs(gs - ws) <= TOL_REL * ws + TOL_ABS;
    CHECK_MSG(sum_ok, "exp_sum %s n=%d: sum %.17g want %.17g", lv, n, gs, ws);
    free(a);
    free(b);
}

static void test_exp_sum(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 64, 515};
    for (size_t k = 0; k < CR_ARRAY_LEN(ns); k++) {
        int n = ns[k];
        float *a = malloc(((size_t)n + 1) * sizeof *a);
        float max = -INFINITY;
        for (int i = 0; i < n; i++) {
            a[i] = (float)(splitmix_unit(&rng_s) * 60 - 50);
            if (i % 11 == 4)
                a[i] = -INFINITY; /* a masked score */
            if (i % 13 == 6)
                a[i] = -200.0f;   /* underflows */
            max = fmaxf(max, a[i]);
        }
        if (n > 0 && max == -INFINITY)
            a[0] = max = 0;
        check_exp_sum(s, v, lv, a, n, max);
        free(a);
    }
    /* the underflow region: x - max from 0 down past -104 (subnormal
     * results, then 0), and the other edges, with max 0 */
    enum { M = 300 };
    float x[M];
    for (int i = 0; i < M; i++)
        x[i] = -(float)i * 0.37f;
    for (size_t i = 0; i < CR_ARRAY_LEN(edge_g); i++)
        if (!(edge_g[i] > 0)) /* softmax arguments are <= 0 (or NaN) */
            x[i * 7 + 3] = edge_g[i];
    check_exp_sum(s, v, lv, x, M, 0.0f);
    /* subnormal scores around a subnormal max: e^0 = 1 each */
    float sub[9] = {1e-40f, -1e-40f, 0, -0.0f, 1e-41f, 1e-40f, 0x1p-149f, 1e-40f, 1e-40f};
    check_exp_sum(s, v, lv, sub, 9, 1e-40f);
}

/* rmsnorm: the sums of squares differ only in order (exact squares in
 * double), so the scale is within one float ulp and each output within
 * 2 ulp of the scalar's (one from the scale, one from the rounding of the
 * two multiplies it feeds). Sizes cover the 16-wide loop, its tail, and
 * huge/tiny magnitudes (the double sum neither overflows nor flushes).
 * Rows of zeros, subnormals, and with an inf or a NaN give the same
 * classes: a zero row is zero, inf makes the scale 0 (inf * 0 = NaN),
 * NaN spreads to the row. */
static bool close_norm(float got, float want)
{
    if (isnan(want) || isnan(got) || isinf(want) || isinf(got))
        return same_bits(got, want);
    return fabsf(got - want) <= 2 * FLT_EPSILON * fabsf(want);
}

static void check_rmsnorm(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv,
                          const float *x, const float *g, int n, const char *what)
{
    float *a = malloc(sizeof(float) * (size_t)(n + 1)), *b = malloc(sizeof(float) * (size_t)(n + 1));
    s->rmsnorm(n, a, x, g, 1e-6f);
    v->rmsnorm(n, b, x, g, 1e-6f);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += !close_norm(b[i], a[i]);
    CHECK_MSG(bad == 0, "rmsnorm %s %s n=%d: %d values off", lv, what, n, bad);
    /* and in place */
    memcpy(b, x, sizeof(float) * (size_t)n);
    v->rmsnorm(n, b, b, g, 1e-6f);
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += !close_norm(b[i], a[i]);
    CHECK_MSG(bad == 0, "rmsnorm %s %s in place n=%d: %d values off", lv, what, n, bad);
    free(a), free(b);
}

static void test_rmsnorm(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int sizes[] = {1, 7, 8, 9, 15, 16, 17, 33, 2048, 4099};
    for (size_t k = 0; k < CR_ARRAY_LEN(sizes); k++) {
        int n = sizes[k];
        float *x = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) {
            float mag = k % 2 ? 3e18f : 1e-18f;
            x[i] = (float)sin(i * 0.77 + k) * (i % 5 ? 1.0f : mag);
            g[i] = 0.5f + (float)(i % 17) / 8;
        }
        check_rmsnorm(s, v, lv, x, g, n, "random");
        for (int i = 0; i < n; i++) /* +-0 and subnormals mixed in */
            x[i] = i % 3 == 0 ? (i % 2 ? -0.0f : 0.0f) : i % 3 == 1 ? 1e-40f * (float)(i % 7) : x[i];
        check_rmsnorm(s, v, lv, x, g, n, "zeros+subnormal");
        for (int i = 0; i < n; i++)
            x[i] = i % 2 ? -0.0f : 0.0f;
        check_rmsnorm(s, v, lv, x, g, n, "all zero");
        x[n / 2] = INFINITY;
        check_rmsnorm(s, v, lv, x, g, n, "inf");
        x[n / 2] = NAN;
        check_rmsnorm(s, v, lv, x, g, n, "nan");
        free(x), free(g);
    }
}

/* rope_pairs and rope_halves: the same products and adds at every level,
 * so the same bits; sizes cover the vector loops and their tails; the
 * values include +-0, subnormals, huge values, inf and NaN. */
static void test_rope(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int sizes[] = {1, 3, 4, 5, 7, 8, 9, 13, 16, 17, 64};
    for (size_t k = 0; k < CR_ARRAY_LEN(sizes); k++) {
        int np = sizes[k];
        for (int edges = 0; edges < 2; edges++) {
            float cs[64], sn[64], a[128] = {0}, b[128], c[128], d[128];
            for (int i = 0; i < np; i++) {
                cs[i] = (float)cos(i * 0.3 + k), sn[i] = (float)sin(i * 0.3 + k);
            }
            for (int i = 0; i < 2 * np; i++) {
                a[i] = (float)sin(i * 1.7) * 5;
                if (edges && i % 3 == 1)
                    a[i] = edge_g[(size_t)(i / 3) % CR_ARRAY_LEN(edge_g)];
                b[i] = c[i] = d[i] = a[i];
            }
            float x0 = a[0], x1 = a[1];
            s->rope_pairs(np, a, cs, sn);
            v->rope_pairs(np, b, cs, sn);
            int bad = 0;
            for (int i = 0; i < 2 * np; i++)
                bad += !same_bits(a[i], b[i]);
            CHECK_MSG(bad == 0, "rope_pairs %s n=%d edges=%d: %d differ", lv, np, edges, bad);
            if (!edges) /* and it is the rotation: pair 0 against doubles */
                CHECK(fabs(b[0] - ((double)x0 * cs[0] - (double)x1 * sn[0])) < 1e-5 &&
                      fabs(b[1] - ((double)x0 * sn[0] + (double)x1 * cs[0])) < 1e-5);
            s->rope_halves(np, c, c + np, cs, sn);
            v->rope_halves(np, d, d + np, cs, sn);
            bad = 0;
            for (int i = 0; i < 2 * np; i++)
                bad += !same_bits(c[i], d[i]);
            CHECK_MSG(bad == 0, "rope_halves %s n=%d edges=%d: %d differ", lv, np, edges, bad);
        }
    }
}

int main(void)
{
    const be_vec_ops_t *s = be_vec_ops_at(BE_SIMD_SCALAR);
    CHECK(s != NULL && be_vec_ops() != NULL);
    CHECK_EQ_STR(s->name, "scalar");
    /* the reference itself on the case the issue found: silu(-88.5) */
    float g = -88.5f, u = 1, y;
    s->swiglu(1, &y, &g, &u);
    CHECK(y < -1e-37f);
    int have = (int)be_simd_detect();
    for (int lv = BE_SIMD_SCALAR; lv <= BE_SIMD_AVX512_VNNI; lv++) {
        const char *name = be_simd_name((be_simd_t)lv);
        if (lv > have) {
            printf("test_vec: level %s NOT TESTED: this CPU (or CORRAL_CPU_SIMD) stops at %s\n",
                   name, be_simd_name((be_simd_t)have));
            continue;
        }
        const be_vec_ops_t *v = be_vec_ops_at((be_simd_t)lv);
        printf("test_vec: level %s runs the %s kernels\n", name, v->name);
        test_attn_v(s, v, name);
        test_attn_v2(v, name);
        test_dot_f16((be_simd_t)lv, v, name);
        test_scores(s, v, name);
        test_swiglu(s, v, name);
        test_exp_sum(s, v, name);
        test_rmsnorm(s, v, name);
        test_rope(s, v, name);
        test_gelu(s, v, name);
    }
    return check_finish("test_vec");
}
