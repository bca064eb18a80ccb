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
#include "tests/unit/splitmix.h"

#include <float.h>

static uint64_t rng_s = 0x1234567;

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
        float f = ldexpf(splitmix_normal(&rng_s), (int)(splitmix_next(&rng_s) % 40) - 28);
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

/* ---- hand-built blocks of the types added with the K-quants ----------- */

/* Reports the first few mismatches; returns how many elements differ. */
static int compare_row(const char *what, const float *got, const float *want, int n)
{
    int bad = 0;
    for (int e = 0; e < n; e++) {
        if (got[e] != want[e]) {
            if (bad < 4)
                fprintf(stderr, "%s element %d: %.9g, want %.9g\n", what, e, got[e],
                        want[e]);
            bad++;
        }
    }
    return bad;
}

/* Every block below is packed here straight from the layout comments in
 * quant.h, with power-of-two scales and small integers so that every
 * expected value is exact in float. */
static void test_dequant_known_more(void)
{
    float out[256], want[256];

    /* Q4_1: d = 0.5, m = -2; byte j = q_j | q_{j+16} << 4 with q_j = j,
     * q_{j+16} = 15 - j. value = d*q + m: element 0 -> -2, element 16 ->
     * 0.5*15 - 2 = 5.5, element 15 -> 5.5, element 31 -> -2. */
    be_block_q4_1_t q41;
    q41.d = 0x3800;
    q41.m = 0xc000;
    for (int j = 0; j < 16; j++) {
        q41.qs[j] = (uint8_t)(j | ((15 - j) << 4));
        want[j] = 0.5f * (float)j - 2.0f;
        want[j + 16] = 0.5f * (float)(15 - j) - 2.0f;
    }
    be_type_traits_at(CR_TYPE_Q4_1, BE_SIMD_SCALAR)->to_float(&q41, out, 32);
    CHECK_EQ_INT(compare_row("q4_1", out, want, 32), 0);
    CHECK(out[0] == -2.0f && out[16] == 5.5f && out[31] == -2.0f);

    /* Q5_0: d = 0.25, quant of element e L(e) = (5e + 3) % 32; low nibbles
     * as Q4_0, bit 4 of element e in bit e of qh (little-endian uint32).
     * value = d * (L - 16): element 0: L 3 -> -3.25; element 3: L 18 ->
     * 0.5 (needs the qh bit). */
    be_block_q5_0_t q50;
    memset(&q50, 0, sizeof q50);
    q50.d = 0x3400;
    for (int e = 0; e < 32; e++) {
        int L = (5 * e + 3) % 32;
        q50.qs[e % 16] |= (uint8_t)((L & 15) << (e < 16 ? 0 : 4));
        q50.qh[e / 8] |= (uint8_t)((L >> 4) << (e % 8));
        want[e] = 0.25f * (float)(L - 16);
    }
    be_type_traits_at(CR_TYPE_Q5_0, BE_SIMD_SCALAR)->to_float(&q50, out, 32);
    CHECK_EQ_INT(compare_row("q5_0", out, want, 32), 0);
    CHECK(out[0] == -3.25f && out[3] == 0.5f);

    /* Q5_1: d = 0.5, m = 1, L(e) = (11e + 7) % 32, value = d*L + m:
     * element 0: L 7 -> 4.5; element 5: L 62 % 32 = 30 -> 16. */
    be_block_q5_1_t q51;
    memset(&q51, 0, sizeof q51);
    q51.d = 0x3800;
    q51.m = 0x3c00;
    for (int e = 0; e < 32; e++) {
        int L = (11 * e + 7) % 32;
        q51.qs[e % 16] |= (uint8_t)((L & 15) << (e < 16 ? 0 : 4));
        q51.qh[e / 8] |= (uint8_t)((L >> 4) << (e % 8));
        want[e] = 0.5f * (float)L + 1.0f;
    }
    be_type_traits_at(CR_TYPE_Q5_1, BE_SIMD_SCALAR)->to_float(&q51, out, 32);
    CHECK_EQ_INT(compare_row("q5_1", out, want, 32), 0);
    CHECK(out[0] == 4.5f && out[5] == 16.0f);

    /* Q8_1: value = d * qs (s is only read by dot products). */
    be_block_q8_1_t q81;
    q81.d = 0x3800;
    q81.s = 0x7bff; /* ignored here */
    for (int e = 0; e < 32; e++) {
        q81.qs[e] = (int8_t)(e - 16);
        want[e] = 0.5f * (float)(e - 16);
    }
    be_type_traits_at(CR_TYPE_Q8_1, BE_SIMD_SCALAR)->to_float(&q81, out, 32);
    CHECK_EQ_INT(compare_row("q8_1", out, want, 32), 0);

    /* Q2_K: d = 0.5, dmin = 0.25; sub-block k has scale k and min 15 - k
     * (scales[k] = k | (15-k) << 4); element e = 128h + 32j + l has quant
     * L(e) = (3e + e/7) % 4 in bits 2j of qs[32h + l].
     * value = 0.5 * k * L - 0.25 * (15 - k): element 0 (k 0) -> -3.75;
     * element 255 (k 15, L (765 + 36) % 4 = 1) -> 7.5. */
    be_block_q2_k_t q2;
    memset(&q2, 0, sizeof q2);
    q2.d = 0x3800;
    q2.dmin = 0x3400;
    for (int k = 0; k < 16; k++)
        q2.scales[k] = (uint8_t)(k | ((15 - k) << 4));
    for (int e = 0; e < 256; e++) {
        int L = (3 * e + e / 7) % 4, k = e / 16;
        int h = e / 128, j = (e % 128) / 32, l = e % 32;
        q2.qs[32 * h + l] |= (uint8_t)(L << (2 * j));
        want[e] = 0.5f * (float)k * (float)L - 0.25f * (float)(15 - k);
    }
    be_type_traits_at(CR_TYPE_Q2_K, BE_SIMD_SCALAR)->to_float(&q2, out, 256);
    CHECK_EQ_INT(compare_row("q2_k", out, want, 256), 0);
    CHECK(out[0] == -3.75f && out[255] == 7.5f);

    /* Q3_K: d = 0.5; sub-block k has 6-bit u_k = (13k + 5) % 64 (scale
     * u_k - 32): low 4 bits in scales[k] (k < 8) or the high nibble of
     * scales[k-8], top 2 bits in scales[8 + k%4] at bit 2*(k/4). Element
     * e = 128h + 32j + l: low bits lo(e) = (5e + 1) % 4 at bits 2j of
     * qs[32h + l], high bit hi(e) = (7e >> 3) & 1 at bit 4h + j of
     * hmask[l]; q = lo - (hi ? 0 : 4). value = 0.5 * (u_k - 32) * q.
     * Element 0: u 5, lo 1, hi 0 -> q -3 -> 0.5 * -27 * -3 = 40.5. */
    be_block_q3_k_t q3;
    memset(&q3, 0, sizeof q3);
    q3.d = 0x3800;
    for (int k = 0; k < 16; k++) {
        int u = (13 * k + 5) % 64;
        if (k < 8)
            q3.scales[k] |= (uint8_t)(u & 15);
        else
            q3.scales[k - 8] |= (uint8_t)((u & 15) << 4);
        q3.scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
    }
    for (int e = 0; e < 256; e++) {
        int lo = (5 * e + 1) % 4, hi = (7 * e >> 3) & 1;
        int h = e / 128, j = (e % 128) / 32, l = e % 32;
        q3.qs[32 * h + l] |= (uint8_t)(lo << (2 * j));
        q3.hmask[l] |= (uint8_t)(hi << (4 * h + j));
        int u = (13 * (e / 16) + 5) % 64;
        want[e] = 0.5f * (float)(u - 32) * (float)(lo - (hi ? 0 : 4));
    }
    be_type_traits_at(CR_TYPE_Q3_K, BE_SIMD_SCALAR)->to_float(&q3, out, 256);
    CHECK_EQ_INT(compare_row("q3_k", out, want, 256), 0);
    CHECK(out[0] == 40.5f);

    /* Q4_K: d = 0.5, dmin = 0.25; sub-block j (32 elements) has scale
     * 3 + 7j and min 60 - 5j (j >= 4 exercise the split 6-bit packing:
     * scales 31, 38, 45, 52, mins 40, 35, 30, 25). Packing, from the
     * layout: s[j] = sc_j | (sc_{j+4} >> 4) << 6, s[j+4] = m_j |
     * (m_{j+4} >> 4) << 6, s[j+8] = (sc_{j+4} & 15) | (m_{j+4} & 15) << 4
     * for j < 4. Element 64i + l (l < 32) is the low nibble of qs[32i + l],
     * 64i + 32 + l the high nibble; L(e) = (7e + 2) % 16.
     * value = 0.5 * sc * L - 0.25 * m: element 0: 0.5*3*2 - 15 = -12;
     * element 255 (j 7: sc 52, m 25; L 1787 % 16 = 11) -> 286 - 6.25. */
    be_block_q4_k_t q4k;
    be_block_q5_k_t q5k;
    memset(&q4k, 0, sizeof q4k);
    memset(&q5k, 0, sizeof q5k);
    q4k.d = q5k.d = 0x3800;
    q4k.dmin = q5k.dmin = 0x3400;
    for (int j = 0; j < 4; j++) {
        int sc = 3 + 7 * j, m = 60 - 5 * j, sc4 = 3 + 7 * (j + 4), m4 = 60 - 5 * (j + 4);
        q4k.scales[j] = (uint8_t)(sc | ((sc4 >> 4) << 6));
        q4k.scales[j + 4] = (uint8_t)(m | ((m4 >> 4) << 6));
        q4k.scales[j + 8] = (uint8_t)((sc4 & 15) | ((m4 & 15) << 4));
    }
    memcpy(q5k.scales, q4k.scales, sizeof q4k.scales);
    for (int e = 0; e < 256; e++) {
        int L = (7 * e + 2) % 16, i = e / 64, l = e % 32, high = (e % 64) >= 32;
        q4k.qs[32 * i + l] |= (uint8_t)(L << (high ? 4 : 0));
        int j = e / 32;
        want[e] = 0.5f * (float)(3 + 7 * j) * (float)L - 0.25f * (float)(60 - 5 * j);
    }
    be_type_traits_at(CR_TYPE_Q4_K, BE_SIMD_SCALAR)->to_float(&q4k, out, 256);
    CHECK_EQ_INT(compare_row("q4_k", out, want, 256), 0);
    CHECK(out[0] == -12.0f && out[255] == 279.75f);

    /* Q5_K: same scales; L(e) = (11e + 5) % 32, low 4 bits as Q4_K, bit 4
     * of element 64i + l in qh[l] bit 2i, of 64i + 32 + l in bit 2i + 1.
     * Element 0: L 5 -> 7.5 - 15 = -7.5; element 1: L 16 -> 24 - 15 = 9. */
    for (int e = 0; e < 256; e++) {
        int L = (11 * e + 5) % 32, i = e / 64, l = e % 32, high = (e % 64) >= 32;
        q5k.qs[32 * i + l] |= (uint8_t)((L & 15) << (high ? 4 : 0));
        q5k.qh[l] |= (uint8_t)((L >> 4) << (2 * i + high));
        int j = e / 32;
        want[e] = 0.5f * (float)(3 + 7 * j) * (float)L - 0.25f * (float)(60 - 5 * j);
    }
    be_type_traits_at(CR_TYPE_Q5_K, BE_SIMD_SCALAR)->to_float(&q5k, out, 256);
    CHECK_EQ_INT(compare_row("q5_k", out, want, 256), 0);
    CHECK(out[0] == -7.5f && out[1] == 9.0f);

    /* Quantizers on rows they represent exactly. */
    float row[256];
    /* Q4_1: values 0..15 twice: min 0, max 15 -> d 1, m 0, q = value. */
    for (int i = 0; i < 32; i++)
        row[i] = (float)(i % 16);
    be_type_traits_at(CR_TYPE_Q4_1, BE_SIMD_SCALAR)->from_float(row, &q41, 32);
    CHECK_EQ_INT(q41.d, 0x3c00);
    CHECK_EQ_INT(q41.m, 0);
    CHECK_EQ_INT(q41.qs[0], 0x00);
    CHECK_EQ_INT(q41.qs[9], 0x99);
    /* Q5_0: -16..15: the largest magnitude -16 maps to 0, d = 1, q = v + 16;
     * element 31 = 15 -> q 31: low nibble 15 in byte 15's high half, qh bit
     * 31 set; element 0 = -16 -> q 0. */
    for (int i = 0; i < 32; i++)
        row[i] = (float)(i - 16);
    be_type_traits_at(CR_TYPE_Q5_0, BE_SIMD_SCALAR)->from_float(row, &q50, 32);
    CHECK_EQ_INT(q50.d, 0x3c00);
    CHECK_EQ_INT(q50.qs[15] >> 4, 15);
    CHECK_EQ_INT(q50.qh[3] >> 7, 1);
    CHECK_EQ_INT(q50.qs[0] & 15, 0);
    CHECK_EQ_INT(q50.qh[0] & 1, 0);
    /* An all-zero row gives blocks that dequantize to zeros; nan and inf
     * inputs are survived (no UB: ASan/UBSan builds check). */
    memset(row, 0, sizeof row);
    static const cr_type_t kt[] = {CR_TYPE_Q2_K, CR_TYPE_Q3_K, CR_TYPE_Q4_K,
                                   CR_TYPE_Q5_K, CR_TYPE_Q4_1, CR_TYPE_Q5_1};
    for (size_t t = 0; t < CR_ARRAY_LEN(kt); t++) {
        const be_type_traits_t *tt = be_type_traits_at(kt[t], BE_SIMD_SCALAR);
        uint8_t blk[176 * 8];
        tt->from_float(row, blk, 256);
        tt->to_float(blk, out, 256);
        int nz = 0;
        for (int e = 0; e < 256; e++)
            nz += out[e] != 0.0f;
        CHECK_MSG(nz == 0, "%s: zero row dequantizes to %d non-zeros", tt->name, nz);
        float bad_row[256];
        for (int e = 0; e < 256; e++)
            bad_row[e] = e % 5 == 0 ? NAN : (e % 7 == 0 ? INFINITY : 1.0f);
        tt->from_float(bad_row, blk, 256);
        tt->to_float(blk, out, 256);
    }
}

