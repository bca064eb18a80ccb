/* test_quant.c: the CPU kernels: formats, conversions, dot products, SIMD.
 *
 * - half/bfloat conversion: known values, rounding ties, subnormals, inf/nan,
 *   and an exhaustive round trip of every half;
 * - hand-built blocks of every format dequantize to exact expected values;
 * - quantize -> dequantize stays within each format's error bound;
 * - every dot product equals dequantize-then-multiply in double within a
 *   float-accumulation bound (see dot_tol);
 * - every AVX2 kernel against the scalar one on random rows, odd row counts,
 *   and the backend's threaded matmul against a plain loop. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "tests/unit/check.h"

#include <float.h>

static uint64_t rng_s = 0x1234567;

static uint64_t rnd(void)
{
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rnd_normal(void)
{
    double u1 = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

static float bits_f(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* ---- half / bfloat ---------------------------------------------------- */

static void test_f16_known(void)
{
    CHECK(be_f16_to_f32(0x3c00) == 1.0f);
    CHECK(be_f16_to_f32(0xc000) == -2.0f);
    CHECK(be_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(be_f16_to_f32(0x0001) == ldexpf(1, -24)); /* smallest subnormal */
    CHECK(be_f16_to_f32(0x03ff) == ldexpf(1023, -24)); /* largest subnormal */
    CHECK(be_f16_to_f32(0x0400) == ldexpf(1, -14)); /* smallest normal */
    CHECK(be_f16_to_f32(0x8000) == 0 && signbit(be_f16_to_f32(0x8000)));
    CHECK(isinf(be_f16_to_f32(0x7c00)) && be_f16_to_f32(0x7c00) > 0);
    CHECK(isinf(be_f16_to_f32(0xfc00)) && be_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(be_f16_to_f32(0x7e00)));
    CHECK(isnan(be_f16_to_f32(0x7c01))); /* signalling nan stays nan */

    CHECK_EQ_INT(be_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(be_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(be_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(be_f32_to_f16(65519.0f), 0x7bff);  /* below the tie */
    CHECK_EQ_INT(be_f32_to_f16(65520.0f), 0x7c00);  /* tie, odd -> up to inf */
    CHECK_EQ_INT(be_f32_to_f16(1e10f), 0x7c00);     /* overflow */
    CHECK_EQ_INT(be_f32_to_f16(-1e10f), 0xfc00);
    CHECK_EQ_INT(be_f32_to_f16(INFINITY), 0x7c00);
    CHECK_EQ_INT(be_f32_to_f16(-INFINITY), 0xfc00);
    CHECK((be_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (be_f32_to_f16(NAN) & 0x3ff));
    /* a nan whose payload lives only in low bits must not become inf */
    CHECK((be_f32_to_f16(bits_f(0x7f800001)) & 0x3ff) != 0);
    CHECK_EQ_INT(be_f32_to_f16(-0.0f), 0x8000);
    /* ties to even in the normal range: 1 + 2^-11 is halfway 1 .. 1+2^-10 */
    CHECK_EQ_INT(be_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
    CHECK_EQ_INT(be_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
    CHECK_EQ_INT(be_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3c01);
    /* subnormal results */
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(1, -24)), 0x0001);
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(1, -25)), 0x0000);          /* tie to even 0 */
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(3, -26)), 0x0001);          /* 0.75 ulp */
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(3, -25)), 0x0002);          /* 1.5 -> 2 */
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(5, -25)), 0x0002);          /* 2.5 -> 2 */
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(1, -30)), 0x0000);          /* underflow */
    CHECK_EQ_INT(be_f32_to_f16(-ldexpf(1, -24)), 0x8001);
    /* largest subnormal + half ulp rounds (even) into the smallest normal */
    CHECK_EQ_INT(be_f32_to_f16(ldexpf(2047, -25)), 0x0400);
    CHECK_EQ_INT(be_f32_to_f16(1e-45f), 0x0000); /* f32 subnormal input */

    /* every non-nan half survives a round trip through f32 */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue;
        if (be_f32_to_f16(be_f16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);

    /* random floats: the result is one of the two neighbouring halves, the
     * nearer one */
    bad = 0;
    for (int i = 0; i < 100000; i++) {
        float f = ldexpf(rnd_normal(), (int)(rnd() % 40) - 28);
        uint16_t h = be_f32_to_f16(f);
        double e = fabs((double)be_f16_to_f32(h) - f);
        uint16_t nb1 = (uint16_t)(h + 1), nb2 = (uint16_t)(h - 1);
        if ((nb1 & 0x7c00) != 0x7c00 && fabs((double)be_f16_to_f32(nb1) - f) < e)
            bad++;
        if ((h & 0x7fff) && fabs((double)be_f16_to_f32(nb2) - f) < e)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_bf16_known(void)
{
    CHECK_EQ_INT(be_f32_to_bf16(1.0f), 0x3f80);
    CHECK(be_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(be_bf16_to_f32(0xc040) == -3.0f);
    /* ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    CHECK_EQ_INT(be_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);
    CHECK_EQ_INT(be_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);
    CHECK_EQ_INT(be_f32_to_bf16(INFINITY), 0x7f80);
    CHECK(isnan(be_bf16_to_f32(be_f32_to_bf16(NAN))));
    CHECK(isnan(be_bf16_to_f32(be_f32_to_bf16(bits_f(0x7f800001)))));
    CHECK_EQ_INT(be_f32_to_bf16(3.4e38f), 0x7f80); /* rounds up to inf */
}

/* ---- hand-built blocks ------------------------------------------------ */

static void test_dequant_known(void)
{
    float out[512];
    const be_type_traits_t *tt;

    /* Q8_0: d = 0.5, q = i - 16 */
    be_block_q8_0_t q8[2];
    q8[0].d = 0x3800; /* 0.5 */
    q8[1].d = 0xbc00; /* -1 */
    for (int i = 0; i < 32; i++) {
        q8[0].qs[i] = (int8_t)(i - 16);
        q8[1].qs[i] = (int8_t)(i == 0 ? -128 : 127 - i);
    }
    tt = be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR);
    tt->to_float(q8, out, 64);
    int bad = 0;
    for (int i = 0; i < 32; i++) {
        bad += out[i] != 0.5f * (float)(i - 16);
        bad += out[32 + i] != -1.0f * (float)(i == 0 ? -128 : 127 - i);
    }
    CHECK_EQ_INT(bad, 0);

    /* Q4_0: byte j = element j (low) | element j+16 (high); value d*(q-8) */
    be_block_q4_0_t q4;
    q4.d = 0x3400; /* 0.25 */
    for (int j = 0; j < 16; j++)
        q4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    tt = be_type_traits_at(CR_TYPE_Q4_0, BE_SIMD_SCALAR);
    tt->to_float(&q4, out, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) {
        bad += out[j] != 0.25f * (float)(j - 8);
        bad += out[j + 16] != 0.25f * (float)(15 - j - 8);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(out[0] == -2.0f && out[16] == 1.75f); /* spot values */

    /* Q6_K, packed here straight from the layout in quant.h: element e has
     * 6-bit quant L[e] = (7*e + 3) % 64, sub-block scale sc = ib - 8. */
    be_block_q6_k_t q6;
    memset(&q6, 0, sizeof q6);
    q6.d = 0x3800; /* 0.5 */
    for (int ib = 0; ib < 16; ib++)
        q6.scales[ib] = (int8_t)(ib - 8);
    for (int e = 0; e < 256; e++) {
        int L = (7 * e + 3) % 64;
        int h = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
        uint8_t *ql = q6.ql + 64 * h, *qh = q6.qh + 32 * h;
        int lo_idx = (quarter == 0 || quarter == 2) ? l : l + 32;
        int lo_shift = quarter < 2 ? 0 : 4;
        ql[lo_idx] |= (uint8_t)((L & 15) << lo_shift);
        qh[l] |= (uint8_t)((L >> 4) << (2 * quarter));
    }
    tt = be_type_traits_at(CR_TYPE_Q6_K, BE_SIMD_SCALAR);
    tt->to_float(&q6, out, 256);
    bad = 0;
    for (int e = 0; e < 256; e++) {
        float want = 0.5f * (float)(e / 16 - 8) * (float)((7 * e + 3) % 64 - 32);
        if (out[e] != want) {
            if (bad < 4)
                fprintf(stderr, "q6_k element %d: %g, want %g\n", e, out[e], want);
            bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* F16 / BF16 / F32 rows */
    uint16_t h[3] = {0x3c00, 0xc000, 0x0001};
    tt = be_type_traits_at(CR_TYPE_F16, BE_SIMD_SCALAR);
    tt->to_float(h, out, 3);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == ldexpf(1, -24));
    uint16_t b[2] = {0x3f80, 0xc040};
    be_type_traits_at(CR_TYPE_BF16, BE_SIMD_SCALAR)->to_float(b, out, 2);
    CHECK(out[0] == 1.0f && out[1] == -3.0f);

    /* Q8_0 quantizer on a known row: amax 127 -> d 1, exact integers */
    float row[32];
    for (int i = 0; i < 32; i++)
        row[i] = (float)(i * 8 - 127) > 127 ? 127 : (float)(i * 8 - 127);
    be_block_q8_0_t qq;
    be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR)->from_float(row, &qq, 32);
    CHECK_EQ_INT(qq.d, 0x3c00);
    CHECK_EQ_INT(qq.qs[0], -127);
    CHECK_EQ_INT(qq.qs[5], 5 * 8 - 127);
    /* Q4_0 quantizer: the largest-magnitude value maps to -8 */
    for (int i = 0; i < 32; i++)
        row[i] = (float)(i % 16) - 8.0f; /* max magnitude -8 -> d = 1 */
    be_block_q4_0_t q4q;
    be_type_traits_at(CR_TYPE_Q4_0, BE_SIMD_SCALAR)->from_float(row, &q4q, 32);
    CHECK_EQ_INT(q4q.d, 0x3c00);
    CHECK_EQ_INT(q4q.qs[0], 0x00);        /* -8 -> 0 in both nibbles */
    CHECK_EQ_INT(q4q.qs[15], 0xff);       /* 7 -> 15 */
    /* an all-zero block quantizes to d = 0 and dequantizes to zeros */
    memset(row, 0, sizeof row);
    be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR)->from_float(row, &qq, 32);
    CHECK_EQ_INT(qq.d, 0);
    /* a nan in the input never leaves undefined quants behind */
    row[3] = NAN;
    be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR)->from_float(row, &qq, 32);
    CHECK(qq.qs[0] == 0);
}

/* ---- quantize -> dequantize ------------------------------------------- */

static void test_roundtrip(void)
{
    enum { N = 256 * 8 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (int i = 0; i < N; i++)
        x[i] = rnd_normal() * (i % 97 == 0 ? 8.0f : 1.0f); /* some outliers */

    struct {
        cr_type_t t;
        double max_rel_rms; /* rms error / rms value */
    } cases[] = {
        {CR_TYPE_F32, 0},
        {CR_TYPE_F16, 1e-3},   /* 11-bit significand: <= 2^-11 relative */
        {CR_TYPE_BF16, 5e-3},  /* 8-bit significand: <= 2^-8 relative */
        {CR_TYPE_Q8_0, 0.01},  /* step amax/127 per 32 */
        {CR_TYPE_Q4_0, 0.15},  /* step amax/8 per 32 */
        {CR_TYPE_Q6_K, 0.05},  /* step ~amax/32 per 16 */
    };
    for (size_t c = 0; c < CR_ARRAY_LEN(cases); c++) {
        const be_type_traits_t *tt = be_type_traits_at(cases[c].t, BE_SIMD_SCALAR);
        tt->from_float(x, q, N);
        tt->to_float(q, y, N);
        double se = 0, sx = 0;
        int over = 0;
        for (int b = 0; b < N; b += 32) {
            float amax = 0;
            for (int i = b; i < b + 32; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            for (int i = b; i < b + 32; i++) {
                double e = fabs((double)y[i] - x[i]);
                se += e * e;
                sx += (double)x[i] * x[i];
                /* hard per-element bounds where the format defines one:
                 * Q8_0 half a step plus the f16 rounding of d (127 * d *
                 * 2^-11 <= amax/2048); Q4_0 a full step (the side opposite
                 * the max clamps at +7) plus the same; F16 half an ulp. */
                double bound = INFINITY;
                if (cases[c].t == CR_TYPE_Q8_0)
                    bound = amax / 127.0 * 0.5 + amax / 2048.0 + 1e-7;
                else if (cases[c].t == CR_TYPE_Q4_0)
                    bound = amax / 8.0 + amax / 2048.0 + 1e-7;
                else if (cases[c].t == CR_TYPE_F16)
                    bound = fabs(x[i]) * ldexp(1, -11) + ldexp(1, -25);
                else if (cases[c].t == CR_TYPE_F32)
                    bound = 0;
                if (e > bound)
                    over++;
            }
        }
        double rel = sqrt(se / sx);
        CHECK_MSG(rel <= cases[c].max_rel_rms, "%s: relative rms error %g > %g",
                  tt->name, rel, cases[c].max_rel_rms);
        CHECK_MSG(over == 0, "%s: %d elements past the per-element bound", tt->name,
                  over);
    }
}

/* ---- dot products ----------------------------------------------------- */

/* Bound on |kernel - exact| for a dot product of n elements whose exact
 * terms have absolute sum `mag`. Integer block sums are exact; what rounds
 * is float work: per block a product of two scales and one add (quantized
 * types), or per element one fma/add (float types), each off by at most
 * 2^-24 relative to a running sum that never exceeds mag. Summing in
 * several lanes or in double only shrinks that. So (terms + 2) * eps * mag,
 * with eps = FLT_EPSILON (2^-23, twice the unit roundoff) as slack. */
static double dot_tol(int64_t terms, double mag)
{
    return (double)(terms + 2) * FLT_EPSILON * mag + 1e-30;
}

typedef struct dot_case {
    cr_type_t t;
    int64_t n; /* elements per row */
} dot_case_t;

static const dot_case_t dot_cases[] = {
    {CR_TYPE_F32, 161},  {CR_TYPE_F32, 7},     {CR_TYPE_F16, 173},
    {CR_TYPE_F16, 5},    {CR_TYPE_BF16, 139},  {CR_TYPE_Q8_0, 32 * 7},
    {CR_TYPE_Q4_0, 32 * 9}, {CR_TYPE_Q6_K, 256 * 3}, {CR_TYPE_Q8_0, 32},
    {CR_TYPE_Q4_0, 32},
};

/* Exact value of the dot product the kernel is defined to compute: both
 * operands dequantized, products summed in double. */
static double exact_dot(const be_type_traits_t *tt, const be_type_traits_t *vt,
                        const void *w, const void *a, int64_t n, double *mag)
{
    float *wf = malloc((size_t)n * sizeof *wf), *af = malloc((size_t)n * sizeof *af);
    tt->to_float(w, wf, n);
    vt->to_float(a, af, n);
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)wf[i] * af[i];
        m += fabs((double)wf[i] * af[i]);
    }
    free(wf);
    free(af);
    *mag = m;
    return s;
}

static void test_dots(void)
{
    bool have_simd = be_simd_detect() != BE_SIMD_SCALAR;
    if (!have_simd)
        printf("test_quant: no AVX2 here (or CORRAL_CPU_SIMD=scalar): SIMD checks "
               "compare scalar with itself\n");
    for (size_t c = 0; c < CR_ARRAY_LEN(dot_cases); c++) {
        cr_type_t t = dot_cases[c].t;
        int64_t n = dot_cases[c].n;
        const be_type_traits_t *ts = be_type_traits_at(t, BE_SIMD_SCALAR);
        const be_type_traits_t *tv = be_type_traits_at(t, BE_SIMD_AVX2);
        const be_type_traits_t *vs = be_type_traits_at(ts->vec_dot_type, BE_SIMD_SCALAR);
        uint64_t wb = 0, ab = 0;
        CHECK(cr_type_row_bytes(t, (uint64_t)n, &wb));
        CHECK(cr_type_row_bytes(ts->vec_dot_type, (uint64_t)n, &ab));
        enum { ROWS = 13 }; /* odd, and not a multiple of any tile */
        float *xf = malloc((size_t)n * sizeof *xf), *af = malloc((size_t)n * sizeof *af);
        uint8_t *w = malloc((size_t)wb * ROWS), *a = malloc((size_t)ab);
        for (int64_t i = 0; i < n; i++)
            af[i] = rnd_normal();
        vs->from_float(af, a, n);
        int bad_exact = 0, bad_simd = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int64_t i = 0; i < n; i++)
                xf[i] = rnd_normal() * 0.05f * (float)(r + 1);
            ts->from_float(xf, w + (size_t)r * wb, n);
            const void *wr = w + (size_t)r * wb;
            double mag = 0, ex = exact_dot(ts, vs, wr, a, n, &mag);
            float s_scalar = 0, s_simd = 0;
            ts->vec_dot(n, &s_scalar, wr, a);
            tv->vec_dot(n, &s_simd, wr, a);
            int64_t terms = ts->block_elems > 1 ? n / ts->block_elems : n;
            double tol = dot_tol(terms, mag);
            if (fabs(s_scalar - ex) > tol) {
                bad_exact++;
                fprintf(stderr, "%s n=%" PRId64 " row %d: scalar %.9g exact %.9g tol %g\n",
                        ts->name, n, r, s_scalar, ex, tol);
            }
            /* SIMD and scalar each lie within tol of the exact value. */
            if (fabs(s_simd - ex) > tol) {
                bad_simd++;
                fprintf(stderr, "%s n=%" PRId64 " row %d: simd %.9g exact %.9g tol %g\n",
                        ts->name, n, r, s_simd, ex, tol);
            }
        }
        CHECK_MSG(bad_exact == 0, "%s n=%" PRId64 ": scalar dot off", ts->name, n);
        CHECK_MSG(bad_simd == 0, "%s n=%" PRId64 ": simd dot off", ts->name, n);
        free(xf);
        free(af);
        free(w);
        free(a);
    }

    /* Row conversions f32 <-> f16: SIMD and scalar agree bit for bit, on an
     * odd length (tail) and over specials. */
    enum { M = 1003 };
    static float f[M], g1[M], g2[M];
    static uint16_t h1[M], h2[M];
    for (int i = 0; i < M; i++)
        f[i] = bits_f((uint32_t)rnd());
    f[0] = INFINITY, f[1] = -0.0f, f[2] = ldexpf(1, -25), f[3] = 65520.0f;
    be_type_traits_at(CR_TYPE_F16, BE_SIMD_SCALAR)->from_float(f, h1, M);
    be_type_traits_at(CR_TYPE_F16, BE_SIMD_AVX2)->from_float(f, h2, M);
    int bad = 0;
    for (int i = 0; i < M; i++)
        bad += h1[i] != h2[i];
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < M; i++)
        h1[i] = (uint16_t)rnd();
    be_type_traits_at(CR_TYPE_F16, BE_SIMD_SCALAR)->to_float(h1, g1, M);
    be_type_traits_at(CR_TYPE_F16, BE_SIMD_AVX2)->to_float(h1, g2, M);
    bad = 0;
    for (int i = 0; i < M; i++)
        bad += isnan(g1[i]) ? !isnan(g2[i]) : f_bits(g1[i]) != f_bits(g2[i]);
    CHECK_EQ_INT(bad, 0);
}

