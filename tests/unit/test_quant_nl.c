/* test_quant_nl.c: the table formats IQ4_NL, IQ4_XS and MXFP4 (quant_nl.c
 * and their AVX2 dot products).
 *
 * - hand-built blocks dequantize to values computed here from the format
 *   definitions (the E2M1 code, the E8M0 exponent, the IQ4_NL table, the
 *   IQ4_XS scale packing), so a wrong table or exponent convention fails;
 * - quantize -> dequantize: relative rms error bounds, and each element is
 *   the nearest value the stored scale allows (or the clipped end); the
 *   searches do no worse than the plain quantizers they start from;
 * - edge rows: zeros, subnormals, huge magnitudes give finite values; NaN
 *   and inf inputs are survived;
 * - dot products at every SIMD level against the exact value of the
 *   dequantized operands, IQ4_XS's AVX2 bit for bit with its scalar one,
 *   extreme quants without int16 saturation, and the CPU backend's matmul;
 * - traits geometry and pairing against lib/tensor_type and llama.cpp. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "tests/unit/check.h"
#include "tests/unit/splitmix.h"

#include <float.h>

static uint64_t rng_s = 0x5eed1e55;

static uint32_t f_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static const cr_type_t nl_types[] = {CR_TYPE_IQ4_NL, CR_TYPE_IQ4_XS, CR_TYPE_MXFP4};

/* The IQ4_NL table as published with the format (ggml-common.h). */
static const int iq4_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

/* E2M1 (OCP MX v1.0): bit 3 sign, bits 2..1 exponent (bias 1), bit 0
 * mantissa; exponent 0 is subnormal: 0.5 * m. */
static double e2m1(int code)
{
    int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
    double mag = e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, e - 1);
    return s ? -mag : mag;
}

static int compare_row(const char *what, const float *got, const double *want, int n)
{
    int bad = 0;
    for (int e = 0; e < n; e++) {
        if ((double)got[e] != want[e]) {
            if (bad < 4)
                fprintf(stderr, "%s element %d: %.9g, want %.9g\n", what, e, got[e], want[e]);
            bad++;
        }
    }
    return bad;
}

/* ---- hand-built blocks ------------------------------------------------ */

