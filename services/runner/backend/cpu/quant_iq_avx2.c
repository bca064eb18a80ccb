/* quant_iq_avx2.c: AVX2 dot products of the 2- and 3-bit I-quants with
 * Q8_K activations (contracts and layouts in quant_iq.h).
 *
 * Per 32-element sub-block: the type's decoder (quant_iq.h) gathers the
 * grid bytes and the 32 sign bits; the signs go onto the grid bytes
 * (magnitudes <= 62, so signed bytes), the products meet the activations
 * in maddubs (pair sums <= 2 x 62 x 128, no saturation), and the pair
 * sums meet the sub-block's scales in an int16 multiply-add. The
 * super-block's sum is the scalar kernel's exact integer and the float
 * steps after it the same: same bits as quant_iq.c.
 *
 * The avx512vnni level uses these too: a 512-bit version (two sub-blocks
 * per register, the 64 sign bits as one mask, maddubs or VPDPBUSD) was
 * written and measured 0.57-1.23x these in bench-kernels (one thread,
 * 512 x 4096, loaded machine): the grid look-ups, scalar in both, bound
 * it (quant_iq_avx512.c at commit 32981a8 of branch iquants).
 *
 * Compiled for AVX2 alone and reached only after be_simd_detect(); scalar
 * stubs elsewhere, never selected. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_iq.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline AVX2 int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The sub-block's products summed per pair, times its scales, as 8 int32
 * lanes: elements 0..15 in the low lane (mul[0]), 16..31 high (mul[1]). */
static inline AVX2 __m256i sub_dot(const be_iq_sub_t *sb, const int8_t *q8)
{
    /* byte j of the 32 takes sign byte j / 8, tested against bit j % 8 */
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                             0x0101010101010101, 0x0000000000000000);
    const __m256i bits = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    __m256i sv = _mm256_shuffle_epi8(_mm256_set1_epi32((int32_t)sb->signs), spread);
    __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(sv, bits), bits);
    /* from the values, not memory: the decoder's struct stays in registers
     * (a 32-byte load of four 8-byte stores would stall forwarding) */
    __m256i grid = _mm256_set_epi64x((int64_t)sb->grid[3], (int64_t)sb->grid[2],
                                     (int64_t)sb->grid[1], (int64_t)sb->grid[0]);
    __m256i w = _mm256_sign_epi8(grid, _mm256_or_si256(neg, _mm256_set1_epi8(1)));
    __m256i a = _mm256_loadu_si256((const __m256i *)q8);
    /* |a| unsigned (-128 reads 128), w takes a's sign */
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(w, a));
    __m256i sc = _mm256_set_m128i(_mm_set1_epi16((int16_t)sb->mul[1]),
                                  _mm_set1_epi16((int16_t)sb->mul[0]));
    return _mm256_madd_epi16(p, sc);
}

#define IQ_AVX2_DOT(name, block_t, unit)                                             \
    AVX2 void be_avx2_dot_##name(int64_t n, float *s, const void *w, const void *a)  \
    {                                                                                \
        const be_iq_grids_t *g = be_iq_grids();                                      \
        const block_t *x = w;                                                        \
        const be_block_q8_k_t *y = a;                                                \
        float sum = 0;                                                               \
        for (int64_t i = 0; i < n / BE_QK_K; i++) {                                  \
            __m256i acc = _mm256_setzero_si256();                                    \
            for (int ib = 0; ib < BE_QK_K / 32; ib++) {                              \
                be_iq_sub_t sb;                                                      \
                be_##name##_sub(g, &x[i], ib, &sb);                                  \
                acc = _mm256_add_epi32(acc, sub_dot(&sb, y[i].qs + 32 * ib));        \
            }                                                                        \
            sum += (_cvtsh_ss(x[i].d) * y[i].d) * (float)hsum_epi32(acc);            \
        }                                                                            \
        *s = sum * (unit);                                                           \
    }

IQ_AVX2_DOT(iq2_xxs, be_block_iq2_xxs_t, 0.125f)
IQ_AVX2_DOT(iq2_xs, be_block_iq2_xs_t, 0.125f)
IQ_AVX2_DOT(iq2_s, be_block_iq2_s_t, 0.125f)
IQ_AVX2_DOT(iq3_xxs, be_block_iq3_xxs_t, 0.25f)
IQ_AVX2_DOT(iq3_s, be_block_iq3_s_t, 1.0f)

/* IQ1_S: grid bytes are -1/0/1 (signed); products and the scale as
 * above (pair sums <= 256, times mul <= 15); the shift's sum comes from
 * bsums as in the scalar kernel. */
AVX2 void be_avx2_dot_iq1_s(int64_t n, float *s, const void *w, const void *a)
{
    const be_iq_grids_t *g = be_iq_grids();
    const be_block_iq1_s_t *x = w;
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        __m256i acc = _mm256_setzero_si256();
        int32_t isum1 = 0;
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            uint64_t gr[4];
            int32_t mul;
            bool neg;
            be_iq1_s_sub(g, &x[i], ib, gr, &mul, &neg);
            __m256i wv = _mm256_set_epi64x((int64_t)gr[3], (int64_t)gr[2], (int64_t)gr[1],
                                           (int64_t)gr[0]);
            __m256i av = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib));
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(av, av), _mm256_sign_epi8(wv, av));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16((int16_t)mul)));
            int32_t qsum = y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1];
            isum1 += mul * (neg ? -qsum : qsum);
        }
        sum += (_cvtsh_ss(x[i].d) * y[i].d) * ((float)hsum_epi32(acc) + 0.125f * (float)isum1);
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
STUB_DOT(be_avx2_dot_iq2_xxs)
STUB_DOT(be_avx2_dot_iq2_xs)
STUB_DOT(be_avx2_dot_iq2_s)
STUB_DOT(be_avx2_dot_iq3_xxs)
STUB_DOT(be_avx2_dot_iq3_s)
STUB_DOT(be_avx2_dot_iq1_s)

#endif
