/* attn_full.h: bidirectional attention of every query over every key (the
 * vision towers' self-attention), on the gemm.h microkernels.
 *
 * Per head, a tile of mr queries meets all keys in one strip of scores
 * ([mr][n], never [n][n]): scores by the microkernel against keys packed
 * once per head, an exact row softmax (the vector exp), then the strip
 * times the values packed once per head, divided by the row sums. F32
 * throughout: no F16 rounding of q, k, v or the probabilities.
 *
 * Owns no thread pool (the caller's). */
#ifndef BE_CPU_ATTN_FULL_H
#define BE_CPU_ATTN_FULL_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/gemm.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/threadpool.h"

/* out[t][h][:] = sum_j softmax_j(scale * q[t][h] . k[j][h]) v[j][h] over
 * j < n, for t < n, h < n_head. q, k, v, out: [n][n_head * head_dim] with
 * rows `ld` floats apart (ld >= n_head * head_dim); out does not overlap
 * q, k or v. sc: the caller's scratch (one call at a time). Returns false, having done nothing, when its scratch cannot be
 * allocated (the caller then uses the attention op). */
bool be_cpu_attn_full(rn_threadpool_t *pool, be_simd_t level, be_cpu_scratch_t *sc,
                      float *out, const float *q, const float *k, const float *v, size_t ld,
                      int n, int n_head, int head_dim, float scale);

#endif