/* ---- quantize -> dequantize ------------------------------------------- */

static void test_roundtrip(void)
{
    enum { N = 256 * 8 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (int i = 0; i < N; i++)
        x[i] = splitmix_normal(&rng_s) * (i % 97 == 0 ? 8.0f : 1.0f); /* some outliers */

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

/* Reads an f16 field at byte offset off of a block. */
static double f16_at(const uint8_t *blk, size_t off)
{
    uint16_t h;
    memcpy(&h, blk + off, sizeof h);
    return be_f16_to_f32(h);
}

/* Quantization step of element e (0..255) of a K-quant block, decoded here
 * from the layout comments in quant.h (not through the kernels). Signed
 * for Q3_K (the scale's sign says which side reaches -4 steps). */
static double k_step(cr_type_t t, const uint8_t *blk, int e)
{
    if (t == CR_TYPE_Q2_K)
        return f16_at(blk, 80) * (blk[e / 16] & 15);
    if (t == CR_TYPE_Q3_K) {
        const uint8_t *s = blk + 96;
        int k = e / 16;
        int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4);
        int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        return f16_at(blk, 108) * ((lo | (hi << 4)) - 32);
    }
    /* Q4_K / Q5_K: d at 0, scales at 4 */
    const uint8_t *s = blk + 4;
    int j = e / 32;
    int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    return f16_at(blk, 0) * sc;
}

/* Per-element offset of a weight row for the types with a minimum
 * (value = step * q + offset), decoded from the layouts in quant.h; 0 for
 * the others. Their kernels sum the scaled-quant and offset parts apart,
 * so float rounding there is relative to both parts, not their sum. */
static double elem_offset(cr_type_t t, const uint8_t *row, int64_t e)
{
    switch (t) {
    case CR_TYPE_Q4_1:
        return f16_at(row + (size_t)(e / 32) * 20, 2);
    case CR_TYPE_Q5_1:
        return f16_at(row + (size_t)(e / 32) * 24, 2);
    case CR_TYPE_Q2_K: {
        const uint8_t *blk = row + (size_t)(e / 256) * 84;
        return -f16_at(blk, 82) * (blk[(e % 256) / 16] >> 4);
    }
    case CR_TYPE_Q4_K:
    case CR_TYPE_Q5_K: {
        const uint8_t *blk = row + (size_t)(e / 256) * (t == CR_TYPE_Q4_K ? 144 : 176);
        const uint8_t *s = blk + 4;
        int j = (int)(e % 256) / 32;
        int m = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
        return -f16_at(blk, 2) * m;
    }
    default:
        return 0;
    }
}

/* The new types: relative rms error, and a per-element bound that follows
 * from each quantizer's construction:
 * - Q4_1/Q5_1 (GGML's min/max fit): half a step (hi-lo)/qmax, plus the f16
 *   rounding of d (qmax*step*2^-11) and of m (|lo|*2^-11);
 * - Q5_0 (largest magnitude -> -16): one step amax/16 (the opposite side
 *   clamps at +15) plus the f16 rounding of d;
 * - K-quants (least-squares fits that may clip the extremes): with the
 *   element's decoded step ds and offset, an element inside the block's
 *   representable range (widened by ds/2) is within ds/2 (nearest quant);
 *   one outside it is quantized to the range's end, at most CLIP_STEPS
 *   steps beyond it (the quantizers' K_CLIP_STEPS);
 * Each with 1e-4 relative slack for float rounding in the division. */
#define CLIP_STEPS 1.0
static void test_roundtrip_more(void)
{
    enum { N = 256 * 16 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (int i = 0; i < N; i++)
        x[i] = splitmix_normal(&rng_s) * (i % 97 == 0 ? 8.0f : 1.0f) + (i / 512 == 3 ? 2.0f : 0.0f);
    /* a sub-block of one sign and one of a constant: the min/offset paths */
    for (int i = 0; i < 32; i++) {
        x[1024 + i] = -1.0f - 0.01f * (float)i;
        x[2048 + i] = 0.75f;
    }
    struct {
        cr_type_t t;
        double max_rel_rms;
    } cases[] = {
        /* measured on this data: 0.084, 0.064, 0.041, 0.252, 0.178, 0.078,
         * 0.038; limits about 1.3x, so a regression in a fit shows */
        {CR_TYPE_Q4_1, 0.11}, {CR_TYPE_Q5_0, 0.08}, {CR_TYPE_Q5_1, 0.055},
        {CR_TYPE_Q2_K, 0.33}, {CR_TYPE_Q3_K, 0.23}, {CR_TYPE_Q4_K, 0.10},
        {CR_TYPE_Q5_K, 0.05},
    };
    for (size_t c = 0; c < CR_ARRAY_LEN(cases); c++) {
        cr_type_t t = cases[c].t;
        const be_type_traits_t *tt = be_type_traits_at(t, BE_SIMD_SCALAR);
        tt->from_float(x, q, N);
        tt->to_float(q, y, N);
        double se = 0, sx = 0, max_clip = 0;
        int over = 0;
        for (int b = 0; b < N; b += 32) {
            float amax = 0, lo = INFINITY, hi = -INFINITY;
            for (int i = b; i < b + 32; i++) {
                amax = fmaxf(amax, fabsf(x[i]));
                lo = fminf(lo, x[i]);
                hi = fmaxf(hi, x[i]);
            }
            for (int i = b; i < b + 32; i++) {
                double e = fabs((double)y[i] - x[i]);
                se += e * e;
                sx += (double)x[i] * x[i];
                double bound;
                if (t == CR_TYPE_Q4_1 || t == CR_TYPE_Q5_1) {
                    double qmax = t == CR_TYPE_Q4_1 ? 15 : 31;
                    double step = (hi - lo) / qmax;
                    bound = step * 0.5 + qmax * step / 2048 + fabs(lo) / 2048;
                } else if (t == CR_TYPE_Q5_0) {
                    bound = amax / 16.0 + amax / 2048.0;
                } else {
                    const uint8_t *blk = q + (size_t)(i / 256) * tt->block_bytes;
                    double step = k_step(t, blk, i % 256), lo_r, hi_r;
                    if (t == CR_TYPE_Q3_K) {
                        lo_r = fmin(-4 * step, 3 * step);
                        hi_r = fmax(-4 * step, 3 * step);
                        step = fabs(step);
                    } else {
                        double qmax = t == CR_TYPE_Q2_K ? 3 : t == CR_TYPE_Q4_K ? 15 : 31;
                        lo_r = elem_offset(t, q, i);
                        hi_r = lo_r + qmax * step;
                    }
                    bound = 0.5 * step;
                    double out = fmax(lo_r - x[i], x[i] - hi_r); /* > 0: clipped */
                    if (out > 0.5 * step) {
                        double end = x[i] < lo_r ? lo_r : hi_r;
                        max_clip = fmax(max_clip, out / step);
                        /* at the end, and not too far past it */
                        bound = fabs(y[i] - end) <= 1e-5 * amax &&
                                        out <= CLIP_STEPS * step * (1 + 1e-4) + 1e-6 * amax
                                    ? INFINITY
                                    : 0;
                    }
                }
                if (e > bound * (1 + 1e-4) + 1e-6 * amax) {
                    if (over < 4)
                        fprintf(stderr, "%s element %d: x %g y %g bound %g\n", tt->name, i,
                                x[i], y[i], bound);
                    over++;
                }
            }
        }
        double rel = sqrt(se / sx);
        printf("test_quant: %s relative rms error %.4f (limit %.3f), max clip %.2f steps\n",
               tt->name, rel, cases[c].max_rel_rms, max_clip);
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
    {CR_TYPE_Q4_0, 32},    {CR_TYPE_Q4_1, 32 * 9}, {CR_TYPE_Q4_1, 32},
    {CR_TYPE_Q5_0, 32 * 7}, {CR_TYPE_Q5_0, 32},    {CR_TYPE_Q5_1, 32 * 5},
    {CR_TYPE_Q2_K, 256 * 3}, {CR_TYPE_Q3_K, 256 * 2}, {CR_TYPE_Q4_K, 256 * 3},
    {CR_TYPE_Q4_K, 256},   {CR_TYPE_Q5_K, 256 * 2}, {CR_TYPE_Q6_K, 256},
};

/* Exact value of the dot product the kernel is defined to compute: both
 * operands dequantized, products summed in double. With Q8_1 activations
 * the weights' minimum meets the block's stored s (f16 of d * sum(qs)),
 * not the sum of the dequantized activations: that difference is part of
 * the definition (llama.cpp's), so it is added here exactly.
 * *mag: sum of |terms| (with |offset * a| counted twice more for types
 * with a minimum, see elem_offset). */
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
        m += 2 * fabs(elem_offset(tt->type, w, i) * af[i]);
    }
    if (vt->type == CR_TYPE_Q8_1) {
        const be_block_q8_1_t *y = a;
        for (int64_t b = 0; b < n / 32; b++) {
            double d = be_f16_to_f32(y[b].d), sum = 0;
            for (int j = 0; j < 32; j++)
                sum += y[b].qs[j];
            double off = elem_offset(tt->type, w, b * 32);
            s += off * ((double)be_f16_to_f32(y[b].s) - d * sum);
            m += fabs(off * be_f16_to_f32(y[b].s));
        }
    }
    free(wf);
    free(af);
    *mag = m;
    return s;
}

/* Terms for dot_tol (each allows two unit roundoffs of mag): one per block
 * for the symmetric types (scale product, accumulate); three for the types
 * with a minimum, which also form, scale and subtract (or add) the offset
 * part (up to 6 roundings per block). */
static int64_t dot_terms(const be_type_traits_t *tt, int64_t n)
{
    if (tt->block_elems == 1)
        return n;
    int64_t blocks = n / tt->block_elems;
    bool has_min = tt->type == CR_TYPE_Q4_1 || tt->type == CR_TYPE_Q5_1 ||
                   tt->type == CR_TYPE_Q2_K || tt->type == CR_TYPE_Q4_K ||
                   tt->type == CR_TYPE_Q5_K;
    return has_min ? 3 * blocks : blocks;
}

/* Types whose AVX2 dot product must equal the scalar one bit for bit. */
static bool same_bits(cr_type_t t)
{
    return t == CR_TYPE_Q2_K || t == CR_TYPE_Q3_K || t == CR_TYPE_Q4_K ||
           t == CR_TYPE_Q5_K;
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
            af[i] = splitmix_normal(&rng_s);
        vs->from_float(af, a, n);
        int bad_exact = 0, bad_simd = 0, bad_same = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int64_t i = 0; i < n; i++)
                xf[i] = splitmix_normal(&rng_s) * 0.05f * (float)(r + 1);
            ts->from_float(xf, w + (size_t)r * wb, n);
            const void *wr = w + (size_t)r * wb;
            double mag = 0, ex = exact_dot(ts, vs, wr, a, n, &mag);
            float s_scalar = 0, s_simd = 0;
            ts->vec_dot(n, &s_scalar, wr, a);
            tv->vec_dot(n, &s_simd, wr, a);
            int64_t terms = dot_terms(ts, n);
            double tol = dot_tol(terms, mag);
            if (fabs(s_scalar - ex) > tol) {
                bad_exact++;
                fprintf(stderr, "%s n=%" PRId64 " row %d: scalar %.9g exact %.9g tol %g\n",
                        ts->name, n, r, s_scalar, ex, tol);
            }
            /* The K-quant SIMD kernels do the scalar kernels' float steps
             * in the same order: same bits. */
            if (same_bits(t) && f_bits(s_simd) != f_bits(s_scalar))
                bad_same++;
            /* SIMD and scalar each lie within tol of the exact value. */
            if (fabs(s_simd - ex) > tol) {
                bad_simd++;
                fprintf(stderr, "%s n=%" PRId64 " row %d: simd %.9g exact %.9g tol %g\n",
                        ts->name, n, r, s_simd, ex, tol);
            }
        }
        CHECK_MSG(bad_exact == 0, "%s n=%" PRId64 ": scalar dot off", ts->name, n);
        CHECK_MSG(bad_same == 0, "%s n=%" PRId64 ": simd differs from scalar", ts->name,
                  n);
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
        f[i] = bits_f((uint32_t)splitmix_next(&rng_s));
    f[0] = INFINITY, f[1] = -0.0f, f[2] = ldexpf(1, -25), f[3] = 65520.0f;
    be_type_traits_at(CR_TYPE_F16, BE_SIMD_SCALAR)->from_float(f, h1, M);
    be_type_traits_at(CR_TYPE_F16, BE_SIMD_AVX2)->from_float(f, h2, M);
    int bad = 0;
    for (int i = 0; i < M; i++)
        bad += h1[i] != h2[i];
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < M; i++)
        h1[i] = (uint16_t)splitmix_next(&rng_s);
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

