/* repack.h: weight matrices rearranged once, at load, for the CPU kernels.
 *
 * A Q4_0, Q8_0, Q4_K or Q6_K matrix whose row count is a multiple of 8 is stored as
 * groups of 8 rows in which the rows' blocks interleave: block b of the group
 * holds block b of each of its 8 rows, four bytes of one row next to four
 * bytes of the next. One 32-byte load then carries four elements of each of
 * 8 rows, and one activation word broadcast to all lanes meets all 8 rows
 * in one multiply-add: each int32 lane of the result is one row's partial
 * sum, so a block costs one int->float conversion and one fma for 8 rows
 * (the row-major kernels need that per row) and nothing is summed across
 * lanes at the end. Activations are the Q8_0 rows the row-major kernels use.
 *
 * The same kernel serves decode (one token) and prompts (a tile of tokens
 * per pass over a group's blocks, so the unpacked weights are reused), and
 * every (row, token) takes the same float steps in either, so a batch gives
 * each token's single-step bits. (Q4_0 and Q8_0 decode have kernels of
 * their own, repack_q4_decode.h and repack_q8_decode.h, with those same
 * float steps.)
 *
 * Owns the packed layouts, packing, unpacking a row (get_rows), the scalar
 * reference product and the dispatch to the SIMD versions. Does not own
 * threading (backend_cpu.c splits groups over threads) or the decision to
 * pack (weight_prepare). */
#ifndef BE_CPU_REPACK_H
#define BE_CPU_REPACK_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/cpu/quant.h"

#define BE_PACK_ROWS 8 /* rows per interleaved group */

/* The packed layouts' version, stored in pack caches (pack_cache.h): bump
 * it with any change to a layout below, or old caches would be read as
 * the new layout. */
#define BE_PACK_LAYOUT_VERSION 2 /* 2: Q6_K quads of three registers */

/* Block b of 8 Q4_0 rows. qs is 4 chunks of 32 bytes; in chunk j, bytes
 * 4i..4i+3 are row i's qs[4j..4j+3]: low nibbles elements 4j..4j+3, high
 * nibbles elements 16+4j..16+4j+3 (Q4_0's own nibble order).
 * value = d[i] * (q - 8). */
typedef struct be_block_q4_0x8 {
    uint16_t d[BE_PACK_ROWS];  /* f16 scale of row i's block */
    uint8_t qs[4 * 32];
} be_block_q4_0x8_t;
_Static_assert(sizeof(be_block_q4_0x8_t) == 144, "Q4_0x8 block is 8 Q4_0 blocks");

/* Block b of 8 Q8_0 rows. qs is 8 chunks of 32 bytes; in chunk k, bytes
 * 4i..4i+3 are row i's elements 4k..4k+3. value = d[i] * q. */
typedef struct be_block_q8_0x8 {
    uint16_t d[BE_PACK_ROWS];
    int8_t qs[8 * 32];
} be_block_q8_0x8_t;
_Static_assert(sizeof(be_block_q8_0x8_t) == 272, "Q8_0x8 block is 8 Q8_0 blocks");

/* Super-block b of 8 Q4_K rows (256 elements each), its 6-bit scales and
 * mins unpacked. Sub-block s (32 elements) of row i has scale
 * scales[8 s + i] and min mins[16 (s / 2) + 2 i + s % 2] (a row's two
 * mins of a sub-block pair side by side, as int16 multiply-adds want them).
 * qs is 4 sub-block pairs of 8 chunks of 32 bytes: in pair p, chunk c,
 * bytes 4i..4i+3 are row i's qs[32p + 4c .. 32p + 4c + 3]: low nibbles
 * elements 64p + 4c.. (sub-block 2p), high nibbles 64p + 32 + 4c..
 * (sub-block 2p+1). value = d[i] * scale * q - dmin[i] * min. */
typedef struct be_block_q4_kx8 {
    uint16_t d[BE_PACK_ROWS];     /* f16 super-scale of the scales */
    uint16_t dmin[BE_PACK_ROWS];  /* f16 super-scale of the mins */
    uint8_t scales[64];
    uint8_t mins[64];
    uint8_t qs[4 * 8 * 32];
} be_block_q4_kx8_t;
_Static_assert(sizeof(be_block_q4_kx8_t) == 1184, "Q4_Kx8 block is 8 rows' super-blocks");

