/* repack_avx2.c: AVX2 + FMA + F16C products of packed groups of 8 rows
 * (repack.h) with Q8_0 activations.
 *
 * A tile is one group of 8 rows against up to TILE_TOK tokens. For each
 * block the group's weights are loaded (and for Q4_0 unpacked) once into
 * 8 registers, chunk k holding four elements of each of the 8 rows; per
 * token the activation's matching four bytes are broadcast and one
 * multiply-add per chunk leaves each row's sum in its own int32 lane. One
 * conversion and one fma per block then update 8 rows' floats at once, and
 * the 8 results of a token are one contiguous store. Tiles go token-tile
 * outer, group inner, so a token tile's activations stay in L1 while the
 * groups pass by.
 *
 * Exact integer block sums and the same float steps as the scalar reference
 * (repack.c), so the results are its bits. On other architectures these are
 * scalar stubs that are never selected. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/repack_q4_decode.h"
#include "services/runner/backend/cpu/repack_q8_decode.h"

#define TILE_TOK 16

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline AVX2 __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* Decode streams each weight once from DRAM: the block PF_BLOCKS ahead is
 * requested while this one is computed (the hardware prefetcher alone left
 * the Q6_K kernel waiting: 1.3x in a 32768x2048 matrix-vector product).
 * Past the matrix's end it is a hint that touches nothing. */
#define PF_BLOCKS 2

static inline __attribute__((always_inline)) AVX2 void prefetch_block(const void *p,
                                                                      size_t bytes)
{
    #pragma GCC unroll 32
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)p + off, _MM_HINT_T0);
}

/* One Q4_0 group (blocks w[0..nb)) against tokens x[t * nb ..], t < tn. */
static inline __attribute__((always_inline)) AVX2 void
q4_0_tile_n(const be_block_q4_0x8_t *w, int64_t nb,
                           const be_block_q8_0_t *x, const int32_t *xsum, int tn,
                           float *y, size_t y_stride)
{
    __m256 acc[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        const be_block_q4_0x8_t *blk = w + b;
        __m256i q[8];
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            __m256i pk = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * j));
            q[j] = _mm256_and_si256(pk, m4);
            q[j + 4] = _mm256_and_si256(_mm256_srli_epi16(pk, 4), m4);
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        for (int t = 0; t < tn; t++) {
            const be_block_q8_0_t *a = x + (size_t)t * (size_t)nb + b;
            /* weights 0..15 (unsigned side) times activations: pair sums
             * stay within 2*15*127, eight of them within 30480 (int16) */
            __m256i s = _mm256_maddubs_epi16(q[0], bcast4(a->qs));
            #pragma GCC unroll 16
            for (int k = 1; k < 8; k++)
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[k], bcast4(a->qs + 4 * k)));
            __m256i i32 = _mm256_madd_epi16(s, ones);
            /* the offset of 8: sum((q - 8) * a) = sum(q * a) - 8 * sum(a) */
            const int32_t *m = xsum + 2 * ((size_t)t * (size_t)nb + b);
            i32 = _mm256_sub_epi32(i32, _mm256_slli_epi32(_mm256_set1_epi32(m[0]), 3));
            __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss((const float *)(m + 1)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* One Q8_0 group against tokens x[t * nb ..], t < tn. Signed times signed:
 * maddubs takes |w| and the activation with w's sign (pair sums within
 * 2*128*127), each chunk widened to int32 before the next is added. */