/* Every bit pattern: weight blocks of random bytes (their f16 scales set to
 * finite values in [2^-8, 2^-4) with random sign) against activation blocks
 * of random int8 with consistent sums (Q8_K: including -128, which the
 * quantizer never makes but the K-quant kernels take; Q8_0/Q8_1: -127..127
 * as their quantizer guarantees). SIMD must match the scalar kernel: bit for bit for the
 * K-quants, within dot_tol for the rest. */
static void test_dot_random_blocks(void)
{
    static const cr_type_t types[] = {CR_TYPE_Q4_1, CR_TYPE_Q5_0, CR_TYPE_Q5_1,
                                      CR_TYPE_Q2_K, CR_TYPE_Q3_K, CR_TYPE_Q4_K,
                                      CR_TYPE_Q5_K, CR_TYPE_Q4_0, CR_TYPE_Q6_K};
    enum { NB = 4, TRIALS = 50 };
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        const be_type_traits_t *ts = be_type_traits_at(types[k], BE_SIMD_SCALAR);
        const be_type_traits_t *tv = be_type_traits_at(types[k], BE_SIMD_AVX2);
        const be_type_traits_t *vs = be_type_traits_at(ts->vec_dot_type, BE_SIMD_SCALAR);
        int64_t n = (int64_t)ts->block_elems * NB;
        uint8_t w[210 * NB], act[292 * NB]; /* largest: Q6_K, Q8_K */
        int bad = 0;
        for (int trial = 0; trial < TRIALS; trial++) {
            for (size_t i = 0; i < sizeof w; i++)
                w[i] = (uint8_t)splitmix_next(&rng_s);
            /* f16 fields: d (and m/dmin) at the offsets of each layout */
            size_t offs[2] = {0, 2}, n_off = 1;
            if (types[k] == CR_TYPE_Q4_1 || types[k] == CR_TYPE_Q5_1 ||
                types[k] == CR_TYPE_Q4_K || types[k] == CR_TYPE_Q5_K)
                n_off = 2;
            if (types[k] == CR_TYPE_Q2_K)
                offs[0] = 80, offs[1] = 82, n_off = 2;
            if (types[k] == CR_TYPE_Q3_K)
                offs[0] = 108;
            if (types[k] == CR_TYPE_Q6_K)
                offs[0] = 208;
            for (int b = 0; b < NB; b++)
                for (size_t o = 0; o < n_off; o++) {
                    uint16_t h = (uint16_t)(0x1c00 + splitmix_next(&rng_s) % 0x0c00) | (splitmix_next(&rng_s) & 1 ? 0x8000 : 0);
                    memcpy(w + (size_t)b * ts->block_bytes + offs[o], &h, 2);
                }
            if (ts->vec_dot_type == CR_TYPE_Q8_K) {
                be_block_q8_k_t *y = (be_block_q8_k_t *)act;
                for (int b = 0; b < NB; b++) {
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
                /* Q8_0 / Q8_1: random quants, d finite, s = f16(d * sum) */
                for (int b = 0; b < NB; b++) {
                    uint8_t *blk = act + (size_t)b * vs->block_bytes;
                    size_t qoff = vs->type == CR_TYPE_Q8_1 ? 4 : 2;
                    int sum = 0;
                    for (int j = 0; j < 32; j++) {
                        /* -127..127: the Q8_0/Q8_1 contract (the sign trick
                         * in the SIMD kernels cannot negate -128) */
                        int8_t v = (int8_t)(splitmix_next(&rng_s) % 255 - 127);
                        memcpy(&blk[qoff + j], &v, 1);
                        sum += v;
                    }
                    uint16_t d = (uint16_t)(0x2000 + splitmix_next(&rng_s) % 0x0800);
                    memcpy(blk, &d, 2);
                    if (vs->type == CR_TYPE_Q8_1) {
                        uint16_t sh = be_f32_to_f16(be_f16_to_f32(d) * (float)sum);
                        memcpy(blk + 2, &sh, 2);
                    }
                }
            }
            float s1 = 0, s2 = 0;
            ts->vec_dot(n, &s1, w, act);
            tv->vec_dot(n, &s2, w, act);
            double mag = 0, ex = exact_dot(ts, vs, w, act, n, &mag);
            double tol = dot_tol(dot_terms(ts, n), mag);
            bool ok = fabs(s1 - ex) <= tol && fabs(s2 - ex) <= tol;
            if (same_bits(types[k]))
                ok = ok && f_bits(s1) == f_bits(s2);
            if (!ok && bad++ < 3)
                fprintf(stderr, "%s trial %d: scalar %.9g simd %.9g exact %.9g tol %g\n",
                        ts->name, trial, s1, s2, ex, tol);
        }
        CHECK_MSG(bad == 0, "%s: %d random-block trials off", ts->name, bad);
    }
}

