/* backend_cuda.cu: the CUDA backend: be_ops_t over the memory of one GPU.
 *
 * Owns the device, stream and cuBLAS handle, the pinned staging buffers that
 * weight uploads go through, the scratch space ops need (activations in a
 * dot format, dequantized F16 weight tiles for prefill GEMMs, ids and
 * positions, attention partials; sized by reserve), a table of the buffers
 * handed out by alloc (for the byte counts the runner reports), and the
 * first CUDA/cuBLAS error an op met (ops cannot return one; be_cuda_check
 * reads it). Every op queues kernels on the one stream; only download and
 * be_cuda_check wait for it.
 *
 * matmul picks the matrix-vector kernels for small batches (decode) and
 * cuBLAS GEMMs on tensor cores (F16 inputs, F32 accumulation) for larger
 * ones, dequantizing quantized weights to F16 tiles of rows first.
 *
 * Kernels live in kernels_matmul.cu and kernels_ops.cu. No CUDA header
 * leaves this directory: be_cuda.h is the C face. */
#include "services/runner/backend/cuda/src/cuda_int.cuh"

#include "services/runner/backend/cuda/be_cuda.h"

#include <math.h>

#define STAGE_BYTES ((size_t)16 << 20)     /* per pinned staging buffer */
#define WTILE_BYTES ((size_t)64 << 20)     /* dequantized weight tile */
#define WTILE_MIN_ROWS 128
#define GEMM_MIN_TOKENS 8                  /* n > this: cuBLAS */

/* ---- errors ------------------------------------------------------------ */

static void record(be_cuda_t *g, cr_status_t st, const char *fmt, ...) CR_PRINTF(3, 4);

static void record(be_cuda_t *g, cr_status_t st, const char *fmt, ...)
{
    if (g->st)
        return; /* keep the first */
    g->st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->msg, sizeof g->msg, fmt, ap);
    va_end(ap);
}

