/* repack_q4k_decode.h: the one-token (decode) product of a packed Q4_K
 * matrix (repack.h) with AVX-512 VNNI.
 *
 * Owns only the decode kernel; repack_avx512.c calls it for n == 1 and
 * keeps the multi-token tiles. Same float steps as the scalar reference
 * (be_pack_gemm_q4_k_scalar), so the results are its bits.
 *
 * TODO(measure): why 512-bit, pairs and the prefetch distance.
 */
#ifndef BE_CPU_REPACK_Q4K_DECODE_H
#define BE_CPU_REPACK_Q4K_DECODE_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"

/* Super-blocks per row from which groups go in pairs. */
#define BE_Q4K_DECODE_PAIR_BLOCKS 16

/* y[8 g + i] = row 8 g + i of p (type Q4_K) times the one activation row x
 * (p->n_blocks Q8_K blocks) for groups g0..g1-1. Call only after
 * be_simd_detect() reported BE_SIMD_AVX512_VNNI. */
void be_pack_q4_k_decode_vnni(const be_packed_t *p, int64_t g0, int64_t g1,
                              const be_block_q8_k_t *x, float *y);

#endif
