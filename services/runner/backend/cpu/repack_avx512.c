/* repack_avx512.c: the packed products (repack.h) with AVX-512 VNNI.
 *
 * Same tiles and float steps as repack_avx2.c; the integer part of a chunk
 * is one VPDPBUSD (u8 x s8, four products summed into each int32 lane)
 * instead of maddubs + add + madd, on 256-bit registers (AVX512VL), so no
 * int16 intermediate can saturate. Integer sums are exact either way, so
 * the results are the scalar reference's bits.
 *
 * Compiled with target attributes and reached only after be_simd_detect()
 * reported BE_SIMD_AVX512_VNNI. test_repack runs these wherever the CPU
 * has them (it loops over every level up to the detected one).
 *
 * Measured with bench-kernels --packed on an AMD EPYC with AVX-512 (thread
 * CPU time, VNNI / AVX2 in one process, 2048 columns): Q6_K decode runs
 * 1.1-1.5x the AVX2 kernel; Q4_K decode on these tiles only 0.85-0.95x
 * (its AVX2 tile keeps more independent work per block), while 64-token
 * prompts run 1.05-1.4x with VNNI. Q4_0 with two or more tokens runs
 * q4_0_gemm_avx512.c's 16-row tiles. Q4_0, Q8_0 and Q4_K decode have
 * their own one-token kernels (repack_q4_decode.c, repack_q8_decode.c,
 * repack_q4k_decode.c); Q6_K decode takes its groups in split pairs here
 * (q6_k_pair: at 5632 columns 97-101% of a plain read where one group at
 * a time read 90-97%; at 2048 columns both ~101%). The Q8_0
 * tiles issue no prefetch (as their AVX2 tiles): with it Q8_0 decode from
 * DRAM ran 0.8x the AVX2 kernel, without it 1.0x. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/repack_q4_decode.h"
#include "services/runner/backend/cpu/repack_q4k_decode.h"
#include "services/runner/backend/cpu/repack_q8_decode.h"

#define TILE_TOK 16

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* As repack_avx2.c: decode streams each weight once from DRAM, so the
 * block PF_BLOCKS ahead is requested while this one is computed (without
 * it the Q4_K kernel stalled on its weight loads in a MoE decode, where
 * the AVX2 kernels with the hint did not). Past the matrix's end it is a
 * hint that touches nothing. */
#define PF_BLOCKS 2

static inline __attribute__((always_inline)) VNNI void prefetch_block(const void *p,
                                                                      size_t bytes)
{
    #pragma GCC unroll 32
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)p + off, _MM_HINT_T0);
}

static inline VNNI __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