bool cu_fail(be_cuda_t *g, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return false;
    cudaGetLastError(); /* clear a non-sticky error */
    record(g, e == cudaErrorMemoryAllocation ? CR_E_NOMEM : CR_E_INTERNAL,
           "cuda %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return true;
}

bool cu_blas_fail(be_cuda_t *g, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return false;
    record(g, s == CUBLAS_STATUS_ALLOC_FAILED ? CR_E_NOMEM : CR_E_INTERNAL,
           "cublas %s: %s", what, cublasGetStatusString(s));
    return true;
}

/* Start of every op: false (skip the op) once an error is pending. */
static bool enter(be_cuda_t *g)
{
    if (g->st)
        return false;
    return !cu_fail(g, cudaSetDevice(g->device), "set device");
}

/* End of every op: a failed launch becomes the pending error. */
static void leave(be_cuda_t *g, const char *what)
{
    cu_fail(g, cudaGetLastError(), what);
}

/* ---- buffer table (for byte counts) ----------------------------------- */

typedef struct alloc_rec {
    void *p;
    size_t bytes;
} alloc_rec_t;

typedef struct be_cuda_full {
    be_cuda_t g;
    alloc_rec_t *recs;
    size_t n_recs, cap_recs;
} be_cuda_full_t;

static be_cuda_full_t *full_of(be_backend_t *be)
{
    return (be_cuda_full_t *)be;
}

static bool recs_add(be_cuda_full_t *f, void *p, size_t bytes)
{
    if (f->n_recs == f->cap_recs) {
        size_t cap = f->cap_recs ? 2 * f->cap_recs : 32;
        alloc_rec_t *r = (alloc_rec_t *)realloc(f->recs, cap * sizeof *r);
        if (!r)
            return false;
        f->recs = r;
        f->cap_recs = cap;
    }
    f->recs[f->n_recs++] = (alloc_rec_t){p, bytes};
    return true;
}

static size_t recs_remove(be_cuda_full_t *f, void *p)
{
    for (size_t i = 0; i < f->n_recs; i++) {
        if (f->recs[i].p == p) {
            size_t b = f->recs[i].bytes;
            f->recs[i] = f->recs[--f->n_recs];
            return b;
        }
    }
    return 0;
}

/* ---- devices and memory ----------------------------------------------- */

extern "C" int be_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" cr_status_t be_cuda_probe(int *n, cr_err_t *err)
{
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e == cudaSuccess && *n > 0)
        return CR_OK;
    cudaGetLastError();
    *n = 0;
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
    cudaRuntimeGetVersion(&rt);
    if (e == cudaSuccess)
        e = cudaErrorNoDevice;
    return cr_err_set(err, CR_E_UNAVAILABLE,
                      "%s (%s; driver supports CUDA %d.%d, module built for %d.%d)",
                      cudaGetErrorString(e), cudaGetErrorName(e), drv / 1000,
                      drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

static int cuda_device_count(const be_backend_t *be)
{
    CR_UNUSED(be);
    return be_cuda_device_count();
}

static cr_status_t cuda_device_memory(const be_backend_t *be, int device,
                                      uint64_t *free_bytes, uint64_t *total_bytes,
                                      cr_err_t *err)
{
    const be_cuda_t *g = (const be_cuda_t *)be;
    int n = be_cuda_device_count();
    if (device < 0 || device >= n)
        return cr_err_set(err, CR_E_INVALID, "cuda backend has no device %d (%d present)",
                          device, n);
    size_t fr = 0, tot = 0;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&fr, &tot);
    cudaSetDevice(g->device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cr_err_set(err, CR_E_INTERNAL, "cuda device %d memory: %s", device,
                          cudaGetErrorString(e));
    }
    *free_bytes = fr;
    *total_bytes = tot;
    return CR_OK;
}

static void *cuda_alloc(be_backend_t *be, size_t bytes)
{
    be_cuda_full_t *f = full_of(be);
    be_cuda_t *g = &f->g;
    if (cudaSetDevice(g->device) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError(); /* the caller reports NULL as out of memory */
        return NULL;
    }
    if (cudaMemsetAsync(p, 0, n, g->stream) != cudaSuccess || !recs_add(f, p, n)) {
        cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    g->buffer_bytes += n;
    return p;
}

static void cuda_free(be_backend_t *be, void *buf)
{
    be_cuda_full_t *f = full_of(be);
    if (!buf)
        return;
    cudaSetDevice(f->g.device);
    f->g.buffer_bytes -= recs_remove(f, buf);
    if (cudaFree(buf) != cudaSuccess)
        cudaGetLastError();
}

static void cuda_upload(be_backend_t *be, void *dst, const void *host_src, size_t bytes)
{
    be_cuda_t *g = cu_of(be);
    if (!bytes || !enter(g))
        return;
    /* From pageable memory the call returns once the bytes are staged, so
     * the caller may reuse host_src at once. */
    cu_fail(g, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault, g->stream), "upload");
}

static void cuda_download(be_backend_t *be, void *host_dst, const void *src, size_t bytes)
{
    be_cuda_t *g = cu_of(be);
    if (!bytes)
        return;
    if (!enter(g)) {
        memset(host_dst, 0, bytes);
        return;
    }
    if (cu_fail(g, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, g->stream),
                "download") ||
        cu_fail(g, cudaStreamSynchronize(g->stream), "download (stream)"))
        memset(host_dst, 0, bytes);
}

/* ---- weights ------------------------------------------------------------ */