/* ---- four-row dot products (prompt GEMM) ------------------------------- */

/* vec_dot4 of every type that has one equals vec_dot per activation row bit
 * for bit, on rows of realistic values and on random bytes, with strided
 * outputs and activations. Types without vec_dot4 stay that way at the
 * scalar level (the reference has none). */
static void test_dot4(void)
{
    static const cr_type_t types[] = {CR_TYPE_Q8_0, CR_TYPE_Q4_0, CR_TYPE_Q4_K,
                                      CR_TYPE_Q6_K};
    int have = 0;
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        const be_type_traits_t *ts = be_type_traits_at(types[k], BE_SIMD_SCALAR);
        const be_type_traits_t *tv = be_type_traits_at(types[k], BE_SIMD_AVX2);
        const be_type_traits_t *vs = be_type_traits_at(ts->vec_dot_type, BE_SIMD_SCALAR);
        CHECK(ts->vec_dot4 == NULL);
        if (!tv->vec_dot4)
            continue;
        have++;
        int64_t n = 768; /* 3 super-blocks, 24 blocks of 32 */
        uint64_t wb = 0, ab = 0;
        CHECK(cr_type_row_bytes(types[k], (uint64_t)n, &wb));
        CHECK(cr_type_row_bytes(ts->vec_dot_type, (uint64_t)n, &ab));
        size_t astride = (size_t)ab + 64; /* not the row size: stride honoured */
        uint8_t *w = malloc((size_t)wb), *a = malloc(astride * 4);
        float *f = malloc((size_t)n * sizeof *f);
        int bad = 0;
        for (int trial = 0; trial < 40; trial++) {
            for (int64_t i = 0; i < n; i++)
                f[i] = splitmix_normal(&rng_s) * 0.02f * (float)(1 + trial % 5);
            ts->from_float(f, w, n);
            if (trial >= 20) /* random bytes, finite f16 scales kept */
                for (uint64_t i = 0; i < wb; i++)
                    if (splitmix_next(&rng_s) % 3 == 0)
                        w[i] ^= (uint8_t)(splitmix_next(&rng_s) & 0x77);
            for (int c = 0; c < 4; c++) {
                for (int64_t i = 0; i < n; i++)
                    f[i] = splitmix_normal(&rng_s) * (float)(1 + c);
                vs->from_float(f, a + (size_t)c * astride, n);
            }
            float out[4 * 3];
            for (int i = 0; i < 12; i++)
                out[i] = -1;
            tv->vec_dot4(n, out, 3, w, a, astride);
            for (int c = 0; c < 4; c++) {
                float want = 0;
                tv->vec_dot(n, &want, w, a + (size_t)c * astride);
                if (f_bits(out[3 * c]) != f_bits(want) && bad++ < 3)
                    fprintf(stderr, "%s trial %d col %d: dot4 %.9g dot %.9g\n", ts->name,
                            trial, c, out[3 * c], want);
                /* only every third float written */
                bad += out[3 * c + 1] != -1 || out[3 * c + 2] != -1;
            }
        }
        CHECK_MSG(bad == 0, "%s: vec_dot4 differs from vec_dot %d times", ts->name, bad);
        free(w);
        free(a);
        free(f);
    }
    if (be_simd_detect() >= BE_SIMD_AVX2)
        CHECK_EQ_INT(have, 4);
}