static inline __attribute__((always_inline)) AVX2 void
q8_0_tile_n(const be_block_q8_0x8_t *w, int64_t nb,
                           const be_block_q8_0_t *x, const int32_t *xsum, int tn, float *y,
                           size_t y_stride)
{
    __m256 acc[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        const be_block_q8_0x8_t *blk = w + b;
        __m256i q[8], aq[8];
        #pragma GCC unroll 16
        for (int k = 0; k < 8; k++) {
            q[k] = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * k));
            aq[k] = _mm256_sign_epi8(q[k], q[k]);
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        for (int t = 0; t < tn; t++) {
            const be_block_q8_0_t *a = x + (size_t)t * (size_t)nb + b;
            __m256i i32 = _mm256_setzero_si256();
            #pragma GCC unroll 16
            for (int k = 0; k < 8; k++) {
                __m256i sa = _mm256_sign_epi8(bcast4(a->qs + 4 * k), q[k]);
                i32 = _mm256_add_epi32(i32, _mm256_madd_epi16(_mm256_maddubs_epi16(aq[k], sa),
                                                              ones));
            }
            const float *da = (const float *)(xsum + 2 * ((size_t)t * (size_t)nb + b) + 1);
            __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(da));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* One Q4_K group against tokens x[t * nb ..], t < tn. Per sub-block of 32
 * the int16 chunk sums meet the 8 rows' scales in one multiply-add (each
 * scale sits in both int16 halves of its row's lane); the mins meet the
 * activation's 32-element sums (pairs of bsums) the same way, a sub-block
 * pair per multiply-add. */
static inline __attribute__((always_inline)) AVX2 void
q4_k_tile_n(const be_block_q4_kx8_t *w, int64_t nb, const be_block_q8_k_t *x,
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
        for (int sb = 0; sb < 8; sb++) {
            int64_t s8;
            memcpy(&s8, blk->scales + 8 * sb, sizeof s8);
            __m256i sc = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(s8));
            sc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
            const uint8_t *qp = blk->qs + 256 * (sb / 2);
            __m256i q[8];
            #pragma GCC unroll 16
            for (int c = 0; c < 8; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(qp + 32 * c));
                q[c] = _mm256_and_si256(sb % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
            }
            for (int t = 0; t < tn; t++) {
                const int8_t *aq = x[(size_t)t * (size_t)nb + b].qs + 32 * sb;
                __m256i s = _mm256_maddubs_epi16(q[0], bcast4(aq));
                #pragma GCC unroll 16
                for (int c = 1; c < 8; c++)
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[c], bcast4(aq + 4 * c)));
                __m256i v = _mm256_madd_epi16(s, sc);
                isum[t] = sb == 0 ? v : _mm256_add_epi32(isum[t], v);
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
            /* int32 lanes 0, 1, 4, 5: sub-block sums (B0,B1), (B2,B3),
             * (B4,B5), (B6,B7) as int16 pairs */
            __m256i h = _mm256_hadd_epi16(bs, bs);
            __m256i m32 = _mm256_madd_epi16(mn0, _mm256_permutevar8x32_epi32(h, ix0));
            m32 = _mm256_add_epi32(m32, _mm256_madd_epi16(mn1, _mm256_permutevar8x32_epi32(h, ix1)));
            m32 = _mm256_add_epi32(m32, _mm256_madd_epi16(mn2, _mm256_permutevar8x32_epi32(h, ix4)));
            m32 = _mm256_add_epi32(m32, _mm256_madd_epi16(mn3, _mm256_permutevar8x32_epi32(h, ix5)));
            __m256 da = _mm256_set1_ps(a->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, da), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m32), _mm256_mul_ps(dmw, da), acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* The tiles for one token (decode: accumulators in registers) and for
 * several, from the same code. */
static AVX2 void q4_0_tile(const be_block_q4_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                           const int32_t *xsum, int tn, float *y, size_t y_stride)
{
    if (tn == 1)
        q4_0_tile_n(w, nb, x, xsum, 1, y, y_stride);
    else
        q4_0_tile_n(w, nb, x, xsum, tn, y, y_stride);
}

static AVX2 void q8_0_tile(const be_block_q8_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                           const int32_t *xsum, int tn, float *y, size_t y_stride)
{
    if (tn == 1)
        q8_0_tile_n(w, nb, x, xsum, 1, y, y_stride);
    else
        q8_0_tile_n(w, nb, x, xsum, tn, y, y_stride);
}