static cr_status_t cuda_weight_prepare(be_backend_t *be, be_weight_t *w, cr_err_t *err)
{
    be_cuda_t *g = cu_of(be);
    const char *name = w->name ? w->name : "?";
    const cr_type_info_t *ti = cr_type_info(w->type);
    if (!ti || !cu_type_supported(w->type))
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "tensor '%s': type %s is not supported by the cuda backend", name,
                          ti ? ti->name : "unknown");
    uint64_t rb = 0;
    if (w->n_cols <= 0 || w->n_rows <= 0 ||
        !cr_type_row_bytes(w->type, (uint64_t)w->n_cols, &rb) || rb != w->row_bytes)
        return cr_err_set(err, CR_E_INVALID,
                          "tensor '%s': %" PRId64 " columns of %s do not make whole rows",
                          name, w->n_cols, ti->name);
    if ((uint64_t)w->n_rows > SIZE_MAX / w->row_bytes)
        return cr_err_set(err, CR_E_TOO_LARGE, "tensor '%s' is too large", name);
    size_t bytes = (size_t)w->n_rows * w->row_bytes;
    if (g->st)
        return cr_err_set(err, g->st, "tensor '%s': earlier cuda error: %s", name, g->msg);
    cudaError_t e = cudaSetDevice(g->device);
    void *dev = NULL;
    if (e == cudaSuccess)
        e = cudaMalloc(&dev, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        cudaGetLastError();
        return cr_err_set(err, e == cudaErrorMemoryAllocation ? CR_E_NOMEM : CR_E_INTERNAL,
                          "tensor '%s': cannot allocate %zu bytes on cuda device %d "
                          "(%zu free): %s", name, bytes, g->device, fr,
                          cudaGetErrorString(e));
    }
    /* Through the two pinned buffers in turn: while one is copied to the
     * device, the next chunk is read from the mapping into the other. */
    const uint8_t *src = (const uint8_t *)w->data;
    size_t i = 0;
    for (size_t off = 0; off < bytes && e == cudaSuccess; off += g->stage_bytes, i++) {
        size_t len = CR_MIN(g->stage_bytes, bytes - off);
        int b = (int)(i % 2);
        e = cudaEventSynchronize(g->stage_done[b]);
        if (e != cudaSuccess)
            break;
        memcpy(g->stage[b], src + off, len);
        e = cudaMemcpyAsync((uint8_t *)dev + off, g->stage[b], len, cudaMemcpyHostToDevice,
                            g->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(g->stage_done[b], g->stream);
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(dev);
        return cr_err_set(err, e == cudaErrorMemoryAllocation ? CR_E_NOMEM : CR_E_INTERNAL,
                          "tensor '%s': upload to cuda device %d failed: %s", name, g->device,
                          cudaGetErrorString(e));
    }
    w->dev = dev;
    g->weight_bytes += bytes;
    return CR_OK;
}

static void cuda_weight_release(be_backend_t *be, be_weight_t *w)
{
    be_cuda_t *g = cu_of(be);
    if (!w->dev)
        return;
    cudaSetDevice(g->device);
    if (cudaFree(w->dev) != cudaSuccess)
        cudaGetLastError();
    g->weight_bytes -= (uint64_t)w->n_rows * w->row_bytes;
    w->dev = NULL;
}

/* Grows a device scratch buffer to at least `bytes` (contents lost). */
static cr_status_t grow(be_cuda_t *g, void **p, size_t *have, size_t bytes, const char *what,
                        cr_err_t *err)
{
    if (bytes <= *have)
        return CR_OK;
    void *n = NULL;
    cudaError_t e = cudaMalloc(&n, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cr_err_set(err, e == cudaErrorMemoryAllocation ? CR_E_NOMEM : CR_E_INTERNAL,
                          "cuda backend: cannot allocate %zu bytes of %s on device %d: %s",
                          bytes, what, g->device, cudaGetErrorString(e));
    }
    if (*p) {
        cudaFree(*p);
        g->buffer_bytes -= *have;
    }
    *p = n;
    *have = bytes;
    g->buffer_bytes += bytes;
    return CR_OK;
}