static VNNI void q8_0_tile(const be_block_q8_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                           const int32_t *xsum, int tn, float *y, size_t y_stride)
{
    __m256 acc[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const be_block_q8_0x8_t *blk = w + b;
        __m256i q[8], aq[8];
        #pragma GCC unroll 16
        for (int k = 0; k < 8; k++) {
            q[k] = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * k));
            aq[k] = _mm256_abs_epi8(q[k]); /* -128 becomes 128 as u8 */
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        for (int t = 0; t < tn; t++) {
            const be_block_q8_0_t *a = x + (size_t)t * (size_t)nb + b;
            __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
            #pragma GCC unroll 16
            for (int k = 0; k < 8; k += 2) {
                i0 = _mm256_dpbusd_epi32(i0, aq[k],
                                         _mm256_sign_epi8(bcast4(a->qs + 4 * k), q[k]));
                i1 = _mm256_dpbusd_epi32(i1, aq[k + 1],
                                         _mm256_sign_epi8(bcast4(a->qs + 4 * k + 4), q[k + 1]));
            }
            __m256i i32 = _mm256_add_epi32(i0, i1);
            const float *da = (const float *)(xsum + 2 * ((size_t)t * (size_t)nb + b) + 1);
            __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(da));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

static VNNI void q4_k_tile(const be_block_q4_kx8_t *w, int64_t nb, const be_block_q8_k_t *x,
                           int tn, float *y, size_t y_stride)
{
    __m256 acc[TILE_TOK];
    __m256i isum[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i ix0 = _mm256_set1_epi32(0), ix1 = _mm256_set1_epi32(1);
    const __m256i ix4 = _mm256_set1_epi32(4), ix5 = _mm256_set1_epi32(5);
    for (int64_t b = 0; b < nb; b++) {
        const be_block_q4_kx8_t *blk = w + b;
        prefetch_block(blk + PF_BLOCKS, sizeof *blk);
        for (int t = 0; t < tn; t++)
            isum[t] = _mm256_setzero_si256();
        for (int sb = 0; sb < 8; sb++) {
            int64_t s8;
            memcpy(&s8, blk->scales + 8 * sb, sizeof s8);
            __m256i sc = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(s8));
            const uint8_t *qp = blk->qs + 256 * (sb / 2);
            __m256i q[8];
            #pragma GCC unroll 16
            for (int c = 0; c < 8; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(qp + 32 * c));
                q[c] = _mm256_and_si256(sb % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
            }
            for (int t = 0; t < tn; t++) {
                const int8_t *aq = x[(size_t)t * (size_t)nb + b].qs + 32 * sb;
                /* two chains of four: one chain of eight VPDPBUSD waited
                 * on its own latency in decode (0.88x the AVX2 kernel) */
                __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
                #pragma GCC unroll 16
                for (int c = 0; c < 8; c += 2) {
                    s0 = _mm256_dpbusd_epi32(s0, q[c], bcast4(aq + 4 * c));
                    s1 = _mm256_dpbusd_epi32(s1, q[c + 1], bcast4(aq + 4 * c + 4));
                }
                __m256i s = _mm256_add_epi32(s0, s1);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s, sc));
            }
        }
        __m256i mn0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)blk->mins));
        __m256i mn1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk->mins + 16)));
        __m256i mn2 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk->mins + 32)));
        __m256i mn3 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk->mins + 48)));
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->dmin));
        for (int t = 0; t < tn; t++) {
            const be_block_q8_k_t *a = x + (size_t)t * (size_t)nb + b;
            __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            __m256i h = _mm256_hadd_epi16(bs, bs);
            __m256i m32 = _mm256_madd_epi16(mn0, _mm256_permutevar8x32_epi32(h, ix0));
            m32 = _mm256_dpwssd_epi32(m32, mn1, _mm256_permutevar8x32_epi32(h, ix1));
            m32 = _mm256_dpwssd_epi32(m32, mn2, _mm256_permutevar8x32_epi32(h, ix4));
            m32 = _mm256_dpwssd_epi32(m32, mn3, _mm256_permutevar8x32_epi32(h, ix5));
            __m256 da = _mm256_set1_ps(a->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, da), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m32), _mm256_mul_ps(dmw, da), acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* Row i's four chunks of a Q6_K quad (repack.h) as unsigned 6-bit q in
 * lane i's bytes, as repack_avx2.c's q6_k_quad: three chunks are their
 * register's low six bits, the fourth gathers the registers' top bits. */
static inline __attribute__((always_inline)) VNNI void q6_k_quad(const uint8_t *qs,
                                                                 __m256i q[4])
{
    const __m256i m3f = _mm256_set1_epi8(0x3f), m03 = _mm256_set1_epi8(0x03);
    const __m256i m0c = _mm256_set1_epi8(0x0c), m30 = _mm256_set1_epi8(0x30);
    __m256i r0 = _mm256_loadu_si256((const __m256i *)qs);
    __m256i r1 = _mm256_loadu_si256((const __m256i *)(qs + 32));
    __m256i r2 = _mm256_loadu_si256((const __m256i *)(qs + 64));
    q[0] = _mm256_and_si256(r0, m3f);
    q[1] = _mm256_and_si256(r1, m3f);
    q[2] = _mm256_and_si256(r2, m3f);
    /* one ternary-logic op per pair of terms: (a & m) | b */
    __m256i t = _mm256_and_si256(_mm256_srli_epi16(r0, 6), m03);
    t = _mm256_ternarylogic_epi32(_mm256_srli_epi16(r1, 4), m0c, t, 0xEA);
    q[3] = _mm256_ternarylogic_epi32(_mm256_srli_epi16(r2, 2), m30, t, 0xEA);
}

/* One Q6_K group against tokens x[t * nb ..], t < tn. Per sub-block (a
 * quad of 16 elements per row) four VPDPBUSD give each row's exact sum of
 * q * a (q unsigned 0..63, so no int16 step can saturate); one int32
 * multiply by the row's scale adds it to the super-block's sum. The
 * offset of 32 is taken once per super-block from the scales and the
 * activation's 16-element sums with VPDPWSSD, as in repack_avx2.c. */
