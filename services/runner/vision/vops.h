/* vops.h: the towers' many-token steps, on the backend's wide ops where it
 * has them (be_ops_ext_t matmul_wide, attention_full) and on the plain
 * ones where it has not (CUDA) or they decline (scratch memory).
 *
 * Owns nothing: borrows the backend and the caller's buffers. */
#ifndef RN_VISION_VOPS_H
#define RN_VISION_VOPS_H

#include "lib/prelude.h"
#include "services/runner/backend/backend.h"

/* y = x W^T: x [n][w->n_cols], y [n][w->n_rows] (backend buffers). */
void rn_vision_matmul(be_backend_t *be, const be_weight_t *w, const float *x, int n,
                      float *y);

/* Bidirectional attention of n tokens among themselves: out[t][h] =
 * softmax over all n keys of (q[t][h] . k[j][h]) / sqrt(head_dim), times
 * the values. q, k, v, out: [n][n_head * head_dim]. kc, vc: F16 buffers
 * of n rows of n_head * head_dim, used only by the fallback (k and v
 * stored there, then one attention call per query, as if it sat at
 * position n - 1). */
void rn_vision_attend(be_backend_t *be, float *out, const float *q, const float *k,
                      const float *v, int n, int n_head, int head_dim, void *kc, void *vc);

#endif
