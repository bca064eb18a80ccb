/* attn_prefill.h: the attention op over an F16 cache for many queries at
 * once (prompt processing) and for a decode step, in tiles that share each
 * K/V row among the query heads of one GQA group and a block of queries.
 *
 * Units of work are (kv head, block of query tokens): rows = the group's
 * heads times the block's tokens. A decode step (one block) on more
 * threads than kv heads splits each group's heads into parts, a unit
 * each. Keys are converted from F16 once per
 * tile of PF_KEYS into a transposed F32 tile, and a register-blocked
 * kernel computes each score with the exact operations of the level's F16
 * dot product (the AVX2 dot's four 8-lane accumulators and its horizontal
 * sum, emulated lane-wise with keys side by side; the scalar dot's double
 * sum); each row's softmax is be_vec_softmax_row over the whole row (two
 * passes: scores first), the probabilities are rounded to F16, and the
 * values are summed in key order with a separate multiply and add, as
 * the vec attn_v does. So the results are the same bits as the per-query
 * path's (backend_cpu.c attn_task) at the same level, for finite cache
 * values: a batch still equals its single steps.
 *
 * Owns no thread pool and no buffers (the caller's scratch). */
#ifndef BE_CPU_ATTN_PREFILL_H
#define BE_CPU_ATTN_PREFILL_H

#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/threadpool.h"

#define BE_PF_MAX_HD 256 /* larger heads take the per-query path */
#define BE_PF_ROWS 64    /* query rows per unit the backend reserves for */

/* Floats of one thread's scratch for units of `rows` query rows over up
 * to ctx keys of head_dim hd (hd <= BE_PF_MAX_HD). */
size_t be_cpu_attn_prefill_floats(int rows, int ctx, int hd);

/* out = attention (be_ops_t.attention's contract) of a->n_tok queries over
 * the F16 caches k, v, at `level` (scalar where the CPU lacks it), on the
 * pool's threads. scratch: per_thread floats for each of the pool's
 * threads. Returns false, having done nothing, when it does not take the
 * call: another kv_type, head_dim over BE_PF_MAX_HD or (vector levels)
 * not a multiple of 8, or a scratch too small for one token's rows; the
 * caller then uses the per-query path. */
bool be_cpu_attn_prefill(rn_threadpool_t *pool, be_simd_t level, float *scratch,
                         size_t per_thread, float *out, const float *q, const uint16_t *k,
                         const uint16_t *v, const be_attn_t *a);

/* ---- the level kernels (attn_prefill.c, _avx2.c, _avx512.c) ------------
 *
 * qk: s[r * lds + j] = the level's F16 dot of q row r (F32 holding F16
 * values, rows hd apart) with key j of kt ([hd][ldk]: element d of key j
 * at kt[d * ldk + j]), for r < nq <= 4 and j < kw (the kernel's keys per
 * call). pv: acc[r * hd + d] = acc + p[r * ldp + j] * v[j * hd + d], a
 * rounded product then a rounded add, for j < n in order, r < nq <= 4,
 * d < hd (a multiple of 8 at vector levels). keys: kt[d * ldk + c] = key c
 * (F16 at k + c * kv_row) converted to F32, for c < nk, d < hd: the tile
 * qk reads, transposed in registers (a conversion is exact, so every
 * level gives the same floats). vals: vt[c * hd + d] = value c (F16 at
 * v + c * kv_row) converted, for c < nk, d < hd. `ahead`: rows past nk that
 * lie in the cache, which keys and vals may prefetch (BE_PF_AHEAD on). */
#define BE_PF_AHEAD 32
typedef struct be_cpu_pf_kernel {
    const char *name;
    int kw;
    void (*qk)(int nq, int hd, const float *q, const float *kt, size_t ldk, float *s,
               size_t lds);
    void (*pv)(int nq, int n, int hd, const float *p, size_t ldp, const float *v, float *acc);
    void (*keys)(int nk, int hd, const uint16_t *k, size_t kv_row, float *kt, size_t ldk,
                 int ahead);
    void (*vals)(int nk, int hd, const uint16_t *v, size_t kv_row, float *vt, int ahead);
} be_cpu_pf_kernel_t;

/* The kernel for `level` (scalar where the CPU lacks it). Static. */
const be_cpu_pf_kernel_t *be_cpu_pf_kernel_at(be_simd_t level);

void be_avx2_pf_qk(int nq, int hd, const float *q, const float *kt, size_t ldk, float *s,
                   size_t lds);
void be_avx2_pf_pv(int nq, int n, int hd, const float *p, size_t ldp, const float *v,
                   float *acc);
void be_avx2_pf_keys(int nk, int hd, const uint16_t *k, size_t kv_row, float *kt,
                     size_t ldk, int ahead);
void be_avx2_pf_vals(int nk, int hd, const uint16_t *v, size_t kv_row, float *vt, int ahead);
void be_avx512_pf_qk(int nq, int hd, const float *q, const float *kt, size_t ldk, float *s,
                     size_t lds);
void be_avx512_pf_pv(int nq, int n, int hd, const float *p, size_t ldp, const float *v,
                     float *acc);

#endif