static cr_status_t cuda_reserve(be_backend_t *be, int max_tok, int64_t max_cols, int max_ctx,
                                int n_head, cr_err_t *err)
{
    be_cuda_t *g = cu_of(be);
    if (max_tok < 1 || max_cols < 1 || max_ctx < 1 || n_head < 1)
        return cr_err_set(err, CR_E_INVALID, "reserve: sizes must be positive");
    if ((uint64_t)max_cols > SIZE_MAX / 4 / (uint64_t)max_tok)
        return cr_err_set(err, CR_E_TOO_LARGE, "reserve: batch too large");
    if (cudaSetDevice(g->device) != cudaSuccess) {
        cudaGetLastError();
        return cr_err_set(err, CR_E_INTERNAL, "cuda backend: cannot select device %d",
                          g->device);
    }
    /* Activations: Q8_0/Q8_K take at most 1.125 bytes per element, the
     * GEMM's F16/BF16 copies 2. */
    size_t act = (size_t)max_tok * (size_t)max_cols * 2 + 256;
    size_t tile = CR_MAX(WTILE_BYTES, (size_t)WTILE_MIN_ROWS * (size_t)max_cols * 2);
    size_t ids = (size_t)max_tok * sizeof(int32_t);
    size_t part = cu_attention_part_floats(max_tok, n_head, 256, max_ctx, g->n_sm) *
                  sizeof(float);
    size_t have_ids = g->ids_n * sizeof(int32_t);
    size_t have_part = g->att_part_floats * sizeof(float);
    cr_status_t st;
    if ((st = grow(g, &g->act, &g->act_bytes, act, "activation scratch", err)) ||
        (st = grow(g, &g->wtile, &g->wtile_bytes, tile, "weight tiles", err)) ||
        (st = grow(g, (void **)&g->ids, &have_ids, ids, "ids", err)) ||
        (st = grow(g, (void **)&g->att_part, &have_part, part, "attention partials", err))) {
        g->ids_n = have_ids / sizeof(int32_t);
        g->att_part_floats = have_part / sizeof(float);
        return st;
    }
    g->ids_n = have_ids / sizeof(int32_t);
    g->att_part_floats = have_part / sizeof(float);
    g->max_tok = CR_MAX(g->max_tok, max_tok);
    g->max_cols = CR_MAX(g->max_cols, max_cols);
    g->max_ctx = CR_MAX(g->max_ctx, max_ctx);
    g->n_head = CR_MAX(g->n_head, n_head);
    return CR_OK;
}

/* ---- ops ---------------------------------------------------------------- */

/* Copies n host int32s to the ids scratch; false (error recorded) if they
 * do not fit. */
static bool put_ids(be_cuda_t *g, const int32_t *host, int n, const char *what)
{
    if (n < 0 || (size_t)n > g->ids_n) {
        record(g, CR_E_INTERNAL, "%s: %d ids exceed the reserved %zu", what, n, g->ids_n);
        return false;
    }
    return !cu_fail(g, cudaMemcpyAsync(g->ids, host, (size_t)n * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, g->stream), what);
}

static bool has_dev(be_cuda_t *g, const be_weight_t *w, const char *what)
{
    if (w->dev)
        return true;
    record(g, CR_E_INTERNAL, "%s: tensor '%s' was not prepared for cuda", what,
           w->name ? w->name : "?");
    return false;
}

static void cuda_get_rows(be_backend_t *be, const be_weight_t *w, const int32_t *ids, int n,
                          float *out)
{
    be_cuda_t *g = cu_of(be);
    if (n <= 0 || !enter(g) || !has_dev(g, w, "get_rows") || !put_ids(g, ids, n, "get_rows"))
        return;
    cu_get_rows(g->stream, w->type, w->dev, w->n_cols, w->row_bytes, g->ids, n, out);
    leave(g, "get_rows");
}

/* The prefill path: y = x W^T through cuBLAS on F16 (or BF16, or F32)
 * inputs with F32 accumulation. */
static void matmul_gemm(be_cuda_t *g, const be_weight_t *w, const float *x, int n, float *y)
{
    const float alpha = 1.0f, beta = 0.0f;
    int rows = (int)w->n_rows, cols = (int)w->n_cols;
    if (w->type == CR_TYPE_F32) {
        cu_blas_fail(g, cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha,
                                    (const float *)w->dev, cols, x, cols, &beta, y, rows),
                     "sgemm");
        return;
    }
    size_t xn = (size_t)n * (size_t)cols;
    if (xn * 2 > g->act_bytes) {
        record(g, CR_E_INTERNAL, "matmul '%s': %d tokens exceed the reserved scratch",
               w->name ? w->name : "?", n);
        return;
    }
    if (w->type == CR_TYPE_BF16) {
        cu_f32_to_bf16(g->stream, x, g->act, xn);
        cu_blas_fail(g, cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha,
                                     w->dev, CUDA_R_16BF, cols, g->act, CUDA_R_16BF, cols,
                                     &beta, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
                     "gemm (bf16)");
        return;
    }
    cu_f32_to_f16(g->stream, x, (__half *)g->act, xn);
    if (w->type == CR_TYPE_F16) {
        cu_blas_fail(g, cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha,
                                     w->dev, CUDA_R_16F, cols, g->act, CUDA_R_16F, cols,
                                     &beta, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
                     "gemm (f16)");
        return;
    }
    /* Quantized: rows dequantized to F16 a tile at a time. */
    int64_t tile_rows = (int64_t)(g->wtile_bytes / ((size_t)cols * 2));
    if (tile_rows < 1) {
        record(g, CR_E_INTERNAL, "matmul '%s': %d columns exceed the reserved tile",
               w->name ? w->name : "?", cols);
        return;
    }
    if (tile_rows > 64)
        tile_rows -= tile_rows % 64;
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        int nr = (int)CR_MIN(tile_rows, (int64_t)rows - r0);
        cu_dequant_f16(g->stream, w->type, w->dev, r0, nr, cols, w->row_bytes,
                       (__half *)g->wtile);
        if (cu_blas_fail(g, cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, cols,
                                         &alpha, g->wtile, CUDA_R_16F, cols, g->act,
                                         CUDA_R_16F, cols, &beta, y + r0, CUDA_R_32F, rows,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "gemm (dequantized)"))
            return;
    }
}