/* vec_dot_r4 (decode: four weight rows, one activation row) lies within the
 * rounding bound of the exact dot for each row, like vec_dot, on rows of
 * several magnitudes and lengths; outputs beyond s[3] are untouched. */
static void test_dot_r4(void)
{
    static const cr_type_t types[] = {CR_TYPE_Q8_0, CR_TYPE_Q4_0};
    static const int64_t lens[] = {32, 96, 2048, 5632};
    int have = 0;
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        const be_type_traits_t *ts = be_type_traits_at(types[k], BE_SIMD_SCALAR);
        const be_type_traits_t *tv = be_type_traits_at(types[k], BE_SIMD_AVX2);
        const be_type_traits_t *vs = be_type_traits_at(ts->vec_dot_type, BE_SIMD_SCALAR);
        CHECK(ts->vec_dot_r4 == NULL);
        if (!tv->vec_dot_r4)
            continue;
        have++;
        for (size_t li = 0; li < CR_ARRAY_LEN(lens); li++) {
            int64_t n = lens[li];
            uint64_t wb = 0, ab = 0;
            CHECK(cr_type_row_bytes(types[k], (uint64_t)n, &wb));
            CHECK(cr_type_row_bytes(ts->vec_dot_type, (uint64_t)n, &ab));
            size_t wstride = (size_t)wb + 18; /* not the row size */
            uint8_t *w = malloc(wstride * 4), *a = malloc((size_t)ab);
            float *f = malloc((size_t)n * sizeof *f);
            int bad = 0;
            for (int trial = 0; trial < 6; trial++) {
                for (int r = 0; r < 4; r++) {
                    for (int64_t i = 0; i < n; i++)
                        f[i] = splitmix_normal(&rng_s) * 0.02f * (float)(1 + r + trial);
                    ts->from_float(f, w + (size_t)r * wstride, n);
                }
                for (int64_t i = 0; i < n; i++)
                    f[i] = splitmix_normal(&rng_s);
                vs->from_float(f, a, n);
                float out[5] = {-1, -1, -1, -1, -7};
                tv->vec_dot_r4(n, out, w, wstride, a);
                bad += out[4] != -7;
                /* vec_dot44 on four copies of a (strided) and s_stride 6:
                 * each group of four is vec_dot_r4's bits */
                if (tv->vec_dot44) {
                    uint8_t *a4 = malloc(((size_t)ab + 34) * 4);
                    for (int c = 0; c < 4; c++)
                        memcpy(a4 + (size_t)c * ((size_t)ab + 34), a, (size_t)ab);
                    float o4[24];
                    for (int i = 0; i < 24; i++)
                        o4[i] = -3;
                    tv->vec_dot44(n, o4, 6, w, wstride, a4, (size_t)ab + 34);
                    for (int c = 0; c < 4; c++)
                        for (int r = 0; r < 6; r++)
                            bad += r < 4 ? f_bits(o4[6 * c + r]) != f_bits(out[r])
                                         : o4[6 * c + r] != -3;
                    free(a4);
                }
                for (int r = 0; r < 4; r++) {
                    double mag = 0;
                    double ex = exact_dot(ts, vs, w + (size_t)r * wstride, a, n, &mag);
                    double tol = dot_tol(dot_terms(ts, n), mag);
                    if (fabs(out[r] - ex) > tol && bad++ < 3)
                        fprintf(stderr, "%s n=%" PRId64 " row %d: r4 %.9g exact %.9g tol %g\n",
                                ts->name, n, r, out[r], ex, tol);
                }
            }
            CHECK_MSG(bad == 0, "%s n=%" PRId64 ": vec_dot_r4 off %d times", ts->name, n, bad);
            free(w);
            free(a);
            free(f);
        }
    }
    if (be_simd_detect() >= BE_SIMD_AVX2)
        CHECK_EQ_INT(have, 2);
}

