/* gemm.h: blocked matrix products for many rows of activations (vision
 * towers: thousands of patches), F16 or F32 weights times F32 activations,
 * and the register-blocked microkernels they and attn_full.h share.
 *
 * The microkernel computes one tile c[t][j] = sum_k a[k][t] * b[k][j] of
 * mr tokens by nr columns from two packed panels: a: [K][mr] (a token
 * tile, one column per token), b: [K][nr] (nr weight rows side by side).
 * Each c element is one FMA chain over k in order, so a result does not
 * depend on the tile it landed in or on the number of tokens. Levels:
 * scalar (4 x 8, the reference), AVX2 (6 x 16), AVX-512 (12 x 32).
 *
 * Owns no thread pool (the caller's) and no weights (borrowed). */
#ifndef BE_CPU_GEMM_H
#define BE_CPU_GEMM_H

#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/threadpool.h"

#define BE_CPU_GEMM_MAX_MR 12
#define BE_CPU_GEMM_MAX_NR 32

/* c[t * ldc + j] = sum over k < K of a[k * mr + t] * b[k * nr + j] for
 * t < mt, j < nc (mt <= mr, nc <= nr, the kernel's sizes); with acc,
 * c += that sum instead. a and b hold whole panels (mr, nr wide; pad with
 * zeros). */
typedef void (*be_cpu_gemm_ukernel_fn)(int64_t K, const float *a, const float *b, float *c,
                                       size_t ldc, int mt, int nc, bool acc);

typedef struct be_cpu_gemm_kernel {
    const char *name; /* "scalar", "avx2", "avx512" */
    int mr;           /* tokens per tile */
    int nr;           /* columns per tile */
    be_cpu_gemm_ukernel_fn fn;
} be_cpu_gemm_kernel_t;

/* The microkernel for `level` (scalar where the CPU lacks it). Static. */
const be_cpu_gemm_kernel_t *be_cpu_gemm_kernel_at(be_simd_t level);

/* The vector microkernels (gemm_avx2.c, gemm_avx512.c): call only through
 * be_cpu_gemm_kernel_at, which checks the CPU runs them. */
void be_avx2_gemm_ukernel(int64_t K, const float *a, const float *b, float *c, size_t ldc,
                          int mt, int nc, bool acc);
void be_avx512_gemm_ukernel(int64_t K, const float *a, const float *b, float *c,
                            size_t ldc, int mt, int nc, bool acc);

/* Packs rows x[t * ldx + k0 + k], t < mt, k < K, times s, into a token
 * panel a[k * mr + t] (zeros for t >= mt). */
void be_cpu_gemm_pack_a(const float *x, size_t ldx, int mt, int64_t K, float s, int mr,
                        float *a);

/* Scratch kept between calls (grow-only; the products need tens of MB,
 * which a fresh allocation would fault in page by page each time). Owned
 * by the backend; free with be_cpu_scratch_free. */
typedef struct be_cpu_scratch {
    float *p;      /* 64-byte aligned */
    size_t floats; /* capacity */
} be_cpu_scratch_t;

/* At least `floats` floats of sc (contents undefined), or NULL when out
 * of memory (sc unchanged). */
float *be_cpu_scratch_get(be_cpu_scratch_t *sc, size_t floats);
void be_cpu_scratch_free(be_cpu_scratch_t *sc);

/* y[t][r] = sum_c w[r][c] * x[t][c] (the matmul op's contract) for an F16
 * or F32 weight, on the pool's threads: x rounded to F16 first for an F16
 * weight (as matmul converts activations to the weight's dot format); the
 * sums in k order per element (float steps differ from matmul's vec_dot,
 * which sums in lanes). sc: the caller's scratch (one call at a time).
 * Returns false, having done nothing, for other
 * weight types, fewer than 2 token tiles of work, or when its scratch
 * cannot be allocated: the caller then uses matmul. */
bool be_cpu_gemm(rn_threadpool_t *pool, be_simd_t level, be_cpu_scratch_t *sc,
                 const be_weight_t *w, const float *x, int n, float *y);

#endif
