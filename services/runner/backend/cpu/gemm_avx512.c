/* gemm_avx512.c: the 12-token x 32-column microkernel of gemm.h for the
 * BE_SIMD_AVX512_VNNI level: 24 accumulators, two column loads and twelve
 * broadcasts per k. Compiled with target attributes and reached only
 * through be_cpu_gemm_kernel_at, after be_simd_detect() reported the
 * level. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/gemm.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

enum { MR = 12, NR = 32 };

AVX512 void be_avx512_gemm_ukernel(int64_t K, const float *a, const float *b, float *c,
                                   size_t ldc, int mt, int nc, bool acc)
{
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
    for (int t = 0; t < MR; t++)
        c0[t] = c1[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * NR), b1 = _mm512_loadu_ps(b + k * NR + 16);
#pragma GCC unroll 12
        for (int t = 0; t < MR; t++) {
            __m512 av = _mm512_set1_ps(a[k * MR + t]);
            c0[t] = _mm512_fmadd_ps(av, b0, c0[t]);
            c1[t] = _mm512_fmadd_ps(av, b1, c1[t]);
        }
    }
    __mmask16 m0 = nc >= 16 ? 0xffff : (__mmask16)((1u << nc) - 1);
    __mmask16 m1 = nc >= 32 ? 0xffff : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1) : 0;
    for (int t = 0; t < mt; t++) {
        float *cr = c + (size_t)t * ldc;
        __m512 v0 = c0[t], v1 = c1[t];
        if (acc) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v1);
        }
        _mm512_mask_storeu_ps(cr, m0, v0);
        _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
}

#endif