static void test_dequant_known(void)
{
    float out[256];
    double want[256];

    /* MXFP4, e = 129: value = E2M1(code) * 2^(129 - 127) = 4 * E2M1; byte
     * j = code j | code (15 - j) << 4, so element 7 = 4 * 6 = 24 and
     * element 16 = code 15 = -24. Code 8 (-0) decodes to +0, as in ggml's
     * integer table: equal as numbers, compared as such. */
    be_block_mxfp4_t mx;
    mx.e = 129;
    for (int j = 0; j < 16; j++) {
        mx.qs[j] = (uint8_t)(j | ((15 - j) << 4));
        want[j] = 4 * e2m1(j);
        want[j + 16] = 4 * e2m1(15 - j);
    }
    be_type_traits_at(CR_TYPE_MXFP4, BE_SIMD_SCALAR)->to_float(&mx, out, 32);
    CHECK_EQ_INT(compare_row("mxfp4 e=129", out, want, 32), 0);
    CHECK(out[7] == 24.0f && out[16] == -24.0f && out[1] == 2.0f && out[8] == 0);
    /* e = 127 is a scale of 1: the E2M1 values themselves */
    mx.e = 127;
    for (int j = 0; j < 32; j++)
        want[j] /= 4;
    be_type_traits_at(CR_TYPE_MXFP4, BE_SIMD_SCALAR)->to_float(&mx, out, 32);
    CHECK_EQ_INT(compare_row("mxfp4 e=127", out, want, 32), 0);
    CHECK(out[1] == 0.5f && out[3] == 1.5f && out[5] == 3.0f);
    /* the exponent's ends: e = 0 is 2^-127 (code 1: 2^-128, a float
     * subnormal), e = 254 is 2^127, e = 255 reads as 2^128 like ggml (the
     * spec's NaN; code 1 gives 2^127) */
    static const struct {
        uint8_t e;
        int code;
        double value;
    } ends[] = {{0, 1, 0x1p-128}, {0, 7, 6 * 0x1p-127}, {1, 2, 0x1p-126},
                {254, 1, 0x1p126}, {255, 1, 0x1p127}, {254, 9, -0x1p126}};
    for (size_t k = 0; k < CR_ARRAY_LEN(ends); k++) {
        memset(&mx, 0, sizeof mx);
        mx.e = ends[k].e;
        mx.qs[0] = (uint8_t)ends[k].code;
        be_type_traits_at(CR_TYPE_MXFP4, BE_SIMD_SCALAR)->to_float(&mx, out, 32);
        CHECK_MSG((double)out[0] == ends[k].value, "mxfp4 e=%d code %d: %g, want %g",
                  ends[k].e, ends[k].code, out[0], ends[k].value);
    }

    /* IQ4_NL: d = 0.5, byte j = index j | index (15 - j) << 4. */
    be_block_iq4_nl_t nl;
    nl.d = 0x3800;
    for (int j = 0; j < 16; j++) {
        nl.qs[j] = (uint8_t)(j | ((15 - j) << 4));
        want[j] = 0.5 * iq4_table[j];
        want[j + 16] = 0.5 * iq4_table[15 - j];
    }
    be_type_traits_at(CR_TYPE_IQ4_NL, BE_SIMD_SCALAR)->to_float(&nl, out, 32);
    CHECK_EQ_INT(compare_row("iq4_nl", out, want, 32), 0);
    CHECK(out[0] == -63.5f && out[15] == 56.5f && out[16] == 56.5f);

    /* IQ4_XS: d = 0.25; sub-block ib has 6-bit u = (13 ib + 5) % 64 (scale
     * u - 32): low nibble in scales_l[ib / 2] at bit 4 (ib % 2), top two
     * bits in scales_h at bit 2 ib. Element 32 ib + l has index
     * L = (7 (32 ib + l) + 3) % 16 in qs[16 ib + l % 16], low nibble for
     * l < 16. Sub-block 0: u 5 -> -27; element 0: L 3 -> -65:
     * 0.25 * -27 * -65 = 438.75. Sub-block 3: u 44 (top bits 2) -> 12. */
    be_block_iq4_xs_t xs;
    memset(&xs, 0, sizeof xs);
    xs.d = 0x3400;
    for (int ib = 0; ib < 8; ib++) {
        int u = (13 * ib + 5) % 64;
        xs.scales_l[ib / 2] |= (uint8_t)((u & 15) << (4 * (ib % 2)));
        xs.scales_h |= (uint16_t)((u >> 4) << (2 * ib));
        for (int l = 0; l < 32; l++) {
            int e = 32 * ib + l, L = (7 * e + 3) % 16;
            xs.qs[16 * ib + l % 16] |= (uint8_t)(L << (l < 16 ? 0 : 4));
            want[e] = 0.25 * (u - 32) * iq4_table[L];
        }
    }
    be_type_traits_at(CR_TYPE_IQ4_XS, BE_SIMD_SCALAR)->to_float(&xs, out, 256);
    CHECK_EQ_INT(compare_row("iq4_xs", out, want, 256), 0);
    CHECK(out[0] == 438.75f);
    CHECK(out[96] == (float)(0.25 * 12 * iq4_table[(7 * 96 + 3) % 16]));

    /* Quantizers on rows they represent exactly. MXFP4: the E2M1 values
     * times 8 (amax 48: the spec's exponent floor(log2 48) - 2 + 127 = 130
     * holds them all, so it wins over 131). */
    float row[256];
    for (int j = 0; j < 32; j++)
        row[j] = (float)(8 * e2m1(j % 16));
    be_type_traits_at(CR_TYPE_MXFP4, BE_SIMD_SCALAR)->from_float(row, &mx, 32);
    CHECK_EQ_INT(mx.e, 130);
    CHECK_EQ_INT(mx.qs[3], 0x33);
    CHECK_EQ_INT(mx.qs[15], 0xff);
    CHECK_EQ_INT(mx.qs[8], 0x00); /* -0 stored as +0 */
    /* IQ4_NL: the table itself (max -127 -> d = 1 exactly) */
    for (int j = 0; j < 32; j++)
        row[j] = (float)iq4_table[j % 16];
    be_type_traits_at(CR_TYPE_IQ4_NL, BE_SIMD_SCALAR)->from_float(row, &nl, 32);
    CHECK_EQ_INT(nl.d, 0x3c00);
    CHECK_EQ_INT(nl.qs[0], 0x00);
    CHECK_EQ_INT(nl.qs[9], 0x99);
    /* IQ4_XS: sub-block ib holds the table times c_ib = (ib + 1) 2^-5.
     * Each sub-block fits its c exactly; the largest, 2^-2, maps to -32
     * steps of d = -2^-7 and c_ib is -4 (ib + 1) steps: all exact. */
    for (int e = 0; e < 256; e++)
        row[e] = (float)iq4_table[e % 16] * (float)(e / 32 + 1) * 0x1p-5f;
    be_type_traits_at(CR_TYPE_IQ4_XS, BE_SIMD_SCALAR)->from_float(row, &xs, 256);
    be_type_traits_at(CR_TYPE_IQ4_XS, BE_SIMD_SCALAR)->to_float(&xs, out, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++)
        bad += out[e] != row[e];
    CHECK_MSG(bad == 0, "iq4_xs: %d elements of an exactly representable row differ", bad);
    CHECK_EQ_INT(xs.d, 0xa000); /* -2^-7 */
}