/* Q4_0 and Q8_0 edge quants: -128 weights and +-127 activations stay exact
 * in the SIMD path (no int16 saturation). */
static void test_dot_extremes(void)
{
    be_block_q8_0_t w, a;
    w.d = a.d = 0x3c00;
    for (int i = 0; i < 32; i++) {
        w.qs[i] = -128;
        a.qs[i] = (int8_t)(i % 2 ? -127 : 127);
    }
    a.qs[0] = -127;
    float s1 = 0, s2 = 0;
    be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR)->vec_dot(32, &s1, &w, &a);
    be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_AVX2)->vec_dot(32, &s2, &w, &a);
    double want = 0;
    for (int i = 0; i < 32; i++)
        want += -128.0 * a.qs[i];
    CHECK(s1 == (float)want && s2 == (float)want);

    be_block_q4_0_t w4;
    w4.d = 0x3c00;
    memset(w4.qs, 0x0f, sizeof w4.qs); /* element j: 7, element j+16: -8 */
    for (int i = 0; i < 32; i++)
        a.qs[i] = (int8_t)(i < 16 ? 127 : -127);
    be_type_traits_at(CR_TYPE_Q4_0, BE_SIMD_SCALAR)->vec_dot(32, &s1, &w4, &a);
    be_type_traits_at(CR_TYPE_Q4_0, BE_SIMD_AVX2)->vec_dot(32, &s2, &w4, &a);
    want = 16 * 7 * 127.0 + 16 * (-8) * (-127.0);
    CHECK(s1 == (float)want && s2 == (float)want);
}