static inline __attribute__((always_inline)) VNNI void
q6_k_tile_n(const be_block_q6_kx8_t *w, int64_t nb, const be_block_q8_k_t *x, int tn,
            float *y, size_t y_stride)
{
    __m256 acc[TILE_TOK];
    __m256i isum[TILE_TOK], msum[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const be_block_q6_kx8_t *blk = w + b;
        prefetch_block(blk + PF_BLOCKS, sizeof *blk);
        for (int t = 0; t < tn; t++) {
            isum[t] = _mm256_setzero_si256();
            msum[t] = _mm256_setzero_si256();
        }
        #pragma GCC unroll 2
        for (int pr = 0; pr < 8; pr++) {
            /* lane i: row i's scales of sub-blocks 2 pr, 2 pr + 1 as an
             * int16 pair; each alone as int32 for the products */
            __m256i sp = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(blk->scales + 16 * pr)));
            __m256i sc0 = _mm256_srai_epi32(_mm256_slli_epi32(sp, 16), 16);
            __m256i sc1 = _mm256_srai_epi32(sp, 16);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i q[4];
                q6_k_quad(blk->qs + 96 * (2 * pr + h), q);
                for (int t = 0; t < tn; t++) {
                    const int8_t *aq = x[(size_t)t * (size_t)nb + b].qs + 16 * (2 * pr + h);
                    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q[0], bcast4(aq));
                    s = _mm256_dpbusd_epi32(s, q[1], bcast4(aq + 4));
                    s = _mm256_dpbusd_epi32(s, q[2], bcast4(aq + 8));
                    s = _mm256_dpbusd_epi32(s, q[3], bcast4(aq + 12));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s, h ? sc1 : sc0));
                }
            }
            for (int t = 0; t < tn; t++) {
                int32_t bp;
                memcpy(&bp, x[(size_t)t * (size_t)nb + b].bsums + 2 * pr, sizeof bp);
                msum[t] = _mm256_dpwssd_epi32(msum[t], sp, _mm256_set1_epi32(bp));
            }
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        for (int t = 0; t < tn; t++) {
            __m256i tot = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(msum[t], 5));
            __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(x[(size_t)t * (size_t)nb + b].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), sc, acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* One token (decode: accumulators in registers) and several, from the
 * same code. */
static VNNI void q6_k_tile(const be_block_q6_kx8_t *w, int64_t nb, const be_block_q8_k_t *x,
                           int tn, float *y, size_t y_stride)
{
    if (tn == 1)
        q6_k_tile_n(w, nb, x, 1, y, y_stride);
    else
        q6_k_tile_n(w, nb, x, tn, y, y_stride);
}

#define GROUP(T, p, g) ((const T *)((const uint8_t *)(p)->data + (size_t)(g) * (p)->group_bytes))

/* ---- Q6_K decode: split pairs ------------------------------------------ */

/* 32 bytes of a and 32 of b as one zmm (a low, b high). */
static inline __attribute__((always_inline)) VNNI __m512i join256(const void *a, const void *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* 16 bytes of a and 16 of b as one ymm (a low, b high). */
static inline __attribute__((always_inline)) VNNI __m256i join128(const void *a, const void *b)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}

/* q6_k_quad for two groups at once: lanes 0..7 rows of qa's quad, lanes
 * 8..15 rows of qb's, the same operations on twice the width. */
static inline __attribute__((always_inline)) VNNI void q6_k_quad2(const uint8_t *qa,
                                                                  const uint8_t *qb,
                                                                  __m512i q[4])
{
    const __m512i m3f = _mm512_set1_epi8(0x3f), m03 = _mm512_set1_epi8(0x03);
    const __m512i m0c = _mm512_set1_epi8(0x0c), m30 = _mm512_set1_epi8(0x30);
    __m512i r0 = join256(qa, qb), r1 = join256(qa + 32, qb + 32);
    __m512i r2 = join256(qa + 64, qb + 64);
    q[0] = _mm512_and_si512(r0, m3f);
    q[1] = _mm512_and_si512(r1, m3f);
    q[2] = _mm512_and_si512(r2, m3f);
    __m512i t = _mm512_and_si512(_mm512_srli_epi16(r0, 6), m03);
    t = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r1, 4), m0c, t, 0xEA);
    q[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r2, 2), m30, t, 0xEA);
}

/* Groups a and b (16 rows: a's 8 in lanes 0..7, b's in 8..15) against one
 * activation row, each activation word broadcast once for both: the
 * one-token q6_k_tile_n on twice the width, so every row takes the same
 * integer sums and float steps (its bits). Each stream is prefetched
 * (NTA) PF_Q6K super-blocks ahead. */
#define PF_Q6K 3 /* super-blocks (5 KiB) */

