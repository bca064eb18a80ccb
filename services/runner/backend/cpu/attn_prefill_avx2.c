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

/* Prefetches rows [c, c + n) of a cache (row = hd F16 at r + c * kv_row),
 * each line once: the keys and values of one kv head are 2 * hd bytes every
 * kv_row elements, a stride the hardware prefetchers do not follow far
 * enough (bench-bench --depth: the conversions' first loads waited on
 * DRAM). */
static inline PF_TGT void prefetch_rows(const uint16_t *r, size_t kv_row, int c, int n,
                                        int hd)
{
    for (int i = c; i < c + n; i++)
        for (int d = 0; d < hd; d += 32)
            _mm_prefetch((const char *)(r + (size_t)i * kv_row + d), _MM_HINT_T0);
}

/* keys (attn_prefill.h; hd a multiple of 8, as the vector levels take) in
 * blocks of 8 keys x 8 dims: 8 rows converted,
 * an 8 x 8 transpose in registers, 8 rows stored (the AVX-512 level uses
 * it too: its tiles are as wide as the kt rows, not the blocks). Each block
 * first prefetches the block PF_AHEAD keys on. */
PF_TGT void be_avx2_pf_keys(int nk, int hd, const uint16_t *k, size_t kv_row, float *kt,
                            size_t ldk, int ahead)
{
    int c0 = 0;
    for (; c0 + 8 <= nk; c0 += 8) {
        int pc = c0 + BE_PF_AHEAD;
        if (pc < nk + ahead)
            prefetch_rows(k, kv_row, pc, CR_MIN(8, nk + ahead - pc), hd);
        for (int d0 = 0; d0 + 8 <= hd; d0 += 8) {
            __m256 r[8], t[8], u[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_cvtph_ps(
                    _mm_loadu_si128((const __m128i *)(k + (size_t)(c0 + i) * kv_row + d0)));
#pragma GCC unroll 4
            for (int i = 0; i < 8; i += 2) {
                t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
            }
#pragma GCC unroll 2
            for (int i = 0; i < 8; i += 4) {
                u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
                u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
                u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
            }
            /* u[j] holds dims j (low half) and j + 4 (high) of keys 0-3,
             * u[j + 4] the same of keys 4-7 */
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                _mm256_storeu_ps(kt + (size_t)(d0 + j) * ldk + c0,
                                 _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
                _mm256_storeu_ps(kt + (size_t)(d0 + j + 4) * ldk + c0,
                                 _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
            }
        }
    }
    for (int c = c0; c < nk; c++)
        for (int d = 0; d < hd; d++)
            kt[(size_t)d * ldk + c] = _cvtsh_ss(k[(size_t)c * kv_row + d]);
}

/* vals (attn_prefill.h), 8 dims per conversion, each row first prefetching
 * the row PF_AHEAD keys on */
PF_TGT void be_avx2_pf_vals(int nk, int hd, const uint16_t *v, size_t kv_row, float *vt,
                            int ahead)
{
    for (int c = 0; c < nk; c++) {
        if (c + BE_PF_AHEAD < nk + ahead)
            prefetch_rows(v, kv_row, c + BE_PF_AHEAD, 1, hd);
        const uint16_t *src = v + (size_t)c * kv_row;
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(vt + (size_t)c * hd + d,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + d))));
    }
}

#endif