/* ---- backend matmul with threads -------------------------------------- */

static void test_backend_matmul(void)
{
    cr_type_t types[] = {CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_BF16, CR_TYPE_Q8_0,
                         CR_TYPE_Q4_0, CR_TYPE_Q6_K};
    be_backend_t *be1 = NULL, *be3 = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_cpu_new(1, &be1, &err), CR_OK);
    CHECK_EQ_INT(be_cpu_new(3, &be3, &err), CR_OK);
    if (!be1 || !be3)
        return;
    CHECK_EQ_INT(be_cpu_threads(be3), 3);
    enum { ROWS = 37, NTOK = 3 };
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        int64_t n = 512;
        const be_type_traits_t *tt = be_type_traits(types[k]);
        const be_type_traits_t *vt = be_type_traits(tt->vec_dot_type);
        uint64_t rb = 0, ab = 0;
        cr_type_row_bytes(types[k], (uint64_t)n, &rb);
        cr_type_row_bytes(tt->vec_dot_type, (uint64_t)n, &ab);
        uint8_t *wq = malloc((size_t)rb * ROWS);
        float *row = malloc((size_t)n * sizeof *row);
        float *x = malloc((size_t)n * NTOK * sizeof *x);
        float *y1 = malloc(ROWS * NTOK * sizeof *y1), *y3 = malloc(ROWS * NTOK * sizeof *y3);
        uint8_t *xa = malloc((size_t)ab);
        for (int r = 0; r < ROWS; r++) {
            for (int64_t i = 0; i < n; i++)
                row[i] = rnd_normal() * 0.02f;
            tt->from_float(row, wq + (size_t)r * rb, n);
        }
        for (int64_t i = 0; i < n * NTOK; i++)
            x[i] = rnd_normal();
        be_weight_t w = {"w", types[k], n, ROWS, (size_t)rb, wq, NULL};
        CHECK_EQ_INT(be1->ops->weight_prepare(be1, &w, &err), CR_OK);
        CHECK_EQ_INT(be1->ops->reserve(be1, NTOK, n, 16, 1, &err), CR_OK);
        CHECK_EQ_INT(be3->ops->reserve(be3, NTOK, n, 16, 1, &err), CR_OK);
        be1->ops->matmul(be1, &w, x, NTOK, y1);
        be3->ops->matmul(be3, &w, x, NTOK, y3);
        int bad = 0;
        for (int t = 0; t < NTOK; t++) {
            vt->from_float(x + (size_t)t * n, xa, n);
            for (int r = 0; r < ROWS; r++) {
                float want = 0;
                tt->vec_dot(n, &want, wq + (size_t)r * rb, xa);
                /* same kernel per (row, token) whatever the split: bitwise */
                bad += y1[t * ROWS + r] != want || y3[t * ROWS + r] != want;
            }
        }
        CHECK_MSG(bad == 0, "%s matmul: %d outputs differ", tt->name, bad);
        free(wq);
        free(row);
        free(x);
        free(y1);
        free(y3);
        free(xa);
    }
    /* unsupported types are refused by name */
    be_weight_t w5 = {"blk.0.attn_q.weight", CR_TYPE_Q5_K, 256, 1, 176, NULL, NULL};
    CHECK_EQ_INT(be1->ops->weight_prepare(be1, &w5, &err), CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "blk.0.attn_q.weight") && strstr(err.msg, "Q5_K"));
    be_destroy(&be1);
    be_destroy(&be3);
    CHECK(be1 == NULL);
    be_destroy(&be1); /* NULL-safe */
}

