/* quant_avx512.c: AVX-512 dot products of IQ4_NL and MXFP4 for the
 * BE_SIMD_AVX512_VNNI level; the other types use the AVX2 kernels there.
 *
 * One 512-bit register holds two blocks (their 16 index bytes are 18 or 17
 * bytes apart, so an AVX2 register takes one block at a time). Table
 * lookups are VPSHUFB in four lanes; the products go through VPDPBUSD
 * (four products into each int32 lane, exact); results differ from the
 * scalar kernels only in float summation order, as the AVX2 ones do.
 * IQ4_XS has none: its AVX2 kernel already takes two contiguous
 * sub-blocks per load, and a 512-bit version measured no faster
 * (bench-kernels: 0.99x).
 *
 * Compiled with target attributes and reached only after be_simd_detect()
 * reported BE_SIMD_AVX512_VNNI. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/quant_simd.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* A 16-entry int8 table in all four 128-bit lanes. */
static inline AVX512 __m512i table_x4(const int8_t *t)
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* Table values of two 32-element groups of 4-bit indices, g0 and g1 (16
 * bytes each): lanes g0 low nibbles, g0 high, g1 low, g1 high, which is
 * element order (byte j: element j low, element j+16 high). */
static inline AVX512 __m512i lookup64(__m128i g0, __m128i g1, __m512i table)
{
    __m512i r = _mm512_castsi256_si512(_mm256_set_m128i(g1, g0));
    /* qwords 0 1 0 1 2 3 2 3: each group twice */
    r = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), r);
    /* lanes 1 and 3 (qwords 2, 3, 6, 7) take the high nibbles */
    r = _mm512_mask_blend_epi64(0xcc, r, _mm512_srli_epi16(r, 4));
    return _mm512_shuffle_epi8(table, _mm512_and_si512(r, _mm512_set1_epi8(0x0f)));
}

/* w with a's sign (w where a >= 0, -w where a < 0): with |a| as the
 * unsigned operand, the products are w*a. |a| of -128 is 0x80, read as the
 * unsigned 128; table values are within [-127, 127], so -w fits. */
static inline AVX512 __m512i sign_of(__m512i w, __m512i a)
{
    return _mm512_mask_sub_epi8(w, _mm512_movepi8_mask(a), _mm512_setzero_si512(), w);
}

/* Two floats, each in one 256-bit half. */
static inline AVX512 __m512 halves_ps(float lo, float hi)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(lo)),
                                               _mm256_castps_pd(_mm256_set1_ps(hi)), 1));
}

/* acc + (d0 in the low half, d1 in the high) x the two groups' products:
 * indices q0 and q1 (16 bytes each) against activations a0 and a1 (32 int8
 * each, -127..127 as Q8_0 holds them). */
static inline AVX512 __m512 pair_fma(__m512 acc, const uint8_t *q0, const uint8_t *q1,
                                     const int8_t *a0, const int8_t *a1, float d0, float d1,
                                     __m512i table)
{
    __m512i wv = lookup64(_mm_loadu_si128((const __m128i *)q0),
                          _mm_loadu_si128((const __m128i *)q1), table);
    __m512i av = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a0)),
                                    _mm256_loadu_si256((const __m256i *)a1), 1);
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(av), sign_of(wv, av));
    return _mm512_fmadd_ps(halves_ps(d0, d1), _mm512_cvtepi32_ps(p), acc);
}

/* IQ4_NL and MXFP4: two blocks per step; an odd last block goes to the
 * AVX2 kernel. */
AVX512 void be_avx512_dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_iq4_nl_t *x = w;
    const be_block_q8_0_t *y = a;
    const __m512i table = table_x4(be_iq4_nl_values);
    __m512 acc = _mm512_setzero_ps();
    int64_t nb = n / BE_QK4_0, i = 0;
    for (; i + 2 <= nb; i += 2)
        acc = pair_fma(acc, x[i].qs, x[i + 1].qs, y[i].qs, y[i + 1].qs,
                       _cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d),
                       _cvtsh_ss(x[i + 1].d) * _cvtsh_ss(y[i + 1].d), table);
    float sum = _mm512_reduce_add_ps(acc), tail = 0;
    if (i < nb)
        be_avx2_dot_iq4_nl(BE_QK4_0, &tail, &x[i], &y[i]);
    *s = sum + tail;
}

AVX512 void be_avx512_dot_mxfp4(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_mxfp4_t *x = w;
    const be_block_q8_0_t *y = a;
    const __m512i table = table_x4(be_mxfp4_values);
    __m512 acc = _mm512_setzero_ps();
    int64_t nb = n / BE_QK4_0, i = 0;
    for (; i + 2 <= nb; i += 2)
        acc = pair_fma(acc, x[i].qs, x[i + 1].qs, y[i].qs, y[i + 1].qs,
                       _cvtsh_ss(y[i].d) * be_e8m0_half(x[i].e),
                       _cvtsh_ss(y[i + 1].d) * be_e8m0_half(x[i + 1].e), table);
    float sum = _mm512_reduce_add_ps(acc), tail = 0;
    if (i < nb)
        be_avx2_dot_mxfp4(BE_QK4_0, &tail, &x[i], &y[i]);
    *s = sum + tail;
}

#else /* not x86: never selected (be_simd_detect says scalar) */

#define STUB_DOT(name)                                                     \
    void name(int64_t n, float *s, const void *w, const void *a)           \
    {                                                                      \
        CR_UNUSED(n), CR_UNUSED(w), CR_UNUSED(a);                          \
        *s = 0;                                                            \
    }
STUB_DOT(be_avx512_dot_iq4_nl)
STUB_DOT(be_avx512_dot_mxfp4)

#endif
