/* repack_q4_decode.c: the one-token packed Q4_0 products with AVX2 and
 * AVX-512 VNNI (why they are shaped so: repack_q4_decode.h).
 *
 * VNNI: a zmm holds chunk j of two groups (group g in the low half, g + h
 * in the high), so its 16 int32 lanes are 16 rows and every VPDPBUSD takes
 * the activation word straight from memory as a broadcast. The low
 * nibbles are `pk & 0x0f`; the high ones are left in place, `pk & 0xf0`
 * (16 q), so a chunk costs two ANDs and no shift; their chain sums 16 times
 * the high half's products, which one arithmetic shift per block divides
 * back exactly (every term is a multiple of 16, at most 16 * 240 * 127 in
 * magnitude). Integer block sums are exact and the float step per row is
 * the scalar reference's, f = fma((float)isum, dw * da, f), block by block
 * in order, so the results are its bits. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/repack_q4_decode.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE inline __attribute__((always_inline))

#define PF_AHEAD 32 /* blocks (4.5 KiB) ahead of each group's stream */

#define GROUP(p, g) \
    ((const be_block_q4_0x8_t *)((const uint8_t *)(p)->data + (size_t)(g) * (p)->group_bytes))

static INLINE VNNI __m512i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* A hint: past the matrix's end it touches nothing. */
static INLINE VNNI void prefetch_block(const be_block_q4_0x8_t *b)
{
    _mm_prefetch((const char *)b, _MM_HINT_NTA);
    _mm_prefetch((const char *)b + 64, _MM_HINT_NTA);
    _mm_prefetch((const char *)b + 128, _MM_HINT_NTA);
}

/* Groups w0 and w1 (w1 == w0 for a lone group: only the low 8 lanes are
 * stored) against the one activation row, into y[0..15] (y[0..7]). */
static INLINE VNNI void pair(const be_block_q4_0x8_t *w0, const be_block_q4_0x8_t *w1,
                             int64_t nb, const be_block_q8_0_t *x, const int32_t *xsum,
                             float *y0, float *y1, bool lone)
{
    const __m512i mlo = _mm512_set1_epi8(0x0f), mhi = _mm512_set1_epi8((char)0xf0);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(w0 + b + PF_AHEAD);
        if (!lone)
            prefetch_block(w1 + b + PF_AHEAD);
        const int8_t *aq = x[b].qs;
        /* the offset of 8: sum((q - 8) * a) = sum(q * a) - 8 * sum(a) */
        __m512i lo = _mm512_set1_epi32(-8 * xsum[2 * b]);
        __m512i hi = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i l = _mm256_loadu_si256((const __m256i *)(w0[b].qs + 32 * j));
            __m256i h = _mm256_loadu_si256((const __m256i *)(w1[b].qs + 32 * j));
            __m512i pk = _mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1);
            lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(pk, mlo), bcast4(aq + 4 * j));
            hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(pk, mhi), bcast4(aq + 16 + 4 * j));
        }
        __m512i isum = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
        __m256i d16 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)w0[b].d)),
            _mm_loadu_si128((const __m128i *)w1[b].d), 1);
        float da;
        memcpy(&da, xsum + 2 * b + 1, sizeof da);
        __m512 sc = _mm512_mul_ps(_mm512_cvtph_ps(d16), _mm512_set1_ps(da));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc);
    }
    _mm256_storeu_ps(y0, _mm512_castps512_ps256(acc));
    if (!lone)
        _mm256_storeu_ps(y1, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

static VNNI void pair2(const be_block_q4_0x8_t *w0, const be_block_q4_0x8_t *w1, int64_t nb,
                       const be_block_q8_0_t *x, const int32_t *xsum, float *y0, float *y1)
{
    pair(w0, w1, nb, x, xsum, y0, y1, false);
}

static VNNI void lone1(const be_block_q4_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                       const int32_t *xsum, float *y)
{
    pair(w, w, nb, x, xsum, y, y, true);
}

/* ---- AVX2: one group per ymm, groups g and g + h side by side on long
 * rows (one at a time on short ones), each block as the AVX2 tile
 * (repack_avx2.c) computes it ---- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))

static INLINE AVX2 __m256i bcast4_avx2(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

static INLINE AVX2 void prefetch_avx2(const be_block_q4_0x8_t *b)
{
    _mm_prefetch((const char *)b, _MM_HINT_NTA);
    _mm_prefetch((const char *)b + 64, _MM_HINT_NTA);
    _mm_prefetch((const char *)b + 128, _MM_HINT_NTA);
}

/* One block of one group: nibbles 0..15 (the unsigned side) times the
 * activations; pair sums stay within 2 * 15 * 127, eight of them within
 * 30480 (int16), then widened, less the offset of 8. */
static INLINE AVX2 __m256 block_avx2(const be_block_q4_0x8_t *blk, const int8_t *aq,
                                     __m256i off8, __m256 da, __m256 acc)
{
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m256i pk = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * j));
        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(pk, m4),
                                                       bcast4_avx2(aq + 4 * j)));
        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(
                                      _mm256_and_si256(_mm256_srli_epi16(pk, 4), m4),
                                      bcast4_avx2(aq + 16 + 4 * j)));
    }
    __m256i i32 = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones), off8);
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk->d));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), _mm256_mul_ps(dw, da), acc);
}