/* ---- quantize -> dequantize ------------------------------------------- */

/* The scale of element e of a row of type t, decoded from the layouts in
 * quant.h (not through the kernels), and the value table it multiplies:
 * value = scale * table[index]. For MXFP4 the table is E2M1 itself and the
 * scale 2^(e - 127). */
static double elem_scale(cr_type_t t, const uint8_t *row, int64_t e, const double **table)
{
    static double t_iq4[16], t_fp4[16];
    for (int i = 0; i < 16; i++) {
        t_iq4[i] = iq4_table[i];
        t_fp4[i] = e2m1(i);
    }
    if (t == CR_TYPE_MXFP4) {
        *table = t_fp4;
        return ldexp(1.0, row[(e / 32) * 17] - 127);
    }
    *table = t_iq4;
    uint16_t h;
    if (t == CR_TYPE_IQ4_NL) {
        memcpy(&h, row + (e / 32) * 18, 2);
        return be_f16_to_f32(h);
    }
    const uint8_t *blk = row + (e / 256) * 136;
    int ib = (int)(e % 256) / 32;
    uint16_t sh;
    memcpy(&h, blk, 2);
    memcpy(&sh, blk + 2, 2);
    int u = ((blk[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
    return be_f16_to_f32(h) * (u - 32);
}

/* Largest and smallest value of a 16-entry table. */
static void table_range(const double *tab, double *lo, double *hi)
{
    *lo = *hi = tab[0];
    for (int i = 1; i < 16; i++) {
        *lo = fmin(*lo, tab[i]);
        *hi = fmax(*hi, tab[i]);
    }
}

/* |x - y| allowed when y = scale * some table value: inside the scaled
 * table's range, half the gap between the two values around x (nearest);
 * outside, y must be the range's end (returns 0 if it is not, else inf). */
static double nearest_bound(double x, double y, double scale, const double *tab)
{
    double lo, hi;
    table_range(tab, &lo, &hi);
    double a = scale >= 0 ? lo * scale : hi * scale, b = scale >= 0 ? hi * scale : lo * scale;
    if (x <= a)
        return fabs(y - a) <= 1e-6 * fabs(a) ? INFINITY : 0;
    if (x >= b)
        return fabs(y - b) <= 1e-6 * fabs(b) ? INFINITY : 0;
    double below = a, above = b; /* the scaled values bracketing x */
    for (int i = 0; i < 16; i++) {
        double v = tab[i] * scale;
        if (v <= x && v > below)
            below = v;
        if (v >= x && v < above)
            above = v;
    }
    return 0.5 * (above - below);
}

/* Squared error of a block of 32 under the plain quantizers the searches
 * start from, computed here by brute force: MXFP4 with the OCP exponent
 * floor(log2 amax) - 2 + 127; IQ4_NL with the largest magnitude on -127
 * (d rounded to f16 as stored). */
static double plain_sse(cr_type_t t, const float *x)
{
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax)
            amax = fabsf(x[j]), max = x[j];
    double scale, tab[16];
    for (int i = 0; i < 16; i++)
        tab[i] = t == CR_TYPE_MXFP4 ? e2m1(i) : iq4_table[i];
    if (t == CR_TYPE_MXFP4)
        scale = ldexp(1.0, (int)floor(log2(amax)) - 2);
    else
        scale = be_f16_to_f32(be_f32_to_f16(max / -127.0f));
    double sse = 0;
    for (int j = 0; j < 32; j++) {
        double best = INFINITY;
        for (int i = 0; i < 16; i++)
            best = fmin(best, fabs(x[j] - scale * tab[i]));
        sse += best * best;
    }
    return sse;
}

static void test_roundtrip(void)
{
    enum { N = 256 * 16 };
    static float x[N], y[N];
    static uint8_t q[N];
    for (int i = 0; i < N; i++)
        x[i] = splitmix_normal(&rng_s) * (i % 97 == 0 ? 8.0f : 1.0f) + (i / 512 == 3 ? 2.0f : 0.0f);
    for (int i = 0; i < 32; i++) { /* one sign only; a constant */
        x[1024 + i] = -1.0f - 0.01f * (float)i;
        x[2048 + i] = 0.75f;
    }
    static const struct {
        cr_type_t t;
        double max_rel_rms;
    } cases[] = {
        /* measured on this data: IQ4_NL 0.1001, IQ4_XS 0.1025, MXFP4 0.1376
         * (the plain quantizers: 0.1049 and 0.1398); limits 1.2x, so a
         * broken search shows. MXFP4's steps are coarser near its top
         * (4, 6 of 6), hence its larger error. */
        {CR_TYPE_IQ4_NL, 0.12},
        {CR_TYPE_IQ4_XS, 0.123},
        {CR_TYPE_MXFP4, 0.165},
    };
    for (size_t c = 0; c < CR_ARRAY_LEN(cases); c++) {
        cr_type_t t = cases[c].t;
        const be_type_traits_t *tt = be_type_traits_at(t, BE_SIMD_SCALAR);
        tt->from_float(x, q, N);
        tt->to_float(q, y, N);
        double se = 0, sx = 0, se_plain = 0;
        int over = 0, worse = 0;
        for (int i = 0; i < N; i++) {
            double e = fabs((double)y[i] - x[i]);
            se += e * e;
            sx += (double)x[i] * x[i];
            const double *tab;
            double scale = elem_scale(t, q, i, &tab);
            /* 1e-6 relative slack: the quantizers compare x times the
             * scale's float inverse with the midpoints (dequantized values
             * are exact: f16 x 6-bit x table fit a float's 24 bits) */
            double bound = nearest_bound(x[i], y[i], scale, tab);
            if (e > bound * (1 + 1e-6) + 1e-6 * fabs(x[i])) {
                if (over < 4)
                    fprintf(stderr, "%s element %d: x %g y %g scale %g bound %g\n",
                            tt->name, i, x[i], y[i], scale, bound);
                over++;
            }
        }
        for (int b = 0; b < N; b += 32) {
            double sse = 0, p = plain_sse(t == CR_TYPE_IQ4_XS ? CR_TYPE_IQ4_NL : t, x + b);
            for (int i = b; i < b + 32; i++)
                sse += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            se_plain += p;
            /* MXFP4 keeps the better of two exponents, one being the
             * plain one: never worse per block */
            if (t == CR_TYPE_MXFP4 && sse > p * (1 + 1e-9))
                worse++;
        }
        double rel = sqrt(se / sx), rel_plain = sqrt(se_plain / sx);
        printf("test_quant_nl: %-6s relative rms error %.4f (limit %.3f; plain %s %.4f)\n",
               tt->name, rel, cases[c].max_rel_rms,
               t == CR_TYPE_MXFP4 ? "OCP exponent" : "IQ4_NL max -> -127", rel_plain);
        CHECK_MSG(rel <= cases[c].max_rel_rms, "%s: relative rms error %g > %g", tt->name,
                  rel, cases[c].max_rel_rms);
        CHECK_MSG(over == 0, "%s: %d elements not the nearest value", tt->name, over);
        CHECK_MSG(worse == 0, "%s: %d blocks worse than the plain quantizer", tt->name, worse);
        /* IQ4_NL's search (and IQ4_XS's, which adds 6-bit scales) beats
         * the plain fit overall (measured 0.954x and 0.977x); IQ4_XS by
         * less, as its scales are coarser */
        if (t == CR_TYPE_IQ4_NL)
            CHECK_MSG(rel < 0.98 * rel_plain, "IQ4_NL search %g vs plain %g", rel, rel_plain);
        if (t == CR_TYPE_IQ4_XS)
            CHECK_MSG(rel < rel_plain, "IQ4_XS %g vs plain IQ4_NL %g", rel, rel_plain);
    }
}

/* Zeros, subnormals and huge magnitudes give finite outputs (zeros give
 * zeros; huge blocks clip at what the scale's format holds); NaN and inf
 * inputs are survived (the sanitizer build checks for UB). */
static void test_edge_rows(void)
{
    enum { N = 512 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    for (size_t k = 0; k < CR_ARRAY_LEN(nl_types); k++) {
        const be_type_traits_t *tt = be_type_traits_at(nl_types[k], BE_SIMD_SCALAR);
        for (int round = 0; round < 6; round++) {
            for (int i = 0; i < N; i++) {
                float r = splitmix_normal(&rng_s);
                switch (round) {
                case 0: x[i] = i % 2 ? -0.0f : 0.0f; break;
                case 1: x[i] = r * 1e-40f; break;                     /* subnormal */
                case 2: x[i] = i % 64 == 5 ? -0x1p-149f : 0.0f; break; /* one ulp */
                case 3: x[i] = r * (i % 3 ? 1e30f : 3e38f); break;    /* huge */
                case 4: x[i] = i % 256 < 32 ? r * 1e-30f : r; break;  /* mixed */
                default: x[i] = i % 5 == 0 ? NAN : i % 7 == 0 ? -INFINITY : r; break;
                }
            }
            tt->from_float(x, q, N);
            tt->to_float(q, y, N);
            if (round == 5)
                continue;
            int bad = 0;
            for (int i = 0; i < N; i++) {
                bad += !isfinite(y[i]);
                bad += round == 0 && y[i] != 0;
                /* tiny inputs stay tiny (no sign of a garbage scale) */
                bad += (round == 1 || round == 2) && fabsf(y[i]) > 1e-30f;
                /* MXFP4 has a zero: a nonzero quant keeps the input's sign
                 * (the IQ4 table has none: a tiny value takes the entry
                 * nearest zero, of either sign) */
                bad += nl_types[k] == CR_TYPE_MXFP4 && y[i] != 0 && (y[i] < 0) != (x[i] < 0);
            }
            CHECK_MSG(bad == 0, "%s edge round %d: %d bad outputs", tt->name, round, bad);
        }
    }
}

/* ---- dot products ----------------------------------------------------- */

/* Bound on |kernel - exact| (as test_quant's dot_tol): the block sums are
 * exact integers, and per block a scale product and an add round, each by
 * at most 2^-24 relative to a running sum below mag = sum |terms|; SIMD
 * lanes only shrink that. FLT_EPSILON (2^-23) gives 2x slack. */
static double dot_tol(int64_t blocks, double mag)
{
    return (double)(blocks + 2) * FLT_EPSILON * mag + 1e-30;
}

/* The exact dot product of the dequantized operands, and its sum of
 * |terms|. */
static double exact_dot(const be_type_traits_t *tt, const void *w, const void *a, int64_t n,
                        double *mag)
{
    const be_type_traits_t *vt = be_type_traits_at(tt->vec_dot_type, BE_SIMD_SCALAR);
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

/* Fills a weight row of random bytes with scales kept finite and in a
 * moderate range (f16 d in [2^-8, 2^-4) with random sign; MXFP4 exponents
 * 110..140), and an activation row of random int8: -128..127 for Q8_K
 * (the kernels take -128 though the quantizer never makes it), -127..127
 * for Q8_0 (its contract), with consistent Q8_K block sums. */
static void random_blocks(const be_type_traits_t *tt, uint8_t *w, uint8_t *act, int64_t n)
{
    int64_t nb = n / tt->block_elems;
    for (int64_t i = 0; i < nb * tt->block_bytes; i++)
        w[i] = (uint8_t)splitmix_next(&rng_s);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * tt->block_bytes;
        if (tt->type == CR_TYPE_MXFP4) {
            blk[0] = (uint8_t)(110 + splitmix_next(&rng_s) % 31);
        } else {
            uint16_t h = (uint16_t)(0x1c00 + splitmix_next(&rng_s) % 0x0c00) | (splitmix_next(&rng_s) & 1 ? 0x8000 : 0);
            memcpy(blk, &h, 2);
        }
    }
    if (tt->vec_dot_type == CR_TYPE_Q8_K) {
        be_block_q8_k_t *y = (be_block_q8_k_t *)act;
        for (int64_t b = 0; b < n / 256; b++) {
            y[b].d = 0.01f * (float)(1 + splitmix_next(&rng_s) % 100);
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) {
                    y[b].qs[16 * g + j] = (int8_t)(splitmix_next(&rng_s) & 0xff);
                    sum += y[b].qs[16 * g + j];
                }
                y[b].bsums[g] = (int16_t)sum;
            }
        }
    } else {
        be_block_q8_0_t *y = (be_block_q8_0_t *)act;
        for (int64_t b = 0; b < n / 32; b++) {
            y[b].d = (uint16_t)(0x2000 + splitmix_next(&rng_s) % 0x0800);
            for (int j = 0; j < 32; j++)
                y[b].qs[j] = (int8_t)((int)(splitmix_next(&rng_s) % 255) - 127);
        }
    }
}

/* Every level (scalar, avx2, avx512vnni: AVX-512 kernels for IQ4_NL and
 * MXFP4, IQ4_XS's AVX2 one) on quantized realistic rows and on random
 * bytes, several lengths: each within dot_tol of the exact value; IQ4_XS's
 * SIMD kernel gives the scalar bits. */
static void test_dots(void)
{
    /* odd block counts (32, 224) reach the AVX-512 kernels' tails */
    static const int64_t lens[] = {256, 256 * 3, 256 * 11, 32, 224};
    for (size_t k = 0; k < CR_ARRAY_LEN(nl_types); k++) {
        const be_type_traits_t *ts = be_type_traits_at(nl_types[k], BE_SIMD_SCALAR);
        const be_type_traits_t *vs = be_type_traits_at(ts->vec_dot_type, BE_SIMD_SCALAR);
        for (size_t li = 0; li < CR_ARRAY_LEN(lens); li++) {
            int64_t n = lens[li];
            if (n % ts->block_elems)
                continue;
            uint64_t wb = 0, ab = 0;
            CHECK(cr_type_row_bytes(ts->type, (uint64_t)n, &wb));
            CHECK(cr_type_row_bytes(ts->vec_dot_type, (uint64_t)n, &ab));
            uint8_t *w = malloc((size_t)wb), *a = malloc((size_t)ab);
            float *f = malloc((size_t)n * sizeof *f);
            int bad = 0, bad_bits = 0;
            for (int trial = 0; trial < 24; trial++) {
                if (trial < 12) {
                    for (int64_t i = 0; i < n; i++)
                        f[i] = splitmix_normal(&rng_s) * 0.05f * (float)(1 + trial);
                    ts->from_float(f, w, n);
                    for (int64_t i = 0; i < n; i++)
                        f[i] = splitmix_normal(&rng_s);
                    vs->from_float(f, a, n);
                } else {
                    random_blocks(ts, w, a, n);
                }
                double mag = 0, ex = exact_dot(ts, w, a, n, &mag);
                double tol = dot_tol(n / ts->block_elems, mag);
                float s_scalar = 0;
                ts->vec_dot(n, &s_scalar, w, a);
                for (int lv = BE_SIMD_SCALAR; lv <= BE_SIMD_AVX512_VNNI; lv++) {
                    const be_type_traits_t *tl = be_type_traits_at(ts->type, (be_simd_t)lv);
                    float s = 0;
                    tl->vec_dot(n, &s, w, a);
                    if (fabs(s - ex) > tol && bad++ < 4)
                        fprintf(stderr, "%s n=%" PRId64 " trial %d %s: %.9g exact %.9g tol %g\n",
                                ts->name, n, trial, be_simd_name((be_simd_t)lv), s, ex, tol);
                    if (ts->type == CR_TYPE_IQ4_XS && f_bits(s) != f_bits(s_scalar))
                        bad_bits++;
                }
            }
            CHECK_MSG(bad == 0, "%s n=%" PRId64 ": %d dots off", ts->name, n, bad);
            CHECK_MSG(bad_bits == 0, "%s n=%" PRId64 ": %d SIMD dots not the scalar bits",
                      ts->name, n, bad_bits);
            free(w);
            free(a);
            free(f);
        }
    }
}

/* The largest products: IQ4 index 0 (-127) against -128 (Q8_K) or -127
 * (Q8_0) everywhere, MXFP4's -12 likewise; with unit scales the sum is an
 * integer float represents exactly, so every level must return it. */
static void test_dot_extremes(void)
{
    be_block_q8_k_t ak;
    memset(&ak, 0, sizeof ak);
    ak.d = 1.0f;
    memset(ak.qs, 0x80, sizeof ak.qs); /* -128 */
    for (int g = 0; g < 16; g++)
        ak.bsums[g] = -128 * 16;
    be_block_iq4_xs_t xs;
    memset(&xs, 0, sizeof xs); /* indices 0 (-127); u = 0: scale -32 */
    xs.d = 0x3c00;
    /* two blocks each: the AVX-512 kernels take pairs */
    be_block_q8_0_t a0[2];
    be_block_iq4_nl_t nl[2];
    be_block_mxfp4_t mx[2];
    for (int b = 0; b < 2; b++) {
        a0[b].d = 0x3c00;
        memset(a0[b].qs, 0x81, sizeof a0[b].qs); /* -127 */
        nl[b].d = 0x3c00;
        memset(nl[b].qs, 0, sizeof nl[b].qs);
        mx[b].e = 128; /* 2^0 on the doubled table */
        memset(mx[b].qs, 0xff, sizeof mx[b].qs); /* -12 */
    }
    for (int lv = BE_SIMD_SCALAR; lv <= BE_SIMD_AVX512_VNNI; lv++) {
        float s = 0;
        be_type_traits_at(CR_TYPE_IQ4_XS, (be_simd_t)lv)->vec_dot(256, &s, &xs, &ak);
        CHECK_MSG(s == -32.0f * -127.0f * -128.0f * 256.0f, "IQ4_XS extreme at %s: %.9g",
                  be_simd_name((be_simd_t)lv), s);
        be_type_traits_at(CR_TYPE_IQ4_NL, (be_simd_t)lv)->vec_dot(64, &s, nl, a0);
        CHECK_MSG(s == 127.0f * 127.0f * 64.0f, "IQ4_NL extreme at %s: %.9g",
                  be_simd_name((be_simd_t)lv), s);
        be_type_traits_at(CR_TYPE_MXFP4, (be_simd_t)lv)->vec_dot(64, &s, mx, a0);
        CHECK_MSG(s == 12.0f * 127.0f * 64.0f, "MXFP4 extreme at %s: %.9g",
                  be_simd_name((be_simd_t)lv), s);
    }
}

/* The CPU backend takes the new types as weights: its matmul gives each
 * (row, token) the vec_dot bits, threads or not. */
static void test_backend_matmul(void)
{
    be_backend_t *be = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_cpu_new(3, &be, &err), CR_OK);
    if (!be)
        return;
    enum { ROWS = 21, NTOK = 5, N = 512 };
    for (size_t k = 0; k < CR_ARRAY_LEN(nl_types); k++) {
        const be_type_traits_t *tt = be_type_traits(nl_types[k]);
        const be_type_traits_t *vt = be_type_traits(tt->vec_dot_type);
        uint64_t rb = 0, ab = 0;
        cr_type_row_bytes(nl_types[k], N, &rb);
        cr_type_row_bytes(tt->vec_dot_type, N, &ab);
        uint8_t *wq = malloc((size_t)rb * ROWS), *xa = malloc((size_t)ab);
        float *x = malloc(sizeof(float) * N * NTOK), *y = malloc(sizeof(float) * ROWS * NTOK);
        float row[N];
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < N; i++)
                row[i] = splitmix_normal(&rng_s) * 0.02f;
            tt->from_float(row, wq + (size_t)r * rb, N);
        }
        for (int i = 0; i < N * NTOK; i++)
            x[i] = splitmix_normal(&rng_s);
        be_weight_t w = {"blk.0.ffn_down.weight", nl_types[k], N, ROWS, (size_t)rb, wq, NULL};
        CHECK_EQ_INT(be->ops->weight_prepare(be, &w, &err), CR_OK);
        CHECK_EQ_INT(be->ops->reserve(be, NTOK, N, 16, 1, &err), CR_OK);
        be->ops->matmul(be, &w, x, NTOK, y);
        int bad = 0;
        for (int t = 0; t < NTOK; t++) {
            vt->from_float(x + (size_t)t * N, xa, N);
            for (int r = 0; r < ROWS; r++) {
                float want = 0;
                tt->vec_dot(N, &want, wq + (size_t)r * rb, xa);
                bad += f_bits(y[t * ROWS + r]) != f_bits(want);
            }
        }
        CHECK_MSG(bad == 0, "%s matmul: %d outputs differ from vec_dot", tt->name, bad);
        /* a row that is not whole blocks is refused by name */
        be_weight_t wr = {"blk.1.ffn_up.weight", nl_types[k], N + 16, 1, (size_t)rb, wq, NULL};
        CHECK_EQ_INT(be->ops->weight_prepare(be, &wr, &err), CR_E_INVALID);
        CHECK(strstr(err.msg, "blk.1.ffn_up.weight") && strstr(err.msg, tt->name));
        free(wq);
        free(xa);
        free(x);
        free(y);
    }
    be_destroy(&be);
}