/* ---- backend matmul with threads -------------------------------------- */

static void test_backend_matmul(void)
{
    cr_type_t types[] = {CR_TYPE_F32,  CR_TYPE_F16,  CR_TYPE_BF16, CR_TYPE_Q8_0,
                         CR_TYPE_Q4_0, CR_TYPE_Q6_K, CR_TYPE_Q4_1, CR_TYPE_Q5_0,
                         CR_TYPE_Q5_1, CR_TYPE_Q2_K, CR_TYPE_Q3_K, CR_TYPE_Q4_K,
                         CR_TYPE_Q5_K};
    be_backend_t *be1 = NULL, *be3 = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_cpu_new(1, &be1, &err), CR_OK);
    CHECK_EQ_INT(be_cpu_new(3, &be3, &err), CR_OK);
    if (!be1 || !be3)
        return;
    CHECK_EQ_INT(be_cpu_threads(be3), 3);
    enum { ROWS = 37, NTOK = 9 }; /* two groups of four tokens and one more */
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
                row[i] = splitmix_normal(&rng_s) * 0.02f;
            tt->from_float(row, wq + (size_t)r * rb, n);
        }
        for (int64_t i = 0; i < n * NTOK; i++)
            x[i] = splitmix_normal(&rng_s);
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
                /* same kernel per (row, token) whatever the split: bitwise;
                 * types with four-row kernels (rows 0..35 here) round in
                 * another order than vec_dot: within float rounding */
                bool grouped = tt->vec_dot_r4 && r < ROWS / 4 * 4;
                float got = y1[t * ROWS + r];
                if (grouped)
                    bad += fabsf(got - want) > 1e-5f * (1.0f + fabsf(want));
                else
                    bad += got != want;
                bad += y3[t * ROWS + r] != got;
            }
        }
        CHECK_MSG(bad == 0, "%s matmul: %d outputs differ", tt->name, bad);
        /* one token (decode; four-row kernels where the type has them):
         * the same sums up to float rounding, on 1 and 3 threads alike */
        /* ... and each token alone gives the batch's bits (prompt caching
         * and batching never change a result) */
        float ya[ROWS], yb[ROWS];
        int bad1 = 0;
        for (int t = 0; t < NTOK; t++) {
            be1->ops->matmul(be1, &w, x + (size_t)t * n, 1, ya);
            be3->ops->matmul(be3, &w, x + (size_t)t * n, 1, yb);
            for (int r = 0; r < ROWS; r++)
                bad1 += ya[r] != y1[t * ROWS + r] || yb[r] != y1[t * ROWS + r];
        }
        CHECK_MSG(bad1 == 0, "%s matmul n=1: %d outputs off", tt->name, bad1);
        free(wq);
        free(row);
        free(x);
        free(y1);
        free(y3);
        free(xa);
    }
    /* unsupported types (activation-only, integer) are refused by name */
    be_weight_t w5 = {"blk.0.attn_q.weight", CR_TYPE_Q8_1, 256, 1, 288, NULL, NULL};
    CHECK_EQ_INT(be1->ops->weight_prepare(be1, &w5, &err), CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "blk.0.attn_q.weight") && strstr(err.msg, "Q8_1"));
    be_weight_t wk = {"blk.0.attn_k.weight", CR_TYPE_Q8_K, 256, 1, 292, NULL, NULL};
    CHECK_EQ_INT(be1->ops->weight_prepare(be1, &wk, &err), CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "Q8_K") != NULL);
    be_weight_t wi = {"blk.0.attn_v.weight", CR_TYPE_I32, 8, 1, 32, NULL, NULL};
    CHECK_EQ_INT(be1->ops->weight_prepare(be1, &wi, &err), CR_E_UNSUPPORTED);
    /* a K-quant row that is not a whole number of super-blocks */
    be_weight_t wr = {"blk.0.ffn_up.weight", CR_TYPE_Q4_K, 320, 1, 180, NULL, NULL};
    CHECK_EQ_INT(be1->ops->weight_prepare(be1, &wr, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "blk.0.ffn_up.weight") != NULL);
    be_destroy(&be1);
    be_destroy(&be3);
    CHECK(be1 == NULL);
    be_destroy(&be1); /* NULL-safe */
}