static AVX2 void pair_avx2(const be_block_q4_0x8_t *w0, const be_block_q4_0x8_t *w1,
                           int64_t nb, const be_block_q8_0_t *x, const int32_t *xsum,
                           float *y0, float *y1)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_avx2(w0 + b + PF_AHEAD);
        prefetch_avx2(w1 + b + PF_AHEAD);
        __m256i off8 = _mm256_set1_epi32(8 * xsum[2 * b]);
        __m256 da = _mm256_broadcast_ss((const float *)(xsum + 2 * b + 1));
        acc0 = block_avx2(w0 + b, x[b].qs, off8, da, acc0);
        acc1 = block_avx2(w1 + b, x[b].qs, off8, da, acc1);
    }
    _mm256_storeu_ps(y0, acc0);
    _mm256_storeu_ps(y1, acc1);
}

static AVX2 void one_avx2(const be_block_q4_0x8_t *w, int64_t nb, const be_block_q8_0_t *x,
                          const int32_t *xsum, float *y)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_avx2(w + b + PF_AHEAD);
        __m256i off8 = _mm256_set1_epi32(8 * xsum[2 * b]);
        __m256 da = _mm256_broadcast_ss((const float *)(xsum + 2 * b + 1));
        acc = block_avx2(w + b, x[b].qs, off8, da, acc);
    }
    _mm256_storeu_ps(y, acc);
}

static AVX2 void one_by_one_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                 const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    for (int64_t g = g0; g < g1; g++)
        one_avx2(GROUP(p, g), p->n_blocks, x, xsum, y + (size_t)g * BE_PACK_ROWS);
}

AVX2 void be_pack_q4_0_decode_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                                   const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    int64_t nb = p->n_blocks;
    if (nb < BE_Q4_DECODE_PAIR_BLOCKS_AVX2) {
        one_by_one_avx2(p, g0, g1, x, xsum, y);
        return;
    }
    int64_t half = (g1 - g0) / 2;
    for (int64_t g = g0; g < g0 + half; g++)
        pair_avx2(GROUP(p, g), GROUP(p, g + half), nb, x, xsum, y + (size_t)g * BE_PACK_ROWS,
                  y + (size_t)(g + half) * BE_PACK_ROWS);
    if ((g1 - g0) % 2)
        one_avx2(GROUP(p, g1 - 1), nb, x, xsum, y + (size_t)(g1 - 1) * BE_PACK_ROWS);
}

/* Short streams (few groups of short rows) go one group at a time: the
 * unprefetched start of each stream would be a large share of it. */
VNNI void be_pack_q4_0_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                                   const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    int64_t nb = p->n_blocks;
    int64_t half = (g1 - g0) / 2;
    if (half * nb < BE_Q4_DECODE_MIN_STREAM_BLOCKS) {
        one_by_one_avx2(p, g0, g1, x, xsum, y);
        return;
    }
    for (int64_t g = g0; g < g0 + half; g++)
        pair2(GROUP(p, g), GROUP(p, g + half), nb, x, xsum, y + (size_t)g * BE_PACK_ROWS,
              y + (size_t)(g + half) * BE_PACK_ROWS);
    if ((g1 - g0) % 2)
        lone1(GROUP(p, g1 - 1), nb, x, xsum, y + (size_t)(g1 - 1) * BE_PACK_ROWS);
}

#else

void be_pack_q4_0_decode_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    be_pack_gemm_q4_0_scalar(p, g0, g1, x, xsum, 1, y, (size_t)p->n_rows);
}

void be_pack_q4_0_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y)
{
    be_pack_gemm_q4_0_scalar(p, g0, g1, x, xsum, 1, y, (size_t)p->n_rows);
}

#endif