/* Geometry agrees with lib/tensor_type.c and the GGUF ids; activation
 * pairing is llama.cpp's (ggml-cpu type traits). */
static void test_traits(void)
{
    static const struct {
        cr_type_t t;
        uint32_t gguf_id, elems, bytes;
        cr_type_t act;
        const char *name;
    } rows[] = {
        {CR_TYPE_IQ4_NL, 20, 32, 18, CR_TYPE_Q8_0, "IQ4_NL"},
        {CR_TYPE_IQ4_XS, 23, 256, 136, CR_TYPE_Q8_K, "IQ4_XS"},
        {CR_TYPE_MXFP4, 39, 32, 17, CR_TYPE_Q8_0, "MXFP4"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(rows); i++) {
        CHECK_EQ_INT((int)rows[i].t, (int)rows[i].gguf_id);
        const cr_type_info_t *ti = cr_type_info(rows[i].gguf_id);
        CHECK(ti && !strcmp(ti->name, rows[i].name) && ti->block_elems == rows[i].elems &&
              ti->block_bytes == rows[i].bytes);
        for (int lv = BE_SIMD_SCALAR; lv <= BE_SIMD_AVX512_VNNI; lv++) {
            const be_type_traits_t *tt = be_type_traits_at(rows[i].t, (be_simd_t)lv);
            CHECK(tt && tt->block_elems == rows[i].elems && tt->block_bytes == rows[i].bytes &&
                  !strcmp(tt->name, rows[i].name) && tt->vec_dot_type == rows[i].act &&
                  tt->vec_dot && tt->to_float && tt->from_float);
        }
        CHECK(be_type_is_supported(rows[i].t));
        /* each level the CPU has runs its own dot product for each, not
         * the level below's (IQ4_XS has no AVX-512 one: quant_avx512.c) */
        for (int lv = BE_SIMD_AVX2; lv <= (int)be_simd_detect(); lv++)
            CHECK((be_type_traits_at(rows[i].t, (be_simd_t)lv)->vec_dot !=
                   be_type_traits_at(rows[i].t, (be_simd_t)(lv - 1))->vec_dot) ==
                  (lv == BE_SIMD_AVX2 || rows[i].t != CR_TYPE_IQ4_XS));
    }
    uint64_t bytes = 0;
    CHECK(cr_type_row_bytes(CR_TYPE_MXFP4, 64, &bytes) && bytes == 34);
    CHECK(!cr_type_row_bytes(CR_TYPE_MXFP4, 48, &bytes));
    CHECK(!cr_type_row_bytes(CR_TYPE_IQ4_XS, 128, &bytes));
    CHECK(!strcmp(cr_file_type_name(25), "IQ4_NL"));
    CHECK(!strcmp(cr_file_type_name(30), "IQ4_XS"));
    CHECK(!strcmp(cr_file_type_name(38), "MXFP4_MOE"));
}

int main(void)
{
    printf("test_quant_nl: kernels at level %s\n", be_simd_name(be_simd_detect()));
    test_dequant_known();
    test_roundtrip();
    test_edge_rows();
    test_dots();
    test_dot_extremes();
    test_backend_matmul();
    test_traits();
    return check_finish("test_quant_nl");
}