/* The AVX2 activation quantizers (Q8_0, Q8_K) give the scalar bytes:
 * random rows of several magnitudes, zero blocks, ties (a block whose
 * largest value is 127 scales by exactly 1: x.5 rounds to even), a
 * negative largest value first among equal magnitudes (Q8_K's sign),
 * +-0 and subnormal rows, and magnitudes whose scale overflows f16.
 * (Not inf or NaN: converting them to int8 is undefined in C, and a row
 * holding one has already lost the model's output.) */
static void test_act_quant_simd(void)
{
    if (be_simd_detect() < BE_SIMD_AVX2)
        return;
    cr_type_t types[] = {CR_TYPE_Q8_0, CR_TYPE_Q8_K};
    enum { N = 1024 };
    float x[N];
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        const be_type_traits_t *ts = be_type_traits_at(types[k], BE_SIMD_SCALAR);
        const be_type_traits_t *tv = be_type_traits_at(types[k], BE_SIMD_AVX2);
        CHECK(tv->from_float != ts->from_float);
        size_t bytes = (size_t)(N / ts->block_elems) * ts->block_bytes;
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        int bad = 0;
        for (int round = 0; round < 20; round++) {
            float mag = powf(10.0f, (float)(round % 7) - 3.0f);
            for (int i = 0; i < N; i++)
                x[i] = splitmix_normal(&rng_s) * mag;
            if (round == 1)
                for (int i = 0; i < 256; i++)
                    x[i] = 0; /* a zero block of either type */
            if (round == 2)
                for (int i = 0; i < N; i++)
                    x[i] = i % 32 == 0 ? 127.0f : (float)((int)(splitmix_next(&rng_s) % 255) - 127) + 0.5f * (i % 2);
            if (round == 3)
                for (int i = 0; i < N; i++)
                    x[i] = i % 256 == 7 ? -3.0f : i % 256 == 9 ? 3.0f : splitmix_normal(&rng_s);
            if (round == 4) /* +-0 and subnormal rows (their scales flush) */
                for (int i = 0; i < N; i++)
                    x[i] = i < 512 ? (i % 2 ? -0.0f : 0.0f) * splitmix_normal(&rng_s)
                                   : splitmix_normal(&rng_s) * 1e-40f;
            if (round == 5) /* one subnormal among zeros; normals beside subnormals */
                for (int i = 0; i < N; i++)
                    x[i] = i % 256 == 3 ? -0x1p-149f : i >= 512 && i % 2 ? splitmix_normal(&rng_s) * 1e-40f
                                                     : i >= 512 ? splitmix_normal(&rng_s) : 0.0f;
            if (round == 6) /* magnitudes past f16's range (the scale is inf) */
                for (int i = 0; i < N; i++)
                    x[i] = splitmix_normal(&rng_s) * (i % 3 ? 1e30f : 3e37f);
            memset(a, 0, bytes);
            memset(b, 0, bytes);
            ts->from_float(x, a, N);
            tv->from_float(x, b, N);
            bad += memcmp(a, b, bytes) != 0;
        }
        CHECK_MSG(bad == 0, "%s: AVX2 quantization differs in %d rounds", ts->name, bad);
        free(a);
        free(b);
    }
}

