/* quant_iq_avx512.c: AVX-512 (F/BW/VL/VNNI) dot products of the 2- and
 * 3-bit I-quants with Q8_K activations (contracts in quant_iq.h).
 *
 * Two sub-blocks per 512-bit register: their 64 sign bits are one mask
 * register, applied to the grid bytes together with the activations' own
 * signs in one masked subtract; maddubs multiplies |a| (unsigned, -128
 * reads 128) by the signed grid bytes, and an int16 multiply-add applies
 * each 16 elements' scale, exact. (VPDPBUSD plus a 32-bit multiply for the
 * scales measured slower.) The super-block's sum is the scalar kernel's
 * exact integer: same bits as quant_iq.c.
 *
 * Compiled with target attributes and reached only after be_simd_detect()
 * reported BE_SIMD_AVX512_VNNI. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_iq.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* Four int16 multipliers, one per 128-bit lane (16 elements each), in
 * every int16 of that lane. */
static inline AVX512 __m512i lane_muls(int32_t m0, int32_t m1, int32_t m2, int32_t m3)
{
    const __m512i pick = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,
                                          1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m128i m = _mm_setr_epi16((int16_t)m0, (int16_t)m1, (int16_t)m2, (int16_t)m3, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(pick, _mm512_castsi128_si512(m));
}

/* Sub-blocks s0 and s1 (64 elements) against 64 activations, scaled, as
 * 16 int32 lanes: signed grid bytes (activation sign folded in by one
 * masked subtract) times |a| in maddubs (pair sums <= 2 x 62 x 128), then
 * an int16 multiply-add with each 16 elements' multiplier. */
static inline AVX512 __m512i pair_dot(const be_iq_sub_t *s0, const be_iq_sub_t *s1,
                                      const int8_t *q8)
{
    /* from the values, not memory (the decoders' structs stay in
     * registers) */
    __m512i grid = _mm512_set_epi64((int64_t)s1->grid[3], (int64_t)s1->grid[2],
                                    (int64_t)s1->grid[1], (int64_t)s1->grid[0],
                                    (int64_t)s0->grid[3], (int64_t)s0->grid[2],
                                    (int64_t)s0->grid[1], (int64_t)s0->grid[0]);
    __m512i a = _mm512_loadu_si512((const void *)q8);
    __mmask64 neg = ((uint64_t)s0->signs | (uint64_t)s1->signs << 32) ^ _mm512_movepi8_mask(a);
    __m512i w = _mm512_mask_sub_epi8(grid, neg, _mm512_setzero_si512(), grid);
    __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(a), w);
    return _mm512_madd_epi16(p, lane_muls(s0->mul[0], s0->mul[1], s1->mul[0], s1->mul[1]));
}

#define IQ_AVX512_DOT(name, block_t, unit)                                              \
    AVX512 void be_avx512_dot_##name(int64_t n, float *s, const void *w, const void *a) \
    {                                                                                   \
        const be_iq_grids_t *g = be_iq_grids();                                         \
        const block_t *x = w;                                                           \
        const be_block_q8_k_t *y = a;                                                   \
        float sum = 0;                                                                  \
        for (int64_t i = 0; i < n / BE_QK_K; i++) {                                     \
            __m512i acc = _mm512_setzero_si512();                                       \
            for (int ib = 0; ib < BE_QK_K / 32; ib += 2) {                              \
                be_iq_sub_t s0, s1;                                                     \
                be_##name##_sub(g, &x[i], ib, &s0);                                     \
                be_##name##_sub(g, &x[i], ib + 1, &s1);                                 \
                acc = _mm512_add_epi32(acc, pair_dot(&s0, &s1, y[i].qs + 32 * ib));     \
            }                                                                           \
            sum += (_cvtsh_ss(x[i].d) * y[i].d) * (float)_mm512_reduce_add_epi32(acc);  \
        }                                                                               \
        *s = sum * (unit);                                                              \
    }

IQ_AVX512_DOT(iq2_xxs, be_block_iq2_xxs_t, 0.125f)
IQ_AVX512_DOT(iq2_xs, be_block_iq2_xs_t, 0.125f)
IQ_AVX512_DOT(iq2_s, be_block_iq2_s_t, 0.125f)
IQ_AVX512_DOT(iq3_xxs, be_block_iq3_xxs_t, 0.25f)
IQ_AVX512_DOT(iq3_s, be_block_iq3_s_t, 1.0f)

/* IQ1_S: two sub-blocks per register; grid bytes are -1/0/1, given the
 * activations' signs by a masked subtract; the shift's sum from bsums as
 * in the scalar kernel. */
AVX512 void be_avx512_dot_iq1_s(int64_t n, float *s, const void *w, const void *a)
{
    const be_iq_grids_t *g = be_iq_grids();
    const be_block_iq1_s_t *x = w;
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        __m512i acc = _mm512_setzero_si512();
        int32_t isum1 = 0;
        for (int ib = 0; ib < BE_QK_K / 32; ib += 2) {
            uint64_t g0[4], g1[4];
            int32_t m0, m1;
            bool n0, n1;
            be_iq1_s_sub(g, &x[i], ib, g0, &m0, &n0);
            be_iq1_s_sub(g, &x[i], ib + 1, g1, &m1, &n1);
            __m512i wv = _mm512_set_epi64((int64_t)g1[3], (int64_t)g1[2], (int64_t)g1[1],
                                          (int64_t)g1[0], (int64_t)g0[3], (int64_t)g0[2],
                                          (int64_t)g0[1], (int64_t)g0[0]);
            __m512i av = _mm512_loadu_si512((const void *)(y[i].qs + 32 * ib));
            __m512i ws = _mm512_mask_sub_epi8(wv, _mm512_movepi8_mask(av), _mm512_setzero_si512(), wv);
            __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(av), ws);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(p, lane_muls(m0, m0, m1, m1)));
            int32_t q0 = y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1];
            int32_t q1 = y[i].bsums[2 * ib + 2] + y[i].bsums[2 * ib + 3];
            isum1 += m0 * (n0 ? -q0 : q0) + m1 * (n1 ? -q1 : q1);
        }
        sum += (_cvtsh_ss(x[i].d) * y[i].d) *
               ((float)_mm512_reduce_add_epi32(acc) + 0.125f * (float)isum1);
    }
    *s = sum;
}

#else /* not x86: never selected (be_simd_detect says scalar) */

#define STUB_DOT(name)                                                     \
    void name(int64_t n, float *s, const void *w, const void *a)           \
    {                                                                      \
        CR_UNUSED(n), CR_UNUSED(w), CR_UNUSED(a);                          \
        *s = 0;                                                            \
    }
STUB_DOT(be_avx512_dot_iq2_xxs)
STUB_DOT(be_avx512_dot_iq2_xs)
STUB_DOT(be_avx512_dot_iq2_s)
STUB_DOT(be_avx512_dot_iq3_xxs)
STUB_DOT(be_avx512_dot_iq3_s)
STUB_DOT(be_avx512_dot_iq1_s)

#endif