static void cuda_matmul(be_backend_t *be, const be_weight_t *w, const float *x, int n,
                        float *y)
{
    be_cuda_t *g = cu_of(be);
    if (n <= 0 || !enter(g) || !has_dev(g, w, "matmul"))
        return;
    if (n > g->gemm_min_tokens) {
        matmul_gemm(g, w, x, n, y);
    } else {
        if (cu_act_bytes(w->type, w->n_cols, n) > g->act_bytes) {
            record(g, CR_E_INTERNAL, "matmul '%s': %d tokens exceed the reserved scratch",
                   w->name ? w->name : "?", n);
            return;
        }
        cu_matvec(g->stream, w->type, w->dev, w->n_rows, w->n_cols, w->row_bytes, x, n, y,
                  g->act);
    }
    leave(g, "matmul");
}

static void cuda_rmsnorm(be_backend_t *be, float *y, const float *x, const be_weight_t *w,
                         int n, int dim, float eps)
{
    be_cuda_t *g = cu_of(be);
    if (!enter(g) || !has_dev(g, w, "rmsnorm"))
        return;
    cu_rmsnorm(g->stream, y, x, (const float *)w->dev, n, dim, eps);
    leave(g, "rmsnorm");
}

static void cuda_rope(be_backend_t *be, float *x, int n, int n_head, int head_dim, int n_rot,
                      const int32_t *pos, float freq_base, const be_weight_t *freq_factors)
{
    be_cuda_t *g = cu_of(be);
    if (n <= 0 || !enter(g) || (freq_factors && !has_dev(g, freq_factors, "rope")) ||
        !put_ids(g, pos, n, "rope"))
        return;
    /* the same float expression the CPU backend starts from */
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    cu_rope(g->stream, x, n, n_head, head_dim, n_rot, g->ids, theta_scale,
            freq_factors ? (const float *)freq_factors->dev : NULL);
    leave(g, "rope");
}

/* The caches are F16 only (kv_type_supported is NULL): a quantized one is
 * refused here and in attention, never stored or read as F16. */
static bool kv_type_ok(be_cuda_t *g, cr_type_t t, const char *op)
{
    if (t == CR_TYPE_F16)
        return true;
    const cr_type_info_t *ti = cr_type_info((uint32_t)t);
    record(g, CR_E_UNSUPPORTED, "%s: KV cache type %s is not supported (F16 only)", op,
           ti ? ti->name : "?");
    return false;
}

static void cuda_kv_store(be_backend_t *be, void *cache, cr_type_t t, const float *src,
                          int n, int at, int row)
{
    be_cuda_t *g = cu_of(be);
    if (n <= 0 || !enter(g) || !kv_type_ok(g, t, "kv_store"))
        return;
    cu_kv_store(g->stream, (uint16_t *)cache + (size_t)at * (size_t)row, src,
                (size_t)n * (size_t)row);
    leave(g, "kv_store");
}