static AVX2 void q4_k_tile(const be_block_q4_kx8_t *w, int64_t nb, const be_block_q8_k_t *x,
                           int tn, float *y, size_t y_stride)
{
    if (tn == 1)
        q4_k_tile_n(w, nb, x, 1, y, y_stride);
    else
        q4_k_tile_n(w, nb, x, tn, y, y_stride);
}

AVX2 void be_pack_gemm_q4_k_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                 const void *xv, const int32_t *xsum, int n, float *y,
                                 size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_k_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q4_k_tile((const be_block_q4_kx8_t *)((const uint8_t *)p->data +
                                                  (size_t)g * p->group_bytes),
                      nb, x + (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

/* Row i's four chunks of a Q6_K quad (repack.h), unsigned 6-bit q in
 * lane i's bytes: three are their register's low six bits, the fourth is
 * gathered from the three registers' top two bits. The 16-bit shifts carry
 * bits across bytes, which the masks clear. */
static inline __attribute__((always_inline)) AVX2 void q6_k_quad(const uint8_t *qs,
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
    q[3] = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(r0, 6), m03),
                        _mm256_and_si256(_mm256_srli_epi16(r1, 4), m0c)),
        _mm256_and_si256(_mm256_srli_epi16(r2, 2), m30));
}

/* Row i's scales of sub-blocks 2 pr, 2 pr + 1 (sp) times the activation's
 * sums of those sub-blocks, in lane i. */
static inline __attribute__((always_inline)) AVX2 __m256i
offset_pair(__m256i sp, const be_block_q8_k_t *a, int pr)
{
    int32_t bp;
    memcpy(&bp, a->bsums + 2 * pr, sizeof bp);
    return _mm256_madd_epi16(sp, _mm256_set1_epi32(bp));
}

/* One Q6_K group against tokens x[t * nb ..], t < tn. Per sub-block pair,
 * one sign extension gives each row's two scales as an int16 pair (for the
 * offset) and two byte shuffles each scale in both int16 halves of its
 * row's lane (for the products). Per sub-block (a quad) the 6-bit q is
 * unsigned (0..63); chunks 4k, 4k+1 and chunks 4k+2, 4k+3 each share an
 * int16 (two maddubs pair sums, within 2 * 2*63*128), which meets the
 * scale in a multiply-add. The offset of 32 is taken once per super-block
 * from the scales and the activation's 16-element sums (for one token
 * summed pair by pair in registers; for several, after the products).
 * Prompt tiles run about 10% slower than the previous layout's kernel did
 * (0.93 vs 0.81 ms for 16 tokens of 2048x2048), decode 1.5x faster. */