/* Super-block b of 8 Q6_K rows. Chunk c (0..63) is a row's elements
 * 4c..4c+3 as unsigned 6-bit q (value = d * scale * (q - 32)); sub-block k
 * (16 elements, chunks 4k..4k+3) of row i has scale
 * scales[16 (k / 2) + 2 i + k % 2] (a row's scales of a sub-block pair side
 * by side, as int16 multiply-adds want them). qs is 16 quads of 3 registers
 * of 32 bytes, quad k holding sub-block k: in its register j (0..2), bytes
 * 4i..4i+3 hold row i's chunk 4k+j in bits 0..5 and bits 2j..2j+1 of its
 * chunk 4k+3 in bits 6..7, so three chunks come out with one AND each and
 * the fourth with three shifts, three ANDs and two ORs. */
typedef struct be_block_q6_kx8 {
    uint16_t d[BE_PACK_ROWS];     /* f16 super-scale */
    int8_t scales[16 * 8];
    uint8_t qs[16 * 3 * 32];
} be_block_q6_kx8_t;
_Static_assert(sizeof(be_block_q6_kx8_t) == 1680, "Q6_Kx8 block is 8 Q6_K blocks");

typedef struct be_packed {
    cr_type_t type;       /* the source type: Q4_0, Q8_0, Q4_K or Q6_K */
    int64_t n_rows;       /* a multiple of BE_PACK_ROWS */
    int64_t n_cols;       /* a multiple of 32 (K-quants: 256) */
    int64_t n_blocks;     /* blocks per row: n_cols / 32 (K-quants: / 256) */
    size_t group_bytes;   /* bytes of one group: n_blocks packed blocks */
    void *data;           /* n_rows / 8 groups, 64-byte aligned */
} be_packed_t;

/* Products of groups g0..g1-1 (rows 8*g0 .. 8*g1-1) with n activation rows:
 * y[t * y_stride + r] for every such row r and t in 0..n-1. x: n rows of
 * p->n_blocks blocks of the activation type (be_pack_act_type: Q8_0, or
 * Q8_K for the K-quants), token t at block t * p->n_blocks; xsum: for Q8_0
 * activations, n rows of 2 * p->n_blocks int32 from be_pack_block_sums
 * (the block's sum of qs, which Q4_0's offset of 8 needs, and its scale as
 * float bits, so kernels convert each scale once per matmul); the K-quants
 * ignore it. Q8_0 activations are in [-127, 127],
 * as quantization makes them. Per (row, token): f = 0, then per block
 * f = fma((float)isum, dw * da, f) with isum the exact integer block sum
 * (Q4_K: then f = fma(-(float)msum, dmin * da, f) for its mins; Q6_K:
 * isum = sum of scale * q * a - 32 * sum of scale * bsum): every
 * level gives the scalar reference's bits. */
typedef void (*be_pack_gemm_fn)(const be_packed_t *p, int64_t g0, int64_t g1,
                                const void *x, const int32_t *xsum, int n, float *y,
                                size_t y_stride);

/* The activation format the product of packed type t reads (Q8_0 needs
 * xsum from be_pack_block_sums too). */
cr_type_t be_pack_act_type(cr_type_t t);

/* Super-blocks each of a pair's two streams must run for the one-token
 * Q6_K kernel at VNNI (repack_avx512.c) to take groups in split pairs
 * (as BE_Q4K_DECODE_MIN_STREAM_BLOCKS; 64: 105 KiB); shorter ranges go one
 * group at a time. */
#define BE_Q6K_DECODE_MIN_STREAM_BLOCKS 64

/* The fewest groups a unit of work of p with n activation rows should
 * have: 4, or for one row as many as the type's one-token kernel needs to
 * pair groups in streams of full speed (repack_q4_decode.h,
 * repack_q8_decode.h, repack_q4k_decode.h, Q6_K above), so threads splitting a
 * matrix never cut it into ranges its kernel takes at a slower pace. */
int64_t be_pack_min_groups(const be_packed_t *p, int n);