static bool attn_shape_ok(be_cuda_t *g, const be_attn_t *a)
{
    if (!kv_type_ok(g, a->kv_type, "attention"))
        return false;
    if (a->head_dim >= 1 && a->head_dim <= 256 && a->n_head_kv >= 1 &&
        a->n_head % a->n_head_kv == 0 && !a->sinks)
        return true;
    if (a->sinks) { /* gpt-oss: the kernel has no sink term yet */
        record(g, CR_E_UNSUPPORTED, "attention: sinks ('%s') are not supported",
               a->sinks->name ? a->sinks->name : "?");
        return false;
    }
    record(g, CR_E_UNSUPPORTED, "attention: head_dim %d (max 256) or heads %d/%d "
           "not supported", a->head_dim, a->n_head, a->n_head_kv);
    return false;
}

static void cuda_attention(be_backend_t *be, float *out, const float *q, const void *k,
                           const void *v, const be_attn_t *a)
{
    be_cuda_t *g = cu_of(be);
    if (a->n_tok <= 0 || !enter(g))
        return;
    if (!attn_shape_ok(g, a))
        return;
    cu_attention(g->stream, out, q, (const uint16_t *)k, (const uint16_t *)v, a, 0.0f, 0,
                 g->att_part, g->att_part_floats, g->n_sm);
    leave(g, "attention");
}

static void cuda_swiglu(be_backend_t *be, float *y, const float *gate, const float *up,
                        size_t n)
{
    be_cuda_t *g = cu_of(be);
    if (!enter(g))
        return;
    cu_swiglu(g->stream, y, gate, up, n);
    leave(g, "swiglu");
}

static void cuda_add(be_backend_t *be, float *y, const float *x, size_t n)
{
    be_cuda_t *g = cu_of(be);
    if (!enter(g))
        return;
    cu_add(g->stream, y, x, n);
    leave(g, "add");
}

static void cuda_softmax(be_backend_t *be, float *x, int n_rows, int n_cols)
{
    be_cuda_t *g = cu_of(be);
    if (!enter(g))
        return;
    cu_softmax(g->stream, x, n_rows, n_cols);
    leave(g, "softmax");
}

/* ---- optional ops (be_ops_ext_t) ---------------------------------------- */

static void ext_rope_neox(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                          int n_rot, const int32_t *pos, float freq_base, float freq_scale,
                          const be_weight_t *freq_factors, float mscale)
{
    be_cuda_t *g = cu_of(be);
    if (n <= 0 || !enter(g) || (freq_factors && !has_dev(g, freq_factors, "rope_neox")) ||
        !put_ids(g, pos, n, "rope_neox"))
        return;
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    cu_rope_neox(g->stream, x, n, n_head, head_dim, n_rot, g->ids, theta_scale, freq_scale,
                 freq_factors ? (const float *)freq_factors->dev : NULL, mscale);
    leave(g, "rope_neox");
}

static void ext_add_rows(be_backend_t *be, float *y, const be_weight_t *b, int n)
{
    be_cuda_t *g = cu_of(be);
    if (n <= 0 || !enter(g) || !has_dev(g, b, "add_rows"))
        return;
    cu_add_rows(g->stream, y, (const float *)b->dev, b->n_cols, n);
    leave(g, "add_rows");
}

static void ext_scale(be_backend_t *be, float *x, size_t n, float s)
{
    be_cuda_t *g = cu_of(be);
    if (!enter(g))
        return;
    cu_scale(g->stream, x, n, s);
    leave(g, "scale");
}

static void ext_geglu(be_backend_t *be, float *y, const float *gate, const float *up,
                      size_t n)
{
    be_cuda_t *g = cu_of(be);
    if (!enter(g))
        return;
    cu_geglu(g->stream, y, gate, up, n);
    leave(g, "geglu");
}

/* scratch is not needed: the kernel keeps its softmax state in registers */
static void ext_attention(be_backend_t *be, float *out, const float *q, const void *k,
                          const void *v, const be_attn_t *a, float softcap, int window,
                          float *scratch)
{
    CR_UNUSED(scratch);
    be_cuda_t *g = cu_of(be);
    if (a->n_tok <= 0 || !enter(g) || !attn_shape_ok(g, a))
        return;
    cu_attention(g->stream, out, q, (const uint16_t *)k, (const uint16_t *)v, a, softcap,
                 window, g->att_part, g->att_part_floats, g->n_sm);
    leave(g, "attention_ext");
}

