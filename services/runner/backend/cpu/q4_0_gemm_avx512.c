/* q4_0_gemm_avx512.c: the packed Q4_0 product (repack.h) for two or more
 * tokens with 512-bit AVX-512 VNNI registers: prompts and batched decode
 * steps (8 streams are an 8-token product per weight).
 *
 * A register tile is two groups (16 rows) against up to TILE_TOK tokens.
 * For each block, chunk j of the two groups is one zmm (group g in the low
 * half, g + 1 in the high), unpacked once into 8 registers of unsigned
 * nibbles; per token each chunk meets the activation's four bytes in one
 * VPDPBUSD whose broadcast comes from memory inside the instruction. The
 * token count is a compile-time constant per tile size, so the
 * accumulators stay in registers (repack_avx512.c's 256-bit tile, generic
 * in its token count, kept them in memory and paid a register broadcast
 * per four activation bytes: 18% of a plain read at 8 tokens).
 *
 * Integer block sums are exact (nibbles 0..15 times activations in
 * [-127, 127], no saturating step) and the float steps per (row, token)
 * are the scalar reference's: f = fma((float)isum, dw * da, f), so the
 * results are its bits and a batch gives each token's single-step bits.
 *
 * Compiled with target attributes, reached only after be_simd_detect()
 * reported BE_SIMD_AVX512_VNNI (through be_pack_gemm_q4_0_vnni). */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/repack.h"

#define TILE_TOK 8 /* tokens per register tile: 8 weights + 8 accumulators */

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#ifndef PF_BLOCKS
#define PF_BLOCKS 4
#endif

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

typedef void (*tile_fn)(const be_block_q4_0x8_t *w0, const be_block_q4_0x8_t *w1, int64_t nb,
                        const be_block_q8_0_t *x, const int32_t *xsum, float *y,
                        size_t y_stride, bool lone);

static inline __attribute__((always_inline)) AVX512 __m512i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* Groups w0 and w1 (blocks [0, nb)) against tokens x[t * nb ..], t < tn,
 * into y[t * y_stride + 0..15]. lone: w1 is w0 repeated and only rows
 * 0..7 are stored (an odd group at the end of a range). */
static inline __attribute__((always_inline)) AVX512 void
pair_tile(const be_block_q4_0x8_t *w0, const be_block_q4_0x8_t *w1, int64_t nb,
          const be_block_q8_0_t *x, const int32_t *xsum, int tn, float *y, size_t y_stride,
          bool lone)
{
    __m512 acc[TILE_TOK];
    for (int t = 0; t < tn; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        #pragma GCC unroll 3
        for (int off = 0; off < (int)sizeof *w0; off += 64) {
            _mm_prefetch((const char *)(w0 + b + PF_BLOCKS) + off, _MM_HINT_T0);
            _mm_prefetch((const char *)(w1 + b + PF_BLOCKS) + off, _MM_HINT_T0);
        }
        __m512i q[8];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i lo = _mm256_loadu_si256((const __m256i *)(w0[b].qs + 32 * j));
            __m256i hi = _mm256_loadu_si256((const __m256i *)(w1[b].qs + 32 * j));
            __m512i pk = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            q[j] = _mm512_and_si512(pk, m4);
            q[j + 4] = _mm512_and_si512(_mm512_srli_epi16(pk, 4), m4);
        }
        __m256i d16 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)w0[b].d)),
            _mm_loadu_si128((const __m128i *)w1[b].d), 1);
        __m512 dw = _mm512_cvtph_ps(d16);
        #pragma GCC unroll 8
        for (int t = 0; t < tn; t++) {
            const int8_t *aq = x[(size_t)t * (size_t)nb + b].qs;
            const int32_t *m = xsum + 2 * ((size_t)t * (size_t)nb + b);
            /* the offset of 8: sum((q - 8) * a) = sum(q * a) - 8 * sum(a);
             * two chains of four so no token waits on one chain's latency */
            __m512i i0 = _mm512_set1_epi32(-8 * m[0]), i1 = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                i0 = _mm512_dpbusd_epi32(i0, q[k], bcast4(aq + 4 * k));
                i1 = _mm512_dpbusd_epi32(i1, q[k + 1], bcast4(aq + 4 * k + 4));
            }
            float da;
            memcpy(&da, m + 1, sizeof da);
            __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(da));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), sc, acc[t]);
        }
    }
    for (int t = 0; t < tn; t++) {
        if (lone)
            _mm256_storeu_ps(y + (size_t)t * y_stride, _mm512_castps512_ps256(acc[t]));
        else
            _mm512_storeu_ps(y + (size_t)t * y_stride, acc[t]);
    }
}

/* One function per tile size, so each keeps its accumulators in registers. */
#define TILE_OF(N)                                                                          \
    static AVX512 void tile_##N(const be_block_q4_0x8_t *w0, const be_block_q4_0x8_t *w1,  \
                                int64_t nb, const be_block_q8_0_t *x, const int32_t *xsum, \
                                float *y, size_t y_stride, bool lone)                       \
    {                                                                                       \
        pair_tile(w0, w1, nb, x, xsum, N, y, y_stride, lone);                               \
    }
TILE_OF(1)
TILE_OF(2)
TILE_OF(3)
TILE_OF(4)
TILE_OF(5)
TILE_OF(6)
TILE_OF(7)
TILE_OF(8)

static const tile_fn tiles[TILE_TOK + 1] = {
    NULL, tile_1, tile_2, tile_3, tile_4, tile_5, tile_6, tile_7, tile_8,
};

#define GROUP(p, g) \
    ((const be_block_q4_0x8_t *)((const uint8_t *)(p)->data + (size_t)(g) * (p)->group_bytes))

/* Token tiles outer, group pairs inner, as repack_avx2.c: a token tile's
 * activations stay in L1 while the range's weights pass by. */
AVX512 void be_pack_gemm_q4_0_avx512(const be_packed_t *p, int64_t g0, int64_t g1,
                                     const void *xv, const int32_t *xsum, int n, float *y,
                                     size_t y_stride)
{
    const be_block_q8_0_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int t0 = 0; t0 < n; t0 += TILE_TOK) {
        int tn = CR_MIN(TILE_TOK, n - t0);
        tile_fn fn = tiles[tn];
        const be_block_q8_0_t *xt = x + (size_t)t0 * (size_t)nb;
        const int32_t *st = xsum + 2 * (size_t)t0 * (size_t)nb;
        float *yt = y + (size_t)t0 * y_stride;
        int64_t g = g0;
        for (; g + 1 < g1; g += 2)
            fn(GROUP(p, g), GROUP(p, g + 1), nb, xt, st, yt + (size_t)g * BE_PACK_ROWS,
               y_stride, false);
        if (g < g1)
            fn(GROUP(p, g), GROUP(p, g), nb, xt, st, yt + (size_t)g * BE_PACK_ROWS, y_stride,
               true);
    }
}

#else

void be_pack_gemm_q4_0_avx512(const be_packed_t *p, int64_t g0, int64_t g1, const void *x,
                              const int32_t *xsum, int n, float *y, size_t y_stride)
{
    be_pack_gemm_q4_0_scalar(p, g0, g1, x, xsum, n, y, y_stride);
}

#endif