/* True if a matrix of this type and shape is packed by be_pack_new. */
bool be_pack_supported(cr_type_t t, int64_t n_rows, int64_t n_cols);

/* Packs n_rows rows of row_bytes each at src (type t, checked with
 * be_pack_supported first). On success *out is owned by the caller (free
 * with be_pack_destroy); CR_E_NOMEM when the copy cannot be allocated,
 * CR_E_INVALID for a shape be_pack_supported refuses. */
cr_status_t be_pack_new(cr_type_t t, const void *src, int64_t n_rows, int64_t n_cols,
                        size_t row_bytes, be_packed_t **out, cr_err_t *err);

/* The bytes be_pack_new takes for such a matrix (0: not packable or too
 * large). */
size_t be_pack_bytes(cr_type_t t, int64_t n_rows, int64_t n_cols);

/* be_pack_new into mem, a mapping of exactly be_pack_bytes (on success the
 * packed matrix takes it over: be_pack_destroy munmaps it; on error it
 * stays the caller's). With `filled` nothing is packed: mem already holds
 * the packed bytes, or the caller fills it with be_pack_fill. mem NULL:
 * its own mapping, as be_pack_new. */
cr_status_t be_pack_new_at(cr_type_t t, const void *src, int64_t n_rows, int64_t n_cols,
                           size_t row_bytes, void *mem, bool filled, be_packed_t **out,
                           cr_err_t *err);

/* Packs groups g0..g1-1 of p (rows 8*g0 .. 8*g1-1) from src, the whole
 * source matrix (row_bytes per row); groups are independent, so threads
 * may fill disjoint ranges at once. */
void be_pack_fill(be_packed_t *p, const void *src, size_t row_bytes, int64_t g0, int64_t g1);

void be_pack_destroy(be_packed_t **self_p);

/* Row r of p dequantized to out[0..n_cols): the same floats as the source
 * type's to_float gives for the original row. */
void be_pack_get_row(const be_packed_t *p, int64_t r, float *out);

/* The product kernel for p's type at `level` (falling back to scalar for
 * levels the CPU lacks or the type has no version for). */
be_pack_gemm_fn be_pack_gemm_at(cr_type_t t, be_simd_t level);

/* The kernel written for exactly `level` (NULL where the type has none at
 * that level), whether or not this CPU can run it: for reports of what
 * was and was not exercised. Call only what be_pack_gemm_at returns. */
be_pack_gemm_fn be_pack_gemm_compiled(cr_type_t t, be_simd_t level);

/* Per 32-element block of one Q8_0 row: xsum[2b] = sum(x[b].qs) and
 * xsum[2b+1] = the bits of (float)x[b].d. */
void be_pack_block_sums(const be_block_q8_0_t *x, int64_t n_blocks, int32_t *xsum);

/* The versions be_pack_gemm_at picks (AVX2 ones only after be_simd_detect
 * said the CPU has AVX2+FMA+F16C, VNNI ones (repack_avx512.c) only after it
 * said BE_SIMD_AVX512_VNNI). */
void be_pack_gemm_q4_0_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *x, const int32_t *xsum, int n, float *y,
                              size_t y_stride);
void be_pack_gemm_q8_0_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *x, const int32_t *xsum, int n, float *y,
                              size_t y_stride);
void be_pack_gemm_q4_0_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
void be_pack_gemm_q4_k_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *x, const int32_t *xsum, int n, float *y,
                              size_t y_stride);
void be_pack_gemm_q4_k_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
void be_pack_gemm_q4_0_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
/* Q4_0, two or more tokens, 512-bit tiles of 16 rows (q4_0_gemm_avx512.c);
 * be_pack_gemm_q4_0_vnni calls it for n >= 2. */
void be_pack_gemm_q4_0_avx512(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *x, const int32_t *xsum, int n, float *y,
                              size_t y_stride);
void be_pack_gemm_q8_0_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
void be_pack_gemm_q4_k_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
void be_pack_gemm_q6_k_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
void be_pack_gemm_q6_k_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *x, const int32_t *xsum, int n, float *y,
                              size_t y_stride);
void be_pack_gemm_q6_k_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);
void be_pack_gemm_q8_0_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                            const void *x, const int32_t *xsum, int n, float *y,
                            size_t y_stride);

#endif
