/* repack_q4_decode.h: the one-token (decode) product of a packed Q4_0
 * matrix (repack.h) with AVX2 and with AVX-512 VNNI.
 *
 * Owns only the decode kernels; be_pack_gemm_q4_0_avx2 (repack_avx2.c)
 * and be_pack_gemm_q4_0_vnni (repack_avx512.c) call them for n == 1 and
 * keep their tiles (q4_0_gemm_avx512.c at VNNI) for two or more tokens. Same float steps as the scalar reference
 * (be_pack_gemm_q4_0_scalar), so the results are its bits.
 *
 * Groups go two at a time in 512-bit registers (group g in the low half,
 * g + h in the high, each activation word a broadcast from memory shared
 * by 16 rows), where h is half the range g0..g1: the two streams then run
 * through the range's first and second halves each without a break (with
 * g beside g + 1 a new stream began at every pair), an odd last group
 * alone. Each stream is prefetched 32 blocks (4.5 KiB) ahead, NTA.
 * Measured on an AMD EPYC VM (Zen 5, 48 KiB L1D), one thread, 32768-row
 * matrices (38-151 MB) from DRAM, in-process A/B of variants, medians of
 * 9-15 rounds, as a share of a plain streaming read of the same bytes:
 * the AVX2 tile that served decode before reached 60-93%; g beside g + 1
 * without prefetch 45-82%, with a 16-block NTA prefetch 60-87%; g beside
 * g + h without prefetch 70-86%, with 16-64 blocks NTA or T0 91-124%
 * (T1 88-97%). In cache (1024 rows) 1.6x the AVX2 tile.
 *
 * The AVX2 kernel walks the same two streams with one ymm per group (the
 * AVX2 tile's arithmetic, one accumulator per group) and the same
 * prefetch: 91-104% of the plain read where the tile read 62-90% (32
 * blocks; 8 ahead 77-88%, 16 88-96%, 64 89-103%); in cache no faster.
 * But on the ranges the backend's threads claim (4 to 44 groups) with
 * rows of 2048 columns it ran 0.7-1.0x the tile, so rows shorter than
 * BE_Q4_DECODE_PAIR_BLOCKS_AVX2 go one group at a time (with the same
 * prefetch: 0.9-1.1x the tile there, within the noise). The VNNI kernel
 * on those ranges ran 0.85-1.3x the tile at 2048 columns, 1.05-1.8x at
 * 5632 (one thread taking the ranges in turn, load 8-9 on 2 cores: noisy).
 * On 4-group ranges of 2048-column rows (a stream of 128 blocks, a
 * quarter of it before the prefetch is ahead) VNNI pairs read 69-75%
 * where the tile read 85-93%, so where each stream would be shorter than
 * BE_Q4_DECODE_MIN_STREAM_BLOCKS the VNNI kernel takes the AVX2 kernel's
 * one group at a time.
 */
#ifndef BE_CPU_REPACK_Q4_DECODE_H
#define BE_CPU_REPACK_Q4_DECODE_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"

/* y[8 g + i] = row 8 g + i of p (type Q4_0) times the one activation row x
 * (p->n_blocks Q8_0 blocks, xsum from be_pack_block_sums) for groups
 * g0..g1-1; nothing else of y is written. Call the VNNI one only after
 * be_simd_detect() reported BE_SIMD_AVX512_VNNI, the AVX2 one after
 * BE_SIMD_AVX2. */
/* Blocks per row (128: 4096 columns) from which the AVX2 kernel pairs
 * groups. */
#define BE_Q4_DECODE_PAIR_BLOCKS_AVX2 128

/* Blocks per stream (half the range's groups times the row's blocks)
 * below which the VNNI kernel takes groups one at a time. */
#define BE_Q4_DECODE_MIN_STREAM_BLOCKS 256

void be_pack_q4_0_decode_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y);
void be_pack_q4_0_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y);

#endif