static void test_traits_table(void)
{
    cr_type_t have[] = {CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_BF16, CR_TYPE_Q8_0,
                        CR_TYPE_Q4_0, CR_TYPE_Q6_K};
    for (size_t i = 0; i < CR_ARRAY_LEN(have); i++) {
        const be_type_traits_t *tt = be_type_traits(have[i]);
        const cr_type_info_t *ti = cr_type_info(have[i]);
        CHECK(tt && ti && tt->vec_dot && tt->to_float && tt->from_float);
        /* geometry agrees with lib/tensor_type.c */
        CHECK(tt && ti && tt->block_elems == ti->block_elems &&
              tt->block_bytes == ti->block_bytes && !strcmp(tt->name, ti->name));
        CHECK(be_type_is_supported(have[i]));
    }
    CHECK(!be_type_is_supported(CR_TYPE_Q4_K));
    CHECK(!be_type_is_supported(CR_TYPE_Q8_K)); /* activation-only */
    CHECK(be_type_traits((cr_type_t)999) == NULL);
    CHECK(be_type_traits_at(CR_TYPE_Q4_0, BE_SIMD_SCALAR)->vec_dot_type == CR_TYPE_Q8_0);
    CHECK(be_type_traits_at(CR_TYPE_Q6_K, BE_SIMD_SCALAR)->vec_dot_type == CR_TYPE_Q8_K);
}

int main(void)
{
    printf("test_quant: kernels at level %s\n", be_simd_name(be_simd_detect()));
    test_f16_known();
    test_bf16_known();
    test_dequant_known();
    test_roundtrip();
    test_dots();
    test_dot_extremes();
    test_backend_matmul();
    test_traits_table();
    return check_finish("test_quant");
}
