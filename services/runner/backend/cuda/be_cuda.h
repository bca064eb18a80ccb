/* be_cuda.h: the CUDA backend's C entry points.
 *
 * The backend itself is a be_ops_t (backend.h) whose buffers live in device
 * memory of one GPU: weights are uploaded by weight_prepare, activations and
 * the KV cache come from alloc, and every op runs as kernels (and cuBLAS
 * GEMMs for prefill batches) on one stream. Host <-> device copies go
 * through upload/download only; download waits for the stream.
 *
 * This header is plain C and includes no CUDA header: the implementation
 * lives in the .cu files of backend/cuda/src/, built when CMake finds the
 * toolkit into the module lib/corral/backend-cuda.so (with module_entry.c,
 * which hands the runner be_cuda_probe and be_cuda_new through
 * backend/module.h) and into the static corral_cuda that the GPU tests and
 * the bench link. corral-runner never links it: the backend table
 * (services/runner/backends.c) loads the module at run time.
 *
 * Ops cannot return a status (backend.h), so a CUDA or cuBLAS error inside
 * an op is kept (the first one) and later ops become no-ops; the caller
 * reads it with be_cuda_check() (be_ops_t.check) after a batch (download,
 * which ends every forward pass, already waits for the stream). */
#ifndef BE_CUDA_H
#define BE_CUDA_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices usable by this process: 0 without a GPU, without
 * a driver, or when the driver is older than the runtime. Never fails. */
int be_cuda_device_count(void);

/* Like be_cuda_device_count, but says why there is none: CR_E_UNAVAILABLE
 * naming the CUDA error (no driver, a driver older than this runtime, no
 * device) and both versions. *n = the count (0 on error). */
cr_status_t be_cuda_probe(int *n, cr_err_t *err);

/* Creates the CUDA backend on device `device` (0-based). On success *out is
 * owned by the caller; free with be_destroy(&be). CR_E_UNAVAILABLE when
 * there is no such device (or no driver), CR_E_NOMEM when the stream,
 * cuBLAS handle or staging buffers cannot be allocated, CR_E_INTERNAL for
 * any other CUDA error; the message names the CUDA error. */
cr_status_t be_cuda_new(int device, be_backend_t **out, cr_err_t *err);

/* Waits for every queued op of a CUDA backend and returns the first error an
 * op met since the last call (then clears it): CR_E_NOMEM when a kernel ran
 * out of device memory, CR_E_INTERNAL for other CUDA/cuBLAS errors, with a
 * message naming the op. CR_OK for a backend that is not CUDA. */
cr_status_t be_cuda_check(be_backend_t *be, cr_err_t *err);

/* Device bytes this backend holds in weights (weight_prepare) and in
 * buffers (alloc, scratch), for reporting real allocations (also
 * be_ops_t.memory_used). */
uint64_t be_cuda_weight_bytes(const be_backend_t *be);
uint64_t be_cuda_buffer_bytes(const be_backend_t *be);

/* The CUDA backend's optional ops (backend.h: NEOX rope, bias rows,
 * scale, GELU gating, attention with soft-cap and sliding window) for the
 * non-llama architectures. Static; valid for any CUDA backend. Not yet the
 * backend's be_ops_t.ext_ops (so be_ext_ops() gives NULL for CUDA and the
 * loader keeps non-llama architectures off it), as before. */
const be_ops_ext_t *be_cuda_ops_ext(void);

/* Test hook: batches of more than this many tokens use the cuBLAS GEMM path
 * in matmul (default 8); smaller ones use the matrix-vector kernels. Lets
 * tests exercise both paths on small shapes. */
void be_cuda_set_gemm_min_tokens(be_backend_t *be, int n);

/* Bench: the device's memory-read bandwidth in GB/s (best of 4 timed
 * reads of a `bytes` buffer). CR_E_INVALID for a non-CUDA backend,
 * CR_E_INTERNAL on a CUDA error. */
cr_status_t be_cuda_read_bandwidth(be_backend_t *be, size_t bytes, double *gb_s,
                                   cr_err_t *err);

/* Test hooks: the device kernels' per-lane arithmetic run on the host (no
 * GPU needed), so CI checks the block decoding against the CPU backend.
 * host_matvec_row: *out = the matrix-vector kernel's result for one weight
 * row of `type` (cr_type_t) and f32 activations x [cols] (cols a multiple of
 * 256), activations quantized as the kernel does. host_dequant_row: out
 * [cols] = the row as get_rows and the GEMM tiles dequantize it. Both
 * false for a type without kernels. */
bool be_cuda_host_matvec_row(int type, const void *w_row, const float *x, int64_t cols,
                             float *out);
bool be_cuda_host_dequant_row(int type, const void *row, int64_t cols, float *out);

#ifdef __cplusplus
}
#endif

#endif