static be_ops_ext_t make_ext_ops(void)
{
    be_ops_ext_t o;
    memset(&o, 0, sizeof o);
    o.rope_neox = ext_rope_neox;
    o.add_rows = ext_add_rows;
    o.scale = ext_scale;
    o.geglu = ext_geglu;
    o.attention_ext = ext_attention;
    return o;
}

static const be_ops_ext_t cuda_ext_ops = make_ext_ops();

extern "C" const be_ops_ext_t *be_cuda_ops_ext(void)
{
    return &cuda_ext_ops;
}

/* ---- lifecycle ---------------------------------------------------------- */

static void cuda_destroy(be_backend_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    be_cuda_full_t *f = full_of(*self_p);
    be_cuda_t *g = &f->g;
    cudaSetDevice(g->device);
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    for (size_t i = 0; i < f->n_recs; i++)
        cudaFree(f->recs[i].p); /* buffers their owners did not free */
    free(f->recs);
    cudaFree(g->act);
    cudaFree(g->wtile);
    cudaFree(g->ids);
    cudaFree(g->att_part);
    for (int i = 0; i < 2; i++) {
        if (g->stage[i])
            cudaFreeHost(g->stage[i]);
        if (g->stage_done[i])
            cudaEventDestroy(g->stage_done[i]);
    }
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    cudaGetLastError();
    free(f);
    *self_p = NULL;
}

static void cuda_memory_used(const be_backend_t *be, uint64_t *weight_bytes,
                             uint64_t *buffer_bytes);
static cr_status_t cuda_check(be_backend_t *be, cr_err_t *err);

/* Filled by name so fields added to be_ops_t stay NULL, not misassigned.
 * ext_ops stays NULL: the optional ops (be_cuda_ops_ext) are not yet
 * offered to the model loader, which refuses non-llama architectures on
 * CUDA as before. */
static be_ops_t make_ops(void)
{
    be_ops_t o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.destroy = cuda_destroy;
    o.device_count = cuda_device_count;
    o.device_memory = cuda_device_memory;
    o.alloc = cuda_alloc;
    o.free = cuda_free;
    o.memory_used = cuda_memory_used;
    o.check = cuda_check;
    o.upload = cuda_upload;
    o.download = cuda_download;
    o.weight_prepare = cuda_weight_prepare;
    o.weight_release = cuda_weight_release;
    o.reserve = cuda_reserve;
    o.get_rows = cuda_get_rows;
    o.matmul = cuda_matmul;
    o.rmsnorm = cuda_rmsnorm;
    o.rope = cuda_rope;
    o.kv_store = cuda_kv_store;
    o.attention = cuda_attention;
    o.swiglu = cuda_swiglu;
    o.add = cuda_add;
    o.softmax = cuda_softmax;
    return o;
}

static const be_ops_t cuda_ops = make_ops();

static bool is_cuda(const be_backend_t *be)
{
    return be && be->ops == &cuda_ops;
}

extern "C" cr_status_t be_cuda_new(int device, be_backend_t **out, cr_err_t *err)
{
    *out = NULL;
    int n = be_cuda_device_count();
    if (device < 0 || device >= n)
        return cr_err_set(err, CR_E_UNAVAILABLE, "no cuda device %d (%d present)", device, n);
    be_cuda_full_t *f = (be_cuda_full_t *)calloc(1, sizeof *f);
    if (!f)
        return cr_err_set(err, CR_E_NOMEM, "cuda backend: out of memory");
    be_cuda_t *g = &f->g;
    g->base.ops = &cuda_ops;
    g->device = device;
    g->gemm_min_tokens = GEMM_MIN_TOKENS;
    g->stage_bytes = STAGE_BYTES;
    const char *what = "select device";
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess && (what = "query device",
                             e = cudaDeviceGetAttribute(&g->n_sm, cudaDevAttrMultiProcessorCount,
                                                        device)) == cudaSuccess &&
        (what = "create stream", e = cudaStreamCreate(&g->stream)) == cudaSuccess) {
        for (int i = 0; i < 2 && e == cudaSuccess; i++) {
            what = "allocate pinned staging";
            e = cudaHostAlloc(&g->stage[i], g->stage_bytes, cudaHostAllocDefault);
            if (e == cudaSuccess) {
                what = "create event";
                e = cudaEventCreateWithFlags(&g->stage_done[i], cudaEventDisableTiming);
            }
        }
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        cr_status_t st = cr_err_set(err, e == cudaErrorMemoryAllocation ? CR_E_NOMEM
                                                                       : CR_E_INTERNAL,
                                    "cuda device %d: cannot %s: %s", device, what,
                                    cudaGetErrorString(e));
        be_backend_t *b = &g->base;
        cuda_destroy(&b);
        return st;
    }
    cublasStatus_t bs = cublasCreate(&g->blas);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetStream(g->blas, g->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cr_status_t st = cr_err_set(err, bs == CUBLAS_STATUS_ALLOC_FAILED ? CR_E_NOMEM
                                                                        : CR_E_INTERNAL,
                                    "cuda device %d: cublas: %s", device,
                                    cublasGetStatusString(bs));
        be_backend_t *b = &g->base;
        cuda_destroy(&b);
        return st;
    }
    if (g->n_sm < 1)
        g->n_sm = 1;
    *out = &g->base;
    return CR_OK;
}