static inline __attribute__((always_inline)) AVX2 void
q6_k_tile_n(const be_block_q6_kx8_t *w, int64_t nb, const be_block_q8_k_t *x,
                           int tn, float *y, size_t y_stride)
{
    __m256 acc[TILE_TOK];
    __m256i isum[TILE_TOK], msum[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i dup0 = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                          0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i dup1 = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                          2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    __m256i spv[8];
    for (int64_t b = 0; b < nb; b++) {
        const be_block_q6_kx8_t *blk = w + b;
        prefetch_block(blk + PF_BLOCKS, sizeof *blk);
        for (int t = 0; t < tn; t++) {
            isum[t] = _mm256_setzero_si256();
            msum[t] = _mm256_setzero_si256();
        }
        #pragma GCC unroll 2
        for (int pr = 0; pr < 8; pr++) {
            /* lane i: row i's scales of sub-blocks 2 pr, 2 pr + 1 */
            __m256i sp = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(blk->scales + 16 * pr)));
            __m256i sc0 = _mm256_shuffle_epi8(sp, dup0), sc1 = _mm256_shuffle_epi8(sp, dup1);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i sc = h ? sc1 : sc0, q[4];
                q6_k_quad(blk->qs + 96 * (2 * pr + h), q);
                for (int t = 0; t < tn; t++) {
                    const int8_t *aq = x[(size_t)t * (size_t)nb + b].qs + 16 * (2 * pr + h);
                    __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], bcast4(aq)),
                                                   _mm256_maddubs_epi16(q[1], bcast4(aq + 4)));
                    __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], bcast4(aq + 8)),
                                                   _mm256_maddubs_epi16(q[3], bcast4(aq + 12)));
                    isum[t] = _mm256_add_epi32(
                        isum[t], _mm256_add_epi32(_mm256_madd_epi16(s01, sc),
                                                  _mm256_madd_epi16(s23, sc)));
                }
            }
            spv[pr] = sp;
            if (tn == 1)
                msum[0] = _mm256_add_epi32(msum[0], offset_pair(sp, x + b, pr));
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
        for (int t = 0; t < tn; t++) {
            /* several tokens: the offsets after the products, in registers */
            if (tn > 1) {
                #pragma GCC unroll 8
                for (int pr = 0; pr < 8; pr++)
                    msum[t] = _mm256_add_epi32(
                        msum[t], offset_pair(spv[pr], x + (size_t)t * (size_t)nb + b, pr));
            }
            __m256i tot = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(msum[t], 5));
            __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(x[(size_t)t * (size_t)nb + b].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), sc, acc[t]);
        }
    }
    for (int t = 0; t < tn; t++)
        _mm256_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

static AVX2 void q6_k_tile(const be_block_q6_kx8_t *w, int64_t nb, const be_block_q8_k_t *x,
                           int tn, float *y, size_t y_stride)
{
    if (tn == 1)
        q6_k_tile_n(w, nb, x, 1, y, y_stride);
    else
        q6_k_tile_n(w, nb, x, tn, y, y_stride);
}

AVX2 void be_pack_gemm_q6_k_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                 const void *xv, const int32_t *xsum, int n, float *y,
                                 size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_k_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q6_k_tile((const be_block_q6_kx8_t *)((const uint8_t *)p->data +
                                                  (size_t)g * p->group_bytes),
                      nb, x + (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

AVX2 void be_pack_gemm_q4_0_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                 const void *xv, const int32_t *xsum, int n, float *y,
                                 size_t y_stride)
{
    const be_block_q8_0_t *x = xv;
    int64_t nb = p->n_blocks;
    if (n == 1) { /* decode: its own kernel (repack_q4_decode.c) */
        be_pack_q4_0_decode_avx2(p, g0, g1, x, xsum, y);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q4_0_tile((const be_block_q4_0x8_t *)((const uint8_t *)p->data +
                                                  (size_t)g * p->group_bytes),
                      nb, x + (size_t)t0 * (size_t)nb, xsum + 2 * (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

AVX2 void be_pack_gemm_q8_0_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                 const void *xv, const int32_t *xsum, int n, float *y,
                                 size_t y_stride)
{
    const be_block_q8_0_t *x = xv;
    int64_t nb = p->n_blocks;
    if (n == 1) {
        be_pack_q8_0_decode_avx2(p, g0, g1, x, xsum, y);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        for (int64_t g = g0; g < g1; g++)
            q8_0_tile((const be_block_q8_0x8_t *)((const uint8_t *)p->data +
                                                  (size_t)g * p->group_bytes),
                      nb, x + (size_t)t0 * (size_t)nb, xsum + 2 * (size_t)t0 * (size_t)nb, tn,
                      y + (size_t)t0 * y_stride + (size_t)g * BE_PACK_ROWS, y_stride);
    }
}

#else

void be_pack_gemm_q6_k_avx2(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                            const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q6_k_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

void be_pack_gemm_q4_k_avx2(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                            const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q4_k_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

void be_pack_gemm_q4_0_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride)
{
    be_pack_gemm_q4_0_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

void be_pack_gemm_q8_0_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride)
{
    be_pack_gemm_q8_0_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

#endif
