/* attn_kvq_avx2.c: AVX2 versions of attn_kvq.c's V accumulation.
 *
 * Compiled for AVX2 + F16C alone (the rest of the library stays baseline
 * x86-64) and reached only when be_kvq_head_t.level says so. Each element
 * takes the scalar's float steps, d * q then a separate multiply by p and
 * an add (no fma), so results are bitwise the scalar's. On other
 * architectures these are scalar stubs that are never selected. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/attn_kvq.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))

/* acc[0..8) += (d * q[0..8)) * p, q as int32 lanes */
static inline AVX2 void axpy8(float *acc, __m256i q, __m256 d, __m256 p)
{
    __m256 v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
    _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_loadu_ps(acc), _mm256_mul_ps(v, p)));
}

AVX2 void be_kvq_axpy_q8_0_avx2(int hd, float p, const void *vr, float *acc)
{
    const be_block_q8_0_t *b = vr;
    __m256 pv = _mm256_set1_ps(p);
    for (int i = 0; i < hd / BE_QK8_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        float *o = acc + i * BE_QK8_0;
        for (int j = 0; j < BE_QK8_0; j += 8) {
            __m128i q8 = _mm_loadl_epi64((const __m128i *)(b[i].qs + j));
            axpy8(o + j, _mm256_cvtepi8_epi32(q8), d, pv);
        }
    }
}

AVX2 void be_kvq_axpy_q4_0_avx2(int hd, float p, const void *vr, float *acc)
{
    const be_block_q4_0_t *b = vr;
    __m256 pv = _mm256_set1_ps(p);
    const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int i = 0; i < hd / BE_QK4_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        float *o = acc + i * BE_QK4_0;
        __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        /* elements 0..15: low nibbles; 16..31: high nibbles; minus 8 */
        __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low4), eight);
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight);
        axpy8(o, _mm256_cvtepi8_epi32(lo), d, pv);
        axpy8(o + 8, _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)), d, pv);
        axpy8(o + 16, _mm256_cvtepi8_epi32(hi), d, pv);
        axpy8(o + 24, _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)), d, pv);
    }
}

#else

void be_kvq_axpy_q8_0_avx2(int hd, float p, const void *vr, float *acc)
{
    CR_UNUSED(hd);
    CR_UNUSED(p);
    CR_UNUSED(vr);
    CR_UNUSED(acc);
}

void be_kvq_axpy_q4_0_avx2(int hd, float p, const void *vr, float *acc)
{
    CR_UNUSED(hd);
    CR_UNUSED(p);
    CR_UNUSED(vr);
    CR_UNUSED(acc);
}

#endif
