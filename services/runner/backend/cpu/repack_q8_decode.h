/* repack_q8_decode.h: the one-token (decode) product of a packed Q8_0
 * matrix (repack.h) with AVX2 and with AVX-512 VNNI.
 *
 * Owns only the decode kernels; repack_avx2.c and repack_avx512.c call
 * them for n == 1 and keep the multi-token tiles. Same float steps as the
 * scalar reference (be_pack_gemm_q8_0_scalar), so the results are its bits.
 *
 * A range of groups g0..g1 goes two groups at a time, g with g + half (half
 * = (g1 - g0) / 2: two weight streams that run unbroken through the two
 * halves of the range), each activation block loaded once for both, with
 * the blocks 16 ahead of each stream prefetched (NTA); an odd last group
 * goes alone. Ranges whose streams would be under
 * BE_Q8_DECODE_MIN_STREAM_BLOCKS, and at AVX2 rows under
 * BE_Q8_DECODE_PAIR_BLOCKS, go one group at a time. Pairing g with g + 1
 * (session 10) restarted both streams at every pair; the split pairs, as
 * repack_q4_decode.c's, read 96-107% of a plain read at 5632 and 8192
 * columns where g, g + 1 read 83-90%, and 104-109% at 2048 columns where
 * one group at a time read 82-91% (VNNI, one thread, 16384-65536 rows,
 * bench-kernels, medians of 9, old and new binaries alternated, load
 * 14-16). Why pairs at all: with
 * one group at a time the kernel kept 84-96% of a plain streaming read of
 * the same bytes at 2048 columns (a group is 17 KiB) but 70-78% at 5632 and
 * 8192 (48 and 70 KiB: a group no longer fits in L1 beside the 11 KiB
 * activation row, which is then fetched again from L2 for every group).
 * (That reason is inferred from where the drop starts: this VM exposes no
 * PMU counters.) Measured on an AMD EPYC VM (48 KiB L1D), one thread,
 * 72-256 MB matrices from DRAM, old and new kernels interleaved in one
 * process, medians of 11-15 rounds, several runs: at 5632/8192 columns
 * the paired kernels reached 84-100% of the plain read where one group at
 * a time reached 67-79% (1.2-1.4x); at 2048 columns those g, g + 1
 * pairs ran 0.8-0.9x one group; without the prefetch pairs gained
 * nothing.
 */
#ifndef BE_CPU_REPACK_Q8_DECODE_H
#define BE_CPU_REPACK_Q8_DECODE_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"

/* Blocks per row (128: 4096 columns, a 34 KiB group) from which the AVX2
 * kernel takes groups in pairs (repack_q4_decode.h found AVX2 pairs of
 * shorter rows no faster on the backend's ranges). */
#define BE_Q8_DECODE_PAIR_BLOCKS 128

/* Blocks each of a pair's two streams must run at least; shorter ranges go
 * one group at a time. */
#define BE_Q8_DECODE_MIN_STREAM_BLOCKS 256

/* y[8 g + i] = row 8 g + i of p (type Q8_0) times the one activation row x
 * (p->n_blocks Q8_0 blocks, xsum from be_pack_block_sums) for groups
 * g0..g1-1. Call the VNNI one only after be_simd_detect() reported
 * BE_SIMD_AVX512_VNNI, the AVX2 one after BE_SIMD_AVX2. */
void be_pack_q8_0_decode_avx2(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y);
void be_pack_q8_0_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_0_t *x, const int32_t *xsum, float *y);

#endif
