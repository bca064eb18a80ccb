/* repack_q8_decode.c: the one-token packed Q8_0 products (why groups go in
 * pairs on long rows: repack_q8_decode.h).
 *
 * Per block and row: the exact integer sum of w * a over the block, then
 * f = fma((float)isum, dw * da, f), as the scalar reference. |w| is taken
 * as u8 (-128 becomes 128) and a gets w's sign, so signed times signed
 * becomes the unsigned-by-signed multiply both ISAs have. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/repack_q8_decode.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE inline __attribute__((always_inline))

#define PF_AHEAD 16 /* blocks (4.3 KiB) ahead of each stream of a pair */

#define GROUP(p, g) \
    ((const be_block_q8_0x8_t *)((const uint8_t *)(p)->data + (size_t)(g) * (p)->group_bytes))

static INLINE AVX2 __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* A hint: past the matrix's end it touches nothing. */
static INLINE AVX2 void prefetch_nta(const be_block_q8_0x8_t *b)
{
    #pragma GCC unroll 8
    for (size_t off = 0; off < sizeof *b; off += 64)
        _mm_prefetch((const char *)b + off, _MM_HINT_NTA);
}

/* The float step of one block for the 8 rows of a group. */
static INLINE AVX2 __m256 block_fma(const be_block_q8_0x8_t *blk, __m256i isum, __m256 da,
                                    __m256 acc)
{
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), acc);
}

/* ---- AVX2: maddubs pairs stay within 2 * 128 * 127, each chunk widened
 * to int32 by madd before the next is added ---- */

static INLINE AVX2 __m256i chunk_avx2(__m256i q, __m256i a, __m256i ones)
{
    __m256i s = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
    return _mm256_madd_epi16(s, ones);
}

static INLINE AVX2 __m256i block_avx2(const be_block_q8_0x8_t *blk, const __m256i a[8],
                                      __m256i ones)
{
    __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
        __m256i q0 = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * k));
        __m256i q1 = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * k + 32));
        i0 = _mm256_add_epi32(i0, chunk_avx2(q0, a[k], ones));
        i1 = _mm256_add_epi32(i1, chunk_avx2(q1, a[k + 1], ones));
    }
    return _mm256_add_epi32(i0, i1);
}

static AVX2 void one_avx2(const be_block_q8_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                          const int32_t *xsum, float *y)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i a[8];
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = bcast4(x[b].qs + 4 * k);
        __m256 da = _mm256_broadcast_ss((const float *)(xsum + 2 * b + 1));
        acc = block_fma(w + b, block_avx2(w + b, a, ones), da, acc);
    }
    _mm256_storeu_ps(y, acc);
}

static AVX2 void pair_avx2(const be_block_q8_0x8_t *w0, const be_block_q8_0x8_t *w1, int64_t nb,
                           const be_block_q8_0_t *x, const int32_t *xsum, float *y0,
                           float *y1)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_nta(w0 + b + PF_AHEAD);
        prefetch_nta(w1 + b + PF_AHEAD);
        __m256i a[8];
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = bcast4(x[b].qs + 4 * k);
        __m256 da = _mm256_broadcast_ss((const float *)(xsum + 2 * b + 1));
        acc0 = block_fma(w0 + b, block_avx2(w0 + b, a, ones), da, acc0);
        acc1 = block_fma(w1 + b, block_avx2(w1 + b, a, ones), da, acc1);
    }
    _mm256_storeu_ps(y0, acc0);
    _mm256_storeu_ps(y1, acc1);
}

AVX2 void be_pack_q8_0_decode_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                   const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    int64_t nb = p->n_blocks, half = (g1 - g0) / 2;
    if (nb < BE_Q8_DECODE_PAIR_BLOCKS || half * nb < BE_Q8_DECODE_MIN_STREAM_BLOCKS)
        half = 0;
    for (int64_t g = g0; g < g0 + half; g++)
        pair_avx2(GROUP(p, g), GROUP(p, g + half), nb, x, xsum, y + (size_t)g * BE_PACK_ROWS,
                  y + (size_t)(g + half) * BE_PACK_ROWS);
    for (int64_t g = g0 + 2 * half; g < g1; g++)
        one_avx2(GROUP(p, g), nb, x, xsum, y + (size_t)g * BE_PACK_ROWS);
}

/* ---- AVX-512 VNNI: one VPDPBUSD per chunk (u8 x s8, four products per
 * int32 lane), two chains so a block does not wait on one chain ---- */

static INLINE VNNI __m256i block_vnni(const be_block_q8_0x8_t *blk, const __m256i a[8])
{
    __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
        __m256i q0 = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * k));
        __m256i q1 = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * k + 32));
        i0 = _mm256_dpbusd_epi32(i0, _mm256_abs_epi8(q0), _mm256_sign_epi8(a[k], q0));
        i1 = _mm256_dpbusd_epi32(i1, _mm256_abs_epi8(q1), _mm256_sign_epi8(a[k + 1], q1));
    }
    return _mm256_add_epi32(i0, i1);
}

/* One group, no prefetch: at 2048 columns a prefetch 4 to 32 blocks ahead
 * made this slower (0.87-0.98x, see the history of repack_avx512.c). */
static VNNI void one_vnni(const be_block_q8_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                          const int32_t *xsum, float *y)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i a[8];
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = bcast4(x[b].qs + 4 * k);
        __m256 da = _mm256_broadcast_ss((const float *)(xsum + 2 * b + 1));
        acc = block_fma(w + b, block_vnni(w + b, a), da, acc);
    }
    _mm256_storeu_ps(y, acc);
}

static VNNI void pair_vnni(const be_block_q8_0x8_t *w0, const be_block_q8_0x8_t *w1, int64_t nb,
                           const be_block_q8_0_t *x, const int32_t *xsum, float *y0,
                           float *y1)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_nta(w0 + b + PF_AHEAD);
        prefetch_nta(w1 + b + PF_AHEAD);
        __m256i a[8];
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = bcast4(x[b].qs + 4 * k);
        __m256 da = _mm256_broadcast_ss((const float *)(xsum + 2 * b + 1));
        acc0 = block_fma(w0 + b, block_vnni(w0 + b, a), da, acc0);
        acc1 = block_fma(w1 + b, block_vnni(w1 + b, a), da, acc1);
    }
    _mm256_storeu_ps(y0, acc0);
    _mm256_storeu_ps(y1, acc1);
}

VNNI void be_pack_q8_0_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                                   const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    int64_t nb = p->n_blocks, half = (g1 - g0) / 2;
    if (half * nb < BE_Q8_DECODE_MIN_STREAM_BLOCKS)
        half = 0;
    for (int64_t g = g0; g < g0 + half; g++)
        pair_vnni(GROUP(p, g), GROUP(p, g + half), nb, x, xsum, y + (size_t)g * BE_PACK_ROWS,
                  y + (size_t)(g + half) * BE_PACK_ROWS);
    for (int64_t g = g0 + 2 * half; g < g1; g++)
        one_vnni(GROUP(p, g), nb, x, xsum, y + (size_t)g * BE_PACK_ROWS);
}

#else

void be_pack_q8_0_decode_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    be_pack_gemm_q8_0_scalar(p, g0, g1, x, xsum, 1, y, (size_t)p->n_rows);
}

void be_pack_q8_0_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    be_pack_gemm_q8_0_scalar(p, g0, g1, x, xsum, 1, y, (size_t)p->n_rows);
}

#endif
