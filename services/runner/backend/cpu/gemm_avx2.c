/* gemm_avx2.c: the 6-token x 16-column microkernel of gemm.h for the
 * BE_SIMD_AVX2 level: 12 accumulators, two column loads and six broadcasts
 * per k (15 of the 16 ymm registers). Compiled with target attributes and
 * reached only through be_cpu_gemm_kernel_at. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/gemm.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

enum { MR = 6, NR = 16 };

AVX2 void be_avx2_gemm_ukernel(int64_t K, const float *a, const float *b, float *c,
                               size_t ldc, int mt, int nc, bool acc)
{
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int t = 0; t < MR; t++)
        c0[t] = c1[t] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * NR), b1 = _mm256_loadu_ps(b + k * NR + 8);
#pragma GCC unroll 6
        for (int t = 0; t < MR; t++) {
            __m256 av = _mm256_broadcast_ss(a + k * MR + t);
            c0[t] = _mm256_fmadd_ps(av, b0, c0[t]);
            c1[t] = _mm256_fmadd_ps(av, b1, c1[t]);
        }
    }
    for (int t = 0; t < mt; t++) {
        float *cr = c + (size_t)t * ldc;
        if (nc == NR) {
            __m256 v0 = c0[t], v1 = c1[t];
            if (acc) {
                v0 = _mm256_add_ps(_mm256_loadu_ps(cr), v0);
                v1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), v1);
            }
            _mm256_storeu_ps(cr, v0);
            _mm256_storeu_ps(cr + 8, v1);
            continue;
        }
        float tmp[NR];
        _mm256_storeu_ps(tmp, c0[t]);
        _mm256_storeu_ps(tmp + 8, c1[t]);
        for (int j = 0; j < nc; j++)
            cr[j] = acc ? cr[j] + tmp[j] : tmp[j];
    }
}

#endif
