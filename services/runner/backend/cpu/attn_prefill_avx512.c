/* attn_prefill_avx512.c: the AVX-512 (BE_SIMD_AVX512_VNNI) kernels of
 * attn_prefill.h, 16 keys per vector (the body, shared with AVX2:
 * attn_prefill_simd.h). Compiled with target attributes and reached only
 * through be_cpu_pf_kernel_at, after be_simd_detect() reported the level. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/attn_prefill.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define PF_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
typedef __m512 pf_vec;
#define PF_W 16
#define PF_ZERO _mm512_setzero_ps
#define PF_LOAD _mm512_loadu_ps
#define PF_STORE _mm512_storeu_ps
#define PF_SET1 _mm512_set1_ps
#define PF_ADD _mm512_add_ps
#define PF_MUL _mm512_mul_ps
#define PF_FMA _mm512_fmadd_ps
#define PF_QK be_avx512_pf_qk
#define PF_PV be_avx512_pf_pv

#include "services/runner/backend/cpu/attn_prefill_simd.h"

#endif