static void test_traits_table(void)
{
    cr_type_t have[] = {CR_TYPE_F32,  CR_TYPE_F16,  CR_TYPE_BF16, CR_TYPE_Q8_0,
                        CR_TYPE_Q4_0, CR_TYPE_Q6_K, CR_TYPE_Q4_1, CR_TYPE_Q5_0,
                        CR_TYPE_Q5_1, CR_TYPE_Q2_K, CR_TYPE_Q3_K, CR_TYPE_Q4_K,
                        CR_TYPE_Q5_K};
    for (size_t i = 0; i < CR_ARRAY_LEN(have); i++) {
        const be_type_traits_t *tt = be_type_traits(have[i]);
        const cr_type_info_t *ti = cr_type_info(have[i]);
        CHECK(tt && ti && tt->vec_dot && tt->to_float && tt->from_float);
        /* geometry agrees with lib/tensor_type.c */
        CHECK(tt && ti && tt->block_elems == ti->block_elems &&
              tt->block_bytes == ti->block_bytes && !strcmp(tt->name, ti->name));
        CHECK(be_type_is_supported(have[i]));
    }
    CHECK(!be_type_is_supported(CR_TYPE_Q8_K)); /* activation-only */
    CHECK(!be_type_is_supported(CR_TYPE_Q8_1)); /* activation-only */
    CHECK(!be_type_is_supported(CR_TYPE_I8));
    /* activation formats: geometry also matches lib/tensor_type.c */
    cr_type_t acts[] = {CR_TYPE_Q8_1, CR_TYPE_Q8_K};
    for (size_t i = 0; i < CR_ARRAY_LEN(acts); i++) {
        const be_type_traits_t *tt = be_type_traits(acts[i]);
        const cr_type_info_t *ti = cr_type_info(acts[i]);
        CHECK(tt && ti && tt->block_bytes == ti->block_bytes &&
              tt->block_elems == ti->block_elems && tt->to_float && tt->from_float);
    }
    /* every weight type pairs with the activation format llama.cpp uses */
    static const struct {
        cr_type_t w, a;
    } pairs[] = {{CR_TYPE_Q4_1, CR_TYPE_Q8_1}, {CR_TYPE_Q5_0, CR_TYPE_Q8_0},
                 {CR_TYPE_Q5_1, CR_TYPE_Q8_1}, {CR_TYPE_Q2_K, CR_TYPE_Q8_K},
                 {CR_TYPE_Q3_K, CR_TYPE_Q8_K}, {CR_TYPE_Q4_K, CR_TYPE_Q8_K},
                 {CR_TYPE_Q5_K, CR_TYPE_Q8_K}};
    for (size_t i = 0; i < CR_ARRAY_LEN(pairs); i++) {
        CHECK(be_type_traits_at(pairs[i].w, BE_SIMD_SCALAR)->vec_dot_type == pairs[i].a);
        CHECK(be_type_traits_at(pairs[i].w, BE_SIMD_AVX2)->vec_dot_type == pairs[i].a);
    }
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
    test_dequant_known_more();
    test_roundtrip();
    test_roundtrip_more();
    test_dots();
    test_dot_extremes();
    test_dot_random_blocks();
    test_dot4();
    test_dot_r4();
    test_act_quant_simd();
    test_backend_matmul();
    test_traits_table();
    return check_finish("test_quant");
}
