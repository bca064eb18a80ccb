/* attn_prefill_avx2.c: the AVX2 (BE_SIMD_AVX2) kernels of attn_prefill.h, 8 keys
 * per vector (the body, shared with AVX-512: attn_prefill_simd.h). Compiled
 * with target attributes and reached only through be_cpu_pf_kernel_at,
 * after be_simd_detect() reported the level. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/attn_prefill.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define PF_TGT __attribute__((target("avx2,fma,f16c")))
typedef __m256 pf_vec;
#define PF_W 8
#define PF_ZERO _mm256_setzero_ps
#define PF_LOAD _mm256_loadu_ps
#define PF_STORE _mm256_storeu_ps
#define PF_SET1 _mm256_set1_ps
#define PF_ADD _mm256_add_ps
#define PF_MUL _mm256_mul_ps
#define PF_FMA _mm256_fmadd_ps
#define PF_QK be_avx2_pf_qk
#define PF_PV be_avx2_pf_pv

#include "services/runner/backend/cpu/attn_prefill_simd.h"

#endif