extern "C" cr_status_t be_cuda_check(be_backend_t *be, cr_err_t *err)
{
    if (!is_cuda(be))
        return CR_OK;
    be_cuda_t *g = cu_of(be);
    if (!g->st) {
        cudaSetDevice(g->device);
        cu_fail(g, cudaStreamSynchronize(g->stream), "stream");
    }
    cr_status_t st = g->st;
    if (st)
        cr_err_set(err, st, "%s", g->msg);
    g->st = CR_OK;
    g->msg[0] = 0;
    return st;
}

extern "C" uint64_t be_cuda_weight_bytes(const be_backend_t *be)
{
    return is_cuda(be) ? ((const be_cuda_t *)be)->weight_bytes : 0;
}

extern "C" uint64_t be_cuda_buffer_bytes(const be_backend_t *be)
{
    return is_cuda(be) ? ((const be_cuda_t *)be)->buffer_bytes : 0;
}

static void cuda_memory_used(const be_backend_t *be, uint64_t *weight_bytes,
                             uint64_t *buffer_bytes)
{
    *weight_bytes = be_cuda_weight_bytes(be);
    *buffer_bytes = be_cuda_buffer_bytes(be);
}

static cr_status_t cuda_check(be_backend_t *be, cr_err_t *err)
{
    return be_cuda_check(be, err);
}

extern "C" void be_cuda_set_gemm_min_tokens(be_backend_t *be, int n)
{
    if (is_cuda(be))
        cu_of(be)->gemm_min_tokens = n < 0 ? 0 : n;
}

extern "C" cr_status_t be_cuda_read_bandwidth(be_backend_t *be, size_t bytes, double *gb_s,
                                              cr_err_t *err)
{
    *gb_s = 0;
    if (!is_cuda(be))
        return cr_err_set(err, CR_E_INVALID, "not a cuda backend");
    be_cuda_t *g = cu_of(be);
    bytes -= bytes % 16;
    void *buf = NULL;
    float *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t e = cudaSetDevice(g->device);
    if (e == cudaSuccess)
        e = cudaMalloc(&buf, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&sink, sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemsetAsync(buf, 0, bytes, g->stream);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e0);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e1);
    float best_ms = 0;
    for (int r = 0; r < 5 && e == cudaSuccess; r++) {
        cudaEventRecord(e0, g->stream);
        cu_read_probe(g->stream, buf, bytes, sink, g->n_sm);
        cudaEventRecord(e1, g->stream);
        e = cudaEventSynchronize(e1);
        float ms = 0;
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, e0, e1);
        if (e == cudaSuccess && r > 0 && (best_ms == 0 || ms < best_ms))
            best_ms = ms; /* round 0 warms up */
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(buf);
    cudaFree(sink);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cr_err_set(err, CR_E_INTERNAL, "bandwidth probe: %s", cudaGetErrorString(e));
    }
    *gb_s = best_ms > 0 ? (double)bytes / (best_ms * 1e-3) / 1e9 : 0;
    return CR_OK;
}
