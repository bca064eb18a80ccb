/* repack_q4k_decode.h: the one-token (decode) product of a packed Q4_K
 * matrix (repack.h) with AVX-512 VNNI.
 *
 * Owns only the decode kernel; repack_avx512.c calls it for n == 1 and
 * keeps the multi-token tiles. Same float steps as the scalar reference
 * (be_pack_gemm_q4_k_scalar), so the results are its bits.
 *
 * Why its own kernel: the 256-bit tiles spend per 32-byte chunk a load,
 * a mask (and a shift for odd sub-blocks), a broadcast and a multiply-add,
 * with each chunk loaded twice (once per nibble) and a scale multiply per
 * sub-block; one thread then kept only 62-85% of a plain read of the same
 * bytes (TinyLlama shapes, 32768 rows from DRAM). Here a 64-byte load
 * serves both nibbles of two chunks (three vector ops, two VPDPBUSD), the
 * activation words are put in place once per sub-block pair for all the
 * groups of a pass, and one int32 multiply applies 16 scales.
 *
 * A range of groups g0..g1 goes two groups at a time, g with g + half
 * (half = (g1 - g0) / 2: two weight streams that run unbroken through the
 * two halves, each activation block read once for both), an odd last group
 * alone, and each stream is prefetched (NTA) 4 super-blocks (4.6 KiB)
 * ahead; ranges whose streams would be under
 * BE_Q4K_DECODE_MIN_STREAM_BLOCKS go one group at a time. Measured on a
 * busy 2-core AMD EPYC VM (Zen 5, AVX-512), one thread, medians of 9-11
 * rounds, share of a plain read: pairing g with g + 1 (the first version)
 * read at 4096 columns 85% vs one group 62%, at 8192 81-85% vs 65-80%, at
 * 2048 56% vs one group's 94-107%; without the prefetch 55-92%, 8 ahead
 * no better than 4. Against the 256-bit tile (bench-kernels --packed Q4_K,
 * load 15-25) those g, g + 1 pairs gained 1.28-1.75x at 2048 columns but
 * nothing at 5632 and 8192 (72-81%, the tile 71-79%). The split pairs
 * (bench-kernels, 16384-65536 rows, load 11-12, old and new binaries
 * alternated): 98-100% at 5632 columns (g, g + 1: 70-88%), 87-92% at 8192
 * (81-91%), 98-101% at 2048 (93%): as for Q4_0 and Q8_0
 * (repack_q4_decode.h), restarting both streams at every pair was what
 * held long rows back.
 */
#ifndef BE_CPU_REPACK_Q4K_DECODE_H
#define BE_CPU_REPACK_Q4K_DECODE_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"

/* Super-blocks each of a pair's two streams must run at least (64: 72 KiB);
 * shorter ranges go one group at a time. */
#define BE_Q4K_DECODE_MIN_STREAM_BLOCKS 64

/* y[8 g + i] = row 8 g + i of p (type Q4_K) times the one activation row x
 * (p->n_blocks Q8_K blocks) for groups g0..g1-1. Call only after
 * be_simd_detect() reported BE_SIMD_AVX512_VNNI. */
void be_pack_q4_k_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_k_t *x, float *y);

#endif