static VNNI void q6_k_pair(const be_block_q6_kx8_t *a, const be_block_q6_kx8_t *b, int64_t nb,
                           const be_block_q8_k_t *x, float *ya, float *yb)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < nb; k++) {
        const be_block_q6_kx8_t *ba = a + k, *bb = b + k;
        for (size_t off = 0; off < sizeof *ba; off += 64) {
            _mm_prefetch((const char *)(ba + PF_Q6K) + off, _MM_HINT_NTA);
            _mm_prefetch((const char *)(bb + PF_Q6K) + off, _MM_HINT_NTA);
        }
        __m512i isum = _mm512_setzero_si512(), msum = _mm512_setzero_si512();
        #pragma GCC unroll 2
        for (int pr = 0; pr < 8; pr++) {
            __m512i sp = _mm512_cvtepi8_epi16(join128(ba->scales + 16 * pr,
                                                      bb->scales + 16 * pr));
            __m512i sc0 = _mm512_srai_epi32(_mm512_slli_epi32(sp, 16), 16);
            __m512i sc1 = _mm512_srai_epi32(sp, 16);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m512i q[4];
                q6_k_quad2(ba->qs + 96 * (2 * pr + h), bb->qs + 96 * (2 * pr + h), q);
                const int8_t *aq = x[k].qs + 16 * (2 * pr + h);
                int32_t w4[4];
                memcpy(w4, aq, sizeof w4);
                __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0],
                                                _mm512_set1_epi32(w4[0]));
                s = _mm512_dpbusd_epi32(s, q[1], _mm512_set1_epi32(w4[1]));
                s = _mm512_dpbusd_epi32(s, q[2], _mm512_set1_epi32(w4[2]));
                s = _mm512_dpbusd_epi32(s, q[3], _mm512_set1_epi32(w4[3]));
                isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(s, h ? sc1 : sc0));
            }
            int32_t bp;
            memcpy(&bp, x[k].bsums + 2 * pr, sizeof bp);
            msum = _mm512_dpwssd_epi32(msum, sp, _mm512_set1_epi32(bp));
        }
        __m512 dw = _mm512_cvtph_ps(join128(ba->d, bb->d));
        __m512i tot = _mm512_sub_epi32(isum, _mm512_slli_epi32(msum, 5));
        __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(x[k].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), sc, acc);
    }
    _mm256_storeu_ps(ya, _mm512_castps512_ps256(acc));
    _mm256_storeu_ps(yb, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* One token over groups g0..g1: g with g + half (two weight streams
 * unbroken through the range's halves, as the Q4_0, Q8_0 and Q4_K decode
 * kernels), an odd last group alone; ranges whose streams would be under
 * BE_Q6K_DECODE_MIN_STREAM_BLOCKS one group at a time. */
static VNNI void q6_k_decode(const be_packed_t *p, int64_t g0, int64_t g1,
                             const be_block_q8_k_t *x, float *y)
{
    int64_t nb = p->n_blocks, half = (g1 - g0) / 2;
    if (half * nb < BE_Q6K_DECODE_MIN_STREAM_BLOCKS)
        half = 0;
    for (int64_t g = g0; g < g0 + half; g++)
        q6_k_pair(GROUP(be_block_q6_kx8_t, p, g), GROUP(be_block_q6_kx8_t, p, g + half), nb, x,
                  y + (size_t)g * BE_PACK_ROWS, y + (size_t)(g + half) * BE_PACK_ROWS);
    for (int64_t g = g0 + 2 * half; g < g1; g++)
        q6_k_tile(GROUP(be_block_q6_kx8_t, p, g), nb, x, 1, y + (size_t)g * BE_PACK_ROWS,
                  (size_t)p->n_rows);
}

VNNI void be_pack_gemm_q4_0_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *xv,
                                 const int32_t *xsum, int n, float *y, size_t y_stride)
{
    if (n == 1) { /* decode: its own kernel (repack_q4_decode.c) */
        be_pack_q4_0_decode_vnni(p, g0, g1, xv, xsum, y);
        return;
    }
    /* two or more tokens: 16-row tiles in 512-bit registers */
    be_pack_gemm_q4_0_avx512(p, g0, g1, xv, xsum, n, y, y_stride);
}

VNNI void be_pack_gemm_q8_0_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *xv,
                                 const int32_t *xsum, int n, float *y, size_t y_stride)
{
    const be_block_q8_0_t *x = xv;
    int64_t nb = p->n_blocks;
    if (n == 1) {
        be_pack_q8_0_decode_vnni(p, g0, g1, x, xsum, y);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q8_0_tile(GROUP(be_block_q8_0x8_t, p, g), nb, x + (size_t)t0 * (size_t)nb,
                      xsum + 2 * (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

VNNI void be_pack_gemm_q4_k_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *xv,
                                 const int32_t *xsum, int n, float *y, size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_k_t *x = xv;
    int64_t nb = p->n_blocks;
    if (n == 1) {
        be_pack_q4_k_decode_vnni(p, g0, g1, x, y);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q4_k_tile(GROUP(be_block_q4_kx8_t, p, g), nb, x + (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

VNNI void be_pack_gemm_q6_k_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *xv,
                                 const int32_t *xsum, int n, float *y, size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_k_t *x = xv;
    int64_t nb = p->n_blocks;
    if (n == 1) {
        q6_k_decode(p, g0, g1, x, y);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q6_k_tile(GROUP(be_block_q6_kx8_t, p, g), nb, x + (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

#else

void be_pack_gemm_q4_0_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                            const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q4_0_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

void be_pack_gemm_q8_0_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                            const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q8_0_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

void be_pack_gemm_q4_k_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                            const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q4_k_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

void be_pack_gemm_q6_k_vnni(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                            const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q6_k_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

#endif
