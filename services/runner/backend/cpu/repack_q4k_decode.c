/* repack_q4k_decode.c: the one-token packed Q4_K product with AVX-512 VNNI
 * (why it is shaped so: repack_q4k_decode.h).
 *
 * A 64-byte load of a sub-block pair (repack.h) holds chunks c and c + 1:
 * int32 lanes 0..7 are the 8 rows' chunk c, lanes 8..15 their chunk c + 1.
 * Its low nibbles are sub-block 2p, its high nibbles sub-block 2p + 1, so
 * one load feeds two VPDPBUSD once the activation's matching words sit in
 * the same halves: one VPERMD of the pair's 64 activation bytes each,
 * shared by the groups of a pass. Each row's sum then lies in two lanes
 * (i and 8 + i); the halves of the two sub-blocks are regrouped so one
 * int32 multiply applies a pair's 16 scales, and folded once per
 * super-block. Integer sums are exact, and the float steps are the scalar
 * reference's (be_pack_gemm_q4_k_scalar), so the results are its bits. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/repack_q4k_decode.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE inline __attribute__((always_inline))

#define PF_AHEAD 4 /* super-blocks (4.6 KiB) ahead of each stream */

#define GROUP(p, g) \
    ((const be_block_q4_kx8_t *)((const uint8_t *)(p)->data + (size_t)(g) * (p)->group_bytes))

/* int32 lanes 0..7 = lo, lanes 8..15 = hi: a VPERMD index. */
static INLINE VNNI __m512i idx2(int lo, int hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(lo)),
                              _mm256_set1_epi32(hi), 1);
}

/* A hint: past the matrix's end it touches nothing. */
static INLINE VNNI void prefetch_nta(const be_block_q4_kx8_t *b)
{
    #pragma GCC unroll 32
    for (size_t off = 0; off < sizeof *b; off += 64)
        _mm_prefetch((const char *)b + off, _MM_HINT_NTA);
}

/* Lanes i and 8 + i summed: row i's int32 in an 8-lane register. */
static INLINE VNNI __m256i fold(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* Super-block b of ng (1 or 2, a constant after inlining) groups w[k]
 * against activation block a: acc[k] gains the 8 rows' float steps. */
static INLINE VNNI void block(const be_block_q4_kx8_t *const *w, int ng, int64_t b,
                              const be_block_q8_k_t *a, __m256 *acc)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i isum[2];
    for (int k = 0; k < ng; k++)
        isum[k] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        /* the pair's activation: sub-block 2p in words 0..7, 2p + 1 in
         * 8..15; ae[c] / ao[c] meet chunk pair c of the low / high nibbles */
        __m512i av = _mm512_loadu_si512((const void *)(a->qs + 64 * p));
        __m512i ae[4], ao[4];
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            ae[c] = _mm512_permutexvar_epi32(idx2(2 * c, 2 * c + 1), av);
            ao[c] = _mm512_permutexvar_epi32(idx2(8 + 2 * c, 9 + 2 * c), av);
        }
        #pragma GCC unroll 2
        for (int k = 0; k < ng; k++) {
            const be_block_q4_kx8_t *blk = w[k] + b;
            const uint8_t *qp = blk->qs + 256 * p;
            __m512i se = _mm512_setzero_si512(), so = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m512i v = _mm512_loadu_si512((const void *)(qp + 64 * c));
                se = _mm512_dpbusd_epi32(se, _mm512_and_si512(v, m4), ae[c]);
                so = _mm512_dpbusd_epi32(so, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                         ao[c]);
            }
            /* lanes 0..7: sub-block 2p's two halves, 8..15: 2p + 1's, so
             * one multiply takes the pair's scales (16 bytes, row-major) */
            __m512i t = _mm512_add_epi32(_mm512_shuffle_i64x2(se, so, 0x44),
                                         _mm512_shuffle_i64x2(se, so, 0xEE));
            __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk->scales + 16 * p)));
            isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(t, sc));
        }
    }
    /* mins: int32 lanes 0, 1, 4, 5 of h are the activation's 32-element
     * sums of sub-blocks (0,1), (2,3), (4,5), (6,7) as int16 pairs; the
     * mins of pairs 0 and 1 (2 and 3) fill one register's halves */
    __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
    __m512i h = _mm512_castsi256_si512(_mm256_hadd_epi16(bs, bs));
    __m512i h01 = _mm512_permutexvar_epi32(idx2(0, 1), h);
    __m512i h23 = _mm512_permutexvar_epi32(idx2(4, 5), h);
    __m256 da = _mm256_set1_ps(a->d);
    #pragma GCC unroll 2
    for (int k = 0; k < ng; k++) {
        const be_block_q4_kx8_t *blk = w[k] + b;
        __m512i mn01 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)blk->mins));
        __m512i mn23 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk->mins + 32)));
        __m512i m = _mm512_dpwssd_epi32(_mm512_madd_epi16(mn01, h01), mn23, h23);
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->dmin));
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(isum[k])), _mm256_mul_ps(dw, da), acc[k]);
        acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(fold(m)), _mm256_mul_ps(dmw, da), acc[k]);
    }
}

static VNNI void one_vnni(const be_block_q4_kx8_t *w0, int64_t nb, const be_block_q8_k_t *x,
                          float *y)
{
    const be_block_q4_kx8_t *w[1] = {w0};
    __m256 acc[1] = {_mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        prefetch_nta(w0 + b + PF_AHEAD);
        block(w, 1, b, x + b, acc);
    }
    _mm256_storeu_ps(y, acc[0]);
}

static VNNI void pair_vnni(const be_block_q4_kx8_t *w0, const be_block_q4_kx8_t *w1, int64_t nb,
                           const be_block_q8_k_t *x, float *y0, float *y1)
{
    const be_block_q4_kx8_t *w[2] = {w0, w1};
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        prefetch_nta(w0 + b + PF_AHEAD);
        prefetch_nta(w1 + b + PF_AHEAD);
        block(w, 2, b, x + b, acc);
    }
    _mm256_storeu_ps(y0, acc[0]);
    _mm256_storeu_ps(y1, acc[1]);
}

VNNI void be_pack_q4_k_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                                   const be_block_q8_k_t *x, float *y)
{
    int64_t nb = p->n_blocks, half = (g1 - g0) / 2;
    if (half * nb < BE_Q4K_DECODE_MIN_STREAM_BLOCKS)
        half = 0;
    for (int64_t g = g0; g < g0 + half; g++)
        pair_vnni(GROUP(p, g), GROUP(p, g + half), nb, x, y + (size_t)g * BE_PACK_ROWS,
                  y + (size_t)(g + half) * BE_PACK_ROWS);
    for (int64_t g = g0 + 2 * half; g < g1; g++)
        one_vnni(GROUP(p, g), nb, x, y + (size_t)g * BE_PACK_ROWS);
}

#else

void be_pack_q4_k_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_k_t *x, float *y)
{
    be_pack_gemm_q4_k_scalar(p, g0, g1, x, NULL, 1, y, (size_t)p->n_rows);
}

#endif
