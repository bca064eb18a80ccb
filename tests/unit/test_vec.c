/* test_vec.c: the CPU backend's vector inner loops (vec.h) against their
 * scalar versions, at every level the CPU has.
 *
 * - attn_v: the same bits (same products and sums in the same order), for
 *   head sizes that are and are not multiples of 8, zero probabilities;
 * - swiglu and exp_sum: the vector exp is within 4 ulp of expf, so each
 *   result within 6 ulp-sized relative steps (exp, add, divide, multiply
 *   each round once more) of the scalar one: |got - want| <= 8 * 2^-23 *
 *   |want| plus a floor of 1e-37 for results that underflow differently;
 *   exp of -inf (a masked score) is exactly 0. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/vec.h"
#include "tests/unit/check.h"

#include <float.h>
#include <math.h>

static uint64_t rng_s = 0x5eed;

static double rnd_unit(void)
{
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static bool close_rel(float got, float want)
{
    return fabsf(got - want) <= 8 * FLT_EPSILON * fabsf(want) + 1e-37f;
}

static void test_attn_v(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int hds[] = {64, 80, 100, 3};
    int nkvs[] = {1, 2, 9, 37, 300};
    for (size_t h = 0; h < CR_ARRAY_LEN(hds); h++)
        for (size_t k = 0; k < CR_ARRAY_LEN(nkvs); k++) {
            int hd = hds[h], n = nkvs[k];
            size_t stride = (size_t)hd * 3 + 5;
            uint16_t *vv = malloc(stride * (size_t)n * sizeof *vv);
            uint16_t *pr = malloc((size_t)n * sizeof *pr);
            for (size_t i = 0; i < stride * (size_t)n; i++)
                vv[i] = be_f32_to_f16((float)(rnd_unit() * 8 - 4));
            for (int p = 0; p < n; p++)
                pr[p] = be_f32_to_f16(p % 5 == 2 ? 0.0f : (float)rnd_unit() / (float)n);
            float want[128], got[128];
            s->attn_v(n, pr, vv + 7, stride, hd, want);
            v->attn_v(n, pr, vv + 7, stride, hd, got);
            CHECK_MSG(!memcmp(want, got, (size_t)hd * sizeof *got),
                      "attn_v %s hd=%d n_kv=%d: bits differ", lv, hd, n);
            free(vv);
            free(pr);
        }
}

static void test_swiglu(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    enum { N = 1003 };
    float g[N], u[N], want[N], got[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)(rnd_unit() * 40 - 20);
        u[i] = (float)(rnd_unit() * 4 - 2);
    }
    float edge[] = {0.0f, -0.0f, 1e-3f, -1e-3f, 87.0f, -87.0f, 88.5f, -88.5f, 100.0f, -100.0f,
                    1e-30f, 5.0f};
    for (size_t i = 0; i < CR_ARRAY_LEN(edge); i++)
        g[i] = edge[i];
    s->swiglu(N, want, g, u);
    v->swiglu(N, got, g, u);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (!close_rel(got[i], want[i])) {
            if (bad++ < 5)
                fprintf(stderr, "swiglu %s g=%g u=%g: %.9g want %.9g\n", lv, g[i], u[i],
                        got[i], want[i]);
        }
    CHECK_MSG(bad == 0, "swiglu %s: %d off", lv, bad);
    /* in place (y aliases gate) gives the same */
    memcpy(got, g, sizeof got);
    v->swiglu(N, got, got, u);
    float ref[N];
    v->swiglu(N, ref, g, u);
    CHECK(!memcmp(got, ref, sizeof got));
}

static void test_exp_sum(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int ns[] = {1, 7, 8, 9, 64, 515};
    for (size_t k = 0; k < CR_ARRAY_LEN(ns); k++) {
        int n = ns[k];
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        float max = -INFINITY;
        for (int i = 0; i < n; i++) {
            a[i] = (float)(rnd_unit() * 60 - 50);
            if (i % 11 == 4)
                a[i] = -INFINITY; /* a masked score */
            if (i % 13 == 6)
                a[i] = -200.0f;   /* underflows */
            max = fmaxf(max, a[i]);
        }
        if (max == -INFINITY)
            a[0] = max = 0;
        memcpy(b, a, (size_t)n * sizeof *a);
        double ws = s->exp_sum(n, a, max), gs = v->exp_sum(n, b, max);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += !close_rel(b[i], a[i]) || (a[i] == 0) != (b[i] == 0);
        CHECK_MSG(bad == 0, "exp_sum %s n=%d: %d values off", lv, n, bad);
        CHECK_MSG(fabs(gs - ws) <= 8 * FLT_EPSILON * ws, "exp_sum %s n=%d: sum %.17g want %.17g",
                  lv, n, gs, ws);
        free(a);
        free(b);
    }
}

