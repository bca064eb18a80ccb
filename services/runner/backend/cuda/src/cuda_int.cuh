/* cuda_int.cuh: what the CUDA backend's .cu files share (never included
 * outside backend/cuda/).
 *
 * The backend object, the sticky-error helpers every op uses, and the
 * launchers each kernel file exports to backend_cuda.cu. Kernels live in
 * kernels_matmul.cu (quant formats, matrix-vector products, dequantization,
 * get_rows) and kernels_ops.cu (norms, rope, cache, attention,
 * elementwise). Launchers only queue work on the given stream; errors are
 * read by the caller with cudaGetLastError. */
#ifndef BE_CUDA_INT_CUH
#define BE_CUDA_INT_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <stddef.h>

/* The C headers name functions after their structs (cr_type_info), which
 * g++ -Wshadow reports as hiding a constructor: harmless in C. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
extern "C" {
#include "lib/prelude.h"
#include "lib/status.h"
#include "lib/tensor_type.h"
#include "services/runner/backend/backend.h"
}
#pragma GCC diagnostic pop

/* ---- device views of the GGUF block layouts (quant.h has the host ones;
 * the same sizes are checked here) ---- */

#define CU_QK 32    /* elements per Q4_0/Q5_0/Q8_0 block */
#define CU_QK_K 256 /* elements per K-quant super-block */

/* Activations quantized on the device for the integer dot products. The
 * layouts are ours (4-byte aligned for int loads), the numbers are exactly
 * what the CPU's Q8_0 / Q8_1 / Q8_K from_float produce. */
typedef struct cu_q8_0 {
    float d;          /* the f16-rounded scale, as a float */
    int8_t qs[CU_QK];
} cu_q8_0_t;
static_assert(sizeof(cu_q8_0_t) == 36, "cu_q8_0 is 36 bytes");

typedef struct cu_q8_1 {
    float d;          /* the f16-rounded scale, as a float */
    float s;          /* f16-rounded d * sum(qs) (d before rounding) */
    int8_t qs[CU_QK];
} cu_q8_1_t;
static_assert(sizeof(cu_q8_1_t) == 40, "cu_q8_1 is 40 bytes");

typedef struct cu_q8_k {
    float d;            /* f32 scale */
    int8_t qs[CU_QK_K];
} cu_q8_k_t;
static_assert(sizeof(cu_q8_k_t) == 260, "cu_q8_k is 260 bytes");

/* ---- the backend object ---- */

typedef struct be_cuda {
    be_backend_t base;
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;

    /* pinned staging for weight uploads: two buffers used alternately */
    void *stage[2];
    cudaEvent_t stage_done[2];
    size_t stage_bytes;

    /* scratch, sized by reserve (device memory) */
    void *act;            /* activations in a dot format: max_tok rows */
    size_t act_bytes;
    void *wtile;          /* dequantized F16 weight rows for GEMM */
    size_t wtile_bytes;
    int32_t *ids;         /* get_rows ids / rope positions: max_tok */
    size_t ids_n;
    float *att_part;      /* split attention partials */
    size_t att_part_floats;
    int max_tok, max_ctx, n_head;
    int64_t max_cols;

    int gemm_min_tokens;  /* n > this: cuBLAS path */
    int n_sm;             /* multiprocessors, for work splitting */

    uint64_t weight_bytes, buffer_bytes;

    /* first error met by an op since be_cuda_check */
    cr_status_t st;
    char msg[256];
} be_cuda_t;

static inline be_cuda_t *cu_of(be_backend_t *be)
{
    return (be_cuda_t *)be;
}

/* Records the first error of an op; returns true if e is an error. */
bool cu_fail(be_cuda_t *g, cudaError_t e, const char *what);
bool cu_blas_fail(be_cuda_t *g, cublasStatus_t s, const char *what);

/* ---- kernels_matmul.cu ---- */

/* True if weights of type t (cr_type_t) have CUDA kernels. */
bool cu_type_supported(int t);

/* y[t][r] = sum_c w[r][c] x[t][c] with the matrix-vector kernels (any n;
 * meant for small n). act: scratch of cu_act_bytes(type, cols, n) bytes. */
size_t cu_act_bytes(int type, int64_t cols, int n);
void cu_matvec(cudaStream_t s, int type, const void *w, int64_t rows, int64_t cols,
               size_t row_bytes, const float *x, int n, float *y, void *act);

/* Rows [r0, r0+nr) of w dequantized to F16 into out [nr][cols]. */
void cu_dequant_f16(cudaStream_t s, int type, const void *w, int64_t r0, int64_t nr,
                    int64_t cols, size_t row_bytes, __half *out);

/* out[i][:] = row ids[i] (device) of w as f32. */
void cu_get_rows(cudaStream_t s, int type, const void *w, int64_t cols, size_t row_bytes,
                 const int32_t *ids, int n, float *out);

/* f32 -> f16 / bf16 of n elements (for the GEMM's activations). */
void cu_f32_to_f16(cudaStream_t s, const float *x, __half *y, size_t n);
void cu_f32_to_bf16(cudaStream_t s, const float *x, void *y, size_t n);

/* ---- kernels_ops.cu ---- */

void cu_rmsnorm(cudaStream_t s, float *y, const float *x, const float *w, int n, int dim,
                float eps);
void cu_rope(cudaStream_t s, float *x, int n, int n_head, int head_dim, int n_rot,
             const int32_t *pos, float theta_scale, const float *ff);
void cu_kv_store(cudaStream_t s, uint16_t *cache, const float *src, size_t n);
void cu_swiglu(cudaStream_t s, float *y, const float *gate, const float *up, size_t n);
void cu_add(cudaStream_t s, float *y, const float *x, size_t n);
void cu_softmax(cudaStream_t s, float *x, int n_rows, int n_cols);

/* Floats of partials cu_attention may use for a call (0: none needed). */
size_t cu_attention_part_floats(int n_tok, int n_head, int head_dim, int n_kv_max,
                                int n_sm);
/* softcap > 0: scores become softcap * tanh(s / softcap); window > 0: each
 * query sees only its last `window` keys. */
void cu_attention(cudaStream_t s, float *out, const float *q, const uint16_t *k,
                  const uint16_t *v, const be_attn_t *a, float softcap, int window,
                  float *part, size_t part_floats, int n_sm);

/* the optional ops (be_ops_ext_t) */
void cu_rope_neox(cudaStream_t s, float *x, int n, int n_head, int head_dim, int n_rot,
                  const int32_t *pos, float theta_scale, float freq_scale, const float *ff,
                  float mscale);
void cu_add_rows(cudaStream_t s, float *y, const float *b, int64_t cols, int n);
void cu_scale(cudaStream_t s, float *x, size_t n, float f);
void cu_geglu(cudaStream_t s, float *y, const float *gate, const float *up, size_t n);

/* Queues one read of bytes (a multiple of 16) of buf (bench). */
void cu_read_probe(cudaStream_t s, const void *buf, size_t bytes, float *sink, int n_sm);

#endif