/* rmsnorm: the sums of squares differ only in order (exact squares in
 * double), so the scale is within one float ulp and each output within
 * 2 ulp of the scalar's (one from the scale, one from the rounding of the
 * two multiplies it feeds). Sizes cover the 16-wide loop, its tail, and
 * huge/tiny magnitudes (the double sum neither overflows nor flushes). */
static void test_rmsnorm(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int sizes[] = {1, 7, 16, 33, 2048, 4099};
    for (size_t k = 0; k < CR_ARRAY_LEN(sizes); k++) {
        int n = sizes[k];
        float *x = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) {
            float mag = k % 2 ? 3e18f : 1e-18f;
            x[i] = (float)sin(i * 0.77 + k) * (i % 5 ? 1.0f : mag);
            g[i] = 0.5f + (float)(i % 17) / 8;
        }
        s->rmsnorm(n, a, x, g, 1e-6f);
        v->rmsnorm(n, b, x, g, 1e-6f);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += !(fabsf(b[i] - a[i]) <= 2 * FLT_EPSILON * fabsf(a[i]));
        CHECK_MSG(bad == 0, "rmsnorm %s n=%d: %d values off", lv, n, bad);
        /* and in place */
        memcpy(b, x, sizeof(float) * (size_t)n);
        v->rmsnorm(n, b, b, g, 1e-6f);
        bad = 0;
        for (int i = 0; i < n; i++)
            bad += !(fabsf(b[i] - a[i]) <= 2 * FLT_EPSILON * fabsf(a[i]));
        CHECK_MSG(bad == 0, "rmsnorm %s in place n=%d: %d values off", lv, n, bad);
        free(x), free(g), free(a), free(b);
    }
}

/* rope_pairs and rope_halves: the same products and adds at every level,
 * so the same bits; sizes cover the vector loops and their tails. */
static void test_rope(const be_vec_ops_t *s, const be_vec_ops_t *v, const char *lv)
{
    int sizes[] = {1, 3, 4, 8, 13, 64};
    for (size_t k = 0; k < CR_ARRAY_LEN(sizes); k++) {
        int np = sizes[k];
        float cs[64], sn[64], a[128], b[128], c[128], d[128];
        for (int i = 0; i < np; i++) {
            cs[i] = (float)cos(i * 0.3 + k), sn[i] = (float)sin(i * 0.3 + k);
        }
        for (int i = 0; i < 2 * np; i++)
            a[i] = b[i] = c[i] = d[i] = (float)sin(i * 1.7) * 5;
        s->rope_pairs(np, a, cs, sn);
        v->rope_pairs(np, b, cs, sn);
        CHECK_MSG(!memcmp(a, b, sizeof(float) * 2 * (size_t)np), "rope_pairs %s n=%d", lv, np);
        /* and it is the rotation: pair 0 against doubles */
        double x0 = sin(0.0) * 5, x1 = (float)sin(1.7) * 5;
        CHECK(fabs(b[0] - (x0 * cs[0] - x1 * sn[0])) < 1e-5 &&
              fabs(b[1] - (x0 * sn[0] + x1 * cs[0])) < 1e-5);
        s->rope_halves(np, c, c + np, cs, sn);
        v->rope_halves(np, d, d + np, cs, sn);
        CHECK_MSG(!memcmp(c, d, sizeof(float) * 2 * (size_t)np), "rope_halves %s n=%d", lv, np);
    }
}

int main(void)
{
    const be_vec_ops_t *s = be_vec_ops_at(BE_SIMD_SCALAR);
    CHECK(s != NULL && be_vec_ops() != NULL);
    for (int lv = BE_SIMD_SCALAR; lv <= (int)be_simd_detect(); lv++) {
        const be_vec_ops_t *v = be_vec_ops_at((be_simd_t)lv);
        const char *name = be_simd_name((be_simd_t)lv);
        test_attn_v(s, v, name);
        test_swiglu(s, v, name);
        test_exp_sum(s, v, name);
        test_rmsnorm(s, v, name);
        test_rope(s, v, name);
    }
    return check_finish("test_vec");
}
